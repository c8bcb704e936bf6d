//! `myri serve`: the peer that `myri pingpong --transport` and `myri stream --transport`
//! run against, in another process or on another machine.

use crate::Failure;
use crate::opts::print_json;
use clap::Args;
use myri_netbench::{ServeError, Server, ServerConfig, ServerEvent, StopReason};
use myri_proxy::parse_duration;
use myri_transport::{Url, UrlError};
use serde_json::json;
use std::time::Duration;

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// Arguments of `myri serve`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
What it does: opens a transport endpoint at URL and answers every client that says hello, \
one after another or at once: pings are echoed, streamed messages are counted and (when \
the client asks for --verify) checked byte for byte, in order, exactly once. Each session \
is reported when it starts and ends; a client that dies or restarts mid-session is \
reported with the messages the transport handed back.

The plain references: beside a udp:// endpoint the server answers the same ping-pong and \
stream on a bare UDP socket (--baseline-port, any free port by default) and reads a TCP \
stream on the same port number as URL's when that TCP port is free (any port otherwise); \
beside a shm://NAME endpoint it keeps a bare shared-memory ring pair in \
/dev/shm/myri-NAME+ref. Clients learn where in the hello answer; `--baseline` on \
pingpong/stream uses them. Firewalls must let both UDP ports and the TCP port through.

