//! A first program with myri's transport: two endpoints say hello over the simulated
//! fabric (no set-up), reliably, with copy-free buffers.
//!
//! ```text
//! cargo run -p myri-transport --example hello            # sim://, in this process
//! cargo run -p myri-transport --example hello -- udp     # the same over UDP on loopback
//! ```

use myri_transport::{Completion, Endpoint};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let over_udp = std::env::args().nth(1).as_deref() == Some("udp");
    let (url_a, url_b) = if over_udp {
        ("udp://127.0.0.1:0", "udp://127.0.0.1:0")
    } else {
        ("sim://alice", "sim://bob")
    };
    // Open two endpoints and make each the other's peer.
    let mut alice = Endpoint::open(url_a)?;
    let mut bob = Endpoint::open(url_b)?;
    let to_bob = alice.insert_addr(&bob.local_url())?;
    let to_alice = bob.insert_addr(&alice.local_url())?;
    println!("alice is {}, bob is {}", alice.local_url(), bob.local_url());
    println!("capabilities: {:?}", alice.capabilities());

    // A buffer in the backend's registered memory: write in place, then hand it over.
    let text = b"hello, bob";
    let mut msg = alice.alloc(text.len());
    msg.copy_from_slice(text);
    alice.send(to_bob, msg).map_err(|e| e.error)?;

    // Progress both until bob has the message (a real program would run `progress` from
    // its event loop, or use `BackgroundEndpoint`).
    let got = loop {
        alice.progress();
        if let Some(d) = bob.recv() {
            break d;
        }
    };
    println!(
        "bob got {:?} from peer {} ({} bytes, a view of registered memory: {})",
        String::from_utf8_lossy(&got.data),
        got.peer,
        got.data.len(),
        got.data.is_registered()
    );
    drop(got); // the receive buffer goes back to the backend

    bob.inject(to_alice, b"hi alice")?;
    let reply = loop {
        bob.progress();
        if let Some(d) = alice.recv() {
            break d;
        }
    };
    println!("alice got {:?}", String::from_utf8_lossy(&reply.data));

    // Reliable mode reports when the peer has acknowledged a message.
    let mut acked = false;
    while !acked {
        bob.progress();
        while let Some(c) = alice.poll_completion() {
            if let Completion::Sent { id, .. } = c {
                println!("bob acknowledged alice's message {id:?}");
                acked = true;
            }
        }
    }
    let s = alice.stats();
    println!(
        "alice: {} sent ({} from registered memory, {} copied), {} received",
        s.sends, s.registered_sends, s.copied_sends, s.recvs
    );
    Ok(())
}
