//! The proxy's fault core: what happens to the datagrams of one direction, with no I/O.
//!
//! A [`FaultPipe`] takes datagrams in ([`FaultPipe::push`]) with the time they arrived, and
//! hands them out when they are due ([`FaultPipe::poll_transmit`]); [`FaultPipe::poll_timeout`]
//! says when to call again. The decisions (drop, flip a bit, duplicate, delay, hold back) come
//! from the fabric's seeded [`FaultInjector`], one generator per direction, so the same seed
//! and the same order of arrival give the same decisions; the time never comes from a clock
//! but from the `now` the driver passes in. Unit tests drive it in virtual time.
//!
//! Methods, in the order a driver calls them: [`FaultPipe::push`] for every datagram read,
//! then [`FaultPipe::poll_transmit`] until it returns `None`, then sleep until
//! [`FaultPipe::poll_timeout`] or the next datagram. Getters: [`FaultPipe::counters`],
//! [`FaultPipe::pending`]. At exit, [`FaultPipe::discard`].
//!
//! Reordering holds a datagram back until `reorder_gap` later datagrams of the same flow
//! (the same tag) have overtaken it, or until `reorder_hold` has passed, whichever comes
//! first: a held datagram is always overtaken when traffic flows, not only when a later one
//! happens to arrive within a fixed delay. Delay and jitter put every datagram on a timer
//! heap ordered by due time and arrival; jitter can therefore reorder too, as netem's does.

use myri_device::Time;
use myri_device::fabric::FaultConfig;
use myri_device::fabric::fault::{BadProbability, FaultInjector};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// How one direction of the proxy treats its datagrams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipeConfig {
    /// Loss, corruption, duplication, reordering, delay and jitter. Only the independent
    /// rates, the delay and the jitter are used (burst loss too, if set); `reorder_delay`
    /// is replaced by [`PipeConfig::reorder_hold`].
    pub faults: FaultConfig,
    /// How many later datagrams of the same flow overtake a held one before it goes (1 or more).
    pub reorder_gap: u32,
    /// The longest a datagram is held back for reordering when no later one comes.
    pub reorder_hold: Duration,
    /// The most bytes waiting in the pipe (delayed or held); datagrams beyond are dropped
    /// and counted as `queue_full`.
    pub queue_limit_bytes: usize,
}

impl Default for PipeConfig {
    fn default() -> PipeConfig {
        PipeConfig {
            faults: FaultConfig::default(),
            reorder_gap: 1,
            reorder_hold: Duration::from_millis(10),
            queue_limit_bytes: 64 << 20,
        }
    }
}

impl PipeConfig {
    /// A pipe that forwards every datagram unchanged.
    pub fn clean() -> PipeConfig {
        PipeConfig::default()
    }

    /// Checks the probabilities and the reorder gap.
    pub fn validate(&self) -> Result<(), PipeConfigError> {
        self.faults.validate()?;
        if self.reorder_gap == 0 {
            return Err(PipeConfigError::ZeroGap);
        }
        Ok(())
    }
}

/// A pipe configuration that cannot be.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum PipeConfigError {
    /// A probability outside `[0, 1]`.
    #[error(transparent)]
    Probability(#[from] BadProbability),
    /// A reorder gap of zero would hold nothing back.
    #[error("the reorder gap must be at least 1 datagram")]
    ZeroGap,
}

/// What one direction did, counted. Every datagram received ends in exactly one of
/// `dropped`, `queue_full`, `unsent_at_exit`, the pending ones, or `forwarded` (which also
/// counts the extra copies of `duplicated`):
/// `received = dropped + queue_full + unsent_at_exit + pending + forwarded - duplicated`,
/// where the copies of a duplicated datagram still pending count in `pending`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PipeCounters {
    /// Datagrams that came in.
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Dropped by the loss setting.
    pub dropped: u64,
    /// Dropped because the pipe already held `queue_limit_bytes`.
    pub queue_full: u64,
    /// Datagrams with one bit flipped (empty datagrams have no bit to flip and are not).
    pub corrupted: u64,
    /// Datagrams sent twice (each adds one to `forwarded`).
    pub duplicated: u64,
    /// Datagrams given a non-zero delay by `delay` and `jitter`.
    pub delayed: u64,
    /// Datagrams held back for reordering.
    pub reorder_held: u64,
    /// Held datagrams that at least one later datagram of their flow overtook.
    pub reordered: u64,
    /// Held datagrams that went when their hold time ran out, overtaken by none.
    pub reorder_unmatched: u64,
    /// Datagrams handed out to be sent, copies included.
    pub forwarded: u64,
    /// Their bytes.
    pub forwarded_bytes: u64,
    /// Datagrams still in the pipe when it was discarded.
    pub unsent_at_exit: u64,
}

