//! Open MPI, unmodified, over the provider: `mpirun --mca pml cm --mca mtl ofi --mca
//! mtl_ofi_provider_include myri` on 2 and 4 ranks of this host, running the C programs
//! in `tests/mpi/` (built here with `mpicc`): a checked ping-pong of 1 B to 4 MiB,
//! wildcard matching with many unexpected messages, probes, sends to self, persistent
//! requests, cancel, synchronous sends, collectives with checked results and a 64 MiB
//! message.
//!
//! Nothing else is set: the provider declines libfabric's `ofi_rxd` layering over its
//! DGRAM endpoint (which libfabric would list first, and Open MPI, matching `myri` by
//! prefix, would take), so `mtl_ofi_provider_include myri` finds its own RDM endpoint;
//! the counts each endpoint prints prove it ran.
//! The matching program also runs over `shm://` (`FI_MYRI_TRANSPORT=shm`), whose
//! messages are at most 2 MiB (the ping-pong's 4 MiB and the 64 MiB message are not).
//!
//! Over `udp://` the runs set `FI_MYRI_SHM=0`, so that the ranks, all of this host, talk
//! UDP; the ping-pong, matching and collectives run again with auto-shm on. Every run
//! sets `FI_MYRI_STATS=1`, and the tests check from the counts each endpoint prints when
//! closed that no message went over `shm://` with auto-shm off or under loss (through
//! the proxy), and that some did with it on.
//!
//! Under loss, every program runs again (the 64 MiB message included) with every datagram
//! between the ranks going through the fault-injecting proxy in mesh mode (`myri proxy
//! --mesh`'s library, in the test's process), dropping 5%, duplicating 1% and reordering
//! 5% on every link: each rank binds its own port and advertises its shadow port at the
//! proxy (`FI_MYRI_RANK_PORTS`), so every rank sees every other at the address in its
//! address vector. The tests check the programs' results and that the proxy counted
//! injected drops, duplicates and reorderings.

mod common;

use myri_device::fabric::FaultConfig;
use myri_proxy::{Limits, MeshConfig, MeshProxy, MeshStats, PipeConfig};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

/// The longest one `mpirun` may take.
const MPIRUN_LIMIT: Duration = Duration::from_secs(180);

fn require_mpi() -> bool {
    common::require_libfabric() && common::require(&["mpicc", "mpirun"], &[])
}

