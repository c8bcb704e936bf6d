//! What the board benchmarks run on, in any of the three execution modes: two boards
//! joined by a switch ([`Pair`]), and the drivers that step a client program on board A
//! against a server program on board B, inline or threaded against a real clock
//! (`with_server`) or under the deterministic scheduler in virtual time (`run_sim`).
//!
//! Inline and threaded runs use one host thread per board: the calling thread is the
//! client (pinging or sending) side, a worker thread the server (echoing or receiving)
//! side, parked between rounds so that a [`Reference`](super::Reference) measured in the
//! alternate rounds has the machine to itself. The deterministic run uses the scheduler
//! in virtual time with a PCI64B's timing and SAN-2000 links, so its figures are the
//! model's.

use super::programs::{Program, Step};
use myri_device::board::{Board, BoardConfig, Timing};
use myri_device::fabric::topology::star;
use myri_device::fabric::{
    CableConfig, Fabric, FabricBuilder, FaultConfig, LinkModel, PortId, SwitchSize,
};
use myri_device::run::Clock;
use myri_device::sched::{Node, Outcome, Sim};
use myri_device::time::Time;
use myri_mcp::hcb::counter;
use myri_mcp::{
    Api, ChanRequest, Channel, InitOptions, McpConfig, McpRunner, Mode, RouteId, RouteSlot, Unit,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

/// How the control programs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecMode {
    /// Stepped by each host thread's progress calls.
    Inline,
    /// Each on its own thread (spin, then park).
    Threaded,
    /// Under the deterministic scheduler, in virtual time.
    Sim,
}

impl ExecMode {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ExecMode::Inline => "inline",
            ExecMode::Threaded => "threaded",
            ExecMode::Sim => "sim",
        }
    }
}

/// What to run on.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Execution mode.
    pub mode: ExecMode,
    /// Faults on every link.
    pub faults: FaultConfig,
    /// Seed of the faults (and of the scheduler's run).
    pub seed: u64,
    /// The MCP's settings.
    pub mcp: McpConfig,
    /// How long an exchange waits before it counts as lost.
    pub timeout: Duration,
    /// Reliable runs: what checks each packet end to end; `None` for the endpoint's
    /// default on `sim://` (the board's DMA checksums), or RPP's CRC-32C.
    pub integrity: Option<myri_transport::Integrity>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            mode: ExecMode::Inline,
            faults: FaultConfig::default(),
            seed: 1,
            mcp: McpConfig::default(),
            timeout: Duration::from_millis(20),
            integrity: None,
        }
    }
}

/// Packet accounting over a run: every packet sent was received or dropped somewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Packets the host programs sent.
    pub sent: u64,
    /// Packets the host programs received.
    pub received: u64,
    /// Packets dropped by the fabric or either board.
    pub dropped: u64,
    /// Extra copies the fabric made.
    pub duplicated: u64,
    /// Where the drops happened, by cause (only causes with drops).
    pub drops: Vec<(&'static str, u64)>,
}

impl Accounting {
    /// Whether `received + dropped` accounts for every packet sent (and every copy).
    pub fn balanced(&self) -> bool {
        self.received + self.dropped == self.sent + self.duplicated
    }
}

/// Two boards on one switch, with channel 1 open on each and route 1 to the other.
pub struct Pair {
    /// The fabric.
    pub fabric: Arc<Fabric>,
    ports: Vec<PortId>,
    /// The units.
    pub units: Vec<Arc<Unit>>,
    /// The APIs (A, B).
    pub apis: Vec<Api>,
    /// Channel 1 of A and of B.
    pub chans: Vec<Channel>,
    /// Where virtual time stopped after the last deterministic run.
    sim_now: Time,
}

/// The channel every benchmark receives on.
pub const CHAN: u8 = 1;
/// The route id every benchmark sends by.
pub const ROUTE: RouteId = RouteId(1);

