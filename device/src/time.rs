//! Time as the layers below the outermost driver see it: a number handed in, never read.
//!
//! A [`Time`] is nanoseconds since an epoch the driver chooses. The deterministic
//! scheduler starts it at zero and advances it event by event (virtual time); a real-time
//! driver maps a monotonic clock onto it. Nothing in this crate reads a clock.

use core::fmt;
use core::ops::{Add, AddAssign};
use std::time::Duration;

/// A point in time, in nanoseconds since the driver's epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);
    /// The latest representable time; used as "never".
    pub const MAX: Time = Time(u64::MAX);

    /// The time `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }

    /// The time `micros` microseconds after the epoch (saturating).
    pub const fn from_micros(micros: u64) -> Time {
        Time(micros.saturating_mul(1_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Time::MAX`].
    pub fn saturating_add(self, d: Duration) -> Time {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ns", self.0)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0 / 1_000;
        let frac = self.0 % 1_000;
        write!(f, "{us}.{frac:03}us")
    }
}

/// The time it takes to move `bytes` at `bytes_per_sec`, rounded up to a nanosecond.
///
/// A rate of zero means "unthrottled" and takes no time.
pub fn transfer_time(bytes: usize, bytes_per_sec: u64) -> Duration {
    if bytes_per_sec == 0 {
        return Duration::ZERO;
    }
    let nanos = (bytes as u128 * 1_000_000_000).div_ceil(bytes_per_sec as u128);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(
            Time::ZERO.saturating_since(Time::from_nanos(5)),
            Duration::ZERO
        );
        assert_eq!(
            Time::from_micros(3).saturating_since(Time::from_nanos(500)),
            Duration::from_nanos(2_500)
        );
    }

    #[test]
    fn transfer_time_rounds_up_and_zero_rate_is_free() {
        assert_eq!(transfer_time(1, 3), Duration::from_nanos(333_333_334));
        assert_eq!(transfer_time(160, 160_000_000), Duration::from_micros(1));
        assert_eq!(transfer_time(1 << 20, 0), Duration::ZERO);
    }

    #[test]
    fn display_is_microseconds() {
        assert_eq!(Time::from_nanos(12_345).to_string(), "12.345us");
    }
}
