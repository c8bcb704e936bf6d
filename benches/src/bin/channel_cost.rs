//! The channel API's own cost: an 8-byte ping-pong between two simulated boards stepped
//! inline on one thread, with no other work. Run under callgrind to count instructions
//! per exchange, repeatably:
//!
//! ```sh
//! cargo build --release -p myri-benches --bin channel_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/channel_cost 20000 8
//! callgrind_annotate /tmp/cg.out | head -40
//! ```
//!
//! A third argument `idle` instead runs that many idle polls (progress and an empty
//! receive on one board, as a host waiting for a packet does), to count the cost of one.

use myri_benches::cost::InlinePair;
use myri_device::time::Time;
use myri_mcp::RouteId;

fn main() {
    let mut args = std::env::args().skip(1);
    let iters: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let idle = args.next().is_some_and(|a| a == "idle");
    let InlinePair {
        a: mut board_a,
        b: mut board_b,
        chan_a,
        chan_b,
    } = InlinePair::new();
    let chans = [chan_a, chan_b];
    let (a, b) = (&mut board_a, &mut board_b);
    let now = Time::from_micros(1_000_000);
    if idle {
        let mut found = 0u64;
        for _ in 0..iters {
            a.progress(now);
            found += u64::from(a.recv(&chans[0]).expect("recv").is_some());
        }
        assert_eq!(found, 0, "nothing was sent");
        println!("{iters} idle polls");
        return;
    }
    let mut checksum = 0u64;
    for i in 0..iters {
        let mut buf = a.get_send_buffer().expect("buffer");
        buf.as_mut_slice()[..8].copy_from_slice(&i.to_be_bytes());
        a.send_and_release(1, RouteId(1), buf, size).expect("send");
        a.progress(now);
        b.progress(now);
        let ping = b.recv(&chans[1]).expect("recv").expect("ping arrived");
        let len = ping.len();
        b.send_recv_buffer_and_release(1, RouteId(1), ping, len)
            .expect("echo");
        b.progress(now);
        a.progress(now);
        let pong = a.recv(&chans[0]).expect("recv").expect("pong arrived");
        checksum = checksum.wrapping_add(u64::from_be_bytes(
            pong.as_slice()[..8].try_into().expect("8 bytes"),
        ));
    }
    assert_eq!(checksum, (0..iters).sum::<u64>());
    println!("{iters} exchanges of {size} bytes");
}