impl Pair {
    /// Builds the pair and loads the MCPs (initialization is stepped inline; threaded
    /// units get their runner threads from the driver afterwards).
    pub fn new(setup: &Setup) -> Result<Pair, String> {
        let sim = setup.mode == ExecMode::Sim;
        let model = if sim {
            LinkModel::SAN_2000
        } else {
            LinkModel::default()
        };
        let mut b = FabricBuilder::new(setup.seed);
        let ports = star(
            &mut b,
            2,
            SwitchSize::Eight,
            CableConfig::symmetric(model, setup.faults),
        )
        .map_err(|e| e.to_string())?;
        let fabric = Arc::new(b.build());
        let mode = if setup.mode == ExecMode::Threaded {
            Mode::Threaded
        } else {
            Mode::Inline
        };
        let mut units = Vec::new();
        let mut apis = Vec::new();
        for (i, &port) in ports.iter().enumerate() {
            let mut cfg = BoardConfig::pci64b(i as u32);
            if sim {
                cfg.timing = Timing::PCI64B;
            }
            let mut board = Board::new(cfg);
            board.attach_link(fabric.clone(), port);
            let unit = Unit::new(board, 0x1_0000_0000 * (i as u64 + 1), mode);
            let api = init(
                &unit,
                InitOptions {
                    mcp: setup.mcp,
                    ..Default::default()
                },
            )?;
            units.push(unit);
            apis.push(api);
        }
        let mut chans = Vec::new();
        for (i, api) in apis.iter_mut().enumerate() {
            let route = fabric
                .route(ports[i], ports[1 - i])
                .ok_or("no route between the boards")?;
            api.add_route(RouteSlot::Id(ROUTE.0), &route)
                .map_err(|e| e.to_string())?;
            let chan = api
                .get_chan(ChanRequest::Specific(u32::from(CHAN)))
                .map_err(|e| e.to_string())?;
            api.init_recv_chan(&chan).map_err(|e| e.to_string())?;
            chans.push(chan);
        }
        Ok(Pair {
            fabric,
            ports,
            units,
            apis,
            chans,
            sim_now: Time::ZERO,
        })
    }