/// Builds `tests/mpi/<name>.c` (once per test binary).
fn build(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("myri-fabric-mpi-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    });
    let exe = dir.join(name);
    if !exe.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/mpi/{name}.c"));
        let tmp = dir.join(format!(".{name}.{:?}", std::thread::current().id()));
        let out = std::process::Command::new("mpicc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&tmp)
            .arg(&src)
            .output()
            .expect("running mpicc");
        assert!(
            out.status.success(),
            "mpicc {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &exe).unwrap();
    }
    exe
}

/// Runs `program` on `ranks` ranks over the provider; returns rank 0's output.
#[track_caller]
pub fn mpirun(ranks: u32, program: &Path, args: &[&str]) -> String {
    mpirun_over("udp", ranks, program, args)
}

/// Same, over `transport` (`FI_MYRI_TRANSPORT`; over `udp://` with auto-shm off, so
/// that the ranks of this host really talk UDP).
#[track_caller]
pub fn mpirun_over(transport: &str, ranks: u32, program: &Path, args: &[&str]) -> String {
    let _serial = common::one_at_a_time();
    let (out, err) = mpirun_with(transport, "", false, ranks, program, args);
    if transport == "udp" {
        assert_eq!(sent_over(&err, ranks)[1], 0, "FI_MYRI_SHM=0, yet over shm");
    }
    out
}

/// Runs `program` over `udp://` with auto-shm on and `FI_MYRI_STATS=1`; returns rank 0's
/// output and the messages all ranks' endpoints sent over `udp://` and over `shm://`, as
/// they printed when closed.
#[track_caller]
fn mpirun_auto_shm(ranks: u32, program: &Path, args: &[&str]) -> (String, [u64; 2]) {
    let _serial = common::one_at_a_time();
    let (out, err) = mpirun_with("udp", "", true, ranks, program, args);
    let sent = sent_over(&err, ranks);
    eprintln!(
        "{} on {ranks} ranks with auto-shm: {} messages sent over udp, {} over shm",
        program.display(),
        sent[0],
        sent[1]
    );
    (out, sent)
}

/// The messages all endpoints of a run sent over `udp://` and over `shm://`, from the
/// lines they printed on `err` when closed (at least one per rank).
#[track_caller]
fn sent_over(err: &str, ranks: u32) -> [u64; 2] {
    let mut sent = [0, 0];
    let mut endpoints = 0;
    for line in err.lines().filter(|l| l.starts_with("myri-fi ")) {
        endpoints += 1;
        let [udp, shm] = sent_counts(line).unwrap_or_else(|| panic!("not a counts line: {line}"));
        sent[0] += udp;
        sent[1] += shm;
    }
    assert!(
        endpoints >= ranks,
        "{endpoints} endpoints reported for {ranks} ranks:\n{err}"
    );
    sent
}

/// The messages sent over `udp://` and over `shm://` in an endpoint's `FI_MYRI_STATS`
/// line (`myri-fi URL: sent U over udp, S over shm; received ...`).
fn sent_counts(line: &str) -> Option<[u64; 2]> {
    // "myri-fi ADDR: sent N over udp (K copy-free), M over shm; received ..."
    let rest = line.split_once(": sent ")?.1;
    let (udp, rest) = rest.split_once(" over udp")?;
    let (_, rest) = rest.split_once(", ")?;
    let (shm, _) = rest.split_once(" over shm;")?;
    Some([udp.parse().ok()?, shm.parse().ok()?])
}

/// Runs `program` with `FI_MYRI_RANK_PORTS` = `rank_ports` (when not empty) and auto-shm
/// `auto_shm`, every endpoint reporting its counts when closed (`FI_MYRI_STATS=1`);
/// returns rank 0's output and mpirun's stderr.
#[track_caller]
fn mpirun_with(
    transport: &str,
    rank_ports: &str,
    auto_shm: bool,
    ranks: u32,
    program: &Path,
    args: &[&str],
) -> (String, String) {
    let mut command = common::fi_command("mpirun");
    if !rank_ports.is_empty() {
        command
            .env("FI_MYRI_RANK_PORTS", rank_ports)
            .args(["-x", "FI_MYRI_RANK_PORTS"]);
    }
    let child = command
        .env("FI_MYRI_TRANSPORT", transport)
        .env("FI_MYRI_SHM", if auto_shm { "1" } else { "0" })
        .env("FI_MYRI_STATS", "1")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            &ranks.to_string(),
        ])
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "myri"])
        .args(["--mca", "btl", "self", "--mca", "oob_tcp_if_include", "lo"])
        .args([
            "-x",
            "FI_PROVIDER_PATH",
            "-x",
            "FI_MYRI_ADDR",
            "-x",
            "FI_MYRI_TRANSPORT",
            "-x",
            "FI_MYRI_SHM",
            "-x",
            "FI_MYRI_STATS",
        ])
        .arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting mpirun");
    let out = common::wait_bounded(child, MPIRUN_LIMIT, "mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{} on {ranks} ranks failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        program.display(),
        out.status,
    );
    (stdout, stderr)
}

#[test]
fn pingpong_1_byte_to_4_mib() {
    if !require_mpi() {
        return;
    }
    let out = mpirun(2, &build("pingpong"), &["10"]);
    assert!(out.contains("pingpong ok"), "{out}");
    assert!(out.contains("\n4194304 "), "{out}");
    eprintln!("{out}");
}

