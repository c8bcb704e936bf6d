//! `fi_pingpong -p myri` between two processes on loopback, data checked, for RDM and
//! DGRAM endpoints and untagged and tagged messages over `udp://` and over `shm://`
//! (`FI_MYRI_TRANSPORT=shm`; `FI_PROVIDER=^ofi_rxd` keeps libfabric's rxd layer out).
//! `FI_MYRI_SHM=0`: the two processes of this host talk UDP, not over auto-shm's region.
//! Over `shm://` the large messages go single-copy (`process_vm_readv`), and copied with
//! `FI_MYRI_CMA=0`: each endpoint's `FI_MYRI_STATS=1` line says which.

mod common;

use std::process::Stdio;
use std::time::Duration;

fn pingpong(ep: &str, mode: &str, sizes: &str, iters: &str) {
    pingpong_over("udp", ep, mode, sizes, iters);
}

fn pingpong_over(transport: &str, ep: &str, mode: &str, sizes: &str, iters: &str) {
    pingpong_with(transport, ep, mode, sizes, iters, &[]);
}

/// [`pingpong_over`] with more environment for both sides; both sides' stderr.
fn pingpong_with(
    transport: &str,
    ep: &str,
    mode: &str,
    sizes: &str,
    iters: &str,
    env: &[(&str, &str)],
) -> [String; 2] {
    let _serial = common::one_at_a_time();
    if !common::require_libfabric() {
        return Default::default();
    }
    let port = common::free_tcp_port().to_string();
    let args = [
        "-p", "myri", "-e", ep, "-m", mode, "-S", sizes, "-I", iters, "-c",
    ];
    let server = common::fi_command("fi_pingpong")
        .env("FI_MYRI_TRANSPORT", transport)
        .env("FI_MYRI_SHM", "0")
        .env("FI_PROVIDER", "^ofi_rxd")
        .envs(env.iter().copied())
        .args(args)
        .args(["-B", &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the fi_pingpong server");
    common::wait_listening(port.parse().unwrap(), Duration::from_secs(20));
    let client = common::fi_command("fi_pingpong")
        .env("FI_MYRI_TRANSPORT", transport)
        .env("FI_MYRI_SHM", "0")
        .env("FI_PROVIDER", "^ofi_rxd")
        .envs(env.iter().copied())
        .args(args)
        .args(["-P", &port, "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the fi_pingpong client");
    let limit = Duration::from_secs(120);
    let c = common::wait_bounded(client, limit, "fi_pingpong client");
    let s = common::wait_bounded(server, limit, "fi_pingpong server");
    for (who, out) in [("client", &c), ("server", &s)] {
        assert!(
            out.status.success(),
            "{ep} {mode}: {who} failed ({})\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let table = String::from_utf8_lossy(&c.stdout);
    assert!(table.contains("usec/xfer"), "no results table:\n{table}");
    eprintln!("{ep} {mode}:\n{table}");
    [&c, &s].map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Messages sent single-copy, by the `FI_MYRI_STATS=1` lines in `err`
/// (`...; single-copy: sent N, received R, failed F, held H, forbidden X`): sent,
/// received, failed, forbidden.
fn single_copy(err: &str) -> [u64; 4] {
    let mut n = [0; 4];
    for line in err.lines().filter(|l| l.starts_with("myri-fi ")) {
        let (_, rest) = line
            .split_once("single-copy: sent ")
            .unwrap_or_else(|| panic!("no single-copy counts: {line}"));
        let words: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(words.len(), 5, "{line}");
        let [sent, received, failed, _held, forbidden] = words[..] else {
            unreachable!()
        };
        for (t, w) in n.iter_mut().zip([sent, received, failed, forbidden]) {
            *t += w;
        }
    }
    n
}

/// Large messages sent as bare one-packet pieces over `udp://`, by the
/// `FI_MYRI_STATS=1` lines in `err` (`...; udp pieces: sent N, placed M (B bytes); ...`).
fn udp_pieces_sent(err: &str) -> u64 {
    err.lines()
        .filter(|l| l.starts_with("myri-fi "))
        .map(|line| {
            let (_, rest) = line
                .split_once("udp pieces: sent ")
                .unwrap_or_else(|| panic!("no udp piece counts: {line}"));
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            n.parse::<u64>().unwrap()
        })
        .sum()
}

/// `FI_MYRI_MTU=1500`: every datagram an Ethernet frame's, so packets are too small for
/// large messages to go as pieces (they are reassembled by RPP), where on loopback's own
/// path MTU they do; the data checks pass either way.
#[test]
fn rdm_over_1500_byte_datagrams() {
    if !common::require_libfabric() {
        return;
    }
    let stats = ("FI_MYRI_STATS", "1");
    let own = pingpong_with("udp", "rdm", "tagged", "1048576", "10", &[stats]);
    assert!(
        own.iter().map(|e| udp_pieces_sent(e)).sum::<u64>() > 0,
        "{own:?}"
    );
    let small = pingpong_with(
        "udp",
        "rdm",
        "tagged",
        "all",
        "10",
        &[stats, ("FI_MYRI_MTU", "1500")],
    );
    assert_eq!(
        small.iter().map(|e| udp_pieces_sent(e)).sum::<u64>(),
        0,
        "{small:?}"
    );
}

#[test]
fn rdm_msg() {
    pingpong("rdm", "msg", "all", "10");
}

#[test]
fn rdm_tagged() {
    pingpong("rdm", "tagged", "all", "10");
}

#[test]
fn shm_rdm_msg() {
    pingpong_over("shm", "rdm", "msg", "all", "10");
}

#[test]
fn shm_rdm_tagged() {
    pingpong_over("shm", "rdm", "tagged", "all", "10");
}

/// Over `shm://` the large messages go single-copy (all but each side's first, which
/// probes), none fails; with `FI_MYRI_CMA=0` on both sides none does, and the data
/// checks pass either way.
#[test]
fn shm_rdm_single_copy_and_without() {
    if !common::require_libfabric() {
        return;
    }
    let stats = ("FI_MYRI_STATS", "1");
    let on = pingpong_with("shm", "rdm", "tagged", "65536", "20", &[stats]);
    let [c, s] = on.map(|e| single_copy(&e));
    if c[3] + s[3] > 0 {
        // The kernel does not let one process read another's memory here (seccomp, or
        // Yama's ptrace_scope between the two sibling processes): every message went
        // the copying path, which the data checks passed.
        eprintln!(
            "process_vm_readv is not permitted between two processes on this host: \
             single copy stayed off and the copying path was tested (client {c:?}, \
             server {s:?})"
        );
        assert_eq!(
            c[0] + s[0],
            0,
            "sent single-copy although the probe was refused"
        );
        return;
    }
    // 20 pings and pongs (and fi_pingpong's warm-up), each side's first copied.
    assert!(c[0] >= 19 && s[0] >= 19, "client {c:?}, server {s:?}");
    assert_eq!(
        (c[1], s[1]),
        (s[0], c[0]),
        "each received what the other sent"
    );
    assert_eq!(c[2] + s[2], 0, "failed");
    let off = pingpong_with(
        "shm",
        "rdm",
        "tagged",
        "65536",
        "20",
        &[stats, ("FI_MYRI_CMA", "0")],
    );
    let [c, s] = off.map(|e| single_copy(&e));
    assert_eq!((c, s), ([0; 4], [0; 4]));
}

#[test]
fn shm_dgram_msg() {
    pingpong_over("shm", "dgram", "msg", "all", "10");
}

#[test]
fn shm_dgram_tagged() {
    pingpong_over("shm", "dgram", "tagged", "all", "10");
}

#[test]
fn dgram_msg() {
    pingpong("dgram", "msg", "all", "10");
}

#[test]
fn dgram_tagged() {
    pingpong("dgram", "tagged", "all", "10");
}

/// RDM under loss: the client reaches the server through the fault-injecting proxy
/// (`myri proxy`'s library, in this process) dropping 5%, duplicating 1% and reordering
/// 5% of datagrams both ways (`FI_MYRI_VIA`, which turns auto-shm off on the client;
/// `FI_MYRI_SHM=0` on both says so); the data checks still pass.
#[test]
fn rdm_under_injected_loss() {
    use myri_device::fabric::FaultConfig;
    use myri_proxy::{Limits, PipeConfig, ProxyConfig, UdpProxy};
    if !common::require_libfabric() {
        return;
    }
    let _serial = common::one_at_a_time();
    let udp_port = || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("binding loopback");
        s.local_addr().expect("local address").port()
    };
    let server_port = udp_port();
    let server_addr = format!("127.0.0.1:{server_port}");
    let faults = PipeConfig {
        faults: FaultConfig::rates(0.05, 0.0, 0.01, 0.05),
        ..PipeConfig::default()
    };
    let config = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), server_addr.parse().unwrap())
        .with_faults(faults);
    let mut proxy = UdpProxy::bind(config).expect("binding the proxy");
    let via = format!("udp://{server_addr}=udp://{}", proxy.listen_addr());
    let handle = proxy.handle();
    let thread = std::thread::spawn(move || proxy.run(Limits::default(), None, |_| {}));

    let ctrl = common::free_tcp_port().to_string();
    let args = [
        "-p", "myri", "-e", "rdm", "-m", "tagged", "-S", "all", "-I", "10", "-c",
    ];
    let server = common::fi_command("fi_pingpong")
        .env("FI_PROVIDER", "^ofi_rxd")
        .env("FI_MYRI_SHM", "0")
        .env("FI_MYRI_PORT", server_port.to_string())
        .args(args)
        .args(["-B", &ctrl])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the fi_pingpong server");
    common::wait_listening(ctrl.parse().unwrap(), Duration::from_secs(20));
    let client = common::fi_command("fi_pingpong")
        .env("FI_PROVIDER", "^ofi_rxd")
        .env("FI_MYRI_SHM", "0")
        .env("FI_MYRI_VIA", &via)
        .args(args)
        .args(["-P", &ctrl, "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the fi_pingpong client");
    let limit = Duration::from_secs(240);
    let c = common::wait_bounded(client, limit, "fi_pingpong client under loss");
    let s = common::wait_bounded(server, limit, "fi_pingpong server under loss");
    handle.stop();
    let stats = handle.stats();
    let _ = thread.join();
    for (who, out) in [("client", &c), ("server", &s)] {
        assert!(
            out.status.success(),
            "{who} failed ({})\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("proxy: {stats:?}\n{}", String::from_utf8_lossy(&c.stdout));
}
