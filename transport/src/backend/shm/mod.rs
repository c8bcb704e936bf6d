//! `shm://name`: two processes of one host through a shared-memory region under
//! `/dev/shm`, with a lock-free single-producer/single-consumer ring per direction.
//!
//! # Sides, slots and rings
//!
//! The region (file `/dev/shm/myri-NAME`) has two sides. The first process to open it
//! creates it and takes side 0; the next takes side 1. Each side owns, for the direction
//! it sends in, a slab of [`SLOTS`] slots of [`SLOT_LEN`] bytes (its registered memory), a
//! state word per slot, and a ring of descriptors (`slot`, `len`). `alloc` claims a free
//! slot of the sender's slab, the application writes its message there, and `send` marks
//! the slot as the peer's and publishes its descriptor: the receiver reads the message in
//! place and, when the application drops the view, stores 0 in the slot's state word,
//! handing the slot back (seed 000, Send Channel: the sender learns what it may reuse from
//! a count the other side publishes, and reaps when it runs out). No byte is copied.
//!
//! # Room
//!
//! Before a region's pages are touched, the file system's free space is checked against
//! what the file lacks (an opener checks an existing region too: one of another build,
//! or made elsewhere): on a tmpfs too small for it (containers often get a 64 MiB
//! `/dev/shm`) the open fails with [`crate::OpenError::ShmNoSpace`] (the region, the
//! bytes it lacks, the bytes free, the remedy) instead of a `SIGBUS` at the first touch
//! of a page the file system cannot back. A creator that fails so removes its half-made
//! file (a peer waiting for its header sees it gone and starts again). The file stays
//! sparse: pages are allocated as they are first used (see `ensure_room` for why not
//! ahead), so another writer filling the file system between the check and a first touch
//! can still cause a `SIGBUS`.
//!
//! # Owners and epochs
//!
//! A side records its owner as one word, pid and process start time (a zombie counts as
//! dead). Whoever opens a region checks the owners: a side whose process is gone (or that
//! was closed) is taken over; when both are live the open fails with
//! [`crate::OpenError::AddrInUse`]. Every attach bumps the side's epoch, and every descriptor carries
//! the sender's epoch and the epoch of the receiver it was meant for. An owner claims its
//! side (the owner word) before it bumps the epoch, so it says when it is done: its
//! [`layout::READY`] word, the owner word again, stored after the bump. The other side
//! takes it for its peer only then (else it would name the epoch before, and the
//! newcomer would skip its first messages: the MPI start-up hang). A newcomer skips
//! (without touching) what was meant for the dead owner of its side, the survivor drops
//! what the dead process sent once it knows of the death, and takes back its slots the
//! dead process held or never read. Nothing here waits without a bound: a region that
//! never finishes initializing is an error after a second.
//!
//! # Long and short messages, reliable mode
//!
//! A message longer than a slot goes as fragments, one slot each, the descriptors of all
//! but the last flagged [`MORE`]; the receiver copies them into one buffer, in order.
//! With native reliability a message of at most 64 bytes goes inside its ring record,
//! after a descriptor flagged [`INLINE`](descriptor::INLINE), and the receiver
//! publishes how far it took such messages on the ring head's cache line (see
//! [`native`]).
//! Reliable mode runs no RPP here (see [`native`]): the ring loses nothing and keeps
//! order between live processes, and a death is seen through the owner words.
//!
//! # Layout
//!
//! All words are little-endian u64, offsets in bytes: see [`layout`].

mod descriptor;
mod native;

use descriptor::{DESCRIPTOR, MORE, descriptor};

use super::{
    Backend, BackendCounters, BackendEvent, Incoming, NativeReliability, RemoteAddr, Sent,
};
use crate::buffer::{Buf, BufKind, RecvBuf, RecvKind, ShmRecv};
use crate::error::{
    InsertError, OpenError, PeerFailure, RegionProblem, SendError, SendErrorKind, io_err,
};
use crate::url::{Address, Scheme};
use myri_ring::raw::{self, Consumer, Producer, Region, RingPlace, SlotArea};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes of a slot: the largest datagram.
pub const SLOT_LEN: usize = 65_536;
/// Slots each side owns.
pub const SLOTS: usize = 64;
/// Bytes of each descriptor ring's data.
pub const RING_CAPACITY: usize = 4096;

