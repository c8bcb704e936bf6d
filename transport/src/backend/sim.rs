//! `sim://`: endpoints on simulated myri boards joined by a crossbar switch, in this
//! process, in virtual time.
//!
//! A *world* is one fabric: a 16-port switch with a cable to each of 16 host ports. Each
//! endpoint opened in a world gets a board of its own on a free port, with the control
//! program loaded and channel [`CHAN`] open for receiving; a peer is inserted by name and
//! reached by a route through the switch. Boards run inline: every
//! [`Backend::progress`] call advances the world's virtual clock by one tick and steps the
//! board, so a program that steps its endpoints in a fixed order runs the same way every
//! time.
//!
//! The board carries no sender address (seed 000: the API sends to a route and a
//! channel), so every datagram starts with an 8-byte header naming the sender's port,
//! sent inline from the send slot's PIO buffer while the payload is DMA'd from the
//! application's buffer: nothing is copied on the host.
//!
//! With `integrity=dma` ([`crate::Integrity::Dma`]) the endpoint checks every datagram by
//! the board's own checksums (`myri_mcp::RecvBuf::checksums`: the sending DMA engine's sum
//! of the datagram as it left host memory against the receiving one's as it landed) and
//! drops a mismatch, counted in [`crate::Stats::bad_dma_checksum`]. The check costs a
//! comparison: both sums are computed by the DMA engines as they move the bytes.

use super::{Backend, BackendCounters, BackendEvent, Incoming, Lending, RemoteAddr, Sent};
use crate::buffer::{Buf, BufKind, RecvBuf, RecvKind};
use crate::error::{InsertError, OpenError, SendError, SendErrorKind, WorldError};
use crate::lock;
use crate::url::{Address, Scheme};
use myri_device::board::{Board, BoardConfig, SramFaults, Timing};
use myri_device::fabric::topology::star;
use myri_device::fabric::{
    CableConfig, Fabric, FabricBuilder, FaultConfig, LinkModel, PortId, SwitchSize,
};
use myri_device::run::Clock;
use myri_device::time::Time;
use myri_mcp::{
    Api, ApiError, ChanRequest, Channel, InitOptions, McpConfig, McpRunner, Mode, RouteId,
    RouteSlot, Unit,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Endpoints a world holds.
pub const WORLD_PORTS: usize = 16;
/// The receive channel every sim endpoint uses on its board.
pub const CHAN: u8 = 1;
/// Bytes of the sender header in front of every datagram.
pub const HEADER_LEN: usize = 8;
const MAGIC: [u8; 4] = *b"MYT1";
/// Quiet progress calls between two clock readings on a real clock (a reading costs
/// about as much as ten quiet calls).
const QUIET_READS: u32 = 8;
/// Send buffers [`Backend::alloc`] leaves on the board for the packets the endpoint copies.
const SEND_RESERVE: usize = 8;
/// Virtual time one progress call advances the world by.
pub const TICK_NANOS: u64 = 1_000;
/// Where a world's clock starts.
const START_NANOS: u64 = 1_000_000_000;

/// How a simulated world's clock runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SimClock {
    /// Every progress call of an endpoint advances the world by [`TICK_NANOS`] of virtual
    /// time: a program that steps its endpoints in a fixed order runs the same way every
    /// time (the default).
    #[default]
    Ticks,
    /// Real time, from a monotonic clock started with the world: for measuring the stack
    /// as it runs on this host.
    Real,
    /// The driver sets the time with [`SimWorld::set_now`]: for running endpoints under the
    /// device crate's deterministic scheduler, in virtual time.
    Driven,
}

/// How a simulated world is built: its links, boards, clock and control programs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct WorldConfig {
    /// Seed of the fabric's fault injection.
    pub seed: u64,
    /// Faults on every cable (none by default).
    pub faults: FaultConfig,
    /// Model a PCI64B's timing and SAN-2000 links (1.28 Gbit/s and their latency) instead
    /// of an unthrottled board and fabric; meant for [`SimClock::Driven`] runs.
    pub modelled: bool,
    /// How the world's clock runs.
    pub clock: SimClock,
    /// Run each board's control program on a thread of its own (spinning, then parking)
    /// instead of stepping it from the endpoint's progress calls; needs
    /// [`SimClock::Real`].
    pub mcp_threads: bool,
    /// The control program's settings.
    pub mcp: McpConfig,
    /// Corruption of packets in every board's SRAM (none by default), for testing what
    /// catches it: a bit flipped after the sending host DMA and before the send engine
    /// reads the packet, or after the receive engine wrote it and before the host DMA.
    pub sram_faults: SramFaults,
}

