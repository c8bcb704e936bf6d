//! Seeded fault injection on one direction of a cable, in the manner of smoltcp's
//! `FaultInjector`: a middleware that decides, packet by packet, what happens to it.
//!
//! Every decision draws from the link's own ChaCha8 generator, seeded from the fabric seed
//! and the link's id, so a run is reproducible from one seed no matter how many links there
//! are, and changing one link's faults does not change another's.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use thiserror::Error;

/// Gilbert–Elliott burst loss: a two-state chain that enters a "bad" state with
/// probability `enter` per packet, leaves it with probability `exit`, and drops packets in
/// the bad state with probability `loss`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstLoss {
    /// Probability per packet of entering the bad state.
    pub enter: f64,
    /// Probability per packet of leaving it.
    pub exit: f64,
    /// Probability of dropping a packet while in the bad state.
    pub loss: f64,
}

impl BurstLoss {
    /// The long-run fraction of packets dropped.
    pub fn mean_loss(&self) -> f64 {
        let bad = self.enter / (self.enter + self.exit);
        bad * self.loss
    }
}

/// Random link flapping: up for an exponentially distributed time with mean `mean_up`,
/// then down for one with mean `mean_down`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkFlap {
    /// Mean time up.
    pub mean_up: Duration,
    /// Mean time down.
    pub mean_down: Duration,
}

/// What to do to packets on one direction of a cable. The default does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultConfig {
    /// Probability of dropping a packet, independently of every other.
    pub drop: f64,
    /// Burst loss on top of independent loss.
    pub burst: Option<BurstLoss>,
    /// Probability of flipping one random bit of a packet.
    pub corrupt: f64,
    /// Probability of flipping one random bit of a packet's contents (route and body, not
    /// its CRC byte) and recomputing its CRC-8 over the changed contents, as a faulty or
    /// malicious switch would: corruption the link's CRC-8 cannot see, which only an
    /// end-to-end check catches. A packet whose CRC was already bad stays bad.
    pub corrupt_resealed: f64,
    /// Probability of delivering a packet twice.
    pub duplicate: f64,
    /// Probability of holding a packet back by [`FaultConfig::reorder_delay`] so that
    /// later packets overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back (default: 20 µs when zero).
    pub reorder_delay: Duration,
    /// Extra delay added to every packet.
    pub delay: Duration,
    /// Uniform random extra delay in `[0, jitter]` added to every packet.
    pub jitter: Duration,
    /// Random link flapping.
    pub flap: Option<LinkFlap>,
    /// Drop the first packet after the link comes up (seed 002 §4.1: early SerDes chips
    /// drop the first packet in each direction after reset or reconnection).
    pub drop_first_after_init: bool,
}

/// A probability outside `[0, 1]` or a burst model that cannot be.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
#[error("fault setting {name} = {value} is not a probability in [0, 1]")]
pub struct BadProbability {
    /// Which setting.
    pub name: &'static str,
    /// Its value.
    pub value: f64,
}

impl FaultConfig {
    /// Independent loss, corruption, duplication and reordering at the given rates.
    pub fn rates(drop: f64, corrupt: f64, duplicate: f64, reorder: f64) -> FaultConfig {
        FaultConfig {
            drop,
            corrupt,
            duplicate,
            reorder,
            ..FaultConfig::default()
        }
    }

    /// Checks that every probability is in `[0, 1]`.
    pub fn validate(&self) -> Result<(), BadProbability> {
        let mut checks = vec![
            ("drop", self.drop),
            ("corrupt", self.corrupt),
            ("corrupt_resealed", self.corrupt_resealed),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ];
        if let Some(b) = self.burst {
            checks.extend([
                ("burst.enter", b.enter),
                ("burst.exit", b.exit),
                ("burst.loss", b.loss),
            ]);
            if b.enter + b.exit == 0.0 {
                return Err(BadProbability {
                    name: "burst.enter + burst.exit",
                    value: 0.0,
                });
            }
        }
        for (name, value) in checks {
            if !(0.0..=1.0).contains(&value) {
                return Err(BadProbability { name, value });
            }
        }
        Ok(())
    }

    /// Whether this configuration never changes a packet.
    pub fn is_clean(&self) -> bool {
        *self
            == FaultConfig {
                reorder_delay: self.reorder_delay,
                ..FaultConfig::default()
            }
    }

    /// The hold-back time of a reordered packet.
    pub fn reorder_hold(&self) -> Duration {
        if self.reorder_delay.is_zero() {
            Duration::from_micros(20)
        } else {
            self.reorder_delay
        }
    }
}

