//! The header the provider puts in front of every transport message: what libfabric's
//! tagged and data-carrying sends add to a message (its kind, tag and remote CQ data).
//!
//! ```text
//! offset  0   1   2   3   4 .. 12   12 .. 20
//!         'M' 'F' ver flags tag(le)  data(le)
//! ```
//!
//! Flags: 1 tagged, 2 remote CQ data, 4 more: a piece of a message longer than one
//! `shm://` slot holds (see [`crate::info::SHM_PIECE`]), with more pieces of it to follow
//! on the same ordered link; each piece repeats the header, the last has no `more`;
//! 8 continued: a piece after the first of its message. A receiver that meets a continued
//! piece with no message open drops it (the tail of a message whose start went to an
//! earlier life of this process), and one that meets a first piece or a whole message
//! with a message open drops the open one (its sender's life ended part-way through):
//! a peer that restarts never sees a message built from two.
//!
//! 16 split: a copy-free send over RPP ([`crate::endpoint`], "Sending from registered
//! memory"). The message is this header and, in the 8 bytes after it, the length of the
//! payload ([`SPLIT_LEN`] bytes in all); the payload itself is the sender's next message
//! on the same ordered link, with no header of its own (it is sent from the
//! application's memory, where there is no room for one). Never with more or continued.
//!
//! Version 3 (version 2 had no split flag, version 1 no continued flag).

/// Bytes of header in front of each message.
pub const HEADER_LEN: usize = 20;

const MAGIC: [u8; 2] = *b"MF";
const VERSION: u8 = 3;
const FLAG_TAGGED: u8 = 1;
const FLAG_DATA: u8 = 2;
const FLAG_MORE: u8 = 4;
const FLAG_CONT: u8 = 8;
const FLAG_SPLIT: u8 = 16;

/// Bytes of a split header message: the header, then the payload's length (u64, little
/// endian).
pub const SPLIT_LEN: usize = HEADER_LEN + 8;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..2;
    pub const VERSION: usize = 2;
    pub const FLAGS: usize = 3;
    pub const TAG: Range<usize> = 4..12;
    pub const DATA: Range<usize> = 12..20;
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Sent by a tagged operation (`fi_tsend` and kin); else an untagged `fi_send`.
    pub tagged: bool,
    /// The tag (0 for untagged sends).
    pub tag: u64,
    /// Remote CQ data (`fi_senddata`, `fi_injectdata`), if any.
    pub data: Option<u64>,
}

/// Where a transport message stands in the provider message it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Piece {
    /// More pieces of its message follow.
    pub more: bool,
    /// A piece after the first of its message.
    pub cont: bool,
    /// A split header: the payload is the sender's next message, bare (see the module
    /// docs; [`Header::split_len`] reads its length).
    pub split: bool,
}

impl Piece {
    /// A whole message: no piece before, none after.
    pub const WHOLE: Piece = Piece {
        more: false,
        cont: false,
        split: false,
    };

    /// A piece of a message longer than one transport message: `more` follow, `cont`
    /// after the first.
    pub const fn part(more: bool, cont: bool) -> Piece {
        Piece {
            more,
            cont,
            split: false,
        }
    }
}

/// Why a message's header did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than a header.
    Short,
    /// Not this provider's magic or version.
    Foreign,
    /// Flags this version does not define.
    BadFlags,
}

impl Header {
    /// Parses the header at the front of `msg`; the payload follows at [`HEADER_LEN`].
    pub fn parse(msg: &[u8]) -> Result<Header, HeaderError> {
        Self::parse_piece(msg).map(|(h, _)| h)
    }

