//! The fault-injecting UDP proxy in-process on loopback, between plain UDP sockets.
//!
//! Nothing here depends on timing: every wait is for a condition (a counter, a datagram)
//! with a generous deadline, and the fault checks compare the proxy's counters with the
//! sequence numbers that arrive.

use myri_device::fabric::FaultConfig;
use myri_proxy::{
    Limits, MeshConfig, MeshPeer, MeshProxy, MeshStats, PipeConfig, ProxyConfig, ProxyError,
    ProxyEvent, ProxyHandle, ProxyStats, StopReason, UdpProxy,
};
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(20);

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[track_caller]
fn socket() -> UdpSocket {
    let s = UdpSocket::bind(loopback()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    s
}

/// Waits for `what` to hold of the proxy's counters; panics after the deadline.
#[track_caller]
fn wait_for<S: Clone + std::fmt::Debug>(
    handle: &ProxyHandle<S>,
    what: &str,
    f: impl Fn(&S) -> bool,
) -> S {
    let end = Instant::now() + DEADLINE;
    loop {
        let s = handle.stats();
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}: {s:#?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Receives exactly `n` datagrams; panics if they do not come before the deadline.
#[track_caller]
fn receive(s: &UdpSocket, n: usize) -> Vec<(Vec<u8>, SocketAddr)> {
    let end = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let mut buf = vec![0; 65_536];
    while got.len() < n {
        assert!(Instant::now() < end, "got {} of {n} datagrams", got.len());
        if let Ok((len, from)) = s.recv_from(&mut buf) {
            got.push((buf[..len].to_vec(), from));
        }
    }
    got
}

/// Nothing more arrives: every datagram the proxy sent has been received already.
#[track_caller]
fn assert_nothing_more(s: &UdpSocket) {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0; 64];
    assert!(s.recv_from(&mut buf).is_err(), "an unexpected datagram");
    s.set_nonblocking(false).unwrap();
}

struct Running {
    handle: ProxyHandle,
    listen: SocketAddr,
    thread: JoinHandle<(Result<StopReason, ProxyError>, ProxyStats)>,
    events: mpsc::Receiver<String>,
}

fn start(config: ProxyConfig) -> Running {
    start_proxy(UdpProxy::bind(config).expect("proxy set-up"))
}

fn start_proxy(mut proxy: UdpProxy) -> Running {
    let handle = proxy.handle();
    let listen = proxy.listen_addr();
    let (tx, events) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let r = proxy.run(Limits::default(), None, |e| {
            let _ = tx.send(format!("{e:?}"));
        });
        (r, proxy.stats())
    });
    Running {
        handle,
        listen,
        thread,
        events,
    }
}

impl Running {
    fn stop(self) -> ProxyStats {
        self.handle.stop();
        let (reason, stats) = self.thread.join().expect("proxy thread");
        assert_eq!(reason.expect("proxy ran"), StopReason::Requested);
        stats
    }
}

#[test]
fn forwards_both_ways_with_one_session_per_client() {
    let server = socket();
    let running = start(ProxyConfig::new(loopback(), server.local_addr().unwrap()));
    let clients = [socket(), socket(), socket()];
    let mut upstream_of = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        c.send_to(format!("hello {i}").as_bytes(), running.listen)
            .unwrap();
        let got = receive(&server, 1);
        assert_eq!(got[0].0, format!("hello {i}").as_bytes());
        upstream_of.push(got[0].1);
    }
    // The server sees one address per client, none of them the client's own.
    let distinct: HashSet<_> = upstream_of.iter().collect();
    assert_eq!(distinct.len(), 3);
    for (c, up) in clients.iter().zip(&upstream_of) {
        assert_ne!(c.local_addr().unwrap(), *up);
    }
    // Answers go back to the right client, from the listening address; in reverse order,
    // and several per client, to show the mapping holds.
    for (i, up) in upstream_of.iter().enumerate().rev() {
        for k in 0..3 {
            server
                .send_to(format!("reply {i}.{k}").as_bytes(), up)
                .unwrap();
        }
    }
    for (i, c) in clients.iter().enumerate() {
        let got = receive(c, 3);
        for (k, (bytes, from)) in got.iter().enumerate() {
            assert_eq!(bytes, format!("reply {i}.{k}").as_bytes());
            assert_eq!(*from, running.listen);
        }
        assert_nothing_more(c);
    }
    // A big datagram passes whole.
    let big: Vec<u8> = (0..60_000u32).map(|i| i as u8).collect();
    clients[0].send_to(&big, running.listen).unwrap();
    assert_eq!(receive(&server, 1)[0].0, big);
    let events: Vec<String> = running.events.try_iter().collect();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("SessionOpened"))
            .count(),
        3,
        "{events:?}"
    );
    let stats = running.stop();
    assert_eq!(stats.sessions.opened, 3);
    assert_eq!(stats.sessions.active, 3);
    assert_eq!(stats.to_server.pipe.received, 4);
    assert_eq!(stats.to_server.sent(), 4);
    assert_eq!(stats.to_client.pipe.received, 9);
    assert_eq!(stats.to_client.sent(), 9);
    assert_eq!(
        stats.to_server.pipe.received_bytes,
        3 * 7 + big.len() as u64
    );
}

