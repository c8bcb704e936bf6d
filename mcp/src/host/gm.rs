//! The GM extensions of seed 001 in the host API: SRAM segments, send from SRAM (the
//! OPIOM workspace), and directed sends into windows.
//!
//! | seed 001                                   | here                                  |
//! |--------------------------------------------|---------------------------------------|
//! | LANai SRAM malloc (§3.1.4)                 | [`Api::sram_alloc`]                   |
//! | LANai SRAM free (§3.1.4)                   | [`Api::sram_free`], or drop the [`SramSegment`] |
//! | segments released with their pid (§3.1.4) | dropping the [`Api`] (its user)       |
//! | OpiomRead: disk DMA into the workspace     | [`SimDisk::dma_into`]                 |
//! | host PIO into the workspace                | [`Api::sram_write`]                   |
//! | `gm_opiom_send` (§3.2.2), usual send       | [`Api::opiom_send`] with [`OpiomTarget::Channel`] |
//! | `gm_opiom_send`, directed send             | [`Api::opiom_send`] with [`OpiomTarget::Window`] |
//! | `Opiom_ReadSent` (§3.2.3)                  | [`Api::opiom_read_sent`]              |
//! | `Opiom_GetStatus` (§3.2.3)                 | [`Api::opiom_status`]                 |
//! | the video-properties call (§4.2.2)         | [`Api::register_window`]              |
//! | directed send (§1.3.2)                     | [`Api::send_directed`]                |
//!
//! A window is a strided region of this host's DMA memory that remote senders may write
//! into without a receive event; the receiving MCP checks the window id, the key and the
//! bounds of every packet, and drops (and counts) what does not fit. A sender needs the
//! window's [`RemoteWindow`] (id, key, line length), which the receiver hands out.

use super::unit::{Origin, Shared};
use super::{Api, ApiError, Payload, SendBuf, Ticket};
use crate::frame::{SUBTYPE_DATA, SUBTYPE_DIRECTED};
use crate::gm::wire::{DIRECTED_HEADER_LEN, DirectedRepr, WindowGeometry, WindowRepr};
use crate::gm::{AllocError, SegmentId, SramAllocator, UserId};
use crate::hcb::{self, Layout, gm_area};
use crate::routes::RouteId;
use myri_device::hostmem::{DeviceBuf, HostBuf};
use myri_device::time::{Time, transfer_time};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// The owner of SRAM the driver itself holds (a Trapeze endpoint): no user's.
pub(crate) const DRIVER: UserId = UserId(0);

/// The GM books a unit keeps for its users.
pub(crate) struct GmState {
    /// The SRAM page allocator over the workspace (`None` if the SRAM is too small).
    pub(crate) sram: Option<SramAllocator>,
    /// Registered windows: the buffer the board writes into, and its owner.
    windows: Vec<Option<(DeviceBuf, UserId)>>,
    /// State of the key generator.
    keys: u64,
    /// Whether a Trapeze endpoint is attached (seed 003: one per interface).
    pub(crate) tpz_attached: bool,
}

impl GmState {
    pub(crate) fn new(layout: Option<&Layout>) -> GmState {
        GmState {
            sram: layout
                .and_then(|l| SramAllocator::new(l.workspace, l.workspace_end - l.workspace)),
            windows: (0..gm_area::NUM_WINDOWS).map(|_| None).collect(),
            keys: 0x6d79_7269_676d_3031,
            tpz_attached: false,
        }
    }

    /// A fresh non-zero key (splitmix64): windows and payload tokens are named by keys a
    /// sender cannot guess from the ones it saw before.
    pub(crate) fn next_key(&mut self) -> u32 {
        loop {
            self.keys = self.keys.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.keys;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let k = (z ^ (z >> 31)) as u32;
            if k != 0 {
                return k;
            }
        }
    }
}

