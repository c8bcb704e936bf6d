//! `shm://name`: two processes of one host through a shared-memory region under
//! `/dev/shm`, with a lock-free single-producer/single-consumer ring per direction.
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
//! A side records its owner as one word, pid and process start time. Whoever opens a
//! region checks the owners: a side whose process is gone (or that was closed) is taken
//! over; when both are live the open fails with [`Error::AddrInUse`]. A newcomer throws
//! away the descriptors left for the dead process (they were meant for it) and says where
//! it started reading; the survivor notices the new owner (or, before that, the dead
//! pid) and takes back the slots the dead process held. Nothing here waits without a
//! bound: a region that never finishes initializing is an error after a second.
//!
//! Layout (all words little-endian u64, offsets in bytes): see [`layout`].

use super::{Backend, BackendCounters, BackendEvent, Incoming, RemoteAddr, Sent};
use crate::buffer::{Buf, BufKind, RecvBuf, RecvKind, ShmRecv};
use crate::error::{Error, SendError};
use crate::shm::raw::{self, Consumer, Producer, Region, RingPlace, SlotArea};
use crate::url::{Address, Scheme};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::path::PathBuf;
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
    /// The version this crate writes.
    pub const VERSION: u64 = 1;
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
    /// In a side record: the position in the peer's ring where this owner started reading.
    pub const ATTACH_POS: usize = 16;
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

/// The start time (clock ticks since boot) of process `pid`, if it exists.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process an owner word names is alive.
fn alive(owner: u64) -> bool {
    if owner == 0 {
        return false;
    }
    if !cfg!(target_os = "linux") {
        return true;
    }
    let pid = (owner >> 32) as u32;
    start_time(pid).is_some_and(|t| t & 0xffff_ffff == owner & 0xffff_ffff)
}

/// Hands a received slot back to its owner: stores 0 in its state word.
pub(crate) struct SlotReturn {
    region: Arc<Region>,
    state_at: usize,
}