/// Which way the faulty stream goes.
#[derive(Clone, Copy, Debug)]
enum Way {
    ToServer,
    ToClient,
}

/// Sends `n` sequence-numbered datagrams through a proxy with faults in one direction, in
/// batches, waiting after each for the proxy to have handled the batch and for every
/// datagram it sent to arrive. Returns the sequence numbers as they arrived, and the stats.
fn faulty_stream(way: Way, faults: FaultConfig, seed: u64, n: u32) -> (Vec<u32>, ProxyStats) {
    let faulty = PipeConfig {
        faults,
        reorder_hold: Duration::from_millis(20),
        ..PipeConfig::default()
    };
    let server = socket();
    let mut config = ProxyConfig::new(loopback(), server.local_addr().unwrap());
    config.seed = seed;
    match way {
        Way::ToServer => config.to_server = faulty,
        Way::ToClient => config.to_client = faulty,
    }
    let running = start(config);
    let client = socket();
    // The client speaks first (a clean hello when the faults are towards the client).
    let upstream = match way {
        Way::ToServer => None,
        Way::ToClient => {
            client.send_to(b"hello", running.listen).unwrap();
            Some(receive(&server, 1)[0].1)
        }
    };
    let (sender, receiver) = match way {
        Way::ToServer => (&client, &server),
        Way::ToClient => (&server, &client),
    };
    let to = upstream.unwrap_or(running.listen);
    let direction = move |s: &ProxyStats| match way {
        Way::ToServer => s.to_server,
        Way::ToClient => s.to_client,
    };
    let first = direction(&running.handle.stats()).pipe.received;
    let mut arrived = Vec::new();
    let batch = 50;
    for start in (0..n).step_by(batch) {
        let end = (start + batch as u32).min(n);
        for seq in start..end {
            let mut d = seq.to_be_bytes().to_vec();
            d.extend_from_slice(&[0x5A; 28]);
            sender.send_to(&d, to).unwrap();
        }
        let s = wait_for(&running.handle, "the batch to go through", |s| {
            let d = direction(s);
            d.pipe.received - first == u64::from(end) && d.pending == 0
        });
        let expected = direction(&s).sent() as usize - (arrived.len() + first as usize);
        for (bytes, _) in receive(receiver, expected) {
            assert_eq!(bytes.len(), 32);
            arrived.push(u32::from_be_bytes(bytes[..4].try_into().unwrap()));
        }
    }
    assert_nothing_more(receiver);
    let stats = running.stop();
    (arrived, stats)
}