/// A GM call that could not be done.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GmError {
    /// The allocator refused.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// The board's SRAM has no workspace past the MCP's structures.
    #[error("the board's sram has no workspace")]
    NoWorkspace,
    /// A range outside the segment.
    #[error("{len} bytes at offset {offset} fall outside the {segment}-byte segment")]
    OutsideSegment {
        /// Offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// The segment's length.
        segment: u32,
    },
    /// A segment of another user or another board.
    #[error("the sram segment belongs to another user or board")]
    NotYours,
    /// A read past the end of the simulated disk.
    #[error("{len} bytes at {offset} fall outside the {disk}-byte disk")]
    OutsideDisk {
        /// Disk offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// The disk's size.
        disk: u64,
    },
    /// The segment was freed (its user went away) while a request used it.
    #[error("the sram segment is no longer allocated")]
    SegmentGone,
    /// Every window of the board is registered.
    #[error("all {} windows are registered", gm_area::NUM_WINDOWS)]
    NoFreeWindow,
    /// A window geometry with no line, an empty line, lines longer than the pitch.
    #[error("bad window geometry {0:?}")]
    BadGeometry(WindowGeometry),
    /// The window spans more than the buffer given for it.
    #[error("the window spans {span} bytes, the buffer holds {len}")]
    WindowTooBig {
        /// Bytes the window spans.
        span: u64,
        /// Bytes in the buffer.
        len: usize,
    },
    /// A directed write past the end of the remote window's image.
    #[error("{len} bytes at offset {offset} overrun the remote window's {image}-byte image")]
    WindowOverrun {
        /// Offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// The image's length.
        image: u64,
    },
    /// The host API refused (queue full, bad route, board access).
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// A segment of board SRAM a user allocated (seed 001, §3.1.4: users hold identifiers,
/// the driver holds the addresses). Freed when dropped.
pub struct SramSegment {
    id: SegmentId,
    addr: u32,
    len: u32,
    user: UserId,
    unit: Arc<super::Unit>,
}

impl core::fmt::Debug for SramSegment {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "SramSegment({:#x}+{}, {:?})",
            self.addr, self.len, self.user
        )
    }
}

impl SramSegment {
    /// SRAM address of the first byte.
    pub fn addr(&self) -> u32 {
        self.addr
    }

    /// Length in bytes (whole 512-byte pages).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the segment is empty (never: at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The allocator's id of the segment.
    pub fn id(&self) -> SegmentId {
        self.id
    }

    fn range(&self, offset: u32, len: usize) -> Result<u32, GmError> {
        let end = u64::from(offset) + len as u64;
        if end > u64::from(self.len) {
            return Err(GmError::OutsideSegment {
                offset: offset.into(),
                len: len as u64,
                segment: self.len,
            });
        }
        Ok(self.addr + offset)
    }
}

impl Drop for SramSegment {
    fn drop(&mut self) {
        let mut g = self.unit.locked();
        if let Some(a) = g.st.gm.sram.as_mut()
            && a.info(self.id).is_some_and(|i| i.owner == self.user)
        {
            let _ = a.free(self.id, self.user);
        }
    }
}

/// Usage of a board's SRAM workspace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SramUsage {
    /// Pages managed.
    pub pages: u32,
    /// Pages free.
    pub free_pages: u32,
    /// Free runs.
    pub free_runs: usize,
    /// The longest free run in pages.
    pub largest_free_run: u32,
    /// Live segments (all users).
    pub segments: usize,
}

/// A disk that DMAs blocks into board SRAM across the PCI bus (seed 001, §2.2.2: OPIOM
/// moves SCSI blocks to a physical address in a PCI device's memory). Its contents are
/// given; a read is timed by its rate and latency in virtual time.
#[derive(Debug, Clone)]
pub struct SimDisk {
    contents: Vec<u8>,
    /// Bytes per second of the disk and its interface (0: instantaneous).
    pub bytes_per_sec: u64,
    /// Time from a request to the first byte.
    pub latency: Duration,
    busy_until: Time,
}

impl SimDisk {
    /// A disk holding `contents`.
    pub fn new(contents: Vec<u8>, bytes_per_sec: u64, latency: Duration) -> SimDisk {
        SimDisk {
            contents,
            bytes_per_sec,
            latency,
            busy_until: Time::ZERO,
        }
    }

    /// Bytes on the disk.
    pub fn len(&self) -> usize {
        self.contents.len()
    }

    /// Whether the disk is empty.
    pub fn is_empty(&self) -> bool {
        self.contents.is_empty()
    }

