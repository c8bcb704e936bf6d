//! `myri serve` and `myri pingpong`/`myri stream --transport` in separate processes, as a
//! user runs them: exactly-once in-order delivery across processes (through a lossy
//! `myri proxy` for UDP), sequential clients, the references, exit codes.

mod cross_process_support;

use cross_process_support::{Proc, last, run, serve, unique};
use serde_json::Value;

/// Ten thousand messages of random sizes up to a mebibyte, every byte checked by the
/// server, in one round.
fn ten_thousand(transport: &str) -> Vec<&str> {
    let mut v = vec![
        "stream",
        "--transport",
        transport,
        "--random-sizes",
        "1048576",
        "--count",
        "10000",
        "--rounds",
        "1",
        "--verify",
        "--seed",
        "5",
        "--json",
    ];
    v.shrink_to_fit();
    v
}

#[track_caller]
fn check_exact(lines: &[Value], server_end: &Value) {
    let s = last(lines, "test", "stream");
    assert_eq!(
        (&s["sent"], &s["delivered"], &s["errors"]),
        (&Value::from(10_000), &Value::from(10_000), &Value::from(0)),
        "{s}"
    );
    let session = last(lines, "event", "session");
    let server = &session["server"];
    assert_eq!(server["received"], 10_000, "{session}");
    for k in ["out_of_order", "bad_length", "bad_content", "malformed"] {
        assert_eq!(server[k], 0, "{k}: {session}");
    }
    assert_eq!(server["bytes"], s["bytes"]);
    assert!(
        server["bytes"].as_u64().unwrap() > 200 << 20,
        "random sizes to 1 MiB average tens of KiB: {session}"
    );
    let counters = &server_end["counters"];
    assert_eq!(counters, server, "the server's own report agrees");
}

#[test]
fn udp_reliable_ten_thousand_messages_through_a_lossy_proxy_arrive_exactly_once_in_order() {
    let (mut server, listening) = serve("udp://127.0.0.1:0", &["--no-baseline"]);
    let url = listening["url"].as_str().unwrap().to_owned();
    let mut proxy = Proc::spawn(&[
        "proxy",
        "--listen",
        "udp://127.0.0.1:0",
        "--to",
        &url,
        "--loss",
        "0.05",
        "--dup",
        "0.01",
        "--reorder",
        "0.05",
        "--seed",
        "11",
        "--interval",
        "0",
        "--json",
    ]);
    let listen = proxy.wait_event("listening")["listen"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, lines, stderr) = run(&ten_thousand(&listen));
    assert!(status.success(), "{status}: {stderr}\n{lines:#?}");
    let ended = server.wait_event("session_ended");
    check_exact(&lines, &ended);
    let rpp = &last(&lines, "event", "session")["rpp"];
    assert!(
        rpp["retransmitted"].as_u64().unwrap() > 0,
        "the proxy's losses were repaired: {rpp}"
    );
    proxy.signal(libc::SIGTERM);
    let (pstatus, plines, _) = proxy.wait_exit();
    assert!(pstatus.success());
    let f = last(&plines, "event", "final");
    let to_server = &f["to_server"];
    for fault in ["dropped", "duplicated", "reordered"] {
        assert!(
            to_server[fault].as_u64().unwrap_or(0) > 0,
            "the proxy injected {fault}: {f}"
        );
    }
    server.signal(libc::SIGTERM);
    let (sstatus, slines, _) = server.wait_exit();
    assert!(sstatus.success());
    let totals = &last(&slines, "event", "final")["totals"];
    assert_eq!(totals["stray"], 0, "{totals}");
}

#[test]
fn shm_reliable_ten_thousand_messages_arrive_exactly_once_in_order() {
    let name = unique("tenk");
    let url = format!("shm://{name}");
    let (mut server, _) = serve(&url, &["--no-baseline"]);
    let (status, lines, stderr) = run(&ten_thousand(&url));
    assert!(status.success(), "{status}: {stderr}\n{lines:#?}");
    let ended = server.wait_event("session_ended");
    check_exact(&lines, &ended);
    server.signal(libc::SIGINT);
    let (sstatus, slines, _) = server.wait_exit();
    assert!(sstatus.success());
    assert_eq!(last(&slines, "event", "final")["reason"], "SIGINT");
    assert!(
        !myri_transport::shm_region_path(&name).exists(),
        "the last one out removes the region"
    );
}

