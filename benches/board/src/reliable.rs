//! Ping-pong and streaming over RPP on the unreliable channel API, between the same two
//! simulated boards as [`raw`](super::raw), in the same three execution modes and with
//! the same fabric faults (see [`harness`](super::harness) for how each mode runs).
//!
//! One RPP connection joins board A's channel 1 and board B's ([`BoardConnection`]:
//! messages of a KiB or more written into DMA buffers lent to the board and sent from
//! there, shorter ones copied after the header, whole in-order messages delivered in
//! place from the DMA receive buffer). RPP's time is the mode's clock: real time inline
//! and threaded, the scheduler's virtual time in sim mode, where a run is a function of
//! its seed.
//!
//! Nothing is lost, so there is no per-exchange timeout (the setup's `timeout` is not
//! used): what the fabric drops RPP retransmits, and the report says how often. A run
//! fails only if RPP's connection fails (the peer unreachable through every retry) or a
//! message arrives out of order, twice or changed. At the end the client's connection
//! runs until it is quiet, so every packet in flight lands and the accounting balances.

use super::harness::{
    Accounting, CHAN, ExecMode, PAUSE, Pair, ROUTE, RUN, Setup, channels, drive, run_sim,
    with_server,
};
use super::report::{PingPongReport, RppReport, StreamReport};
use super::rpp_link::{BoardConnection, LinkCounters, board_config};
use super::rpp_programs::{
    OverRpp, RppEcho, RppPinger, RppStreamSender, RppStreamSink, Settled, Settling,
};
use super::{Reference, median};
use myri_device::run::Clock;
use myri_device::time::Time;
use myri_mcp::{Api, Channel};
use myri_rpp::Config;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The connection id both ends use.
pub const CONN_ID: u32 = 0x4d59_5250;

/// How long the client's connection must be quiet at the end of a run: long enough for
/// any retransmission timer of the peer's to have fired (virtual time is cheap).
fn final_quiet(mode: ExecMode) -> Duration {
    match mode {
        ExecMode::Sim => Duration::from_millis(20),
        _ => Duration::from_millis(5),
    }
}

/// Quiet between rounds in real time: the client's delayed ack of the round's last
/// message goes out before the worker is parked (else the peer's timer would fire while
/// a reference round runs, and retransmit for nothing).
const ROUND_QUIET: Duration = Duration::from_micros(300);

/// Most time settling may take.
const GIVE_UP: Duration = Duration::from_secs(5);

/// The two ends: A's (client) and B's (server) connections over the pair's channels.
fn links(
    config: &Config,
    chan_a: Channel,
    chan_b: Channel,
    window: Option<usize>,
) -> Result<(BoardConnection, BoardConnection), String> {
    let end = |chan, incarnation| {
        BoardConnection::new(
            config.clone(),
            incarnation,
            CONN_ID,
            chan,
            ROUTE,
            CHAN,
            window,
            Time::ZERO,
        )
    };
    Ok((end(chan_a, 1)?, end(chan_b, 2)?))
}

/// A failed connection, or a client that never went quiet, as the run's error.
fn check_end(a: &BoardConnection, b: &BoardConnection, settled: Settled) -> Result<(), String> {
    for (side, l) in [("a", a), ("b", b)] {
        if let Some(f) = l.failure() {
            return Err(format!("the rpp connection of board {side} failed: {f}"));
        }
    }
    if settled.stray > 0 {
        return Err(format!(
            "{} messages were delivered after the run's last one",
            settled.stray
        ));
    }
    if !settled.quiet {
        return Err(format!(
            "the connection did not go quiet within {} s after the run",
            GIVE_UP.as_secs()
        ));
    }
    Ok(())
}

fn rpp_report(a: &BoardConnection, b: &BoardConnection) -> RppReport {
    let mut link = LinkCounters::default();
    link.add(&a.counters());
    link.add(&b.counters());
    RppReport {
        client: a.stats(),
        server: b.stats(),
        link,
        trace_hashes: [a.connection().trace().hash(), b.connection().trace().hash()],
    }
}

/// Packet accounting from both ends' glue counters.
fn accounting(pair: &mut Pair, a: &BoardConnection, b: &BoardConnection) -> Accounting {
    let (ca, cb) = (a.counters(), b.counters());
    pair.accounting(
        ca.packets_sent + cb.packets_sent,
        ca.packets_received + cb.packets_received,
        ca.send_errors + cb.send_errors,
    )
}

