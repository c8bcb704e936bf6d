//! `myri pingpong --transport URL` and `myri stream --transport URL`: the benchmarks
//! against a `myri serve` in another process or on another machine, over `udp://` or
//! `shm://`, with the plain reference of the transport measured in the same run.

use crate::Failure;
use crate::opts::print_json;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use myri_netbench::measure::{self, Baselines, StreamSpec};
use myri_netbench::wire::{SessionCounters, SizeSpec};
use myri_netbench::{Client, ClientConfig, ClientError, Sample};
use myri_proxy::parse_duration;
use myri_transport::{Scheme, Url, UrlError};
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::time::Duration;

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// A period: a duration longer than zero.
fn period(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        d if d.is_zero() => Err("must be longer than 0".into()),
        d => Ok(d),
    }
}

/// Where the benchmark runs (every benchmark takes these).
#[derive(Args, Debug, Clone)]
pub struct NetArgs {
    /// Where the peer is: sim:// runs the two simulated boards in this process (the
    /// default); udp://HOST:PORT or shm://NAME runs against `myri serve` at that URL, in
    /// another process or on another machine, reliable (RPP) unless --raw or
    /// `?reliable=0`.
    #[arg(long, default_value = "sim://", value_name = "URL")]
    pub transport: String,
    /// udp:// only: the local address to bind, udp://HOST:PORT (default: any free port on
    /// the unspecified address of the server's family).
    #[arg(long, value_name = "URL")]
    pub bind: Option<String>,
    /// udp:// and shm:// only: how long to wait for the server's first answer.
    #[arg(long, default_value = "5s", value_name = "D", value_parser = duration)]
    pub connect_timeout: Duration,
}

impl NetArgs {
    /// Whether the run goes to a server (not the in-process simulated boards).
    pub fn is_network(&self) -> bool {
        !self
            .transport
            .trim()
            .to_ascii_lowercase()
            .starts_with("sim:")
    }
}

/// Options of `myri pingpong --transport` runs.
#[derive(Args, Debug, Clone)]
pub struct NetPingPongArgs {
    /// udp:// and shm:// only: rounds per size; the exchanges of a size are split among
    /// them, and with --baseline each transport round is paired with a reference round
    /// (A B, then B A). The median round is reported.
    #[arg(long = "interleave", default_value_t = 10, value_name = "ROUNDS")]
    pub rounds: u32,
}

/// Options of `myri stream --transport` runs.
#[derive(Args, Debug, Clone)]
pub struct NetStreamArgs {
    /// udp:// and shm:// only: the server checks every byte of every message (each
    /// carries a pattern drawn from --seed and its sequence number), besides order and
    /// length.
    #[arg(long)]
    pub verify: bool,
    /// udp:// and shm:// only: messages of random sizes up to MAX bytes (drawn from
    /// --seed: log-uniform, every 1000th exactly MAX) instead of --size.
    #[arg(long, value_name = "MAX")]
    pub random_sizes: Option<usize>,
    /// udp:// and shm:// only, reliable: sample RPP's state toward the server every D
    /// during each stream (window, round trip, bytes in flight, losses, acknowledged
    /// bytes), as `iperf3 -i` does. The samples are printed when the stream ends
    /// (printing during it would take the sender's time): "interval" lines with --json,
    /// a table otherwise.
    #[arg(long, value_name = "D", value_parser = period)]
    pub interval: Option<Duration>,
}

impl NetStreamArgs {
    /// The first of these options given, by name: they need a server.
    pub fn network_only(&self) -> Option<&'static str> {
        if self.verify {
            Some("--verify")
        } else if self.random_sizes.is_some() {
            Some("--random-sizes")
        } else if self.interval.is_some() {
            Some("--interval")
        } else {
            None
        }
    }
}

/// What the shared benchmark options say, for a network run.
pub struct Run<'a> {
    /// Where.
    pub net: &'a NetArgs,
    /// --raw.
    pub raw: bool,
    /// --baseline.
    pub baseline: bool,
    /// --json.
    pub json: bool,
    /// Raw mode: how long an exchange waits.
    pub timeout: Duration,
    /// --seed.
    pub seed: u64,
    /// Whether simulated-fabric options (faults, mode) were given: they do not apply.
    pub sim_options: bool,
}

