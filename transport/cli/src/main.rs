//! `myri`: the user's entry point to the stack. See `myri --help`.

mod bench;
mod fabric;
mod frames;
mod info;
mod net;
mod opts;
mod proxy;
mod routes;
mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit code for a run that completed but whose results are wrong (a check failed).
pub const EXIT_CHECK_FAILED: u8 = 1;
/// Exit code for bad arguments or a set-up that could not be made.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for a peer that failed, restarted or never answered (network runs).
pub const EXIT_PEER_FAILED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "myri",
    version,
    about = "A Myrinet-style messaging stack: simulated boards and fabric, control program, reliable transport.",
    long_about = "A Myrinet-style messaging stack in Rust: a simulated PCI64 board and fabric, the \
                  control program that runs on it, a reliable packet protocol, and a transport for \
                  applications. Every subcommand runs with no set-up on the embedded simulated \
                  fabric; `myri serve` and `--transport udp://...` or `shm://...` run the same benchmarks \
                  between processes and machines.\n\nExit codes: 0 success; 1 the run finished \
                  but a check failed; 2 bad arguments or set-up; 3 the peer failed, restarted \
                  or never answered."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bring a simulated PCI64 board out of reset and print its EEPROM record and state.
    Info(info::InfoArgs),
    /// Send frames by source route across a simulated fabric of switches, with optional
    /// fault injection, and report what every link did to them.
    Fabric(fabric::FabricArgs),
    /// Seed 000's ping-pong between two simulated boards joined by a switch: one packet
    /// back and forth; one-way latency and bandwidth per size. With --transport
    /// udp://HOST:PORT or shm://NAME, against a `myri serve` there instead.
    Pingpong(PingPongCommand),
    /// Seed 000's pipelining test: packets one way with a window in flight, one
    /// acknowledgement at the end; bandwidth. With --transport udp://HOST:PORT or
    /// shm://NAME, a stream to a `myri serve` there instead (goodput).
    Stream(StreamCommand),
    /// Forward UDP datagrams both ways between clients and a server, injecting seeded loss,
    /// corruption, duplication, reordering, delay and jitter; count every fault.
    Proxy(Box<proxy::ProxyArgs>),
    /// Seed 001's remote-video demo: frames streamed by directed sends into a strided
    /// window on another board, every line checked; frames per second and MB/s on the
    /// modelled board beside the seed's.
    Frames(frames::FramesArgs),
    /// Read, check and print a route file; every bad line is named.
    Routes(routes::RoutesArgs),
    /// Serve ping-pong and stream clients (`--transport URL`) over udp:// or shm://, with
    /// the plain references beside the endpoint; print the counters.
    Serve(serve::ServeArgs),
}

