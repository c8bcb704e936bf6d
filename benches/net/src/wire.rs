//! What `myri serve` and its clients say to each other, inside the transport's messages.
//!
//! Every message starts with a kind byte:
//!
//! ```text
//! 'P' ping:    [kind][round: u8][seq: u48 LE][payload...]   echoed back unchanged
//! 'D' data:    [kind][round: u8][seq: u48 LE][payload...]   counted (and checked) by the server
//! 'C' control: [kind][JSON of Control]                      hello, stream start/end, bye...
//! ```
//!
//! A ping or data message is at least [`HEADER_LEN`] bytes. With `verify`, the payload is
//! a pattern drawn from the session's seed and the message's sequence number
//! ([`fill_pattern`]), and the size of message `seq` of a stream is [`SizeSpec::size_of`],
//! so the server checks every byte and every length without being told them. The same
//! framing is used by the plain references over bare UDP and the bare shared-memory ring.

use serde::{Deserialize, Serialize};

/// Bytes of a ping or data message's header.
pub const HEADER_LEN: usize = 8;
/// Kind byte of a ping.
pub const KIND_PING: u8 = b'P';
/// Kind byte of a stream's data message.
pub const KIND_DATA: u8 = b'D';
/// Kind byte of a control message.
pub const KIND_CONTROL: u8 = b'C';
/// Version of this protocol; a server refuses a client of another.
pub const VERSION: u32 = 1;
/// Largest sequence number a header carries.
pub const MAX_SEQ: u64 = (1 << 48) - 1;

/// Writes a ping or data header into the first [`HEADER_LEN`] bytes of `buf`.
///
/// # Panics
/// If `buf` is shorter than [`HEADER_LEN`] (callers size messages at least that).
pub fn put_header(buf: &mut [u8], kind: u8, round: u8, seq: u64) {
    let word = (seq & MAX_SEQ) << 16 | u64::from(round) << 8 | u64::from(kind);
    buf[..HEADER_LEN].copy_from_slice(&word.to_le_bytes());
}

/// A ping or data header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// [`KIND_PING`] or [`KIND_DATA`].
    pub kind: u8,
    /// The round it belongs to (modulo 256).
    pub round: u8,
    /// Its sequence number in the round.
    pub seq: u64,
}

/// Reads a ping or data header; `None` for a control message or a runt.
pub fn header(buf: &[u8]) -> Option<Header> {
    let word = u64::from_le_bytes(buf.get(..HEADER_LEN)?.try_into().ok()?);
    let kind = word as u8;
    matches!(kind, KIND_PING | KIND_DATA).then_some(Header {
        kind,
        round: (word >> 8) as u8,
        seq: word >> 16,
    })
}

/// The control message in `buf`, if it is one. `Err` for a control message that does
/// not parse (the text says why).
pub fn control(buf: &[u8]) -> Option<Result<Control, String>> {
    let (&kind, json) = buf.split_first()?;
    (kind == KIND_CONTROL).then(|| serde_json::from_slice(json).map_err(|e| e.to_string()))
}

/// A control message as bytes.
pub fn encode_control(c: &Control) -> Vec<u8> {
    let mut v = vec![KIND_CONTROL];
    serde_json::to_writer(&mut v, c).expect("a control message always serializes");
    v
}

/// How the sizes of a stream's messages are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeSpec {
    /// Every message has this many bytes.
    Fixed(usize),
    /// Sizes drawn from the seed: an exponent `e` uniform in `0..=log2(max)`, then a size
    /// uniform below `2^e` (so small and large messages are both common, about a
    /// twentieth of `max` on average for a mebibyte), at least [`HEADER_LEN`], at most
    /// `max`; every 1000th message (seq 999, 1999, ...) is exactly `max`.
    Random {
        /// The largest size.
        max: usize,
    },
}