impl Run<'_> {
    fn connect(&self) -> Result<Client, Failure> {
        if self.sim_options {
            return Err(Failure::usage(
                "--loss, --corrupt, --dup and --reorder apply to sim:// only; put `myri proxy` between client and server to inject faults on udp://",
            ));
        }
        let url: Url = self.net.transport.parse().map_err(|e: UrlError| {
            Failure::usage(format!("--transport {}: {e}", self.net.transport))
        })?;
        let reliable = match url.params.reliable {
            Some(true) if self.raw => {
                return Err(Failure::usage("--raw contradicts the url's reliable=1"));
            }
            Some(r) => r,
            None => !self.raw,
        };
        if url.scheme() == Scheme::Sim {
            return Err(Failure::usage("sim:// runs in process"));
        }
        let config = ClientConfig {
            reliable,
            bind: self.net.bind.clone(),
            connect_timeout: self.net.connect_timeout,
            exchange_timeout: self.timeout,
            ..ClientConfig::default()
        };
        let client = Client::connect(&self.net.transport, config).map_err(client_failure)?;
        if self.json {
            print_json(&json!({
                "event": "connected", "transport": client.server_url(), "local": client.local_url(),
                "reliable": client.is_reliable(), "incarnation": client.incarnation(),
                "server_incarnation": client.server_incarnation(), "references": client.references(),
            }));
        }
        Ok(client)
    }

    fn baselines(&self, client: &Client, tcp: bool) -> Result<Option<Baselines>, Failure> {
        if !self.baseline {
            return Ok(None);
        }
        Baselines::connect(client, self.timeout, tcp)
            .map(Some)
            .map_err(Failure::usage)
    }
}

/// The failure for a client error: 3 for a peer that failed, 2 for set-up.
fn client_failure(e: ClientError) -> Failure {
    let code = match e {
        ClientError::Refused(_) => crate::EXIT_USAGE,
        _ if e.is_peer_failure() => crate::EXIT_PEER_FAILED,
        _ => crate::EXIT_USAGE,
    };
    Failure {
        message: e.to_string(),
        code,
    }
}

/// Prints a peer failure as a JSON line (the message goes to stderr as for every
/// failure), so that scripts reading stdout see it too.
fn report_failure(json: bool, e: &ClientError) {
    if !json {
        return;
    }
    let v = match e {
        ClientError::PeerFailed { why, unacked } => {
            json!({"event": "peer_failed", "why": why, "unacked": unacked})
        }
        ClientError::PeerRestarted { old, new, unacked } => {
            json!({"event": "peer_restarted", "old_incarnation": old, "new_incarnation": new, "unacked": unacked})
        }
        ClientError::PeerClosed { unacked } => json!({"event": "peer_closed", "unacked": unacked}),
        other => json!({"event": "error", "why": other.to_string()}),
    };
    print_json(&v);
}

fn progress(json: bool, len: u64, what: &str) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() || len < 2 {
        return None;
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} rounds, {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    Some(bar)
}

fn mode(client: &Client) -> &'static str {
    if client.is_reliable() {
        "reliable"
    } else {
        "raw"
    }
}

