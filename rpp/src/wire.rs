//! The RPP packet header: a view over bytes ([`Header`]) and its parsed form
//! ([`HeaderRepr`]), in the manner of smoltcp's wire modules.
//!
//! ```text
//!  0  version (1)       1  flags            2  sack count       3  reserved (0)
//!  4  connection id
//!  8  sender's incarnation                         (u64)
//! 16  the incarnation the sender believes the receiver has (u64, 0 = not yet known)
//! 24  sequence number of this packet (with DATA)
//! 28  cumulative ack: every sequence number before it was received
//! 32  receiver credit: packets the sender may send beyond the cumulative ack
//! 36  D-SACK: 1 + a sequence number just received twice (0 = none)
//! 40  message id (u64)
//! 48  fragment index          52  fragment count          56  message length
//! 60  ack delay, microseconds (u16)                          62  reserved (0)
//! 64  CRC-32C of the whole packet with this field zero
//! 68  SACK ranges: count x [start, end) of sequence numbers received beyond the ack
//! ..  payload
//! ```
//!
//! All fields are big-endian. Sequence numbers are 32-bit and compared with serial
//! arithmetic ([`seq_lt`]).

use crc::{CRC_32_ISCSI, Crc, Table};
use thiserror::Error;

/// The version this crate speaks.
pub const VERSION: u8 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 68;
/// The most SACK ranges one header carries.
pub const MAX_SACK: usize = 4;
/// Bytes of one SACK range.
pub const SACK_LEN: usize = 8;
/// The most header bytes a packet may need (fixed part and all SACK ranges).
pub const MAX_HEADER_LEN: usize = HEADER_LEN + MAX_SACK * SACK_LEN;

/// CRC-32C (Castagnoli), as iSCSI and SCTP use it.
pub const CRC32C: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISCSI);

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
    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 1;
    pub const SACK_COUNT: usize = 2;
    pub const RESERVED: usize = 3;
    pub const CONN_ID: Field = 4..8;
    pub const SRC_INC: Field = 8..16;
    pub const DST_INC: Field = 16..24;
    pub const SEQ: Field = 24..28;
    pub const ACK: Field = 28..32;
    pub const CREDIT: Field = 32..36;
    pub const DSACK: Field = 36..40;
    pub const MSG_ID: Field = 40..48;
    pub const FRAG_INDEX: Field = 48..52;
    pub const FRAG_COUNT: Field = 52..56;
    pub const MSG_LEN: Field = 56..60;
    pub const ACK_DELAY: Field = 60..62;
    pub const RESERVED2: Field = 62..64;
    pub const CRC: Field = 64..68;
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

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b.try_into().expect("4 bytes"))
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().expect("8 bytes"))
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps bytes without checking them.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps bytes after checking they hold the fixed header and its SACK ranges.
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

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Version.
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    /// Number of SACK ranges.
    pub fn sack_count(&self) -> usize {
        usize::from(self.b()[field::SACK_COUNT])
    }
    /// Bytes of header, SACK ranges included.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.sack_count() * SACK_LEN
    }
    /// Connection id.
    pub fn conn_id(&self) -> u32 {
        be32(&self.b()[field::CONN_ID])
    }
    /// Sender's incarnation.
    pub fn src_incarnation(&self) -> u64 {
        be64(&self.b()[field::SRC_INC])
    }
    /// Receiver's incarnation as the sender believes it.
    pub fn dst_incarnation(&self) -> u64 {
        be64(&self.b()[field::DST_INC])
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(&self.b()[field::SEQ])
    }
    /// Cumulative ack.
    pub fn ack(&self) -> u32 {
        be32(&self.b()[field::ACK])
    }
    /// Receiver credit.
    pub fn credit(&self) -> u32 {
        be32(&self.b()[field::CREDIT])
    }
    /// D-SACK field.
    pub fn dsack(&self) -> u32 {
        be32(&self.b()[field::DSACK])
    }
    /// Message id.
    pub fn msg_id(&self) -> u64 {
        be64(&self.b()[field::MSG_ID])
    }
    /// Fragment index.
    pub fn frag_index(&self) -> u32 {
        be32(&self.b()[field::FRAG_INDEX])
    }
    /// Fragment count.
    pub fn frag_count(&self) -> u32 {
        be32(&self.b()[field::FRAG_COUNT])
    }
    /// Message length.
    pub fn msg_len(&self) -> u32 {
        be32(&self.b()[field::MSG_LEN])
    }
    /// Ack delay in microseconds.
    pub fn ack_delay_us(&self) -> u16 {
        u16::from_be_bytes(self.b()[field::ACK_DELAY].try_into().expect("2 bytes"))
    }
    /// CRC field.
    pub fn crc(&self) -> u32 {
        be32(&self.b()[field::CRC])
    }
    /// SACK range `i` as `[start, end)`.
    pub fn sack(&self, i: usize) -> (u32, u32) {
        let at = HEADER_LEN + i * SACK_LEN;
        (be32(&self.b()[at..at + 4]), be32(&self.b()[at + 4..at + 8]))
    }
    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }

    /// Whether the CRC-32C over the whole packet (with the CRC field taken as zero)
    /// matches.
    pub fn crc_ok(&self) -> bool {
        self.crc() == compute_crc(self.b(), &[])
    }
}