/// Checks the arrivals against the counters of the faulty direction.
fn check_counts(way: Way, arrived: &[u32], stats: &ProxyStats, n: u32) {
    let d = match way {
        Way::ToServer => stats.to_server,
        Way::ToClient => stats.to_client,
    };
    let c = d.pipe;
    let hello = matches!(way, Way::ToClient) as u64;
    assert_eq!(c.received, u64::from(n), "{way:?}");
    assert_eq!(d.send_failed, 0);
    assert_eq!(c.unsent_at_exit, 0);
    assert_eq!(
        arrived.len() as u64,
        c.forwarded,
        "everything forwarded arrived"
    );
    let unique: HashSet<u32> = arrived.iter().copied().collect();
    assert_eq!(
        unique.len() as u64,
        u64::from(n) - c.dropped,
        "one of each datagram not dropped"
    );
    assert_eq!(arrived.len() as u64 - unique.len() as u64, c.duplicated);
    // A datagram is late when it arrives after one with a higher number (its first copy).
    let mut seen = HashSet::new();
    let mut highest = None;
    let mut late = 0;
    for &s in arrived {
        if seen.insert(s) {
            if highest.is_some_and(|h| s < h) {
                late += 1;
            }
            highest = highest.max(Some(s));
        }
    }
    assert_eq!(late, c.reordered, "late arrivals vs reordered");
    assert_eq!(c.reordered + c.reorder_unmatched, c.reorder_held);
    // The other direction was clean.
    let other = match way {
        Way::ToServer => stats.to_client,
        Way::ToClient => stats.to_server,
    };
    assert_eq!(
        other.pipe.dropped + other.pipe.duplicated + other.pipe.reorder_held,
        0
    );
    assert_eq!(other.pipe.received, hello);
}

#[test]
fn loss_duplication_and_reordering_towards_the_server_match_what_arrives() {
    let n = 3_000;
    let faults = FaultConfig::rates(0.1, 0.0, 0.05, 0.1);
    let (arrived, stats) = faulty_stream(Way::ToServer, faults, 42, n);
    check_counts(Way::ToServer, &arrived, &stats, n);
    let c = stats.to_server.pipe;
    // Each fault really happened, at about its rate (the seed is fixed).
    assert!((200..400).contains(&c.dropped), "{c:?}");
    assert!((80..220).contains(&c.duplicated), "{c:?}");
    assert!((180..380).contains(&c.reorder_held), "{c:?}");
    assert!(c.reordered > c.reorder_held / 2, "{c:?}");
    // The same seed and the same datagrams give the same decisions: the same datagrams
    // lost and the same ones doubled. (Whether a held datagram is overtaken or its hold
    // runs out first depends on when the next one arrives, so the exact order may not
    // repeat on a loaded machine.)
    let (again, _) = faulty_stream(Way::ToServer, faults, 42, n);
    assert_eq!(decisions(&arrived, n), decisions(&again, n));
    let (other_seed, _) = faulty_stream(Way::ToServer, faults, 43, n);
    assert_ne!(decisions(&arrived, n), decisions(&other_seed, n));
}

/// The datagrams that never arrived and those that arrived twice.
fn decisions(arrived: &[u32], n: u32) -> (Vec<u32>, Vec<u32>) {
    let mut count = vec![0u32; n as usize];
    for &s in arrived {
        count[s as usize] += 1;
    }
    let with = |k| (0..n).filter(|&s| count[s as usize] == k).collect();
    (with(0), with(2))
}

#[test]
fn loss_duplication_and_reordering_towards_the_client_match_what_arrives() {
    let n = 2_000;
    let (arrived, stats) = faulty_stream(
        Way::ToClient,
        FaultConfig::rates(0.05, 0.0, 0.02, 0.05),
        7,
        n,
    );
    check_counts(Way::ToClient, &arrived, &stats, n);
    assert!(stats.to_client.pipe.reordered > 0 && stats.to_client.pipe.duplicated > 0);
}

#[test]
fn corruption_flips_one_bit_of_the_datagrams_it_counts() {
    let server = socket();
    let mut config = ProxyConfig::new(loopback(), server.local_addr().unwrap());
    config.to_server.faults = FaultConfig::rates(0.0, 0.2, 0.0, 0.0);
    let running = start(config);
    let client = socket();
    let payload = |i: u32| -> Vec<u8> { (0..64).map(|k| (i as u8).wrapping_mul(31) ^ k).collect() };
    let n = 500;
    for i in 0..n {
        client.send_to(&payload(i), running.listen).unwrap();
        // One at a time, so arrival order is send order without relying on anything else.
        let got = receive(&server, 1).remove(0).0;
        let bits: u32 = got
            .iter()
            .zip(payload(i))
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!(bits <= 1, "datagram {i}: {bits} bits differ");
    }
    let stats = running.stop();
    let c = stats.to_server.pipe;
    assert!((60..140).contains(&c.corrupted), "{c:?}");
    assert_eq!(c.forwarded, u64::from(n));
}