/// Where things are in a region.
pub mod layout {
    /// `MAGIC` once the creator has finished writing the header.
    pub const MAGIC_AT: usize = 0;
    /// The magic word.
    pub const MAGIC: u64 = u64::from_le_bytes(*b"MYRISHM1");
    /// Format version.
    pub const VERSION_AT: usize = 8;
    /// The version this crate writes (3: descriptors carry epochs, a fragment flag and
    /// an inline flag; the receiver publishes how far it took inline messages; 4: a
    /// side's [`READY`] word).
    pub const VERSION: u64 = 4;
    /// Bytes of a slot.
    pub const SLOT_LEN_AT: usize = 16;
    /// Slots per side.
    pub const SLOTS_AT: usize = 24;
    /// Bytes of each ring's data.
    pub const RING_AT: usize = 32;
    /// Side `s`'s record starts at `SIDE_AT + s * SIDE_LEN`.
    pub const SIDE_AT: usize = 256;
    /// Bytes of a side record.
    pub const SIDE_LEN: usize = 128;
    /// In a side record: the owner, `pid << 32 | (start time & 0xffff_ffff)`, 0 if vacant.
    pub const OWNER: usize = 0;
    /// In a side record: bumped at every attach.
    pub const EPOCH: usize = 8;
    /// In a side record: the owner's endpoint incarnation.
    pub const INCARNATION: usize = 16;
    /// In a side record: how the owner runs: [`MODE_RAW`], [`MODE_RPP`] or
    /// [`MODE_NATIVE`].
    pub const MODE: usize = 24;
    /// In a side record: the owner word again, stored once the owner finished attaching
    /// (its epoch bumped), 0 while it has not or after it closed. The owner word alone
    /// is claimed before the epoch is bumped: a peer that took a live owner for attached
    /// then would name the epoch before, and the newcomer would skip its messages.
    pub const READY: usize = 32;
    /// Mode word: raw datagrams.
    pub const MODE_RAW: u64 = 1;
    /// Mode word: RPP over the rings.
    pub const MODE_RPP: u64 = 2;
    /// Mode word: the backend's native reliability.
    pub const MODE_NATIVE: u64 = 3;
    /// Bytes of the header.
    pub const HEADER: usize = 4096;

    /// Bytes of one direction: ring, slot states, slab (each page-aligned).
    pub const fn direction_len(slots: usize, slot_len: usize, ring: usize) -> usize {
        page(super::raw::RING_HEADER + ring) + page(slots * 8) + slots * slot_len
    }

    /// Rounds up to a page.
    pub const fn page(n: usize) -> usize {
        n.div_ceil(4096) * 4096
    }
}

/// Directory of regions.
fn dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

/// Path of region `name`.
pub fn region_path(name: &str) -> PathBuf {
    dir().join(format!("myri-{name}"))
}

/// This process's owner word.
fn my_owner() -> u64 {
    let pid = u64::from(std::process::id());
    (pid << 32) | start_time(std::process::id()).unwrap_or(0) & 0xffff_ffff
}

/// The state letter and start time (clock ticks since boot) of process `pid`, if it
/// exists.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after = stat.rsplit_once(')')?.1.split_whitespace();
    let state = after.next()?.chars().next()?;
    Some((state, after.nth(18)?.parse().ok()?))
}

/// The start time of process `pid`, if it exists.
fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|(_, t)| t)
}

/// Whether the process an owner word names is alive: it exists, started when the word
/// says, and is neither a zombie (`Z`: exited, not yet reaped by its parent) nor dead
/// (`X`).
fn alive(owner: u64) -> bool {
    if owner == 0 {
        return false;
    }
    if !cfg!(target_os = "linux") {
        return true;
    }
    let pid = (owner >> 32) as u32;
    proc_stat(pid).is_some_and(|(state, t)| {
        t & 0xffff_ffff == owner & 0xffff_ffff && state != 'Z' && state != 'X'
    })
}

/// Hands a received slot back to its owner: stores 0 in its state word.
pub(crate) struct SlotReturn {
    state_at: usize,
}

impl SlotReturn {
    /// Gives back the slot `view` is of.
    pub(crate) fn give_back(&self, view: &myri_ring::raw::SlotView) {
        if let Some(w) = view.area().region().word(self.state_at) {
            // Release: this side's reads of the slot happen before the owner reuses it.
            w.store(0, Ordering::Release);
        }
    }
}

/// One direction's places in the region.
#[derive(Clone, Copy)]
struct Direction {
    ring: RingPlace,
    states: usize,
    slab: usize,
}

fn direction(d: usize) -> Direction {
    let base = layout::HEADER + d * layout::direction_len(SLOTS, SLOT_LEN, RING_CAPACITY);
    let ring_len = layout::page(raw::RING_HEADER + RING_CAPACITY);
    Direction {
        ring: RingPlace {
            offset: base,
            capacity: RING_CAPACITY,
        },
        states: base + ring_len,
        slab: base + ring_len + layout::page(SLOTS * 8),
    }
}

fn region_len() -> usize {
    layout::HEADER + 2 * layout::direction_len(SLOTS, SLOT_LEN, RING_CAPACITY)
}

fn side_word(side: usize, field: usize) -> usize {
    layout::SIDE_AT + side * layout::SIDE_LEN + field
}