/// The CRC-32C of `header` (whose CRC field is taken as zero) followed by `payload`.
pub fn compute_crc(header: &[u8], payload: &[u8]) -> u32 {
    let mut d = CRC32C.digest();
    d.update(&header[..field::CRC.start]);
    d.update(&[0; 4]);
    d.update(&header[field::CRC.end..]);
    d.update(payload);
    d.finalize()
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
    /// How long the acknowledgement was held, in microseconds.
    pub ack_delay_us: u16,
    /// SACK ranges.
    pub sack: [(u32, u32); MAX_SACK],
    /// How many of `sack` are used.
    pub sack_count: u8,
}

impl HeaderRepr {
    /// Parses and checks a header (but not the CRC).
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Result<HeaderRepr, WireError> {
        if h.version() != VERSION {
            return Err(WireError::Version(h.version()));
        }
        let b = h.buffer.as_ref();
        if h.flags() & !flags::ALL != 0 || b[field::RESERVED] != 0 || b[field::RESERVED2] != [0, 0]
        {
            return Err(WireError::Malformed(
                "undefined flags or reserved bytes set",
            ));
        }
        if h.sack_count() > MAX_SACK {
            return Err(WireError::Malformed("too many sack ranges"));
        }
        if h.src_incarnation() == 0 {
            return Err(WireError::Malformed("zero incarnation"));
        }
        let data = h.flags() & flags::DATA != 0;
        if data && (h.frag_count() == 0 || h.frag_index() >= h.frag_count()) {
            return Err(WireError::Malformed("fragment index outside the count"));
        }
        let mut sack = [(0, 0); MAX_SACK];
        for (i, s) in sack.iter_mut().enumerate().take(h.sack_count()) {
            *s = h.sack(i);
            if !seq_lt(s.0, s.1) {
                return Err(WireError::Malformed("empty or inverted sack range"));
            }
        }
        Ok(HeaderRepr {
            flags: h.flags(),
            conn_id: h.conn_id(),
            src_incarnation: h.src_incarnation(),
            dst_incarnation: h.dst_incarnation(),
            seq: h.seq(),
            ack: h.ack(),
            credit: h.credit(),
            dsack: h.dsack(),
            msg_id: h.msg_id(),
            frag_index: h.frag_index(),
            frag_count: h.frag_count(),
            msg_len: h.msg_len(),
            ack_delay_us: h.ack_delay_us(),
            sack,
            sack_count: h.sack_count() as u8,
        })
    }