impl Default for WorldConfig {
    fn default() -> WorldConfig {
        WorldConfig {
            seed: 0x5133_0000,
            faults: FaultConfig::default(),
            modelled: false,
            clock: SimClock::Ticks,
            mcp_threads: false,
            mcp: McpConfig::default(),
            sram_faults: SramFaults::default(),
        }
    }
}

impl WorldConfig {
    /// Sets the fault seed.
    pub fn with_seed(mut self, seed: u64) -> WorldConfig {
        self.seed = seed;
        self
    }

    /// Sets the faults on every cable.
    pub fn with_faults(mut self, faults: FaultConfig) -> WorldConfig {
        self.faults = faults;
        self
    }

    /// Models a PCI64B and SAN-2000 links, or not.
    pub fn with_modelled(mut self, modelled: bool) -> WorldConfig {
        self.modelled = modelled;
        self
    }

    /// Sets how the clock runs.
    pub fn with_clock(mut self, clock: SimClock) -> WorldConfig {
        self.clock = clock;
        self
    }

    /// Runs the control programs on threads of their own, or inline.
    pub fn with_mcp_threads(mut self, threads: bool) -> WorldConfig {
        self.mcp_threads = threads;
        self
    }

    /// Sets the control program's settings.
    pub fn with_mcp(mut self, mcp: McpConfig) -> WorldConfig {
        self.mcp = mcp;
        self
    }

    /// Sets the corruption of packets in the boards' SRAM.
    pub fn with_sram_faults(mut self, faults: SramFaults) -> WorldConfig {
        self.sram_faults = faults;
        self
    }
}

/// One simulated fabric and the names of the endpoints on it.
struct World {
    fabric: Arc<Fabric>,
    ports: Vec<PortId>,
    names: Mutex<Vec<Option<String>>>,
    config: WorldConfig,
    clock: AtomicU64,
    /// The real clock, in a world on one ([`SimClock::Real`]): others never read it (nor
    /// calibrate it, which takes a variable number of instructions once a process).
    real: Option<Clock>,
    next_auto: AtomicU64,
}

fn worlds() -> &'static Mutex<HashMap<String, Weak<World>>> {
    static WORLDS: OnceLock<Mutex<HashMap<String, Weak<World>>>> = OnceLock::new();
    WORLDS.get_or_init(Mutex::default)
}

impl World {
    /// The live world called `name`, or a new one built from `config` (the default
    /// config when `None`). With a config, a live world of that name is an error.
    fn get(name: &str, config: Option<WorldConfig>) -> Result<Arc<World>, WorldError> {
        let mut all = lock(worlds());
        if let Some(w) = all.get(name).and_then(Weak::upgrade) {
            if config.is_some() {
                return Err(WorldError::Exists(name.to_owned()));
            }
            return Ok(w);
        }
        let config = config.unwrap_or(WorldConfig {
            seed: 0x5133_0000 ^ name.len() as u64,
            ..WorldConfig::default()
        });
        if config.mcp_threads && config.clock != SimClock::Real {
            return Err(WorldError::ThreadsNeedRealClock);
        }
        config.sram_faults.validate().map_err(WorldError::Faults)?;
        let model = if config.modelled {
            LinkModel::SAN_2000
        } else {
            LinkModel::default()
        };
        let mut b = FabricBuilder::new(config.seed);
        let ports = star(
            &mut b,
            WORLD_PORTS,
            SwitchSize::Sixteen,
            CableConfig::symmetric(model, config.faults),
        )
        .map_err(WorldError::Fabric)?;
        let w = Arc::new(World {
            fabric: Arc::new(b.build()),
            ports,
            names: Mutex::new(vec![None; WORLD_PORTS]),
            config,
            clock: AtomicU64::new(START_NANOS),
            real: (config.clock == SimClock::Real).then(Clock::new),
            next_auto: AtomicU64::new(0),
        });
        all.retain(|_, w| w.strong_count() > 0);
        all.insert(name.to_owned(), Arc::downgrade(&w));
        Ok(w)
    }

    /// The time now, in nanoseconds.
    fn now(&self) -> u64 {
        match self.config.clock {
            SimClock::Real => START_NANOS + self.real.map_or(0, |c| c.now().as_nanos()),
            SimClock::Ticks | SimClock::Driven => self.clock.load(Ordering::Relaxed),
        }
    }