/// RPP's counters and state toward the server, as the session line and the interval
/// lines print them.
fn rpp_json(r: &myri_rpp::Stats, payload: Option<usize>) -> Value {
    json!({
        "packets_sent": r.packets_sent, "data_sent": r.data_sent,
        "retransmitted": r.retransmitted, "acks_sent": r.acks_sent,
        "packets_received": r.packets_received, "dup_packets": r.dup_packets,
        "lost": r.lost, "rto_expirations": r.rto_expirations,
        "messages_sent": r.messages_sent, "messages_delivered": r.messages_delivered,
        "srtt_us": r.srtt.as_secs_f64() * 1e6, "rttvar_us": r.rttvar.as_secs_f64() * 1e6,
        "rto_us": r.rto.as_secs_f64() * 1e6,
        "spurious_retransmits": r.spurious_retransmits, "credit_stalls": r.credit_stalls,
        "peer_credit": r.peer_credit, "beyond_window": r.beyond_window,
        "cwnd": r.cwnd, "ack_aggregation": r.ack_aggregation,
        "bytes_in_flight": r.bytes_in_flight, "ssthresh": r.ssthresh,
        "pacing_rate": r.pacing_rate,
        "controller": r.controller, "bandwidth_estimate": r.bandwidth_estimate,
        "congestion_events": r.congestion_events,
        "persistent_congestion": r.persistent_congestion,
        "congestion_undos": r.congestion_undos, "spurious_timeouts": r.spurious_timeouts,
        "slow_start_delay_exits": r.slow_start_delay_exits,
        "cwnd_limited": r.cwnd_limited, "app_limited": r.app_limited,
        "reordering_steps": r.reordering_steps,
        "loss_packet_threshold": r.loss_packet_threshold,
        "loss_time_threshold_eighths": r.loss_time_threshold_eighths,
        "paced": r.paced, "batches": r.batches, "batch_holds": r.batch_holds,
        "local_congestion": r.local_congestion,
        "packet_payload": payload,
    })
}

fn session_json(client: &Client, counters: &SessionCounters) -> Value {
    let s = client.stats();
    let rpp = client
        .rpp_stats()
        .map(|r| rpp_json(&r, client.packet_payload()));
    json!({
        "event": "session", "transport": client.server_url(), "local": client.local_url(),
        "reliable": client.is_reliable(), "incarnation": client.incarnation(),
        "server_incarnation": client.server_incarnation(), "server": counters,
        "endpoint": {
            "sends": s.sends, "recvs": s.recvs, "registered_sends": s.registered_sends,
            "heap_sends": s.heap_sends, "inline_sends": s.inline_sends, "copied_sends": s.copied_sends,
            "transmit_copies": s.transmit_copies, "registered_recvs": s.registered_recvs,
            "heap_recvs": s.heap_recvs, "would_block": s.would_block,
            "rpp_dropped": s.rpp_dropped, "io_errors": s.io_errors,
            "gso_sends": s.gso_sends, "gso_segments": s.gso_segments,
            "gso_fallbacks": s.gso_fallbacks, "gro_buffers": s.gro_buffers,
            "local_drops": s.local_drops, "peer_sockets": s.peer_sockets,
            "gro_segments": s.gro_segments,
        },
        "rpp": rpp,
    })
}

/// Ends the session and prints its summary line (JSON).
fn finish(client: Client, json: bool) -> Result<SessionCounters, Failure> {
    let mut line = json.then(|| session_json(&client, &SessionCounters::default()));
    let counters = client.bye().map_err(|e| {
        report_failure(json, &e);
        client_failure(e)
    })?;
    if let Some(v) = line.as_mut() {
        v["server"] = json!(counters);
        print_json(v);
    }
    Ok(counters)
}

