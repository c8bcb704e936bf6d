//! The deterministic scheduler: a whole fabric and its nodes in virtual time, from one
//! seed.
//!
//! A [`Node`] is anything that runs at instants: a board with its control program, a
//! traffic generator, a host program. [`Sim::step`] jumps to the earliest instant at which
//! something is due (a node's own deadline, or a new packet whose head reaches the node's
//! port) and polls every due node in index order, repeating at that instant until nothing
//! more is due. Nothing reads a clock, nothing spawns a thread, and the same nodes, fabric
//! seed and calls give the same trace hash every time.

use crate::fabric::{Fabric, PortId};
use crate::time::Time;
use std::sync::Arc;

/// Something the scheduler runs.
pub trait Node {
    /// Does the work due at `now` and returns when this node next wants to run by itself
    /// (`None`: only when a new packet reaches its port).
    fn poll(&mut self, now: Time) -> Option<Time>;

    /// The fabric port whose arrivals wake this node.
    fn port(&self) -> Option<PortId> {
        None
    }

    /// Whether the node has finished its work (for [`Sim::run_until_done`]).
    fn is_done(&self) -> bool {
        false
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing is due ever again.
    Idle,
    /// The time limit was reached.
    Deadline,
    /// Every node reports it is done.
    Done,
    /// Nodes kept asking to run at the same instant without time moving on.
    Stalled,
}

#[derive(Debug, Clone, Copy)]
struct Wake {
    deadline: Option<Time>,
    last_poll: Option<Time>,
    arrivals_seen: u64,
}

/// Passes at one instant before the scheduler declares a stall.
const MAX_PASSES_PER_INSTANT: u32 = 100_000;

/// The scheduler.
pub struct Sim<N> {
    fabric: Arc<Fabric>,
    nodes: Vec<N>,
    wakes: Vec<Wake>,
    now: Time,
    polls: u64,
}

impl<N: Node> Sim<N> {
    /// A scheduler over `fabric`, at time zero.
    pub fn new(fabric: Arc<Fabric>) -> Sim<N> {
        Sim::starting_at(fabric, Time::ZERO)
    }

    /// A scheduler over `fabric` whose clock starts at `now`: for a run that continues
    /// where an earlier one over the same fabric and boards stopped.
    pub fn starting_at(fabric: Arc<Fabric>, now: Time) -> Sim<N> {
        Sim {
            fabric,
            nodes: Vec::new(),
            wakes: Vec::new(),
            now,
            polls: 0,
        }
    }

    /// Adds a node, due at once. Returns its index.
    pub fn add(&mut self, node: N) -> usize {
        self.nodes.push(node);
        self.wakes.push(Wake {
            deadline: Some(self.now),
            last_poll: None,
            arrivals_seen: 0,
        });
        self.nodes.len() - 1
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The fabric.
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// The nodes.
    pub fn nodes(&self) -> &[N] {
        &self.nodes
    }

    /// One node, mutably (to script it between steps). Marks it due.
    pub fn node_mut(&mut self, i: usize) -> &mut N {
        self.wakes[i].deadline = Some(self.now);
        &mut self.nodes[i]
    }

    /// The nodes, taking them out of the scheduler.
    pub fn into_nodes(self) -> Vec<N> {
        self.nodes
    }

    /// How many polls have been made.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// When a new packet reaches node `i`'s port (one it has not been woken for).
    fn arrival(&self, i: usize) -> Option<Time> {
        let port = self.nodes[i].port()?;
        let head = self.fabric.next_arrival(port)?;
        let w = &self.wakes[i];
        let fresh =
            w.last_poll.is_none_or(|t| head > t) || self.fabric.arrivals(port) != w.arrivals_seen;
        fresh.then_some(head)
    }

    /// The next instant at which something is due.
    pub fn next_event(&self) -> Option<Time> {
        (0..self.nodes.len())
            .flat_map(|i| [self.wakes[i].deadline, self.arrival(i)])
            .flatten()
            .min()
    }

    fn poll_due(&mut self) -> bool {
        let mut any = false;
        for i in 0..self.nodes.len() {
            let due = self.wakes[i].deadline.is_some_and(|t| t <= self.now)
                || self.arrival(i).is_some_and(|t| t <= self.now);
            if due {
                any = true;
                let arrivals = self.nodes[i].port().map_or(0, |p| self.fabric.arrivals(p));
                let next = self.nodes[i].poll(self.now);
                self.polls += 1;
                self.wakes[i] = Wake {
                    deadline: next,
                    last_poll: Some(self.now),
                    arrivals_seen: arrivals,
                };
            }
        }
        any
    }

    /// Advances to the next instant something is due and runs everything due there.
    /// Returns `None` if nothing will ever be due, or the instant reached.
    pub fn step(&mut self) -> Result<Option<Time>, Outcome> {
        let Some(next) = self.next_event() else {
            return Ok(None);
        };
        self.now = self.now.max(next);
        for _ in 0..MAX_PASSES_PER_INSTANT {
            if !self.poll_due() {
                return Ok(Some(self.now));
            }
            if self.next_event().is_none_or(|t| t > self.now) {
                return Ok(Some(self.now));
            }
        }
        Err(Outcome::Stalled)
    }

    /// Runs until `limit` (and leaves the clock there) or until nothing is due.
    pub fn run_until(&mut self, limit: Time) -> Outcome {
        loop {
            match self.next_event() {
                None => return Outcome::Idle,
                Some(t) if t > limit => {
                    self.now = limit;
                    return Outcome::Deadline;
                }
                Some(_) => {
                    if let Err(o) = self.step() {
                        return o;
                    }
                }
            }
        }
    }

    /// Runs until every node is done, nothing is due, or `limit` is reached.
    pub fn run_until_done(&mut self, limit: Time) -> Outcome {
        loop {
            if self.nodes.iter().all(Node::is_done) {
                return Outcome::Done;
            }
            match self.next_event() {
                None => return Outcome::Idle,
                Some(t) if t > limit => return Outcome::Deadline,
                Some(_) => {
                    if let Err(o) = self.step() {
                        return o;
                    }
                }
            }
        }
    }
}
