//! The single-copy path between two processes of one host: the receiver reads a large
//! message straight from the sender's buffer into the posted receive's buffers with
//! `process_vm_readv` (cross-memory attach, "CMA"), instead of the two copies of the
//! region's slots (into a slot, out of it).
//!
//! # Which messages
//!
//! RDM sends over an `shm://` link or an auto-shm region of at least [`CMA_MIN`] bytes,
//! from one buffer the application keeps until the send completes (not an inject), that
//! ask for a completion or count on a counter, when nothing of an earlier message waits
//! to go on that link in pieces, toward a peer whose probe succeeded (below).
//! Everything else goes as before ([`crate::endpoint`]): shorter messages, several
//! buffers (`fi_sendv`), injects, sends to self, `udp://`, and every peer for which the
//! probe failed, was refused (`FI_MYRI_CMA=0` on either side) or is not done yet.
//!
//! Single copy is not free: on the development VM `process_vm_readv` copies at about
//! half a user-space `memcpy`'s speed, so it wins where the copying path's slot
//! bookkeeping costs too (`fi_pingpong`: 64 KiB 7.3 against 12.1 us) and loses where it
//! does not (an MPI ping-pong that touches every byte: 64 KiB 20 against 17 us).
//! `FI_MYRI_CMA=0` keeps the copying path; RESULTS.md has the figures.
//!
//! # The probe: a pid is never trusted alone
//!
//! Containers may share `/dev/shm` across pid namespaces, and pids are reused. A sender
//! holds a random nonce in a word of its memory ([`NonceWord`], per endpoint). Its first
//! large send to a peer goes by copy and sends a hello before it (a control message,
//! [`crate::wire::Control`]): its pid, the word's address, the nonce. The receiver reads
//! that address of that pid with `process_vm_readv`; only if it reads the nonce does it
//! note the peer (pid, word, nonce) and answer yes. The sender sends descriptors to that
//! peer only after the yes, and the receiver reads for a descriptor only when its nonce
//! is the noted one: the pid comes from the probe, never from the descriptor. Either
//! side forgets all of it when the peer's life ends (closed, dead, restarted: a new
//! process is probed again). `process_vm_readv` forbidden (seccomp: `EPERM`, `ENOSYS`),
//! another pid namespace, ptrace rules: the probe fails and that pair copies.
//!
//! # A send
//!
//! The sender puts a descriptor on the ring instead of the bytes (nonce, id, address,
//! length: [`crate::wire::CmaDescriptor`]), in order with the copied messages of the
//! pair (one ring). The receiver matches it when it takes it, as it would the message:
//!
//! - Matched: it reads `min(length, room)` bytes into the receive's buffers, writes the
//!   receive's completion (`FI_ETRUNC` when the message was longer), and answers done.
//! - Unexpected: it holds the descriptor, unread, in the unexpected queue, in order
//!   with the pair's other messages (`FI_PEEK` reports it, `FI_CLAIM` reads it into
//!   the claiming receive, `FI_DISCARD` drops it unread and answers done). A receive
//!   posted later reads it straight into its buffers and answers done: one copy, as in
//!   a ping-pong whose answer arrives before the receive for it is posted (the sender's
//!   done and the answer travel together). After 256 progress passes of the receiver
//!   with no such receive (and not claimed), it is read
//!   into a heap buffer, waits there as a copied message would, and the sender is
//!   answered. Holding it for ever would turn every unexpected large send into a
//!   rendezvous: two ranks that both send before they receive (legal with a provider
//!   that buffers, and the copied path buffers) would wait on each other for ever. The
//!   bound is in passes, not time: a receiver that does not progress holds its senders
//!   either way.
//!
//! The sender's send completes when the done comes back (libfabric lets a provider hold
//! the buffer until the send's completion). A done with an error completes it with
//! `FI_EIO` and turns the path off toward that peer (for its life). The peer's life
//! ending first completes every send waiting for a done with `FI_EIO`.
//!
//! # Reads
//!
//! Every read also reads the sender's nonce word, after the bytes (one system call, the
//! word last): a sender's endpoint clears its word when it closes, so a read whose word
//! still holds the nonce read the bytes while the endpoint, and the application's
//! buffer, were live, and a pid now someone else's fails the same check. A read that
//! fails (the sender gone: `ESRCH` or the word cleared; an unmapped address: `EFAULT`;
//! fewer bytes than asked) delivers nothing: a receive it had matched on arrival goes
//! back to the posted queue when the sender is gone (as when a sender dies part-way
//! through a message in pieces), else (and for a held message's receive) completes with
//! `FI_EIO`; the sender's send completes with `FI_EIO` too. A held message whose
//! sender's life ends is dropped unread. A descriptor that does not parse, names no
//! probed nonce or a length beyond the largest message is refused alike. Each is counted
//! ([`crate::endpoint::PathCounts::cma_failed`]); none reads into memory but the posted
//! buffer's first `room` bytes or a heap buffer of the descriptor's length.

