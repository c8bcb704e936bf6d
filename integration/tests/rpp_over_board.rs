//! RPP over the unreliable channel API between two simulated boards whose links drop,
//! corrupt, duplicate and reorder packets: every message arrives exactly once, in order,
//! byte-identical, and a simulated run is a function of its seed.
//!
//! Both boards send (A 10,000 messages, B a fifth as many, so acknowledgements ride on
//! data both ways) with sizes from 0 to 64 KiB drawn log-uniformly from a seed (most are
//! small, some take nine fragments), and each checks what it receives against the same
//! draw. A sends under a window, so its messages of a KiB or more go in DMA buffers lent
//! to the board (every transmission and resend a DMA from there); B copies every packet.

use myri_board_bench::rpp_link::{BoardConnection, board_config};
use myri_device::fabric::{CableConfig, FabricCounters, FaultConfig, LinkModel};
use myri_device::time::Time;
use myri_integration::{Cluster, ExecMode, HostProgram, Step, run};
use myri_mcp::{Api, ChanRequest, McpConfig};
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

/// One board's side: sends its messages over RPP as fast as RPP takes them and checks
/// every message the other side sends, in order.
struct Peer {
    link: BoardConnection,
    out: Messages,
    expect: Messages,
    sent: u64,
    received: u64,
    /// Messages that were not the next one expected, byte for byte.
    wrong: u64,
}

impl HostProgram for Peer {
    fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Some(d) = self.link.recv(api, now) {
            progressed = true;
            if !self.expect.matches(self.received, d.bytes()) {
                self.wrong += 1;
            }
            self.received += 1;
            self.link.recycle(d);
        }
        while self.sent < self.out.count {
            let (out, i) = (self.out, self.sent);
            if !self.link.send_with(api, out.len(i), |b| out.fill(i, b)) {
                break;
            }
            self.sent += 1;
            progressed = true;
        }
        progressed |= self.link.transmit(api, now);
        let finished = self.sent == self.out.count
            && !self.link.has_pending()
            && self.received >= self.expect.count;
        Step {
            progressed,
            done: finished || self.link.failure().is_some(),
            wake: self.link.next_wake(),
        }
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
    /// Per side: messages sent from lent buffers, and packets sent from them.
    lent: Vec<(u64, u64)>,
    trace_hashes: Vec<u64>,
    fabric: FabricCounters,
}

fn exchange(mode: ExecMode, seed: u64, a_count: u64, b_count: u64) -> Outcome {
    let cable = CableConfig::symmetric(LinkModel::default(), faults());
    let mut c = Cluster::pair(seed, cable, mode, McpConfig::default());
    let route_ab = c.route(0, 1, 1);
    let route_ba = c.route(1, 0, 1);
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
    let mut programs = Vec::new();
    for (i, route) in [route_ab, route_ba].into_iter().enumerate() {
        let chan = c.apis[i].get_chan(ChanRequest::Specific(1)).unwrap();
        c.apis[i].init_recv_chan(&chan).unwrap();
        let link = BoardConnection::new(
            board_config(),
            1 + i as u64,
            0x7e57,
            chan,
            route,
            1,
            (i == 0).then_some(8),
            Time::ZERO,
        )
        .unwrap();
        programs.push(Some(Peer {
            link,
            out: msgs[i],
            expect: msgs[1 - i],
            sent: 0,
            received: 0,
            wrong: 0,
        }));
    }
    let (programs, finished) = run(&mut c, mode, programs, Duration::from_secs(600));
    let peers: Vec<Peer> = programs.into_iter().map(Option::unwrap).collect();
    Outcome {
        finished,
        sides: peers
            .iter()
            .map(|p| {
                let failure = p.link.failure().map(str::to_owned);
                (p.sent, p.received, p.wrong, failure)
            })
            .collect(),
        stats: peers
            .iter()
            .map(|p| format!("{:?}", p.link.stats()))
            .collect(),
        retransmitted: peers.iter().map(|p| p.link.stats().retransmitted).collect(),
        lent: peers
            .iter()
            .map(|p| {
                let c = p.link.counters();
                (c.messages_lent, c.packets_lent)
            })
            .collect(),
        trace_hashes: peers
            .iter()
            .map(|p| p.link.connection().trace().hash())
            .collect(),
        fabric: c.fabric.counters(),
    }
}

