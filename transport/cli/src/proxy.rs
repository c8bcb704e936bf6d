//! `myri proxy`: forwards UDP datagrams both ways between clients and a server, injecting
//! seeded faults.

use crate::Failure;
use crate::opts::print_json;
use clap::{Args, ValueEnum};
use myri_device::fabric::FaultConfig;
use myri_proxy::{
    DirectionStats, Limits, MeshConfig, MeshProxy, MeshStats, PipeConfig, ProxyConfig, ProxyEvent,
    ProxyStats, StopReason, UdpProxy, UdpUrl, format_duration, parse_duration, udp_url,
};
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Which directions the faults apply to.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Datagrams both ways.
    Both,
    /// Only datagrams from the clients to the server.
    ToServer,
    /// Only datagrams from the server to the clients.
    ToClient,
}

fn probability(text: &str) -> Result<f64, String> {
    let p: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{text} is not a probability in [0, 1]"))
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

fn url(text: &str) -> Result<UdpUrl, String> {
    text.parse::<UdpUrl>().map_err(|e| e.to_string())
}

/// Arguments of `myri proxy`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
How it forwards: every client address that sends to --listen gets its own session with its \
own upstream socket connected to --to (like a NAT), so the server sees one address per \
client and its answers go back to the right client, from the --listen address. Any UDP \
application works through it unchanged as long as the client speaks first; for peers that \
may both speak first, fix the upstream side with --upstream-bind and pin the client with \
--client.

Faults are decided per datagram, in this order: loss; then corruption (one bit flipped), \
duplication (a second copy right after), delay plus jitter, and reordering. The decisions \
come from one seeded generator per direction, so the same --seed and the same datagrams in \
the same order give the same faults. Every fault is counted.

Mesh mode (--mesh N), for N peers that all talk to each other and may each speak first, \
such as the ranks of an MPI job: peer i receives at its real address, --to's port + i, and \
the proxy binds a shadow socket for it at --listen's port + i, the address the other peers \
are told is i's (the libfabric provider does this with FI_MYRI_RANK_PORTS=REAL,SHADOW, the \
two base ports). A datagram that peer j sends to shadow i goes, after the faults, from shadow \
j to peer i, so i sees it come from j's shadow address and answers there. Every ordered pair \
of peers is a link with its own seeded fault decisions and counters (\"links\" in --json, \
with \"total\" and the kernel's drops per shadow socket in \"peers\"); datagrams from other \
addresses are dropped and counted (refused_unknown).

Output: text counters on exit (Ctrl-C, SIGTERM, --duration or --packets). With --json, one \
JSON object per line: a \"listening\" event, session events, a \"report\" every --interval \
and a \"final\" object last.

Examples:
  myri proxy --listen udp://127.0.0.1:7000 --to udp://127.0.0.1:7001 --loss 0.05 --dup 0.01 --reorder 0.05
  myri proxy --listen udp://0.0.0.0:5353 --to udp://10.0.0.2:53 --delay 20ms --jitter 5ms --json
  myri proxy --mesh 4 --listen udp://127.0.0.1:30000 --to udp://127.0.0.1:20000 --loss 0.05 --dup 0.01 --reorder 0.05
    (then: FI_MYRI_RANK_PORTS=20000,30000 mpirun -np 4 -x FI_MYRI_RANK_PORTS ...)

Exit codes: 0 stopped normally; 1 a socket failed while running; 2 bad arguments or set-up \
(unparsable url, port in use, no route to the server).")]
pub struct ProxyArgs {
    /// Where clients send, udp://HOST:PORT (IPv6 as `udp://[::1]:PORT`). Port 0 picks a free
    /// port; the address is printed at start. With --mesh: the first peer's shadow address.
    #[arg(long, value_name = "URL", value_parser = url)]
    pub listen: UdpUrl,
    /// The server to forward to, udp://HOST:PORT. With --mesh: the first peer's address.
    #[arg(long, value_name = "URL", value_parser = url)]
    pub to: UdpUrl,
    /// Mesh mode between N peers on consecutive ports: peer i receives at --to's port + i
    /// and the proxy stands for it at --listen's port + i (see below).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=myri_proxy::MAX_MESH_PEERS as u64),
          conflicts_with_all = ["upstream_bind", "client", "direction", "max_clients", "idle_timeout"])]
    pub mesh: Option<u64>,
    /// Probability of dropping each datagram (0 to 1).
    #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = probability)]
    pub loss: f64,
    /// Probability of flipping one random bit of each datagram.
    #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = probability)]
    pub corrupt: f64,
    /// Probability of sending a datagram twice.
    #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = probability)]
    pub dup: f64,
    /// Probability of holding a datagram back until --reorder-gap later datagrams of the
    /// same client have overtaken it.
    #[arg(long, default_value_t = 0.0, value_name = "P", value_parser = probability)]
    pub reorder: f64,
    /// How many later datagrams overtake a held one.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub reorder_gap: u32,
    /// The longest a datagram is held for reordering when no later one comes; it then goes
    /// anyway (counted as reorder_unmatched).
    #[arg(long, default_value = "10ms", value_name = "D", value_parser = duration)]
    pub reorder_hold: Duration,
    /// Delay added to every datagram (units ns, us, ms, s, m: 20ms, 1.5s).
    #[arg(long, default_value = "0", value_name = "D", value_parser = duration)]
    pub delay: Duration,
    /// Uniform random extra delay from 0 to J on every datagram; it can reorder datagrams
    /// closer together than J, as netem's does.
    #[arg(long, default_value = "0", value_name = "J", value_parser = duration)]
    pub jitter: Duration,
    /// Which directions the faults apply to; the other direction is forwarded untouched.
    #[arg(long, value_enum, default_value_t = Direction::Both)]
    pub direction: Direction,
    /// Seed of every fault decision.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// Print one JSON object per line: events, a report every --interval, the final counters.
    #[arg(long)]
    pub json: bool,
    /// How often to report the counters (JSON lines with --json; a status line on a
    /// terminal otherwise). 0 turns the reports off.
    #[arg(long, default_value = "1s", value_name = "D", value_parser = duration)]
    pub interval: Duration,
    /// Stop after this long (datagrams still delayed or held are counted unsent).
    #[arg(long, value_name = "D", value_parser = duration)]
    pub duration: Option<Duration>,
    /// Stop after N datagrams (both directions), once each was forwarded or dropped.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub packets: Option<u64>,
    /// Close a client's session after this long with no datagram either way.
    #[arg(long, default_value = "2m", value_name = "D", value_parser = duration)]
    pub idle_timeout: Duration,
    /// The most client sessions open at once (each holds one socket); datagrams from
    /// further clients are dropped and counted.
    #[arg(long, default_value_t = 1024, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_clients: u64,
    /// The most MiB of datagrams waiting in each direction (delayed or held); more are
    /// dropped and counted as queue_full.
    #[arg(long, default_value_t = 64, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub queue_limit_mib: u64,
    /// Bind the upstream socket to this address, so the server can be told where to send
    /// before any client speaks. Allows a single client.
    #[arg(long, value_name = "URL", value_parser = url)]
    pub upstream_bind: Option<UdpUrl>,
    /// Accept datagrams only from this client; with --upstream-bind, datagrams from the
    /// server go to it even before it has spoken.
    #[arg(long, value_name = "URL", value_parser = url)]
    pub client: Option<UdpUrl>,
}