    /// DMAs `len` bytes from `disk_offset` into `seg` at `offset` (seed 001,
    /// `OpiomRead`); returns when the transfer completes. The bytes go through the board's
    /// PCI window as the disk controller's bus-master writes; they may be used only from
    /// the returned time on.
    pub fn dma_into(
        &mut self,
        api: &mut Api,
        seg: &SramSegment,
        offset: u32,
        disk_offset: usize,
        len: usize,
        now: Time,
    ) -> Result<Time, GmError> {
        let at = api.own(seg)?.range(offset, len)?;
        let end = disk_offset
            .checked_add(len)
            .filter(|&e| e <= self.contents.len());
        let Some(end) = end else {
            return Err(GmError::OutsideDisk {
                offset: disk_offset as u64,
                len: len as u64,
                disk: self.contents.len() as u64,
            });
        };
        let bytes = &self.contents[disk_offset..end];
        let unit = api.unit.clone();
        let mut g = unit.locked();
        unit.board(&mut g, |b| b.pci_write_bytes(at, bytes))
            .map_err(ApiError::from)?;
        let start = self.busy_until.max(now);
        self.busy_until = start + self.latency + transfer_time(len, self.bytes_per_sec);
        Ok(self.busy_until)
    }
}

/// Where an OPIOM send goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpiomTarget {
    /// A usual send to a receive channel (a receive event at the far end).
    Channel(u8),
    /// A directed send into a remote window, from this byte offset of its image.
    Window(RemoteWindow, u32),
}

/// Where an OPIOM request is (seed 001, `Opiom_GetStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpiomStatus {
    /// The disk is still writing the blocks into SRAM.
    Reading,
    /// Packets are being queued or sent: `queued` of `total` bytes are in the send channel.
    Sending {
        /// Bytes queued so far.
        queued: u32,
        /// Bytes in all.
        total: u32,
    },
    /// Every packet is on the network.
    Done,
}

/// A send from the SRAM workspace in progress ([`Api::opiom_send`],
/// [`Api::opiom_read_sent`]); drive it with [`Api::opiom_status`].
#[derive(Debug)]
pub struct OpiomRequest {
    segment: SegmentId,
    user: UserId,
    addr: u32,
    next: u32,
    end: u32,
    start: u32,
    target: OpiomTarget,
    route: RouteId,
    ready_at: Time,
    last: Option<Ticket>,
}

impl OpiomRequest {
    /// When the request's blocks are in SRAM (the disk's completion; at once for
    /// [`Api::opiom_send`]).
    pub fn ready_at(&self) -> Time {
        self.ready_at
    }
}

/// What a receiver tells a sender so it can write into its window: the id, the key, and
/// the line length (a sender cuts packets so each covers at most a chain of lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteWindow {
    /// Window id on the receiving board.
    pub id: u8,
    /// Its key.
    pub key: u32,
    /// Bytes per line.
    pub bytes_per_line: u32,
    /// Lines.
    pub lines: u32,
}

impl RemoteWindow {
    /// Bytes of the window's packed image.
    pub fn image_len(&self) -> u64 {
        u64::from(self.bytes_per_line) * u64::from(self.lines)
    }

    /// Most payload bytes one packet may carry so that it covers at most
    /// [`crate::firmware::directed::MAX_PIECES`] line pieces from any starting column.
    pub fn max_packet(&self) -> u32 {
        let by_lines = (crate::firmware::directed::MAX_PIECES as u64 - 1)
            * u64::from(self.bytes_per_line.max(1));
        let by_size = (hcb::MAX_PAYLOAD - DIRECTED_HEADER_LEN) as u64;
        by_lines.min(by_size) as u32
    }

    fn check(&self, offset: u32, len: usize) -> Result<(), GmError> {
        let end = u64::from(offset) + len as u64;
        if end > self.image_len() {
            return Err(GmError::WindowOverrun {
                offset: offset.into(),
                len: len as u64,
                image: self.image_len(),
            });
        }
        Ok(())
    }
}

/// A window this host registered (seed 001, §4.2.2): remote senders write into it by
/// directed sends. Unregistered when dropped (the buffer is then freed) or with
/// [`Api::unregister_window`] (the buffer comes back).
pub struct Window {
    id: u8,
    key: u32,
    geometry: WindowGeometry,
    unit: Arc<super::Unit>,
}

impl core::fmt::Debug for Window {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Window({}, {:?})", self.id, self.geometry)
    }
}

impl Window {
    /// What a sender needs to write into this window.
    pub fn remote(&self) -> RemoteWindow {
        RemoteWindow {
            id: self.id,
            key: self.key,
            bytes_per_line: self.geometry.bytes_per_line,
            lines: self.geometry.lines,
        }
    }

    /// The geometry.
    pub fn geometry(&self) -> WindowGeometry {
        self.geometry
    }
}