impl SizeSpec {
    /// The size of message `seq` of a stream seeded with `seed`.
    pub fn size_of(&self, seed: u64, seq: u64) -> usize {
        match *self {
            SizeSpec::Fixed(n) => n,
            SizeSpec::Random { max } => {
                if seq % 1000 == 999 {
                    return max.max(HEADER_LEN);
                }
                let r = splitmix(seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let bits = usize::BITS - max.max(1).leading_zeros(); // log2(max) + 1
                let e = (r % u64::from(bits)) as u32;
                let below = 1u64 << e;
                let size = (r >> 8) % below;
                (size as usize).clamp(HEADER_LEN, max.max(HEADER_LEN))
            }
        }
    }

    /// The largest size this spec gives.
    pub fn max(&self) -> usize {
        match *self {
            SizeSpec::Fixed(n) => n,
            SizeSpec::Random { max } => max.max(HEADER_LEN),
        }
    }
}

/// SplitMix64: a small, good mixing function.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pattern_word(key: u64, i: u64) -> u64 {
    // A multiply-xorshift of the word index: cheap, and different for every position.
    let x = (key ^ i).wrapping_mul(0x2545_F491_4F6C_DD1D);
    x ^ (x >> 29)
}

fn pattern_key(seed: u64, seq: u64) -> u64 {
    splitmix(seed ^ seq.rotate_left(32))
}

/// Fills `payload` (the bytes after the header) with message `seq`'s pattern.
pub fn fill_pattern(payload: &mut [u8], seed: u64, seq: u64) {
    let key = pattern_key(seed, seq);
    let mut chunks = payload.chunks_exact_mut(8);
    let mut i = 0;
    for c in &mut chunks {
        c.copy_from_slice(&pattern_word(key, i).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&pattern_word(key, i).to_le_bytes()[..n]);
}

/// Whether `payload` holds message `seq`'s pattern.
pub fn check_pattern(payload: &[u8], seed: u64, seq: u64) -> bool {
    let key = pattern_key(seed, seq);
    let mut chunks = payload.chunks_exact(8);
    let mut i = 0;
    for c in &mut chunks {
        if c != pattern_word(key, i).to_le_bytes() {
            return false;
        }
        i += 1;
    }
    let rest = chunks.remainder();
    rest == &pattern_word(key, i).to_le_bytes()[..rest.len()]
}

/// The plain references a server offers beside its transport endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct References {
    /// Port of the bare UDP socket (echo and sink), on the transport socket's address.
    pub udp_port: Option<u16>,
    /// Port of the TCP listener (sink), on the transport socket's address.
    pub tcp_port: Option<u16>,
    /// Path of the bare shared-memory ring region (`shm://` servers).
    pub shm_ring: Option<String>,
}

/// What a server counted for one client session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCounters {
    /// Pings echoed.
    pub echoed: u64,
    /// Data messages received.
    pub received: u64,
    /// Bytes of data messages received.
    pub bytes: u64,
    /// Data messages that came out of order, twice, or from another round (reliable
    /// mode: must be zero).
    pub out_of_order: u64,
    /// Data messages of the wrong length for their sequence number.
    pub bad_length: u64,
    /// Data messages whose bytes were not the pattern (with `verify`).
    pub bad_content: u64,
    /// Messages that were neither ping, data nor a control message this server knows.
    pub malformed: u64,
}

