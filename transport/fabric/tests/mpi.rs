//! Open MPI, unmodified, over the provider: `mpirun --mca pml cm --mca mtl ofi --mca
//! mtl_ofi_provider_include myri` on 2 and 4 ranks of this host, running the C programs
//! in `tests/mpi/` (built here with `mpicc`): a checked ping-pong of 1 B to 4 MiB,
//! wildcard matching with many unexpected messages, probes, sends to self, persistent
//! requests, cancel, synchronous sends, collectives with checked results and a 64 MiB
//! message.
//!
//! libfabric lists its own `ofi_rxd` layered over this provider's DGRAM endpoints
//! (`myri;ofi_rxd`) before this provider's RDM, and Open MPI takes the first entry that
//! matches `myri`; `FI_PROVIDER=^ofi_rxd` leaves the provider's own RDM endpoint.
//! The matching program also runs over `shm://` (`FI_MYRI_TRANSPORT=shm`), whose
//! messages are at most 2 MiB (the ping-pong's 4 MiB and the 64 MiB message are not).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

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

/// Same, over `transport` (`FI_MYRI_TRANSPORT`).
#[track_caller]
pub fn mpirun_over(transport: &str, ranks: u32, program: &Path, args: &[&str]) -> String {
    let _serial = common::one_at_a_time();
    let child = common::fi_command("mpirun")
        .env("FI_PROVIDER", "^ofi_rxd")
        .env("FI_MYRI_TRANSPORT", transport)
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
            "FI_PROVIDER",
            "-x",
            "FI_MYRI_ADDR",
            "-x",
            "FI_MYRI_TRANSPORT",
        ])
        .arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting mpirun");
    let out = common::wait_bounded(child, Duration::from_secs(180), "mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} on {ranks} ranks failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
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