Output: a line when listening, one per session event, and the totals on exit. With \
--json, one JSON object per line: {\"event\":\"listening\"...}, session_started, \
session_ended, session_lost, refused, and {\"event\":\"final\"...} last.

Examples:
  myri serve udp://0.0.0.0:7000
  myri pingpong --transport udp://SERVER:7000 --baseline        (on the other machine)
  myri serve shm://bench --raw --json
  myri stream --transport 'shm://bench?reliable=0' --size 65536 --count 2000 --baseline

Exit codes: 0 stopped by SIGINT/SIGTERM, or --once and the session ended cleanly; 1 --once \
and the session's checks failed; 2 bad arguments or set-up (unparsable url, port in use, \
region held by live processes); 3 --once and the session was lost (the client failed or \
restarted).")]
pub struct ServeArgs {
    /// Where to listen: udp://HOST:PORT (0.0.0.0 for every interface; port 0 picks a free
    /// one, printed at start) or shm://NAME. `?reliable=0` (or --raw) serves raw datagrams.
    #[arg(value_name = "URL")]
    pub url: String,
    /// Serve raw datagrams (no RPP); clients must pass --raw too.
    #[arg(long)]
    pub raw: bool,
    /// Offer no plain references (no bare UDP socket, TCP listener or bare ring).
    #[arg(long)]
    pub no_baseline: bool,
    /// Port of the bare UDP reference socket (udp:// only; 0 picks a free one).
    #[arg(long, default_value_t = 0, value_name = "PORT")]
    pub baseline_port: u16,
    /// Keep spinning this long after the last message before sleeping (lower latency at
    /// the start of each round; units ns, us, ms, s). The server sleeps between messages
    /// anyway while more threads are runnable than the host has cores.
    #[arg(long, default_value = "100ms", value_name = "D", value_parser = duration)]
    pub spin: Duration,
    /// Exit when the first session ends (its result decides the exit code).
    #[arg(long)]
    pub once: bool,
    /// Print one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

fn check_url(args: &ServeArgs) -> Result<bool, Failure> {
    let url: Url = args
        .url
        .parse()
        .map_err(|e: UrlError| Failure::usage(format!("bad url `{}`: {e}", args.url)))?;
    match url.params.reliable {
        Some(true) if args.raw => Err(Failure::usage("--raw contradicts the url's reliable=1")),
        Some(r) => Ok(r),
        None => Ok(!args.raw),
    }
}

fn describe(e: &ServerEvent) -> String {
    match e {
        ServerEvent::Listening {
            url,
            reliable,
            incarnation,
            references,
            pid,
        } => {
            let mut refs = Vec::new();
            if let Some(p) = references.udp_port {
                refs.push(format!("bare udp on port {p}"));
            }
            if let Some(p) = references.tcp_port {
                refs.push(format!("tcp on port {p}"));
            }
            if let Some(r) = &references.shm_ring {
                refs.push(format!("bare ring {r}"));
            }
            format!(
                "listening on {url} ({}, incarnation {incarnation}, pid {pid}); references: {}",
                if *reliable { "reliable" } else { "raw" },
                if refs.is_empty() {
                    "none".into()
                } else {
                    refs.join(", ")
                }
            )
        }
        ServerEvent::SessionStarted {
            addr,
            session,
            incarnation,
            ..
        } => {
            format!("session {session:016x} from {addr} started (client incarnation {incarnation})")
        }
        ServerEvent::SessionEnded {
            addr,
            session,
            counters: c,
            ..
        } => format!(
            "session {session:016x} from {addr} ended: {} pings echoed, {} messages received ({} bytes), {} errors",
            c.echoed,
            c.received,
            c.bytes,
            c.errors()
        ),
        ServerEvent::SessionLost {
            addr,
            session,
            counters: c,
            why,
            unacked,
            ..
        } => format!(
            "session {session:016x} from {addr} lost: {why}; {unacked} unacknowledged messages handed back; {} pings echoed, {} messages received, {} errors",
            c.echoed,
            c.received,
            c.errors()
        ),
        ServerEvent::Refused { addr, why } => format!("refused {addr}: {why}"),
    }
}

fn event_json(e: &ServerEvent) -> serde_json::Value {
    serde_json::to_value(e).unwrap_or_else(|_| json!({}))
}

/// Runs `myri serve`.
pub fn run(args: &ServeArgs) -> Result<(), Failure> {
    let reliable = check_url(args)?;
    let config = ServerConfig {
        reliable,
        references: !args.no_baseline,
        reference_port: args.baseline_port,
        spin: args.spin,
        once: args.once,
        stop_on_signals: true,
    };
    let mut server = Server::open(&args.url, config).map_err(|e| match e {
        ServeError::Io(..) => Failure::check(e.to_string()),
        _ => Failure::usage(e.to_string()),
    })?;
    let json = args.json;
    let show = |e: &ServerEvent| {
        if json {
            print_json(&event_json(e));
        } else {
            println!("{}", describe(e));
        }
    };
    show(&server.listening_event());
    let mut outcome = (0u64, 0u64); // errors in ended sessions, lost sessions
    let reason = server
        .run(|e| {
            match e {
                ServerEvent::SessionEnded { counters, .. } => outcome.0 += counters.errors(),
                ServerEvent::SessionLost { .. } => outcome.1 += 1,
                _ => {}
            }
            show(e);
        })
        .map_err(|e| Failure::check(e.to_string()))?;
    let reason_text = match reason {
        StopReason::Signal(s) if s == libc::SIGINT => "SIGINT".to_string(),
        StopReason::Signal(s) if s == libc::SIGTERM => "SIGTERM".to_string(),
        StopReason::Signal(s) => format!("signal {s}"),
        StopReason::Once => "the session ended (--once)".into(),
        StopReason::Stopped => "stopped".into(),
    };
    let t = server.totals();
    let s = server.endpoint_stats();
    if json {
        print_json(&json!({
            "event": "final", "reason": reason_text, "totals": t,
            "endpoint": {
                "sends": s.sends, "recvs": s.recvs, "registered_sends": s.registered_sends,
                "copied_sends": s.copied_sends, "registered_recvs": s.registered_recvs,
                "heap_recvs": s.heap_recvs, "would_block": s.would_block,
                "unknown_source": s.unknown_source, "malformed": s.malformed,
                "bad_dma_checksum": s.bad_dma_checksum,
                "rpp_dropped": s.rpp_dropped, "peer_failures": s.peer_failures,
                "io_errors": s.io_errors, "gso_sends": s.gso_sends,
                "gso_segments": s.gso_segments, "gso_fallbacks": s.gso_fallbacks,
                "gro_buffers": s.gro_buffers, "gro_segments": s.gro_segments,
                "local_drops": s.local_drops, "peer_sockets": s.peer_sockets,
            },
        }));
    } else {
        println!(
            "stopped ({reason_text}) after {} sessions ({} ended, {} lost): {} pings echoed, {} messages received ({} bytes), {} errors, {} stray",
            t.sessions_started,
            t.sessions_ended,
            t.sessions_lost,
            t.counters.echoed,
            t.counters.received,
            t.counters.bytes,
            t.counters.errors(),
            t.stray
        );
        println!(
            "  references: udp {} echoed {} received, tcp {} bytes, ring {} echoed {} received",
            t.reference_udp_echoed,
            t.reference_udp_received,
            t.reference_tcp_bytes,
            t.reference_ring_echoed,
            t.reference_ring_received
        );
        println!(
            "  endpoint: {} sends, {} receives, {} would-block, {} rpp drops, {} peer failures, {} os errors",
            s.sends, s.recvs, s.would_block, s.rpp_dropped, s.peer_failures, s.io_errors
        );
    }
    if args.once {
        if outcome.1 > 0 {
            return Err(Failure {
                message: "the session was lost".into(),
                code: crate::EXIT_PEER_FAILED,
            });
        }
        if outcome.0 > 0 {
            return Err(Failure::check(format!(
                "the session's checks found {} errors",
                outcome.0
            )));
        }
    }
    Ok(())
}