#[test]
fn a_server_takes_clients_one_after_another_in_both_modes_and_reports_each() {
    for (mode, raw) in [("reliable", &[][..]), ("raw", &["--raw"][..])] {
        for scheme in ["udp", "shm"] {
            let url = match scheme {
                "udp" => "udp://127.0.0.1:0".to_owned(),
                _ => format!("shm://{}", unique(&format!("seq-{mode}"))),
            };
            let (mut server, listening) = serve(&url, raw);
            assert_eq!(listening["reliable"], mode == "reliable");
            let url = listening["url"].as_str().unwrap().to_owned();
            let mut sessions = Vec::new();
            for client in 0..3 {
                let mut args: Vec<&str> = if client == 1 {
                    vec!["stream", "--transport", &url, "--size", "4000"]
                } else {
                    vec!["pingpong", "--transport", &url, "--sizes", "8,1000"]
                };
                args.extend_from_slice(
                    &["--count", "300", "--rounds", "2", "--json"]
                        [if client == 1 { 0..5 } else { 4..5 }],
                );
                if client != 1 {
                    args.extend_from_slice(&["--iters", "200"]);
                }
                args.extend_from_slice(raw);
                let (status, lines, stderr) = run(&args);
                assert!(
                    status.success(),
                    "{mode} {scheme} client {client}: {stderr}"
                );
                let connected = last(&lines, "event", "connected");
                assert_eq!(connected["reliable"], mode == "reliable");
                assert_eq!(connected["server_incarnation"], listening["incarnation"]);
                let ended = server.wait_event("session_ended");
                sessions.push(ended["session"].clone());
                if client == 1 {
                    let s = last(&lines, "test", "stream");
                    assert_eq!(ended["counters"]["received"], s["delivered"]);
                    if mode == "reliable" {
                        assert_eq!(s["delivered"], 600, "{s}");
                    }
                } else {
                    let echoed = ended["counters"]["echoed"].as_u64().unwrap();
                    let timeouts: u64 = lines
                        .iter()
                        .filter(|l| l["test"] == "pingpong")
                        .map(|l| l["timeouts"].as_u64().unwrap())
                        .sum();
                    assert!(echoed + timeouts >= 400, "{echoed} echoed, {timeouts} lost");
                }
            }
            sessions.dedup();
            assert_eq!(sessions.len(), 3, "a new session each time");
            server.signal(libc::SIGTERM);
            let (status, lines, _) = server.wait_exit();
            assert!(status.success());
            let f = last(&lines, "event", "final");
            assert_eq!(f["reason"], "SIGTERM");
            assert_eq!(f["totals"]["sessions_started"], 3, "{f}");
            assert_eq!(f["totals"]["sessions_ended"], 3, "{f}");
        }
    }
}

/// A short ping-pong and a short 64 KiB stream against the server at `url`, each with
/// its baseline: the last JSON result of each.
fn baselines(url: &str) -> (Value, Value) {
    let mut results = Vec::new();
    for (test, args) in [
        (
            "pingpong",
            ["--sizes", "8", "--iters", "400", "--interleave", "4"],
        ),
        (
            "stream",
            ["--size", "65536", "--count", "40", "--rounds", "2"],
        ),
    ] {
        let mut all = vec![test, "--transport", url];
        all.extend(args);
        all.extend(["--baseline", "--json"]);
        let (status, lines, stderr) = run(&all);
        assert!(status.success(), "{test}: {stderr}");
        results.push(last(&lines, "test", test).clone());
    }
    let s = results.pop().expect("stream");
    let p = results.pop().expect("pingpong");
    (p, s)
}

