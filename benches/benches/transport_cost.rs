//! What one 8-byte reliable exchange costs the transport on `udp://` and `shm://`, against
//! the plain references, with no waiting: both endpoints live in this thread and take
//! turns (a ping goes out, the other side takes it and answers, the first takes the
//! answer), so the figures are the stack's own work and the system calls, not the
//! scheduling of two spinning processes.
//!
//! `shm://` reliable runs the backend's native reliability (no RPP); the old path, RPP
//! over the rings (`Options::rpp_over_shm`), is measured alongside as `shm+rpp`.
//!
//! Wall time per exchange: `cargo bench -p myri-benches --bench transport_cost`.
//! Instructions per exchange and RPP's share of them (the lead's target):
//! `valgrind --tool=callgrind --toggle-collect='transport_cost::exchange_transport'
//!  target/release/deps/transport_cost-* --only udp --exchanges 10000` (or `--only shm`,
//! `--only shm+rpp`, `--only sim` (RPP over two simulated boards in virtual time); for
//! the bare ring, `--toggle-collect='transport_cost::exchange_ring' --only ring`),
//! then `callgrind_annotate --inclusive=yes` and read the `myri_rpp::` entry points
//! (`handle_packet`, `poll_transmit_gather`, `send`, `poll_timeout`, `handle_timeout`,
//! `poll_event`) against the total (instructions only: system calls are not counted).
//!
//! More single modes for callgrind or a quick look: `--only bare-udp` (the connected
//! socket pair the exchange is compared with), `--only bare-udp-unconnected` (the same
//! with `sendto`/`recvfrom` to an address, as an endpoint with many peers must send),
//! `--only udp-idle` (one progress pass of a waiting udp endpoint, `--toggle-collect=
//! 'transport_cost::idle_pass'`: its own work delays the sight of the next datagram) and
//! `--only bare-idle` (an empty `recv` on a bare socket).

use myri_ring::heap_ring;
use myri_transport::{Endpoint, Options, Peer};
use std::hint::black_box;
use std::net::UdpSocket;
use std::time::Instant;

fn pair(a: &str, b: &str, rpp_over_shm: bool) -> (Endpoint, Endpoint, Peer, Peer) {
    let options = || Options::default().with_rpp_over_shm(rpp_over_shm);
    let mut ea = Endpoint::open_with(a, options()).expect("open a");
    let mut eb = Endpoint::open_with(b, options()).expect("open b");
    let to_b = ea.insert_addr(&strip(&eb.local_url())).expect("b");
    let to_a = eb.insert_addr(&strip(&ea.local_url())).expect("a");
    (ea, eb, to_b, to_a)
}

fn strip(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}

/// One reliable exchange between two endpoints of this thread.
#[inline(never)]
fn exchange_transport(a: &mut Endpoint, b: &mut Endpoint, to_b: Peer, to_a: Peer) {
    let mut ping = a.alloc(8);
    ping.copy_from_slice(&[1; 8]);
    a.send(to_b, ping).expect("ping");
    let got = loop {
        if let Some(d) = b.recv() {
            break d;
        }
        // The ping is not there yet: RPP may hold it (a retransmission, a closed window)
        // until its sender progresses, which in lockstep is this thread's job.
        a.progress();
    };
    let mut pong = b.alloc(8);
    pong.copy_from_slice(&got.data);
    drop(got);
    b.send(to_a, pong).expect("pong");
    loop {
        if let Some(d) = a.recv() {
            black_box(&d.data[..]);
            break;
        }
        b.progress();
    }
}

/// One progress pass of an endpoint with nothing arriving.
#[inline(never)]
fn idle_pass(a: &mut Endpoint) {
    black_box(a.recv().is_none());
}

/// Takes the handed-back buffers, as an application does now and then (each call that
/// finds none runs a progress pass, so not after every exchange).
fn completions(a: &mut Endpoint, b: &mut Endpoint) {
    while a.poll_completion().is_some() {}
    while b.poll_completion().is_some() {}
}

/// One exchange over two bare UDP sockets.
#[inline(never)]
fn exchange_udp(a: &UdpSocket, b: &UdpSocket, buf: &mut [u8; 64]) {
    a.send(&[1; 8]).expect("send");
    let n = loop {
        if let Ok(n) = b.recv(buf) {
            break n;
        }
    };
    b.send(&buf[..n]).expect("send");
    while a.recv(buf).is_err() {}
}

/// One exchange over two bare rings.
#[inline(never)]
fn exchange_ring(
    ab: &mut (myri_ring::Producer, myri_ring::Consumer),
    ba: &mut (myri_ring::Producer, myri_ring::Consumer),
) {
    ab.0.try_send(&[1; 8]).expect("room");
    {
        let r = ab.1.try_read().expect("there");
        ba.0.try_send(r.as_slice()).expect("room");
    }
    let r = ba.1.try_read().expect("there");
    black_box(r.as_slice());
}

/// Counts exchanges: true every 8th (when the handed-back buffers are taken).
fn every_8th(k: &mut u64) -> bool {
    *k += 1;
    (*k).is_multiple_of(8)
}

