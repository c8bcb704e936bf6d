//! The channel API's streaming cost: `count` packets of `size` bytes one way between two
//! inline boards on one thread, sender and receiver stepped in turn. Run it under
//! callgrind to count instructions per packet, or plainly for the single-thread rate:
//!
//! ```sh
//! cargo build --release -p myri-benches --bin stream_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/stream_cost 2000 8192
//! ```

use myri_device::board::{Board, BoardConfig};
use myri_device::fabric::topology::star;
use myri_device::fabric::{CableConfig, FabricBuilder, SwitchSize};
use myri_device::time::Time;
use myri_mcp::{Api, ChanRequest, InitOptions, Mode, RouteId, RouteSlot, Unit};
use std::sync::Arc;

fn main() {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8192);
    let mut fb = FabricBuilder::new(1);
    let ports = star(&mut fb, 2, SwitchSize::Eight, CableConfig::default()).expect("topology");
    let fabric = Arc::new(fb.build());
    let mut apis: Vec<Api> = ports
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let mut board = Board::new(BoardConfig::pci64b(i as u32));
            board.attach_link(fabric.clone(), p);
            let unit = Unit::new(board, 0x1_0000_0000 * (i as u64 + 1), Mode::Inline);
            Api::init(&unit, InitOptions::default()).expect("init")
        })
        .collect();
    apis[0]
        .add_route(
            RouteSlot::Id(1),
            &fabric.route(ports[0], ports[1]).expect("route"),
        )
        .expect("add");
    let chan = apis[1].get_chan(ChanRequest::Specific(1)).expect("chan");
    apis[1].init_recv_chan(&chan).expect("init chan");
    let (a, b) = apis.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
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