fn resolve(url: &UdpUrl) -> Result<std::net::SocketAddr, Failure> {
    url.resolve().map_err(|e| Failure::usage(e.to_string()))
}

impl ProxyArgs {
    /// The proxy's configuration, resolved and checked.
    pub fn config(&self) -> Result<ProxyConfig, Failure> {
        let faulty = self.faulty_pipe();
        let clean = PipeConfig {
            faults: FaultConfig::default(),
            ..faulty
        };
        let (to_server, to_client) = match self.direction {
            Direction::Both => (faulty, faulty),
            Direction::ToServer => (faulty, clean),
            Direction::ToClient => (clean, faulty),
        };
        Ok(ProxyConfig {
            to_server,
            to_client,
            seed: self.seed,
            idle_timeout: self.idle_timeout,
            max_clients: usize::try_from(self.max_clients).unwrap_or(usize::MAX),
            upstream_bind: self.upstream_bind.as_ref().map(resolve).transpose()?,
            client: self.client.as_ref().map(resolve).transpose()?,
            ..ProxyConfig::new(resolve(&self.listen)?, resolve(&self.to)?)
        })
    }

    /// The faults of a faulty direction (or of every link of a mesh).
    fn faulty_pipe(&self) -> PipeConfig {
        PipeConfig {
            faults: FaultConfig {
                delay: self.delay,
                jitter: self.jitter,
                ..FaultConfig::rates(self.loss, self.corrupt, self.dup, self.reorder)
            },
            reorder_gap: self.reorder_gap,
            reorder_hold: self.reorder_hold,
            queue_limit_bytes: usize::try_from(self.queue_limit_mib << 20).unwrap_or(usize::MAX),
        }
    }

