//! Ping-pong and streaming over the unreliable channel API between two simulated boards
//! joined by a switch (seed 000, Performance Results), in the three execution modes (see
//! [`harness`](super::harness) for how each runs).
//!
//! An exchange with no answer within the setup's timeout counts as lost: nothing here
//! retransmits. [`reliable`](super::reliable) runs the same benchmarks over RPP.

use super::harness::{PAUSE, Quiet, RUN, channels, drive, run_sim, settle, with_server};
use super::programs::{Drain, Echo, Pinger, StreamSender, StreamSink};
use super::{Reference, median};
use myri_mcp::Channel;
use std::time::Duration;

/// How long a simulated run goes on after the client is done, so that what is in flight
/// lands before the books close.
const LAND: Duration = Duration::from_millis(5);

pub use super::harness::{Accounting, CHAN, ExecMode, Pair, ROUTE, Setup};
pub use super::report::{PingPongReport, StreamReport};

/// Ping-pong of `iters` packets of `size` bytes (seed 000, Single Packets and Small Packet
/// Latencies). With a reference, alternates stack and reference rounds.
pub fn pingpong(
    setup: &Setup,
    size: usize,
    iters: u64,
    mut reference: Option<&mut dyn Reference>,
) -> Result<PingPongReport, String> {
    let mut pair = Pair::new(setup)?;
    let (chan_a, chan_b) = channels(&mut pair)?;
    let mut pinger = Pinger::new(chan_a, ROUTE, CHAN, size, 0, setup.timeout);
    let echo = Echo::new(chan_b, ROUTE, CHAN);
    if setup.mode == ExecMode::Sim {
        pinger.iters = iters;
        let limit = setup.timeout * (iters as u32).max(1) + Duration::from_secs(1);
        let (pinger, echo) = run_sim(&mut pair, pinger, echo, limit, LAND)?;
        return Ok(report_pingpong(
            &mut pair, size, iters, &pinger, &echo, None,
        ));
    }
    let rounds = (iters / 200).clamp(1, 50);
    let mut baseline_rtts = Vec::new();
    let quiet = Quiet::of(&pair);
    let ((), echo) = with_server(&mut pair, setup.mode, echo, |api, clock, set| {
        pinger.clock = Some(*clock);
        for r in 0..rounds {
            let chunk = iters / rounds + u64::from(r < iters % rounds);
            set(RUN);
            pinger.iters += chunk;
            drive(api, clock, &mut pinger, setup.mode);
            set(PAUSE);
            if let Some(reference) = reference.as_deref_mut() {
                baseline_rtts.extend(reference.pingpong_round(size, chunk));
            }
        }
        set(RUN);
        settle(api, clock, &mut pinger, &quiet, setup.mode);
        set(PAUSE);
    });
    let base = (!baseline_rtts.is_empty()).then(|| {
        median(
            baseline_rtts
                .iter()
                .map(|d| d.as_secs_f64() * 1e6 / 2.0)
                .collect(),
        )
    });
    Ok(report_pingpong(
        &mut pair, size, iters, &pinger, &echo, base,
    ))
}

fn report_pingpong(
    pair: &mut Pair,
    size: usize,
    iters: u64,
    p: &Pinger,
    e: &Echo,
    baseline: Option<f64>,
) -> PingPongReport {
    let one_way = median(p.rtts.iter().map(|d| d.as_secs_f64() * 1e6 / 2.0).collect());
    let accounting = pair.accounting(p.sent + e.sent, p.received + e.received, e.refused);
    PingPongReport {
        size,
        iters,
        one_way_us: one_way,
        mb_per_s: if one_way > 0.0 {
            size as f64 / (2.0 * one_way)
        } else {
            0.0
        },
        timeouts: p.timeouts,
        accounting,
        baseline_one_way_us: baseline,
        total_rtt: p.rtts.iter().sum(),
        rpp: None,
    }
}

/// Seed 000's pipelining test, `rounds` times: `count` packets of `size` bytes with at
/// most `window` in the send channel and one acknowledgement at the end. With a reference,
/// alternates stack and reference rounds.
pub fn stream(
    setup: &Setup,
    size: usize,
    count: u64,
    window: usize,
    rounds: u32,
    reference: Option<&mut dyn Reference>,
) -> Result<StreamReport, String> {
    stream_with(setup, size, count, window, rounds, reference, false)
}