/// `tests/mpi/latency.c`, the program `ab.sh` compares builds with, runs and reports.
#[test]
fn the_latency_program_runs() {
    if !require_mpi() {
        return;
    }
    let out = mpirun(2, &build("latency"), &["200", "8"]);
    assert!(out.contains("8 B one-way median"), "{out}");
}

#[test]
fn matching_on_2_and_4_ranks() {
    if !require_mpi() {
        return;
    }
    for ranks in [2, 4] {
        let out = mpirun(ranks, &build("matching"), &[]);
        assert!(out.contains("matching ok"), "{out}");
    }
}

#[test]
fn matching_over_shm_on_2_and_4_ranks() {
    if !require_mpi() {
        return;
    }
    for ranks in [2, 4] {
        let out = mpirun_over("shm", ranks, &build("matching"), &[]);
        assert!(out.contains("matching ok"), "{out}");
    }
}

// ---- Auto-shm: udp:// endpoints, the ranks of this host over shared memory ---------------

#[test]
fn pingpong_1_byte_to_4_mib_auto_shm() {
    if !require_mpi() {
        return;
    }
    let (out, [_, shm]) = mpirun_auto_shm(2, &build("pingpong"), &["10"]);
    assert!(out.contains("pingpong ok"), "{out}");
    assert!(out.contains("\n4194304 "), "{out}");
    assert!(shm > 0, "nothing went over shm");
    eprintln!("{out}");
}

#[test]
fn matching_and_collectives_on_2_and_4_ranks_auto_shm() {
    if !require_mpi() {
        return;
    }
    for ranks in [2, 4] {
        // The short collectives program may be done before the peers find each other
        // attached (a region's other side is looked at every few milliseconds): the
        // two programs' runs together must have used the regions.
        let mut shm = 0;
        for (program, ok) in [
            ("matching", "matching ok"),
            ("collectives", "collectives ok"),
        ] {
            let (out, [_, n]) = mpirun_auto_shm(ranks, &build(program), &[]);
            assert!(out.contains(ok), "{out}");
            shm += n;
        }
        assert!(shm > 0, "{ranks} ranks: nothing went over shm");
    }
}

#[test]
fn collectives_on_2_and_4_ranks() {
    if !require_mpi() {
        return;
    }
    for ranks in [2, 4] {
        let out = mpirun(ranks, &build("collectives"), &[]);
        assert!(out.contains("collectives ok"), "{out}");
    }
}

// ---- Under loss: the ranks through `myri proxy --mesh` -----------------------------------

/// `2 * n` consecutive UDP ports on loopback free right now, below the kernel's ephemeral
/// range (so that no socket bound to port 0 takes one before the ranks and the proxy
/// do): the first `n` for the ranks, the next `n` for the proxy's shadow sockets.
fn free_port_run(n: u16) -> u16 {
    let first = (std::process::id() % 1_000) as u16 * 16;
    (0..1_000u16)
        .map(|k| 12_000 + (first + k * 2 * n) % 20_000)
        .find(|&base| {
            let held: Vec<_> = (base..base + 2 * n)
                .map_while(|p| UdpSocket::bind(("127.0.0.1", p)).ok())
                .collect();
            held.len() == usize::from(2 * n)
        })
        .expect("no run of free UDP ports on loopback")
}

