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
//! 16 split: a send over RPP whose payload goes without a header of its own
//! ([`crate::endpoint`], "Sending from registered memory" and "Large messages over
//! `udp://`"). The message is this header and, in the 8 bytes after it, the length of
//! the payload ([`SPLIT_LEN`] bytes in all, a length of 0 is malformed); the payload
//! itself is the sender's next message on the same ordered link, or its next messages
//! (bare pieces of one packet each, in order, as many as make that length), with no
//! header of their own (sent from the application's memory, where there is no room for
//! one, or built to fit a packet each). Never with more or continued.
//!
//! 32 single-copy: a message's descriptor instead of its bytes, between two processes of
//! one host ([`crate::cma`]): the header and, in the 32 bytes after it, the sender's
//! nonce, the send's id, and the address and length of its buffer in the sender's
//! process ([`CMA_DESC_LEN`] bytes in all). The receiver reads the bytes from there with
//! `process_vm_readv` and answers with a done control message. Tagged and data flags as
//! for a whole message; never with more, continued or split.
//!
//! 64 control: no message for the application, a single-copy path's hello, probe answer
//! or done ([`Control`]): the header (no other flag) and 32 bytes, a kind byte, 7 zero
//! bytes and three words ([`CONTROL_LEN`] bytes in all). A receiver takes it out of band,
//! between the pieces of a message too.
//!
//! Version 5 (version 4 sent a split payload as one message only, version 3 had no
//! single-copy or control flags, version 2 no split flag, version 1 no continued flag).

/// Bytes of header in front of each message.
pub const HEADER_LEN: usize = 20;

const MAGIC: [u8; 2] = *b"MF";
const VERSION: u8 = 5;
const FLAG_TAGGED: u8 = 1;
const FLAG_DATA: u8 = 2;
const FLAG_MORE: u8 = 4;
const FLAG_CONT: u8 = 8;
const FLAG_SPLIT: u8 = 16;
const FLAG_CMA: u8 = 32;
const FLAG_CONTROL: u8 = 64;

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
    /// A single-copy descriptor ([`CmaDescriptor`]) instead of the payload.
    pub cma: bool,
    /// A control message ([`Control`]), no message for the application.
    pub control: bool,
}

impl Piece {
    /// A whole message: no piece before, none after.
    pub const WHOLE: Piece = Piece {
        more: false,
        cont: false,
        split: false,
        cma: false,
        control: false,
    };

    /// A piece of a message longer than one transport message: `more` follow, `cont`
    /// after the first.
    pub const fn part(more: bool, cont: bool) -> Piece {
        Piece {
            more,
            cont,
            ..Piece::WHOLE
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
        let all = FLAG_TAGGED | FLAG_DATA | FLAG_MORE | FLAG_CONT | FLAG_SPLIT | FLAG_CMA;
        let whole_only = FLAG_SPLIT | FLAG_CMA;
        if (flags & !all != 0 && flags != FLAG_CONTROL)
            || (flags & whole_only).count_ones() > 1
            || (flags & whole_only != 0 && flags & (FLAG_MORE | FLAG_CONT) != 0)
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
            cma: flags & FLAG_CMA != 0,
            control: flags == FLAG_CONTROL,
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
            | (u8::from(piece.split) * FLAG_SPLIT)
            | (u8::from(piece.cma) * FLAG_CMA)
            | (u8::from(piece.control) * FLAG_CONTROL);
        out[field::TAG].copy_from_slice(&self.tag.to_le_bytes());
        out[field::DATA].copy_from_slice(&self.data.unwrap_or(0).to_le_bytes());
    }
}

/// Bytes of a single-copy descriptor message: the header, then nonce, id, address and
/// length (u64 each, little endian).
pub const CMA_DESC_LEN: usize = HEADER_LEN + 32;

/// Bytes of a control message: the header, a kind byte, 7 zero bytes and three words.
pub const CONTROL_LEN: usize = HEADER_LEN + 32;

/// A single-copy send's descriptor: where the receiver reads the message's bytes in the
/// sender's process (see [`crate::cma`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaDescriptor {
    /// The sender's nonce (its hello's): names the life the descriptor is of.
    pub nonce: u64,
    /// The send's id, echoed in its done.
    pub id: u64,
    /// The buffer's address in the sender's process.
    pub addr: u64,
    /// The message's length.
    pub len: u64,
}

