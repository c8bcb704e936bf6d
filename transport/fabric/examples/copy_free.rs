//! Copied vs copy-free sends from registered memory, on the provider's own path
//! (`FabricEndpoint::send` vs `send_registered`), two RDM endpoints over `udp://`
//! loopback in one thread. For each size it prints the mean time of the send call and
//! of a whole exchange (send, receive into a posted buffer, both completions).
//!
//! `cargo run --release -p myri-fabric --example copy_free [iterations [mode [size]]]`,
//! mode `copied` or `copy-free` (default: both, twice each, interleaved), size in bytes
//! (default: 64 KiB and 1 MiB); one mode and size suit an instruction count (callgrind).

use myri_fabric::abi::FI_ADDR_UNSPEC;
use myri_fabric::endpoint::{
    EpType, ExternalBytes, FabricEndpoint, Posted, Probe, RecvTarget, Target, transport_options,
};
use myri_fabric::objects::{AddressVector, Av, CompletionQueue, Cq, Progress, lock};
use myri_fabric::wire::Header;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A posted receive writing into a buffer the example keeps.
struct Sink(Arc<Mutex<Vec<u8>>>);

impl RecvTarget for Sink {
    fn capacity(&self) -> usize {
        lock(&self.0).len()
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        lock(&self.0)[offset..offset + data.len()].copy_from_slice(data);
    }
    fn first(&self) -> usize {
        0
    }
}

fn endpoint(av: &Av, cq: &Cq) -> FabricEndpoint {
    let t =
        myri_transport::Endpoint::open_with("udp://127.0.0.1:0", transport_options(EpType::Rdm))
            .expect("udp endpoint");
    let mut ep = FabricEndpoint::new(EpType::Rdm, t, 64 << 20);
    ep.bind.av = Some(av.clone());
    ep.bind.tx_cq = Some((cq.clone(), false));
    ep.bind.rx_cq = Some((cq.clone(), false));
    ep
}

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let modes: Vec<bool> = match std::env::args().nth(2).as_deref() {
        Some("copied") => vec![false],
        Some("copy-free") => vec![true],
        _ => vec![false, true, false, true],
    };
    let sizes: Vec<usize> = match std::env::args().nth(3).and_then(|a| a.parse().ok()) {
        Some(size) => vec![size],
        None => vec![64 << 10, 1 << 20],
    };
    let av: Av = Arc::new(Mutex::new(AddressVector::default()));
    let (a_cq, b_cq): (Cq, Cq) = (
        Arc::new(CompletionQueue::default()),
        Arc::new(CompletionQueue::default()),
    );
    let mut a = endpoint(&av, &a_cq);
    let mut b = endpoint(&av, &b_cq);
    let b_addr = lock(&av).insert(b.local_url().to_owned());
    println!("size     mode       send call   exchange");
    for &size in &sizes {
        let mem: Arc<dyn ExternalBytes> = Arc::new(vec![7u8; size]);
        let sink = Arc::new(Mutex::new(vec![0u8; size]));
        for &copy_free in &modes {
            let mut in_send = Duration::ZERO;
            let start = Instant::now();
            for _ in 0..iters {
                let posted = Posted {
                    context: 1,
                    src: FI_ADDR_UNSPEC,
                    tag: 0,
                    ignore: 0,
                    target: Target::new(Sink(sink.clone())),
                    completion: true,
                };
                b.post_recv(false, posted, Probe::None).unwrap();
                let h = Header::default();
                let t = Instant::now();
                if copy_free {
                    a.send_registered(b_addr, h, &mem, 0..size, 2, true)
                        .unwrap();
                } else {
                    a.send(b_addr, h, &[mem.bytes(0..mem.size())], 2, true)
                        .unwrap();
                }
                in_send += t.elapsed();
                while lock(&a_cq.queue).is_empty() || lock(&b_cq.queue).is_empty() {
                    a.progress();
                    b.progress();
                }
                for cq in [&a_cq, &b_cq] {
                    let took = lock(&cq.queue).take_with(8, |_, _| {});
                    assert_eq!(took, Ok(1), "one completion each, no error");
                }
            }
            let total = start.elapsed();
            println!(
                "{:>7}  {:<9}  {:>8.1} us  {:>7.1} us",
                size,
                if copy_free { "copy-free" } else { "copied" },
                in_send.as_secs_f64() * 1e6 / iters as f64,
                total.as_secs_f64() * 1e6 / iters as f64,
            );
        }
    }
    println!("copy-free sends counted: {}", a.counts.copy_free_sent);
}
