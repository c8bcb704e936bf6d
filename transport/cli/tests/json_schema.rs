//! The `--json` lines of `myri stream` and `myri pingpong` on the simulated fabric mean
//! what the command's help says, with the fields the network runs use for the same
//! things: `sent` and `delivered` count messages (the application's), packet counts live
//! under `packets`. (The `udp://` and `shm://` lines are checked by `cross_process.rs`.)

use serde_json::Value;
use std::process::Command;

const MYRI: &str = env!("CARGO_BIN_EXE_myri");

#[track_caller]
fn json_run(args: &[&str]) -> Vec<Value> {
    let out = Command::new(MYRI).args(args).output().expect("run myri");
    assert!(
        out.status.success(),
        "myri {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn stream_json_delivered_counts_messages_on_the_simulated_fabric() {
    // Raw: the sink acknowledges a stream once it has heard nothing for half the
    // timeout, so a sender held off its CPU that long (the default is 20 ms) ends its
    // stream early; a long timeout keeps that from a busy host, and `sent` says what went.
    let raw = ["--raw", "--timeout-ms", "5000"];
    for extra in [&[][..], &raw[..], &["--mode", "sim"][..]] {
        let mut args = vec![
            "stream", "--size", "4096", "--count", "150", "--rounds", "3", "--json",
        ];
        args.extend_from_slice(extra);
        let lines = json_run(&args);
        let s = lines.last().expect("a line");
        assert_eq!(s["test"], "stream", "{s}");
        let sent = s["sent"].as_u64().expect("sent");
        let delivered = s["delivered"].as_u64().expect("delivered");
        if extra == raw {
            // A receive pool may overrun; what was not delivered was dropped.
            let dropped = s["packets"]["dropped"].as_u64().expect("packets.dropped");
            assert!(sent > 0 && sent <= 450, "{s}");
            assert!(delivered + dropped >= sent, "{s}");
        } else {
            assert_eq!((sent, delivered), (450, 450), "{extra:?}: {s}");
        }
        let p = &s["packets"];
        for k in ["sent", "received", "dropped", "duplicated"] {
            assert!(p[k].is_u64(), "packets.{k}: {s}");
        }
        assert!(
            s.get("received").is_none(),
            "no ambiguous top-level field: {s}"
        );
    }
}

#[test]
fn pingpong_json_has_one_line_per_size_with_packet_counts() {
    let lines = json_run(&["pingpong", "--sizes", "8,1024", "--iters", "50", "--json"]);
    let tests: Vec<&Value> = lines.iter().filter(|l| l["test"] == "pingpong").collect();
    assert_eq!(tests.len(), 2, "{lines:?}");
    for (t, size) in tests.iter().zip([8, 1024]) {
        assert_eq!(t["size"], size, "{t}");
        assert_eq!(t["iters"], 50, "{t}");
        assert!(t["one_way_us"].as_f64().unwrap() > 0.0, "{t}");
        assert!(t["packets"]["sent"].as_u64().unwrap() >= 100, "{t}");
        // Damage past the links is caught by the boards' DMA checksums (the default) or
        // RPP's CRC-32C: both counts are there, at zero on a clean fabric.
        assert_eq!(t["bad_dma_checksum"].as_u64(), Some(0), "{t}");
        assert_eq!(t["bad_crc"].as_u64(), Some(0), "{t}");
    }
}

#[test]
fn frames_json_checks_every_line_of_every_frame() {
    for source in ["host", "workspace"] {
        let lines = json_run(&[
            "frames", "--width", "320", "--height", "200", "--depth", "2", "--frames", "4",
            "--source", source, "--json",
        ]);
        let f = lines.last().expect("a line");
        assert_eq!(f["test"], "frames", "{f}");
        assert_eq!(f["frames"], 4, "{f}");
        assert_eq!(f["lines_checked"], 800, "every line of every frame: {f}");
        assert_eq!(f["lines_bad"], 0, "{f}");
        assert!(f["fps"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["mb_per_s"].as_f64().unwrap() > 0.0, "{f}");
    }
}

#[test]
fn frames_rejects_impossible_geometry_with_a_usage_error() {
    let out = Command::new(MYRI)
        .args(["frames", "--width", "0"])
        .output()
        .expect("run myri");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn json_to_a_reader_that_has_gone_ends_quietly_not_in_a_panic() {
    // `myri stream --json | head -0`: the pipe's reader is closed before myri writes.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(MYRI)
        .args(["stream", "--size", "4096", "--count", "50", "--rounds", "1"])
        .arg("--json")
        .stdout(writer)
        .output()
        .expect("run myri");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn network_only_stream_options_are_refused_on_the_simulated_fabric() {
    for option in [
        &["--verify"][..],
        &["--random-sizes", "1000"],
        &["--interval", "1s"],
    ] {
        let out = Command::new(MYRI)
            .args(["stream", "--count", "10"])
            .args(option)
            .output()
            .expect("run myri");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{option:?}: {stderr}");
        assert!(
            stderr.contains(option[0]) && stderr.contains("--transport"),
            "{option:?}: {stderr}"
        );
    }
}
