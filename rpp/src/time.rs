//! Time as RPP sees it: a number the caller hands in.

use core::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time: nanoseconds since an epoch the caller chooses (a real clock or a
/// simulation's virtual one). RPP never reads a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// `nanos` after the epoch.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Instant {
    /// `nanos` nanoseconds later.
    #[inline]
    pub(crate) fn add_nanos(self, nanos: u64) -> Instant {
        Instant(self.0.saturating_add(nanos))
    }

    /// Nanoseconds from `earlier` to `self`, zero if `earlier` is later.
    #[inline]
    pub(crate) fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn add(self, d: Duration) -> Instant {
        let nanos = d
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(d.subsec_nanos()));
        Instant(self.0.saturating_add(nanos))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}