impl SessionCounters {
    /// Errors that a reliable session must not have.
    pub fn errors(&self) -> u64 {
        self.out_of_order + self.bad_length + self.bad_content + self.malformed
    }
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Control {
    /// Client to server: a session starts.
    Hello {
        /// Protocol version ([`VERSION`]).
        version: u32,
        /// A number the client picked for this session.
        session: u64,
        /// Whether the client runs reliable.
        reliable: bool,
        /// The client endpoint's incarnation.
        incarnation: u64,
    },
    /// Server to client: the session is open.
    HelloAck {
        /// Protocol version.
        version: u32,
        /// The session number the client picked.
        session: u64,
        /// The server's endpoint incarnation.
        incarnation: u64,
        /// The references it offers.
        references: References,
    },
    /// Client to server: a stream round starts; its data messages follow.
    StreamStart {
        /// Round number (modulo 256 in data headers).
        round: u32,
        /// Messages that will be sent.
        count: u64,
        /// Their sizes.
        sizes: SizeSpec,
        /// Seed of sizes and patterns.
        seed: u64,
        /// Whether the server checks every byte.
        verify: bool,
    },
    /// Client to server: every data message of the round was sent (raw mode; reliable
    /// mode servers answer when the count is reached).
    StreamEnd {
        /// Round number.
        round: u32,
    },
    /// Server to client: the round started (`done` false), or what it delivered (`done`
    /// true: after its last message, or in answer to [`Control::StreamEnd`]).
    StreamAck {
        /// Round number.
        round: u32,
        /// Whether this answers the end of the round (not its start).
        done: bool,
        /// Data messages received in the round.
        received: u64,
        /// Their bytes.
        bytes: u64,
        /// Errors found in the round (see [`SessionCounters::errors`]).
        errors: u64,
    },
    /// Client to server: the session ends.
    Bye {
        /// The session number.
        session: u64,
    },
    /// Server to client: the session's counters; the server forgets the session.
    ByeAck {
        /// The session number.
        session: u64,
        /// What the server counted.
        counters: SessionCounters,
    },
    /// Server to client: the request was refused.
    Refused {
        /// Why.
        why: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_control_is_told_apart() {
        let mut b = [0u8; 16];
        put_header(&mut b, KIND_DATA, 7, MAX_SEQ);
        assert_eq!(
            header(&b),
            Some(Header {
                kind: KIND_DATA,
                round: 7,
                seq: MAX_SEQ
            })
        );
        assert_eq!(header(&b[..7]), None, "a runt");
        let c = encode_control(&Control::Bye { session: 3 });
        assert_eq!(header(&c), None);
        assert_eq!(control(&c), Some(Ok(Control::Bye { session: 3 })));
        assert!(matches!(control(b"C{nope"), Some(Err(_))));
        assert_eq!(control(&b), None);
    }

    #[test]
    fn patterns_check_and_catch_a_flipped_bit() {
        for len in [0, 1, 7, 8, 9, 1000] {
            let mut p = vec![0u8; len];
            fill_pattern(&mut p, 5, 77);
            assert!(check_pattern(&p, 5, 77));
            assert!(len == 0 || !check_pattern(&p, 5, 78), "another message's");
            if len > 0 {
                p[len / 2] ^= 4;
                assert!(!check_pattern(&p, 5, 77));
            }
        }
    }

    #[test]
    fn random_sizes_stay_in_bounds_and_reach_the_maximum() {
        let spec = SizeSpec::Random { max: 1 << 20 };
        let sizes: Vec<usize> = (0..10_000).map(|s| spec.size_of(9, s)).collect();
        assert!(sizes.iter().all(|&s| (HEADER_LEN..=1 << 20).contains(&s)));
        assert_eq!(sizes.iter().filter(|&&s| s == 1 << 20).count(), 10);
        assert!(
            sizes.iter().filter(|&&s| s < 1024).count() > 3000,
            "many small"
        );
        assert!(
            sizes.iter().filter(|&&s| s > 256 << 10).count() > 300,
            "many large"
        );
        let mean = sizes.iter().sum::<usize>() / sizes.len();
        assert!((20 << 10..80 << 10).contains(&mean), "mean {mean}");
        assert_eq!(sizes[123], spec.size_of(9, 123), "deterministic");
        assert_ne!(
            (0..100).map(|s| spec.size_of(9, s)).collect::<Vec<_>>(),
            (0..100).map(|s| spec.size_of(10, s)).collect::<Vec<_>>()
        );
    }
}