/// Why the injector dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// Independent loss.
    Random,
    /// Burst loss.
    Burst,
    /// The link was down.
    LinkDown,
    /// The first packet after the link came up.
    FirstAfterInit,
}

/// What the injector decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Dropped, and why.
    pub drop: Option<DropCause>,
    /// Bit to flip, as a random number the caller takes modulo the packet's bit length.
    pub flip: Option<u64>,
    /// Bit of the contents to flip with the CRC-8 recomputed, as a random number the
    /// caller takes modulo the contents' bit length ([`FaultConfig::corrupt_resealed`]).
    pub flip_resealed: Option<u64>,
    /// Deliver a second copy.
    pub duplicate: bool,
    /// Extra delay from delay and jitter.
    pub delay: Duration,
    /// Extra hold-back for reordering.
    pub reorder: Option<Duration>,
}

/// The per-direction fault state: configuration, generator, burst state, link state.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    config: FaultConfig,
    rng: ChaCha8Rng,
    in_burst: bool,
    up: bool,
    /// When the flapping link next changes state.
    next_flap: Option<crate::Time>,
    /// The next packet is the first since the link came up.
    first_after_init: bool,
}

/// SplitMix64: turns (seed, stream) into well-separated 64-bit seeds.
pub fn mix_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn exponential(rng: &mut ChaCha8Rng, mean: Duration) -> Duration {
    let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    Duration::from_secs_f64(-u.ln() * mean.as_secs_f64())
}