/// `myri pingpong`: the simulated boards' options, and where else it can run.
#[derive(clap::Args)]
#[command(after_long_help = "\
Over a network (--transport udp://HOST:PORT or shm://NAME): start `myri serve URL` first, \
in another terminal or on the other machine. --sizes and --iters apply; --raw runs raw \
datagrams (the server must run raw too) and --timeout-ms bounds each raw exchange; \
--baseline measures, in rounds interleaved with the transport's, a bare UDP socket \
ping-pong (udp://) or a bare shared-memory ring (shm://) against the same server, and \
reports the ratio. --mode, --polled and the fault options are for sim:// only.

--json prints one JSON object per line, one with \"test\": \"pingpong\" per size: size, iters, \
one_way_us (median, half the round trip), mb_per_s, timeouts (raw), baseline_one_way_us and \
ratio (--baseline); on sim:// also packets.{sent,received,dropped,duplicated,drops} and, \
reliable, RPP's counters as for `myri stream`.

Examples:
  myri pingpong --raw --baseline
  myri serve udp://0.0.0.0:7000      then      myri pingpong --transport udp://HOST:7000 --sizes 8,1024 --baseline")]
pub struct PingPongCommand {
    #[command(flatten)]
    bench: bench::PingPongArgs,
    #[command(flatten)]
    net: net::NetArgs,
    #[command(flatten)]
    net_pingpong: net::NetPingPongArgs,
}

/// `myri stream`: the simulated boards' options, and where else it can run.
#[derive(clap::Args)]
#[command(after_long_help = "\
Over a network (--transport udp://HOST:PORT or shm://NAME): start `myri serve URL` first. \
--size, --count and --rounds apply (--window does not: RPP's window and the receiver's \
credit pace the stream); --verify has the server check every byte, --random-sizes MAX \
draws sizes from --seed, --interval D samples RPP's window, round trip and losses every D \
of each stream. --baseline measures, interleaved, the same stream over a bare \
UDP socket and over a TCP connection (udp://), or over a bare shared-memory ring \
(shm://), and reports the ratios. A server that dies mid-stream ends the run with exit \
code 3 and the number of unacknowledged messages the transport handed back.

--json prints one JSON object per line; the last, with \"test\": \"stream\", holds the result. \
Its fields mean the same on every transport:
  sent, delivered     messages the sending application handed over, and messages handed to
                      the receiving one (count x rounds each when nothing fails)
  mb_per_s, ratio     median goodput (10^6 bytes/s); goodput / the reference's
  baseline_mb_per_s   the reference's median goodput (--baseline)
  packets.{sent,received,dropped,duplicated,drops}
                      sim:// only: datagrams on the fabric, drops by cause
  retransmitted, lost, rtt_us, rpp.{a,b}
                      reliable sim:// only: RPP's counters (both ends, then each)
  transport, reliable, bytes, errors, tcp_mb_per_s
                      udp:// and shm:// only: the server, its byte count and the errors it
                      found, TCP's goodput (udp:// --baseline)
  event \"interval\"    udp:// and shm:// --interval only, before the result: round, t_s
                      (since the round's start), acked_messages, acked_bytes, mb_per_s
                      (since the sample before), rpp (RPP's state then, as in \"session\")

Examples:
  myri serve udp://0.0.0.0:7000      then      myri stream --transport udp://HOST:7000 --size 65536 --count 2000 --baseline
  myri stream --transport shm://bench --random-sizes 1048576 --count 10000 --verify --rounds 1")]
pub struct StreamCommand {
    #[command(flatten)]
    bench: bench::StreamArgs,
    #[command(flatten)]
    net: net::NetArgs,
    #[command(flatten)]
    net_stream: net::NetStreamArgs,
}

/// The shared benchmark options of a network run.
fn net_run<'a>(net: &'a net::NetArgs, c: &bench::Common) -> net::Run<'a> {
    let f = &c.faults;
    net::Run {
        net,
        raw: c.raw,
        baseline: c.baseline,
        json: c.json,
        timeout: std::time::Duration::from_millis(c.timeout_ms.max(1)),
        seed: f.seed,
        sim_options: f.loss != 0.0 || f.corrupt != 0.0 || f.dup != 0.0 || f.reorder != 0.0,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Fabric(args) => fabric::run(&args),
        Command::Pingpong(a) if a.net.is_network() => net::pingpong(
            &net_run(&a.net, &a.bench.common),
            &a.bench.sizes,
            a.bench.iters,
            &a.net_pingpong,
        ),
        Command::Pingpong(a) => bench::pingpong(&a.bench),
        Command::Stream(a) if a.net.is_network() => net::stream(
            &net_run(&a.net, &a.bench.common),
            a.bench.size,
            a.bench.count,
            a.bench.rounds,
            &a.net_stream,
        ),
        Command::Stream(a) => match a.net_stream.network_only() {
            Some(option) => Err(Failure::usage(format!(
                "{option} applies to udp:// and shm:// runs against `myri serve` (--transport URL)"
            ))),
            None => bench::stream(&a.bench),
        },
        Command::Proxy(args) => proxy::run(&args),
        Command::Frames(args) => frames::run(&args),
        Command::Routes(args) => routes::run(&args),
        Command::Serve(args) => serve::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("myri: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// A failed command: what to say and which exit code to use.
pub struct Failure {
    /// The message.
    pub message: String,
    /// The exit code.
    pub code: u8,
}

impl Failure {
    /// Bad arguments or set-up.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: EXIT_USAGE,
        }
    }

    /// A check failed.
    pub fn check(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code: EXIT_CHECK_FAILED,
        }
    }
}
