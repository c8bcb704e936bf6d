//! The RPP packet header: a view over bytes ([`Header`]) and its parsed form
//! ([`HeaderRepr`]), in the manner of smoltcp's wire modules.
//!
//! ```text
//!  0  CRC-32C of everything after this field: the rest of the header, the SACK bitmap
//!     and the payload (first, so one pass over the packet checks it)
//!  4  version (1)       5  flags            6  sack words       7  reserved (0)
//!  8  connection id
//! 12  sender's incarnation                         (u64)
//! 20  the incarnation the sender believes the receiver has (u64, 0 = not yet known)
//! 28  sequence number of this packet (with DATA)
//! 32  cumulative ack: every sequence number before it was received
//! 36  receiver credit: sequence numbers the sender may use beyond the cumulative ack
//! 40  D-SACK: 1 + a sequence number just received twice (0 = none)
//! 44  message id (u64)
//! 52  fragment index          56  fragment count          60  message length
//! 64  transmission number of this packet (with DATA; every send and resend has its own)
//! 68  echo: the latest transmission number received from the peer (0 = none yet)
//! 72  ack delay, microseconds (u16): how long the echoed packet waited for this one
//! 74  reserved (0)
//! 76  SACK bitmap: sack words x u64; bit i (from the most significant bit of the first
//!     word) set means sequence number ack + 1 + i was received
//! ..  payload
//! ```
//!
//! All fields are big-endian. Sequence and transmission numbers are 32-bit and compared
//! with serial arithmetic ([`seq_lt`]).
//!
//! The echo makes acknowledgements unambiguous: a sender that resent a packet learns which
//! transmission arrived, so it measures round trips from resent packets too and detects a
//! lost resend as quickly as a lost first send (TCP's timestamps play this part).

use thiserror::Error;

