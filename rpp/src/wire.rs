//! The RPP packet header: a view over bytes ([`Header`]) and its parsed form
//! ([`HeaderRepr`]), in the manner of smoltcp's wire modules.
//!
//! ```text
//!  0  CRC-32C of everything after this field: the rest of the header, the MAC, the SACK
//!     bitmap and the payload (first, so one pass over the packet checks it); zero when
//!     the integrity mode is not CRC-32C
//!  4  version (2)       5  flags            6  sack words
//!  7  integrity: the mode (low 4 bits: 0 none, 1 CRC-32C, 2 external) | 0x10 if a MAC
//!     follows the fixed header
//!  8  connection id (u64)
//! 16  sender's incarnation                         (u64)
//! 24  the incarnation the sender believes the receiver has (u64, 0 = not yet known)
//! 32  sequence number of this packet (with DATA)
//! 36  cumulative ack: every sequence number before it was received
//! 40  receiver credit: sequence numbers the sender may use beyond the cumulative ack
//! 44  D-SACK: 1 + a sequence number just received twice (0 = none)
//! 48  message id (u64)
//! 56  fragment index          60  fragment count          64  message length
//! 68  transmission number of this packet (with DATA; every send and resend has its own)
//! 72  echo: the transmission number that brought the peer's newest data (0 = none yet)
//! 76  ack delay, microseconds (u16): how long the echoed packet waited for this one
//! 78  reserved (0)
//! 80  MAC, 16 bytes, when the integrity byte says so: BLAKE3 keyed with the shared key
//!     over bytes 4..80, the SACK bitmap and the payload, truncated
//! ..  SACK bitmap: sack words x u64; bit i (from the most significant bit of the first
//!     word) set means sequence number ack + 1 + i was received
//! ..  payload
//! ```
//!
//! All fields are big-endian. Sequence and transmission numbers are 32-bit and compared
//! with serial arithmetic ([`seq_lt`]).
//!
//! # Integrity
//!
//! Each packet names the check that covers it ([`Integrity`]): a CRC-32C computed here
//! (the default), an external check the channel below makes (the board's DMA checksums:
//! the CRC field is then zero and nothing is computed here), or none. A receiver takes
//! only packets of the mode it was configured for. A MAC ([`MacKey`]) is independent of
//! the mode: it authenticates as well as detects corruption.
//!
//! The echo makes acknowledgements unambiguous: a sender that resent a packet learns which
//! transmission arrived, so it measures round trips from resent packets too and detects a
//! lost resend as quickly as a lost first send (TCP's timestamps play this part).

use thiserror::Error;

/// The version this crate speaks.
pub const VERSION: u8 = 2;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 80;
/// Bytes of the MAC, when a packet carries one.
pub const MAC_LEN: usize = 16;
/// The most 64-bit words of SACK bitmap one header carries (1,024 sequence numbers):
/// windows stop at what one acknowledgement maps, and a window of 1,500-byte frames that
/// fills a 10 ms queue at 1 Gbit/s (1.25 MB) is more than 512 of them.
pub const MAX_SACK_WORDS: usize = 16;
/// Sequence numbers beyond the cumulative acknowledgement that one acknowledgement's
/// SACK bitmap maps ([`MAX_SACK_WORDS`] words of 64).
pub const SACK_SPAN: u32 = (MAX_SACK_WORDS * 64) as u32;
/// The most header bytes a packet may need (fixed part, a MAC and a full SACK bitmap).
pub const MAX_HEADER_LEN: usize = HEADER_LEN + MAC_LEN + MAX_SACK_WORDS * 8;
/// The most SACK words a data packet carries (the first 128 sequence numbers beyond the
/// gap): data packets keep room for only this much bitmap, so a full packet carries 48
/// more payload bytes; a longer bitmap goes in an acknowledgement of its own.
pub const DATA_SACK_WORDS: usize = 2;
/// The most header bytes a data packet needs without a MAC (add [`MAC_LEN`] with one).
pub const MAX_DATA_HEADER_LEN: usize = HEADER_LEN + DATA_SACK_WORDS * 8;

