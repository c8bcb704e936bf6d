//! The seed's benchmarks as `myri pingpong` and `myri stream` run them: in every mode and
//! under faults, every packet sent is received or counted as dropped, and nothing hangs.

use myri_board_bench::raw::{self, ExecMode, Setup};
use myri_device::fabric::FaultConfig;
use std::time::Duration;

const MODES: [ExecMode; 3] = [ExecMode::Inline, ExecMode::Threaded, ExecMode::Sim];

#[test]
fn pingpong_accounts_for_every_packet_in_every_mode() {
    for mode in MODES {
        // A clean fabric loses nothing, so the timeout only guards against a hang: long
        // enough that a busy machine descheduling a host thread for a while (inline and
        // threaded modes run on the real clock) is not taken for a loss.
        let setup = Setup {
            mode,
            timeout: Duration::from_secs(5),
            ..Setup::default()
        };
        let r = raw::pingpong(&setup, 64, 300, None).unwrap();
        assert_eq!(r.timeouts, 0, "{mode:?}");
        assert_eq!(r.accounting.sent, 600, "{mode:?}");
        assert_eq!(r.accounting.received, 600, "{mode:?}");
        assert!(r.accounting.balanced(), "{mode:?}: {:?}", r.accounting);
        assert!(r.one_way_us > 0.0);
    }
}

#[test]
fn pingpong_under_loss_times_out_and_still_balances() {
    let faults = FaultConfig {
        drop: 0.1,
        corrupt: 0.02,
        duplicate: 0.05,
        reorder: 0.05,
        ..FaultConfig::default()
    };
    for mode in [ExecMode::Inline, ExecMode::Sim] {
        let setup = Setup {
            mode,
            faults,
            seed: 4,
            timeout: Duration::from_millis(2),
            ..Setup::default()
        };
        let r = raw::pingpong(&setup, 512, 400, None).unwrap();
        assert!(
            r.timeouts > 0,
            "{mode:?}: loss makes some exchanges time out"
        );
        let a = &r.accounting;
        assert!(a.balanced(), "{mode:?}: {a:?}");
        assert!(a.dropped > 0 && a.duplicated > 0, "{mode:?}: {a:?}");
    }
}

#[test]
fn the_same_seed_replays_the_same_lossy_pingpong_in_sim_mode() {
    let faults = FaultConfig {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        ..FaultConfig::default()
    };
    let run = |seed| {
        let setup = Setup {
            mode: ExecMode::Sim,
            faults,
            seed,
            timeout: Duration::from_millis(1),
            ..Setup::default()
        };
        let r = raw::pingpong(&setup, 256, 300, None).unwrap();
        (r.timeouts, r.accounting, r.one_way_us)
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9).1, run(10).1);
}

#[test]
fn streams_balance_in_every_mode() {
    for mode in MODES {
        let setup = Setup {
            mode,
            timeout: Duration::from_millis(500),
            ..Setup::default()
        };
        let r = raw::stream(&setup, 8192, 200, 8, 3, None).unwrap();
        assert!(r.accounting.balanced(), "{mode:?}: {:?}", r.accounting);
        assert!(
            r.accounting
                .drops
                .iter()
                .all(|(cause, _)| *cause == "rx pool full"),
            "{mode:?}: only raw overload drops: {:?}",
            r.accounting
        );
    }
}

/// The stream with every packet checked end to end (a CRC-32C the sender computes over
/// each packet and the sink verifies, the check alone of RPP): every packet the sink
/// takes passes the check, in every mode. (Raw streams may overrun the sink's receive
/// pool, as `streams_balance_in_every_mode` allows; those drops are counted.)
#[test]
fn checked_streams_deliver_every_packet_intact_in_every_mode() {
    for mode in MODES {
        // A stream's acknowledgement waits long enough for a machine whose cores are
        // busy with something else: a round that gave up early would leave packets
        // neither delivered nor dropped.
        let setup = Setup {
            mode,
            timeout: Duration::from_millis(500),
            ..Setup::default()
        };
        for size in [8192, 28, 1] {
            let r = raw::stream_checked(&setup, size, 200, 8, 2).unwrap();
            let a = &r.accounting;
            let overruns: u64 = a.drops.iter().map(|&(_, n)| n).sum();
            assert!(
                a.drops.iter().all(|(cause, _)| *cause == "rx pool full"),
                "{mode:?} {size}: {a:?}"
            );
            assert_eq!(r.delivered + overruns, 400, "{mode:?} {size}: {a:?}");
            assert!(a.balanced(), "{mode:?} {size}: {a:?}");
        }
    }
}

/// A send's buffer belongs to the board before the slot naming it is published, so an
/// MCP running on its own thread never finds a page the host still owns.
#[test]
fn threaded_sends_never_fault_on_ownership() {
    let setup = Setup {
        mode: ExecMode::Threaded,
        ..Setup::default()
    };
    for _ in 0..3 {
        let r = raw::stream(&setup, 4096, 400, 16, 2, None).unwrap();
        // A send whose host DMA faulted is refused by the MCP and counted as such.
        assert!(
            !r.accounting
                .drops
                .iter()
                .any(|(cause, _)| cause.contains("refused")),
            "{:?}",
            r.accounting
        );
        assert!(r.accounting.balanced());
    }
}
