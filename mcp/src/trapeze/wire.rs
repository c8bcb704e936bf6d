//! The Trapeze endpoint in board memory and the Trapeze packet header (seed 003, §2.1,
//! §2.2 and the implementation note of §2.2).
//!
//! # The endpoint
//!
//! The host allocates the endpoint from the SRAM workspace and publishes its address in
//! the GM area ([`crate::hcb::gm_area::TPZ_ENDPOINT`]). Every field is a big-endian word.
//!
//! ```text
//! +0   MAGIC 'TPZ0'
//! +4   SEND_TAIL      entries released by the host (free-running)
//! +8   SEND_HEAD      entries the MCP has taken
//! +12  SEND_DONE      entries the MCP has finished with, in order
//! +16  RECV_FILLED    receive entries the MCP has filled
//! +20  RECV_RELEASED  receive entries the host has released
//! +64  SEND_RING entries of ENTRY_LEN bytes, then RECV_RING entries, then the incoming
//!      payload table (IPT): IPT_SLOTS slots of KEY, HOST_HI, HOST_LO, CAPACITY
//! ```
//!
//! A send entry holds FLAGS, ROUTE, HID, CTL_WORDS, PAYLOAD_LEN, HOST_HI, HOST_LO,
//! TOKEN_SLOT, TOKEN_KEY and STATUS (written by the MCP), then at +64 the inline control
//! message of up to [`CTRLMSG_WORDS`] words. A receive entry holds HID, CTL_WORDS,
//! PAYLOAD_LEN, PAYLOAD_STATUS, the attached payload buffer (ATT_HI, ATT_LO, ATT_CAP,
//! written by the host; capacity 0 means none), TOKEN_SLOT, then the control message.
//!
//! # The packet
//!
//! ```text
//!  frame header (type, subtype 3, 0) | hid (2) | ctl words (1) | flags (1) |
//!  payload len (4) | token slot (2) | pad (2) | token key (4) | control words | payload
//! ```

use thiserror::Error;

/// Words of a control message (seed 003, §2.2: "space for 30 words").
pub const CTRLMSG_WORDS: usize = 30;
/// Largest payload in bytes (`TPZ_PAYLOAD_WORDS` words; seed 003 §2.3 makes it a
/// build-time parameter bounded by NIC buffer memory).
pub const PAYLOAD_MAX: usize = 8192;
/// Entries in the send ring.
pub const SEND_RING: u32 = 16;
/// Entries in the receive ring.
pub const RECV_RING: u32 = 16;
/// Slots in the incoming payload table.
pub const IPT_SLOTS: u32 = 64;
/// Bytes of a ring entry.
pub const ENTRY_LEN: u32 = 192;
/// Offset of the control message in a ring entry.
pub const MSG: u32 = 64;
/// Bytes of an IPT slot.
pub const IPT_LEN: u32 = 16;
/// The endpoint's first word: 'TPZ0'.
pub const MAGIC: u32 = 0x5450_5A30;

/// Word offsets of the endpoint header.
pub mod ep {
    /// Magic.
    pub const MAGIC: u32 = 0;
    /// Send entries released by the host.
    pub const SEND_TAIL: u32 = 4;
    /// Send entries taken by the MCP.
    pub const SEND_HEAD: u32 = 8;
    /// Send entries finished by the MCP.
    pub const SEND_DONE: u32 = 12;
    /// Receive entries filled by the MCP.
    pub const RECV_FILLED: u32 = 16;
    /// Receive entries released by the host.
    pub const RECV_RELEASED: u32 = 20;
    /// The first send entry.
    pub const RINGS: u32 = 64;
}

/// Word offsets in a send entry.
pub mod send_entry {
    /// [`super::flags`].
    pub const FLAGS: u32 = 0;
    /// Route id of the destination.
    pub const ROUTE: u32 = 4;
    /// Header id.
    pub const HID: u32 = 8;
    /// Control-message words.
    pub const CTL_WORDS: u32 = 12;
    /// Payload bytes.
    pub const PAYLOAD_LEN: u32 = 16;
    /// Payload bus address, high word.
    pub const HOST_HI: u32 = 20;
    /// Low word.
    pub const HOST_LO: u32 = 24;
    /// IPT slot of the token the message is tagged with.
    pub const TOKEN_SLOT: u32 = 28;
    /// Its key.
    pub const TOKEN_KEY: u32 = 32;
    /// Written by the MCP: [`super::SENT_OK`] or [`super::SENT_ERROR`].
    pub const STATUS: u32 = 36;
}

/// Send-entry and packet flags.
pub mod flags {
    /// The host aborted the message (`tpz_senderr`): not sent.
    pub const ABORTED: u32 = 1;
    /// A payload is attached.
    pub const PAYLOAD: u32 = 2;
    /// The message is tagged with a payload token.
    pub const TOKEN: u32 = 4;
}

/// A send entry the MCP sent.
pub const SENT_OK: u32 = 1;
/// A send entry the MCP refused or could not send (or the host aborted).
pub const SENT_ERROR: u32 = 2;

