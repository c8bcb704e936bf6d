//! A harness for whole-stack tests: clusters of simulated boards running the control
//! program, and host programs that run unchanged in the three execution modes.
//!
//! * **inline**: one thread steps every host program, and each host program's progress
//!   calls step its board's MCP;
//! * **threaded**: every MCP runs on its own thread ([`myri_mcp::McpRunner`]) against a
//!   real clock, and the host programs run on the test thread;
//! * **deterministic**: every host program with its board is a node of the device
//!   crate's scheduler, in virtual time.
//!
//! This crate is a driver: it may read clocks and spawn threads, unlike the layers below.

use myri_device::board::{Board, BoardConfig};
use myri_device::fabric::{CableConfig, Fabric, FabricBuilder, PortId};
use myri_device::sched::{Node, Outcome, Sim};
use myri_device::time::Time;
use myri_mcp::{Api, InitOptions, McpConfig, McpRunner, Mode, RouteId, RouteSlot, Unit};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// How the control programs are stepped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// By the host programs' progress calls, on one thread.
    Inline,
    /// Each MCP on its own thread.
    Threaded,
    /// Under the deterministic scheduler.
    Deterministic,
}

/// All three modes.
pub const MODES: [ExecMode; 3] = [
    ExecMode::Inline,
    ExecMode::Threaded,
    ExecMode::Deterministic,
];

/// Boards on a fabric, each with an attached [`Api`].
pub struct Cluster {
    /// The fabric.
    pub fabric: Arc<Fabric>,
    /// The fabric port of each board.
    pub ports: Vec<PortId>,
    /// The units.
    pub units: Vec<Arc<Unit>>,
    /// One API per board.
    pub apis: Vec<Api>,
}

impl Cluster {
    /// Boards on the host ports of `builder`'s fabric, each with its MCP loaded (inline
    /// init), stepped afterwards in `mode`.
    pub fn new(
        builder: &FabricBuilder,
        ports: Vec<PortId>,
        mode: ExecMode,
        mcp: McpConfig,
    ) -> Cluster {
        let fabric = Arc::new(builder.build());
        let unit_mode = if mode == ExecMode::Threaded {
            Mode::Threaded
        } else {
            Mode::Inline
        };
        let units: Vec<Arc<Unit>> = ports
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let mut board = Board::new(BoardConfig::pci64b(i as u32));
                board.attach_link(fabric.clone(), p);
                Unit::new(board, 0x1_0000_0000 * (i as u64 + 1), unit_mode)
            })
            .collect();
        let opts = InitOptions {
            mcp,
            ..Default::default()
        };
        let apis = units.iter().map(|u| init_api(u, opts)).collect();
        Cluster {
            fabric,
            ports,
            units,
            apis,
        }
    }

    /// Two boards on one 8-port switch.
    pub fn pair(seed: u64, cable: CableConfig, mode: ExecMode, mcp: McpConfig) -> Cluster {
        let mut b = FabricBuilder::new(seed);
        let ports = myri_device::fabric::topology::star(
            &mut b,
            2,
            myri_device::fabric::SwitchSize::Eight,
            cable,
        )
        .expect("two hosts fit a switch");
        Cluster::new(&b, ports, mode, mcp)
    }

    /// Two boards on one switch, inline, default cable and MCP, each with route 1 to the
    /// other: the set-up of the channel API's scripted tests.
    pub fn routed_pair(seed: u64) -> Cluster {
        let mut c = Cluster::pair(
            seed,
            CableConfig::default(),
            ExecMode::Inline,
            McpConfig::default(),
        );
        c.route(0, 1, 1);
        c.route(1, 0, 1);
        c
    }

    /// Adds, on board `from`, the fabric's shortest route to board `to` at id `id`.
    pub fn route(&mut self, from: usize, to: usize, id: u32) -> RouteId {
        let route = self
            .fabric
            .route(self.ports[from], self.ports[to])
            .expect("reachable");
        self.apis[from]
            .add_route(RouteSlot::Id(id), &route)
            .expect("route fits")
    }
}

/// Attaches to a unit. In threaded mode the MCP is not running yet, so initialization is
/// stepped inline by a temporary inline view; afterwards a runner thread takes over.
fn init_api(unit: &Arc<Unit>, opts: InitOptions) -> Api {
    if unit.mode() == Mode::Threaded {
        // Initialization needs the MCP to answer: run it on a helper thread meanwhile.
        let stop = AtomicBool::new(false);
        let runner = McpRunner::new(unit.clone());
        let clock = myri_device::run::Clock::new();
        std::thread::scope(|s| {
            s.spawn(|| runner.run(|| clock.now(), &stop));
            let api = Api::init(unit, opts).expect("init");
            stop.store(true, std::sync::atomic::Ordering::Release);
            api
        })
    } else {
        Api::init(unit, opts).expect("init")
    }
}