/// The check that covers a packet, named in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Integrity {
    /// A CRC-32C over the packet after the CRC field, computed and checked by RPP.
    #[default]
    Crc32c,
    /// The channel below covers every packet from the sender's memory to the
    /// receiver's and drops what fails its check (the board's DMA checksums, as checksum
    /// offload does for TCP): RPP computes no CRC and the CRC field is zero.
    ///
    /// The driver that selects it ([`Config::integrity`](crate::Config::integrity)) takes
    /// on the check: it must hand [`Connection::handle_packet`](crate::Connection::handle_packet)
    /// only datagrams its channel verified end to end, header included. Over the board
    /// that is the sender's host-to-board DMA checksum carried with the packet and
    /// compared, on the receiving host, with its own board-to-host DMA checksum of the
    /// same bytes; a mismatch is dropped (and counted) by the driver before RPP sees it.
    /// A check on the link alone (the fabric's CRC-8) is not enough: it leaves the
    /// boards' memories and buses uncovered.
    External,
    /// Nothing checks the packet. Only for a channel that cannot corrupt (or with a MAC).
    None,
}

impl Integrity {
    /// The mode's number in the header's integrity byte.
    #[inline]
    pub const fn code(self) -> u8 {
        match self {
            Integrity::None => 0,
            Integrity::Crc32c => 1,
            Integrity::External => 2,
        }
    }

    /// The mode a number names.
    #[inline]
    pub const fn from_code(code: u8) -> Option<Integrity> {
        match code {
            0 => Some(Integrity::None),
            1 => Some(Integrity::Crc32c),
            2 => Some(Integrity::External),
            _ => None,
        }
    }

    /// The header's integrity byte for this mode, with or without a MAC.
    #[inline]
    pub const fn byte(self, mac: bool) -> u8 {
        self.code() | if mac { INTEGRITY_MAC } else { 0 }
    }
}

/// The integrity byte's bit that says a MAC follows the fixed header.
pub const INTEGRITY_MAC: u8 = 0x10;

/// A 256-bit key shared by both ends, for the MAC: BLAKE3 in its keyed mode (a PRF
/// designed for this use), truncated to [`MAC_LEN`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct MacKey([u8; 32]);

impl MacKey {
    /// A key from 32 secret bytes (random, shared out of band).
    pub const fn new(key: [u8; 32]) -> MacKey {
        MacKey(key)
    }

    /// A key derived from a passphrase or a longer secret, with BLAKE3's key derivation
    /// (`context` names the application, so one secret gives different keys to
    /// different uses).
    pub fn derive(context: &str, secret: &[u8]) -> MacKey {
        MacKey(blake3::derive_key(context, secret))
    }
}

impl core::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The key is a secret: never printed.
        f.write_str("MacKey(..)")
    }
}

/// Header flag bits.
pub mod flags {
    /// The packet carries a message fragment.
    pub const DATA: u8 = 0x01;
    /// The sender introduces itself (connection set-up, or after it restarted).
    pub const HELLO: u8 = 0x02;
    /// The receiver should acknowledge at once (a keepalive or zero-credit probe).
    pub const ACK_NOW: u8 = 0x04;
    /// The sender is closing the connection.
    pub const CLOSE: u8 = 0x08;
    /// Every defined flag.
    pub const ALL: u8 = DATA | HELLO | ACK_NOW | CLOSE;
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const CRC: Field = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const SACK_WORDS: usize = 6;
    pub const INTEGRITY: usize = 7;
    pub const CONN_ID: Field = 8..16;
    pub const SRC_INC: Field = 16..24;
    pub const DST_INC: Field = 24..32;
    pub const SEQ: Field = 32..36;
    pub const ACK: Field = 36..40;
    pub const CREDIT: Field = 40..44;
    pub const DSACK: Field = 44..48;
    pub const MSG_ID: Field = 48..56;
    pub const FRAG_INDEX: Field = 56..60;
    pub const FRAG_COUNT: Field = 60..64;
    pub const MSG_LEN: Field = 64..68;
    pub const TX: Field = 68..72;
    pub const ECHO: Field = 72..76;
    pub const ACK_DELAY: Field = 76..78;
    pub const RESERVED: Field = 78..80;
    /// Where the MAC is, when there is one.
    pub const MAC: Field = 80..96;
}

/// Byte offsets of the fields an application may need to patch (the fuzz targets do):
/// the version, the connection id and the first byte after the CRC.
pub mod offset {
    /// The CRC covers everything from here on.
    pub const AFTER_CRC: usize = super::field::CRC.end;
    /// The version byte.
    pub const VERSION: usize = super::field::VERSION;
    /// The flags byte.
    pub const FLAGS: usize = super::field::FLAGS;
    /// The integrity byte (see [`Integrity::byte`](super::Integrity::byte)).
    pub const INTEGRITY: usize = super::field::INTEGRITY;
    /// The connection id (8 bytes).
    pub const CONN_ID: usize = super::field::CONN_ID.start;
    /// The sender's incarnation (8 bytes).
    pub const SRC_INCARNATION: usize = super::field::SRC_INC.start;
    /// The receiver's incarnation as the sender believes it (8 bytes).
    pub const DST_INCARNATION: usize = super::field::DST_INC.start;
    /// The reserved 2 bytes after the ack delay.
    pub const RESERVED: usize = super::field::RESERVED.start;
}