    /// Parses the header of a message or of a piece of one: the header, and where the
    /// piece stands in its message.
    pub fn parse_piece(msg: &[u8]) -> Result<(Header, Piece), HeaderError> {
        if msg.len() < HEADER_LEN {
            return Err(HeaderError::Short);
        }
        if msg[field::MAGIC] != MAGIC || msg[field::VERSION] != VERSION {
            return Err(HeaderError::Foreign);
        }
        let flags = msg[field::FLAGS];
        if flags & !(FLAG_TAGGED | FLAG_DATA | FLAG_MORE | FLAG_CONT | FLAG_SPLIT) != 0
            || (flags & FLAG_SPLIT != 0 && flags & (FLAG_MORE | FLAG_CONT) != 0)
        {
            return Err(HeaderError::BadFlags);
        }
        let word = |r: core::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&msg[r]);
            u64::from_le_bytes(b)
        };
        let header = Header {
            tagged: flags & FLAG_TAGGED != 0,
            tag: word(field::TAG),
            data: (flags & FLAG_DATA != 0).then(|| word(field::DATA)),
        };
        let piece = Piece {
            more: flags & FLAG_MORE != 0,
            cont: flags & FLAG_CONT != 0,
            split: flags & FLAG_SPLIT != 0,
        };
        Ok((header, piece))
    }

    /// The payload length a split header message announces: `None` unless `msg` is a
    /// split header of exactly [`SPLIT_LEN`] bytes.
    pub fn split_len(msg: &[u8]) -> Option<u64> {
        let (_, piece) = Self::parse_piece(msg).ok()?;
        if !piece.split || msg.len() != SPLIT_LEN {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&msg[HEADER_LEN..SPLIT_LEN]);
        Some(u64::from_le_bytes(b))
    }

    /// The split header message for a payload of `payload_len` bytes sent bare after it.
    pub fn emit_split(&self, payload_len: u64) -> [u8; SPLIT_LEN] {
        let mut out = [0u8; SPLIT_LEN];
        let split = Piece {
            split: true,
            ..Piece::WHOLE
        };
        self.emit_piece(&mut out, split);
        out[HEADER_LEN..].copy_from_slice(&payload_len.to_le_bytes());
        out
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out` (which must hold
    /// them).
    pub fn emit(&self, out: &mut [u8]) {
        self.emit_piece(out, Piece::WHOLE);
    }

    /// [`Header::emit`] for a piece of a message.
    pub fn emit_piece(&self, out: &mut [u8], piece: Piece) {
        let out = &mut out[..HEADER_LEN];
        out[field::MAGIC].copy_from_slice(&MAGIC);
        out[field::VERSION] = VERSION;
        out[field::FLAGS] = (u8::from(self.tagged) * FLAG_TAGGED)
            | (u8::from(self.data.is_some()) * FLAG_DATA)
            | (u8::from(piece.more) * FLAG_MORE)
            | (u8::from(piece.cont) * FLAG_CONT)
            | (u8::from(piece.split) * FLAG_SPLIT);
        out[field::TAG].copy_from_slice(&self.tag.to_le_bytes());
        out[field::DATA].copy_from_slice(&self.data.unwrap_or(0).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: [u8; HEADER_LEN] = [
        b'M', b'F', 3, 3, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 7, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn parse_and_emit_the_fixture() {
        let h = Header::parse(&FIXTURE).unwrap();
        assert_eq!(
            h,
            Header {
                tagged: true,
                tag: 0x1122_3344_5566_7788,
                data: Some(7)
            }
        );
        let mut out = [0u8; HEADER_LEN];
        h.emit(&mut out);
        assert_eq!(out, FIXTURE);
    }

    #[test]
    fn impossible_headers() {
        assert_eq!(Header::parse(&FIXTURE[..19]), Err(HeaderError::Short));
        let mut bad = FIXTURE;
        bad[0] = b'X';
        assert_eq!(Header::parse(&bad), Err(HeaderError::Foreign));
        let mut bad = FIXTURE;
        bad[3] = 32;
        assert_eq!(Header::parse(&bad), Err(HeaderError::BadFlags));
        bad[3] = 16 | 4;
        assert_eq!(
            Header::parse(&bad),
            Err(HeaderError::BadFlags),
            "split and more"
        );
    }

    #[test]
    fn pieces_say_whether_more_follow() {
        let h = Header::parse(&FIXTURE).unwrap();
        let mut out = [0u8; HEADER_LEN];
        let first = Piece::part(true, false);
        h.emit_piece(&mut out, first);
        assert_eq!(out[3], 7);
        assert_eq!(Header::parse_piece(&out), Ok((h, first)));
        let last = Piece::part(false, true);
        h.emit_piece(&mut out, last);
        assert_eq!(out[3], 11);
        assert_eq!(Header::parse_piece(&out), Ok((h, last)));
        assert_eq!(Header::parse_piece(&FIXTURE), Ok((h, Piece::WHOLE)));
        let mut old = FIXTURE;
        old[2] = 1;
        assert_eq!(Header::parse(&old), Err(HeaderError::Foreign), "version 1");
        old[2] = 2;
        assert_eq!(Header::parse(&old), Err(HeaderError::Foreign), "version 2");
    }

    #[test]
    fn a_split_header_announces_its_bare_payload() {
        let h = Header::parse(&FIXTURE).unwrap();
        let m = h.emit_split(1 << 20);
        assert_eq!(m[3], 3 | 16);
        let split = Piece {
            split: true,
            ..Piece::WHOLE
        };
        assert_eq!(Header::parse_piece(&m), Ok((h, split)));
        assert_eq!(Header::split_len(&m), Some(1 << 20));
        assert_eq!(Header::split_len(&m[..SPLIT_LEN - 1]), None, "short");
        assert_eq!(Header::split_len(&FIXTURE), None, "not split");
    }
}