/// What a host program did in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// It did something (and may do more now).
    pub progressed: bool,
    /// It has finished.
    pub done: bool,
    /// When it wants to run again by itself (a timeout), if ever.
    pub wake: Option<Time>,
}

/// A host program: runs against its board's [`Api`], in any mode.
pub trait HostProgram {
    /// Does what can be done at `now`.
    fn step(&mut self, api: &mut Api, now: Time) -> Step;
}

/// Runs host programs (one per board, `None` for boards without one) until all finish or
/// `limit` passes (virtual time in the inline and deterministic modes, real time in the
/// threaded one). Returns the programs and whether all finished.
pub fn run<P: HostProgram + Send>(
    cluster: &mut Cluster,
    mode: ExecMode,
    mut programs: Vec<Option<P>>,
    limit: Duration,
) -> (Vec<Option<P>>, bool) {
    match mode {
        ExecMode::Inline => {
            let done = run_rounds(cluster, &mut programs, limit, false);
            (programs, done)
        }
        ExecMode::Threaded => {
            let stop = AtomicBool::new(false);
            let clock = myri_device::run::Clock::new();
            let done = std::thread::scope(|s| {
                for unit in &cluster.units {
                    let runner = McpRunner::new(unit.clone());
                    let (stop, clock) = (&stop, &clock);
                    s.spawn(move || runner.run(|| clock.now(), stop));
                }
                let done = run_rounds(cluster, &mut programs, limit, true);
                stop.store(true, std::sync::atomic::Ordering::Release);
                done
            });
            (programs, done)
        }
        ExecMode::Deterministic => run_deterministic(cluster, programs, limit),
    }
}

/// Round-robin over the host programs, each after its board's progress call.
fn run_rounds<P: HostProgram>(
    cluster: &mut Cluster,
    programs: &mut [Option<P>],
    limit: Duration,
    real_time: bool,
) -> bool {
    let clock = myri_device::run::Clock::new();
    let start = Time::from_micros(1_000_000);
    let mut virtual_now = start;
    loop {
        let now = if real_time { clock.now() } else { virtual_now };
        let mut all_done = true;
        for (api, program) in cluster.apis.iter_mut().zip(programs.iter_mut()) {
            api.progress(now);
            if let Some(p) = program {
                all_done &= p.step(api, now).done;
            }
        }
        if all_done {
            return true;
        }
        let elapsed = if real_time {
            now.saturating_since(Time::ZERO)
        } else {
            virtual_now.saturating_since(start)
        };
        if elapsed > limit {
            return false;
        }
        virtual_now += Duration::from_micros(1);
        if real_time {
            std::thread::yield_now();
        }
    }
}

/// A host program with its board, as a node of the deterministic scheduler.
struct HostNode<P> {
    api: Api,
    program: Option<P>,
    port: PortId,
    done: bool,
}

impl<P: HostProgram> Node for HostNode<P> {
    fn poll(&mut self, now: Time) -> Option<Time> {
        let mut wake = None;
        for _ in 0..10_000 {
            let worked = self.api.progress(now);
            let step = match &mut self.program {
                Some(p) => p.step(&mut self.api, now),
                None => Step {
                    done: true,
                    ..Step::default()
                },
            };
            self.done = step.done;
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
        self.done
    }
}

fn run_deterministic<P: HostProgram>(
    cluster: &mut Cluster,
    programs: Vec<Option<P>>,
    limit: Duration,
) -> (Vec<Option<P>>, bool) {
    let mut sim = Sim::new(cluster.fabric.clone());
    let start = sim.now();
    let apis = std::mem::take(&mut cluster.apis);
    for ((api, program), &port) in apis.into_iter().zip(programs).zip(&cluster.ports) {
        let done = program.is_none();
        sim.add(HostNode {
            api,
            program,
            port,
            done,
        });
    }
    let outcome = sim.run_until_done(start + limit);
    let mut programs = Vec::new();
    for node in sim.into_nodes() {
        cluster.apis.push(node.api);
        programs.push(node.program);
    }
    (programs, outcome == Outcome::Done)
}