/// `a` is before `b` in serial-number order.
#[inline]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` is at or before `b` in serial-number order.
#[inline]
pub fn seq_le(a: u32, b: u32) -> bool {
    a == b || seq_lt(a, b)
}

/// Why bytes are not an RPP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than the header it claims.
    #[error("packet of {len} bytes is shorter than its {need}-byte header")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// A version this crate does not speak.
    #[error("unknown version {0}")]
    Version(u8),
    /// An integrity byte that names no mode, or sets undefined bits.
    #[error("unknown integrity byte {0:#04x}")]
    Integrity(u8),
    /// Undefined flags or reserved bytes set, or an impossible field.
    #[error("malformed header: {0}")]
    Malformed(&'static str),
    /// The CRC-32C does not match.
    #[error("bad crc-32c")]
    BadCrc,
}

/// A view of an RPP header over bytes.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], f: field::Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

#[inline]
fn be32(b: &[u8], f: field::Field) -> u32 {
    u32::from_be_bytes([b[f.start], b[f.start + 1], b[f.start + 2], b[f.start + 3]])
}

#[inline]
fn be64(b: &[u8], f: field::Field) -> u64 {
    (u64::from(be32(b, f.start..f.start + 4)) << 32) | u64::from(be32(b, f.start + 4..f.end))
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps bytes without checking them.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps bytes after checking they hold the fixed header and its SACK bitmap.
    pub fn new_checked(buffer: T) -> Result<Header<T>, WireError> {
        let h = Header { buffer };
        let len = h.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated {
                len,
                need: HEADER_LEN,
            });
        }
        let need = h.header_len();
        if len < need {
            return Err(WireError::Truncated { len, need });
        }
        Ok(h)
    }

    /// The fixed header (the caller checked the length).
    #[inline]
    fn fixed(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref()[..HEADER_LEN]
            .try_into()
            .expect("checked length")
    }

    /// Version.
    #[inline]
    pub fn version(&self) -> u8 {
        self.fixed()[field::VERSION]
    }
    /// Flags.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.fixed()[field::FLAGS]
    }
    /// Words of SACK bitmap.
    #[inline]
    pub fn sack_words(&self) -> usize {
        usize::from(self.fixed()[field::SACK_WORDS])
    }
    /// The integrity byte: the mode and whether a MAC follows (see [`Integrity::byte`]).
    #[inline]
    pub fn integrity_byte(&self) -> u8 {
        self.fixed()[field::INTEGRITY]
    }
    /// The integrity mode the header names, if it names one.
    #[inline]
    pub fn integrity(&self) -> Option<Integrity> {
        Integrity::from_code(self.integrity_byte() & 0x0F)
    }
    /// Whether a MAC follows the fixed header.
    #[inline]
    pub fn has_mac(&self) -> bool {
        self.integrity_byte() & INTEGRITY_MAC != 0
    }
    /// Bytes of MAC (zero or [`MAC_LEN`]).
    #[inline]
    fn mac_len(&self) -> usize {
        if self.has_mac() { MAC_LEN } else { 0 }
    }
    /// Bytes of header, MAC and SACK bitmap included.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.mac_len() + self.sack_words() * 8
    }
    /// Connection id.
    #[inline]
    pub fn conn_id(&self) -> u64 {
        be64(self.fixed(), field::CONN_ID)
    }
    /// Sender's incarnation.
    pub fn src_incarnation(&self) -> u64 {
        be64(self.fixed(), field::SRC_INC)
    }
    /// Receiver's incarnation as the sender believes it.
    pub fn dst_incarnation(&self) -> u64 {
        be64(self.fixed(), field::DST_INC)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.fixed(), field::SEQ)
    }
    /// Cumulative ack.
    pub fn ack(&self) -> u32 {
        be32(self.fixed(), field::ACK)
    }
    /// Receiver credit.
    pub fn credit(&self) -> u32 {
        be32(self.fixed(), field::CREDIT)
    }
    /// D-SACK field.
    pub fn dsack(&self) -> u32 {
        be32(self.fixed(), field::DSACK)
    }
    /// Message id.
    pub fn msg_id(&self) -> u64 {
        be64(self.fixed(), field::MSG_ID)
    }
    /// Fragment index.
    pub fn frag_index(&self) -> u32 {
        be32(self.fixed(), field::FRAG_INDEX)
    }
    /// Fragment count.
    pub fn frag_count(&self) -> u32 {
        be32(self.fixed(), field::FRAG_COUNT)
    }
    /// Message length.
    pub fn msg_len(&self) -> u32 {
        be32(self.fixed(), field::MSG_LEN)
    }
    /// Transmission number.
    pub fn tx(&self) -> u32 {
        be32(self.fixed(), field::TX)
    }
    /// Echoed transmission number.
    pub fn echo(&self) -> u32 {
        be32(self.fixed(), field::ECHO)
    }
    /// Ack delay in microseconds.
    pub fn ack_delay_us(&self) -> u16 {
        be16(self.fixed(), field::ACK_DELAY)
    }
    /// CRC field.
    pub fn crc(&self) -> u32 {
        be32(self.fixed(), field::CRC)
    }
    /// SACK bitmap word `i`.
    #[inline]
    pub fn sack_word(&self, i: usize) -> u64 {
        let at = HEADER_LEN + self.mac_len() + i * 8;
        be64(self.buffer.as_ref(), at..at + 8)
    }
    /// The MAC, if the packet carries one.
    pub fn mac(&self) -> Option<[u8; MAC_LEN]> {
        self.has_mac().then(|| {
            self.buffer.as_ref()[field::MAC]
                .try_into()
                .expect("checked length")
        })
    }
    /// Everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Whether the CRC-32C over everything after the CRC field matches it.
    #[inline]
    pub fn crc_ok(&self) -> bool {
        self.crc() == crc32c(&self.buffer.as_ref()[field::CRC.end..])
    }

    /// Whether the packet passes the check its integrity byte names: the CRC-32C for
    /// [`Integrity::Crc32c`]; always for [`Integrity::External`] (the channel checked)
    /// and [`Integrity::None`]; never for an unknown mode. The MAC is checked apart
    /// ([`Header::mac_ok`]).
    pub fn integrity_ok(&self) -> bool {
        match self.integrity() {
            Some(Integrity::Crc32c) => self.crc_ok(),
            Some(Integrity::External | Integrity::None) => true,
            None => false,
        }
    }

    /// Whether the packet carries a MAC and it is the one `key` gives (compared in
    /// constant time).
    pub fn mac_ok(&self, key: &MacKey) -> bool {
        let Some(mac) = self.mac() else {
            return false;
        };
        let b = self.buffer.as_ref();
        let header_len = self.header_len();
        let expected = compute_mac(key, &b[..header_len], &b[header_len..]);
        // Constant time: every byte is compared whatever the first difference.
        mac.iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// The MAC of a packet gathered from `header` (with its MAC field; the CRC and MAC
/// fields are not covered) and `payload`.
pub fn compute_mac(key: &MacKey, header: &[u8], payload: &[u8]) -> [u8; MAC_LEN] {
    let mut h = blake3::Hasher::new_keyed(&key.0);
    h.update(&header[field::CRC.end..field::MAC.start]);
    h.update(&header[field::MAC.end..]);
    h.update(payload);
    let mut out = [0u8; MAC_LEN];
    h.finalize_xof().fill(&mut out);
    out
}

/// Below this many bytes a gathered packet is copied together on the stack and checked
/// in one call: `crc-fast`'s streaming digest costs more to set up and finish than a
/// small packet's whole checksum (an 84-byte packet: about 100 instructions less).
pub const SHORT_CRC: usize = 256;

/// The CRC-32C of a packet gathered from `header` (its CRC field not included) and
/// `payload`.
pub fn compute_crc(header: &[u8], payload: &[u8]) -> u32 {
    let header = &header[field::CRC.end..];
    let len = header.len() + payload.len();
    if len <= SHORT_CRC {
        let mut packet = [0u8; SHORT_CRC];
        packet[..header.len()].copy_from_slice(header);
        packet[header.len()..len].copy_from_slice(payload);
        return crc32c(&packet[..len]);
    }
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    digest.update(header);
    digest.update(payload);
    digest.finalize() as u32
}

/// CRC-32C (Castagnoli, as iSCSI and SCTP use it) of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderRepr {
    /// Flags.
    pub flags: u8,
    /// The check that covers the packet.
    pub integrity: Integrity,
    /// Whether a MAC follows the fixed header ([`emit`](HeaderRepr::emit) leaves room for
    /// it, [`seal`] fills it in).
    pub mac: bool,
    /// Connection id.
    pub conn_id: u64,
    /// Sender's incarnation (never zero).
    pub src_incarnation: u64,
    /// Receiver's incarnation as the sender believes it (zero: not known yet).
    pub dst_incarnation: u64,
    /// Sequence number (with DATA).
    pub seq: u32,
    /// Cumulative ack.
    pub ack: u32,
    /// Receiver credit.
    pub credit: u32,
    /// `1 + seq` of a packet just received twice, or zero.
    pub dsack: u32,
    /// Message id (with DATA).
    pub msg_id: u64,
    /// Fragment index (with DATA).
    pub frag_index: u32,
    /// Fragment count (with DATA).
    pub frag_count: u32,
    /// Message length (with DATA).
    pub msg_len: u32,
    /// This packet's transmission number (with DATA; never zero then).
    pub tx: u32,
    /// The transmission number that brought the newest data received from the peer (a
    /// duplicate is not echoed; zero: none yet).
    pub echo: u32,
    /// How long the echoed packet waited for this one, in microseconds.
    pub ack_delay_us: u16,
}