    /// The mesh's configuration (with --mesh), resolved and checked.
    pub fn mesh_config(&self, n: usize) -> Result<MeshConfig, Failure> {
        let usage = |e: myri_proxy::ProxyError| Failure::usage(e.to_string());
        let config = MeshConfig::consecutive(n, resolve(&self.to)?, resolve(&self.listen)?)
            .map_err(usage)?
            .with_faults(self.faulty_pipe());
        Ok(MeshConfig {
            seed: self.seed,
            ..config
        })
    }

    fn describe_faults(&self) -> String {
        let pct = |p: f64| format!("{}%", p * 100.0);
        let dirs = match self.direction {
            _ if self.mesh.is_some() => "on every link",
            Direction::Both => "both ways",
            Direction::ToServer => "towards the server",
            Direction::ToClient => "towards the clients",
        };
        format!(
            "faults {dirs}: loss {}, corrupt {}, dup {}, reorder {} (gap {}, hold {}), delay {}, jitter {}; seed {}",
            pct(self.loss),
            pct(self.corrupt),
            pct(self.dup),
            pct(self.reorder),
            self.reorder_gap,
            format_duration(self.reorder_hold),
            format_duration(self.delay),
            format_duration(self.jitter),
            self.seed
        )
    }
}

fn reason_text(reason: StopReason) -> String {
    match reason {
        StopReason::Signal(s) if s == libc::SIGINT => "SIGINT".into(),
        StopReason::Signal(s) if s == libc::SIGTERM => "SIGTERM".into(),
        StopReason::Signal(s) => format!("signal {s}"),
        StopReason::Requested => "stopped".into(),
        StopReason::Duration => "duration reached".into(),
        StopReason::Packets => "packet limit reached".into(),
    }
}

fn event_json(event: &ProxyEvent<'_>) -> serde_json::Value {
    let addr = |a: Option<std::net::SocketAddr>| a.map(udp_url);
    match event {
        ProxyEvent::Report(stats) => {
            let mut v = serde_json::to_value(stats).unwrap_or_default();
            v["event"] = json!("report");
            v
        }
        ProxyEvent::SessionOpened {
            id,
            client,
            upstream_local,
        } => json!({"event": "session_opened", "session": id, "client": addr(*client),
                     "upstream_local": udp_url(*upstream_local)}),
        ProxyEvent::SessionClosed { id, client } => {
            json!({"event": "session_closed", "session": id, "client": addr(*client), "why": "idle"})
        }
        ProxyEvent::SessionFailed { client, error } => {
            json!({"event": "session_failed", "client": udp_url(*client), "error": error})
        }
        ProxyEvent::UpstreamRefused { id } => {
            json!({"event": "upstream_refused", "session": id})
        }
    }
}

fn event_text(event: &ProxyEvent<'_>, upstream: &str) -> Option<String> {
    let addr = |a: &Option<std::net::SocketAddr>| a.map_or("(none yet)".into(), udp_url);
    Some(match event {
        ProxyEvent::Report(_) => return None,
        ProxyEvent::SessionOpened {
            id,
            client,
            upstream_local,
        } => format!(
            "session {id}: client {} via {}",
            addr(client),
            udp_url(*upstream_local)
        ),
        ProxyEvent::SessionClosed { id, client } => {
            format!(
                "session {id}: client {} closed after idle timeout",
                addr(client)
            )
        }
        ProxyEvent::SessionFailed { client, error } => {
            format!("no session for client {}: {error}", udp_url(*client))
        }
        ProxyEvent::UpstreamRefused { id } => {
            format!("session {id}: {upstream} answered port unreachable: is the server running?")
        }
    })
}

fn status_line(s: &ProxyStats) -> String {
    let dir = |d: &DirectionStats| {
        format!(
            "{} in, {} out ({} lost, {} dup, {} reordered)",
            d.pipe.received,
            d.sent(),
            d.pipe.dropped,
            d.pipe.duplicated,
            d.pipe.reordered
        )
    };
    format!(
        "{:>8.1} s  to server {}  to client {}  sessions {}",
        s.elapsed_ms as f64 / 1000.0,
        dir(&s.to_server),
        dir(&s.to_client),
        s.sessions.active
    )
}