/// Runs `program` on `ranks` ranks, every datagram between them going through the mesh
/// proxy (`myri proxy --mesh`'s library, in this process) with 5% loss, 1% duplication
/// and 5% reordering on every link; returns rank 0's output and the proxy's counters.
#[track_caller]
fn mpirun_under_loss(ranks: u16, program: &Path, args: &[&str], seed: u64) -> (String, MeshStats) {
    let _serial = common::one_at_a_time();
    let base = free_port_run(ranks);
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let faults = PipeConfig {
        faults: FaultConfig::rates(0.05, 0.0, 0.01, 0.05),
        ..PipeConfig::default()
    };
    let mut config = MeshConfig::consecutive(usize::from(ranks), at(base), at(base + ranks))
        .expect("a mesh of consecutive ports")
        .with_faults(faults);
    config.seed = seed;
    let mut proxy = MeshProxy::bind(config).expect("binding the mesh proxy");
    let handle = proxy.handle();
    let thread = std::thread::spawn(move || proxy.run(Limits::default(), None, |_| {}));
    let rank_ports = format!("{base},{}", base + ranks);
    let out = std::panic::catch_unwind(|| {
        mpirun_with("udp", &rank_ports, false, u32::from(ranks), program, args)
    });
    handle.stop();
    let stopped = thread.join().expect("the proxy thread");
    let stats = handle.stats();
    let (out, err) = out.unwrap_or_else(|e| {
        eprintln!("proxy: {}", summary(&stats));
        std::panic::resume_unwind(e)
    });
    stopped.expect("the proxy ran");
    // Never around the proxy.
    assert_eq!(
        sent_over(&err, u32::from(ranks))[1],
        0,
        "over shm under loss"
    );
    eprintln!(
        "{} on {ranks} ranks under loss: {}",
        program.display(),
        summary(&stats)
    );
    (out, stats)
}

fn summary(s: &MeshStats) -> String {
    let t = &s.total;
    format!(
        "{} ms, {} datagrams in, {} dropped, {} duplicated, {} reordered, {} dropped by the kernel, {} send failed, {} from strangers",
        s.elapsed_ms,
        t.pipe.received,
        t.pipe.dropped,
        t.pipe.duplicated,
        t.pipe.reordered,
        t.kernel_drops,
        t.send_failed,
        s.refused_unknown
    )
}

/// The proxy really dropped and reordered datagrams, between the ranks only. (At 1%, a
/// short run may duplicate none: the tests check duplicates over their runs together.)
#[track_caller]
fn assert_faults_injected(stats: &MeshStats, ranks: u16) {
    let t = &stats.total.pipe;
    assert!(
        t.dropped > 0 && t.reordered > 0,
        "no faults injected: {}",
        summary(stats)
    );
    assert_eq!(stats.refused_unknown, 0, "{}", summary(stats));
    assert!(stats.links.len() >= 2, "{:?}", stats.links);
    for l in &stats.links {
        assert!(l.from < usize::from(ranks) && l.to < usize::from(ranks) && l.from != l.to);
    }
}

#[test]
fn pingpong_1_byte_to_4_mib_under_loss() {
    if !require_mpi() {
        return;
    }
    let (out, stats) = mpirun_under_loss(2, &build("pingpong"), &["10"], 1);
    assert!(out.contains("pingpong ok"), "{out}");
    assert!(out.contains("\n4194304 "), "{out}");
    assert_faults_injected(&stats, 2);
    assert!(stats.total.pipe.duplicated > 0, "{}", summary(&stats));
    eprintln!("{out}");
}

#[test]
fn matching_on_2_and_4_ranks_under_loss() {
    if !require_mpi() {
        return;
    }
    let mut duplicated = 0;
    for ranks in [2, 4] {
        let (out, stats) = mpirun_under_loss(ranks, &build("matching"), &[], 2);
        assert!(out.contains("matching ok"), "{out}");
        assert_faults_injected(&stats, ranks);
        duplicated += stats.total.pipe.duplicated;
    }
    assert!(duplicated > 0, "no datagram duplicated");
}

#[test]
fn collectives_on_2_and_4_ranks_under_loss() {
    if !require_mpi() {
        return;
    }
    let mut duplicated = 0;
    for ranks in [2, 4] {
        let (out, stats) = mpirun_under_loss(ranks, &build("collectives"), &[], 3);
        assert!(out.contains("collectives ok"), "{out}");
        assert_faults_injected(&stats, ranks);
        duplicated += stats.total.pipe.duplicated;
    }
    assert!(duplicated > 0, "no datagram duplicated");
}
