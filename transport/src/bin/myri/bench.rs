//! `myri pingpong` and `myri stream`: seed 000's benchmarks over the stack.

use crate::Failure;
use crate::opts::{FaultArgs, print_json};
use clap::{Args, ValueEnum};
use myri_mcp::{McpConfig, RecvMode};
use myri_transport::bench::Reference;
use myri_transport::bench::raw::{self, Accounting, ExecMode, Setup};
use serde_json::{Value, json};
use std::time::Duration;

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

/// Options every benchmark takes.
#[derive(Args, Debug)]
pub struct Common {
    /// Use the unreliable channel API directly (no reliable protocol).
    #[arg(long)]
    pub raw: bool,
    /// How the control programs run.
    #[arg(long, value_enum, default_value_t = ModeArg::Inline)]
    pub mode: ModeArg,
    /// Receive in the control program's polled mode instead of interrupt-driven.
    #[arg(long)]
    pub polled: bool,
    /// How long an exchange waits before it counts as lost, in milliseconds.
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
    fn setup(&self) -> Result<Setup, Failure> {
        if !self.raw {
            return Err(Failure::usage(
                "reliable mode (RPP over the board) is not available in this build yet; pass --raw",
            ));
        }
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
        myri_transport::bench::reference()
            .map(Some)
            .ok_or_else(|| Failure::usage("no shared-memory ring reference in this build"))
    }
}

/// Arguments of `myri pingpong`.
#[derive(Args, Debug)]
pub struct PingPongArgs {
    /// Packet sizes in bytes, comma-separated (each 8 to 8192).
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
    /// Packet size in bytes (8 to 8192).
    #[arg(long, default_value_t = 8192)]
    pub size: usize,
    /// Packets per stream.
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

fn check_size(size: usize) -> Result<(), Failure> {
    if !(8..=myri_mcp::hcb::MAX_PAYLOAD).contains(&size) {
        return Err(Failure::usage(format!(
            "size {size} is not 8..={}",
            myri_mcp::hcb::MAX_PAYLOAD
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
    json!({"sent": a.sent, "received": a.received, "dropped": a.dropped, "duplicated": a.duplicated, "drops": drops})
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

/// Runs `myri pingpong`.
pub fn pingpong(args: &PingPongArgs) -> Result<(), Failure> {
    let setup = args.common.setup()?;
    let mut reference = args.common.reference()?;
    for &size in &args.sizes {
        check_size(size)?;
    }
    if !args.common.json {
        println!(
            "ping-pong over the raw channel API, mode {}, {} exchanges per size",
            setup.mode.name(),
            args.iters
        );
        println!(
            "{:>6} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>13} {:>7}",
            "size",
            "one-way us",
            "MB/s",
            "timeouts",
            "sent",
            "received",
            "dropped",
            "baseline us",
            "ratio"
        );
    }
    let mut balanced = true;
    for &size in &args.sizes {
        let r = raw::pingpong(
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
            print_json(&merge(
                json!({
                    "test": "pingpong", "mode": setup.mode.name(), "size": size, "iters": args.iters,
                    "one_way_us": r.one_way_us, "mb_per_s": r.mb_per_s, "timeouts": r.timeouts,
                    "baseline_one_way_us": r.baseline_one_way_us, "ratio": ratio,
                }),
                accounting_json(&r.accounting),
            ));
        } else {
            let a = &r.accounting;
            let base = r
                .baseline_one_way_us
                .map_or("-".into(), |b| format!("{b:.3}"));
            let ratio = ratio.map_or("-".into(), |x| format!("{x:.2}x"));
            println!(
                "{size:>6} {:>12.3} {:>10.2} {:>9} {:>9} {:>9} {:>9} {base:>13} {ratio:>7}",
                r.one_way_us, r.mb_per_s, r.timeouts, a.sent, a.received, a.dropped
            );
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
    let setup = args.common.setup()?;
    let mut reference = args.common.reference()?;
    check_size(args.size)?;
    let r = raw::stream(
        &setup,
        args.size,
        args.count,
        args.window as usize,
        args.rounds,
        reference.as_mut().map(|r| &mut **r as &mut dyn Reference),
    )
    .map_err(Failure::check)?;
    let ratio = r
        .baseline_mb_per_s
        .filter(|&b| b > 0.0)
        .map(|b| r.mb_per_s / b);
    if args.common.json {
        print_json(&merge(
            json!({
                "test": "stream", "mode": setup.mode.name(), "size": args.size, "count": args.count, "window": args.window,
                "rounds": args.rounds, "mb_per_s": r.mb_per_s, "timeouts": r.timeouts, "delivered": r.delivered,
                "baseline_mb_per_s": r.baseline_mb_per_s, "ratio": ratio,
            }),
            accounting_json(&r.accounting),
        ));
    } else {
        let a = &r.accounting;
        println!(
            "stream over the raw channel API, mode {}: {} x {} bytes, window {}, {} rounds",
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
    }
    if !r.accounting.balanced() {
        return Err(Failure::check(
            "received + dropped does not account for every packet sent",
        ));
    }
    Ok(())
}