/// A control message of the single-copy path (see [`crate::cma`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The sender offers single-copy reads: its pid, the address of a word in its memory
    /// and the nonce that word holds.
    Hello {
        /// The sender's process id (in its own pid namespace).
        pid: u32,
        /// The address of the word holding `nonce`.
        word: u64,
        /// A random number, the word's value while the sender's endpoint lives.
        nonce: u64,
    },
    /// The receiver's answer to a hello: whether it read the nonce at that address.
    Probed {
        /// The hello's nonce.
        nonce: u64,
        /// Read and matched: descriptors may follow.
        ok: bool,
    },
    /// The receiver is done with a descriptor's bytes: the send may complete.
    Done {
        /// The descriptor's nonce.
        nonce: u64,
        /// The descriptor's id.
        id: u64,
        /// 0 when the bytes were read, else the positive `FI_E*` code the send completes
        /// with.
        status: u32,
    },
}

/// Why a descriptor or control message did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Not exactly as long as its kind is.
    Length,
    /// A control kind this version does not define, or non-zero padding.
    Kind,
}

mod body {
    use core::ops::Range;
    pub const KIND: usize = super::HEADER_LEN;
    pub const PAD: Range<usize> = super::HEADER_LEN + 1..super::HEADER_LEN + 8;
    pub const W0: Range<usize> = super::HEADER_LEN + 8..super::HEADER_LEN + 16;
    pub const W1: Range<usize> = super::HEADER_LEN + 16..super::HEADER_LEN + 24;
    pub const W2: Range<usize> = super::HEADER_LEN + 24..super::HEADER_LEN + 32;
    /// A descriptor's words.
    pub const NONCE: Range<usize> = super::HEADER_LEN..super::HEADER_LEN + 8;
    pub const ID: Range<usize> = W0;
    pub const ADDR: Range<usize> = W1;
    pub const LEN: Range<usize> = W2;
}

fn word(msg: &[u8], r: core::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&msg[r]);
    u64::from_le_bytes(b)
}

const KIND_HELLO: u8 = 1;
const KIND_PROBED: u8 = 2;
const KIND_DONE: u8 = 3;

impl CmaDescriptor {
    /// Parses a message whose header has the single-copy flag.
    pub fn parse(msg: &[u8]) -> Result<CmaDescriptor, BodyError> {
        if msg.len() != CMA_DESC_LEN {
            return Err(BodyError::Length);
        }
        Ok(CmaDescriptor {
            nonce: word(msg, body::NONCE),
            id: word(msg, body::ID),
            addr: word(msg, body::ADDR),
            len: word(msg, body::LEN),
        })
    }

    /// Writes the message (`header` with the single-copy flag, then the words) into the
    /// first [`CMA_DESC_LEN`] bytes of `out`.
    pub fn emit(&self, header: &Header, out: &mut [u8]) {
        let cma = Piece {
            cma: true,
            ..Piece::WHOLE
        };
        header.emit_piece(out, cma);
        out[body::NONCE].copy_from_slice(&self.nonce.to_le_bytes());
        out[body::ID].copy_from_slice(&self.id.to_le_bytes());
        out[body::ADDR].copy_from_slice(&self.addr.to_le_bytes());
        out[body::LEN].copy_from_slice(&self.len.to_le_bytes());
    }
}

impl Control {
    /// Parses a message whose header has the control flag.
    pub fn parse(msg: &[u8]) -> Result<Control, BodyError> {
        if msg.len() != CONTROL_LEN {
            return Err(BodyError::Length);
        }
        if msg[body::PAD].iter().any(|&b| b != 0) {
            return Err(BodyError::Kind);
        }
        let (a, b, c) = (
            word(msg, body::W0),
            word(msg, body::W1),
            word(msg, body::W2),
        );
        match msg[body::KIND] {
            KIND_HELLO => Ok(Control::Hello {
                pid: u32::try_from(a).map_err(|_| BodyError::Kind)?,
                word: b,
                nonce: c,
            }),
            KIND_PROBED if b <= 1 && c == 0 => Ok(Control::Probed {
                nonce: a,
                ok: b == 1,
            }),
            KIND_DONE => Ok(Control::Done {
                nonce: a,
                id: b,
                status: u32::try_from(c).map_err(|_| BodyError::Kind)?,
            }),
            _ => Err(BodyError::Kind),
        }
    }