/// [`stream`] with every packet checked end to end as RPP checks its packets: the sender
/// computes a CRC-32C over each packet (all of it: its bytes from the DMA buffer, header
/// and payload) and the sink verifies it, and nothing else of a protocol is done
/// ([`StreamSender::checked`]). Beside the plain stream and RPP's, in the same run, it
/// says how much of RPP's cost is the check itself. Packets failing the check are
/// counted as not delivered.
pub fn stream_checked(
    setup: &Setup,
    size: usize,
    count: u64,
    window: usize,
    rounds: u32,
) -> Result<StreamReport, String> {
    stream_with(setup, size, count, window, rounds, None, true)
}

fn stream_with(
    setup: &Setup,
    size: usize,
    count: u64,
    window: usize,
    rounds: u32,
    mut reference: Option<&mut dyn Reference>,
    checked: bool,
) -> Result<StreamReport, String> {
    let mut pair = Pair::new(setup)?;
    let (chan_a, chan_b) = channels(&mut pair)?;
    // The sink gives up waiting first, so its acknowledgement beats the sender's timeout.
    let mut sink = StreamSink::new(chan_b, ROUTE, CHAN, setup.timeout / 2, 0);
    sink.checked = checked;
    let rounds = u64::from(rounds.max(1));
    // Round `round`'s sender, on board A's channel.
    let sender = |chan: Channel, round: u64| {
        let mut s = StreamSender::new(chan, ROUTE, CHAN, size, count, window, setup.timeout, round);
        s.checked = checked;
        s
    };
    let mut senders = Vec::new();
    let mut base_rates = Vec::new();
    let (sink, drained) = if setup.mode == ExecMode::Sim {
        let (mut chan_a, mut sink) = (chan_a, sink);
        for round in 0..rounds {
            let (s, k) = run_sim(
                &mut pair,
                sender(chan_a, round),
                sink,
                setup.timeout * 4 + Duration::from_secs(1),
                LAND,
            )?;
            sink = k;
            senders.push(SenderTotals::of(&s));
            chan_a = s.chan;
        }
        let (drain, sink) = run_sim(
            &mut pair,
            Drain::new(chan_a, setup.timeout),
            sink,
            setup.timeout * 4,
            LAND,
        )?;
        (sink, drain.received)
    } else {
        // One worker thread runs the sink for every round (a thread started per round
        // would be timed waiting for a core).
        let quiet = Quiet::of(&pair);
        let (drained, sink) = with_server(&mut pair, setup.mode, sink, |api, clock, set| {
            let mut chan_a = chan_a;
            for round in 0..rounds {
                let mut sender = sender(chan_a, round);
                sender.clock = Some(*clock);
                set(RUN);
                drive(api, clock, &mut sender, setup.mode);
                set(PAUSE);
                if let Some(reference) = reference.as_deref_mut() {
                    base_rates.push(reference.stream_round(size, count, window) / 1e6);
                }
                senders.push(SenderTotals::of(&sender));
                chan_a = sender.chan;
            }
            // Whatever is still in flight lands and is counted before the books close.
            let mut drain = Drain::new(chan_a, setup.timeout);
            set(RUN);
            settle(api, clock, &mut drain, &quiet, setup.mode);
            set(PAUSE);
            drain.received
        });
        (sink, drained)
    };
    let rates: Vec<f64> = senders.iter().filter_map(|s| s.rate).collect();
    let sent: u64 = senders.iter().map(|s| s.sent).sum::<u64>() + sink.acks;
    let received: u64 =
        senders.iter().map(|s| s.acked + s.stale).sum::<u64>() + sink.total + drained;
    let accounting = pair.accounting(sent, received, 0);
    Ok(StreamReport {
        size,
        count,
        window,
        mb_per_s: median(rates),
        timeouts: senders.iter().map(|s| s.timed_out).sum(),
        sent: senders.iter().map(|s| s.sent).sum(),
        delivered: sink.total - sink.stale - sink.corrupt,
        accounting,
        baseline_mb_per_s: (!base_rates.is_empty()).then(|| median(base_rates)),
        total_time: senders.iter().map(|s| s.time).sum(),
        rpp: None,
    })
}

/// What the report needs of a finished sender.
struct SenderTotals {
    sent: u64,
    acked: u64,
    stale: u64,
    timed_out: u64,
    rate: Option<f64>,
    time: Duration,
}

impl SenderTotals {
    fn of(s: &StreamSender) -> SenderTotals {
        SenderTotals {
            sent: s.sent,
            acked: u64::from(s.acked.is_some()),
            stale: s.stale,
            timed_out: u64::from(s.timed_out),
            rate: s.bytes_per_sec().map(|r| r / 1e6),
            time: s
                .started
                .zip(s.acked)
                .map_or(Duration::ZERO, |(a, b)| b.saturating_since(a)),
        }
    }
}