/// A datagram that is due: send `bytes` to the flow `tag`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit<T> {
    /// The flow it belongs to.
    pub tag: T,
    /// The bytes, with any corruption applied.
    pub bytes: Vec<u8>,
}

/// What [`FaultPipe::push`] decided for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Dropped by the loss setting.
    Dropped,
    /// Dropped because the pipe is full.
    QueueFull,
    /// Queued to go out.
    Queued {
        /// The bit flipped, counted from the first byte's most significant bit.
        flipped_bit: Option<usize>,
        /// Whether a second copy goes out too.
        duplicated: bool,
        /// Whether it will be held back for reordering.
        held: bool,
        /// Its delay from delay and jitter.
        delay: Duration,
    },
}

struct Entry<T> {
    /// Arrival number; copies share their original's.
    seq: u64,
    /// Whether this is the extra copy of a duplicated datagram.
    copy: bool,
    /// Whether it is to be held back for reordering when it comes due.
    reorder: bool,
    tag: T,
    bytes: Vec<u8>,
}

struct Timed<T> {
    due: Time,
    entry: Entry<T>,
}

impl<T> Timed<T> {
    fn key(&self) -> (Time, u64, bool) {
        (self.due, self.entry.seq, self.entry.copy)
    }
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
/// Reversed, so that the max-heap pops the earliest due first (then the earliest arrival).
impl<T> Ord for Timed<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

struct Held<T> {
    entry: Entry<T>,
    deadline: Time,
    overtaken: u32,
}

/// One direction of the proxy: fault decisions, the delay heap and the held datagrams.
/// `T` names a flow (the proxy uses a session number).
pub struct FaultPipe<T> {
    config: PipeConfig,
    injector: FaultInjector,
    next_seq: u64,
    queued_bytes: usize,
    timed: BinaryHeap<Timed<T>>,
    held: Vec<Held<T>>,
    ready: VecDeque<Entry<T>>,
    counters: PipeCounters,
}

impl<T: Clone + PartialEq> FaultPipe<T> {
    /// A pipe whose decisions draw from the generator for `(seed, stream)` (see
    /// [`myri_device::fabric::fault::mix_seed`]); the proxy uses stream 0 towards the server
    /// and 1 towards the clients.
    pub fn new(config: PipeConfig, seed: u64, stream: u64) -> FaultPipe<T> {
        let faults = FaultConfig {
            reorder_delay: config.reorder_hold,
            flap: None,
            drop_first_after_init: false,
            ..config.faults
        };
        FaultPipe {
            config,
            injector: FaultInjector::new(faults, seed, stream),
            next_seq: 0,
            queued_bytes: 0,
            timed: BinaryHeap::new(),
            held: Vec::new(),
            ready: VecDeque::new(),
            counters: PipeCounters::default(),
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> &PipeCounters {
        &self.counters
    }

    /// Datagrams waiting in the pipe (delayed, held or due), copies included.
    pub fn pending(&self) -> usize {
        self.timed.len() + self.held.len() + self.ready.len()
    }

    /// Takes in one datagram of flow `tag` that arrived at `now`, and decides its fate.
    pub fn push(&mut self, now: Time, tag: T, mut bytes: Vec<u8>) -> Fate {
        self.counters.received += 1;
        self.counters.received_bytes += bytes.len() as u64;
        let verdict = self.injector.judge();
        if verdict.drop.is_some() {
            self.counters.dropped += 1;
            return Fate::Dropped;
        }
        let copies = if verdict.duplicate { 2 } else { 1 };
        if self.queued_bytes + copies * bytes.len() > self.config.queue_limit_bytes {
            self.counters.queue_full += 1;
            return Fate::QueueFull;
        }
        let flipped_bit = match verdict.flip {
            Some(r) if !bytes.is_empty() => {
                let bit = (r % (bytes.len() as u64 * 8)) as usize;
                bytes[bit / 8] ^= 0x80 >> (bit % 8);
                self.counters.corrupted += 1;
                Some(bit)
            }
            _ => None,
        };
        if !verdict.delay.is_zero() {
            self.counters.delayed += 1;
        }
        let held = verdict.reorder.is_some();
        if held {
            self.counters.reorder_held += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let due = now + verdict.delay;
        if verdict.duplicate {
            self.counters.duplicated += 1;
            self.enqueue(Timed {
                due,
                entry: Entry {
                    seq,
                    copy: true,
                    reorder: held,
                    tag: tag.clone(),
                    bytes: bytes.clone(),
                },
            });
        }
        self.enqueue(Timed {
            due,
            entry: Entry {
                seq,
                copy: false,
                reorder: held,
                tag,
                bytes,
            },
        });
        Fate::Queued {
            flipped_bit,
            duplicated: verdict.duplicate,
            held,
            delay: verdict.delay,
        }
    }

    fn enqueue(&mut self, timed: Timed<T>) {
        self.queued_bytes += timed.entry.bytes.len();
        self.timed.push(timed);
    }

    /// The next datagram due at `now`, if any.
    pub fn poll_transmit(&mut self, now: Time) -> Option<Transmit<T>> {
        loop {
            if let Some(entry) = self.ready.pop_front() {
                return Some(self.hand_out(entry));
            }
            if let Some(i) = self.held.iter().position(|h| h.deadline <= now) {
                let held = self.held.remove(i);
                self.count_release(&held);
                return Some(self.hand_out(held.entry));
            }
            if self.timed.peek().is_none_or(|t| t.due > now) {
                return None;
            }
            let Timed { entry, .. } = self.timed.pop()?;
            if entry.reorder {
                self.held.push(Held {
                    entry,
                    deadline: now + self.config.reorder_hold,
                    overtaken: 0,
                });
                continue;
            }
            // This datagram overtakes every held one of its flow that arrived before it;
            // those overtaken enough go right after it, in arrival order.
            let gap = self.config.reorder_gap;
            let mut released: Vec<Held<T>> = Vec::new();
            let mut i = 0;
            while i < self.held.len() {
                let h = &mut self.held[i];
                if h.entry.tag == entry.tag && h.entry.seq < entry.seq {
                    h.overtaken += 1;
                    if h.overtaken >= gap {
                        released.push(self.held.remove(i));
                        continue;
                    }
                }
                i += 1;
            }
            released.sort_by_key(|h| (h.entry.seq, h.entry.copy));
            for h in released {
                self.count_release(&h);
                self.ready.push_back(h.entry);
            }
            return Some(self.hand_out(entry));
        }
    }

    fn count_release(&mut self, held: &Held<T>) {
        if held.entry.copy {
            return;
        }
        if held.overtaken > 0 {
            self.counters.reordered += 1;
        } else {
            self.counters.reorder_unmatched += 1;
        }
    }

    fn hand_out(&mut self, entry: Entry<T>) -> Transmit<T> {
        self.queued_bytes -= entry.bytes.len();
        self.counters.forwarded += 1;
        self.counters.forwarded_bytes += entry.bytes.len() as u64;
        Transmit {
            tag: entry.tag,
            bytes: entry.bytes,
        }
    }

    /// When [`FaultPipe::poll_transmit`] will next have something, if anything is waiting.
    pub fn poll_timeout(&self) -> Option<Time> {
        if !self.ready.is_empty() {
            return Some(Time::ZERO);
        }
        let held = self.held.iter().map(|h| h.deadline).min();
        let timed = self.timed.peek().map(|t| t.due);
        match (held, timed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Throws away everything still waiting, counting it in `unsent_at_exit`.
    pub fn discard(&mut self) {
        self.counters.unsent_at_exit += self.pending() as u64;
        self.timed.clear();
        self.held.clear();
        self.ready.clear();
        self.queued_bytes = 0;
    }
}

#[cfg(test)]
#[path = "pipe_tests.rs"]
mod tests;