fn time(name: &str, n: u64, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!("{name:<28} {ns:>9.0} ns per exchange");
    ns
}

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn main() {
    let n: u64 = arg("--exchanges")
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // `--only udp`, `--only shm`, `--only shm+rpp`, `--only sim` or `--only ring`: one kind
    // of exchange, once (for callgrind).
    let only = arg("--only");
    let name = format!("cost-{}", std::process::id());
    let shm = format!("shm://{name}");
    let shm_rpp = format!("shm://{name}-rpp");
    let (mut sa, mut sb, s_to_b, s_to_a) = pair(&shm, &shm, false);
    assert!(sa.is_native(), "shm reliable runs natively");
    let (mut ra, mut rb, r_to_b, r_to_a) = pair(&shm_rpp, &shm_rpp, true);
    let (mut ua, mut ub, u_to_b, u_to_a) = pair("udp://127.0.0.1:0", "udp://127.0.0.1:0", false);
    let (a, b) = (
        UdpSocket::bind("127.0.0.1:0").expect("a"),
        UdpSocket::bind("127.0.0.1:0").expect("b"),
    );
    a.connect(b.local_addr().expect("b")).expect("connect");
    b.connect(a.local_addr().expect("a")).expect("connect");
    a.set_nonblocking(true).expect("nonblocking");
    b.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 64];
    let mut k = 0u64;
    let mut ab = heap_ring(1 << 16).expect("ring");
    let mut ba = heap_ring(1 << 16).expect("ring");
    match only.as_deref() {
        Some("udp") => {
            time("udp transport (reliable)", n, || {
                exchange_transport(&mut ua, &mut ub, u_to_b, u_to_a);
                if every_8th(&mut k) {
                    completions(&mut ua, &mut ub);
                }
            });
            return;
        }
        Some("sim") => {
            let (mut ma, mut mb, m_to_b, m_to_a) =
                pair("sim://cost-a?world=cost", "sim://cost-b?world=cost", false);
            time("sim transport (reliable)", n, || {
                exchange_transport(&mut ma, &mut mb, m_to_b, m_to_a);
                if every_8th(&mut k) {
                    completions(&mut ma, &mut mb);
                }
            });
            return;
        }
        Some("shm") => {
            time("shm transport (reliable)", n, || {
                exchange_transport(&mut sa, &mut sb, s_to_b, s_to_a);
                if every_8th(&mut k) {
                    completions(&mut sa, &mut sb);
                }
            });
            return;
        }
        Some("shm+rpp") => {
            time("shm transport (rpp)", n, || {
                exchange_transport(&mut ra, &mut rb, r_to_b, r_to_a);
                if every_8th(&mut k) {
                    completions(&mut ra, &mut rb);
                }
            });
            return;
        }
        Some("ring") => {
            time("shm ring", n, || exchange_ring(&mut ab, &mut ba));
            return;
        }
        // What a waiting endpoint does between arrivals: each pass's own work adds to
        // the delay before it sees the next datagram (`--toggle-collect` on `idle_pass`).
        Some("udp-idle") => {
            exchange_transport(&mut ua, &mut ub, u_to_b, u_to_a);
            completions(&mut ua, &mut ub);
            time("udp idle progress pass", n, || idle_pass(&mut ua));
            return;
        }
        Some("bare-udp") => {
            time("udp socket", n, || exchange_udp(&a, &b, &mut buf));
            return;
        }
        Some("bare-udp-unconnected") => {
            let (c, d) = (
                UdpSocket::bind("127.0.0.1:0").expect("c"),
                UdpSocket::bind("127.0.0.1:0").expect("d"),
            );
            c.set_nonblocking(true).expect("nonblocking");
            d.set_nonblocking(true).expect("nonblocking");
            let (ca, da) = (c.local_addr().expect("c"), d.local_addr().expect("d"));
            time("udp socket, unconnected", n, || {
                c.send_to(&[1; 8], da).expect("send");
                let (n, _) = loop {
                    if let Ok(r) = d.recv_from(&mut buf) {
                        break r;
                    }
                };
                d.send_to(&buf[..n], ca).expect("send");
                while c.recv_from(&mut buf).is_err() {}
            });
            return;
        }
        Some("bare-idle") => {
            time("bare udp empty recv", n, || {
                black_box(a.recv(&mut buf).is_err());
            });
            return;
        }
        _ => {}
    }
    // A and B alternate, five times, so drift in the machine's speed hits both alike.
    let (mut t, mut r) = (vec![[0.0; 3]; 0], vec![[0.0; 2]; 0]);
    for _ in 0..5 {
        t.push([
            time("udp transport (reliable)", n, || {
                exchange_transport(&mut ua, &mut ub, u_to_b, u_to_a);
                if every_8th(&mut k) {
                    completions(&mut ua, &mut ub);
                }
            }),
            time("shm transport (reliable)", n, || {
                exchange_transport(&mut sa, &mut sb, s_to_b, s_to_a);
                if every_8th(&mut k) {
                    completions(&mut sa, &mut sb);
                }
            }),
            time("shm transport (rpp)", n, || {
                exchange_transport(&mut ra, &mut rb, r_to_b, r_to_a);
                if every_8th(&mut k) {
                    completions(&mut ra, &mut rb);
                }
            }),
        ]);
        r.push([
            time("udp socket", n, || exchange_udp(&a, &b, &mut buf)),
            time("shm ring", n, || exchange_ring(&mut ab, &mut ba)),
        ]);
    }
    let median = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, what) in ["udp", "shm", "shm+rpp"].iter().enumerate() {
        let (x, y) = (
            median(t.iter().map(|p| p[i]).collect()),
            median(r.iter().map(|p| p[i.min(1)]).collect()),
        );
        println!(
            "{what}: transport {x:.0} ns, reference {y:.0} ns, ratio {:.2}",
            x / y
        );
    }
}