/// Word offsets in a receive entry.
pub mod recv_entry {
    /// Header id.
    pub const HID: u32 = 0;
    /// Control-message words.
    pub const CTL_WORDS: u32 = 4;
    /// Payload bytes delivered (0 if none or dropped).
    pub const PAYLOAD_LEN: u32 = 8;
    /// [`super::PayloadStatus`] as a word.
    pub const PAYLOAD_STATUS: u32 = 12;
    /// Attached payload buffer, high word (host-written).
    pub const ATT_HI: u32 = 16;
    /// Low word.
    pub const ATT_LO: u32 = 20;
    /// Its capacity; 0: none attached.
    pub const ATT_CAP: u32 = 24;
    /// The token slot named by the message, if it had one.
    pub const TOKEN_SLOT: u32 = 28;
}

/// Word offsets in an IPT slot.
pub mod ipt {
    /// The slot's key; 0 means disabled (cancelled by the MCP on receipt, or free).
    pub const KEY: u32 = 0;
    /// Payload buffer, high word.
    pub const HOST_HI: u32 = 4;
    /// Low word.
    pub const HOST_LO: u32 = 8;
    /// Its capacity.
    pub const CAP: u32 = 12;
}

/// What became of a received message's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadStatus {
    /// The message had no payload.
    None,
    /// Placed in the buffer attached to the receive entry.
    Attached,
    /// Placed in the buffer named by the message's payload token.
    Token,
    /// Dropped: the token's key was stale or forged (seed 003, §8).
    BadToken,
    /// Dropped: larger than the buffer it was meant for (seed 003 lets the NIC overrun;
    /// we refuse).
    TooLong,
    /// Dropped: no buffer attached to the receive entry (seed 003, §2.3).
    NoBuffer,
}

impl PayloadStatus {
    /// The status as the MCP writes it.
    pub fn to_word(self) -> u32 {
        match self {
            PayloadStatus::None => 0,
            PayloadStatus::Attached => 1,
            PayloadStatus::Token => 2,
            PayloadStatus::BadToken => 3,
            PayloadStatus::TooLong => 4,
            PayloadStatus::NoBuffer => 5,
        }
    }

    /// The status from its word (an unknown word reads as a drop for want of a buffer).
    pub fn from_word(w: u32) -> PayloadStatus {
        match w {
            0 => PayloadStatus::None,
            1 => PayloadStatus::Attached,
            2 => PayloadStatus::Token,
            3 => PayloadStatus::BadToken,
            4 => PayloadStatus::TooLong,
            _ => PayloadStatus::NoBuffer,
        }
    }
}

/// Address of send entry `i` of the endpoint at `base`.
pub fn send_entry_at(base: u32, i: u32) -> u32 {
    base + ep::RINGS + (i % SEND_RING) * ENTRY_LEN
}

/// Address of receive entry `i`.
pub fn recv_entry_at(base: u32, i: u32) -> u32 {
    base + ep::RINGS + SEND_RING * ENTRY_LEN + (i % RECV_RING) * ENTRY_LEN
}

/// Address of IPT slot `s` (taken modulo the table size).
pub fn ipt_at(base: u32, s: u32) -> u32 {
    base + ep::RINGS + (SEND_RING + RECV_RING) * ENTRY_LEN + (s % IPT_SLOTS) * IPT_LEN
}

/// Bytes of the whole endpoint.
pub const ENDPOINT_LEN: u32 = ep::RINGS + (SEND_RING + RECV_RING) * ENTRY_LEN + IPT_SLOTS * IPT_LEN;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const HID: Field = 0..2;
    pub const CTL_WORDS: usize = 2;
    pub const FLAGS: usize = 3;
    pub const PAYLOAD_LEN: Field = 4..8;
    pub const TOKEN_SLOT: Field = 8..10;
    pub const TOKEN_KEY: Field = 12..16;
    pub const CTL: usize = 16;
}

/// Bytes of the Trapeze header after the frame header.
pub const TPZ_HEADER_LEN: usize = field::CTL;

/// Why bytes are not a Trapeze packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TpzPacketError {
    /// Shorter than the header.
    #[error("{0} bytes cannot hold the 16-byte trapeze header")]
    Truncated(usize),
    /// More control words than a ring entry holds.
    #[error("{0} control words; at most 30 fit a ring entry")]
    TooManyWords(u8),
    /// The lengths in the header do not add up to the packet's.
    #[error("header claims {claimed} bytes, the packet has {actual}")]
    LengthMismatch {
        /// Header, control words and payload as the header states them.
        claimed: u64,
        /// Bytes received.
        actual: usize,
    },
    /// A payload larger than [`PAYLOAD_MAX`].
    #[error("payload of {0} bytes exceeds the {PAYLOAD_MAX}-byte maximum")]
    PayloadTooLong(u32),
}

/// A Trapeze packet header, parsed and checked against the packet's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpzHeaderRepr {
    /// Header id.
    pub hid: u16,
    /// Control-message words.
    pub ctl_words: u8,
    /// [`flags`] (PAYLOAD, TOKEN).
    pub flags: u8,
    /// Payload bytes.
    pub payload_len: u32,
    /// Token slot (meaningful with the TOKEN flag).
    pub token_slot: u16,
    /// Token key.
    pub token_key: u32,
}