/// A shm endpoint: one side of a region.
pub(crate) struct ShmBackend {
    name: String,
    path: PathBuf,
    region: Arc<Region>,
    side: usize,
    owner: u64,
    tx: Producer,
    rx: Consumer,
    mine: Arc<SlotArea>,
    theirs: Arc<SlotArea>,
    /// This side's epoch (the attach count of the side, this attach included).
    my_epoch: u64,
    /// The peer's owner, epoch, incarnation and mode as last seen.
    peer_owner: u64,
    peer_epoch: u64,
    peer_incarnation: u64,
    peer_mode: u64,
    /// A live owner of the other side has been seen (in its current epoch).
    peer_seen: bool,
    peer_reported_gone: bool,
    last_check: u64,
    epoch: Instant,
    events: Vec<BackendEvent>,
    counters: BackendCounters,
    /// A message whose fragments are arriving.
    assembling: Option<Vec<u8>>,
    /// Reassembly buffers given back ([`NativeReliability::recycle`]).
    spare: Vec<Vec<u8>>,
    /// Longest message reassembled; longer ones are dropped as malformed.
    max_message: usize,
    /// Dropping the rest of a message that grew too long.
    skipping: bool,
    /// Native reliability's clock discipline: progress passes since the peer was last
    /// looked at, idle passes since the clock was last read, and whether this pass
    /// received something.
    passes_since_check: u32,
    idle_passes: u32,
    received_this_pass: bool,
    /// Native reliability's state (`None` in raw and RPP modes).
    native: Option<native::NativeTx>,
}

fn bad(name: &str, problem: RegionProblem) -> OpenError {
    OpenError::BadRegion {
        name: name.to_owned(),
        problem,
    }
}

/// How an endpoint uses its side of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShmMode {
    /// Raw datagrams.
    Raw,
    /// RPP over the rings.
    Rpp,
    /// Native reliability ([`native`]), with this longest message.
    Native {
        /// Longest message sent or reassembled.
        max_message: usize,
    },
}

impl ShmMode {
    fn word(self) -> u64 {
        match self {
            ShmMode::Raw => layout::MODE_RAW,
            ShmMode::Rpp => layout::MODE_RPP,
            ShmMode::Native { .. } => layout::MODE_NATIVE,
        }
    }
}

/// Who opens a side: the owner word, the endpoint's incarnation and its mode.
#[derive(Clone, Copy)]
struct Opener {
    owner: u64,
    incarnation: u64,
    mode: ShmMode,
}

impl ShmBackend {
    fn word(&self, at: usize) -> &AtomicU64 {
        self.region
            .word(at)
            .expect("header words lie in the checked region")
    }

    /// Opens (or creates) region `name` and takes a free side, for an endpoint of
    /// `incarnation` running in `mode`.
    pub(crate) fn open(
        name: &str,
        incarnation: u64,
        mode: ShmMode,
    ) -> Result<ShmBackend, OpenError> {
        let path = region_path(name);
        let owner = my_owner();
        let me = Opener {
            owner,
            incarnation,
            mode,
        };
        for _ in 0..3 {
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => {
                    let mut region = match create(&f, name, &path) {
                        Ok(r) => r,
                        Err(e) => {
                            // Half made: a peer opening it would wait for its header.
                            let _ = std::fs::remove_file(&path);
                            return Err(e);
                        }
                    };
                    let put = |r: &mut Region, field, v: u64| {
                        r.write_at(side_word(0, field), &v.to_le_bytes())
                    };
                    put(&mut region, layout::OWNER, owner);
                    put(&mut region, layout::INCARNATION, incarnation);
                    put(&mut region, layout::MODE, mode.word());
                    put(&mut region, layout::EPOCH, 1);
                    put(&mut region, layout::READY, owner);
                    let region = Arc::new(region);
                    region
                        .word(layout::MAGIC_AT)
                        .expect("in bounds")
                        .store(layout::MAGIC, Ordering::Release);
                    return ShmBackend::attach(name, path, region, 0, me, true);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    match OpenOptions::new().read(true).write(true).open(&path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == ErrorKind::NotFound => continue,
                        Err(e) => {
                            return Err(io_err!(OpenError, "opening the shared-memory region")(e));
                        }
                    }
                }
                Err(e) => return Err(io_err!(OpenError, "creating the shared-memory region")(e)),
            };
            let region = match existing(&file, name, &path)? {
                Existing::Ready(r) => Arc::new(r),
                Existing::Abandoned => {
                    // Never initialized: its creator died half-way. Start it again.
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                // Its creator gave up and removed it: start again.
                Existing::Removed => continue,
            };
            for side in 0..2 {
                let w = region
                    .word(side_word(side, layout::OWNER))
                    .expect("in bounds");
                let cur = w.load(Ordering::Acquire);
                let free = cur == 0 || (cur != owner && !alive(cur));
                if free
                    && w.compare_exchange(cur, owner, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    return ShmBackend::attach(name, path, region, side, me, false);
                }
            }
            // Both sides of the region are used by live processes.
            return Err(OpenError::AddrInUse {
                url: format!("shm://{name}"),
            });
        }
        Err(bad(name, RegionProblem::Disappearing))
    }