use std::sync::atomic::{AtomicU64, Ordering};

/// Least message sent single-copy: shorter ones are copied through the region's slots.
///
/// Measured with `fi_pingpong -p myri -e rdm` over `shm://` on the 2-core VM (see
/// RESULTS.md): copying wins at 4 KiB, single copy is ahead by 8% at 8 KiB (within the
/// rounds' spread) and by a third at 16 KiB, the least size where it wins clearly;
/// below, the system call and the done message cost what the second copy saves.
pub const CMA_MIN: usize = 16 << 10;

/// Why a single-copy read, or the descriptor that asked for it, failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmaError {
    /// The kernel refuses the read here (`EPERM`, `EACCES`, `ENOSYS`: seccomp, ptrace
    /// rules); the errno.
    Forbidden(i32),
    /// No such process (`ESRCH`): the sender died.
    Gone,
    /// An address not mapped in the sender's process or this one (`EFAULT`).
    Fault,
    /// Fewer bytes read than asked.
    Short {
        /// Bytes read.
        got: usize,
        /// Bytes asked for (the guard word included).
        want: usize,
    },
    /// The sender's word no longer holds its nonce: its endpoint closed, or the pid is
    /// another process's now.
    Stale,
    /// Another errno.
    Other(i32),
    /// A descriptor whose body does not parse.
    Malformed,
    /// A descriptor whose nonce is no probed peer's (forged, or of an earlier life).
    Unverified,
    /// A descriptor's length beyond the largest message, or an address range that wraps.
    TooLong,
}

impl CmaError {
    fn from_errno(e: i32) -> CmaError {
        match e {
            libc::ESRCH => CmaError::Gone,
            libc::EFAULT => CmaError::Fault,
            libc::EPERM | libc::EACCES | libc::ENOSYS => CmaError::Forbidden(e),
            e => CmaError::Other(e),
        }
    }

    /// Whether the sender's life (or its endpoint's) ended: the message is dropped as a
    /// dead sender's message in pieces is.
    pub fn sender_gone(&self) -> bool {
        matches!(self, CmaError::Gone | CmaError::Stale)
    }
}

impl std::fmt::Display for CmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmaError::Forbidden(e) => write!(f, "process_vm_readv refused (errno {e})"),
            CmaError::Gone => f.write_str("the sender's process is gone"),
            CmaError::Fault => f.write_str("an address not mapped"),
            CmaError::Short { got, want } => write!(f, "read {got} of {want} bytes"),
            CmaError::Stale => f.write_str("the sender's nonce word changed"),
            CmaError::Other(e) => write!(f, "process_vm_readv failed (errno {e})"),
            CmaError::Malformed => f.write_str("a descriptor that does not parse"),
            CmaError::Unverified => f.write_str("a descriptor of no probed peer"),
            CmaError::TooLong => f.write_str("a descriptor beyond the largest message"),
        }
    }
}

impl std::error::Error for CmaError {}

/// Where a single-copy read takes its bytes: the sender's process and buffer, and its
/// nonce word, read after the bytes (see "Reads" in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRead {
    /// The sender's pid, as its probe found it.
    pub pid: i32,
    /// The buffer's address in the sender's process.
    pub addr: u64,
    /// The address of the sender's nonce word.
    pub word: u64,
    /// The nonce the word must still hold.
    pub nonce: u64,
}

/// A peer whose probe succeeded: where its nonce word is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// Its pid.
    pub pid: i32,
    /// Its nonce word's address.
    pub word: u64,
    /// Its nonce.
    pub nonce: u64,
}

/// Where a sender stands with a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CmaTx {
    /// Not probed yet (or the peer's life ended since).
    #[default]
    Unknown,
    /// Hello sent, no answer yet: copies meanwhile.
    Probing,
    /// The peer read the nonce: large sends go single-copy.
    On,
    /// Refused, failed, or a read failed: copies for the rest of the peer's life.
    Off,
}

