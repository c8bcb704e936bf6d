//! The channel API's streaming cost: `count` packets of `size` bytes one way between two
//! inline boards on one thread, sender and receiver stepped in turn. Run it under
//! callgrind to count instructions per packet, or plainly for the single-thread rate:
//!
//! ```sh
//! cargo build --release -p myri-benches --bin stream_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/stream_cost 2000 8192
//! ```

use myri_benches::cost::InlinePair;
use myri_device::time::Time;
use myri_mcp::RouteId;

fn main() {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8192);
    let InlinePair {
        a: mut board_a,
        b: mut board_b,
        chan_b: chan,
        ..
    } = InlinePair::new();
    let (a, b) = (&mut board_a, &mut board_b);
    let now = Time::from_micros(1_000_000);
    let start = std::time::Instant::now();
    let (mut sent, mut received, mut bytes) = (0u64, 0u64, 0u64);
    let mut tickets = std::collections::VecDeque::new();
    while received < count {
        while sent < count && tickets.len() < 8 {
            let Ok(buf) = a.get_send_buffer() else { break };
            match a.send(1, RouteId(1), buf, size) {
                Ok(t) => {
                    tickets.push_back(t);
                    sent += 1;
                }
                Err(_) => break,
            }
        }
        a.progress(now);
        while tickets.front().is_some_and(|t| !a.buffer_busy(t)) {
            tickets.pop_front();
        }
        b.progress(now);
        while let Some(r) = b.recv(&chan).expect("recv") {
            received += 1;
            bytes += r.len() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{received} packets of {size} bytes: {:.2} us per packet, {:.1} MB/s on one thread",
        secs * 1e6 / received as f64,
        bytes as f64 / secs / 1e6
    );
}