fn print_summary(s: &ProxyStats, reason: StopReason) {
    println!(
        "myri proxy: {} -> {} stopped after {:.3} s ({})",
        s.listen,
        s.upstream,
        s.elapsed_ms as f64 / 1000.0,
        reason_text(reason)
    );
    let (a, b) = (&s.to_server, &s.to_client);
    println!("                          to server    to client");
    let row = |name: &str, x: u64, y: u64| println!("  {name:<22}{x:>11}  {y:>11}");
    row("received", a.pipe.received, b.pipe.received);
    row(
        "received bytes",
        a.pipe.received_bytes,
        b.pipe.received_bytes,
    );
    row("dropped (loss)", a.pipe.dropped, b.pipe.dropped);
    row("dropped (queue full)", a.pipe.queue_full, b.pipe.queue_full);
    row("corrupted", a.pipe.corrupted, b.pipe.corrupted);
    row("duplicated", a.pipe.duplicated, b.pipe.duplicated);
    row("delayed", a.pipe.delayed, b.pipe.delayed);
    row(
        "held for reordering",
        a.pipe.reorder_held,
        b.pipe.reorder_held,
    );
    row("  overtaken", a.pipe.reordered, b.pipe.reordered);
    row(
        "  released unmatched",
        a.pipe.reorder_unmatched,
        b.pipe.reorder_unmatched,
    );
    row("dropped by the kernel", a.kernel_drops, b.kernel_drops);
    row("forwarded", a.pipe.forwarded, b.pipe.forwarded);
    row("send failed", a.send_failed, b.send_failed);
    row("sent", a.sent(), b.sent());
    row(
        "unsent at exit",
        a.pipe.unsent_at_exit,
        b.pipe.unsent_at_exit,
    );
    let c = &s.sessions;
    println!(
        "  sessions: {} opened, {} closed idle, {} active; datagrams refused: {} not the client, {} over max clients, {} no socket, {} before any client",
        c.opened,
        c.closed_idle,
        c.active,
        c.refused_not_client,
        c.refused_full,
        c.refused_no_socket,
        c.refused_no_client
    );
    println!(
        "  server answered port unreachable: {} times; seed {}",
        s.upstream_refused, s.seed
    );
}

/// Runs `myri proxy`.
pub fn run(args: &ProxyArgs) -> Result<(), Failure> {
    if let Some(n) = args.mesh {
        return run_mesh(args, usize::try_from(n).unwrap_or(usize::MAX));
    }
    let config = args.config()?;
    let mut proxy = UdpProxy::bind(config).map_err(|e| Failure::usage(e.to_string()))?;
    proxy
        .stop_on_signals()
        .map_err(|e| Failure::usage(e.to_string()))?;
    let start = proxy.stats();
    if args.json {
        print_json(&json!({
            "event": "listening",
            "listen": start.listen,
            "to": start.upstream,
            "upstream_bind": proxy.fixed_upstream_addr().map(udp_url),
            "loss": args.loss, "corrupt": args.corrupt, "dup": args.dup, "reorder": args.reorder,
            "reorder_gap": args.reorder_gap, "reorder_hold": format_duration(args.reorder_hold),
            "delay": format_duration(args.delay), "jitter": format_duration(args.jitter),
            "direction": format!("{:?}", args.direction).to_lowercase(),
            "seed": args.seed,
        }));
    } else {
        eprintln!(
            "myri proxy: {} -> {}{}; {}. Ctrl-C stops and prints the counters.",
            start.listen,
            start.upstream,
            proxy
                .fixed_upstream_addr()
                .map_or(String::new(), |a| format!(" from {}", udp_url(a))),
            args.describe_faults()
        );
    }
    let live = !args.json && std::io::stderr().is_terminal();
    let report_every = (args.json || live).then_some(args.interval);
    let limits = Limits {
        duration: args.duration,
        packets: args.packets,
    };
    let upstream = start.upstream.clone();
    let result = proxy.run(limits, report_every, |event| {
        if args.json {
            print_json(&event_json(&event));
        } else if let ProxyEvent::Report(stats) = event {
            if live {
                eprint!("\r{}", status_line(stats));
                let _ = std::io::stderr().flush();
            }
        } else if let Some(line) = event_text(&event, &upstream) {
            if live {
                eprint!("\r\x1b[K");
            }
            eprintln!("myri proxy: {line}");
        }
    });
    finish(result, live, args.json, || proxy.stats(), print_summary)
}

