//! `myri`: the user's entry point to the stack. See `myri --help`.

mod bench;
mod fabric;
mod info;
mod opts;
mod proxy;
mod routes;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit code for a run that completed but whose results are wrong (a check failed).
pub const EXIT_CHECK_FAILED: u8 = 1;
/// Exit code for bad arguments or a set-up that could not be made.
pub const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(
    name = "myri",
    version,
    about = "A Myrinet-style messaging stack: simulated boards and fabric, control program, reliable transport.",
    long_about = "A Myrinet-style messaging stack in Rust: a simulated PCI64 board and fabric, the \
                  control program that runs on it, a reliable packet protocol, and a transport for \
                  applications. Every subcommand runs with no set-up on the embedded simulated \
                  fabric.\n\nExit codes: 0 success; 1 the run finished but a check failed; 2 bad \
                  arguments or set-up."
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
    /// back and forth; one-way latency and bandwidth per size.
    Pingpong(bench::PingPongArgs),
    /// Seed 000's pipelining test: packets one way with a window in flight, one
    /// acknowledgement at the end; bandwidth.
    Stream(bench::StreamArgs),
    /// Forward UDP datagrams both ways between clients and a server, injecting seeded loss,
    /// corruption, duplication, reordering, delay and jitter; count every fault.
    Proxy(Box<proxy::ProxyArgs>),
    /// Read, check and print a route file; every bad line is named.
    Routes(routes::RoutesArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Fabric(args) => fabric::run(&args),
        Command::Pingpong(args) => bench::pingpong(&args),
        Command::Stream(args) => bench::stream(&args),
        Command::Proxy(args) => proxy::run(&args),
        Command::Routes(args) => routes::run(&args),
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