impl HeaderRepr {
    /// Parses and checks a header (but not the CRC). The SACK bitmap stays in the view
    /// ([`Header::sack_word`]).
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Result<HeaderRepr, WireError> {
        let b = h.fixed();
        if b[field::VERSION] != VERSION {
            return Err(WireError::Version(b[field::VERSION]));
        }
        let flags = b[field::FLAGS];
        if flags & !flags::ALL != 0 || be16(b, field::RESERVED) != 0 {
            return Err(WireError::Malformed(
                "undefined flags or reserved bytes set",
            ));
        }
        let integrity_byte = b[field::INTEGRITY];
        let integrity = match Integrity::from_code(integrity_byte & 0x0F) {
            Some(i) if integrity_byte & !(0x0F | INTEGRITY_MAC) == 0 => i,
            _ => return Err(WireError::Integrity(integrity_byte)),
        };
        let sack_words = h.sack_words();
        if sack_words > MAX_SACK_WORDS {
            return Err(WireError::Malformed("sack bitmap too long"));
        }
        let repr = HeaderRepr {
            flags,
            integrity,
            mac: integrity_byte & INTEGRITY_MAC != 0,
            conn_id: be64(b, field::CONN_ID),
            src_incarnation: be64(b, field::SRC_INC),
            dst_incarnation: be64(b, field::DST_INC),
            seq: be32(b, field::SEQ),
            ack: be32(b, field::ACK),
            credit: be32(b, field::CREDIT),
            dsack: be32(b, field::DSACK),
            msg_id: be64(b, field::MSG_ID),
            frag_index: be32(b, field::FRAG_INDEX),
            frag_count: be32(b, field::FRAG_COUNT),
            msg_len: be32(b, field::MSG_LEN),
            tx: be32(b, field::TX),
            echo: be32(b, field::ECHO),
            ack_delay_us: be16(b, field::ACK_DELAY),
        };
        if repr.src_incarnation == 0 {
            return Err(WireError::Malformed("zero incarnation"));
        }
        if flags & flags::DATA != 0 {
            if repr.frag_count == 0 || repr.frag_index >= repr.frag_count {
                return Err(WireError::Malformed("fragment index outside the count"));
            }
            if repr.tx == 0 {
                return Err(WireError::Malformed("data without a transmission number"));
            }
        }
        Ok(repr)
    }