    /// Packet accounting from the fabric's and both MCPs' counters.
    pub fn accounting(&mut self, sent: u64, received: u64, refused: u64) -> Accounting {
        let f = self.fabric.counters();
        let mut drops = vec![
            ("link loss", f.link_drops),
            ("crc-8", f.crc_errors),
            ("bad route", f.bad_routes),
            ("port queue full", f.overflows),
            ("send channel full", refused),
        ];
        let causes = [
            (counter::DROP_RX_FULL, "rx pool full"),
            (counter::DROP_TYPE, "wrong type"),
            (counter::DROP_SUBTYPE, "wrong subtype"),
            (counter::DROP_CHANNEL, "bad channel"),
            (counter::DROP_LENGTH, "bad length"),
            (counter::DROP_OVERRUN, "receive overrun"),
            (counter::SEND_ERRORS, "send refused by the mcp"),
        ];
        for api in &mut self.apis {
            if let Ok(c) = api.mcp_counters() {
                for (id, name) in causes {
                    drops.push((name, u64::from(c.get(id))));
                }
            }
        }
        let mut merged: Vec<(&'static str, u64)> = Vec::new();
        for (name, n) in drops {
            match merged.iter_mut().find(|(m, _)| *m == name) {
                Some((_, total)) => *total += n,
                None => merged.push((name, n)),
            }
        }
        merged.retain(|&(_, n)| n > 0);
        let dropped = merged.iter().map(|&(_, n)| n).sum();
        Accounting {
            sent,
            received,
            dropped,
            duplicated: f.duplicated,
            drops: merged,
        }
    }

    /// The fabric ports.
    pub fn ports(&self) -> &[PortId] {
        &self.ports
    }
}

fn init(unit: &Arc<Unit>, opts: InitOptions) -> Result<Api, String> {
    if unit.mode() == Mode::Threaded {
        let stop = AtomicBool::new(false);
        let runner = McpRunner::new(unit.clone());
        let clock = Clock::new();
        std::thread::scope(|s| {
            s.spawn(|| runner.run(|| clock.now(), &stop));
            let r = Api::init(unit, opts).map_err(|e| e.to_string());
            stop.store(true, Ordering::Release);
            r
        })
    } else {
        Api::init(unit, opts).map_err(|e| e.to_string())
    }
}

/// The worker steps the server.
pub(crate) const RUN: u8 = 0;
/// The worker is parked (a reference round has the machine).
pub(crate) const PAUSE: u8 = 1;
/// The worker returns.
const STOP: u8 = 2;

/// Runs `body` on the calling thread with board A's API while a worker thread steps
/// `server` on board B's API whenever `body` sets it to `RUN` (through the function it is
/// given); threaded units also get their MCP threads. Returns `body`'s result and the
/// server.
pub(crate) fn with_server<S: Program + Send, R>(
    pair: &mut Pair,
    mode: ExecMode,
    mut server: S,
    body: impl FnOnce(&mut Api, &Clock, &dyn Fn(u8)) -> R,
) -> (R, S) {
    let clock = Clock::new();
    let control = AtomicU8::new(PAUSE);
    // What the worker last acted on: a round starts only once the worker is running it,
    // so a thread that has not been scheduled yet is not timed as the stack.
    let seen = AtomicU8::new(PAUSE);
    let stop_mcp = AtomicBool::new(false);
    let (a, rest) = pair.apis.split_at_mut(1);
    let (api_a, api_b) = (&mut a[0], &mut rest[0]);
    let units = pair.units.clone();
    std::thread::scope(|s| {
        if mode == ExecMode::Threaded {
            for unit in &units {
                let runner = McpRunner::new(unit.clone());
                let (clock, stop) = (&clock, &stop_mcp);
                s.spawn(move || runner.run(|| clock.now(), stop));
            }
        }
        let (control_ref, clock_ref, seen_ref) = (&control, &clock, &seen);
        let worker = s.spawn(move || {
            let mut pacer = Pacer::default();
            loop {
                let state = control_ref.load(Ordering::Acquire);
                seen_ref.store(state, Ordering::Release);
                match state {
                    STOP => break,
                    PAUSE => std::thread::park_timeout(Duration::from_millis(5)),
                    _ => {
                        pacer.turn(api_b, clock_ref, &mut server, mode);
                    }
                }
            }
            server
        });
        let worker_thread = worker.thread().clone();
        let set = |state: u8| {
            control.store(state, Ordering::Release);
            worker_thread.unpark();
            if state == RUN {
                // A worker that panicked never runs again: go on, and its panic is
                // raised when it is joined below.
                while seen.load(Ordering::Acquire) != RUN && !worker.is_finished() {
                    std::thread::yield_now();
                }
            }
        };
        let r = body(api_a, &clock, &set);
        set(STOP);
        let server = match worker.join() {
            Ok(s) => s,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        stop_mcp.store(true, Ordering::Release);
        (r, server)
    })
}

/// Quiet spins before a driver's idle loop steps its program anyway (for timeouts): a
/// spin asks [`Api::is_quiet`] (a few loads).
const QUIET_SPINS: u32 = 256;

/// Quiet spins between two clock readings while waiting: a reading costs about ten
/// spins on this machine, and a recent one lets the turn that follows skip its own.
const SPINS_PER_READING: u32 = 8;

/// Busy turns in a row that may reuse a clock reading (see [`Pacer`]).
const BUSY_TURNS: u32 = 4;

/// Paces one host thread's loop over its board and its program.
///
/// While the board is quiet (nothing arrived, nothing to do, see [`Api::is_quiet`]) and
/// the last turn did nothing, it spins on a few loads and reads the clock only every
/// [`QUIET_SPINS`] spins, so that timeouts still run. After a step that did something
/// (sent, say) it lets the board work again at once, so that what was sent leaves now
/// and not a turn later.
///
/// A program that times itself ([`Program::keeps_own_time`]) is not held up by clock
/// reads: when work appears it runs at the reading taken before, which has passed, and
/// busy turns reuse a reading up to [`BUSY_TURNS`] times. Time given to the board never
/// goes backwards and never runs ahead of the clock; a packet stamped later than the
/// reading is not taken yet, and a turn that finds nothing reads the clock next. Any
/// other program is stepped at a fresh reading every turn.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    /// The last clock reading.
    now: Option<Time>,
    /// The last turn did nothing.
    idle: bool,
    /// The last turn ran at an earlier reading.
    reused: bool,
    /// Busy turns since the last reading.
    busy: u32,
}

impl Pacer {
    /// Spins while the board is quiet, for at most [`QUIET_SPINS`] spins, keeping a
    /// recent clock reading. Returns whether work appeared.
    fn wait_for_work(&mut self, api: &Api, clock: &Clock) -> bool {
        for spin in 1..=QUIET_SPINS {
            if !api.is_quiet() {
                return true;
            }
            if spin % SPINS_PER_READING == 0 {
                self.now = Some(clock.now());
                self.reused = false;
            } else {
                std::hint::spin_loop();
            }
        }
        false
    }

