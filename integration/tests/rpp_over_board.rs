//! Reliable `sim://` endpoints (RPP over the unreliable channel API of two simulated
//! boards) whose links drop, corrupt, duplicate and reorder packets: every message arrives
//! exactly once, in order, byte-identical, and a run in virtual time is a function of its
//! seed.
//!
//! Both endpoints send (A 10,000 messages, B a fifth as many, so acknowledgements ride on
//! data both ways) with sizes from 0 to 64 KiB drawn log-uniformly from a seed (most are
//! small, some take nine fragments), and each checks what it receives against the same
//! draw. Messages of a KiB or more are written into DMA buffers the endpoint lends to the
//! board (every transmission and resend a DMA from there).

use myri_board_bench::reliable::rpp_config;
use myri_device::fabric::{FabricCounters, FaultConfig};
use myri_transport::sim::{SimClock, SimWorld, WorldConfig};
use myri_transport::{Buf, Completion, Endpoint, Options, Peer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The faults, on every link: drop 10%, corrupt 1%, duplicate 2%, reorder 5%.
fn faults() -> FaultConfig {
    FaultConfig {
        reorder_delay: Duration::from_micros(20),
        ..FaultConfig::rates(0.10, 0.01, 0.02, 0.05)
    }
}

/// splitmix64: a tiny seeded generator, the same everywhere.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Largest message.
const MAX_LEN: usize = 64 << 10;

/// The messages one side sends: message `i`'s length and bytes follow from the seed.
#[derive(Clone, Copy)]
struct Messages {
    seed: u64,
    count: u64,
}

impl Messages {
    fn key(&self, i: u64) -> u64 {
        mix(self.seed ^ mix(i))
    }

    /// Log-uniform from 0 to [`MAX_LEN`]: a number of bits up to log2 of it, then a
    /// length up to that power of two.
    fn len(&self, i: u64) -> usize {
        let k = self.key(i);
        let bits = (k % u64::from(MAX_LEN.trailing_zeros() + 1)) as u32;
        ((k >> 8) % ((1u64 << bits) + 1)) as usize
    }

    fn fill(&self, i: u64, out: &mut [u8]) {
        let mut s = self.key(i) ^ 0x5a5a;
        for chunk in out.chunks_mut(8) {
            s = mix(s);
            chunk.copy_from_slice(&s.to_le_bytes()[..chunk.len()]);
        }
    }

    fn matches(&self, i: u64, got: &[u8]) -> bool {
        if i >= self.count || got.len() != self.len(i) {
            return false;
        }
        let mut want = vec![0u8; got.len()];
        self.fill(i, &mut want);
        want == got
    }
}

/// One endpoint's side: sends its messages as fast as the endpoint takes them and checks
/// every message the other side sends, in order.
struct Side {
    ep: Endpoint,
    peer: Peer,
    out: Messages,
    expect: Messages,
    /// A message the endpoint would not take yet.
    held: Option<Buf>,
    sent: u64,
    received: u64,
    /// Messages that were not the next one expected, byte for byte.
    wrong: u64,
    failed: Option<String>,
}

impl Side {
    fn step(&mut self) {
        self.ep.progress();
        while let Some(d) = self.ep.recv() {
            if !self.expect.matches(self.received, &d.data) {
                self.wrong += 1;
            }
            self.received += 1;
        }
        while let Some(c) = self.ep.poll_completion() {
            if let Completion::PeerFailed { why, .. } = c {
                self.failed = Some(why.to_string());
            }
        }
        while self.sent < self.out.count {
            let (out, i) = (self.out, self.sent);
            let buf = self.held.take().unwrap_or_else(|| {
                let mut b = self.ep.alloc(out.len(i));
                out.fill(i, &mut b);
                b
            });
            match self.ep.send(self.peer, buf) {
                Ok(_) => self.sent += 1,
                Err(e) => {
                    self.held = Some(e.buf);
                    break;
                }
            }
        }
    }

    fn finished(&self) -> bool {
        self.sent == self.out.count && !self.ep.has_unacked() && self.received >= self.expect.count
    }
}

/// What a run came to.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    finished: bool,
    /// Per side: (sent, received, wrong, failure).
    sides: Vec<(u64, u64, u64, Option<String>)>,
    /// Per side: RPP's counters, as text (every field).
    stats: Vec<String>,
    /// Per side: data packets RPP sent again.
    retransmitted: Vec<u64>,
    /// Per side: packets copied into a DMA buffer, and datagrams sent.
    copies: Vec<u64>,
    datagrams: Vec<u64>,
    trace_hashes: Vec<u64>,
    fabric: FabricCounters,
}

