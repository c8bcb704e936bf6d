//! `myri pingpong` and `myri stream`: seed 000's benchmarks over the stack, reliable (RPP
//! over `sim://` endpoints, the default) or raw (the channel API alone, `--raw`).
//!
//! Each run goes through [`Protocol`]: it picks the driver and names the run; the
//! reports and their printing are shared, so another way to carry the benchmark is one
//! more variant and one more arm in [`run_pingpong`] and [`run_stream`].

use crate::Failure;
use crate::opts::{FaultArgs, print_json};
use clap::{Args, ValueEnum};
use myri_board_bench::Reference;
use myri_board_bench::harness::{Accounting, ExecMode, Setup};
use myri_board_bench::report::{PingPongReport, RppReport, StreamReport};
use myri_board_bench::{raw, reliable};
use myri_mcp::{McpConfig, RecvMode};
use myri_rpp::Stats;
use serde_json::{Value, json};
use std::time::Duration;

/// What carries the benchmark between the two boards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RPP over the channel API: nothing is lost, losses are retransmitted.
    Rpp,
    /// The unreliable channel API alone: a lost exchange times out.
    Raw,
}

impl Protocol {
    /// The name used in JSON.
    fn name(self) -> &'static str {
        match self {
            Protocol::Rpp => "rpp",
            Protocol::Raw => "raw",
        }
    }

    /// What the run is over, for the text output.
    fn over(self) -> &'static str {
        match self {
            Protocol::Rpp => "RPP over the channel API",
            Protocol::Raw => "the raw channel API",
        }
    }

    /// Largest message (the channel's payload raw; RPP fragments larger ones).
    fn max_size(self) -> usize {
        match self {
            Protocol::Rpp => reliable::max_message_len(),
            Protocol::Raw => myri_mcp::hcb::MAX_PAYLOAD,
        }
    }
}

/// Runs one ping-pong size over `protocol`.
fn run_pingpong(
    protocol: Protocol,
    setup: &Setup,
    size: usize,
    iters: u64,
    reference: Option<&mut dyn Reference>,
) -> Result<PingPongReport, String> {
    match protocol {
        Protocol::Rpp => reliable::pingpong(setup, size, iters, reference),
        Protocol::Raw => raw::pingpong(setup, size, iters, reference),
    }
}

/// Runs the streams over `protocol`.
fn run_stream(
    protocol: Protocol,
    setup: &Setup,
    args: &StreamArgs,
    reference: Option<&mut dyn Reference>,
) -> Result<StreamReport, String> {
    let (size, count, window) = (args.size, args.count, args.window as usize);
    match protocol {
        Protocol::Rpp => reliable::stream(setup, size, count, window, args.rounds, reference),
        Protocol::Raw => raw::stream(setup, size, count, window, args.rounds, reference),
    }
}

/// How the control programs run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    /// Stepped by the host threads' progress calls (the default; best on few cores).
    Inline,
    /// Each control program on its own thread (spin, then park).
    Threaded,
    /// Under the deterministic scheduler in virtual time, with a PCI64B's timing and
    /// SAN-2000 links: figures are the model's, and the same seed repeats them exactly.
    Sim,
}

impl From<ModeArg> for ExecMode {
    fn from(m: ModeArg) -> ExecMode {
        match m {
            ModeArg::Inline => ExecMode::Inline,
            ModeArg::Threaded => ExecMode::Threaded,
            ModeArg::Sim => ExecMode::Sim,
        }
    }
}

/// What checks each packet of a reliable run end to end.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegrityArg {
    /// RPP's CRC-32C, computed in software at both ends.
    Crc32c,
    /// The board's DMA checksums, host memory to host memory (checksum offload).
    Dma,
}