    /// One turn: waits for work (quietly, for a while) if the last turn found none, then
    /// progress, a step, and progress again after a step that did something.
    pub(crate) fn turn(
        &mut self,
        api: &mut Api,
        clock: &Clock,
        program: &mut impl Program,
        mode: ExecMode,
    ) -> Step {
        let appeared = self.idle && self.wait_for_work(api, clock);
        let may_reuse = program.keeps_own_time() && !(self.idle && self.reused);
        let reuse = may_reuse
            && if self.idle {
                appeared
            } else {
                self.busy < BUSY_TURNS
            };
        let now = match self.now {
            Some(now) if reuse => {
                self.busy += 1;
                now
            }
            _ => {
                self.busy = 0;
                *self.now.insert(clock.now())
            }
        };
        let mut worked = api.progress(now);
        let step = program.step(api, now);
        if step.progressed {
            worked |= api.progress(now);
        }
        self.idle = !worked && !step.progressed;
        self.reused = reuse;
        if mode == ExecMode::Threaded && self.idle {
            // Four busy threads on two cores: let the MCP threads run.
            std::thread::yield_now();
        }
        step
    }
}

/// Steps `client` (after its API's progress) until it is done.
pub(crate) fn drive(api: &mut Api, clock: &Clock, client: &mut impl Program, mode: ExecMode) {
    let mut pacer = Pacer::default();
    while !pacer.turn(api, clock, client, mode).done {}
}

/// Keeps stepping `client` for `pause` so packets still in flight land.
pub(crate) fn settle(
    api: &mut Api,
    clock: &Clock,
    client: &mut impl Program,
    quiet: &Quiet,
    mode: ExecMode,
) {
    let give_up = clock.now() + Duration::from_secs(2);
    let mut since: Option<Time> = None;
    loop {
        let now = clock.now();
        let worked = api.progress(now);
        client.step(api, now);
        if quiet.held() == 0 {
            if now.saturating_since(*since.get_or_insert(now)) >= Duration::from_millis(2) {
                return;
            }
        } else {
            since = None;
        }
        if now >= give_up {
            return;
        }
        if mode == ExecMode::Threaded && !worked {
            std::thread::yield_now();
        }
    }
}

/// What tells a driver that nothing is in flight any more: the fabric's port queues and
/// what the boards hold.
pub(crate) struct Quiet {
    fabric: Arc<Fabric>,
    ports: Vec<PortId>,
    units: Vec<Arc<Unit>>,
}

impl Quiet {
    pub(crate) fn of(pair: &Pair) -> Quiet {
        Quiet {
            fabric: pair.fabric.clone(),
            ports: pair.ports.clone(),
            units: pair.units.clone(),
        }
    }