static WORLDS: AtomicU64 = AtomicU64::new(0);

/// Both sides stepped in turn on this thread, on a world whose clock ticks with every
/// progress call (virtual time: the run is a function of the seed) or runs in real time.
fn exchange(clock: SimClock, seed: u64, a_count: u64, b_count: u64) -> Outcome {
    let name = format!("rpp-over-board-{}", WORLDS.fetch_add(1, Ordering::Relaxed));
    let config = WorldConfig::default()
        .with_seed(seed)
        .with_faults(faults())
        .with_clock(clock);
    let world = SimWorld::create(&name, config).unwrap();
    let msgs = [
        Messages {
            seed: seed ^ 0xa,
            count: a_count,
        },
        Messages {
            seed: seed ^ 0xb,
            count: b_count,
        },
    ];
    let mut sides: Vec<Side> = ["a", "b"]
        .into_iter()
        .enumerate()
        .map(|(i, end)| {
            let url = format!("sim://{end}?world={name}");
            // Fixed incarnations: a run in virtual time is a function of its seed alone.
            let options = Options::default()
                .with_rpp(rpp_config())
                .with_incarnation(1 + i as u64);
            let ep = Endpoint::open_with(&url, options).unwrap();
            Side {
                ep,
                peer: Peer(0),
                out: msgs[i],
                expect: msgs[1 - i],
                held: None,
                sent: 0,
                received: 0,
                wrong: 0,
                failed: None,
            }
        })
        .collect();
    sides[0].peer = sides[0].ep.insert_addr("sim://b").unwrap();
    sides[1].peer = sides[1].ep.insert_addr("sim://a").unwrap();
    let mut finished = false;
    for _ in 0..20_000_000u64 {
        for side in &mut sides {
            side.step();
        }
        if sides.iter().any(|s| s.failed.is_some()) {
            break;
        }
        if sides.iter().all(Side::finished) {
            finished = true;
            break;
        }
    }
    let stats: Vec<_> = sides
        .iter()
        .map(|s| s.ep.peer_stats(s.peer).unwrap())
        .collect();
    Outcome {
        finished,
        sides: sides
            .iter()
            .map(|s| (s.sent, s.received, s.wrong, s.failed.clone()))
            .collect(),
        stats: stats.iter().map(|s| format!("{s:?}")).collect(),
        retransmitted: stats.iter().map(|s| s.retransmitted).collect(),
        copies: sides.iter().map(|s| s.ep.stats().transmit_copies).collect(),
        datagrams: sides.iter().map(|s| s.ep.stats().datagrams_sent).collect(),
        trace_hashes: sides
            .iter()
            .map(|s| s.ep.peer_trace_hash(s.peer).unwrap())
            .collect(),
        fabric: world.fabric().counters(),
    }
}

fn assert_all_delivered(o: &Outcome, a_count: u64, b_count: u64) {
    assert!(o.finished, "the run did not finish: {o:#?}");
    let want = [(a_count, b_count), (b_count, a_count)];
    for (side, (&(sent, received, wrong, ref failure), (out, inc))) in
        o.sides.iter().zip(want).enumerate()
    {
        assert_eq!(failure, &None, "side {side}'s connection failed");
        assert_eq!(sent, out, "side {side} sent {sent} of {out}");
        assert_eq!(
            received, inc,
            "side {side} received {received} messages, not {inc}: each exactly once"
        );
        assert_eq!(wrong, 0, "side {side}: messages out of order or changed");
    }
    // The faults did happen, and RPP repaired them.
    let f = &o.fabric;
    assert!(
        f.link_drops > 0 && f.corrupted > 0 && f.duplicated > 0 && f.reordered > 0,
        "every fault was injected: {f:?}"
    );
    assert!(
        o.retransmitted.iter().all(|&n| n > 0),
        "both sides retransmitted: {:?}",
        o.stats
    );
    // Long messages went by DMA from the lent buffers they were written in: fewer packets
    // were copied than were sent.
    for (side, (&copied, &sent)) in o.copies.iter().zip(&o.datagrams).enumerate() {
        assert!(
            copied < sent,
            "side {side}: {copied} of {sent} packets copied"
        );
    }
}