/// Options every benchmark takes.
#[derive(Args, Debug)]
pub struct Common {
    /// Use the unreliable channel API directly, with no reliable protocol: a lost packet
    /// times out its exchange. Without it the run is over RPP, which retransmits what the
    /// fabric loses and delivers every message once, in order.
    #[arg(long)]
    pub raw: bool,
    /// How the control programs run.
    #[arg(long, value_enum, default_value_t = ModeArg::Inline)]
    pub mode: ModeArg,
    /// Receive in the control program's polled mode instead of interrupt-driven.
    #[arg(long)]
    pub polled: bool,
    /// Reliable runs on the simulated boards: what checks each packet end to end, the
    /// board's DMA checksums (the default: no CRC in software) or RPP's CRC-32C.
    #[arg(long, value_enum)]
    pub integrity: Option<IntegrityArg>,
    /// How long an exchange waits before it counts as lost, in milliseconds (--raw only:
    /// over RPP nothing is lost, and RPP's own timers retransmit).
    #[arg(long, default_value_t = 20, value_name = "MS")]
    pub timeout_ms: u64,
    /// Also measure the plain reference (two threads over a shared-memory ring, no stack)
    /// in rounds interleaved with the stack's, and report the ratio.
    #[arg(long)]
    pub baseline: bool,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

impl Common {
    fn protocol(&self) -> Protocol {
        if self.raw {
            Protocol::Raw
        } else {
            Protocol::Rpp
        }
    }

    fn setup(&self) -> Result<Setup, Failure> {
        let mcp = McpConfig {
            recv_mode: if self.polled {
                RecvMode::Polled
            } else {
                RecvMode::Interrupt
            },
            ..McpConfig::default()
        };
        Ok(Setup {
            mode: self.mode.into(),
            faults: self.faults.config()?,
            seed: self.faults.seed,
            mcp,
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            integrity: self.integrity.map(|i| match i {
                IntegrityArg::Crc32c => myri_transport::Integrity::Crc32c,
                IntegrityArg::Dma => myri_transport::Integrity::Dma,
            }),
        })
    }