    /// The time for a progress call: ticking worlds advance by one tick.
    fn advance(&self) -> u64 {
        match self.config.clock {
            SimClock::Ticks => self.clock.fetch_add(TICK_NANOS, Ordering::Relaxed) + TICK_NANOS,
            _ => self.now(),
        }
    }

    /// Takes a free port for `name` (a generated one if `None`) in the world `world`.
    fn join(&self, world: &str, name: Option<&str>) -> Result<(u16, String), OpenError> {
        let mut names = lock(&self.names);
        let name = match name {
            Some(n) => n.to_owned(),
            None => loop {
                let n = format!("ep{}", self.next_auto.fetch_add(1, Ordering::Relaxed));
                if !names.iter().flatten().any(|x| *x == n) {
                    break n;
                }
            },
        };
        if names.iter().flatten().any(|x| *x == name) {
            return Err(OpenError::AddrInUse {
                url: format!("sim://{name}"),
            });
        }
        let Some(i) = names.iter().position(Option::is_none) else {
            return Err(OpenError::WorldFull {
                world: world.to_owned(),
                max: WORLD_PORTS,
            });
        };
        names[i] = Some(name.clone());
        Ok((i as u16, name))
    }

    fn find(&self, name: &str) -> Option<u16> {
        lock(&self.names)
            .iter()
            .position(|n| n.as_deref() == Some(name))
            .map(|i| i as u16)
    }

    fn name_of(&self, port: u16) -> Option<String> {
        lock(&self.names).get(usize::from(port)).cloned().flatten()
    }
}

/// A simulated world built with settings of the caller's, kept alive while the handle
/// lives: endpoints join it with `sim://NAME?world=WORLD`. Without one, a world is made
/// with the defaults when its first endpoint opens and goes when its last closes.
///
/// ```
/// use myri_transport::{Endpoint, sim::{SimClock, SimWorld, WorldConfig}};
/// let world = SimWorld::create("doc-driven", WorldConfig::default().with_clock(SimClock::Driven))?;
/// let a = Endpoint::open("sim://a?world=doc-driven")?;
/// world.set_now(world.now() + 5_000);
/// assert_eq!(world.port_of("a"), Some(world.ports()[0]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SimWorld {
    world: Arc<World>,
}

impl SimWorld {
    /// Builds the world `name` from `config`; an error if a world of that name is alive.
    pub fn create(name: &str, config: WorldConfig) -> Result<SimWorld, WorldError> {
        if !crate::url::is_valid_name(name) {
            return Err(WorldError::BadName(name.to_owned()));
        }
        Ok(SimWorld {
            world: World::get(name, Some(config))?,
        })
    }

    /// The settings it was built with.
    pub fn config(&self) -> &WorldConfig {
        &self.world.config
    }

    /// The time now, in nanoseconds.
    pub fn now(&self) -> u64 {
        self.world.now()
    }

    /// Sets the time of a [`SimClock::Driven`] world (time never goes back: an earlier
    /// time is ignored); other worlds keep their own.
    pub fn set_now(&self, nanos: u64) {
        if self.world.config.clock == SimClock::Driven {
            self.world.clock.fetch_max(nanos, Ordering::Relaxed);
        }
    }

    /// The fabric: its counters, queues and the scheduler's wake-ups.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.world.fabric
    }

    /// The fabric ports of the world's endpoints, in the order they are handed out.
    pub fn ports(&self) -> &[PortId] {
        &self.world.ports
    }

    /// The fabric port of the endpoint `sim://name` in this world.
    pub fn port_of(&self, name: &str) -> Option<PortId> {
        let i = self.world.find(name)?;
        self.world.ports.get(usize::from(i)).copied()
    }

    /// Packets waiting in the fabric's port queues.
    pub fn queued(&self) -> u64 {
        self.world
            .ports
            .iter()
            .map(|&p| self.world.fabric.queued(p) as u64)
            .sum()
    }
}