/// Runs `myri pingpong --transport URL`.
pub fn pingpong(
    run: &Run<'_>,
    sizes: &[usize],
    iters: u64,
    args: &NetPingPongArgs,
) -> Result<(), Failure> {
    let mut client = run.connect()?;
    let max = client.max_message_size();
    for &size in sizes {
        if !(8..=max).contains(&size) {
            return Err(Failure::usage(format!(
                "size {size} is not 8..={max} (a {} {} message)",
                mode(&client),
                client.server_url()
            )));
        }
    }
    let mut baselines = run.baselines(&client, false)?;
    let reference = baselines.as_ref().map(Baselines::pingpong_name);
    if !run.json {
        println!(
            "ping-pong over {} ({}), server incarnation {}: {} exchanges per size in {} rounds{}",
            client.server_url(),
            mode(&client),
            client.server_incarnation(),
            iters,
            args.rounds.max(1),
            reference.map_or(String::new(), |r| format!(", interleaved with a bare {r}"))
        );
        println!(
            "{:>8} {:>10} {:>11} {:>9} {:>15} {:>7}",
            "size", "rtt us", "one-way us", "timeouts", "baseline 1w us", "ratio"
        );
    }
    let bar = progress(
        run.json,
        sizes.len() as u64 * u64::from(args.rounds.max(1)),
        "ping-pong",
    );
    let mut timeouts_reliable = 0;
    for &size in sizes {
        let f = measure::pingpong(
            &mut client,
            baselines.as_mut(),
            size,
            iters,
            args.rounds,
            || {
                if let Some(b) = &bar {
                    b.inc(1);
                }
            },
        )
        .map_err(|e| {
            report_failure(run.json, &e);
            client_failure(e)
        })?;
        if client.is_reliable() {
            timeouts_reliable += f.timeouts;
        }
        let base_one_way = f.reference_rtt_us.map(|r| r / 2.0);
        if run.json {
            print_json(&json!({
                "test": "pingpong", "transport": client.server_url(), "reliable": client.is_reliable(),
                "size": size, "iters": f.exchanges, "rounds": args.rounds.max(1),
                "rtt_us": f.rtt_us, "one_way_us": f.rtt_us / 2.0, "timeouts": f.timeouts,
                "baseline": reference, "baseline_one_way_us": base_one_way,
                "baseline_timeouts": baselines.as_ref().map(|_| f.reference_timeouts),
                "ratio": f.ratio,
            }));
        } else {
            let line = format!(
                "{size:>8} {:>10.2} {:>11.2} {:>9} {:>15} {:>7}",
                f.rtt_us,
                f.rtt_us / 2.0,
                f.timeouts,
                base_one_way.map_or("-".into(), |b| format!("{b:.2}")),
                f.ratio.map_or("-".into(), |r| format!("{r:.2}x"))
            );
            match &bar {
                Some(b) => b.println(line),
                None => println!("{line}"),
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let counters = finish(client, run.json)?;
    if counters.errors() > 0 || timeouts_reliable > 0 {
        return Err(Failure::check(format!(
            "the server found {} errors; {} reliable exchanges timed out",
            counters.errors(),
            timeouts_reliable
        )));
    }
    Ok(())
}

/// Prints the samples of `myri stream --interval`: one "interval" JSON line each, or a
/// table. Goodput is over the time since the sample before (in the same round).
fn print_samples(samples: &[Sample], payload: Option<usize>, json: bool) {
    if samples.is_empty() {
        return;
    }
    if !json {
        println!(
            "{:>5} {:>8} {:>9} {:>9} {:>10} {:>9} {:>7} {:>6}",
            "round", "t (s)", "MB/s", "srtt (ms)", "cwnd (KB)", "in flight", "resent", "events"
        );
    }
    let mut before: Option<&Sample> = None;
    // Rounds are numbered as the "round" events number them (the client's own count
    // includes a --baseline run's warm-up, which is not sampled).
    let mut round = 0u32;
    for s in samples {
        let prev = before.filter(|b| b.round == s.round);
        if prev.is_none() {
            round += 1;
        }
        let (bytes, secs) = prev.map_or((s.acked_bytes, s.at.as_secs_f64()), |b| {
            (s.acked_bytes - b.acked_bytes, (s.at - b.at).as_secs_f64())
        });
        let mb_per_s = if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        };
        if json {
            print_json(&json!({
                "event": "interval", "round": round, "t_s": s.at.as_secs_f64(),
                "acked_messages": s.acked_messages, "acked_bytes": s.acked_bytes,
                "mb_per_s": mb_per_s, "rpp": rpp_json(&s.rpp, payload),
            }));
        } else {
            println!(
                "{:>5} {:>8.3} {:>9.1} {:>9.2} {:>10.1} {:>9.1} {:>7} {:>6}",
                round,
                s.at.as_secs_f64(),
                mb_per_s,
                s.rpp.srtt.as_secs_f64() * 1e3,
                s.rpp.cwnd as f64 / 1e3,
                s.rpp.bytes_in_flight as f64 / 1e3,
                s.rpp.retransmitted,
                s.rpp.congestion_events
            );
        }
        before = Some(s);
    }
}

/// Runs `myri stream --transport URL`.
pub fn stream(
    run: &Run<'_>,
    size: usize,
    count: u64,
    rounds: u32,
    args: &NetStreamArgs,
) -> Result<(), Failure> {
    let sizes = match args.random_sizes {
        Some(max) => SizeSpec::Random { max },
        None => SizeSpec::Fixed(size),
    };
    if sizes.max() < 8 {
        return Err(Failure::usage(
            "sizes start at 8 bytes (the message header)",
        ));
    }
    if run.baseline && args.random_sizes.is_some() {
        return Err(Failure::usage(
            "--baseline compares fixed sizes: use --size, not --random-sizes",
        ));
    }
    if args.interval.is_some() && run.raw {
        return Err(Failure::usage(
            "--interval samples RPP's state: it needs a reliable stream (no --raw)",
        ));
    }
    let mut client = run.connect()?;
    if args.interval.is_some() && !client.is_reliable() {
        return Err(Failure::usage(
            "--interval samples RPP's state: it needs a reliable stream (not reliable=0)",
        ));
    }
    client.set_sample_every(args.interval);
    let tcp = client.server_addr().is_some();
    let mut baselines = run.baselines(&client, tcp)?;
    let spec = StreamSpec {
        sizes,
        count,
        seed: run.seed,
        verify: args.verify,
        rounds,
    };
    let what = match sizes {
        SizeSpec::Fixed(n) => format!("{count} x {n} bytes"),
        SizeSpec::Random { max } => format!("{count} messages of random sizes up to {max} bytes"),
    };
    let bar = progress(run.json, u64::from(rounds.max(1)), "stream");
    let json = run.json;
    let mut round = 0u32;
    let f = measure::stream(&mut client, baselines.as_mut(), spec, || {
        round += 1;
        if let Some(b) = &bar {
            b.inc(1);
        }
        if json {
            print_json(&json!({"event": "round", "round": round}));
        }
    })
    .map_err(|e| {
        report_failure(run.json, &e);
        client_failure(e)
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    print_samples(&client.take_samples(), client.packet_payload(), run.json);
    let ratio = |r: Option<f64>| r.filter(|&x| x > 0.0).map(|x| f.mb_per_s / x);
    let reference = baselines.as_ref().map(Baselines::pingpong_name);
    if run.json {
        print_json(&json!({
            "test": "stream", "transport": client.server_url(), "reliable": client.is_reliable(),
            "sizes": sizes, "count": count, "rounds": rounds.max(1), "verify": args.verify,
            "sent": f.sent(), "delivered": f.received(), "bytes": f.bytes(), "errors": f.errors(),
            "mb_per_s": f.mb_per_s,
            "baseline": reference, "baseline_mb_per_s": f.reference_mb_per_s,
            "baseline_lost": baselines.as_ref().map(|_| f.reference_lost),
            "ratio": ratio(f.reference_mb_per_s),
            "tcp_mb_per_s": f.tcp_mb_per_s, "ratio_tcp": ratio(f.tcp_mb_per_s),
        }));
    } else {
        println!(
            "stream over {} ({}), server incarnation {}: {what}, {} rounds{}",
            client.server_url(),
            mode(&client),
            client.server_incarnation(),
            rounds.max(1),
            if args.verify {
                ", every byte checked"
            } else {
                ""
            }
        );
        println!("  {:<16}{:>9.1} MB/s (median)", "goodput", f.mb_per_s);
        if let (Some(r), Some(b)) = (reference, f.reference_mb_per_s) {
            println!(
                "  {:<16}{b:>9.1} MB/s, transport/reference {:.2} ({} datagrams or records lost)",
                format!("bare {r}"),
                ratio(Some(b)).unwrap_or(0.0),
                f.reference_lost
            );
        }
        if let Some(t) = f.tcp_mb_per_s {
            println!(
                "  {:<16}{t:>9.1} MB/s, transport/tcp {:.2}",
                "tcp",
                ratio(Some(t)).unwrap_or(0.0)
            );
        }
        println!(
            "  {:<16}sent {} received {} ({} bytes), {} errors",
            "messages",
            f.sent(),
            f.received(),
            f.bytes(),
            f.errors()
        );
    }
    let reliable = client.is_reliable();
    let counters = finish(client, run.json)?;
    let lost = f.sent() - f.received().min(f.sent());
    if counters.errors() > 0 || f.errors() > 0 || (reliable && lost > 0) {
        return Err(Failure::check(format!(
            "the server found {} errors and missed {lost} of {} messages",
            counters.errors().max(f.errors()),
            f.sent()
        )));
    }
    Ok(())
}
