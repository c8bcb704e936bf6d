//! Peers killed with SIGKILL mid-stream, across processes: the survivor reports the
//! failure with the unacknowledged messages handed back; a restarted peer comes back with
//! a new incarnation and nothing of its earlier life is delivered.
//!
//! Every wait is for a condition (a JSON line, an exit) under a generous deadline.

mod cross_process_support;

use cross_process_support::{Proc, last, run, serve, unique};
use serde_json::Value;

/// A stream that runs until killed: many rounds of `count` messages of 8 KiB, one JSON
/// line after each.
fn endless_stream(url: &str, extra: &[&str], count: &str) -> Proc {
    let mut args = vec![
        "stream",
        "--transport",
        url,
        "--size",
        "8192",
        "--count",
        count,
        "--rounds",
        "100000",
        "--json",
    ];
    args.extend_from_slice(extra);
    Proc::spawn(&args)
}

/// A short verified stream that must succeed; returns its lines.
#[track_caller]
fn verified_stream(url: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "stream",
        "--transport",
        url,
        "--random-sizes",
        "200000",
        "--count",
        "500",
        "--rounds",
        "2",
        "--verify",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (status, lines, stderr) = run(&args);
    assert!(status.success(), "{status}: {stderr}\n{lines:#?}");
    let s = last(&lines, "test", "stream");
    assert_eq!(
        (&s["delivered"], &s["errors"]),
        (&Value::from(1000), &Value::from(0))
    );
    lines
}

/// Kills the server once the client has finished a round, so that the kill lands in the
/// next. Rounds of `count` messages last far longer than the test takes to read the round's
/// line and send the signal: a round of 2,000 could be sent and consumed in full within
/// that time over shm (about 2 ms), and the kill then found nothing in flight to hand back.
#[track_caller]
fn killed_server_is_reported_by_the_client(
    url: &str,
    server: Proc,
    listening: &Value,
    count: &str,
) {
    let mut client = endless_stream(url, &[], count);
    let connected = client.wait_event("connected");
    assert_eq!(connected["server_incarnation"], listening["incarnation"]);
    client.wait_event("round");
    server.signal(libc::SIGKILL);
    drop(server.wait_exit());
    let (status, lines, stderr) = client.wait_exit();
    assert_eq!(status.code(), Some(3), "peer failure: {stderr}");
    let failed = last(&lines, "event", "peer_failed");
    assert!(
        failed["unacked"].as_u64().unwrap() >= 1,
        "the messages in flight come back: {failed}"
    );
    assert!(stderr.contains("the server failed"), "{stderr}");
    assert!(
        stderr.contains("unacknowledged messages were handed back"),
        "{stderr}"
    );
}

#[test]
fn shm_server_killed_mid_stream_then_restarted_with_a_new_incarnation() {
    let name = unique("srvkill");
    let url = format!("shm://{name}");
    let (server, first) = serve(&url, &["--no-baseline"]);
    // 200,000 messages of 8 KiB: about a quarter of a second over shm.
    killed_server_is_reported_by_the_client(&url, server, &first, "200000");
    // A new server on the region left by the dead one: a new life, and a new client
    // gets exactly its own messages.
    let (mut again, second) = serve(&url, &["--no-baseline"]);
    assert_ne!(
        second["incarnation"], first["incarnation"],
        "{first} then {second}"
    );
    let lines = verified_stream(&url, &[]);
    assert_eq!(
        last(&lines, "event", "connected")["server_incarnation"],
        second["incarnation"]
    );
    let ended = again.wait_event("session_ended");
    assert_eq!(ended["counters"]["received"], 1000);
    again.signal(libc::SIGTERM);
    let (status, lines, _) = again.wait_exit();
    assert!(status.success());
    let totals = &last(&lines, "event", "final")["totals"];
    assert_eq!(totals["stray"], 0, "nothing of the dead life: {totals}");
    assert_eq!(totals["counters"]["out_of_order"], 0, "{totals}");
}

#[test]
fn udp_server_killed_mid_stream_is_reported_by_the_client() {
    let (server, listening) = serve("udp://127.0.0.1:0", &["--no-baseline"]);
    let url = listening["url"].as_str().unwrap().to_owned();
    // 20,000 messages of 8 KiB: a quarter of a second or more over loopback UDP.
    killed_server_is_reported_by_the_client(&url, server, &listening, "20000");
}

/// Kills a streaming client, restarts it (same shm side, or the same UDP address), and
/// checks what the server says.
fn client_killed_and_restarted(url: &str, bind: bool) {
    let (mut server, listening) = serve(url, &["--no-baseline"]);
    let url = listening["url"].as_str().unwrap().to_owned();
    let mut first = endless_stream(&url, &[], "2000");
    let connected = first.wait_event("connected");
    let started = server.wait_event("session_started");
    assert_eq!(started["incarnation"], connected["incarnation"]);
    first.wait_event("round");
    first.signal(libc::SIGKILL);
    drop(first.wait_exit());
    let local = connected["local"].as_str().unwrap().to_owned();
    let extra: Vec<&str> = if bind {
        vec!["--bind", &local]
    } else {
        Vec::new()
    };
    let lines = verified_stream(&url, &extra);
    let second = last(&lines, "event", "connected");
    // Incarnations are random 64-bit values: a new life has another one.
    assert_ne!(second["incarnation"], connected["incarnation"]);
    let lost = server.wait_event("session_lost");
    assert_eq!(lost["session"], started["session"]);
    let why = lost["why"].as_str().unwrap();
    assert!(
        why.contains("restarted") || why.contains("failed"),
        "the server reports the dead client: {lost}"
    );
    if !lost["new_incarnation"].is_null() {
        assert_eq!(lost["new_incarnation"], second["incarnation"], "{lost}");
    }
    let restarted = server.wait_event("session_started");
    assert_eq!(restarted["incarnation"], second["incarnation"]);
    let ended = server.wait_event("session_ended");
    let c = &ended["counters"];
    assert_eq!(
        c["received"], 1000,
        "exactly the new life's messages: {ended}"
    );
    for k in ["out_of_order", "bad_length", "bad_content", "malformed"] {
        assert_eq!(c[k], 0, "{k}: {ended}");
    }
    server.signal(libc::SIGTERM);
    let (status, lines, _) = server.wait_exit();
    assert!(status.success());
    let totals = &last(&lines, "event", "final")["totals"];
    assert_eq!(totals["stray"], 0, "no stale message: {totals}");
    assert_eq!(totals["sessions_lost"], 1, "{totals}");
    assert_eq!(totals["sessions_ended"], 1, "{totals}");
}

#[test]
fn shm_client_killed_mid_stream_and_restarted() {
    client_killed_and_restarted(&format!("shm://{}", unique("clikill")), false);
}

#[test]
fn udp_client_killed_mid_stream_and_restarted_on_the_same_address() {
    client_killed_and_restarted("udp://127.0.0.1:0", true);
}