    fn attach(
        name: &str,
        path: PathBuf,
        region: Arc<Region>,
        side: usize,
        me: Opener,
        fresh: bool,
    ) -> Result<ShmBackend, OpenError> {
        let ring_err = |e: raw::RingError| bad(name, RegionProblem::Ring(e));
        let out = direction(side);
        let inc = direction(1 - side);
        let (tx, _) = raw::ring(region.clone(), out.ring).map_err(ring_err)?;
        let (_, rx) = raw::ring(region.clone(), inc.ring).map_err(ring_err)?;
        let mine = SlotArea::new(region.clone(), out.slab, SLOT_LEN, SLOTS).map_err(ring_err)?;
        let theirs =
            SlotArea::read_only(region.clone(), inc.slab, SLOT_LEN, SLOTS).map_err(ring_err)?;
        let (native, max_message) = match me.mode {
            ShmMode::Native { max_message } => (Some(native::NativeTx::default()), max_message),
            _ => (None, SLOT_LEN),
        };
        let mut b = ShmBackend {
            name: name.to_owned(),
            path,
            region,
            side,
            owner: me.owner,
            tx,
            rx,
            mine,
            theirs,
            my_epoch: 1,
            peer_owner: 0,
            peer_epoch: 0,
            peer_incarnation: 0,
            peer_mode: 0,
            peer_seen: false,
            peer_reported_gone: false,
            last_check: 0,
            epoch: Instant::now(),
            events: Vec::new(),
            counters: BackendCounters::default(),
            assembling: None,
            spare: Vec::new(),
            max_message,
            skipping: false,
            passes_since_check: 0,
            idle_passes: 0,
            received_this_pass: false,
            native,
        };
        if !fresh {
            b.take_over(me);
        }
        b.adopt_peer();
        Ok(b)
    }

    /// Starts this side's life in a region used before: says who owns it now, and frees
    /// slots nobody can hold. What the peer left for an earlier owner is skipped as it is
    /// read (it names that owner's epoch), without touching its slots: the peer takes them
    /// back when it learns of the change.
    fn take_over(&mut self, me: Opener) {
        let peer = self
            .word(side_word(1 - self.side, layout::OWNER))
            .load(Ordering::Acquire);
        if !alive(peer) {
            // Nobody can hold my slots: they are all free.
            for i in 0..SLOTS {
                self.state(self.side, i).store(0, Ordering::Release);
            }
        }
        self.word(side_word(self.side, layout::INCARNATION))
            .store(me.incarnation, Ordering::Relaxed);
        self.word(side_word(self.side, layout::MODE))
            .store(me.mode.word(), Ordering::Relaxed);
        // Release: incarnation and mode are written before the epoch says a new owner came.
        self.my_epoch = self
            .word(side_word(self.side, layout::EPOCH))
            .fetch_add(1, Ordering::Release)
            .wrapping_add(1);
        // Release: the epoch is bumped before the peer may take this owner as attached.
        self.word(side_word(self.side, layout::READY))
            .store(me.owner, Ordering::Release);
    }

    /// Whether `owner`, the other side's owner word as read after `ready` (its
    /// [`layout::READY`] word, read first with Acquire), is a live process that finished
    /// attaching: then the epoch read after `ready` is its own, not its predecessor's.
    fn attached(ready: u64, owner: u64) -> bool {
        owner != 0 && ready == owner && alive(owner)
    }

    fn state(&self, side: usize, slot: usize) -> &AtomicU64 {
        self.word(direction(side).states + slot * 8)
    }

    fn give_back_theirs(&self, slot: usize) {
        if slot < SLOTS {
            self.state(1 - self.side, slot).store(0, Ordering::Release);
        }
    }

    /// Takes the other side's current owner as the peer (at attach, and when a new one
    /// came).
    fn adopt_peer(&mut self) {
        let other = 1 - self.side;
        // Acquire, and first: an owner found attached bumped the epoch read below.
        let ready = self
            .word(side_word(other, layout::READY))
            .load(Ordering::Acquire);
        self.peer_epoch = self
            .word(side_word(other, layout::EPOCH))
            .load(Ordering::Acquire);
        self.peer_owner = self
            .word(side_word(other, layout::OWNER))
            .load(Ordering::Acquire);
        self.peer_incarnation = self
            .word(side_word(other, layout::INCARNATION))
            .load(Ordering::Relaxed);
        self.peer_mode = self
            .word(side_word(other, layout::MODE))
            .load(Ordering::Relaxed);
        self.peer_seen = ShmBackend::attached(ready, self.peer_owner);
        self.peer_reported_gone = false;
        self.assembling = None;
        self.skipping = false;
    }