fn invalidate_window(unit: &super::Unit, sh: &mut Shared, id: u8) -> Option<DeviceBuf> {
    let layout = unit.layout()?;
    let _ = unit.write(sh, layout.window(u32::from(id)), 0);
    sh.st.gm.windows[usize::from(id)].take().map(|(d, _)| d)
}

impl Drop for Window {
    fn drop(&mut self) {
        let unit = self.unit.clone();
        let mut g = unit.locked();
        // Dropping the device token frees the pages once no DMA touches them.
        drop(invalidate_window(&unit, &mut g, self.id));
    }
}

impl Api {
    /// This user's id in the SRAM allocator.
    pub fn user(&self) -> UserId {
        self.user
    }

    fn own<'s>(&self, seg: &'s SramSegment) -> Result<&'s SramSegment, GmError> {
        if seg.user != self.user || !Arc::ptr_eq(&seg.unit, &self.unit) {
            return Err(GmError::NotYours);
        }
        Ok(seg)
    }

    /// Allocates a segment of at least `bytes` of board SRAM for this user (seed 001,
    /// §3.1.4, the GM library's LANai malloc).
    pub fn sram_alloc(&mut self, bytes: u32) -> Result<SramSegment, GmError> {
        self.sram_alloc_for(bytes, self.user)
    }

    pub(crate) fn sram_alloc_for(
        &mut self,
        bytes: u32,
        user: UserId,
    ) -> Result<SramSegment, GmError> {
        let mut g = self.unit.locked();
        let a = g.st.gm.sram.as_mut().ok_or(GmError::NoWorkspace)?;
        let id = a.alloc(bytes, user)?;
        let info = a.info(id).expect("just allocated");
        Ok(SramSegment {
            id,
            addr: info.addr,
            len: info.len,
            user,
            unit: self.unit.clone(),
        })
    }

    /// Frees a segment (seed 001, §3.1.4, LANai free). Refused for another user's
    /// segment and for one already freed; the handle stays (dropping it then does nothing).
    pub fn sram_free(&mut self, seg: &SramSegment) -> Result<(), GmError> {
        if !Arc::ptr_eq(&seg.unit, &self.unit) {
            return Err(GmError::NotYours);
        }
        let mut g = self.unit.locked();
        let a = g.st.gm.sram.as_mut().ok_or(GmError::NoWorkspace)?;
        a.free(seg.id, self.user)?;
        Ok(())
    }

    /// The workspace's usage.
    pub fn sram_usage(&self) -> Option<SramUsage> {
        let g = self.unit.locked();
        g.st.gm.sram.as_ref().map(|a| SramUsage {
            pages: a.total_pages(),
            free_pages: a.free_pages(),
            free_runs: a.free_runs(),
            largest_free_run: a.largest_free_run(),
            segments: a.live_segments(),
        })
    }

    /// Writes `bytes` into the segment at `offset` by PIO through the PCI window (seed
    /// 001: another device, here the host, fills the workspace).
    pub fn sram_write(
        &mut self,
        seg: &SramSegment,
        offset: u32,
        bytes: &[u8],
    ) -> Result<(), GmError> {
        let at = self.own(seg)?.range(offset, bytes.len())?;
        let mut g = self.unit.locked();
        self.unit
            .board(&mut g, |b| b.pci_write_bytes(at, bytes))
            .map_err(ApiError::from)?;
        Ok(())
    }

    /// Reads `out.len()` bytes of the segment at `offset` by PIO.
    pub fn sram_read(
        &mut self,
        seg: &SramSegment,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), GmError> {
        let at = self.own(seg)?.range(offset, out.len())?;
        let mut g = self.unit.locked();
        self.unit
            .board(&mut g, |b| b.pci_read_bytes(at, out))
            .map_err(ApiError::from)?;
        Ok(())
    }

    /// Registers `buf` as a window of `geometry` that remote senders may write into with
    /// directed sends (seed 001, §4.2.2: the receiver writes the video properties into the
    /// LANai). The buffer belongs to the board until the window goes.
    pub fn register_window(
        &mut self,
        buf: HostBuf,
        geometry: WindowGeometry,
    ) -> Result<Window, (GmError, HostBuf)> {
        if !Arc::ptr_eq(buf.memory(), self.unit.memory()) {
            return Err((ApiError::ForeignBuffer.into(), buf));
        }
        let Some(span) = geometry.span() else {
            return Err((GmError::BadGeometry(geometry), buf));
        };
        if span > buf.len() as u64 {
            return Err((
                GmError::WindowTooBig {
                    span,
                    len: buf.len(),
                },
                buf,
            ));
        }
        let unit = self.unit.clone();
        let mut g = unit.locked();
        let sh = &mut *g;
        let Some(id) = sh.st.gm.windows.iter().position(Option::is_none) else {
            return Err((GmError::NoFreeWindow, buf));
        };
        let key = sh.st.gm.next_key();
        let entry = WindowRepr {
            valid: true,
            key,
            host: buf.bus_addr(),
            geometry,
        }
        .to_bytes();
        let at = self.layout.window(id as u32);
        let dev = buf.to_device();
        // The entry is written with VALID last: the MCP never sees a half-written window.
        let written = unit.board(sh, |b| {
            b.pci_write_bytes(at + 4, &entry[4..])?;
            b.pci_write_bytes(at, &entry[..4])
        });
        if let Err(e) = written {
            return Err((ApiError::from(e).into(), dev.reclaim()));
        }
        sh.st.gm.windows[id] = Some((dev, self.user));
        Ok(Window {
            id: id as u8,
            key,
            geometry,
            unit: self.unit.clone(),
        })
    }

    /// Unregisters a window and gives its buffer back.
    pub fn unregister_window(&mut self, w: Window) -> Result<HostBuf, GmError> {
        if !Arc::ptr_eq(&w.unit, &self.unit) {
            return Err(ApiError::ForeignBuffer.into());
        }
        let unit = self.unit.clone();
        let mut g = unit.locked();
        let dev = invalidate_window(&unit, &mut g, w.id);
        drop(g);
        core::mem::forget(w);
        Ok(dev.expect("a live window holds its buffer").reclaim())
    }

    /// Runs `f` on the window's bytes as they are now (for checking what senders wrote:
    /// the host reading its frame buffer). The board keeps the window.
    pub fn with_window<R>(&mut self, w: &Window, f: impl FnOnce(&[u8]) -> R) -> Result<R, GmError> {
        if !Arc::ptr_eq(&w.unit, &self.unit) {
            return Err(ApiError::ForeignBuffer.into());
        }
        let mut g = self.unit.locked();
        let slot = &mut g.st.gm.windows[usize::from(w.id)];
        let (dev, owner) = slot.take().expect("a live window holds its buffer");
        // Inline or threaded, the MCP runs under this lock: no DMA is touching the buffer.
        let host = dev.reclaim();
        let r = f(host.as_slice());
        *slot = Some((host.to_device(), owner));
        Ok(r)
    }

    /// Sends `buf[..len]` into a remote window at `offset` of its image (seed 001,
    /// directed send): no buffer or receive event at the far end. The far MCP checks the
    /// key and bounds again; this side refuses what it can tell is wrong.
    pub fn send_directed(
        &mut self,
        route: RouteId,
        window: RemoteWindow,
        offset: u32,
        mut buf: SendBuf,
        len: usize,
    ) -> Result<Ticket, DirectedSendError> {
        let checks = (|| {
            if !buf.is_of(&self.unit) {
                return Err(GmError::Api(ApiError::ForeignBuffer));
            }
            window.check(offset, len)?;
            if len > window.max_packet() as usize {
                return Err(ApiError::TooLong {
                    len,
                    max: window.max_packet() as usize,
                }
                .into());
            }
            Ok(())
        })();
        if let Err(error) = checks {
            return Err(DirectedSendError { error, buf });
        }
        let header = DirectedRepr {
            key: window.key,
            offset,
        }
        .to_bytes();
        let host = buf.host.take().expect("a live SendBuf holds its buffer");
        let origin = Origin::Send(buf.id);
        match self.enqueue(
            SUBTYPE_DIRECTED,
            window.id,
            route,
            &header,
            Payload::Owned(host),
            len,
            origin,
            false,
        ) {
            Ok(seq) => Ok(self.ticket(seq)),
            Err((error, host)) => {
                buf.host = host;
                Err(DirectedSendError {
                    error: error.into(),
                    buf,
                })
            }
        }
    }

    /// Starts sending `range` of a workspace segment with the LANai copying it into the
    /// send buffers instead of a host DMA (seed 001, `gm_opiom_send`), to a channel or
    /// into a remote window. Drive it with [`Api::opiom_status`].
    pub fn opiom_send(
        &mut self,
        seg: &SramSegment,
        range: core::ops::Range<u32>,
        target: OpiomTarget,
        route: RouteId,
    ) -> Result<OpiomRequest, GmError> {
        self.opiom_request(seg, range, target, route, Time::ZERO)
    }

    /// Reads `range.len()` bytes at `disk_offset` of `disk` into `range` of the segment and
    /// sends them once they are in (seed 001, `Opiom_ReadSent`): it returns at once;
    /// [`Api::opiom_status`] reports the read, the sends and the end.
    #[allow(clippy::too_many_arguments)]
    pub fn opiom_read_sent(
        &mut self,
        disk: &mut SimDisk,
        disk_offset: usize,
        seg: &SramSegment,
        range: core::ops::Range<u32>,
        target: OpiomTarget,
        route: RouteId,
        now: Time,
    ) -> Result<OpiomRequest, GmError> {
        let len = range.end.saturating_sub(range.start) as usize;
        let ready = disk.dma_into(self, seg, range.start, disk_offset, len, now)?;
        self.opiom_request(seg, range, target, route, ready)
    }

    fn opiom_request(
        &mut self,
        seg: &SramSegment,
        range: core::ops::Range<u32>,
        target: OpiomTarget,
        route: RouteId,
        ready_at: Time,
    ) -> Result<OpiomRequest, GmError> {
        let len = range.end.saturating_sub(range.start) as usize;
        self.own(seg)?.range(range.start, len)?;
        match target {
            OpiomTarget::Window(w, offset) => w.check(offset, len)?,
            OpiomTarget::Channel(c) if usize::from(c) >= hcb::NUM_CHANNELS => {
                return Err(ApiError::ChannelOutOfRange(c.into()).into());
            }
            OpiomTarget::Channel(_) => {}
        }
        Ok(OpiomRequest {
            segment: seg.id,
            user: seg.user,
            addr: seg.addr,
            next: range.start,
            end: range.start + len as u32,
            start: range.start,
            target,
            route,
            ready_at,
            last: None,
        })
    }

    /// Advances an OPIOM request at `now` and says where it is (seed 001,
    /// `Opiom_GetStatus`, polled instead of blocking): once its blocks are in SRAM, queues
    /// as many packets as the send channel takes, then waits for the last to be sent.
    pub fn opiom_status(
        &mut self,
        req: &mut OpiomRequest,
        now: Time,
    ) -> Result<OpiomStatus, GmError> {
        if now < req.ready_at {
            return Ok(OpiomStatus::Reading);
        }
        let total = req.end - req.start;
        while req.next < req.end {
            {
                let g = self.unit.locked();
                let live =
                    g.st.gm
                        .sram
                        .as_ref()
                        .and_then(|a| a.info(req.segment))
                        .is_some_and(|i| i.owner == req.user && i.owner == self.user);
                if !live {
                    return Err(GmError::SegmentGone);
                }
            }
            let (chan, subtype, max, header) = match req.target {
                OpiomTarget::Channel(c) => (c, SUBTYPE_DATA, hcb::MAX_PAYLOAD as u32, None),
                OpiomTarget::Window(w, offset) => (
                    w.id,
                    SUBTYPE_DIRECTED,
                    w.max_packet(),
                    Some(
                        DirectedRepr {
                            key: w.key,
                            offset: offset + (req.next - req.start),
                        }
                        .to_bytes(),
                    ),
                ),
            };
            let n = (req.end - req.next).min(max);
            let header: &[u8] = header.as_ref().map_or(&[], |h| &h[..]);
            match self.enqueue(
                subtype,
                chan,
                req.route,
                header,
                Payload::Sram(req.addr + req.next),
                n as usize,
                Origin::Lent,
                true,
            ) {
                Ok(seq) => {
                    req.last = Some(Ticket {
                        seq,
                        unit: self.unit.clone(),
                        live: false,
                    });
                    req.next += n;
                }
                Err((ApiError::SendQueueFull, _)) => {
                    return Ok(OpiomStatus::Sending {
                        queued: req.next - req.start,
                        total,
                    });
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        match &req.last {
            Some(t) if self.buffer_busy(t) => Ok(OpiomStatus::Sending {
                queued: total,
                total,
            }),
            _ => Ok(OpiomStatus::Done),
        }
    }
}

/// A refused directed send, with the buffer given back.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct DirectedSendError {
    /// Why.
    pub error: GmError,
    /// The buffer, unsent.
    pub buf: SendBuf,
}

#[cfg(test)]
mod tests;