#[test]
fn baselines_are_measured_in_the_same_run_and_give_ratios() {
    let (udp, listening) = serve("udp://127.0.0.1:0", &[]);
    let url = listening["url"].as_str().unwrap().to_owned();
    let refs = &listening["references"];
    assert!(
        refs["udp_port"].is_u64() && refs["tcp_port"].is_u64(),
        "{refs}"
    );
    let (p, s) = baselines(&url);
    assert_eq!(p["baseline"], "udp socket");
    assert!(p["ratio"].as_f64().unwrap() > 0.0, "{p}");
    assert!(s["tcp_mb_per_s"].as_f64().unwrap() > 0.0, "{s}");
    assert!(s["ratio_tcp"].as_f64().unwrap() > 0.0, "{s}");
    assert!(s["baseline_mb_per_s"].as_f64().unwrap() > 0.0, "{s}");
    udp.signal(libc::SIGTERM);
    let (_, lines, _) = udp.wait_exit();
    let t = &last(&lines, "event", "final")["totals"];
    assert!(t["reference_udp_echoed"].as_u64().unwrap() >= 400, "{t}");
    assert!(
        t["reference_tcp_bytes"].as_u64().unwrap() >= 40 * 65536,
        "{t}"
    );

    let name = unique("base");
    let url = format!("shm://{name}");
    let (shm, listening) = serve(&url, &[]);
    let ring = listening["references"]["shm_ring"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(std::path::Path::new(&ring).exists());
    let (p, s) = baselines(&url);
    assert_eq!(p["baseline"], "shm ring");
    assert!(s["ratio"].as_f64().unwrap() > 0.0, "{s}");
    assert_eq!(s["baseline_lost"], 0, "a ring loses nothing");
    shm.signal(libc::SIGTERM);
    assert!(shm.wait_exit().0.success());
    assert!(
        !std::path::Path::new(&ring).exists(),
        "the reference region is removed"
    );
}

#[test]
fn bad_urls_busy_addresses_and_absent_servers_have_clear_errors_and_exit_codes() {
    let code = |r: &(std::process::ExitStatus, Vec<Value>, String)| r.0.code().unwrap();
    let r = run(&["serve", "udp://no-port"]);
    assert_eq!(code(&r), 2, "{}", r.2);
    assert!(r.2.contains("bad url"), "{}", r.2);
    let r = run(&["serve", "sim://x"]);
    assert_eq!(code(&r), 2);
    assert!(r.2.contains("udp://HOST:PORT or shm://NAME"), "{}", r.2);
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let busy = format!("udp://{}", taken.local_addr().unwrap());
    let r = run(&["serve", &busy]);
    assert_eq!(code(&r), 2);
    assert!(r.2.contains("address in use"), "{}", r.2);
    // Nothing answers on that port (the socket there never replies).
    let r = run(&[
        "pingpong",
        "--transport",
        &busy,
        "--connect-timeout",
        "300ms",
    ]);
    assert_eq!(code(&r), 3, "{}", r.2);
    assert!(r.2.contains("no answer from"), "{}", r.2);
    let r = run(&[
        "pingpong",
        "--transport",
        "udp://127.0.0.1:1?reliable=1",
        "--raw",
    ]);
    assert_eq!(code(&r), 2);
    assert!(r.2.contains("contradicts"), "{}", r.2);
    // A raw client of a reliable server hears nothing it understands.
    let (server, listening) = serve("udp://127.0.0.1:0", &["--no-baseline"]);
    let url = listening["url"].as_str().unwrap().to_owned();
    let r = run(&[
        "pingpong",
        "--transport",
        &url,
        "--raw",
        "--connect-timeout",
        "300ms",
    ]);
    assert_eq!(code(&r), 3, "{}", r.2);
    assert!(r.2.contains("does it run raw"), "{}", r.2);
    let r = run(&["stream", "--transport", &url, "--size", "4"]);
    assert_eq!(code(&r), 2, "{}", r.2);
    let r = run(&["pingpong", "--transport", &url, "--loss", "0.1"]);
    assert_eq!(code(&r), 2, "{}", r.2);
    assert!(r.2.contains("myri proxy"), "{}", r.2);
    // --interval samples RPP: a reliable stream, and a period longer than 0.
    for (extra, says) in [
        (&["--interval", "0s"][..], "longer than 0"),
        (&["--interval", "1s", "--raw"][..], "reliable"),
    ] {
        let mut args = vec!["stream", "--transport", &url];
        args.extend_from_slice(extra);
        let r = run(&args);
        assert_eq!(code(&r), 2, "{extra:?}: {}", r.2);
        assert!(r.2.contains(says), "{extra:?}: {}", r.2);
    }
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit().0.success());
    // A second server on a live server's region is refused.
    let name = unique("busy");
    let (first, _) = serve(&format!("shm://{name}"), &[]);
    let r = run(&["serve", &format!("shm://{name}")]);
    assert_eq!(code(&r), 2, "{}", r.2);
    assert!(r.2.contains("another live server"), "{}", r.2);
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit().0.success());
}

