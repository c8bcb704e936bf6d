//! The transport over real sockets and shared memory against the plain references, in
//! the same run: `udp://` reliable 8 B ping-pong against a bare UDP socket ping-pong,
//! `shm://` reliable 8 B ping-pong (the shm backend's native reliability, no RPP)
//! against a bare shared-memory ring, and `udp://`
//! reliable streaming of 64 KiB messages against the same bytes over TCP loopback (and a
//! bare UDP socket). A `myri serve` runs on a thread of this process; each reference is
//! measured before the transport's client connects, so no session sits idle while the
//! other side is measured. `myri pingpong/stream --transport URL --baseline` give the
//! same comparisons interleaved round by round, across processes.
//!
//! `cargo bench -p myri-benches --bench transport`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use myri_netbench::bare_udp::BareUdpClient;
use myri_netbench::ring::RingClient;
use myri_netbench::tcp::TcpClient;
use myri_netbench::wire::{References, SizeSpec};
use myri_netbench::{Client, ClientConfig, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A server on a thread of this process.
struct Background {
    url: String,
    references: References,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    fn start(url: &str) -> Background {
        let (tx, rx) = std::sync::mpsc::channel();
        let url = url.to_owned();
        let thread = std::thread::spawn(move || {
            let mut server = Server::open(&url, ServerConfig::default()).expect("the server opens");
            tx.send((
                server.url(),
                server.references().clone(),
                server.stop_flag(),
            ))
            .expect("the bench waits");
            server.run(|_| {}).expect("the server runs");
        });
        let (url, references, stop) = rx.recv().expect("the server started");
        Background {
            url,
            references,
            stop,
            thread: Some(thread),
        }
    }

    fn udp_addr(&self, port: Option<u16>) -> SocketAddr {
        let server: SocketAddr = self.url.trim_start_matches("udp://").parse().expect("udp");
        SocketAddr::new(server.ip(), port.expect("the server offers it"))
    }

    fn client(&self) -> Client {
        Client::connect(&self.url, ClientConfig::default()).expect("the client connects")
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    g
}

fn udp_pingpong(c: &mut Criterion) {
    let server = Background::start("udp://127.0.0.1:0");
    let mut g = group(c, "udp_pingpong_8B");
    g.throughput(Throughput::Elements(1));
    let any = "0.0.0.0:0".parse().expect("an address");
    let mut bare = BareUdpClient::connect(
        any,
        server.udp_addr(server.references.udp_port),
        Duration::from_secs(1),
    )
    .expect("the bare socket");
    g.bench_function("udp-socket", |b| {
        b.iter_custom(|iters| bare.pingpong_round(8, iters).elapsed)
    });
    let mut client = server.client();
    g.bench_function("transport-reliable", |b| {
        b.iter_custom(|iters| client.pingpong_round(8, iters).expect("ping-pong").elapsed)
    });
    g.finish();
}

fn shm_pingpong(c: &mut Criterion) {
    let name = format!("bench-{}", std::process::id());
    let server = Background::start(&format!("shm://{name}"));
    let mut g = group(c, "shm_pingpong_8B");
    g.throughput(Throughput::Elements(1));
    let path = server.references.shm_ring.clone().expect("a ring");
    let mut ring = RingClient::open(Path::new(&path), Duration::from_secs(5)).expect("the ring");
    g.bench_function("shm-ring", |b| {
        b.iter_custom(|iters| ring.pingpong_round(8, iters).expect("ring").elapsed)
    });
    let mut client = server.client();
    g.bench_function("transport-reliable", |b| {
        b.iter_custom(|iters| client.pingpong_round(8, iters).expect("ping-pong").elapsed)
    });
    g.finish();
}

fn udp_stream(c: &mut Criterion) {
    const SIZE: usize = 64 << 10;
    const COUNT: u64 = 256;
    let server = Background::start("udp://127.0.0.1:0");
    let mut g = group(c, "udp_stream_64KiB");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(SIZE as u64 * COUNT));
    let mut tcp = TcpClient::connect(server.udp_addr(server.references.tcp_port)).expect("tcp");
    let per_round = |iters: u64, f: &mut dyn FnMut() -> Duration| (0..iters).map(|_| f()).sum();
    g.bench_function(BenchmarkId::new("tcp", SIZE), |b| {
        b.iter_custom(|iters| {
            per_round(iters, &mut || {
                tcp.stream_round(SIZE, COUNT).expect("tcp").elapsed
            })
        })
    });
    let mut client = server.client();
    g.bench_function(BenchmarkId::new("transport-reliable", SIZE), |b| {
        b.iter_custom(|iters| {
            per_round(iters, &mut || {
                let r = client
                    .stream_round(SizeSpec::Fixed(SIZE), COUNT, 1, false)
                    .expect("stream");
                assert_eq!(r.received, COUNT, "reliable: every message arrives");
                r.elapsed
            })
        })
    });
    g.finish();
}

criterion_group!(benches, udp_pingpong, shm_pingpong, udp_stream);
criterion_main!(benches);