    /// Bytes this header takes.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + usize::from(self.sack_count) * SACK_LEN
    }

    /// Writes the header into `out` with a zero CRC field; returns its length. See
    /// [`seal`] for the CRC.
    pub fn emit(&self, out: &mut [u8]) -> Option<usize> {
        let len = self.header_len();
        let out = out.get_mut(..len)?;
        out[field::VERSION] = VERSION;
        out[field::FLAGS] = self.flags;
        out[field::SACK_COUNT] = self.sack_count;
        out[field::RESERVED] = 0;
        out[field::CONN_ID].copy_from_slice(&self.conn_id.to_be_bytes());
        out[field::SRC_INC].copy_from_slice(&self.src_incarnation.to_be_bytes());
        out[field::DST_INC].copy_from_slice(&self.dst_incarnation.to_be_bytes());
        out[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        out[field::ACK].copy_from_slice(&self.ack.to_be_bytes());
        out[field::CREDIT].copy_from_slice(&self.credit.to_be_bytes());
        out[field::DSACK].copy_from_slice(&self.dsack.to_be_bytes());
        out[field::MSG_ID].copy_from_slice(&self.msg_id.to_be_bytes());
        out[field::FRAG_INDEX].copy_from_slice(&self.frag_index.to_be_bytes());
        out[field::FRAG_COUNT].copy_from_slice(&self.frag_count.to_be_bytes());
        out[field::MSG_LEN].copy_from_slice(&self.msg_len.to_be_bytes());
        out[field::ACK_DELAY].copy_from_slice(&self.ack_delay_us.to_be_bytes());
        out[field::RESERVED2].copy_from_slice(&[0, 0]);
        out[field::CRC].copy_from_slice(&[0; 4]);
        for i in 0..usize::from(self.sack_count) {
            let at = HEADER_LEN + i * SACK_LEN;
            out[at..at + 4].copy_from_slice(&self.sack[i].0.to_be_bytes());
            out[at + 4..at + 8].copy_from_slice(&self.sack[i].1.to_be_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> HeaderRepr {
        let mut sack = [(0, 0); MAX_SACK];
        sack[0] = (10, 12);
        sack[1] = (15, 20);
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
            ack_delay_us: 250,
            sack,
            sack_count: 2,
        }
    }

    fn bytes() -> Vec<u8> {
        let mut b = vec![
            1, 0x05, 2, 0, // version, flags, sack count, reserved
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
            0, 250, 0, 0, // ack delay, reserved
            0, 0, 0, 0, // crc (zero before sealing)
            0, 0, 0, 10, 0, 0, 0, 12, 0, 0, 0, 15, 0, 0, 0, 20, // sack ranges
        ];
        b.extend_from_slice(b"payload");
        b
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(
            (h.version(), h.flags(), h.sack_count(), h.header_len()),
            (1, 5, 2, 84)
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
        assert_eq!((h.ack_delay_us(), h.sack(1)), (250, (15, 20)));
        assert_eq!(h.payload(), b"payload");
    }

    #[test]
    fn construct_and_round_trip() {
        let mut out = vec![0u8; 200];
        let n = repr().emit(&mut out).unwrap();
        assert_eq!(&out[..n], &bytes()[..n]);
        assert_eq!(
            HeaderRepr::parse(&Header::new_checked(&bytes()[..]).unwrap()).unwrap(),
            repr()
        );
    }

    #[test]
    fn crc_covers_header_and_gathered_payload() {
        let mut header = vec![0u8; MAX_HEADER_LEN];
        let n = repr().emit(&mut header).unwrap();
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
    fn impossible_lens_and_values() {
        let b = bytes();
        assert_eq!(
            Header::new_checked(&b[..67]).unwrap_err(),
            WireError::Truncated { len: 67, need: 68 }
        );
        assert_eq!(
            Header::new_checked(&b[..80]).unwrap_err(),
            WireError::Truncated { len: 80, need: 84 }
        );
        let parse = |b: &[u8]| HeaderRepr::parse(&Header::new_checked(b).unwrap());
        let mut v = b.clone();
        v[0] = 2;
        assert_eq!(parse(&v), Err(WireError::Version(2)));
        let mut v = b.clone();
        v[1] = 0x40;
        assert!(matches!(parse(&v), Err(WireError::Malformed(_))));
        let mut v = b.clone();
        v[3] = 1;
        assert!(matches!(parse(&v), Err(WireError::Malformed(_))));
        let mut v = b.clone();
        v[2] = 5;
        v.resize(200, 0);
        assert!(matches!(parse(&v), Err(WireError::Malformed(_))));
        let mut v = b.clone();
        v[8..16].fill(0);
        assert!(matches!(parse(&v), Err(WireError::Malformed(_))));
        let mut v = b.clone();
        v[48..52].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(parse(&v), Err(WireError::Malformed(_))));
        let mut v = b.clone();
        v[68..72].copy_from_slice(&12u32.to_be_bytes());
        assert!(matches!(parse(&v), Err(WireError::Malformed(_))));
    }

    #[test]
    fn serial_arithmetic_wraps() {
        assert!(seq_lt(u32::MAX, 0));
        assert!(seq_lt(5, 6) && !seq_lt(6, 5) && !seq_lt(5, 5));
        assert!(seq_le(5, 5) && seq_le(u32::MAX - 3, 2));
    }
}