#[test]
fn delayed_datagrams_never_arrive_early() {
    let server = socket();
    let mut config = ProxyConfig::new(loopback(), server.local_addr().unwrap());
    let delay = Duration::from_millis(15);
    config.to_server.faults = FaultConfig {
        delay,
        jitter: Duration::from_millis(10),
        ..FaultConfig::default()
    };
    let running = start(config);
    let client = socket();
    let mut sent_at = Vec::new();
    for i in 0..20u8 {
        sent_at.push(Instant::now());
        client.send_to(&[i], running.listen).unwrap();
    }
    for (bytes, _) in receive(&server, 20) {
        let waited = sent_at[usize::from(bytes[0])].elapsed();
        assert!(waited >= delay, "datagram {} after {waited:?}", bytes[0]);
    }
    let stats = running.stop();
    assert_eq!(stats.to_server.pipe.delayed, 20);
}

#[test]
fn a_server_that_is_not_running_is_reported_and_counted() {
    let gone = socket().local_addr().unwrap(); // bound, then closed: nothing listens there
    let running = start(ProxyConfig::new(loopback(), gone));
    let client = socket();
    let end = Instant::now() + DEADLINE;
    while running.handle.stats().upstream_refused == 0 {
        assert!(Instant::now() < end, "no port-unreachable seen");
        client.send_to(b"anyone?", running.listen).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let events: Vec<String> = running.events.try_iter().collect();
    assert!(
        events.iter().any(|e| e.starts_with("UpstreamRefused")),
        "{events:?}"
    );
    running.stop();
}

#[test]
fn idle_sessions_close_and_client_limits_hold() {
    let server = socket();
    let mut config = ProxyConfig::new(loopback(), server.local_addr().unwrap());
    config.idle_timeout = Duration::from_millis(30);
    config.max_clients = 1;
    let running = start(config);
    let (a, b) = (socket(), socket());
    a.send_to(b"a", running.listen).unwrap();
    receive(&server, 1);
    wait_for(&running.handle, "a's session", |s| s.sessions.active == 1);
    b.send_to(b"b", running.listen).unwrap();
    wait_for(&running.handle, "b refused", |s| {
        s.sessions.refused_full == 1
    });
    // Once a's session has been idle long enough it closes, and b gets one.
    wait_for(&running.handle, "a's session to close", |s| {
        s.sessions.closed_idle == 1
    });
    b.send_to(b"b again", running.listen).unwrap();
    assert_eq!(receive(&server, 1)[0].0, b"b again");
    let events: Vec<String> = running.events.try_iter().collect();
    assert!(
        events.iter().any(|e| e.starts_with("SessionClosed")),
        "{events:?}"
    );
    let stats = running.stop();
    assert_eq!(stats.sessions.opened, 2);
    assert_eq!(stats.sessions.active, 1);
}

#[test]
fn a_pinned_client_and_a_fixed_upstream_address_let_the_server_speak_first() {
    let server = socket();
    let client = socket();
    let mut config = ProxyConfig::new(loopback(), server.local_addr().unwrap());
    config.upstream_bind = Some(loopback());
    config.client = Some(client.local_addr().unwrap());
    let proxy = UdpProxy::bind(config).unwrap();
    let upstream = proxy.fixed_upstream_addr().expect("bound at set-up");
    let running = start_proxy(proxy);
    server.send_to(b"server first", upstream).unwrap();
    let got = receive(&client, 1);
    assert_eq!(got[0], (b"server first".to_vec(), running.listen));
    // Anyone else is refused.
    let stranger = socket();
    stranger.send_to(b"me too", running.listen).unwrap();
    wait_for(&running.handle, "the stranger refused", |s| {
        s.sessions.refused_not_client == 1
    });
    client.send_to(b"client", running.listen).unwrap();
    assert_eq!(receive(&server, 1)[0], (b"client".to_vec(), upstream));
    assert_nothing_more(&server);
    running.stop();
}

#[test]
fn bad_set_ups_are_typed_errors() {
    let taken = socket();
    let server = socket().local_addr().unwrap();
    let err = |c: ProxyConfig| UdpProxy::bind(c).err().expect("refused");
    let e = err(ProxyConfig::new(taken.local_addr().unwrap(), server));
    assert!(
        matches!(&e, ProxyError::Listen { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse)
    );
    assert!(
        e.to_string()
            .starts_with("cannot listen on udp://127.0.0.1:"),
        "{e}"
    );
    assert!(e.is_setup());
    let same = "127.0.0.1:7".parse().unwrap();
    assert!(matches!(
        err(ProxyConfig::new(same, same)),
        ProxyError::ForwardsToItself { .. }
    ));
    let zero = "127.0.0.1:0".parse().unwrap();
    assert!(matches!(
        err(ProxyConfig::new(loopback(), zero)),
        ProxyError::UpstreamPortZero { .. }
    ));
    let bad = ProxyConfig::new(loopback(), server).with_faults(PipeConfig {
        faults: FaultConfig::rates(2.0, 0.0, 0.0, 0.0),
        ..PipeConfig::default()
    });
    assert_eq!(
        err(bad).to_string(),
        "fault setting drop = 2 is not a probability in [0, 1]"
    );
    let mut bind_taken = ProxyConfig::new(loopback(), server);
    bind_taken.upstream_bind = Some(taken.local_addr().unwrap());
    assert!(matches!(err(bind_taken), ProxyError::UpstreamBind { .. }));
    let mut none = ProxyConfig::new(loopback(), server);
    none.max_clients = 0;
    assert!(matches!(err(none), ProxyError::NoClients));
}

#[test]
fn the_packet_limit_stops_the_run_once_everything_is_handled() {
    let server = socket();
    let mut proxy =
        UdpProxy::bind(ProxyConfig::new(loopback(), server.local_addr().unwrap())).unwrap();
    let listen = proxy.listen_addr();
    let client = socket();
    client.send_to(b"x", listen).unwrap();
    let mut opened = 0;
    let reason = proxy
        .run(
            Limits {
                packets: Some(1),
                duration: Some(DEADLINE),
            },
            None,
            |e| {
                if let ProxyEvent::SessionOpened { .. } = e {
                    opened += 1;
                }
            },
        )
        .unwrap();
    assert_eq!(reason, StopReason::Packets);
    assert_eq!(opened, 1);
    assert_eq!(receive(&server, 1)[0].0, b"x");
    assert_eq!(proxy.stats().to_server.sent(), 1);
}

// ---- Mesh mode ----------------------------------------------------------------------------

struct Mesh {
    handle: ProxyHandle<MeshStats>,
    shadows: Vec<SocketAddr>,
    thread: JoinHandle<(Result<StopReason, ProxyError>, MeshStats)>,
}

/// A mesh proxy for `peers` (their real addresses; shadows on free ports).
fn start_mesh(peers: &[UdpSocket], faults: PipeConfig, seed: u64) -> Mesh {
    let peers = peers
        .iter()
        .map(|p| MeshPeer {
            real: p.local_addr().unwrap(),
            shadow: loopback(),
        })
        .collect();
    let mut config = MeshConfig::new(peers).with_faults(faults);
    config.seed = seed;
    let mut proxy = MeshProxy::bind(config).expect("mesh set-up");
    let handle = proxy.handle();
    let shadows = proxy.shadows().to_vec();
    let thread = std::thread::spawn(move || {
        let r = proxy.run(Limits::default(), None, |_| {});
        (r, proxy.stats())
    });
    Mesh {
        handle,
        shadows,
        thread,
    }
}

impl Mesh {
    fn stop(self) -> MeshStats {
        self.handle.stop();
        let (reason, stats) = self.thread.join().expect("proxy thread");
        assert_eq!(reason.expect("proxy ran"), StopReason::Requested);
        stats
    }
}

#[test]
fn a_mesh_forwards_between_every_pair_from_the_senders_shadow() {
    let peers = [socket(), socket(), socket()];
    let mesh = start_mesh(&peers, PipeConfig::clean(), 1);
    // Every peer sends first, to every peer (itself included), through the shadows.
    for (i, p) in peers.iter().enumerate() {
        for (j, shadow) in mesh.shadows.iter().enumerate() {
            p.send_to(format!("{i}->{j}").as_bytes(), shadow).unwrap();
        }
    }
    for (j, p) in peers.iter().enumerate() {
        let mut got: Vec<(String, SocketAddr)> = receive(p, 3)
            .into_iter()
            .map(|(b, from)| (String::from_utf8(b).unwrap(), from))
            .collect();
        got.sort();
        // Each came from the sender's shadow: the address to answer it at.
        let want: Vec<(String, SocketAddr)> = (0..3)
            .map(|i| (format!("{i}->{j}"), mesh.shadows[i]))
            .collect();
        assert_eq!(got, want);
        assert_nothing_more(p);
    }
    // An answer to the address a datagram came from reaches its sender.
    peers[2].send_to(b"answer", mesh.shadows[0]).unwrap();
    assert_eq!(
        receive(&peers[0], 1)[0],
        (b"answer".to_vec(), mesh.shadows[2])
    );
    // A stranger is no peer: dropped and counted.
    socket().send_to(b"me too", mesh.shadows[1]).unwrap();
    wait_for(&mesh.handle, "the stranger refused", |s| {
        s.refused_unknown == 1
    });
    assert_nothing_more(&peers[1]);
    let shadows = mesh.shadows.clone();
    let stats = mesh.stop();
    assert_eq!(stats.links.len(), 9, "{:?}", stats.links);
    for l in &stats.links {
        let want = if (l.from, l.to) == (2, 0) { 2 } else { 1 };
        assert_eq!((l.pipe.received, l.pipe.forwarded), (want, want), "{l:?}");
    }
    assert_eq!(stats.total.pipe.received, 10);
    assert_eq!(stats.total.sent(), 10);
    assert_eq!(stats.peers.len(), 3);
    assert_eq!(stats.peers[1].shadow, format!("udp://{}", shadows[1]));
}

/// Peer 0 sends `n` numbered datagrams to peer 1 through a faulty mesh, in batches, while
/// peer 2 (when `crosstalk`) sends as many to peer 1 on its own link. Returns the numbers
/// peer 1 got from peer 0, in arrival order, and the stats.
fn mesh_stream(seed: u64, n: u32, crosstalk: bool) -> (Vec<u32>, MeshStats) {
    let faults = PipeConfig {
        faults: FaultConfig::rates(0.1, 0.0, 0.05, 0.1),
        reorder_hold: Duration::from_millis(20),
        ..PipeConfig::default()
    };
    let peers = [socket(), socket(), socket()];
    let mesh = start_mesh(&peers, faults, seed);
    let sent_on = |s: &MeshStats, from: usize| {
        s.links
            .iter()
            .find(|l| (l.from, l.to) == (from, 1))
            .map_or((0, 0, 0), |l| {
                (l.pipe.received, l.pending, l.pipe.forwarded - l.send_failed)
            })
    };
    let mut arrived = Vec::new();
    let mut delivered = 0;
    let batch = 50;
    for start in (0..n).step_by(batch) {
        let end = (start + batch as u32).min(n);
        for seq in start..end {
            let mut d = seq.to_be_bytes().to_vec();
            d.extend_from_slice(&[0x5A; 28]);
            peers[0].send_to(&d, mesh.shadows[1]).unwrap();
            if crosstalk {
                peers[2].send_to(&d, mesh.shadows[1]).unwrap();
            }
        }
        let s = wait_for(&mesh.handle, "the batch to go through", |s| {
            let (a, b) = (sent_on(s, 0), sent_on(s, 2));
            a.0 == u64::from(end) && a.1 == 0 && (!crosstalk || (b.0 == u64::from(end) && b.1 == 0))
        });
        let total = sent_on(&s, 0).2 + sent_on(&s, 2).2;
        for (bytes, from) in receive(&peers[1], (total - delivered) as usize) {
            if from == mesh.shadows[0] {
                arrived.push(u32::from_be_bytes(bytes[..4].try_into().unwrap()));
            } else {
                assert_eq!(from, mesh.shadows[2]);
            }
        }
        delivered = total;
    }
    assert_nothing_more(&peers[1]);
    (arrived, mesh.stop())
}

#[test]
fn mesh_faults_are_counted_per_link_and_repeat_with_the_seed_whatever_else_flows() {
    let n = 2_000;
    let (arrived, stats) = mesh_stream(9, n, false);
    let link = stats
        .links
        .iter()
        .find(|l| (l.from, l.to) == (0, 1))
        .unwrap();
    let c = link.pipe;
    assert_eq!(c.received, u64::from(n));
    assert_eq!(link.send_failed, 0);
    assert_eq!(
        arrived.len() as u64,
        c.forwarded,
        "everything forwarded arrived"
    );
    let unique: HashSet<u32> = arrived.iter().copied().collect();
    assert_eq!(unique.len() as u64, u64::from(n) - c.dropped);
    assert_eq!(arrived.len() as u64 - unique.len() as u64, c.duplicated);
    assert!((120..280).contains(&c.dropped), "{c:?}");
    assert!((50..150).contains(&c.duplicated), "{c:?}");
    assert!(
        c.reordered > 0 && c.reordered + c.reorder_unmatched == c.reorder_held,
        "{c:?}"
    );
    assert_eq!(stats.total.pipe, c, "one link carried everything");
    // The same seed gives the same decisions on the link, even with another link (2 -> 1,
    // the same receiver) busy at the same time; another seed gives others.
    let (again, busy) = mesh_stream(9, n, true);
    assert_eq!(decisions(&arrived, n), decisions(&again, n));
    assert_eq!(busy.links.len(), 2);
    assert_eq!(busy.total.pipe.received, 2 * u64::from(n));
    let (other, _) = mesh_stream(10, n, false);
    assert_ne!(decisions(&arrived, n), decisions(&other, n));
}

#[test]
fn bad_meshes_are_typed_errors() {
    let err = |c: MeshConfig| MeshProxy::bind(c).err().expect("refused");
    let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    assert!(matches!(
        err(MeshConfig::new(Vec::new())),
        ProxyError::MeshSize { peers: 0, .. }
    ));
    let many = MeshConfig::consecutive(65, at(20_000), at(0)).unwrap();
    assert_eq!(err(many).to_string(), "a mesh has 1 to 64 peers, not 65");
    let zero = MeshConfig::new(vec![MeshPeer {
        real: at(0),
        shadow: at(0),
    }]);
    assert!(matches!(
        err(zero),
        ProxyError::MeshPortZero { rank: 0, .. }
    ));
    let twice = MeshConfig::consecutive(2, at(20_000), at(20_001)).unwrap();
    assert_eq!(
        err(twice).to_string(),
        "udp://127.0.0.1:20001 is given twice among the mesh's addresses: each peer needs its own real and shadow address"
    );
    assert!(matches!(
        MeshConfig::consecutive(3, at(65_534), at(0)),
        Err(ProxyError::MeshPorts { peers: 3, .. })
    ));
    let taken = socket();
    let in_use = MeshConfig::new(vec![MeshPeer {
        real: at(20_000),
        shadow: taken.local_addr().unwrap(),
    }]);
    let e = err(in_use);
    assert!(matches!(&e, ProxyError::Listen { .. }), "{e}");
    assert!(e.is_setup());
    let bad = MeshConfig::new(vec![MeshPeer {
        real: at(20_000),
        shadow: at(0),
    }])
    .with_faults(PipeConfig {
        reorder_gap: 0,
        ..PipeConfig::default()
    });
    assert!(matches!(err(bad), ProxyError::Config(_)));
}

/// A burst larger than a shadow socket's receive buffer, sent before the proxy reads: the
/// kernel's drops show in that peer's count and the total, and every datagram is either
/// one of them or read (and, from a stranger, refused).
#[test]
fn a_mesh_counts_what_the_kernel_dropped_at_each_shadow() {
    let peers = [socket(), socket()];
    let config = MeshConfig::new(
        peers
            .iter()
            .map(|p| MeshPeer {
                real: p.local_addr().unwrap(),
                shadow: loopback(),
            })
            .collect(),
    );
    let mut proxy = MeshProxy::bind(config).unwrap();
    let shadow = proxy.shadows()[1];
    let stranger = socket();
    let sent = 600u64; // 36 MB: more than the 16 MiB an 8 MiB buffer request can be granted
    for _ in 0..sent {
        stranger.send_to(&[1u8; 60_000], shadow).unwrap();
    }
    let handle = proxy.handle();
    let thread = std::thread::spawn(move || proxy.run(Limits::default(), None, |_| {}));
    let s = wait_for(&handle, "every datagram read or dropped", |s| {
        s.refused_unknown + s.peers[1].kernel_drops == sent
    });
    assert!(s.peers[1].kernel_drops > 0, "{s:?}");
    assert_eq!(s.peers[0].kernel_drops, 0);
    assert_eq!(s.total.kernel_drops, s.peers[1].kernel_drops);
    handle.stop();
    assert_eq!(thread.join().unwrap().unwrap(), StopReason::Requested);
}