fn mesh_status_line(s: &MeshStats) -> String {
    let t = &s.total;
    format!(
        "{:>8.1} s  {} links: {} in, {} out ({} lost, {} dup, {} reordered)",
        s.elapsed_ms as f64 / 1000.0,
        s.links.len(),
        t.pipe.received,
        t.sent(),
        t.pipe.dropped,
        t.pipe.duplicated,
        t.pipe.reordered
    )
}

fn print_mesh_summary(s: &MeshStats, reason: StopReason) {
    println!(
        "myri proxy: mesh of {} peers stopped after {:.3} s ({})",
        s.peers.len(),
        s.elapsed_ms as f64 / 1000.0,
        reason_text(reason)
    );
    for (i, p) in s.peers.iter().enumerate() {
        println!(
            "  peer {i}: {} as {}, dropped by the kernel {}",
            p.real, p.shadow, p.kernel_drops
        );
    }
    println!(
        "  link       received    dropped  duplicated  reordered  forwarded  send_failed  unsent"
    );
    let row = |name: &str, c: &myri_proxy::PipeCounters, failed: u64| {
        println!(
            "  {name:<8}{:>11}{:>11}{:>12}{:>11}{:>11}{:>13}{:>8}",
            c.received, c.dropped, c.duplicated, c.reordered, c.forwarded, failed, c.unsent_at_exit
        );
    };
    for l in &s.links {
        row(&format!("{}->{}", l.from, l.to), &l.pipe, l.send_failed);
    }
    row("total", &s.total.pipe, s.total.send_failed);
    println!(
        "  corrupted {}, delayed {}, held for reordering {} ({} released unmatched), dropped by the kernel {}, from unknown addresses {}; seed {}",
        s.total.pipe.corrupted,
        s.total.pipe.delayed,
        s.total.pipe.reorder_held,
        s.total.pipe.reorder_unmatched,
        s.total.kernel_drops,
        s.refused_unknown,
        s.seed
    );
}

/// Runs `myri proxy --mesh N`.
fn run_mesh(args: &ProxyArgs, n: usize) -> Result<(), Failure> {
    let config = args.mesh_config(n)?;
    let usage = |e: myri_proxy::ProxyError| Failure::usage(e.to_string());
    let mut proxy = MeshProxy::bind(config).map_err(usage)?;
    proxy.stop_on_signals().map_err(usage)?;
    let start = proxy.stats();
    if args.json {
        print_json(&json!({
            "event": "listening",
            "mesh": start.peers,
            "loss": args.loss, "corrupt": args.corrupt, "dup": args.dup, "reorder": args.reorder,
            "reorder_gap": args.reorder_gap, "reorder_hold": format_duration(args.reorder_hold),
            "delay": format_duration(args.delay), "jitter": format_duration(args.jitter),
            "seed": args.seed,
        }));
    } else {
        let peers: Vec<String> = start
            .peers
            .iter()
            .map(|p| format!("{} as {}", p.real, p.shadow))
            .collect();
        eprintln!(
            "myri proxy: mesh of {n} peers ({}); {}. Ctrl-C stops and prints the counters.",
            peers.join(", "),
            args.describe_faults()
        );
    }
    let live = !args.json && std::io::stderr().is_terminal();
    let report_every = (args.json || live).then_some(args.interval);
    let limits = Limits {
        duration: args.duration,
        packets: args.packets,
    };
    let result = proxy.run(limits, report_every, |stats| {
        if args.json {
            let mut v = serde_json::to_value(stats).unwrap_or_default();
            v["event"] = json!("report");
            print_json(&v);
        } else if live {
            eprint!("\r{}", mesh_status_line(stats));
            let _ = std::io::stderr().flush();
        }
    });
    finish(
        result,
        live,
        args.json,
        || proxy.stats(),
        print_mesh_summary,
    )
}

/// The end of a run, plain or mesh: why it stopped, then its final counters (a JSON line
/// with `--json`, else the summary).
fn finish<S: serde::Serialize>(
    result: Result<StopReason, myri_proxy::ProxyError>,
    live: bool,
    json: bool,
    stats: impl FnOnce() -> S,
    summary: impl FnOnce(&S, StopReason),
) -> Result<(), Failure> {
    if live {
        eprintln!();
    }
    let reason = result.map_err(|e| {
        if e.is_setup() {
            Failure::usage(e.to_string())
        } else {
            Failure::check(e.to_string())
        }
    })?;
    let stats = stats();
    if json {
        let mut v = serde_json::to_value(&stats).unwrap_or_default();
        v["event"] = json!("final");
        v["reason"] = json!(reason_text(reason));
        print_json(&v);
    } else {
        summary(&stats, reason);
    }
    Ok(())
}
