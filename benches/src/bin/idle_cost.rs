//! What an idle progress pass of a reliable `udp://` endpoint costs in user space: the
//! pass a host makes while it waits for a packet, whose cost delays the packet's
//! discovery by half of it on average. Counted under callgrind (the receive system
//! call that finds the socket empty is the kernel's, not counted):
//!
//! ```sh
//! cargo build --release -p myri-benches --bin idle_cost
//! for n in 10000 110000; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.idle.$n \
//!     target/release/idle_cost $n 2>&1 | grep refs; done   # (second - first) / 100000
//! ```

use myri_transport::{Buf, Endpoint};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let passes: u64 = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 100_000,
    };
    let mut a = Endpoint::open("udp://127.0.0.1:0")?;
    let mut b = Endpoint::open("udp://127.0.0.1:0")?;
    let to_b = a.insert_addr(&b.local_url())?;
    b.insert_addr(&a.local_url())?;
    // One message each way, so that both connections are established and idle.
    a.send(to_b, Buf::copy_of(b"hello"))
        .map_err(|e| e.error.to_string())?;
    let mut delivered = false;
    for _ in 0..1_000_000 {
        a.progress();
        if b.recv().is_some() {
            delivered = true;
            break;
        }
    }
    if !delivered {
        return Err("the first message never arrived".into());
    }
    for _ in 0..1000 {
        a.progress();
        b.progress();
    }
    for _ in 0..passes {
        std::hint::black_box(a.progress());
    }
    println!("{passes} idle passes");
    Ok(())
}