#[track_caller]
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
    // A's long messages went from lent buffers, some of them more than once; B lent none.
    let (messages, packets) = o.lent[0];
    assert!(
        messages > 0 && packets > messages,
        "A sent from lent buffers, and resent from them: {:?}",
        o.lent
    );
    assert_eq!(o.lent[1], (0, 0), "B copies every packet");
}

#[test]
fn ten_thousand_messages_arrive_exactly_once_in_order_under_faults_in_sim_mode() {
    let o = exchange(ExecMode::Deterministic, 41, 10_000, 2_000);
    assert_all_delivered(&o, 10_000, 2_000);
}

#[test]
fn messages_arrive_exactly_once_in_order_under_faults_in_inline_mode() {
    let o = exchange(ExecMode::Inline, 42, 2_000, 400);
    assert_all_delivered(&o, 2_000, 400);
}

#[test]
fn the_same_seed_gives_the_same_run_in_sim_mode() {
    let first = exchange(ExecMode::Deterministic, 7, 1_500, 300);
    assert_all_delivered(&first, 1_500, 300);
    let again = exchange(ExecMode::Deterministic, 7, 1_500, 300);
    assert_eq!(first, again, "same seed, same counters and protocol traces");
    let other = exchange(ExecMode::Deterministic, 8, 1_500, 300);
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

mod glue {
    //! The glue's own promises about DMA buffers, scripted on two inline boards.

    use myri_board_bench::rpp_link::{BoardConnection, board_config};
    use myri_device::time::Time;
    use myri_integration::Cluster;
    use myri_mcp::{ChanRequest, RouteId};
    use std::time::Duration;

    /// Two inline boards, A sending to B over RPP, stepped by hand.
    struct Script {
        c: Cluster,
        a: BoardConnection,
        b: BoardConnection,
        now: Time,
        /// What B received, in order.
        got: Vec<Vec<u8>>,
    }

    impl Script {
        fn new() -> Script {
            Script::with_window(Some(8))
        }

        fn with_window(window: Option<usize>) -> Script {
            let mut c = Cluster::routed_pair(11);
            let mut link = |i: usize| {
                let chan = c.apis[i].get_chan(ChanRequest::Specific(1)).unwrap();
                c.apis[i].init_recv_chan(&chan).unwrap();
                let incarnation = 1 + i as u64;
                BoardConnection::new(
                    board_config(),
                    incarnation,
                    9,
                    chan,
                    RouteId(1),
                    1,
                    window,
                    Time::ZERO,
                )
                .unwrap()
            };
            let (a, b) = (link(0), link(1));
            Script {
                c,
                a,
                b,
                now: Time::ZERO,
                got: Vec::new(),
            }
        }

        fn run(&mut self, rounds: u32) {
            self.run_with(rounds, true);
        }

        /// Steps both boards; B transmits (acknowledges, answers) only if `b_sends`.
        fn run_with(&mut self, rounds: u32, b_sends: bool) {
            let Script { c, a, b, got, .. } = self;
            for _ in 0..rounds {
                self.now += Duration::from_micros(1);
                let now = self.now;
                a.transmit(&mut c.apis[0], now);
                c.apis[0].progress(now);
                c.apis[1].progress(now);
                while let Some(d) = b.recv(&mut c.apis[1], now) {
                    got.push(d.bytes().to_vec());
                    b.recycle(d);
                }
                if b_sends {
                    b.transmit(&mut c.apis[1], now);
                }
                c.apis[1].progress(now);
                c.apis[0].progress(now);
                while let Some(d) = a.recv(&mut c.apis[0], now) {
                    a.recycle(d);
                }
            }
        }
    }

    /// A packet RPP has written when every DMA send buffer is taken is not lost: it waits
    /// and goes first once a buffer is free; and a long message in a lent buffer goes
    /// out meanwhile (a lent packet needs no buffer of its own).
    #[test]
    fn a_packet_written_with_no_free_buffer_waits_for_one() {
        let mut s = Script::new();
        // The connection is set up first (its introductions are copied packets).
        assert!(s.a.send_with(&mut s.c.apis[0], 1, |m| m[0] = 1));
        s.run(20);
        assert_eq!(s.got, vec![vec![1]]);
        // A long message in a lent buffer and four short ones; then the application takes
        // every free buffer, so the short messages' packets have only the buffers the
        // glue keeps aside (a spare send buffer, a receive buffer to turn around), and
        // the rest find none. B stays silent meanwhile, so no receive buffer comes back
        // to turn around.
        let short: [&[u8; 8]; 4] = [b"shortmsg", b"another!", b"thirdone", b"lastone!"];
        assert!(s.a.send_with(&mut s.c.apis[0], 4000, |m| m.fill(0x5a)));
        for m in short {
            assert!(s.a.send_with(&mut s.c.apis[0], 8, |b| b.copy_from_slice(m)));
        }
        // (Every round: a sent buffer goes back to the free list once the board is done.)
        let mut taken = Vec::new();
        for _ in 0..20 {
            while let Ok(buf) = s.c.apis[0].get_send_buffer() {
                taken.push(buf);
            }
            s.run_with(1, false);
        }
        let went = s.got.len() - 2;
        assert!(
            s.got[1].len() == 4000 && s.got[1].iter().all(|&b| b == 0x5a),
            "the lent message went"
        );
        assert!(
            (1..=2).contains(&went),
            "the short messages went only as far as the kept buffers: {went}"
        );
        for (got, want) in s.got[2..].iter().zip(short) {
            assert_eq!(got[..], want[..]);
        }
        assert!(s.a.counters().no_send_buffer > 0, "{:?}", s.a.counters());
        drop(taken);
        s.run(20);
        assert_eq!(
            s.got.len(),
            2 + short.len(),
            "the waiting packets went once buffers were free"
        );
        for (got, want) in s.got[2..].iter().zip(short) {
            assert_eq!(got[..], want[..], "in order");
        }
        let (stats, link) = (s.a.stats(), s.a.counters());
        assert_eq!(
            (stats.retransmitted, link.send_errors, link.messages_lent),
            (0, 0, 1),
            "nothing was lost on the host: {stats:?} {link:?}"
        );
    }

    /// Copied packets are written into receive buffers RPP is done with and sent back
    /// from them, and those buffers return to their channel once the board has sent them:
    /// many more packets are turned around than a channel holds, and nothing stalls or
    /// is resent. With and without a window on the sends unfinished by the board.
    #[test]
    fn turned_receive_buffers_go_back_to_their_channel() {
        for window in [Some(8), None] {
            let mut s = Script::with_window(window);
            let n = 3 * myri_mcp::hcb::RECV_SLOTS as usize;
            for i in 0..n {
                let msg = (i as u32).to_be_bytes();
                assert!(s.a.send_with(&mut s.c.apis[0], 4, |m| m.copy_from_slice(&msg)));
                s.run(2);
                // B answers every message, so that each side's receive buffers carry
                // data back, not only acknowledgements.
                assert!(s.b.send_with(&mut s.c.apis[1], 4, |m| m.copy_from_slice(&msg)));
            }
            s.run(200);
            assert_eq!(s.got.len(), n, "window {window:?}");
            for (i, m) in s.got.iter().enumerate() {
                assert_eq!(m[..], (i as u32).to_be_bytes(), "window {window:?}");
            }
            for (side, link) in [("A", &s.a), ("B", &s.b)] {
                let (c, st) = (link.counters(), link.stats());
                assert!(
                    c.packets_turned as usize >= n,
                    "{side}, window {window:?}: {c:?}"
                );
                assert_eq!(
                    (
                        st.retransmitted,
                        c.send_errors,
                        c.no_send_buffer,
                        c.channel_full
                    ),
                    (0, 0, 0, 0),
                    "{side}, window {window:?}: {st:?} {c:?}"
                );
                assert!(!link.has_pending(), "{side}, window {window:?}");
            }
        }
    }
}