    /// The peer's life ended (`replaced`: seen only as a new process took its side):
    /// native reliability sorts what it had sent into taken and handed back, then every
    /// slot of mine is free again (the dead process held some, or never read them).
    /// What the dead process put on the ring is still read, whole messages delivered:
    /// a message it was still putting there stays unfinished (a successor's
    /// [`ShmBackend::adopt_peer`] drops it).
    fn peer_lost(&mut self, why: PeerFailure, replaced: bool) {
        self.native_peer_lost();
        for i in 0..SLOTS {
            self.state(self.side, i).store(0, Ordering::Release);
        }
        self.events.push(BackendEvent::PeerGone {
            addr: RemoteAddr::Shm,
            why,
            replaced,
        });
    }

    /// Looks at the other side: a dead or departed owner is reported once, a new owner
    /// is adopted (reported as a replacement when there was one before).
    fn check_peer(&mut self) {
        let other = 1 - self.side;
        // Acquire, and first: an owner found attached bumped the epoch read below.
        let ready = self
            .word(side_word(other, layout::READY))
            .load(Ordering::Acquire);
        let epoch = self
            .word(side_word(other, layout::EPOCH))
            .load(Ordering::Acquire);
        let owner = self
            .word(side_word(other, layout::OWNER))
            .load(Ordering::Acquire);
        if epoch != self.peer_epoch {
            let had_peer = self.peer_seen;
            if had_peer && !self.peer_reported_gone {
                self.peer_lost(PeerFailure::Replaced, true);
            } else if !had_peer {
                // What was sent before anyone took the other side named an epoch that is
                // over: the newcomer skips it, so its slots are free again.
                for i in 0..SLOTS {
                    self.state(self.side, i).store(0, Ordering::Release);
                }
            }
            self.adopt_peer();
            if had_peer {
                self.events.push(BackendEvent::PeerReplaced {
                    addr: RemoteAddr::Shm,
                });
            }
            return;
        }
        if !self.peer_seen {
            // An owner that finished attaching in this epoch and is alive (at open, or
            // when its epoch was seen, it may have been half-way through attaching). A
            // live owner that has claimed the side but not bumped its epoch yet is not
            // the peer: what was sent to it now would name the epoch before, and it
            // would skip that as meant for its predecessor.
            self.peer_seen = ShmBackend::attached(ready, owner);
            self.peer_owner = owner;
            return;
        }
        if !self.peer_reported_gone && (owner == 0 || !alive(owner)) {
            let why = if owner == 0 {
                PeerFailure::Closed
            } else {
                PeerFailure::ProcessGone
            };
            self.peer_reported_gone = true;
            self.peer_lost(why, false);
        }
        self.peer_owner = owner;
    }

    /// Claims the free slot of the lowest index: the slots a ping-pong or a short burst
    /// uses are the same ones over and over, their pages mapped and their lines in cache.
    /// (Taking them in turn, or after the one that came back last, walked a ping-pong of
    /// two-slot messages through all the slots one step per exchange: its first 60-odd
    /// exchanges each met pages never touched, 35 to 590 us instead of 15 at 64 KiB.)
    fn claim_free(&mut self) -> Option<myri_ring::raw::SlotMut> {
        for i in 0..SLOTS {
            if self.state(self.side, i).load(Ordering::Acquire) == 0
                && let Some(s) = self.mine.claim(i)
            {
                return Some(s);
            }
        }
        None
    }

    /// Publishes slot `slot` (`len` bytes, `more` fragments to follow) to the peer.
    fn publish(&mut self, slot: usize, len: usize, more: bool) -> Result<(), SendErrorKind> {
        let state = self
            .region
            .word(direction(self.side).states + slot * 8)
            .ok_or(SendErrorKind::Ring(raw::RingError::Corrupt(
                "slot out of range",
            )))?;
        let header = self.header();
        let mut g = self.tx.try_reserve(DESCRIPTOR).map_err(|e| match e {
            raw::RingError::Full => SendErrorKind::WouldBlock,
            e => SendErrorKind::Ring(e),
        })?;
        let word = slot as u32 | if more { MORE } else { 0 };
        descriptor::encode(g.as_mut_slice(), word, len, header);
        // Ordered before the peer can see the descriptor by the commit's Release.
        state.store(1, Ordering::Relaxed);
        g.commit(DESCRIPTOR);
        Ok(())
    }

    /// Looks at the peer if `CHECK_EVERY_NANOS` passed since last time.
    fn timed_check(&mut self) {
        self.passes_since_check = 0;
        let now = self.now();
        if now.saturating_sub(self.last_check) >= CHECK_EVERY_NANOS || self.last_check == 0 {
            self.last_check = now.max(1);
            self.check_peer();
        }
    }

    /// Native reliability: the ring was found empty. On a pass that received nothing, every
    /// `IDLE_PASSES`th time, the clock is read (and the peer looked at when due).
    fn idle(&mut self) {
        if self.native.is_none() || self.received_this_pass {
            return;
        }
        self.idle_passes += 1;
        if self.idle_passes >= IDLE_PASSES {
            self.idle_passes = 0;
            self.timed_check();
        }
    }