/// Runs the client `p` on this thread until its connection is quiet for `quiet` and the
/// server's is idle.
fn settle_here<P: OverRpp>(
    api: &mut Api,
    clock: &Clock,
    p: P,
    server_idle: &Arc<AtomicBool>,
    quiet: Duration,
    mode: ExecMode,
) -> (P, Settled) {
    let mut s = Settling::new(p, server_idle.clone(), quiet, GIVE_UP);
    drive(api, clock, &mut s, mode);
    s.finish()
}

/// Runs the client `p` under the scheduler, against `server`, until its connection is
/// quiet and the server's idle.
fn settle_sim<P: OverRpp + 'static, S: OverRpp + 'static>(
    pair: &mut Pair,
    p: P,
    mut server: S,
    quiet: Duration,
) -> Result<(P, S, Settled), String> {
    let limit = GIVE_UP + Duration::from_secs(1);
    let idle = server.link().idle_flag();
    let settling = Settling::new(p, idle, quiet, GIVE_UP);
    let (s, server) = run_sim(pair, settling, server, limit, quiet)?;
    let (p, settled) = s.finish();
    Ok((p, server, settled))
}

/// Ping-pong of `iters` messages of `size` bytes over RPP. With a reference, alternates
/// stack and reference rounds (not in sim mode).
pub fn pingpong(
    setup: &Setup,
    size: usize,
    iters: u64,
    mut reference: Option<&mut dyn Reference>,
) -> Result<PingPongReport, String> {
    let mut pair = Pair::new(setup)?;
    let (chan_a, chan_b) = channels(&mut pair)?;
    let (a, b) = links(&board_config(), chan_a, chan_b, None)?;
    let mut pinger = RppPinger::new(a, size, 0);
    let mut echo = RppEcho::new(b);
    let echo_idle = echo.link.idle_flag();
    let quiet = final_quiet(setup.mode);
    if setup.mode == ExecMode::Sim {
        pinger.iters = iters;
        let limit = Duration::from_secs(10) + Duration::from_millis(iters);
        let (pinger, echo) = run_sim(&mut pair, pinger, echo, limit, Duration::ZERO)?;
        let (pinger, echo, settled) = settle_sim(&mut pair, pinger, echo, quiet)?;
        return report_pingpong(&mut pair, size, iters, &pinger, &echo, settled, None);
    }
    let rounds = (iters / 200).clamp(1, 50);
    let mut baseline_rtts = Vec::new();
    let mode = setup.mode;
    let ((pinger, settled), echo) = with_server(&mut pair, mode, echo, |api, clock, set| {
        pinger.clock = Some(*clock);
        for r in 0..rounds {
            let chunk = iters / rounds + u64::from(r < iters % rounds);
            set(RUN);
            pinger.iters += chunk;
            drive(api, clock, &mut pinger, mode);
            pinger = settle_here(api, clock, pinger, &echo_idle, ROUND_QUIET, mode).0;
            set(PAUSE);
            if pinger.link.failure().is_some() {
                break;
            }
            if let Some(reference) = reference.as_deref_mut() {
                baseline_rtts.extend(reference.pingpong_round(size, chunk));
            }
        }
        set(RUN);
        let end = settle_here(api, clock, pinger, &echo_idle, quiet, mode);
        set(PAUSE);
        end
    });
    let base = (!baseline_rtts.is_empty()).then(|| {
        median(
            baseline_rtts
                .iter()
                .map(|d| d.as_secs_f64() * 1e6 / 2.0)
                .collect(),
        )
    });
    report_pingpong(&mut pair, size, iters, &pinger, &echo, settled, base)
}

fn report_pingpong(
    pair: &mut Pair,
    size: usize,
    iters: u64,
    p: &RppPinger,
    e: &RppEcho,
    settled: Settled,
    baseline: Option<f64>,
) -> Result<PingPongReport, String> {
    check_end(&p.link, &e.link, settled)?;
    if p.mismatched > 0 || p.done != iters || e.received != iters || e.sent != iters {
        return Err(format!(
            "rpp broke its promise: {} exchanges of {iters} done, {} answers not the one awaited, \
             the echo received {} and sent {}",
            p.done, p.mismatched, e.received, e.sent
        ));
    }
    let one_way = median(p.rtts.iter().map(|d| d.as_secs_f64() * 1e6 / 2.0).collect());
    Ok(PingPongReport {
        size,
        iters,
        one_way_us: one_way,
        mb_per_s: if one_way > 0.0 {
            size as f64 / (2.0 * one_way)
        } else {
            0.0
        },
        timeouts: 0,
        accounting: accounting(pair, &p.link, &e.link),
        baseline_one_way_us: baseline,
        total_rtt: p.rtts.iter().sum(),
        rpp: Some(rpp_report(&p.link, &e.link)),
    })
}

