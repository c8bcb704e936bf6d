//! Whether a busy-polling loop costs anyone its core.
//!
//! Spinning trades a core for latency: the next message is seen the moment it lands, with
//! no wake-up. That trade is free only while the host has a core nobody else wants. When
//! more threads are runnable than there are cores, the spinning thread holds a core that
//! a runnable one waits for: on a two-core host running a client, a server and the
//! kernel's network work of three namespaces, the `myri serve` of a 1 Gbit/s stream spun
//! at 90% of a core while the RPP sender it served waited three quarters of its time for
//! a CPU (`benches/RESULTS.md`: "RPP beside TCP at 1 Gbit/s with 1,500-byte frames").
//!
//! [`CoreShare`] answers from the kernel's count of runnable threads (`/proc/loadavg`,
//! its fourth field), read at most once per [`CoreShare::INTERVAL`] from a descriptor
//! kept open: one `pread` a reading, where opening the file each time showed in a busy
//! server's profile (`benches/RESULTS.md`: "RPP beside TCP: where the longer round trip
//! goes").

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Whether the host's cores are all wanted, from the runnable-thread count, sampled.
#[derive(Debug)]
pub struct CoreShare {
    cores: u32,
    /// `/proc/loadavg`, open.
    loadavg: Option<File>,
    checked: Option<Instant>,
    contended: bool,
}

impl CoreShare {
    /// How often the count is read (one system call, a few microseconds).
    pub const INTERVAL: Duration = Duration::from_millis(5);

    /// A sampler for this host: its online cores counted in `/proc/stat`. Where that
    /// cannot be read (not Linux), the host is never seen as contended.
    pub fn new() -> CoreShare {
        let cores = std::fs::read_to_string("/proc/stat")
            .map(|s| online_cores(&s))
            .unwrap_or(0);
        CoreShare {
            cores,
            loadavg: File::open("/proc/loadavg").ok(),
            checked: None,
            contended: false,
        }
    }

    /// The runnable-thread count, read afresh from the open `/proc/loadavg` (a read at
    /// offset 0 makes the kernel write the line again).
    fn runnable(&self) -> Option<u32> {
        let mut buf = [0u8; 128];
        let n = self.loadavg.as_ref()?.read_at(&mut buf, 0).ok()?;
        runnable_threads(std::str::from_utf8(&buf[..n]).ok()?)
    }

    /// Whether, as of the last reading (taken now if the previous one is older than
    /// [`CoreShare::INTERVAL`]), more threads were runnable than the host has cores:
    /// someone was waiting for a CPU. The caller, runnable itself, is among them.
    pub fn contended(&mut self, now: Instant) -> bool {
        if self.cores == 0 {
            return false;
        }
        if self
            .checked
            .is_none_or(|t| now.saturating_duration_since(t) >= Self::INTERVAL)
        {
            self.checked = Some(now);
            self.contended = self.runnable().is_some_and(|running| running > self.cores);
        }
        self.contended
    }
}

impl Default for CoreShare {
    fn default() -> CoreShare {
        CoreShare::new()
    }
}

/// Runnable threads (scheduling entities) on the host, from `/proc/loadavg`'s text
/// (`"0.60 1.15 1.19 2/300 12345"`: the `2` of `2/300`); `None` if it is not that shape.
pub fn runnable_threads(loadavg: &str) -> Option<u32> {
    let field = loadavg.split_ascii_whitespace().nth(3)?;
    let (running, total) = field.split_once('/')?;
    total.parse::<u32>().ok()?;
    running.parse().ok()
}

/// Online cores, from `/proc/stat`'s text: its `cpuN` lines (the first line, `cpu`,
/// sums them).
pub fn online_cores(stat: &str) -> u32 {
    let n = stat
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_the_fourth_field() {
        assert_eq!(runnable_threads("0.60 1.15 1.19 2/300 12345\n"), Some(2));
        assert_eq!(runnable_threads("12.00 9.1 3.0 17/1024 99"), Some(17));
    }

    #[test]
    fn other_shapes_give_no_count() {
        for bad in [
            "",
            "0.60 1.15 1.19",
            "0.60 1.15 1.19 2 300",
            "0.60 1.15 1.19 x/300 1",
            "0.60 1.15 1.19 2/ 1",
            "0.60 1.15 1.19 -1/300 1",
        ] {
            assert_eq!(runnable_threads(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cores_are_the_numbered_cpu_lines() {
        let stat = "cpu  1 2 3 4\ncpu0 1 1 1 1\ncpu1 0 1 2 3\ncpufreq 9\nintr 5\n";
        assert_eq!(online_cores(stat), 2);
        assert_eq!(online_cores("intr 5\n"), 0);
    }

    // The `Instant::now()` below is only an origin: the answers depend on offsets from it
    // (std has no other way to make an `Instant`), never on the clock's value.
    #[test]
    fn a_host_without_the_counts_is_never_contended() {
        let mut share = CoreShare {
            cores: 0,
            loadavg: None,
            checked: None,
            contended: false,
        };
        assert!(!share.contended(Instant::now()));
    }

    #[test]
    fn this_host_s_counts_read() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        assert!(online_cores(&stat) >= 1);
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap();
        // This test's own thread is runnable.
        assert!(runnable_threads(&loadavg).unwrap() >= 1, "{loadavg}");
        // The open descriptor reads the line again every time, not once.
        let share = CoreShare::new();
        for _ in 0..3 {
            assert!(share.runnable().unwrap() >= 1);
        }
    }

    #[test]
    fn a_reading_stands_for_the_interval() {
        let mut share = CoreShare {
            cores: 1,
            loadavg: File::open("/proc/loadavg").ok(),
            checked: None,
            contended: false,
        };
        let t = Instant::now();
        // A first reading at t; within the interval the answer is the stored one.
        let first = share.contended(t);
        share.contended = !first;
        assert_eq!(share.contended(t + CoreShare::INTERVAL / 2), !first);
        assert_eq!(share.checked, Some(t));
        let _ = share.contended(t + CoreShare::INTERVAL);
        assert_eq!(share.checked, Some(t + CoreShare::INTERVAL));
    }
}
