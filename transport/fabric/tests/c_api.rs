//! The provider through libfabric's C API (`tests/c/api.c`, built with `cc -lfabric`):
//! matching, unexpected messages, truncation, cancel, peek/claim, CQ data, counters,
//! vectored sends, a 64 MiB message and bad input, in one process over loopback.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn c_api_checks_pass() {
    if !common::require_libfabric() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("myri-fabric-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("api");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/api.c");
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(src)
        .arg("-lfabric")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let child = common::fi_command(exe.to_str().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_bounded(child, Duration::from_secs(120), "tests/c/api.c");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
