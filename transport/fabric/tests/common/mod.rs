//! What the provider's tests share: finding the Debian packages, installing the built
//! provider as `libmyri-fi.so`, and running programs with bounded waits.

#![allow(dead_code)] // Each test binary uses a part.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const PACKAGES: &str = "libfabric-dev libfabric-bin openmpi-bin libopenmpi-dev";

/// Whether `program` is on the PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Checks for what a test needs (programs, files). Missing: fails under `CI=true`,
/// otherwise says what to install and returns false (the test returns early).
#[track_caller]
pub fn require(programs: &[&str], files: &[&str]) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| !have(p))
        .chain(files.iter().copied().filter(|f| !Path::new(f).exists()))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "missing {missing:?}: install them with `apt-get install -y {PACKAGES}` (Debian 12)"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    false
}

/// The libfabric programs the provider tests run.
pub fn require_libfabric() -> bool {
    require(
        &["fi_info", "fi_pingpong", "cc"],
        &["/usr/include/rdma/fabric.h"],
    )
}

fn target_dir() -> PathBuf {
    // The test binary is target/<profile>/deps/<name>-<hash>.
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// The directory to put in `FI_PROVIDER_PATH`: `target/<profile>/fi`, holding the
/// provider Cargo built (`libmyri_fabric.so`) as libfabric names it (`libmyri-fi.so`).
pub fn provider_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let profile = target_dir();
        // `cargo test` builds the cdylib into deps/ for the tests and leaves the copy
        // one level up as the last `cargo build` made it: take the fresh one.
        let built = profile.join("deps/libmyri_fabric.so");
        let built = if built.exists() {
            built
        } else {
            profile.join("libmyri_fabric.so")
        };
        let dir = profile.join("fi");
        std::fs::create_dir_all(&dir).expect("creating target/<profile>/fi");
        // Copy then rename: another test binary may be loading the old one.
        let tmp = dir.join(format!(".libmyri-fi.so.{}", std::process::id()));
        std::fs::copy(&built, &tmp).unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
        std::fs::rename(&tmp, dir.join("libmyri-fi.so")).expect("renaming the provider");
        dir
    })
}

/// A command with `FI_PROVIDER_PATH` set to the provider.
pub fn fi_command(program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("FI_PROVIDER_PATH", provider_dir())
        .env_remove("FI_PROVIDER")
        .env_remove("FI_MYRI_LAYERING")
        .env("FI_MYRI_ADDR", "127.0.0.1");
    c
}

/// Waits for `child` at most `limit`; kills it past that and panics.
#[track_caller]
pub fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("waiting for a child").is_some() {
            return child.wait_with_output().expect("collecting output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting output");
            panic!(
                "{what} ran past {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP port on loopback free right now.
pub fn free_tcp_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding loopback");
    l.local_addr().expect("local address").port()
}

/// Whether something listens on TCP `port` (read from /proc/net/tcp, so the listener
/// sees no connection).
pub fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Waits until `port` listens, at most `limit`.
#[track_caller]
pub fn wait_listening(port: u16, limit: Duration) {
    let start = Instant::now();
    while !tcp_listening(port) {
        assert!(start.elapsed() < limit, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Held by a test while its processes run: each busy-polls, and on a two-core machine two
/// pairs at once starve each other (the tests of one binary run on parallel threads).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
