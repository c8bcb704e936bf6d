//! Seeded corruption of a board's SRAM where packets sit, for testing end-to-end checks
//! (issue 17): a bit flipped in a packet after the host DMA brought it in and before the
//! send engine reads it, or after the receive engine wrote it and before the host DMA
//! takes it out. Neither the link's CRC-8 (computed by the send engine over what it reads)
//! nor anything on the board notices; only a check from host memory to host memory does.
//!
//! Decisions draw from the board's own ChaCha8 generator, so a run is reproducible from
//! its seed.

use crate::fabric::fault::BadProbability;
use crate::sram::Sram;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How often to corrupt packets in SRAM. The default does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SramFaults {
    /// Probability, per packet sent, of flipping one random bit of the last piece the
    /// send engine is given (the frame, or an overlapped send's tail) in SRAM just
    /// before it reads it.
    pub send: f64,
    /// Probability, per packet received, of flipping one random bit of it in SRAM just
    /// after the receive engine wrote it.
    pub recv: f64,
}

impl SramFaults {
    /// Checks that both probabilities are in `[0, 1]`.
    pub fn validate(&self) -> Result<(), BadProbability> {
        for (name, value) in [("sram.send", self.send), ("sram.recv", self.recv)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(BadProbability { name, value });
            }
        }
        Ok(())
    }
}

/// Bits flipped in SRAM by [`SramFaults`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SramFaultCounters {
    /// In packets about to be sent.
    pub send: u64,
    /// In packets just received.
    pub recv: u64,
}

/// The injector a board keeps.
#[derive(Debug, Clone)]
pub(crate) struct SramFaultInjector {
    config: SramFaults,
    rng: ChaCha8Rng,
    pub(crate) counters: SramFaultCounters,
}

impl SramFaultInjector {
    pub(crate) fn new(config: SramFaults, seed: u64) -> SramFaultInjector {
        SramFaultInjector {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            counters: SramFaultCounters::default(),
        }
    }

    /// Maybe flips a bit of `[start, end)`; `send` picks the probability. Returns the
    /// address of the flipped byte.
    pub(crate) fn maybe_flip(
        &mut self,
        sram: &mut Sram,
        send: bool,
        start: u32,
        end: u32,
    ) -> Option<u32> {
        let p = if send {
            self.config.send
        } else {
            self.config.recv
        };
        if p <= 0.0 || end <= start || self.rng.random::<f64>() >= p {
            return None;
        }
        let bit = self.rng.random_range(0..u64::from(end - start) * 8);
        let at = start + (bit / 8) as u32;
        let byte = sram.slice(at, 1).ok()?[0];
        sram.write(at, &[byte ^ (1 << (bit % 8))]).ok()?;
        if send {
            self.counters.send += 1;
        } else {
            self.counters.recv += 1;
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sram::SramSize;

    #[test]
    fn flips_one_bit_in_range_at_the_rate_asked() {
        let mut sram = Sram::new(SramSize::Mib2);
        let mut f = SramFaultInjector::new(
            SramFaults {
                send: 1.0,
                recv: 0.0,
            },
            7,
        );
        for _ in 0..100 {
            let at = f.maybe_flip(&mut sram, true, 0x1000, 0x1010).unwrap();
            assert!((0x1000..0x1010).contains(&at));
            let b = sram.slice(at, 1).unwrap()[0];
            assert_eq!(b.count_ones(), 1, "one bit");
            sram.write(at, &[0]).unwrap();
        }
        assert_eq!(f.maybe_flip(&mut sram, false, 0x1000, 0x1010), None);
        assert_eq!(f.maybe_flip(&mut sram, true, 0x1000, 0x1000), None);
        assert_eq!(f.counters, SramFaultCounters { send: 100, recv: 0 });
        assert!(
            SramFaults {
                send: 2.0,
                recv: 0.0
            }
            .validate()
            .is_err()
        );
    }
}