/// What the report needs of a finished stream.
struct RoundTotals {
    rate: Option<f64>,
    time: Duration,
    sink_count: u64,
}

impl RoundTotals {
    fn of(s: &RppStreamSender) -> RoundTotals {
        RoundTotals {
            rate: s.bytes_per_sec().map(|r| r / 1e6),
            time: s
                .started
                .zip(s.acked)
                .map_or(Duration::ZERO, |(a, b)| b.saturating_since(a)),
            sink_count: s.sink_count,
        }
    }
}

/// Seed 000's pipelining test over RPP, `rounds` times: `count` messages of `size` bytes
/// with at most `window` packets in the send channel, and one acknowledgement (an RPP
/// message) at the end. With a reference, alternates stack and reference rounds (not in
/// sim mode).
pub fn stream(
    setup: &Setup,
    size: usize,
    count: u64,
    window: usize,
    rounds: u32,
    mut reference: Option<&mut dyn Reference>,
) -> Result<StreamReport, String> {
    let mut pair = Pair::new(setup)?;
    let (chan_a, chan_b) = channels(&mut pair)?;
    let (a, b) = links(&board_config(), chan_a, chan_b, Some(window))?;
    let mut sink = RppStreamSink::new(b);
    let sink_idle = sink.link.idle_flag();
    let rounds = u64::from(rounds.max(1));
    let quiet = final_quiet(setup.mode);
    let mode = setup.mode;
    let mut totals = Vec::new();
    let mut base_rates = Vec::new();
    let (sender, sink, settled) = if mode == ExecMode::Sim {
        let limit = Duration::from_secs(10) + Duration::from_millis(count);
        let (mut link, mut sink) = (a, sink);
        let mut last = None;
        for round in 0..rounds {
            let sender = RppStreamSender::new(link, size, count, round);
            let (s, k) = run_sim(&mut pair, sender, sink, limit, Duration::ZERO)?;
            sink = k;
            totals.push(RoundTotals::of(&s));
            if s.link.failure().is_some() || round + 1 == rounds {
                last = Some(s);
                break;
            }
            link = s.link;
        }
        let last = last.ok_or("no stream ran")?;
        settle_sim(&mut pair, last, sink, quiet)?
    } else {
        let (end, sink) = with_server(&mut pair, mode, sink, |api, clock, set| {
            let mut link = a;
            let mut round = 0;
            loop {
                let mut sender = RppStreamSender::new(link, size, count, round);
                sender.clock = Some(*clock);
                set(RUN);
                drive(api, clock, &mut sender, mode);
                let (sender, _) = settle_here(api, clock, sender, &sink_idle, ROUND_QUIET, mode);
                set(PAUSE);
                totals.push(RoundTotals::of(&sender));
                round += 1;
                let failed = sender.link.failure().is_some();
                if let Some(reference) = reference.as_deref_mut().filter(|_| !failed) {
                    base_rates.push(reference.stream_round(size, count, window) / 1e6);
                }
                if failed || round == rounds {
                    set(RUN);
                    let end = settle_here(api, clock, sender, &sink_idle, quiet, mode);
                    set(PAUSE);
                    return end;
                }
                link = sender.link;
            }
        });
        (end.0, sink, end.1)
    };
    check_end(&sender.link, &sink.link, settled)?;
    let short = totals.iter().filter(|t| t.sink_count != count).count();
    if sink.out_of_order > 0 || short > 0 || sink.delivered != count * rounds {
        return Err(format!(
            "rpp broke its promise: the sink got {} messages of {}, {} out of order; {short} \
             streams acknowledged short",
            sink.delivered,
            count * rounds,
            sink.out_of_order
        ));
    }
    let rates: Vec<f64> = totals.iter().filter_map(|t| t.rate).collect();
    Ok(StreamReport {
        size,
        count,
        window,
        mb_per_s: median(rates),
        timeouts: 0,
        delivered: sink.delivered,
        accounting: accounting(&mut pair, &sender.link, &sink.link),
        baseline_mb_per_s: (!base_rates.is_empty()).then(|| median(base_rates)),
        total_time: totals.iter().map(|t| t.time).sum(),
        rpp: Some(rpp_report(&sender.link, &sink.link)),
    })
}