impl SlotReturn {
    pub(crate) fn give_back(&self) {
        if let Some(w) = self.region.word(self.state_at) {
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
    /// Ring position after each of my slots' last descriptor.
    sent_pos: Vec<u64>,
    cursor: usize,
    /// The peer's owner and epoch as last seen.
    peer_owner: u64,
    peer_epoch: u64,
    peer_reported_gone: bool,
    last_check: u64,
    epoch: Instant,
    events: Vec<BackendEvent>,
    counters: BackendCounters,
}

fn bad(name: &str, why: impl Into<String>) -> Error {
    Error::BadRegion {
        name: name.to_owned(),
        why: why.into(),
    }
}

impl ShmBackend {
    fn word(&self, at: usize) -> &AtomicU64 {
        self.region
            .word(at)
            .expect("header words lie in the checked region")
    }

    /// Opens (or creates) region `name` and takes a free side.
    pub(crate) fn open(name: &str) -> Result<ShmBackend, Error> {
        let path = region_path(name);
        let owner = my_owner();
        for _ in 0..3 {
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => {
                    let mut region = create(&f, name)?;
                    region.write_at(side_word(0, layout::OWNER), &owner.to_le_bytes());
                    region.write_at(side_word(0, layout::EPOCH), &1u64.to_le_bytes());
                    let region = Arc::new(region);
                    region
                        .word(layout::MAGIC_AT)
                        .expect("in bounds")
                        .store(layout::MAGIC, Ordering::Release);
                    return ShmBackend::attach(name, path, region, 0, owner, true);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    match OpenOptions::new().read(true).write(true).open(&path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == ErrorKind::NotFound => continue,
                        Err(e) => return Err(Error::io("opening the shared-memory region")(e)),
                    }
                }
                Err(e) => return Err(Error::io("creating the shared-memory region")(e)),
            };
            let region = match existing(&file, name)? {
                Some(r) => Arc::new(r),
                None => {
                    // Never initialized: its creator died half-way. Start it again.
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
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
                    return ShmBackend::attach(name, path, region, side, owner, false);
                }
            }
            return Err(Error::AddrInUse(format!(
                "shm://{name}: both sides of the region are used by live processes"
            )));
        }
        Err(bad(
            name,
            "the region keeps disappearing while being opened",
        ))
    }

    fn attach(
        name: &str,
        path: PathBuf,
        region: Arc<Region>,
        side: usize,
        owner: u64,
        fresh: bool,
    ) -> Result<ShmBackend, Error> {
        let ring_err = |e: raw::RingError| bad(name, e.to_string());
        let out = direction(side);
        let inc = direction(1 - side);
        let (tx, _) = raw::ring(region.clone(), out.ring).map_err(ring_err)?;
        let (_, rx) = raw::ring(region.clone(), inc.ring).map_err(ring_err)?;
        let mine = SlotArea::new(region.clone(), out.slab, SLOT_LEN, SLOTS).map_err(ring_err)?;
        let theirs = SlotArea::new(region.clone(), inc.slab, SLOT_LEN, SLOTS).map_err(ring_err)?;
        let mut b = ShmBackend {
            name: name.to_owned(),
            path,
            region,
            side,
            owner,
            tx,
            rx,
            mine,
            theirs,
            sent_pos: vec![0; SLOTS],
            cursor: 0,
            peer_owner: 0,
            peer_epoch: 0,
            peer_reported_gone: false,
            last_check: 0,
            epoch: Instant::now(),
            events: Vec::new(),
            counters: BackendCounters::default(),
        };
        if !fresh {
            b.take_over();
        }
        b.peer_owner = b
            .word(side_word(1 - side, layout::OWNER))
            .load(Ordering::Acquire);
        b.peer_epoch = b
            .word(side_word(1 - side, layout::EPOCH))
            .load(Ordering::Acquire);
        Ok(b)
    }

    /// Starts this side's life in a region used before: drops what was left for the
    /// previous owner, says where reading starts, and frees slots nobody can hold.
    fn take_over(&mut self) {
        let had_owner = self
            .word(side_word(self.side, layout::EPOCH))
            .load(Ordering::Acquire)
            != 0;
        // Descriptors the peer queued for a previous owner of this side were meant for
        // it: give their slots back unread. (On a side never owned, they are for us.)
        let mut discard = had_owner;
        while discard {
            let d = match self.rx.try_read() {
                Ok(rec) => descriptor(rec.as_slice()),
                Err(_) => {
                    discard = false;
                    None
                }
            };
            if let Some((slot, _)) = d {
                self.give_back_theirs(slot);
            }
        }
        let inc = direction(1 - self.side);
        let head = self.word(inc.ring.offset + 64).load(Ordering::Acquire);
        self.word(side_word(self.side, layout::ATTACH_POS))
            .store(head, Ordering::Relaxed);
        let peer = self
            .word(side_word(1 - self.side, layout::OWNER))
            .load(Ordering::Acquire);
        if !alive(peer) {
            // Nobody can hold my slots: they are all free.
            for i in 0..SLOTS {
                self.state(self.side, i).store(0, Ordering::Release);
            }
        }
        // Release: the attach position is written before the epoch says a new owner came.
        self.word(side_word(self.side, layout::EPOCH))
            .fetch_add(1, Ordering::Release);
    }

    fn state(&self, side: usize, slot: usize) -> &AtomicU64 {
        self.word(direction(side).states + slot * 8)
    }

    fn give_back_theirs(&self, slot: usize) {
        if slot < SLOTS {
            self.state(1 - self.side, slot).store(0, Ordering::Release);
        }
    }

    /// Takes back my slots whose descriptors were read (or dropped) before `pos` by a
    /// previous owner of the other side.
    fn reclaim(&mut self, pos: u64) {
        for i in 0..SLOTS {
            let s = self.state(self.side, i);
            if s.load(Ordering::Acquire) != 0 && self.sent_pos[i] <= pos {
                s.store(0, Ordering::Release);
            }
        }
    }

    /// Looks at the other side: a dead or departed owner is reported once, a new owner
    /// makes the slots the old one held free again.
    fn check_peer(&mut self) {
        let other = 1 - self.side;
        let epoch = self
            .word(side_word(other, layout::EPOCH))
            .load(Ordering::Acquire);
        let owner = self
            .word(side_word(other, layout::OWNER))
            .load(Ordering::Acquire);
        if epoch != self.peer_epoch {
            let pos = self
                .word(side_word(other, layout::ATTACH_POS))
                .load(Ordering::Relaxed);
            if self.peer_epoch != 0 {
                if !self.peer_reported_gone {
                    self.events.push(BackendEvent::PeerGone {
                        addr: RemoteAddr::Shm,
                        why: "the peer process was replaced".into(),
                    });
                }
                self.events.push(BackendEvent::PeerReplaced {
                    addr: RemoteAddr::Shm,
                });
            }
            self.reclaim(pos);
            self.peer_epoch = epoch;
            self.peer_owner = owner;
            self.peer_reported_gone = false;
            return;
        }
        if self.peer_owner != 0 && !self.peer_reported_gone && (owner == 0 || !alive(owner)) {
            let why = if owner == 0 {
                "the peer closed its side of the region"
            } else {
                "the peer process died"
            };
            self.peer_reported_gone = true;
            self.events.push(BackendEvent::PeerGone {
                addr: RemoteAddr::Shm,
                why: why.into(),
            });
            let head = self
                .word(direction(self.side).ring.offset + 64)
                .load(Ordering::Acquire);
            self.reclaim(head);
        }
        self.peer_owner = owner;
    }

    fn claim_free(&mut self) -> Option<crate::shm::raw::SlotMut> {
        for k in 0..SLOTS {
            let i = (self.cursor + k) % SLOTS;
            if self.state(self.side, i).load(Ordering::Acquire) == 0
                && let Some(s) = self.mine.claim(i)
            {
                self.cursor = (i + 1) % SLOTS;
                return Some(s);
            }
        }
        None
    }

    /// Publishes slot `slot` (`len` bytes) to the peer.
    fn publish(&mut self, slot: usize, len: usize) -> Result<(), Error> {
        let state = self
            .region
            .word(direction(self.side).states + slot * 8)
            .ok_or_else(|| bad(&self.name, "slot out of range"))?;
        let mut g = self.tx.try_reserve(8).map_err(|e| match e {
            raw::RingError::Full => Error::WouldBlock,
            e => bad(&self.name, e.to_string()),
        })?;
        g.as_mut_slice()[..4].copy_from_slice(&(slot as u32).to_le_bytes());
        g.as_mut_slice()[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        // Ordered before the peer can see the descriptor by the commit's Release.
        state.store(1, Ordering::Relaxed);
        g.commit(8);
        let tail = self
            .word(direction(self.side).ring.offset)
            .load(Ordering::Relaxed);
        self.sent_pos[slot] = tail;
        Ok(())
    }
}

fn descriptor(rec: &[u8]) -> Option<(usize, usize)> {
    let slot = u32::from_le_bytes(rec.get(..4)?.try_into().ok()?) as usize;
    let len = u32::from_le_bytes(rec.get(4..8)?.try_into().ok()?) as usize;
    Some((slot, len))
}

/// Sizes a new region and writes its geometry (magic last, by the caller).
fn create(file: &File, name: &str) -> Result<Region, Error> {
    file.set_len(region_len() as u64)
        .map_err(Error::io("sizing the shared-memory region"))?;
    let mut region =
        Region::map_file(file).map_err(Error::io("mapping the shared-memory region"))?;
    let put = |r: &mut Region, at: usize, v: u64| r.write_at(at, &v.to_le_bytes());
    let ok = put(&mut region, layout::VERSION_AT, layout::VERSION)
        && put(&mut region, layout::SLOT_LEN_AT, SLOT_LEN as u64)
        && put(&mut region, layout::SLOTS_AT, SLOTS as u64)
        && put(&mut region, layout::RING_AT, RING_CAPACITY as u64);
    if !ok {
        return Err(bad(name, "mapping is smaller than its file"));
    }
    Ok(region)
}

/// Maps an existing region and checks its header; `None` if its creator never finished.
fn existing(file: &File, name: &str) -> Result<Option<Region>, Error> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let len = file
            .metadata()
            .map_err(Error::io("reading the shared-memory region"))?
            .len();
        if len >= layout::HEADER as u64 {
            let region =
                Region::map_file(file).map_err(Error::io("mapping the shared-memory region"))?;
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
                            return Err(bad(
                                name,
                                format!("{what} is {found}, this build uses {want}"),
                            ));
                        }
                    }
                    if len < region_len() as u64 {
                        return Err(bad(
                            name,
                            format!(
                                "file of {len} bytes is shorter than a region ({})",
                                region_len()
                            ),
                        ));
                    }
                    return Ok(Some(region));
                }
                _ => return Err(bad(name, "not a myri region (bad magic)")),
            }
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for ShmBackend {
    fn drop(&mut self) {
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

    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, Error> {
        match addr {
            Address::Shm { name } if *name == self.name => Ok(RemoteAddr::Shm),
            _ => Err(Error::AddrNotFound(format!(
                "{addr:?}: a shm://{} endpoint talks only to the other side of its region (shm://{})",
                self.name, self.name
            ))),
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

    fn send(&mut self, _to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError> {
        let len = buf.len();
        if len > SLOT_LEN {
            let error = Error::TooLarge { len, max: SLOT_LEN };
            return Err(SendError { error, buf });
        }
        let (slot, copied, buf) = match buf.kind {
            BufKind::Shm(s) if Arc::ptr_eq(s.area(), &self.mine) => (s, false, None),
            kind => {
                let original = Buf::new(kind, len);
                let Some(mut s) = self.claim_free() else {
                    return Err(SendError {
                        error: Error::WouldBlock,
                        buf: original,
                    });
                };
                s.as_mut_slice()[..len].copy_from_slice(&original);
                (s, true, Some(original))
            }
        };
        let index = slot.index();
        match self.publish(index, len) {
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
    ) -> Result<Sent, Error> {
        let len = header.len() + payload.len();
        if len > SLOT_LEN {
            return Err(Error::TooLarge { len, max: SLOT_LEN });
        }
        let mut s = self.claim_free().ok_or(Error::WouldBlock)?;
        let dst = s.as_mut_slice();
        dst[..header.len()].copy_from_slice(header);
        dst[header.len()..len].copy_from_slice(payload);
        let index = s.index();
        drop(s);
        self.publish(index, len)?;
        Ok(Sent { copied: true })
    }

    fn can_send(&mut self, _to: &RemoteAddr) -> bool {
        (0..SLOTS).any(|i| {
            self.state(self.side, (self.cursor + i) % SLOTS)
                .load(Ordering::Relaxed)
                == 0
        })
    }

    fn recv(&mut self) -> Option<Incoming> {
        if self.peer_reported_gone {
            // Whatever comes now is from a new owner: learn of it before handing it out.
            self.check_peer();
        }
        loop {
            let (slot, len) = {
                let rec = match self.rx.try_read() {
                    Ok(r) => r,
                    Err(raw::RingError::Empty) => return None,
                    Err(_) => {
                        self.counters.malformed += 1;
                        return None;
                    }
                };
                match descriptor(rec.as_slice()) {
                    Some(d) => d,
                    None => {
                        self.counters.malformed += 1;
                        continue;
                    }
                }
            };
            let Some(view) = self.theirs.view(slot, 0, len) else {
                self.counters.malformed += 1;
                self.give_back_theirs(slot);
                continue;
            };
            let give_back = SlotReturn {
                region: self.region.clone(),
                state_at: direction(1 - self.side).states + slot * 8,
            };
            return Some(Incoming {
                from: RemoteAddr::Shm,
                data: RecvBuf::new(RecvKind::Shm(ShmRecv { view, give_back }), 0..len),
            });
        }
    }

    fn progress(&mut self) -> bool {
        let now = self.now();
        if now.saturating_sub(self.last_check) >= CHECK_EVERY_NANOS || self.last_check == 0 {
            self.last_check = now.max(1);
            self.check_peer();
        }
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