/// The version this crate speaks.
pub const VERSION: u8 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 76;
/// The most 64-bit words of SACK bitmap one header carries (512 sequence numbers).
pub const MAX_SACK_WORDS: usize = 8;
/// The most header bytes a packet may need (fixed part and a full SACK bitmap).
pub const MAX_HEADER_LEN: usize = HEADER_LEN + MAX_SACK_WORDS * 8;
/// The most SACK words a data packet carries (the first 128 sequence numbers beyond the
/// gap): data packets keep room for only this much bitmap, so a full packet carries 48
/// more payload bytes; a longer bitmap goes in an acknowledgement of its own.
pub const DATA_SACK_WORDS: usize = 2;
/// The most header bytes a data packet needs.
pub const MAX_DATA_HEADER_LEN: usize = HEADER_LEN + DATA_SACK_WORDS * 8;

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
    pub const RESERVED: usize = 7;
    pub const CONN_ID: Field = 8..12;
    pub const SRC_INC: Field = 12..20;
    pub const DST_INC: Field = 20..28;
    pub const SEQ: Field = 28..32;
    pub const ACK: Field = 32..36;
    pub const CREDIT: Field = 36..40;
    pub const DSACK: Field = 40..44;
    pub const MSG_ID: Field = 44..52;
    pub const FRAG_INDEX: Field = 52..56;
    pub const FRAG_COUNT: Field = 56..60;
    pub const MSG_LEN: Field = 60..64;
    pub const TX: Field = 64..68;
    pub const ECHO: Field = 68..72;
    pub const ACK_DELAY: Field = 72..74;
    pub const RESERVED2: Field = 74..76;
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
    /// The reserved byte after the SACK word count.
    pub const RESERVED: usize = super::field::RESERVED;
    /// The connection id (4 bytes).
    pub const CONN_ID: usize = super::field::CONN_ID.start;
    /// The reserved 2 bytes after the ack delay.
    pub const RESERVED2: usize = super::field::RESERVED2.start;
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
    pub fn version(&self) -> u8 {
        self.fixed()[field::VERSION]
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.fixed()[field::FLAGS]
    }
    /// Words of SACK bitmap.
    pub fn sack_words(&self) -> usize {
        usize::from(self.fixed()[field::SACK_WORDS])
    }
    /// Bytes of header, SACK bitmap included.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.sack_words() * 8
    }
    /// Connection id.
    pub fn conn_id(&self) -> u32 {
        be32(self.fixed(), field::CONN_ID)
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
    pub fn sack_word(&self, i: usize) -> u64 {
        let at = HEADER_LEN + i * 8;
        be64(self.buffer.as_ref(), at..at + 8)
    }
    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Whether the CRC-32C over everything after the CRC field matches it.
    pub fn crc_ok(&self) -> bool {
        self.crc() == crc32c(&self.buffer.as_ref()[field::CRC.end..])
    }
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
    /// Connection id.
    pub conn_id: u32,
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
    /// The latest transmission number received from the peer (zero: none yet).
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
        if flags & !flags::ALL != 0 || b[field::RESERVED] != 0 || be16(b, field::RESERVED2) != 0 {
            return Err(WireError::Malformed(
                "undefined flags or reserved bytes set",
            ));
        }
        let sack_words = h.sack_words();
        if sack_words > MAX_SACK_WORDS {
            return Err(WireError::Malformed("sack bitmap too long"));
        }
        let repr = HeaderRepr {
            flags,
            conn_id: be32(b, field::CONN_ID),
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

    /// Writes the header and a SACK bitmap of `sack.len()` words (at most
    /// [`MAX_SACK_WORDS`]) into `out`, with a zero CRC field; returns the header's
    /// length. See [`seal`] and [`seal_packet`] for the CRC.
    pub fn emit(&self, out: &mut [u8], sack: &[u64]) -> Option<usize> {
        if sack.len() > MAX_SACK_WORDS {
            return None;
        }
        let len = HEADER_LEN + sack.len() * 8;
        let out = out.get_mut(..len)?;
        let (fixed, bitmap) = out.split_at_mut(HEADER_LEN);
        let b: &mut [u8; HEADER_LEN] = fixed.try_into().ok()?;
        b[field::VERSION] = VERSION;
        b[field::FLAGS] = self.flags;
        b[field::SACK_WORDS] = sack.len() as u8;
        b[field::RESERVED] = 0;
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
        b[field::RESERVED2].copy_from_slice(&[0, 0]);
        b[field::CRC].copy_from_slice(&[0; 4]);
        for (chunk, word) in bitmap.chunks_exact_mut(8).zip(sack) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        Some(len)
    }
}

/// Fills in the CRC-32C of an emitted header followed by `payload` (which may live
/// elsewhere: the header and payload are gathered, not copied together).
pub fn seal(header: &mut [u8], payload: &[u8]) {
    let crc = compute_crc(header, payload);
    header[field::CRC].copy_from_slice(&crc.to_be_bytes());
}

/// Fills in the CRC-32C of a whole packet (header and payload together) in one pass.
pub fn seal_packet(packet: &mut [u8]) {
    let crc = crc32c(&packet[field::CRC.end..]);
    packet[field::CRC].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    const SACK: [u64; 2] = [0x8000_0000_0000_0001, 0x0102_0304_0506_0708];

    fn repr() -> HeaderRepr {
        HeaderRepr {
            flags: flags::DATA | flags::ACK_NOW,
            conn_id: 0x0102_0304,
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
            1, 0x05, 2, 0, // version, flags, sack words, reserved
            1, 2, 3, 4, // conn id
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
            (1, 5, 2, 92)
        );
        assert_eq!(
            (h.conn_id(), h.src_incarnation(), h.dst_incarnation()),
            (0x0102_0304, 7, 9)
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
            repr().emit(&mut out[..91], &SACK),
            None,
            "too small a buffer"
        );
    }

    #[test]
    fn crc_covers_header_and_gathered_payload() {
        let mut header = vec![0u8; MAX_HEADER_LEN];
        let n = repr().emit(&mut header, &SACK).unwrap();
        seal(&mut header[..n], b"payload");
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
        seal_packet(&mut whole);
        assert!(Header::new_checked(&whole[..]).unwrap().crc_ok());
        assert_eq!(&whole[..4], &reference.checksum(&whole[4..]).to_be_bytes());
    }

    #[test]
    fn impossible_lens_and_values() {
        let b = bytes();
        assert_eq!(
            Header::new_checked(&b[..75]).unwrap_err(),
            WireError::Truncated { len: 75, need: 76 }
        );
        assert_eq!(
            Header::new_checked(&b[..90]).unwrap_err(),
            WireError::Truncated { len: 90, need: 92 }
        );
        let parse = |b: &[u8]| HeaderRepr::parse(&Header::new_checked(b).unwrap());
        let mut v = b.clone();
        v[4] = 2;
        assert_eq!(parse(&v), Err(WireError::Version(2)));
        for (at, value) in [(5, 0x40), (7, 1), (75, 1)] {
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
        v[12..20].fill(0);
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "zero incarnation"
        );
        let mut v = b.clone();
        v[52..56].copy_from_slice(&3u32.to_be_bytes());
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "fragment index = count"
        );
        let mut v = b.clone();
        v[64..68].fill(0);
        assert!(
            matches!(parse(&v), Err(WireError::Malformed(_))),
            "data without tx"
        );
    }

    #[test]
    fn serial_arithmetic_wraps() {
        assert!(seq_lt(u32::MAX, 0));
        assert!(seq_lt(5, 6) && !seq_lt(6, 5) && !seq_lt(5, 5));
        assert!(seq_le(5, 5) && seq_le(u32::MAX - 3, 2));
    }
}