    /// The whole message: a header with the control flag alone, then the body.
    pub fn emit(&self) -> [u8; CONTROL_LEN] {
        let mut out = [0u8; CONTROL_LEN];
        let control = Piece {
            control: true,
            ..Piece::WHOLE
        };
        Header::default().emit_piece(&mut out, control);
        let (kind, a, b, c) = match *self {
            Control::Hello { pid, word, nonce } => (KIND_HELLO, u64::from(pid), word, nonce),
            Control::Probed { nonce, ok } => (KIND_PROBED, nonce, u64::from(ok), 0),
            Control::Done { nonce, id, status } => (KIND_DONE, nonce, id, u64::from(status)),
        };
        out[body::KIND] = kind;
        out[body::W0].copy_from_slice(&a.to_le_bytes());
        out[body::W1].copy_from_slice(&b.to_le_bytes());
        out[body::W2].copy_from_slice(&c.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: [u8; HEADER_LEN] = [
        b'M', b'F', 5, 3, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 7, 0, 0, 0, 0, 0, 0, 0,
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
        bad[3] = 128;
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
        for version in 1..=4 {
            old[2] = version;
            assert_eq!(
                Header::parse(&old),
                Err(HeaderError::Foreign),
                "version {version}"
            );
        }
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

    #[test]
    fn a_descriptor_round_trips_and_checks_its_length() {
        let h = Header::parse(&FIXTURE).unwrap();
        let d = CmaDescriptor {
            nonce: 0xdead_beef_0123_4567,
            id: 9,
            addr: 0x7fff_0000_1003,
            len: 65_537,
        };
        let mut m = [0u8; CMA_DESC_LEN];
        d.emit(&h, &mut m);
        assert_eq!(m[3], 3 | 32);
        let (h2, piece) = Header::parse_piece(&m).unwrap();
        assert_eq!(h2, h);
        assert!(piece.cma && !piece.more && !piece.cont && !piece.split && !piece.control);
        assert_eq!(CmaDescriptor::parse(&m), Ok(d));
        assert_eq!(
            CmaDescriptor::parse(&m[..CMA_DESC_LEN - 1]),
            Err(BodyError::Length)
        );
        let mut bad = m;
        bad[3] |= 4;
        assert_eq!(
            Header::parse(&bad),
            Err(HeaderError::BadFlags),
            "cma and more"
        );
        bad[3] = 32 | 16;
        assert_eq!(
            Header::parse(&bad),
            Err(HeaderError::BadFlags),
            "cma and split"
        );
    }

    #[test]
    fn control_messages_round_trip_and_impossible_ones_fail() {
        let all = [
            Control::Hello {
                pid: 4242,
                word: 0x5555_0000_0008,
                nonce: 77,
            },
            Control::Probed {
                nonce: 77,
                ok: true,
            },
            Control::Probed {
                nonce: 77,
                ok: false,
            },
            Control::Done {
                nonce: 77,
                id: 3,
                status: 5,
            },
        ];
        for c in all {
            let m = c.emit();
            let (h, piece) = Header::parse_piece(&m).unwrap();
            assert_eq!(h, Header::default());
            assert!(piece.control && !piece.cma);
            assert_eq!(Control::parse(&m), Ok(c));
        }
        let m = all[0].emit();
        assert_eq!(
            Control::parse(&m[..CONTROL_LEN - 1]),
            Err(BodyError::Length)
        );
        let mut bad = m;
        bad[HEADER_LEN] = 9;
        assert_eq!(Control::parse(&bad), Err(BodyError::Kind), "kind");
        let mut bad = m;
        bad[HEADER_LEN + 3] = 1;
        assert_eq!(Control::parse(&bad), Err(BodyError::Kind), "padding");
        let mut bad = m;
        bad[HEADER_LEN + 12] = 1;
        assert_eq!(
            Control::parse(&bad),
            Err(BodyError::Kind),
            "a pid beyond u32"
        );
        let mut bad = m;
        bad[3] = 64 | 1;
        assert_eq!(
            Header::parse(&bad),
            Err(HeaderError::BadFlags),
            "control and tagged"
        );
    }
}