impl FaultInjector {
    /// An injector for the link with id `stream` of a fabric seeded with `seed`.
    pub fn new(config: FaultConfig, seed: u64, stream: u64) -> FaultInjector {
        let mut rng = ChaCha8Rng::seed_from_u64(mix_seed(seed, stream));
        let next_flap = config
            .flap
            .map(|f| crate::Time::ZERO + exponential(&mut rng, f.mean_up));
        FaultInjector {
            config,
            rng,
            in_burst: false,
            up: true,
            next_flap,
            first_after_init: config.drop_first_after_init,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Replaces the configuration (the generator's state is kept).
    pub fn set_config(&mut self, config: FaultConfig, now: crate::Time) {
        self.next_flap = config
            .flap
            .map(|f| now + exponential(&mut self.rng, f.mean_up));
        if config.drop_first_after_init && !self.config.drop_first_after_init {
            self.first_after_init = true;
        }
        self.config = config;
    }

    /// Whether the link is up.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Brings the link down or up. Coming up re-arms the first-packet drop.
    pub fn set_up(&mut self, up: bool) {
        if up && !self.up && self.config.drop_first_after_init {
            self.first_after_init = true;
        }
        self.up = up;
    }

    /// Applies flapping up to `now`; returns the state changes `(time, up)` that happened.
    pub fn flap_to(&mut self, now: crate::Time, mut changed: impl FnMut(crate::Time, bool)) {
        let Some(flap) = self.config.flap else { return };
        while let Some(at) = self.next_flap.filter(|&at| at <= now) {
            let up = !self.up;
            self.set_up(up);
            changed(at, up);
            let mean = if up { flap.mean_up } else { flap.mean_down };
            self.next_flap =
                Some(at + exponential(&mut self.rng, mean).max(Duration::from_nanos(1)));
        }
    }

    /// Decides the fate of one packet.
    pub fn judge(&mut self) -> Verdict {
        let mut v = Verdict::default();
        if !self.up {
            v.drop = Some(DropCause::LinkDown);
            return v;
        }
        if self.first_after_init {
            self.first_after_init = false;
            v.drop = Some(DropCause::FirstAfterInit);
            return v;
        }
        let c = self.config;
        if c.drop > 0.0 && self.rng.random::<f64>() < c.drop {
            v.drop = Some(DropCause::Random);
            return v;
        }
        if let Some(b) = c.burst {
            let flip = if self.in_burst { b.exit } else { b.enter };
            if self.rng.random::<f64>() < flip {
                self.in_burst = !self.in_burst;
            }
            if self.in_burst && self.rng.random::<f64>() < b.loss {
                v.drop = Some(DropCause::Burst);
                return v;
            }
        }
        if c.corrupt > 0.0 && self.rng.random::<f64>() < c.corrupt {
            v.flip = Some(self.rng.random::<u64>());
        }
        if c.corrupt_resealed > 0.0 && self.rng.random::<f64>() < c.corrupt_resealed {
            v.flip_resealed = Some(self.rng.random::<u64>());
        }
        if c.duplicate > 0.0 && self.rng.random::<f64>() < c.duplicate {
            v.duplicate = true;
        }
        v.delay = c.delay;
        if !c.jitter.is_zero() {
            let nanos = c.jitter.as_nanos().min(u128::from(u64::MAX)) as u64;
            v.delay += Duration::from_nanos(self.rng.random_range(0..=nanos));
        }
        if c.reorder > 0.0 && self.rng.random::<f64>() < c.reorder {
            v.reorder = Some(c.reorder_hold());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(FaultConfig::rates(0.1, 0.0, 1.0, 0.5).validate().is_ok());
        assert_eq!(
            FaultConfig::rates(1.5, 0.0, 0.0, 0.0).validate(),
            Err(BadProbability {
                name: "drop",
                value: 1.5
            })
        );
        assert!(FaultConfig::rates(0.0, -0.1, 0.0, 0.0).validate().is_err());
        assert!(
            FaultConfig::rates(f64::NAN, 0.0, 0.0, 0.0)
                .validate()
                .is_err()
        );
        let burst = FaultConfig {
            burst: Some(BurstLoss {
                enter: 0.0,
                exit: 0.0,
                loss: 1.0,
            }),
            ..Default::default()
        };
        assert!(burst.validate().is_err());
        assert!(FaultConfig::default().is_clean());
        assert!(!FaultConfig::rates(0.0, 0.0, 0.1, 0.0).is_clean());
    }

    #[test]
    fn streams_are_independent_and_reproducible() {
        let config = FaultConfig::rates(0.3, 0.0, 0.0, 0.0);
        let run = |seed, stream| {
            let mut f = FaultInjector::new(config, seed, stream);
            (0..200)
                .map(|_| f.judge().drop.is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7, 1), run(7, 1));
        assert_ne!(run(7, 1), run(7, 2));
        assert_ne!(run(7, 1), run(8, 1));
    }

    #[test]
    fn burst_loss_comes_in_runs_at_the_configured_mean() {
        let b = BurstLoss {
            enter: 0.01,
            exit: 0.2,
            loss: 1.0,
        };
        let mut f = FaultInjector::new(
            FaultConfig {
                burst: Some(b),
                ..Default::default()
            },
            1,
            1,
        );
        let n = 200_000;
        let drops: Vec<bool> = (0..n)
            .map(|_| f.judge().drop == Some(DropCause::Burst))
            .collect();
        let rate = drops.iter().filter(|&&d| d).count() as f64 / n as f64;
        assert!(
            (rate - b.mean_loss()).abs() < 0.01,
            "rate {rate} vs {}",
            b.mean_loss()
        );
        // Runs: the mean length of a run of drops is about 1 / exit = 5.
        let runs = drops.windows(2).filter(|w| !w[0] && w[1]).count();
        let mean_run = drops.iter().filter(|&&d| d).count() as f64 / runs as f64;
        assert!((4.0..6.0).contains(&mean_run), "mean run {mean_run}");
    }

    #[test]
    fn first_packet_after_init_and_after_each_link_up() {
        let mut f = FaultInjector::new(
            FaultConfig {
                drop_first_after_init: true,
                ..Default::default()
            },
            3,
            3,
        );
        assert_eq!(f.judge().drop, Some(DropCause::FirstAfterInit));
        assert_eq!(f.judge().drop, None);
        f.set_up(false);
        assert_eq!(f.judge().drop, Some(DropCause::LinkDown));
        f.set_up(true);
        assert_eq!(f.judge().drop, Some(DropCause::FirstAfterInit));
        assert_eq!(f.judge().drop, None);
    }

    #[test]
    fn flapping_alternates_with_the_configured_means() {
        let flap = LinkFlap {
            mean_up: Duration::from_millis(9),
            mean_down: Duration::from_millis(1),
        };
        let mut f = FaultInjector::new(
            FaultConfig {
                flap: Some(flap),
                ..Default::default()
            },
            5,
            5,
        );
        let mut changes = Vec::new();
        f.flap_to(crate::Time::from_micros(10_000_000), |at, up| {
            changes.push((at, up))
        });
        assert!(changes.len() > 1000, "{} changes in 10 s", changes.len());
        assert!(
            changes
                .windows(2)
                .all(|w| w[0].1 != w[1].1 && w[0].0 <= w[1].0)
        );
        // Fraction of time down is about 1 / (9 + 1).
        let mut down = Duration::ZERO;
        for w in changes.windows(2) {
            if !w[0].1 {
                down += w[1].0.saturating_since(w[0].0);
            }
        }
        let frac = down.as_secs_f64() / 10.0;
        assert!((0.07..0.13).contains(&frac), "down {frac}");
    }
}
