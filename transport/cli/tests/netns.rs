//! Two hosts: `integration/netns/two_hosts.sh` puts `myri serve` and its clients in two
//! network namespaces joined by a veth pair. It needs root and a working `ip netns`; in CI
//! (the CI environment variable set) their absence fails the test, locally it is skipped
//! with the reason printed.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Why two hosts cannot be made here, if they cannot.
fn missing_capability() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (network namespaces need it)".into());
    }
    let probe = format!("myri-probe-{}", std::process::id());
    match Command::new("ip").args(["netns", "add", &probe]).output() {
        Err(e) => return Some(format!("no `ip` command (install iproute2): {e}")),
        Ok(o) if !o.status.success() => {
            return Some(format!(
                "`ip netns add` fails: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(_) => {}
    }
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    None
}

#[test]
fn serve_and_clients_on_two_hosts_joined_by_a_veth_pair() {
    if let Some(why) = missing_capability() {
        assert!(!in_ci(), "CI must run the two-host test, but {why}");
        eprintln!("skipping the two-host test: {why}");
        return;
    }
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../integration/netns/two_hosts.sh");
    let mut child = Command::new("bash")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_myri"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bash runs");
    // The script bounds its own waits; this is the bound for a broken one.
    let end = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("two_hosts.sh did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "two_hosts.sh: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("two_hosts: passed"), "{stdout}");
    assert!(
        stdout.contains("\"addr\":\"udp://198.18.0.2:"),
        "the server saw the other namespace's address: {stdout}"
    );
}