/// A word of this process's memory holding a random nonce while the endpoint lives
/// (cleared when it closes): what a peer's probe and every read check.
pub struct NonceWord {
    nonce: u64,
    word: Box<AtomicU64>,
}

impl NonceWord {
    /// A new word with a random, non-zero nonce (SipHash's random keys, drawn from the
    /// OS, over the pid and the clock).
    pub fn new() -> NonceWord {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        h.write_u128(now);
        let nonce = h.finish() | 1;
        NonceWord {
            nonce,
            word: Box::new(AtomicU64::new(nonce)),
        }
    }

    /// The nonce (the word holds it until cleared).
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    /// The word's address in this process.
    pub fn addr(&self) -> u64 {
        std::ptr::from_ref::<AtomicU64>(&self.word) as usize as u64
    }

    /// Clears the word: reads of this endpoint's buffers fail from now on.
    /// SeqCst: the store is visible before anything the application does after the
    /// endpoint closed (freeing a buffer a peer may still be reading).
    pub fn clear(&self) {
        self.word.store(0, Ordering::SeqCst);
    }

    /// Puts another value in the word (tests: a probe that must fail).
    #[cfg(test)]
    pub fn spoil(&self) {
        self.word.fetch_xor(0x5a5a, Ordering::SeqCst);
    }
}

impl Default for NonceWord {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NonceWord {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Reads `dst.len()` bytes from `from` into `dst`, then checks the nonce word.
pub fn read(from: &RemoteRead, dst: &mut [u8]) -> Result<(), CmaError> {
    crate::capi::cma::read_into(from, dst)
}

/// Probes process `pid`: whether `word` there holds `nonce`.
pub fn probe(pid: i32, word: u64, nonce: u64) -> Result<(), CmaError> {
    let from = RemoteRead {
        pid,
        addr: word,
        word,
        nonce,
    };
    let mut first = [0u8; 8];
    read(&from, &mut first)?;
    if u64::from_ne_bytes(first) != nonce {
        return Err(CmaError::Stale);
    }
    Ok(())
}

/// The outcome of a read of `n` bytes and the guard word: `got` as the system call
/// returned it.
pub(crate) fn check(
    got: Result<usize, i32>,
    n: usize,
    guard: [u8; 8],
    nonce: u64,
) -> Result<(), CmaError> {
    let got = got.map_err(CmaError::from_errno)?;
    if got != n + 8 {
        return Err(CmaError::Short { got, want: n + 8 });
    }
    if u64::from_ne_bytes(guard) != nonce {
        return Err(CmaError::Stale);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_reads_this_processs_word_and_a_wrong_nonce_fails() {
        let w = NonceWord::new();
        let pid = std::process::id() as i32;
        assert_ne!(w.nonce(), 0);
        assert_eq!(probe(pid, w.addr(), w.nonce()), Ok(()));
        assert_eq!(probe(pid, w.addr(), w.nonce() ^ 1), Err(CmaError::Stale));
        assert_eq!(probe(pid, 8, w.nonce()), Err(CmaError::Fault), "unmapped");
        w.clear();
        assert_eq!(probe(pid, w.addr(), w.nonce()), Err(CmaError::Stale));
    }

    #[test]
    fn reads_check_length_and_guard() {
        let w = NonceWord::new();
        let src: Vec<u8> = (0..10_001).map(|i| (i % 251) as u8).collect();
        let from = RemoteRead {
            pid: std::process::id() as i32,
            addr: src.as_ptr() as usize as u64 + 3,
            word: w.addr(),
            nonce: w.nonce(),
        };
        let mut dst = vec![0u8; 9_998];
        read(&from, &mut dst).unwrap();
        assert!(dst[..] == src[3..]);
        let stale = RemoteRead {
            nonce: w.nonce() ^ 4,
            ..from
        };
        assert_eq!(read(&stale, &mut dst), Err(CmaError::Stale));
        let unmapped = RemoteRead { addr: 64, ..from };
        assert_eq!(read(&unmapped, &mut dst), Err(CmaError::Fault));
        assert_eq!(
            check(Ok(5), 10, [0; 8], 0),
            Err(CmaError::Short { got: 5, want: 18 })
        );
        assert_eq!(check(Err(libc::ESRCH), 1, [0; 8], 0), Err(CmaError::Gone));
        assert_eq!(
            check(Err(libc::EPERM), 1, [0; 8], 0),
            Err(CmaError::Forbidden(libc::EPERM))
        );
        assert!(CmaError::Gone.sender_gone() && !CmaError::Fault.sender_gone());
    }
}