#[test]
fn stream_interval_samples_rpp_s_state_through_each_round() {
    let (server, listening) = serve("udp://127.0.0.1:0", &["--no-baseline"]);
    let url = listening["url"].as_str().unwrap().to_owned();
    let count = 1000;
    let mut args = interval_stream(&url, count, 2, "2ms");
    args.push("--json".into());
    let (status, lines, stderr) = run(&strs(&args));
    assert!(status.success(), "{status}: {stderr}");
    let samples: Vec<&Value> = lines.iter().filter(|l| l["event"] == "interval").collect();
    for round in [1, 2] {
        let r: Vec<&&Value> = samples.iter().filter(|s| s["round"] == round).collect();
        // At least the one after the first message and the one at the round's end.
        assert!(r.len() >= 2, "round {round}: {samples:#?}");
        for w in r.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(b["t_s"].as_f64() >= a["t_s"].as_f64(), "{a}\n{b}");
            assert!(
                b["acked_bytes"].as_u64() >= a["acked_bytes"].as_u64(),
                "{a}\n{b}"
            );
            let sent = |s: &Value| s["rpp"]["data_sent"].as_u64().unwrap();
            assert!(sent(b) >= sent(a), "{a}\n{b}");
        }
        let end = r.last().unwrap();
        let acked = end["acked_bytes"].as_u64().unwrap();
        assert!(acked > 0 && acked <= count * INTERVAL_SIZE, "{end}");
        assert_eq!(acked % INTERVAL_SIZE, 0, "whole messages: {end}");
        assert!(end["rpp"]["srtt_us"].as_f64().unwrap() > 0.0, "{end}");
        assert!(end["rpp"]["cwnd"].as_u64().unwrap() > 0, "{end}");
        assert!(end["mb_per_s"].as_f64().unwrap() >= 0.0, "{end}");
    }
    assert!(
        samples.iter().all(|s| s["round"] == 1 || s["round"] == 2),
        "{samples:#?}"
    );
    // Without --json: a table after the run, before the summary.
    let (status, text) = run_text(&strs(&interval_stream(&url, 200, 1, "5ms")));
    assert!(status.success(), "{text}");
    let header = text.find("srtt (ms)").expect("the table's header");
    assert!(
        header < text.find("goodput").expect("the summary"),
        "{text}"
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit().0.success());
}

/// The message size of [`interval_stream`].
const INTERVAL_SIZE: u64 = 65536;

/// `myri stream` of `count` messages of [`INTERVAL_SIZE`] bytes in `rounds` rounds to
/// `url`, sampled every `every`.
fn interval_stream(url: &str, count: u64, rounds: u32, every: &str) -> Vec<String> {
    let (size, count, rounds) = (
        INTERVAL_SIZE.to_string(),
        count.to_string(),
        rounds.to_string(),
    );
    [
        "stream",
        "--transport",
        url,
        "--size",
        &size,
        "--count",
        &count,
        "--rounds",
        &rounds,
        "--interval",
        every,
    ]
    .map(String::from)
    .into()
}

/// The arguments as the runners take them.
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Runs `myri ARGS...` to the end: its status, and its standard output and error as text.
fn run_text(args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_myri"))
        .args(args)
        .output()
        .expect("run myri");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text += &String::from_utf8_lossy(&out.stderr);
    (out.status, text)
}