    /// Native reliability: whether the peer runs RPP over the region (its packets are not
    /// messages, and it would take messages for packets).
    fn rpp_peer(&self) -> bool {
        self.peer_mode == layout::MODE_RPP
    }

    /// Whether a live peer is there to take messages (native reliability waits for one).
    fn peer_present(&self) -> bool {
        self.peer_seen && !self.peer_reported_gone
    }

    /// Before a send while no peer has been seen: a process that took the other side
    /// since is adopted now, so the message names its epoch (one load when nothing
    /// changed).
    fn refresh_peer(&mut self) {
        if !self.peer_seen
            && self
                .word(side_word(1 - self.side, layout::EPOCH))
                .load(Ordering::Acquire)
                != self.peer_epoch
        {
            self.check_peer();
        }
    }
}

/// Makes sure the file system of region `name`'s file has room for bytes `0..len` of it
/// before any of them is touched, growing the file to `len` if shorter (sparse):
/// [`OpenError::ShmNoSpace`] when its free space (`fstatvfs`; none reported, as on ramfs,
/// is no limit) is less than what the file lacks. A best effort: another writer may take
/// that room before the pages are touched.
///
/// The pages are not allocated ahead (`fallocate`): a region is some 8 MiB of which a
/// ping-pong touches a few pages, and on a host whose proactive reclaim pages out cold
/// memory (DAMON's `pageout`, on this project's development VM) the allocated but unused
/// pages made the ring's hot ones look cold with them. Measured with `fi_pingpong -p myri
/// -e rdm -S 8` over `shm://`: 1.0-1.4 us a message with a sparse region, 1.5-33 us with
/// a preallocated one.
fn ensure_room(file: &File, name: &str, path: &Path, len: u64) -> Result<(), OpenError> {
    let sized = io_err!(OpenError, "sizing the shared-memory region");
    let m = file.metadata().map_err(sized)?;
    let have = m.blocks().saturating_mul(512);
    let lacking = len.saturating_sub(have);
    match crate::sys::free_bytes(file).map_err(sized)? {
        Some(free) if free < lacking => Err(OpenError::ShmNoSpace {
            name: name.to_owned(),
            path: path.to_owned(),
            need: lacking,
            free,
        }),
        _ if m.len() < len => file.set_len(len).map_err(sized),
        _ => Ok(()),
    }
}

/// Sizes a new region (its room checked) and writes its geometry (magic last, by the
/// caller).
fn create(file: &File, name: &str, path: &Path) -> Result<Region, OpenError> {
    ensure_room(file, name, path, region_len() as u64)?;
    let mut region =
        Region::map_file(file).map_err(io_err!(OpenError, "mapping the shared-memory region"))?;
    let put = |r: &mut Region, at: usize, v: u64| r.write_at(at, &v.to_le_bytes());
    let ok = put(&mut region, layout::VERSION_AT, layout::VERSION)
        && put(&mut region, layout::SLOT_LEN_AT, SLOT_LEN as u64)
        && put(&mut region, layout::SLOTS_AT, SLOTS as u64)
        && put(&mut region, layout::RING_AT, RING_CAPACITY as u64);
    if !ok {
        return Err(bad(name, RegionProblem::Mapping));
    }
    Ok(region)
}

/// An existing region, as [`existing`] found it.
enum Existing {
    /// Mapped, its header checked, its pages reserved.
    Ready(Region),
    /// Its creator never finished it.
    Abandoned,
    /// Its creator removed it (it could not reserve the region's pages).
    Removed,
}

