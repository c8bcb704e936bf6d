//! The provider through libfabric's C API (`tests/c/api.c`, built with `cc -lfabric`):
//! matching, unexpected messages, truncation, cancel, peek/claim, CQ data, counters,
//! vectored sends, a 64 MiB message and bad input, in one process over loopback; and
//! (`tests/c/formats.c`) every CQ format, `fi_cq_sread`, counters, `FI_AV_MAP`,
//! `FI_ADDR_STR`, inject, op flags, selective completion, `fi_setname` and an event queue;
//! and (`tests/c/mr.c`) sends from registered memory, copy-free where they may be; and
//! (`tests/c/auto.c`) automatic progress; and that `cost/path.c`, which
//! `cost.sh` measures, still runs.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn c_api_checks_pass() {
    run_c("api");
}

#[test]
fn c_formats_and_options_checks_pass() {
    run_c("formats");
}

#[test]
fn c_sends_from_registered_memory_are_copy_free() {
    let Some(out) = run_c_with("mr", &[("FI_MYRI_STATS", "1"), ("FI_MYRI_SHM", "0")]) else {
        return;
    };
    // The sender (b) sent 8 messages: fi_tsend, fi_send, fi_tsendmsg and the send
    // before the region's close copy-free; the bad desc, the buffer outside the region,
    // the short message and the stale desc copied.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sent 8 over udp (4 copy-free)"), "{stderr}");
}

#[test]
fn c_automatic_progress_drives_an_endpoint_nobody_polls() {
    run_c_with("auto", &[("FI_MYRI_SHM", "0")]);
    // The premise: with manual progress the same message does not arrive while only the
    // receiver's queue is read.
    let out = run_c_args("auto", &["manual"], &[("FI_MYRI_SHM", "0")]);
    if let Some(out) = out {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("not arrived"), "{stdout}");
    }
}

/// `cost/path.c`, the program `cost.sh` counts instructions of (a tagged ping-pong with
/// remote CQ data between two endpoints of one process), runs and checks what it gets.
#[test]
fn the_cost_programs_ping_pong_runs() {
    if let Some(out) = run_source("cost/path.c", &["2000"], &[("FI_MYRI_SHM", "0")]) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("2000 exchanges"), "{stdout}");
    }
}

fn run_c(name: &str) {
    run_c_with(name, &[]);
}

/// Builds and runs `tests/c/<name>.c` with `env` set; its output (None when libfabric is
/// not installed and the test is skipped).
fn run_c_with(name: &str, env: &[(&str, &str)]) -> Option<std::process::Output> {
    run_c_args(name, &[], env)
}

/// [`run_c_with`], the program given `args`.
fn run_c_args(name: &str, args: &[&str], env: &[(&str, &str)]) -> Option<std::process::Output> {
    run_source(&format!("tests/c/{name}.c"), args, env)
}

/// Builds the C program at `path` (from the crate's directory) and runs it with `args`
/// and `env`: its output, or None when libfabric is not installed.
fn run_source(path: &str, args: &[&str], env: &[(&str, &str)]) -> Option<std::process::Output> {
    if !common::require_libfabric() {
        return None;
    }
    let name = std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("program");
    let dir = std::env::temp_dir().join(format!("myri-fabric-c-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let src = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lfabric")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let child = common::fi_command(exe.to_str().unwrap())
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_bounded(child, Duration::from_secs(120), &src);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out)
}
