//! Two boards on one switch, each with a host attached, run in virtual time: what the GM
//! and Trapeze tests, the frame demo and the benchmarks drive.
//!
//! [`Testbed::step`] lets both boards work at the current virtual time and, when neither
//! has anything to do, moves time to the earliest deadline either reports. Nothing here
//! reads a clock.

use crate::{Api, ApiError, InitOptions, McpConfig, Mode, RouteId, RouteSlot, Unit};
use myri_device::board::{Board, BoardConfig, Timing};
use myri_device::fabric::link::LinkModel;
use myri_device::fabric::topology::star;
use myri_device::fabric::{CableConfig, FabricBuilder, SwitchSize};
use myri_device::sram::SramSize;
use myri_device::time::Time;
use std::sync::Arc;
use std::time::Duration;

/// How to build a [`Testbed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestbedConfig {
    /// The control program both boards run.
    pub mcp: McpConfig,
    /// Engine speeds of both boards.
    pub timing: Timing,
    /// Engine speeds of B's board instead, if given (a receiver that is not the
    /// bottleneck, when the sender's paths are compared).
    pub timing_b: Option<Timing>,
    /// The cables' model.
    pub link: LinkModel,
    /// Extra DMA memory per host for windows and payload buffers.
    pub extra_memory: usize,
    /// Seed of the fabric.
    pub seed: u64,
    /// SRAM of both boards.
    pub sram: SramSize,
}

impl Default for TestbedConfig {
    fn default() -> TestbedConfig {
        TestbedConfig {
            mcp: McpConfig::default(),
            timing: Timing::default(),
            timing_b: None,
            link: LinkModel::default(),
            extra_memory: 1 << 20,
            seed: 1,
            sram: SramSize::Mib2,
        }
    }
}

/// A 133 MHz LANai 9 board in a 32-bit, 33 MHz PCI slot on a Myrinet-2000 link: the
/// machine of seed 001's measurements (§3.2.2, §4.2.1). Host DMA at 133 MB/s, half the
/// LANai's theoretical copy rate, as the seed states.
pub const SEED001_TIMING: Timing = Timing {
    host_dma_bytes_per_sec: 133_000_000,
    send_bytes_per_sec: 250_000_000,
};

/// The LANai 9's clock in seed 001's measurements, in MHz.
pub const SEED001_LANAI_MHZ: u32 = 133;

/// Two hosts, A and B, on two boards joined by a switch.
pub struct Testbed {
    /// Host A.
    pub a: Api,
    /// Host B.
    pub b: Api,
    /// Virtual time now.
    pub now: Time,
    /// Route id of A's route to B (and of B's to A).
    pub route: RouteId,
}

impl Testbed {
    /// Builds the fabric and both boards, and attaches a host to each.
    pub fn new(cfg: TestbedConfig) -> Result<Testbed, ApiError> {
        let mut fb = FabricBuilder::new(cfg.seed);
        let cable = CableConfig {
            model: cfg.link,
            ..CableConfig::default()
        };
        let ports = star(&mut fb, 2, SwitchSize::Eight, cable)
            .map_err(|_| ApiError::LayoutMismatch("fabric"))?;
        let fabric = Arc::new(fb.build());
        let units: Vec<Arc<Unit>> = ports
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let mut bc = BoardConfig::pci64b(i as u32);
                bc.timing = match (i, cfg.timing_b) {
                    (1, Some(t)) => t,
                    _ => cfg.timing,
                };
                bc.eeprom.sram_size = cfg.sram;
                let mut board = Board::new(bc);
                board.attach_link(fabric.clone(), p);
                Unit::with_extra_memory(
                    board,
                    0x1_0000_0000 * (i as u64 + 1),
                    Mode::Inline,
                    cfg.extra_memory,
                )
            })
            .collect();
        let opts = InitOptions {
            mcp: cfg.mcp,
            ..Default::default()
        };
        let mut a = Api::init(&units[0], opts)?;
        let mut b = Api::init(&units[1], opts)?;
        let ab = fabric
            .route(ports[0], ports[1])
            .ok_or(ApiError::LayoutMismatch("route"))?;
        let ba = fabric
            .route(ports[1], ports[0])
            .ok_or(ApiError::LayoutMismatch("route"))?;
        let route = a.add_route(RouteSlot::Id(1), &ab)?;
        b.add_route(RouteSlot::Id(1), &ba)?;
        Ok(Testbed {
            a,
            b,
            now: Time::from_micros(100_000),
            route,
        })
    }

    /// Lets both boards work at `now`; if neither did anything, moves time to the next
    /// deadline. Returns false when nothing is due at all (both boards idle).
    pub fn step(&mut self) -> bool {
        let wa = self.a.progress(self.now);
        let wb = self.b.progress(self.now);
        if wa || wb {
            return true;
        }
        let next = [self.a.next_deadline(), self.b.next_deadline()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t > self.now => {
                self.now = t;
                true
            }
            Some(_) => {
                // Due now yet nothing moved (a settling engine): let a little time pass.
                self.now += Duration::from_nanos(100);
                true
            }
            None => false,
        }
    }

    /// Steps until virtual time reaches `t`, jumping to it when both boards are idle
    /// (a disk or a timer of the caller's is what the time is waited for).
    pub fn advance_to(&mut self, t: Time) {
        while self.now < t {
            let before = self.now;
            if !self.step() {
                self.now = t;
            } else if self.now > t && before <= t {
                // A deadline past `t`: stop there instead.
                self.now = t;
            }
        }
    }

    /// Steps until `done` holds, at most `max_steps` times; returns whether it held.
    pub fn run_until(
        &mut self,
        mut done: impl FnMut(&mut Testbed) -> bool,
        max_steps: u64,
    ) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() && !done(self) {
                // Idle: the condition can only change if the caller acts.
                return false;
            }
        }
        done(self)
    }
}