    /// Writes the header, room for the MAC when it has one, and a SACK bitmap of
    /// `sack.len()` words (at most [`MAX_SACK_WORDS`]) into `out`, with zero CRC and MAC
    /// fields; returns the header's length. See [`seal`] and [`seal_packet`] for the
    /// checks.
    pub fn emit(&self, out: &mut [u8], sack: &[u64]) -> Option<usize> {
        if sack.len() > MAX_SACK_WORDS {
            return None;
        }
        let mac_len = if self.mac { MAC_LEN } else { 0 };
        let len = HEADER_LEN + mac_len + sack.len() * 8;
        let out = out.get_mut(..len)?;
        let (fixed, rest) = out.split_at_mut(HEADER_LEN);
        let (mac, bitmap) = rest.split_at_mut(mac_len);
        if self.mac {
            mac.fill(0);
        }
        let b: &mut [u8; HEADER_LEN] = fixed.try_into().ok()?;
        b[field::VERSION] = VERSION;
        b[field::FLAGS] = self.flags;
        b[field::SACK_WORDS] = sack.len() as u8;
        b[field::INTEGRITY] = self.integrity.byte(self.mac);
        b[field::CONN_ID].copy_from_slice(&self.conn_id.to_be_bytes());
        b[field::SRC_INC].copy_from_slice(&self.src_incarnation.to_be_bytes());
        b[field::DST_INC].copy_from_slice(&self.dst_incarnation.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        b[field::ACK].copy_from_slice(&self.ack.to_be_bytes());
        b[field::CREDIT].copy_from_slice(&self.credit.to_be_bytes());
        b[field::DSACK].copy_from_slice(&self.dsack.to_be_bytes());
        b[field::MSG_ID].copy_from_slice(&self.msg_id.to_be_bytes());
        b[field::FRAG_INDEX].copy_from_slice(&self.frag_index.to_be_bytes());
        b[field::FRAG_COUNT].copy_from_slice(&self.frag_count.to_be_bytes());
        b[field::MSG_LEN].copy_from_slice(&self.msg_len.to_be_bytes());
        b[field::TX].copy_from_slice(&self.tx.to_be_bytes());
        b[field::ECHO].copy_from_slice(&self.echo.to_be_bytes());
        b[field::ACK_DELAY].copy_from_slice(&self.ack_delay_us.to_be_bytes());
        b[field::RESERVED].copy_from_slice(&[0, 0]);
        b[field::CRC].copy_from_slice(&[0; 4]);
        for (chunk, word) in bitmap.chunks_exact_mut(8).zip(sack) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        Some(len)
    }
}

/// Fills in the checks an emitted header names, for the header followed by `payload`
/// (which may live elsewhere: the header and payload are gathered, not copied
/// together): the MAC with `key` when the header has room for one, then the CRC-32C when
/// its mode is [`Integrity::Crc32c`] (the CRC field stays zero otherwise). A header with
/// a MAC field and no key gets a zero MAC, which no receiver accepts.
pub fn seal(header: &mut [u8], payload: &[u8], key: Option<&MacKey>) {
    let h = Header::new_unchecked(&*header);
    let (has_mac, integrity) = (h.has_mac(), h.integrity());
    if has_mac
        && let Some(key) = key
        && header.len() >= h.header_len()
    {
        let mac = compute_mac(key, header, payload);
        header[field::MAC].copy_from_slice(&mac);
    }
    if integrity == Some(Integrity::Crc32c) {
        let crc = compute_crc(header, payload);
        header[field::CRC].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Fills in the CRC-32C of a whole packet (header and payload together) in one pass,
/// whatever its integrity byte says: for a sender that knows its mode is
/// [`Integrity::Crc32c`] and uses no MAC.
#[inline]
pub fn seal_crc(packet: &mut [u8]) {
    let crc = crc32c(&packet[field::CRC.end..]);
    packet[field::CRC].copy_from_slice(&crc.to_be_bytes());
}

/// [`seal`] for a whole packet (header and payload together): the CRC in one pass.
pub fn seal_packet(packet: &mut [u8], key: Option<&MacKey>) {
    let h = Header::new_unchecked(&*packet);
    let (has_mac, integrity) = (h.has_mac(), h.integrity());
    if has_mac
        && let Some(key) = key
        && packet.len() >= h.header_len()
    {
        let (header, payload) = packet.split_at(h.header_len());
        let mac = compute_mac(key, header, payload);
        packet[field::MAC].copy_from_slice(&mac);
    }
    if integrity == Some(Integrity::Crc32c) {
        let crc = crc32c(&packet[field::CRC.end..]);
        packet[field::CRC].copy_from_slice(&crc.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SACK: [u64; 2] = [0x8000_0000_0000_0001, 0x0102_0304_0506_0708];

    fn repr() -> HeaderRepr {
        HeaderRepr {
            flags: flags::DATA | flags::ACK_NOW,
            integrity: Integrity::Crc32c,
            mac: false,
            conn_id: 0x0102_0304_0506_0708,
            src_incarnation: 7,
            dst_incarnation: 9,
            seq: 0xFFFF_FFFE,
            ack: 5,
            credit: 64,
            dsack: 4,
            msg_id: 0x1122_3344_5566_7788,
            frag_index: 2,
            frag_count: 3,
            msg_len: 20_000,
            tx: 0x0A0B_0C0D,
            echo: 33,
            ack_delay_us: 250,
        }
    }

    fn bytes() -> Vec<u8> {
        let mut b = vec![
            0, 0, 0, 0, // crc (zero before sealing)
            2, 0x05, 2, 1, // version, flags, sack words, integrity (CRC-32C)
            1, 2, 3, 4, 5, 6, 7, 8, // conn id
            0, 0, 0, 0, 0, 0, 0, 7, // src incarnation
            0, 0, 0, 0, 0, 0, 0, 9, // dst incarnation
            0xFF, 0xFF, 0xFF, 0xFE, // seq
            0, 0, 0, 5, // ack
            0, 0, 0, 64, // credit
            0, 0, 0, 4, // dsack
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // msg id
            0, 0, 0, 2, 0, 0, 0, 3, // frag index, count
            0, 0, 0x4E, 0x20, // msg len
            0x0A, 0x0B, 0x0C, 0x0D, // tx
            0, 0, 0, 33, // echo
            0, 250, 0, 0, // ack delay, reserved
            0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, // sack bitmap
        ];
        b.extend_from_slice(b"payload");
        b
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(
            (h.version(), h.flags(), h.sack_words(), h.header_len()),
            (2, 5, 2, 96)
        );
        assert_eq!(
            (h.integrity(), h.has_mac(), h.mac()),
            (Some(Integrity::Crc32c), false, None)
        );
        assert_eq!(
            (h.conn_id(), h.src_incarnation(), h.dst_incarnation()),
            (0x0102_0304_0506_0708, 7, 9)
        );
        assert_eq!(
            (h.seq(), h.ack(), h.credit(), h.dsack()),
            (0xFFFF_FFFE, 5, 64, 4)
        );
        assert_eq!(
            (h.msg_id(), h.frag_index(), h.frag_count(), h.msg_len()),
            (0x1122_3344_5566_7788, 2, 3, 20_000)
        );
        assert_eq!((h.tx(), h.echo(), h.ack_delay_us()), (0x0A0B_0C0D, 33, 250));
        assert_eq!(
            (h.sack_word(0), h.sack_word(1)),
            (0x8000_0000_0000_0001, 0x0102_0304_0506_0708)
        );
        assert_eq!(h.payload(), b"payload");
    }

    #[test]
    fn construct_and_round_trip() {
        let mut out = vec![0u8; 200];
        let n = repr().emit(&mut out, &SACK).unwrap();
        assert_eq!(&out[..n], &bytes()[..n]);
        assert_eq!(
            HeaderRepr::parse(&Header::new_checked(&bytes()[..]).unwrap()).unwrap(),
            repr()
        );
        assert_eq!(
            repr().emit(&mut out[..95], &SACK),
            None,
            "too small a buffer"
        );
    }

    #[test]
    fn crc_covers_header_and_gathered_payload() {
        let mut header = vec![0u8; MAX_HEADER_LEN];
        let n = repr().emit(&mut header, &SACK).unwrap();
        seal(&mut header[..n], b"payload", None);
        let mut packet = header[..n].to_vec();
        packet.extend_from_slice(b"payload");
        assert!(Header::new_checked(&packet[..]).unwrap().crc_ok());
        for bit in 0..packet.len() * 8 {
            let mut bad = packet.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let ok = Header::new_checked(&bad[..])
                .map(|h| h.crc_ok())
                .unwrap_or(false);
            assert!(!ok, "bit {bit}");
        }
    }

    #[test]
    fn the_fast_crc_is_crc32c() {
        let reference = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        // Both implementations: below, at and above SHORT_CRC, aligned or not.
        let short = SHORT_CRC;
        let lens = [
            0,
            1,
            7,
            8,
            9,
            63,
            64,
            65,
            short - 1,
            short,
            short + 1,
            1000,
            4990,
        ];
        for len in lens {
            for start in [0, 1, 3] {
                let bytes = &data[start..start + len];
                assert_eq!(crc32c(bytes), reference.checksum(bytes), "{len} at {start}");
            }
        }
        // Gathered: the header after its CRC field, then the payload; or all at once.
        let mut header = vec![0u8; MAX_HEADER_LEN];
        let n = repr().emit(&mut header, &SACK).unwrap();
        for len in lens {
            let payload = &data[..len];
            let mut whole = header[..n].to_vec();
            whole.extend_from_slice(payload);
            assert_eq!(
                compute_crc(&header[..n], payload),
                reference.checksum(&whole[4..]),
                "{len}-byte payload"
            );
        }
        let mut whole = header[..n].to_vec();
        whole.extend_from_slice(&data);
        seal_packet(&mut whole, None);
        assert!(Header::new_checked(&whole[..]).unwrap().crc_ok());
        assert_eq!(&whole[..4], &reference.checksum(&whole[4..]).to_be_bytes());
    }

    #[test]
    fn impossible_lens_and_values() {
        let b = bytes();
        assert_eq!(
            Header::new_checked(&b[..79]).unwrap_err(),
            WireError::Truncated { len: 79, need: 80 }
        );
        assert_eq!(
            Header::new_checked(&b[..94]).unwrap_err(),
            WireError::Truncated { len: 94, need: 96 }
        );
        let mut v = b.clone();
        v[7] |= INTEGRITY_MAC;
        assert_eq!(
            Header::new_checked(&v[..100]).unwrap_err(),
            WireError::Truncated {
                len: 100,
                need: 112
            },
            "a MAC takes room before the bitmap"
        );
        let parse = |b: &[u8]| HeaderRepr::parse(&Header::new_checked(b).unwrap());
        let mut v = b.clone();
        v[4] = 1;
        assert_eq!(parse(&v), Err(WireError::Version(1)));
        for bad in [3, 0x0F, 0x21, 0x81] {
            let mut v = b.clone();
            v[7] = bad;
            assert_eq!(parse(&v), Err(WireError::Integrity(bad)), "{bad:#x}");
        }
        for (at, value) in [(5, 0x40), (79, 1), (78, 1)] {
            let mut v = b.clone();
            v[at] = value;
            assert!(
                matches!(parse(&v), Err(WireError::Malformed(_))),
                "byte {at}"
            );
        }
        let mut v = b.clone();
        v[6] = MAX_SACK_WORDS as u8 + 1;
        v.resize(300, 0);
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "sack too long"
        );
        let mut v = b.clone();
        v[16..24].fill(0);
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "zero incarnation"
        );
        let mut v = b.clone();
        v[56..60].copy_from_slice(&3u32.to_be_bytes());
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "fragment index = count"
        );
        let mut v = b.clone();
        v[68..72].fill(0);
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "data without tx"
        );
    }

    #[test]
    fn each_integrity_mode_is_named_and_sealed_as_it_says() {
        for mode in [Integrity::Crc32c, Integrity::External, Integrity::None] {
            let r = HeaderRepr {
                integrity: mode,
                ..repr()
            };
            let mut packet = vec![0u8; 200];
            let n = r.emit(&mut packet, &SACK).unwrap();
            packet.truncate(n);
            packet.extend_from_slice(b"payload");
            seal_packet(&mut packet, None);
            let h = Header::new_checked(&packet[..]).unwrap();
            assert_eq!(h.integrity(), Some(mode));
            assert_eq!(h.integrity_byte(), mode.code());
            assert_eq!(HeaderRepr::parse(&h).unwrap(), r);
            assert!(h.integrity_ok());
            // Only the CRC mode computes a CRC; the others leave the field zero.
            assert_eq!(h.crc() != 0, mode == Integrity::Crc32c, "{mode:?}");
            assert_eq!(Integrity::from_code(mode.code()), Some(mode));
        }
    }

    /// A packet with a MAC: the fixture, then every bit flip (the CRC fixed up, as a
    /// forger would) and every other key fail it.
    #[test]
    fn the_mac_covers_header_bitmap_and_payload() {
        let key = MacKey::new([7; 32]);
        let r = HeaderRepr {
            mac: true,
            ..repr()
        };
        let mut header = vec![0u8; MAX_HEADER_LEN];
        let n = r.emit(&mut header, &SACK).unwrap();
        assert_eq!(n, HEADER_LEN + MAC_LEN + 16);
        assert_eq!(header[7], 0x11, "CRC-32C with a MAC");
        seal(&mut header[..n], b"payload", Some(&key));
        let mut packet = header[..n].to_vec();
        packet.extend_from_slice(b"payload");
        let h = Header::new_checked(&packet[..]).unwrap();
        assert!(h.crc_ok() && h.mac_ok(&key));
        assert_eq!(HeaderRepr::parse(&h).unwrap(), r);
        assert_eq!(h.sack_word(1), SACK[1], "the bitmap follows the MAC");
        assert_eq!(h.payload(), b"payload");
        // Gathered and whole sealing agree.
        let mut whole = packet.clone();
        whole[..4].fill(0);
        whole[80..96].fill(0);
        seal_packet(&mut whole, Some(&key));
        assert_eq!(whole, packet);
        assert!(!h.mac_ok(&MacKey::new([8; 32])), "another key");
        for bit in 32..packet.len() * 8 {
            let mut bad = packet.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let crc = crc32c(&bad[4..]);
            bad[..4].copy_from_slice(&crc.to_be_bytes());
            let ok = Header::new_checked(&bad[..]).is_ok_and(|h| h.mac_ok(&key));
            assert!(!ok, "bit {bit}");
        }
        assert_eq!(format!("{key:?}"), "MacKey(..)", "a key is never printed");
    }

    #[test]
    fn serial_arithmetic_wraps() {
        assert!(seq_lt(u32::MAX, 0));
        assert!(seq_lt(5, 6) && !seq_lt(6, 5) && !seq_lt(5, 5));
        assert!(seq_le(5, 5) && seq_le(u32::MAX - 3, 2));
    }
}