impl TpzHeaderRepr {
    /// Parses the header at the start of `b` (the bytes after the frame header) and checks
    /// that `b` holds exactly the control words and payload it announces.
    pub fn parse(b: &[u8]) -> Result<TpzHeaderRepr, TpzPacketError> {
        if b.len() < TPZ_HEADER_LEN {
            return Err(TpzPacketError::Truncated(b.len()));
        }
        let w = |f: field::Field| {
            let s = &b[f];
            u32::from_be_bytes([s[0], s[1], s[2], s[3]])
        };
        let r = TpzHeaderRepr {
            hid: u16::from_be_bytes([b[field::HID.start], b[field::HID.start + 1]]),
            ctl_words: b[field::CTL_WORDS],
            flags: b[field::FLAGS],
            payload_len: w(field::PAYLOAD_LEN),
            token_slot: u16::from_be_bytes([
                b[field::TOKEN_SLOT.start],
                b[field::TOKEN_SLOT.start + 1],
            ]),
            token_key: w(field::TOKEN_KEY),
        };
        if usize::from(r.ctl_words) > CTRLMSG_WORDS {
            return Err(TpzPacketError::TooManyWords(r.ctl_words));
        }
        if r.payload_len as usize > PAYLOAD_MAX {
            return Err(TpzPacketError::PayloadTooLong(r.payload_len));
        }
        let claimed = TPZ_HEADER_LEN as u64 + 4 * u64::from(r.ctl_words) + u64::from(r.payload_len);
        if claimed != b.len() as u64 {
            return Err(TpzPacketError::LengthMismatch {
                claimed,
                actual: b.len(),
            });
        }
        Ok(r)
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; TPZ_HEADER_LEN] {
        let mut b = [0u8; TPZ_HEADER_LEN];
        b[field::HID].copy_from_slice(&self.hid.to_be_bytes());
        b[field::CTL_WORDS] = self.ctl_words;
        b[field::FLAGS] = self.flags;
        b[field::PAYLOAD_LEN].copy_from_slice(&self.payload_len.to_be_bytes());
        b[field::TOKEN_SLOT].copy_from_slice(&self.token_slot.to_be_bytes());
        b[field::TOKEN_KEY].copy_from_slice(&self.token_key.to_be_bytes());
        b
    }

    /// Bytes of control words.
    pub fn ctl_len(&self) -> usize {
        4 * usize::from(self.ctl_words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hid 0x0102, 1 control word, payload + token, 4 payload bytes, token slot 5 key
    /// 0xAABBCCDD, then the word and the payload.
    static PACKET: [u8; 24] = [
        1, 2, 1, 6, 0, 0, 0, 4, 0, 5, 0, 0, 0xAA, 0xBB, 0xCC, 0xDD, 9, 9, 9, 9, 7, 7, 7, 7,
    ];

    fn repr() -> TpzHeaderRepr {
        TpzHeaderRepr {
            hid: 0x0102,
            ctl_words: 1,
            flags: (flags::PAYLOAD | flags::TOKEN) as u8,
            payload_len: 4,
            token_slot: 5,
            token_key: 0xAABB_CCDD,
        }
    }

    #[test]
    fn header_deconstruct_and_construct() {
        assert_eq!(TpzHeaderRepr::parse(&PACKET).unwrap(), repr());
        assert_eq!(repr().to_bytes(), PACKET[..16]);
        assert_eq!(repr().ctl_len(), 4);
    }

    #[test]
    fn header_refusals() {
        for n in 0..16 {
            assert_eq!(
                TpzHeaderRepr::parse(&PACKET[..n]),
                Err(TpzPacketError::Truncated(n))
            );
        }
        assert!(matches!(
            TpzHeaderRepr::parse(&PACKET[..23]),
            Err(TpzPacketError::LengthMismatch {
                claimed: 24,
                actual: 23
            })
        ));
        let mut b = PACKET;
        b[2] = 31;
        assert_eq!(
            TpzHeaderRepr::parse(&b),
            Err(TpzPacketError::TooManyWords(31))
        );
        let mut b = PACKET;
        b[4] = 0xFF;
        assert!(matches!(
            TpzHeaderRepr::parse(&b),
            Err(TpzPacketError::PayloadTooLong(_))
        ));
    }

    #[test]
    fn the_endpoint_fits_its_pages_and_entries_hold_the_message() {
        assert!(MSG + 4 * CTRLMSG_WORDS as u32 <= ENTRY_LEN);
        assert_eq!(ipt_at(0, IPT_SLOTS - 1) + IPT_LEN, ENDPOINT_LEN);
        assert_eq!(
            recv_entry_at(0, RECV_RING),
            recv_entry_at(0, 0),
            "indices wrap"
        );
        for s in [
            PayloadStatus::None,
            PayloadStatus::Attached,
            PayloadStatus::Token,
            PayloadStatus::BadToken,
            PayloadStatus::TooLong,
            PayloadStatus::NoBuffer,
        ] {
            assert_eq!(PayloadStatus::from_word(s.to_word()), s);
        }
    }
}