/// Maps an existing region and checks its header. No page is touched before it is
/// reserved (a region made by another build, or sparse, may have pages its file system
/// cannot back): the header's before it is read, the rest before the region is used.
fn existing(file: &File, name: &str, path: &Path) -> Result<Existing, OpenError> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let meta = file
            .metadata()
            .map_err(io_err!(OpenError, "reading the shared-memory region"))?;
        if meta.nlink() == 0 {
            return Ok(Existing::Removed);
        }
        let len = meta.len();
        if len >= layout::HEADER as u64 {
            // Within the file: its length does not change.
            ensure_room(file, name, path, layout::HEADER as u64)?;
            let region = Region::map_file(file)
                .map_err(io_err!(OpenError, "mapping the shared-memory region"))?;
            let word = |at| region.word(at).map_or(0, |w| w.load(Ordering::Acquire));
            match word(layout::MAGIC_AT) {
                0 => {}
                layout::MAGIC => {
                    let geometry = [
                        (layout::VERSION_AT, layout::VERSION, "version"),
                        (layout::SLOT_LEN_AT, SLOT_LEN as u64, "slot size"),
                        (layout::SLOTS_AT, SLOTS as u64, "slot count"),
                        (layout::RING_AT, RING_CAPACITY as u64, "ring size"),
                    ];
                    for (at, want, what) in geometry {
                        let found = word(at);
                        if found != want {
                            let problem = RegionProblem::Geometry { what, found, want };
                            return Err(bad(name, problem));
                        }
                    }
                    if len < region_len() as u64 {
                        let need = region_len() as u64;
                        return Err(bad(name, RegionProblem::Short { len, need }));
                    }
                    // Within the file too; not removed on failure (it is the peer's).
                    ensure_room(file, name, path, region_len() as u64)?;
                    return Ok(Existing::Ready(region));
                }
                _ => return Err(bad(name, RegionProblem::BadMagic)),
            }
        }
        if Instant::now() > deadline {
            return Ok(Existing::Abandoned);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for ShmBackend {
    fn drop(&mut self) {
        // Before the owner word: this process may claim the side again, and must not
        // look attached before its new epoch.
        let _ = self
            .word(side_word(self.side, layout::READY))
            .compare_exchange(self.owner, 0, Ordering::AcqRel, Ordering::Relaxed);
        let mine = self.word(side_word(self.side, layout::OWNER));
        let _ = mine.compare_exchange(self.owner, 0, Ordering::AcqRel, Ordering::Relaxed);
        let other = self
            .word(side_word(1 - self.side, layout::OWNER))
            .load(Ordering::Acquire);
        if !alive(other) {
            // The last one out removes the region.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// How often a live peer's process is looked up.
const CHECK_EVERY_NANOS: u64 = 2_000_000;
/// Native reliability: progress passes that received something, after which the clock is
/// read anyway.
const BUSY_PASSES: u32 = 4096;
/// Native reliability: idle passes (nothing received) between two clock reads.
const IDLE_PASSES: u32 = 16;

impl Backend for ShmBackend {
    fn scheme(&self) -> Scheme {
        Scheme::Shm
    }

    fn local_url(&self) -> String {
        format!("shm://{}", self.name)
    }

    fn mtu(&self) -> usize {
        SLOT_LEN
    }

    fn ordered(&self) -> bool {
        true
    }

    fn lossless(&self) -> bool {
        true
    }

    fn gather_copies(&self) -> bool {
        true
    }

    fn now(&self) -> u64 {
        super::nanos_since(self.epoch)
    }

    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, InsertError> {
        match addr {
            Address::Shm { name } if *name == self.name => Ok(RemoteAddr::Shm),
            _ => Err(InsertError::OtherRegion {
                addr: addr.to_string(),
                region: self.name.clone(),
            }),
        }
    }

    fn addr_url(&self, _addr: &RemoteAddr) -> String {
        format!("shm://{}", self.name)
    }

    fn alloc(&mut self, len: usize) -> Option<Buf> {
        if len > SLOT_LEN {
            return None;
        }
        let slot = self.claim_free()?;
        Some(Buf::new(BufKind::Shm(slot), len))
    }

    fn peer_attached(&mut self) -> bool {
        self.refresh_peer();
        self.peer_present()
    }

    fn send(&mut self, _to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError> {
        self.refresh_peer();
        let len = buf.len();
        if len > SLOT_LEN {
            let error = SendErrorKind::TooLarge { len, max: SLOT_LEN };
            return Err(SendError { error, buf });
        }
        let (slot, copied, buf) = match buf.kind {
            BufKind::Shm(s) if Arc::ptr_eq(s.area(), &self.mine) => (s, false, None),
            kind => {
                let original = Buf::new(kind, len);
                let Some(mut s) = self.claim_free() else {
                    return Err(SendError {
                        error: SendErrorKind::WouldBlock,
                        buf: original,
                    });
                };
                s.as_mut_slice()[..len].copy_from_slice(&original);
                (s, true, Some(original))
            }
        };
        let index = slot.index();
        match self.publish(index, len, false) {
            Ok(()) => Ok(Sent { copied }),
            Err(error) => {
                let buf = match buf {
                    Some(original) => original,
                    None => Buf::new(BufKind::Shm(slot), len),
                };
                Err(SendError { error, buf })
            }
        }
    }

    fn send_gather(
        &mut self,
        _to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind> {
        self.refresh_peer();
        let len = header.len() + payload.len();
        if len > SLOT_LEN {
            return Err(SendErrorKind::TooLarge { len, max: SLOT_LEN });
        }
        let mut s = self.claim_free().ok_or(SendErrorKind::WouldBlock)?;
        let dst = s.as_mut_slice();
        dst[..header.len()].copy_from_slice(header);
        dst[header.len()..len].copy_from_slice(payload);
        let index = s.index();
        drop(s);
        self.publish(index, len, false)?;
        Ok(Sent { copied: true })
    }

    fn can_send(&mut self, _to: &RemoteAddr) -> bool {
        (0..SLOTS).any(|i| self.state(self.side, i).load(Ordering::Relaxed) == 0)
    }

    fn recv(&mut self) -> Option<Incoming> {
        if self.peer_reported_gone {
            // Whatever comes now is from a new owner: learn of it before handing it out.
            self.check_peer();
        }
        loop {
            let (d, inline) = {
                let rec = match self.rx.try_read() {
                    Ok(r) => r,
                    Err(raw::RingError::Empty) => break,
                    Err(_) => {
                        self.counters.malformed += 1;
                        return None;
                    }
                };
                let Some(d) = descriptor(rec.as_slice()) else {
                    self.counters.malformed += 1;
                    continue;
                };
                let payload = descriptor::inline_payload(rec.as_slice(), &d);
                let current = d.to_epoch == self.my_epoch as u32
                    && d.from_epoch == self.peer_epoch as u32
                    && !(self.native.is_some() && self.peer_mode == layout::MODE_RPP);
                if d.inline && current {
                    // The common case, built in place: a short message of the live peer.
                    let inc = Incoming {
                        from: RemoteAddr::Shm,
                        data: RecvBuf::inline(payload),
                    };
                    drop(rec);
                    self.took_inline(d.taken);
                    return Some(inc);
                }
                (d, d.inline.then(|| RecvBuf::inline(payload)))
            };
            if d.to_epoch != self.my_epoch as u32 {
                // Meant for an earlier owner of this side: its sender takes the slot back
                // when it learns of the change.
                self.counters.stale += 1;
                continue;
            }
            if d.from_epoch != self.peer_epoch as u32 {
                // A new owner spoke before this side noticed it: notice it now.
                self.check_peer();
            }
            let over = self.native.is_some() && self.rpp_peer();
            if d.from_epoch != self.peer_epoch as u32 || over {
                // From a life of the peer that is over (a successor took its side), or a
                // peer running RPP, whose packets are not messages. (What a dead process
                // put on the ring before it died is read: it had sent it.)
                self.counters.stale += 1;
                self.give_back_theirs(d.slot);
                continue;
            }
            if let Some(data) = inline {
                self.took_inline(d.taken);
                return Some(Incoming {
                    from: RemoteAddr::Shm,
                    data,
                });
            }
            if let Some(n) = self.native.as_mut() {
                n.peer_took(d.taken);
            }
            if d.more || self.assembling.is_some() || self.skipping {
                match self.fragment(d) {
                    Some(message) => {
                        self.received_this_pass = true;
                        return Some(Incoming {
                            from: RemoteAddr::Shm,
                            data: RecvBuf::from_vec(message),
                        });
                    }
                    None => continue,
                }
            }
            let Some(view) = self.theirs.view(d.slot, 0, d.len) else {
                self.counters.malformed += 1;
                self.give_back_theirs(d.slot);
                continue;
            };
            let give_back = SlotReturn {
                state_at: direction(1 - self.side).states + d.slot * 8,
            };
            self.received_this_pass = true;
            return Some(Incoming {
                from: RemoteAddr::Shm,
                data: RecvBuf::new(RecvKind::Shm(ShmRecv { view, give_back }), 0..d.len),
            });
        }
        self.idle();
        None
    }

    fn progress(&mut self) -> bool {
        if self.native.is_none() {
            self.timed_check();
        } else {
            // Native reliability reads no clock on a pass that has work: the peer is
            // looked at when a pass finds nothing to receive (see `recv`), and after
            // `BUSY_PASSES` busy passes in a row.
            self.passes_since_check += 1;
            if self.passes_since_check >= BUSY_PASSES {
                self.timed_check();
            }
            self.received_this_pass = false;
            self.pump();
        }
        !self.events.is_empty()
    }

    fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    fn poll_event(&mut self) -> Option<BackendEvent> {
        if self.events.is_empty() {
            None
        } else {
            Some(self.events.remove(0))
        }
    }

    fn counters(&self) -> BackendCounters {
        self.counters
    }
}

impl NativeReliability for ShmBackend {
    fn native_reliable(&self) -> bool {
        self.native.is_some()
    }

    fn send_reliable(&mut self, _to: &RemoteAddr, buf: Buf, tag: u64) -> Result<Sent, SendError> {
        self.native_send(buf, tag)
    }

    fn native_max_message(&self) -> usize {
        self.max_message
    }

    fn native_inject_size(&self) -> usize {
        crate::buffer::INLINE_MAX
    }

    fn poll_acked(&mut self) -> Option<(u64, Buf)> {
        self.native_poll_acked()
    }

    fn take_unacked(&mut self) -> Vec<Buf> {
        self.native
            .as_mut()
            .map(|n| std::mem::take(&mut n.handed_back))
            .unwrap_or_default()
    }

    fn has_unacked(&self) -> bool {
        self.native.as_ref().is_some_and(native::NativeTx::busy)
    }

    fn has_partial(&self) -> bool {
        self.native.as_ref().is_some_and(native::NativeTx::partial)
    }

    fn peer_incarnation(&self) -> Option<u64> {
        self.peer_present().then_some(self.peer_incarnation)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE_REASSEMBLY_BUFFERS {
            self.spare.push(buf);
        }
    }
}

/// Reassembly buffers kept for reuse.
const SPARE_REASSEMBLY_BUFFERS: usize = 4;

#[cfg(test)]
mod tests;