/// A control program running on a thread of its own, stopped and joined on drop.
struct McpThread {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl McpThread {
    fn start(unit: &Arc<Unit>, world: &Arc<World>) -> Result<McpThread, OpenError> {
        let stop = Arc::new(AtomicBool::new(false));
        let runner = McpRunner::new(unit.clone());
        let (w, flag) = (world.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("myri-mcp".into())
            .spawn(move || runner.run(|| Time::from_nanos(w.now()), &flag))
            .map_err(crate::error::io_err!(
                OpenError,
                "starting a control-program thread"
            ))?;
        Ok(McpThread {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for McpThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// A sim endpoint's board and channel.
pub(crate) struct SimBackend {
    // Dropped first: the control program's thread stops before the board goes.
    _mcp_thread: Option<McpThread>,
    world: Arc<World>,
    world_name: String,
    index: u16,
    name: String,
    api: Api,
    chan: Channel,
    /// The route to each port of the world, once added to the board (indexed by port: a
    /// send looks it up with one load).
    routes: [Option<RouteId>; WORLD_PORTS],
    header: [u8; HEADER_LEN],
    counters: BackendCounters,
    /// Sends the board may not have finished: the board's count when last asked, plus
    /// the sends since (see `can_send`).
    pending: usize,
    /// The board said its send channel was full and has not been stepped since: an
    /// inline board finishes no send between two steps, so asking again would only take
    /// the lock and read across the bus for the same answer. Never set for a board on a
    /// thread of its own.
    full_until_step: bool,
    /// The time of the last progress call, and the calls that found the board quiet.
    last_now: u64,
    /// The latest reading of a real clock by [`Backend::now`] (a `Cell`: `now` takes
    /// `&self`), which [`Backend::kick`] steps the board at rather than read the clock
    /// again: the endpoint reads the time for a send just before it kicks the board.
    last_read: Cell<u64>,
    quiet_calls: u32,
    /// A [`Backend::kick`] has stepped the board since the last progress call: the
    /// packets posted after it wait for that call (see `kick`).
    kicked: bool,
    /// Drop (and count) every datagram whose board checksums differ
    /// ([`crate::Integrity::Dma`]).
    check_dma: bool,
    /// The longest packet the board takes by PIO ([`myri_mcp::Api::pio_threshold`]).
    pio_max: usize,
}

impl SimBackend {
    /// Opens `sim://name?world=world`; with `check_dma`, checks every datagram received
    /// by the board's DMA checksums ([`crate::Integrity::Dma`]).
    pub(crate) fn open(
        name: Option<&str>,
        world: Option<&str>,
        check_dma: bool,
    ) -> Result<SimBackend, OpenError> {
        let world_name = world.unwrap_or("default").to_owned();
        let w = World::get(&world_name, None).map_err(OpenError::World)?;
        let (index, name) = w.join(&world_name, name)?;
        let release = |w: &World| lock(&w.names)[usize::from(index)] = None;
        let setup = || -> Result<(Api, Channel, Option<McpThread>), OpenError> {
            let mut cfg = BoardConfig::pci64b(u32::from(index));
            if w.config.modelled {
                cfg.timing = Timing::PCI64B;
            }
            let mut board = Board::new(cfg);
            board
                .set_sram_faults(
                    w.config.sram_faults,
                    myri_device::fabric::fault::mix_seed(
                        w.config.seed,
                        0x5EED_0000 + u64::from(index),
                    ),
                )
                .map_err(|e| OpenError::World(WorldError::Faults(e)))?;
            board.attach_link(w.fabric.clone(), w.ports[usize::from(index)]);
            let mode = if w.config.mcp_threads {
                Mode::Threaded
            } else {
                Mode::Inline
            };
            let unit = Unit::new(board, 0x1_0000_0000 * (u64::from(index) + 1), mode);
            unit.poll(Time::from_nanos(w.now()));
            let thread = match mode {
                Mode::Threaded => Some(McpThread::start(&unit, &w)?),
                Mode::Inline => None,
            };
            let options = InitOptions {
                mcp: w.config.mcp,
                ..InitOptions::default()
            };
            let mut api = Api::init(&unit, options).map_err(OpenError::Board)?;
            let chan = api
                .get_chan(ChanRequest::Specific(u32::from(CHAN)))
                .map_err(OpenError::Board)?;
            api.init_recv_chan(&chan).map_err(OpenError::Board)?;
            Ok((api, chan, thread))
        };
        let (api, chan, mcp_thread) = setup().inspect_err(|_| release(&w))?;
        let pio_max = api.pio_threshold();
        let mut header = [0u8; HEADER_LEN];
        header[..4].copy_from_slice(&MAGIC);
        header[4..6].copy_from_slice(&index.to_be_bytes());
        Ok(SimBackend {
            _mcp_thread: mcp_thread,
            world: w,
            world_name,
            index,
            name,
            api,
            chan,
            routes: [None; WORLD_PORTS],
            header,
            counters: BackendCounters::default(),
            pending: 0,
            full_until_step: false,
            last_now: START_NANOS,
            last_read: Cell::new(START_NANOS),
            quiet_calls: 0,
            kicked: false,
            check_dma,
            pio_max,
        })
    }

    /// The board's route to `port`: the one added before (every packet's case, a load),
    /// else a new one.
    #[inline]
    fn route(&mut self, port: u16) -> Result<RouteId, RouteError> {
        match self.routes.get(usize::from(port)) {
            Some(&Some(r)) => Ok(r),
            _ => self.add_route(port),
        }
    }

    /// Adds the board's route to `port` (the first packet to it).
    #[cold]
    #[inline(never)]
    fn add_route(&mut self, port: u16) -> Result<RouteId, RouteError> {
        let w = &self.world;
        let to = *w
            .ports
            .get(usize::from(port))
            .ok_or(RouteError::NoRoute(port))?;
        let route = w
            .fabric
            .route(w.ports[usize::from(self.index)], to)
            .ok_or(RouteError::NoRoute(port))?;
        let id = self
            .api
            .add_route(RouteSlot::Next, &route)
            .map_err(RouteError::Board)?;
        if let Some(slot) = self.routes.get_mut(usize::from(port)) {
            *slot = Some(id);
        }
        Ok(id)
    }

    /// A received buffer as a datagram, or `Err` (counted) when it fails the checks.
    #[inline]
    fn incoming(&mut self, rb: myri_mcp::RecvBuf) -> Result<Incoming, ()> {
        // The board's checksums cover exactly these bytes, sender header included:
        // the sending DMA engine's sum as they left host memory (with the sending
        // LANai's of the header, written by PIO), and the receiving one's as they
        // landed. A mismatch is damage between the two hosts' memories.
        if self.check_dma && !rb.dma_checksum_ok() {
            self.counters.bad_dma_checksum += 1;
            return Err(());
        }
        let bytes = rb.as_slice();
        if bytes.len() < HEADER_LEN || bytes[..4] != MAGIC {
            self.counters.malformed += 1;
            return Err(());
        }
        let from = u16::from_be_bytes([bytes[4], bytes[5]]);
        let len = bytes.len();
        Ok(Incoming {
            from: RemoteAddr::Sim(from),
            data: RecvBuf::new_within(RecvKind::Board(rb), HEADER_LEN..len),
        })
    }

    /// [`Backend::recv`] after a datagram was dropped: the next one that passes, if any.
    #[cold]
    #[inline(never)]
    fn recv_after_drop(&mut self) -> Option<Incoming> {
        loop {
            match self.api.recv(&self.chan) {
                Ok(Some(rb)) => {
                    if let Ok(inc) = self.incoming(rb) {
                        return Some(inc);
                    }
                }
                Ok(None) => return None,
                Err(_) => self.counters.malformed += 1,
            }
        }
    }

    /// The route for a packet of `len` bytes to `to`, checked: a sim address, within the
    /// MTU.
    fn packet_route(&mut self, to: &RemoteAddr, len: usize) -> Result<RouteId, SendErrorKind> {
        let RemoteAddr::Sim(port) = *to else {
            return Err(SendErrorKind::NoRoute);
        };
        if len > self.mtu() {
            return Err(SendErrorKind::TooLarge {
                len,
                max: self.mtu(),
            });
        }
        Ok(self.route(port)?)
    }

    fn copy_to_board(&mut self, data: &[u8]) -> Result<myri_mcp::SendBuf, SendErrorKind> {
        let mut sb = self.api.get_send_buffer().map_err(would_block)?;
        let Some(dst) = sb.as_mut_slice().get_mut(..data.len()) else {
            return Err(SendErrorKind::TooLarge {
                len: data.len(),
                max: self.mtu(),
            });
        };
        dst.copy_from_slice(data);
        Ok(sb)
    }
}

fn would_block(e: ApiError) -> SendErrorKind {
    match e {
        ApiError::NoSendBuffers | ApiError::SendQueueFull | ApiError::Busy => {
            SendErrorKind::WouldBlock
        }
        e => SendErrorKind::Board(e),
    }
}

/// Why a route to a fabric port could not be had.
enum RouteError {
    /// The fabric has none.
    NoRoute(u16),
    /// The board refused it.
    Board(ApiError),
}

impl From<RouteError> for InsertError {
    fn from(e: RouteError) -> InsertError {
        match e {
            RouteError::NoRoute(port) => InsertError::NoRoute { port },
            RouteError::Board(e) => InsertError::Board(e),
        }
    }
}

impl From<RouteError> for SendErrorKind {
    fn from(e: RouteError) -> SendErrorKind {
        match e {
            RouteError::NoRoute(_) => SendErrorKind::NoRoute,
            RouteError::Board(e) => SendErrorKind::Board(e),
        }
    }
}

impl Drop for SimBackend {
    fn drop(&mut self) {
        lock(&self.world.names)[usize::from(self.index)] = None;
    }
}

impl Backend for SimBackend {
    fn scheme(&self) -> Scheme {
        Scheme::Sim
    }

    fn local_url(&self) -> String {
        if self.world_name == "default" {
            format!("sim://{}", self.name)
        } else {
            format!("sim://{}?world={}", self.name, self.world_name)
        }
    }

    fn mtu(&self) -> usize {
        myri_mcp::hcb::MAX_PAYLOAD - HEADER_LEN
    }

    fn ordered(&self) -> bool {
        false
    }

    fn lossless(&self) -> bool {
        false
    }

    fn gather_copies(&self) -> bool {
        true
    }

    fn now(&self) -> u64 {
        let now = self.world.now();
        self.last_read.set(now);
        now
    }

    fn next_deadline(&self) -> Option<u64> {
        self.api.next_deadline().map(Time::as_nanos)
    }

    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, InsertError> {
        let Address::Sim { name: Some(name) } = addr else {
            return Err(InsertError::NoName);
        };
        let port = self
            .world
            .find(name)
            .ok_or_else(|| InsertError::NoSuchEndpoint {
                name: name.clone(),
                world: self.world_name.clone(),
            })?;
        self.route(port)?;
        Ok(RemoteAddr::Sim(port))
    }

    fn addr_url(&self, addr: &RemoteAddr) -> String {
        match addr {
            RemoteAddr::Sim(p) => match self.world.name_of(*p) {
                Some(n) => format!("sim://{n}"),
                None => format!("sim://port{p}"),
            },
            other => format!("{other:?}"),
        }
    }

    fn alloc(&mut self, len: usize) -> Option<Buf> {
        // The application's messages may stay lent to the board until acknowledged; the
        // last few buffers are kept for the packets RPP must copy (acknowledgements,
        // short messages), which would otherwise be lost to a full pool and resent only
        // after a timeout. The application gets heap memory instead, copied at send.
        if len > self.mtu() || !self.api.send_buffers_above(SEND_RESERVE) {
            return None;
        }
        let sb = self.api.get_send_buffer().ok()?;
        Some(Buf::new(BufKind::Board(sb), len))
    }

    fn send(&mut self, to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError> {
        let fail = |error, buf| Err(SendError { error, buf });
        let RemoteAddr::Sim(port) = *to else {
            return fail(SendErrorKind::NoRoute, buf);
        };
        let len = buf.len();
        if len > self.mtu() {
            let max = self.mtu();
            return fail(SendErrorKind::TooLarge { len, max }, buf);
        }
        let route = match self.route(port) {
            Ok(r) => r,
            Err(e) => return fail(e.into(), buf),
        };
        let Buf { kind, len } = buf;
        let (sb, copied, original) = match kind {
            BufKind::Board(sb) => match self.api.send_inline(CHAN, route, &self.header, sb, len) {
                Ok(_ticket) => {
                    self.pending += 1;
                    return Ok(Sent { copied: false });
                }
                Err(e) if e.error == ApiError::ForeignBuffer => {
                    // Another board's buffer: copy it into one of ours.
                    let original = Buf::new(BufKind::Board(e.buf), len);
                    match self.copy_to_board(&original) {
                        Ok(sb) => (sb, true, original),
                        Err(error) => return fail(error, original),
                    }
                }
                Err(e) => return fail(would_block(e.error), Buf::new(BufKind::Board(e.buf), len)),
            },
            other => {
                let original = Buf::new(other, len);
                match self.copy_to_board(&original) {
                    Ok(sb) => (sb, true, original),
                    Err(error) => return fail(error, original),
                }
            }
        };
        match self.api.send_inline(CHAN, route, &self.header, sb, len) {
            Ok(_ticket) => {
                self.pending += 1;
                Ok(Sent { copied })
            }
            Err(e) => fail(would_block(e.error), original),
        }
    }

    /// A packet that fits the board's PIO threshold (an acknowledgement, a short message
    /// behind its header) is written into the send slot by PIO from where its parts are,
    /// with no send buffer; a longer one is copied into a send buffer the board DMAs from.
    fn send_gather(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind> {
        let len = header.len() + payload.len();
        let route = self.packet_route(to, len)?;
        if HEADER_LEN + len <= self.pio_max {
            self.api
                .send_pio(CHAN, route, &self.header, &[header, payload])
                .map_err(would_block)?;
        } else {
            let mut sb = self.api.get_send_buffer().map_err(would_block)?;
            let dst = sb.as_mut_slice();
            dst[..header.len()].copy_from_slice(header);
            dst[header.len()..len].copy_from_slice(payload);
            self.api
                .send_inline(CHAN, route, &self.header, sb, len)
                .map_err(|e| would_block(e.error))?;
        }
        self.pending += 1;
        // A packet with no payload (an acknowledgement) copies no message bytes.
        Ok(Sent {
            copied: !payload.is_empty(),
        })
    }

    /// Counts the board's unfinished sends as seed 000's `num_pending` does, but asks the
    /// board (a lock and a reap) only when the count kept since the last answer says the
    /// send channel may be full, and, for an inline board, only once between two of its
    /// steps: a transmit pass with room costs no board access, nor does a send that finds
    /// the channel still full (a stream refilling it calls this some twice a packet).
    fn can_send(&mut self, _to: &RemoteAddr) -> bool {
        const SLOTS: usize = myri_mcp::hcb::SEND_SLOTS as usize;
        if self.pending < SLOTS {
            return true;
        }
        if self.full_until_step {
            return false;
        }
        self.pending = self.api.num_pending();
        let full = self.pending >= SLOTS;
        self.full_until_step = full && !self.world.config.mcp_threads;
        !full
    }

    /// The next datagram the board received: the common cases (one that passes, or none)
    /// inline; a refused receive or a datagram dropped here goes on out of line.
    #[inline]
    fn recv(&mut self) -> Option<Incoming> {
        match self.api.recv(&self.chan) {
            Ok(Some(rb)) => match self.incoming(rb) {
                Ok(inc) => Some(inc),
                Err(()) => self.recv_after_drop(),
            },
            Ok(None) => None,
            Err(_) => {
                self.counters.malformed += 1;
                self.recv_after_drop()
            }
        }
    }

    /// Steps the board for what was just posted, once between two progress calls: the
    /// first send after a progress call (an answer, the head of a burst) leaves at once,
    /// while the rest of a burst waits for the next progress call, which the board takes
    /// all at once in one step rather than in one step each (a step of the inline board
    /// costs the host about as much as 500 instructions of fixed work).
    ///
    /// On a real clock the board is stepped at the latest time already read (the send's,
    /// by [`Backend::now`], or the last progress call's) rather than at a new reading:
    /// the board takes the packet now either way, and its timers see the time the next
    /// progress call reads. A ticking world advances a tick as [`Backend::progress`]
    /// does. A driven world's board is stepped at every kick, as before: there the driver
    /// decides when the next progress call comes, in virtual time.
    fn kick(&mut self) -> bool {
        match self.world.config.clock {
            SimClock::Driven => self.progress(),
            _ if self.kicked => false,
            SimClock::Ticks => {
                let worked = self.progress();
                self.kicked = true;
                worked
            }
            SimClock::Real => {
                self.kicked = true;
                self.full_until_step = false;
                self.last_now = self.last_now.max(self.last_read.get());
                self.api.progress(Time::from_nanos(self.last_now))
            }
        }
    }

    /// Steps the board. On a real clock, while the board is quiet (nothing arrived,
    /// nothing due, nothing posted: a few loads) the clock is read only every
    /// [`QUIET_READS`] calls, so that a host spinning on `progress` for a packet does
    /// not pay a clock reading each turn while timers still see time pass. Inline: the
    /// endpoint steps the board a few times a message, and this is a few tests around the
    /// board's own step.
    #[inline(always)]
    fn progress(&mut self) -> bool {
        self.kicked = false;
        if self.world.config.clock == SimClock::Real && self.api.is_quiet() {
            self.quiet_calls = self.quiet_calls.wrapping_add(1);
            if self.quiet_calls.is_multiple_of(QUIET_READS) {
                self.last_now = self.world.advance();
            }
            return false;
        }
        self.full_until_step = false;
        self.last_now = self.world.advance();
        self.api.progress(Time::from_nanos(self.last_now))
    }

    fn progressed_at(&self) -> u64 {
        self.last_now
    }

    fn poll_event(&mut self) -> Option<BackendEvent> {
        None
    }

    fn has_events(&self) -> bool {
        false
    }

    fn is_idle(&self) -> bool {
        self.api.is_quiet()
    }

    fn counters(&self) -> BackendCounters {
        self.counters
    }

    fn board_drops(&mut self) -> Vec<(&'static str, u64)> {
        use myri_mcp::hcb::counter;
        let causes = [
            (counter::DROP_RX_FULL, "rx pool full"),
            (counter::DROP_TYPE, "wrong type"),
            (counter::DROP_SUBTYPE, "wrong subtype"),
            (counter::DROP_CHANNEL, "bad channel"),
            (counter::DROP_LENGTH, "bad length"),
            (counter::DROP_OVERRUN, "receive overrun"),
            (counter::SEND_ERRORS, "send refused by the mcp"),
        ];
        let Ok(c) = self.api.mcp_counters() else {
            return Vec::new();
        };
        causes
            .into_iter()
            .map(|(id, name)| (name, u64::from(c.get(id))))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

impl Lending for SimBackend {
    /// A payload in a lent board buffer goes by DMA from where the application wrote it
    /// (its frame and RPP headers inline, from the send slot's PIO buffer); anything else
    /// is copied into a send buffer as [`Backend::send_gather`] does.
    fn send_gather_from(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
        message: Option<(&Buf, usize)>,
    ) -> Result<Sent, SendErrorKind> {
        let lent = message.and_then(|(m, at)| Some((m.lent()?, at)));
        let Some((lent, at)) = lent.filter(|_| !payload.is_empty()) else {
            return self.send_gather(to, header, payload);
        };
        let route = self.packet_route(to, header.len() + payload.len())?;
        // Room for a data packet's header (the fallback below sends any longer one).
        let mut inline =
            [0u8; HEADER_LEN + myri_rpp::wire::MAX_DATA_HEADER_LEN + myri_rpp::wire::MAC_LEN];
        let inline_len = HEADER_LEN + header.len();
        let Some(dst) = inline.get_mut(..inline_len) else {
            return self.send_gather(to, header, payload);
        };
        dst[..HEADER_LEN].copy_from_slice(&self.header);
        dst[HEADER_LEN..].copy_from_slice(header);
        self.api
            .send_lent_untracked(
                CHAN,
                route,
                &inline[..inline_len],
                lent,
                at..at + payload.len(),
            )
            .map_err(would_block)?;
        self.pending += 1;
        Ok(Sent { copied: false })
    }

    fn reap(&mut self) {
        self.api.reap_sent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A send that finds the board's send channel full asks the board (a lock and a
    /// read across the bus) once between two steps of an inline board: until the board
    /// steps, no send can have finished.
    #[test]
    fn a_full_send_channel_is_asked_about_once_a_step() {
        let world = "can-send-once-a-step";
        let mut a = SimBackend::open(Some("a"), Some(world), false).expect("open a");
        let _b = SimBackend::open(Some("b"), Some(world), false).expect("open b");
        let to = a
            .resolve(&Address::Sim {
                name: Some("b".into()),
            })
            .expect("resolve b");
        let refreshes = |a: &SimBackend| a.api.unit().counters().shadow_refreshes;
        // Packets too long for PIO, so that each takes a send slot until the board
        // DMAs it; nothing steps the board meanwhile.
        let packet = vec![7u8; a.pio_max + 1];
        let slots = myri_mcp::hcb::SEND_SLOTS as usize;
        for _ in 0..slots {
            assert!(a.can_send(&to));
            a.send_gather(&to, &[], &packet).expect("a free slot");
        }
        let asked = refreshes(&a);
        assert!(!a.can_send(&to), "the channel is full");
        assert_eq!(refreshes(&a), asked + 1, "the first refusal asks the board");
        for _ in 0..5 {
            assert!(!a.can_send(&to));
        }
        assert_eq!(refreshes(&a), asked + 1, "later ones before a step do not");
        // Once the board has stepped it may have finished sends: the next test asks.
        let mut room = false;
        for _ in 0..100 {
            a.progress();
            if a.can_send(&to) {
                room = true;
                break;
            }
        }
        assert!(room, "the board finishes its sends as it steps");
        assert!(refreshes(&a) > asked + 1);
    }
}