    /// Packets still on their way somewhere.
    pub(crate) fn held(&self) -> u64 {
        let queued: u64 = self
            .ports
            .iter()
            .map(|&p| self.fabric.queued(p) as u64)
            .sum();
        queued + self.units.iter().map(|u| u.packets_held()).sum::<u64>()
    }
}

/// A host program with its board as a node of the deterministic scheduler.
struct SimNode<P> {
    api: Api,
    program: P,
    port: PortId,
    done: bool,
    /// A server runs for as long as the client needs it and never holds the run up.
    server: bool,
}

impl<P: Program> Node for SimNode<P> {
    fn poll(&mut self, now: Time) -> Option<Time> {
        let mut wake = None;
        for _ in 0..10_000 {
            let worked = self.api.progress(now);
            // A finished program is not stepped again; its board still runs.
            let step = if self.done && !self.server {
                Step::default()
            } else {
                self.program.step(&mut self.api, now)
            };
            self.done |= step.done;
            wake = step.wake;
            if !worked && !step.progressed {
                break;
            }
        }
        [self.api.next_deadline(), wake]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .min()
    }

    fn port(&self) -> Option<PortId> {
        Some(self.port)
    }

    fn is_done(&self) -> bool {
        self.done || self.server
    }
}

/// Runs client (board A) and server (board B) under the scheduler until the client is
/// done and the network is quiet, or virtual `limit` passes; then runs the boards and the
/// server (not the client) for `after` more, so that what is still in flight lands.
/// The next run goes on from where virtual time stopped.
pub(crate) fn run_sim<C: Program + 'static, S: Program + 'static>(
    pair: &mut Pair,
    client: C,
    server: S,
    limit: Duration,
    after: Duration,
) -> Result<(C, S), String> {
    let mut sim: Sim<Box<dyn SimNodeDyn>> = Sim::starting_at(pair.fabric.clone(), pair.sim_now);
    let mut apis = std::mem::take(&mut pair.apis).into_iter();
    let (api_a, api_b) = (apis.next().ok_or("board a")?, apis.next().ok_or("board b")?);
    let start = sim.now();
    sim.add(Box::new(SimNode {
        api: api_a,
        program: client,
        port: pair.ports[0],
        done: false,
        server: false,
    }));
    sim.add(Box::new(SimNode {
        api: api_b,
        program: server,
        port: pair.ports[1],
        done: false,
        server: true,
    }));
    let outcome = sim.run_until_done(start + limit);
    if !after.is_zero() {
        sim.run_until(sim.now() + after);
    }
    pair.sim_now = sim.now();
    let mut nodes = sim.into_nodes().into_iter();
    let a = nodes.next().ok_or("node a")?.into_any();
    let b = nodes.next().ok_or("node b")?.into_any();
    let a = *a.downcast::<SimNode<C>>().map_err(|_| "node a type")?;
    let b = *b.downcast::<SimNode<S>>().map_err(|_| "node b type")?;
    pair.apis = vec![a.api, b.api];
    if outcome != Outcome::Done {
        return Err(format!(
            "the simulated run ended {outcome:?} before finishing"
        ));
    }
    Ok((a.program, b.program))
}

/// Object-safe face of a [`SimNode`], so two node types share one scheduler.
trait SimNodeDyn: Node {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

impl<P: Program + 'static> SimNodeDyn for SimNode<P> {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl Node for Box<dyn SimNodeDyn> {
    fn poll(&mut self, now: Time) -> Option<Time> {
        (**self).poll(now)
    }
    fn port(&self) -> Option<PortId> {
        (**self).port()
    }
    fn is_done(&self) -> bool {
        (**self).is_done()
    }
}

/// Takes channel 1 of board A and of board B out of the pair.
pub(crate) fn channels(pair: &mut Pair) -> Result<(Channel, Channel), String> {
    let mut chans = std::mem::take(&mut pair.chans).into_iter();
    Ok((
        chans.next().ok_or("channel a")?,
        chans.next().ok_or("channel b")?,
    ))
}