#[test]
fn ten_thousand_messages_arrive_exactly_once_in_order_under_faults_in_virtual_time() {
    let o = exchange(SimClock::Ticks, 41, 10_000, 2_000);
    assert_all_delivered(&o, 10_000, 2_000);
}

#[test]
fn messages_arrive_exactly_once_in_order_under_faults_in_real_time() {
    let o = exchange(SimClock::Real, 42, 2_000, 400);
    assert_all_delivered(&o, 2_000, 400);
}

#[test]
fn the_same_seed_gives_the_same_run_in_virtual_time() {
    let first = exchange(SimClock::Ticks, 7, 1_500, 300);
    assert_all_delivered(&first, 1_500, 300);
    let again = exchange(SimClock::Ticks, 7, 1_500, 300);
    assert_eq!(first, again, "same seed, same counters and protocol traces");
    let other = exchange(SimClock::Ticks, 8, 1_500, 300);
    assert_all_delivered(&other, 1_500, 300);
    assert_ne!(
        first.trace_hashes, other.trace_hashes,
        "another seed, another run"
    );
}

mod benchmarks {
    //! `myri pingpong` and `myri stream` over RPP (the drivers behind them) with the same
    //! faults: nothing lost, the books balance, and sim mode repeats itself exactly.

    use super::faults;
    use myri_board_bench::harness::{ExecMode, Setup};
    use myri_board_bench::reliable;

    fn setup(mode: ExecMode, seed: u64) -> Setup {
        Setup {
            mode,
            faults: faults(),
            seed,
            ..Setup::default()
        }
    }

    #[test]
    fn pingpong_and_stream_over_rpp_repeat_exactly_in_sim_mode() {
        let s = setup(ExecMode::Sim, 5);
        let p = reliable::pingpong(&s, 8, 400, None).unwrap();
        let again = reliable::pingpong(&s, 8, 400, None).unwrap();
        assert_eq!(p.timeouts, 0);
        assert!(p.accounting.balanced(), "{:?}", p.accounting);
        assert!(p.accounting.dropped > 0, "the faults were injected");
        let rpp = p.rpp.as_ref().unwrap();
        assert!(rpp.retransmitted() > 0, "losses were retransmitted");
        assert_eq!(
            (p.one_way_us, &p.accounting, &p.rpp),
            (again.one_way_us, &again.accounting, &again.rpp)
        );

        let st = reliable::stream(&s, 8192, 200, 8, 2, None).unwrap();
        let again = reliable::stream(&s, 8192, 200, 8, 2, None).unwrap();
        assert_eq!(st.delivered, 400);
        assert!(st.accounting.balanced(), "{:?}", st.accounting);
        assert!(st.rpp.as_ref().unwrap().retransmitted() > 0);
        assert_eq!(
            (st.mb_per_s, &st.accounting, &st.rpp),
            (again.mb_per_s, &again.accounting, &again.rpp)
        );
    }

    #[test]
    fn pingpong_and_stream_over_rpp_lose_nothing_in_real_time_modes() {
        for mode in [ExecMode::Inline, ExecMode::Threaded] {
            let s = setup(mode, 6);
            let p = reliable::pingpong(&s, 64, 100, None).unwrap();
            assert_eq!(p.timeouts, 0);
            assert!(p.accounting.balanced(), "{mode:?}: {:?}", p.accounting);
            let st = reliable::stream(&s, 8192, 30, 8, 2, None).unwrap();
            assert_eq!(st.delivered, 60, "{mode:?}");
            assert!(st.accounting.balanced(), "{mode:?}: {:?}", st.accounting);
        }
    }
}