    fn reference(&self) -> Result<Option<Box<dyn Reference>>, Failure> {
        if !self.baseline {
            return Ok(None);
        }
        if self.mode == ModeArg::Sim {
            return Err(Failure::usage(
                "--baseline measures real time; it cannot be compared with --mode sim's virtual time",
            ));
        }
        myri_board_bench::reference()
            .map(Some)
            .ok_or_else(|| Failure::usage("no shared-memory ring reference in this build"))
    }
}

/// Arguments of `myri pingpong`.
#[derive(Args, Debug)]
pub struct PingPongArgs {
    /// Message sizes in bytes, comma-separated: up to 12288 with --raw (one packet each);
    /// over RPP up to 64 MiB (RPP fragments a message to the channel's 12288-byte packets,
    /// less its header, so an 8192-byte message takes one).
    #[arg(long, value_delimiter = ',', default_value = "8,64,512,1024,4096,8192")]
    pub sizes: Vec<usize>,
    /// Exchanges per size.
    #[arg(long, default_value_t = 10_000)]
    pub iters: u64,
    #[command(flatten)]
    pub common: Common,
}

/// Arguments of `myri stream`.
#[derive(Args, Debug)]
pub struct StreamArgs {
    /// Message size in bytes: up to 12288 with --raw (one packet each); over RPP up to
    /// 64 MiB (RPP fragments a message to the channel's 12288-byte packets, less its
    /// header, so an 8192-byte message takes one).
    #[arg(long, default_value_t = 8192)]
    pub size: usize,
    /// Messages per stream.
    #[arg(long, default_value_t = 200)]
    pub count: u64,
    /// Most packets in the send channel at once (seed 000 used 8, the send channel's size).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub window: u64,
    /// Streams to run; the bandwidth reported is the median.
    #[arg(long, default_value_t = 10)]
    pub rounds: u32,
    #[command(flatten)]
    pub common: Common,
}

fn check_size(protocol: Protocol, size: usize) -> Result<(), Failure> {
    let max = protocol.max_size();
    if !(8..=max).contains(&size) {
        return Err(Failure::usage(format!(
            "size {size} is not 8..={max} (over {})",
            protocol.over()
        )));
    }
    Ok(())
}

fn accounting_json(a: &Accounting) -> Value {
    let drops: serde_json::Map<String, Value> = a
        .drops
        .iter()
        .map(|&(k, v)| (k.replace([' ', '-'], "_"), json!(v)))
        .collect();
    json!({"packets": {"sent": a.sent, "received": a.received, "dropped": a.dropped, "duplicated": a.duplicated, "drops": drops}})
}

fn drops_text(a: &Accounting) -> String {
    if a.drops.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = a.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(" ({})", parts.join(", "))
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn stats_json(s: &Stats) -> Value {
    json!({
        "packets_sent": s.packets_sent, "data_sent": s.data_sent,
        "retransmitted": s.retransmitted, "spurious_retransmits": s.spurious_retransmits,
        "acks_sent": s.acks_sent, "acks_received": s.acks_received,
        "packets_received": s.packets_received, "dup_packets": s.dup_packets,
        "bad_crc": s.bad_crc, "malformed": s.malformed, "stale": s.stale,
        "beyond_window": s.beyond_window, "lost": s.lost, "rto_expirations": s.rto_expirations,
        "messages_sent": s.messages_sent, "messages_delivered": s.messages_delivered,
        "bytes_delivered": s.bytes_delivered, "probes": s.probes,
        "credit_stalls": s.credit_stalls, "srtt_us": us(s.srtt), "rttvar_us": us(s.rttvar),
        "rto_us": us(s.rto),
        "cwnd": s.cwnd, "ack_aggregation": s.ack_aggregation, "ssthresh": s.ssthresh,
        "pacing_rate": s.pacing_rate,
        "controller": s.controller, "bandwidth_estimate": s.bandwidth_estimate,
        "congestion_events": s.congestion_events, "cwnd_limited": s.cwnd_limited,
        "bad_mac": s.bad_mac, "integrity_mismatch": s.integrity_mismatch,
    })
}

/// RPP's fields of a JSON line: totals of both ends at the top, each end's counters and
/// the glue's under `rpp`.
fn rpp_json(r: Option<&RppReport>) -> Value {
    let Some(r) = r else {
        return json!({});
    };
    let [ea, eb] = &r.endpoints;
    json!({
        "retransmitted": r.retransmitted(), "spurious_retransmits": r.spurious_retransmits(),
        "rto_expirations": r.rto_expirations(), "lost": r.lost(), "dup_packets": r.dup_packets(),
        "bad_crc": r.bad_crc(), "bad_dma_checksum": r.bad_dma_checksums(),
        "acks_sent": r.acks_sent(), "rtt_us": us(r.client.srtt),
        "rpp": {
            "a": stats_json(&r.client), "b": stats_json(&r.server),
            "in_place": ea.registered_recvs + eb.registered_recvs,
            "assembled": ea.heap_recvs + eb.heap_recvs,
            "transmit_copies": ea.transmit_copies + eb.transmit_copies,
            "would_block": ea.would_block + eb.would_block,
            "io_errors": ea.io_errors + eb.io_errors,
            "trace_hashes": [format!("{:016x}", r.trace_hashes[0]), format!("{:016x}", r.trace_hashes[1])],
        },
    })
}

fn rpp_text(r: &RppReport) -> String {
    let [ea, eb] = &r.endpoints;
    format!(
        "  rpp         retransmitted {} (spurious {}, timer expiries {}), lost {}, duplicates {}, \
         bad crc-32c {}, bad dma checksums {}, acks {}; srtt {:.1} us; delivered in place {}, \
         assembled {}; {} packets copied into dma buffers",
        r.retransmitted(),
        r.spurious_retransmits(),
        r.rto_expirations(),
        r.lost(),
        r.dup_packets(),
        r.bad_crc(),
        r.bad_dma_checksums(),
        r.acks_sent(),
        us(r.client.srtt),
        ea.registered_recvs + eb.registered_recvs,
        ea.heap_recvs + eb.heap_recvs,
        ea.transmit_copies + eb.transmit_copies
    )
}

/// Runs `myri pingpong`.
pub fn pingpong(args: &PingPongArgs) -> Result<(), Failure> {
    let protocol = args.common.protocol();
    let setup = args.common.setup()?;
    let mut reference = args.common.reference()?;
    for &size in &args.sizes {
        check_size(protocol, size)?;
    }
    let lost_column = match protocol {
        Protocol::Rpp => "retrans",
        Protocol::Raw => "timeouts",
    };
    if !args.common.json {
        println!(
            "ping-pong over {}, mode {}, {} exchanges per size",
            protocol.over(),
            setup.mode.name(),
            args.iters
        );
        println!(
            "{:>6} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>13} {:>7}",
            "size",
            "one-way us",
            "MB/s",
            lost_column,
            "sent",
            "received",
            "dropped",
            "baseline us",
            "ratio"
        );
    }
    let mut balanced = true;
    for &size in &args.sizes {
        let r = run_pingpong(
            protocol,
            &setup,
            size,
            args.iters,
            reference.as_mut().map(|r| &mut **r as &mut dyn Reference),
        )
        .map_err(Failure::check)?;
        balanced &= r.accounting.balanced();
        let ratio = r
            .baseline_one_way_us
            .filter(|&b| b > 0.0)
            .map(|b| r.one_way_us / b);
        if args.common.json {
            let line = merge(
                json!({
                    "test": "pingpong", "protocol": protocol.name(), "mode": setup.mode.name(),
                    "size": size, "iters": args.iters, "one_way_us": r.one_way_us,
                    "mb_per_s": r.mb_per_s, "timeouts": r.timeouts,
                    "baseline_one_way_us": r.baseline_one_way_us, "ratio": ratio,
                }),
                accounting_json(&r.accounting),
            );
            print_json(&merge(line, rpp_json(r.rpp.as_ref())));
        } else {
            let a = &r.accounting;
            let base = r
                .baseline_one_way_us
                .map_or("-".into(), |b| format!("{b:.3}"));
            let ratio = ratio.map_or("-".into(), |x| format!("{x:.2}x"));
            let lost = r.rpp.as_ref().map_or(r.timeouts, RppReport::retransmitted);
            println!(
                "{size:>6} {:>12.3} {:>10.2} {lost:>9} {:>9} {:>9} {:>9} {base:>13} {ratio:>7}",
                r.one_way_us, r.mb_per_s, a.sent, a.received, a.dropped
            );
            if let Some(rpp) = &r.rpp {
                println!("{}", rpp_text(rpp));
            }
        }
    }
    if !balanced {
        return Err(Failure::check(
            "received + dropped does not account for every packet sent",
        ));
    }
    Ok(())
}

/// Runs `myri stream`.
pub fn stream(args: &StreamArgs) -> Result<(), Failure> {
    let protocol = args.common.protocol();
    let setup = args.common.setup()?;
    let mut reference = args.common.reference()?;
    check_size(protocol, args.size)?;
    let r = run_stream(
        protocol,
        &setup,
        args,
        reference.as_mut().map(|r| &mut **r as &mut dyn Reference),
    )
    .map_err(Failure::check)?;
    let ratio = r
        .baseline_mb_per_s
        .filter(|&b| b > 0.0)
        .map(|b| r.mb_per_s / b);
    if args.common.json {
        let line = merge(
            json!({
                "test": "stream", "protocol": protocol.name(), "mode": setup.mode.name(),
                "size": args.size, "count": args.count, "window": args.window,
                "rounds": args.rounds, "mb_per_s": r.mb_per_s, "timeouts": r.timeouts,
                "sent": r.sent, "delivered": r.delivered, "baseline_mb_per_s": r.baseline_mb_per_s,
                "ratio": ratio,
            }),
            accounting_json(&r.accounting),
        );
        print_json(&merge(line, rpp_json(r.rpp.as_ref())));
    } else {
        let a = &r.accounting;
        println!(
            "stream over {}, mode {}: {} x {} bytes, window {}, {} rounds",
            protocol.over(),
            setup.mode.name(),
            args.count,
            args.size,
            args.window,
            args.rounds
        );
        println!(
            "  bandwidth   {:.1} MB/s (median){}",
            r.mb_per_s,
            r.baseline_mb_per_s.map_or(String::new(), |b| format!(
                ", baseline {b:.1} MB/s, ratio {:.2}",
                ratio.unwrap_or(0.0)
            ))
        );
        println!(
            "  packets     sent {} received {} dropped {}{} duplicated {}; {} of {} streams timed out",
            a.sent,
            a.received,
            a.dropped,
            drops_text(a),
            a.duplicated,
            r.timeouts,
            args.rounds
        );
        if let Some(rpp) = &r.rpp {
            println!("{}", rpp_text(rpp));
        }
    }
    if !r.accounting.balanced() {
        return Err(Failure::check(
            "received + dropped does not account for every packet sent",
        ));
    }
    Ok(())
}
