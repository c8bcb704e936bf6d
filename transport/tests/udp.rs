//! `udp://` endpoints over loopback: raw and reliable exchanges, bad addresses, unknown
//! senders, a peer that never answers, mio registration. Every wait is bounded by a count
//! of progress rounds with a generous real-time cap, never by a sleep that races.

mod common;

use common::wait_for;
use myri_transport::{
    Completion, Endpoint, InsertError, OpenError, Options, Peer, PeerFailure, RegisterError,
    SendErrorKind,
};
use std::time::Duration;

fn open(url: &str) -> Endpoint {
    Endpoint::open(url).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

/// A loopback endpoint whose one peer gets no socket of its own.
fn open_without_peer_socket() -> Endpoint {
    Endpoint::open_with(
        "udp://127.0.0.1:0",
        Options::default().with_peer_socket(false),
    )
    .unwrap()
}

fn pair(params: &str) -> (Endpoint, Endpoint, Peer, Peer) {
    let mut a = open(&format!("udp://127.0.0.1:0{params}"));
    let mut b = open(&format!("udp://127.0.0.1:0{params}"));
    let to_b = a.insert_addr(&b.local_url()).unwrap();
    let to_a = b.insert_addr(&a.local_url()).unwrap();
    (a, b, to_b, to_a)
}

#[test]
fn raw_datagrams_go_from_the_slab_to_the_slab() {
    let (mut a, mut b, to_b, to_a) = pair("?reliable=0");
    assert!(!a.capabilities().reliable);
    for i in 0..200usize {
        let len = (i * 331) % 60_000;
        let mut m = a.alloc(len);
        assert!(m.is_registered());
        m.fill(i as u8);
        a.send(to_b, m).unwrap();
        let d = wait_for(|| b.recv()).expect("datagram arrives on loopback");
        assert_eq!(d.peer, to_a);
        assert_eq!(d.data.len(), len);
        assert!(d.data.iter().all(|&x| x == i as u8));
        assert!(d.data.is_registered());
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.registered_sends, sa.copied_sends, sa.heap_sends),
        (200, 0, 0)
    );
    assert_eq!((sb.registered_recvs, sb.heap_recvs), (200, 0));
}

#[test]
fn reliable_messages_up_to_a_mebibyte_arrive_in_order() {
    let (mut a, mut b, to_b, _) = pair("");
    let sizes: Vec<usize> = (0..40)
        .map(|i| (i * 7919 * 31) % (1 << 20))
        .chain([1 << 20, 0, 1])
        .collect();
    let mut next = 0;
    let mut got = 0;
    let mut acked = 0;
    let mut received = Vec::new();
    wait_for(|| {
        while next < sizes.len() {
            let mut m = a.alloc(sizes[next]);
            m.fill(next as u8);
            match a.send(to_b, m) {
                Ok(_) => next += 1,
                Err(e) if e.error.is_would_block() => break,
                Err(e) => panic!("{e}"),
            }
        }
        a.progress();
        while let Some(d) = b.recv() {
            assert_eq!(d.data.len(), sizes[got], "message {got}");
            assert!(d.data.iter().all(|&x| x == got as u8), "message {got}");
            received.push(d.data.is_registered());
            got += 1;
        }
        while let Some(c) = a.poll_completion() {
            if let Completion::Sent { buf, id, .. } = c {
                // Acknowledgements are selective: messages complete in any order.
                assert_eq!(buf.len(), sizes[id.0 as usize]);
                acked += 1;
            }
        }
        (got == sizes.len() && acked == sizes.len()).then_some(())
    })
    .expect("every message delivered and acknowledged");
    let sa = a.stats();
    assert_eq!(
        sa.copied_sends + sa.transmit_copies,
        0,
        "gathered sends copy nothing"
    );
    assert!(
        received[0],
        "a whole in-order message is a view of its datagram"
    );
}

#[test]
fn a_port_in_use_and_bad_addresses_are_typed_errors() {
    let a = open("udp://127.0.0.1:0");
    let url = a.local_url();
    assert!(
        matches!(Endpoint::open(&url), Err(OpenError::AddrInUse { .. })),
        "{url}"
    );
    assert!(matches!(
        Endpoint::open("udp://127.0.0.1:70000"),
        Err(OpenError::Url(_))
    ));
    assert!(matches!(
        Endpoint::open("udp://127.0.0.1"),
        Err(OpenError::Url(_))
    ));
    assert!(matches!(
        Endpoint::open("udp://no-such-host.invalid:9"),
        Err(OpenError::Resolve(_))
    ));
    assert!(matches!(
        Endpoint::open("udp://192.0.2.1:9"),
        Err(OpenError::NotLocal { .. })
    ));
    assert!(matches!(
        Endpoint::open("udp://127.0.0.1:0?mtu=70000"),
        Err(OpenError::MtuTooLarge { .. })
    ));
    let mut a = a;
    assert!(matches!(
        a.insert_addr("udp://127.0.0.1:0"),
        Err(InsertError::PortZero { .. })
    ));
    assert!(matches!(
        a.insert_addr("shm://x"),
        Err(InsertError::OtherScheme { .. })
    ));
    assert!(
        matches!(a.send(Peer(7), a_buf()), Err(e) if matches!(e.error, SendErrorKind::UnknownPeer(Peer(7))))
    );
}

fn a_buf() -> myri_transport::Buf {
    myri_transport::Buf::copy_of(b"x")
}

#[test]
fn datagrams_from_unknown_addresses_are_counted_and_dropped_or_accepted() {
    let mut a = open("udp://127.0.0.1:0?reliable=0");
    let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = a.local_url().trim_start_matches("udp://").to_owned();
    stranger.send_to(b"who am i", &target).unwrap();
    wait_for(|| {
        (a.progress(), a.stats().unknown_source == 1)
            .1
            .then_some(())
    })
    .expect("counted");
    assert!(a.recv().is_none());

    let opts = Options::default()
        .with_accept_unknown_peers(true)
        .with_reliable(false);
    let mut server = Endpoint::open_with("udp://127.0.0.1:0", opts).unwrap();
    let target = server.local_url().trim_start_matches("udp://").to_owned();
    stranger.send_to(b"hello", &target).unwrap();
    let d = wait_for(|| server.recv()).expect("accepted");
    assert_eq!(&d.data[..], b"hello");
    match server.poll_completion() {
        Some(Completion::NewPeer { peer, addr }) => {
            assert_eq!(peer, d.peer);
            assert_eq!(addr, format!("udp://{}", stranger.local_addr().unwrap()));
        }
        other => panic!("expected NewPeer, got {other:?}"),
    }
    server.inject(d.peer, b"welcome").unwrap();
    let mut buf = [0u8; 16];
    stranger
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (n, _) = stranger.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"welcome");
}

#[test]
fn a_peer_that_never_answers_fails_with_its_messages_handed_back() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut opts = Options::default();
    opts.rpp.rto_initial = Duration::from_millis(1);
    opts.rpp.rto_min = Duration::from_millis(1);
    opts.rpp.rto_max = Duration::from_millis(4);
    opts.rpp.max_retries = 3;
    let mut a = Endpoint::open_with("udp://127.0.0.1:0", opts).unwrap();
    let p = a
        .insert_addr(&format!("udp://{}", silent.local_addr().unwrap()))
        .unwrap();
    a.send(p, myri_transport::Buf::copy_of(b"anyone?")).unwrap();
    a.send(p, myri_transport::Buf::copy_of(b"hello?")).unwrap();
    let (why, unsent) = wait_for(|| match a.poll_completion() {
        Some(Completion::PeerFailed { peer, why, unsent }) if peer == p => Some((why, unsent)),
        _ => None,
    })
    .expect("the peer is declared failed");
    assert!(matches!(why, PeerFailure::Unreachable { .. }), "{why}");
    let back: Vec<&[u8]> = unsent.iter().map(|b| &b[..]).collect();
    assert_eq!(back, [&b"anyone?"[..], b"hello?"]);
    assert!(a.peer_failed(p));
    let e = a
        .send(p, myri_transport::Buf::copy_of(b"more"))
        .unwrap_err();
    assert!(matches!(e.error, SendErrorKind::PeerFailed { .. }));
    assert_eq!(&e.buf[..], b"more");
    assert_eq!(a.stats().peer_failures, 1);
}

#[test]
fn a_udp_endpoint_wakes_a_callers_mio_poll() {
    let (mut a, mut b, to_b, _) = pair("?reliable=0");
    let mut poll = mio::Poll::new().unwrap();
    let mut events = mio::Events::with_capacity(8);
    b.register(poll.registry(), mio::Token(7)).unwrap();
    a.inject(to_b, b"ring").unwrap();
    let mut woke = false;
    for _ in 0..100 {
        poll.poll(&mut events, Some(Duration::from_millis(100)))
            .unwrap();
        if events
            .iter()
            .any(|e| e.token() == mio::Token(7) && e.is_readable())
        {
            woke = true;
            break;
        }
    }
    assert!(woke, "the socket's readiness reaches the caller's poll");
    assert_eq!(&b.recv().expect("ready means a datagram").data[..], b"ring");
    b.deregister(poll.registry()).unwrap();
    let mut sim = Endpoint::open("sim://mio?world=mio").unwrap();
    assert!(matches!(
        sim.register(poll.registry(), mio::Token(1)),
        Err(RegisterError::Unsupported(_))
    ));
}

#[test]
fn reliable_small_messages_are_sent_gathered_and_received_in_place() {
    let (mut a, mut b, to_b, _) = pair("");
    for i in 0..100u8 {
        let mut m = a.alloc(64);
        assert!(m.is_registered(), "the slab");
        m.fill(i);
        a.send(to_b, m).unwrap();
        let d = wait_for(|| {
            a.progress();
            b.recv()
        })
        .expect("delivered");
        assert!(d.data.iter().all(|&x| x == i));
        assert!(
            d.data.is_registered(),
            "message {i} is a view of the slab slot it arrived in"
        );
        // Acknowledged buffers come back in completions; dropping them frees their slots.
        while a.poll_completion().is_some() {}
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.registered_sends, sa.copied_sends, sa.transmit_copies),
        (100, 0, 0)
    );
    assert_eq!((sb.registered_recvs, sb.heap_recvs), (100, 0));
}

/// A receiver that falls behind, then reads in bursts: the sender keeps no more packets
/// outstanding than the receiver's socket can queue (the window capped to the socket's
/// receive buffer), so the kernel drops nothing: no resend but a needless one. With RPP's
/// default window of 256 packets of 64 KiB a sender overran the 8 MiB the kernel grants
/// (126 such datagrams).
#[test]
fn a_sender_does_not_overrun_a_slow_receivers_socket() {
    let (mut a, mut b, to_b, to_a) = pair("");
    let len = 60_000;
    let count = 1200;
    let (mut sent, mut got) = (0, 0);
    // Each round delivers at least a window of the receiver's socket (126 messages here,
    // 6 on a host whose rmem_max stays at its 208 KiB default): a bounded count of
    // rounds, not a clock, says the exchange is stuck.
    for round in 0.. {
        if got == count {
            break;
        }
        assert!(round < 1000, "stuck at {got} of {count}");
        // The sender runs alone for a while: it sends what the window lets it.
        for _ in 0..2000 {
            while sent < count {
                let mut m = a.alloc(len);
                m.fill((sent % 251) as u8);
                match a.send(to_b, m) {
                    Ok(_) => sent += 1,
                    Err(_) => break,
                }
            }
            a.progress();
            while a.poll_completion().is_some() {}
        }
        // Then the receiver catches up.
        for _ in 0..2000 {
            b.progress();
            while let Some(d) = b.recv() {
                assert_eq!(d.data.len(), len);
                assert!(
                    d.data.iter().all(|&x| x == (got % 251) as u8),
                    "message {got}"
                );
                got += 1;
            }
        }
    }
    let rpp = a.peer_stats(to_b).unwrap();
    // Nothing was lost in the receiver's socket: every resend, if any, was needless.
    // The receiver runs only every other phase, so on a slow or busy host the sender's
    // timer may expire while its packets wait, queued, in the socket; such a resend
    // reaches the receiver as a duplicate (the original came first). A resend of a
    // datagram the socket dropped would fill a hole instead. (The sender learns that a
    // resend was needless only from a later acknowledgement, which the last round may
    // not leave it time to read: the receiver's count is the one to compare.)
    let dups = b.peer_stats(to_a).unwrap().dup_packets;
    assert_eq!(rpp.retransmitted, dups, "{rpp:?}");
    assert!(
        rpp.peer_credit <= 126,
        "the window within the socket: {rpp:?}"
    );
}

/// A client endpoint with `connect_one_peer`: its socket is connected to the server, so
/// its sends name no address (small packets put together and `send`, large ones
/// gathered), a stranger's datagrams never reach it, and a second peer is refused.
#[test]
fn a_client_connected_to_its_one_peer_talks_to_it_alone() {
    for reliable in [true, false] {
        let server_opts = Options::default()
            .with_accept_unknown_peers(true)
            .with_reliable(reliable);
        let mut server = Endpoint::open_with("udp://127.0.0.1:0", server_opts).unwrap();
        let client_opts = Options::default()
            .with_connect_one_peer(true)
            .with_reliable(reliable);
        let mut client = Endpoint::open_with("udp://127.0.0.1:0", client_opts).unwrap();
        let to_server = client.insert_addr(&server.local_url()).unwrap();
        assert_eq!(client.insert_addr(&server.local_url()).unwrap(), to_server);
        let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let err = client
            .insert_addr(&format!("udp://{}", other.local_addr().unwrap()))
            .unwrap_err();
        assert!(matches!(err, InsertError::Connected { .. }), "{err}");

        // A stranger writes to the client: the kernel drops it (not delivered, and so
        // not counted either), and the exchange with the server goes on.
        let client_addr = client.local_url().trim_start_matches("udp://").to_owned();
        other.send_to(b"who am i", &client_addr).unwrap();

        // Both sides of SMALL_SEND, and (reliable) a fragmented message.
        let mut sizes = vec![0usize, 8, 200, 255, 256, 257, 300, 5000];
        if reliable {
            sizes.push(200_000);
        }
        for (i, &len) in sizes.iter().enumerate() {
            let mut m = client.alloc(len);
            m.fill(i as u8);
            client.send(to_server, m).unwrap();
            let d = wait_for(|| {
                client.progress();
                server.recv()
            })
            .expect("the server hears the client");
            assert_eq!(d.data.len(), len);
            assert!(d.data.iter().all(|&x| x == i as u8));
            let mut echo = server.alloc(len);
            echo.copy_from_slice(&d.data);
            server.send(d.peer, echo).unwrap();
            let e = wait_for(|| {
                server.progress();
                client.recv()
            })
            .expect("the client hears the answer");
            assert_eq!(e.peer, to_server);
            assert_eq!(&e.data[..], &d.data[..]);
        }
        assert_eq!(client.stats().unknown_source, 0);
        assert!(
            client.recv().is_none(),
            "the stranger's datagram never arrives"
        );
    }
}

/// Sizes of a stream of `n` messages up to `max` bytes, seeded: log-uniform (as many
/// below 1 KiB as above 256 KiB, a mean of tens of KiB), every thousandth `max`.
fn random_sizes(seed: u64, n: usize, max: usize) -> Vec<usize> {
    let mut state = seed;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let bits = u64::from(usize::BITS - max.leading_zeros());
    (0..n)
        .map(|i| {
            let r = next();
            if i % 1000 == 999 {
                return max;
            }
            ((r >> 8) % (1u64 << (r % bits))) as usize
        })
        .collect()
}

/// Byte `j` of message `i`: its place in the stream and in the message, so a byte of
/// another message or another offset is seen.
fn pattern_byte(i: usize, j: usize) -> u8 {
    (i.wrapping_mul(131) ^ j.wrapping_mul(7) ^ (j >> 8)) as u8
}

/// Segmentation offload end to end: ten thousand messages of random sizes up to a
/// mebibyte, in datagrams of at most 1472 bytes sent up to 64 to a system call and taken
/// back coalesced, arrive exactly once and in order with every byte as sent, and every
/// send completes.
#[test]
fn ten_thousand_random_messages_offloaded_and_coalesced_arrive_exactly_once_in_order() {
    let (mut a, mut b, to_b, to_a) = pair("?gso=1&mtu=1472");
    assert_eq!(a.capabilities().mtu, 1472);
    let sizes = random_sizes(5, 10_000, 1 << 20);
    let total: usize = sizes.iter().sum();
    assert!(
        total > 200 << 20,
        "random sizes average tens of KiB: {total}"
    );
    let (mut next, mut got, mut acked) = (0, 0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while got < sizes.len() || acked < sizes.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "stuck at {next} sent, {got} received, {acked} acknowledged"
        );
        while next < sizes.len() {
            let mut m = a.alloc(sizes[next]);
            for (j, x) in m.iter_mut().enumerate() {
                *x = pattern_byte(next, j);
            }
            match a.send(to_b, m) {
                Ok(_) => next += 1,
                Err(e) if e.error.is_would_block() => break,
                Err(e) => panic!("{e}"),
            }
        }
        a.progress();
        while let Some(d) = b.recv() {
            assert_eq!(d.peer, to_a);
            assert_eq!(d.data.len(), sizes[got], "message {got}");
            let bad = d
                .data
                .iter()
                .enumerate()
                .find(|&(j, &x)| x != pattern_byte(got, j));
            assert_eq!(bad, None, "message {got}: first wrong byte");
            got += 1;
        }
        while let Some(c) = a.poll_completion() {
            match c {
                Completion::Sent { .. } => acked += 1,
                other => assert!(matches!(other, Completion::Connected { .. }), "{other:?}"),
            }
        }
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        sa.gso_sends > 0 && sa.gso_segments > 2 * sa.gso_sends,
        "datagrams went out several to a call: {sa:?}"
    );
    assert!(
        sb.gro_buffers > 0 && sb.gro_segments > 2 * sb.gro_buffers,
        "loopback coalesced them: {sb:?}"
    );
    assert_eq!((sa.gso_fallbacks, sb.malformed, sb.io_errors), (0, 0, 0));
    assert_eq!(sb.recvs, 10_000);
}

/// A ping-pong's answer reaches the application with one receiving system call: once the
/// datagram is in the socket (mio says so), `recv` takes it without a second call to find
/// the socket empty. The batch still grows for a stream.
#[test]
fn a_lone_datagram_is_received_with_one_system_call() {
    // Without a socket of its own for its one peer: with one, every 64th pass also reads
    // the shared socket (the udp backend's tests count that), and which pass is measured
    // here depends on how many the waits took.
    // The sender's retransmission timer is set beyond the run: a pause of the thread
    // between two messages (a busy host) would otherwise let it resend one, and the
    // receiver would find that copy before the next message.
    let mut slow_timer = Options::default();
    slow_timer.rpp.rto_initial = Duration::from_secs(30);
    slow_timer.rpp.rto_min = Duration::from_secs(30);
    slow_timer.rpp.rto_max = Duration::from_secs(30);
    let mut a = Endpoint::open_with("udp://127.0.0.1:0", slow_timer).unwrap();
    let mut b = open_without_peer_socket();
    let to_b = a.insert_addr(&b.local_url()).unwrap();
    b.insert_addr(&a.local_url()).unwrap();
    let mut poll = mio::Poll::new().unwrap();
    let mut events = mio::Events::with_capacity(8);
    b.register(poll.registry(), mio::Token(1)).unwrap();
    let mut checked = 0;
    for i in 0..20u8 {
        // b has found its socket empty: the next datagram comes after a dry spell.
        while b.recv().is_some() {}
        a.send(to_b, myri_transport::Buf::copy_of(&[i; 8])).unwrap();
        let mut ready = false;
        for _ in 0..100 {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            if !events.is_empty() {
                ready = true;
                break;
            }
        }
        assert!(ready, "the datagram arrives");
        let before = b.stats();
        let d = b.recv();
        let after = b.stats();
        if let Some(d) = d {
            assert_eq!(&d.data[..], &[i; 8]);
            assert_eq!(
                (
                    after.recv_syscalls - before.recv_syscalls,
                    after.recv_syscalls_empty - before.recv_syscalls_empty
                ),
                (1, 0),
                "message {i}: one call, and it found the datagram"
            );
            checked += 1;
        } else {
            // A datagram RPP took but did not deliver (an introduction, an ack): the
            // message follows.
            let d = wait_for(|| {
                a.progress();
                b.recv()
            })
            .expect("delivered");
            assert_eq!(&d.data[..], &[i; 8]);
        }
        while a.poll_completion().is_some() {}
    }
    assert!(checked >= 15, "only {checked} of 20 messages came alone");
    // A stream still comes in batches.
    for i in 0..200u32 {
        a.send(to_b, myri_transport::Buf::copy_of(&i.to_be_bytes()))
            .unwrap_or_else(|e| panic!("{}", e.error));
    }
    let mut got = 0;
    while got < 200 {
        a.progress();
        if let Some(d) = wait_for(|| b.recv()) {
            assert_eq!(&d.data[..], &(got as u32).to_be_bytes());
            got += 1;
        }
    }
    let s = b.stats();
    assert!(
        s.recv_syscalls - s.recv_syscalls_empty < s.datagrams_received,
        "some calls took several datagrams: {s:?}"
    );
}

#[test]
fn reliable_external_memory_is_sent_from_where_it_lies_and_comes_back_acknowledged() {
    use myri_transport::{Buf, ExternalBytes};
    use std::sync::Arc;
    let (mut a, mut b, to_b, _) = pair("");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mem: Arc<dyn ExternalBytes> = Arc::new(bytes.clone());
    let buf = Buf::external(mem.clone(), 1000..250_000).unwrap();
    let at = buf.as_ptr();
    assert!(Buf::external(mem.clone(), 0..300_001).is_none());
    let sent = a.send(to_b, buf).unwrap();
    let d = wait_for(|| {
        a.progress();
        b.recv()
    })
    .expect("the message arrives");
    assert_eq!(&d.data[..], &bytes[1000..250_000]);
    let back = wait_for(|| {
        b.progress();
        match a.poll_completion() {
            Some(Completion::Sent { id, buf, .. }) if id == sent => Some(buf),
            _ => None,
        }
    })
    .expect("acknowledged");
    assert!(back.is_external(), "the same memory comes back, read-only");
    assert_eq!(back.as_ptr(), at);
    drop(back);
    assert_eq!(
        Arc::strong_count(&mem),
        1,
        "nothing holds the memory any more"
    );
    let s = a.stats();
    assert_eq!(
        (s.external_sends, s.copied_sends, s.transmit_copies),
        (1, 0, 0)
    );
}

/// The one peer's own socket (`Options::peer_socket`, on by default) under a stream: a
/// server that hears from one client gives it a connected socket, a second client retires
/// that socket in the middle of the first one's stream, and every message of both arrives
/// whole and in order (a datagram the kernel was handing to the closing socket is sent
/// again by RPP). With the option off, none is opened.
#[test]
fn a_second_client_retires_the_first_ones_socket_mid_stream_and_nothing_is_lost() {
    let mut server = Endpoint::open_with(
        "udp://127.0.0.1:0",
        Options::default().with_accept_unknown_peers(true),
    )
    .unwrap();
    let url = server.local_url();
    let mut first = open("udp://127.0.0.1:0");
    let mut second = open("udp://127.0.0.1:0");
    let (to_server_1, to_server_2) = (
        first.insert_addr(&url).unwrap(),
        second.insert_addr(&url).unwrap(),
    );
    const MESSAGES: usize = 600;
    let (mut sent_1, mut sent_2) = (0, 0);
    let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut by_peer = std::collections::HashMap::new();
    let mut sockets_seen = 0;
    wait_for(|| {
        // The second client starts half way through the first one's stream.
        send_some(&mut first, to_server_1, 1, &mut sent_1, MESSAGES);
        if sent_1 >= MESSAGES / 2 {
            send_some(&mut second, to_server_2, 2, &mut sent_2, MESSAGES);
        }
        first.progress();
        second.progress();
        while let Some(d) = server.recv() {
            let from = d.data[8];
            by_peer.entry(from).or_insert(d.peer);
            assert_eq!(by_peer[&from], d.peer, "one peer per client");
            got[usize::from(from) - 1].push(d.data.to_vec());
        }
        sockets_seen = sockets_seen.max(server.stats().peer_sockets);
        (got[0].len() == MESSAGES && got[1].len() == MESSAGES).then_some(())
    })
    .expect("every message of both clients arrives");
    for (k, from) in [(0, 1u8), (1, 2u8)] {
        for (i, m) in got[k].iter().enumerate() {
            assert_eq!(m, &numbered_message(from, i), "client {from}, message {i}");
        }
    }
    assert_eq!(sockets_seen, 1, "the first client had a socket of its own");
    assert_eq!(server.stats().peer_sockets, 1);

    // Off: none.
    let mut plain = open_without_peer_socket();
    let to_first = plain.insert_addr(&first.local_url()).unwrap();
    first.insert_addr(&plain.local_url()).unwrap();
    plain
        .send(to_first, myri_transport::Buf::copy_of(b"hello"))
        .unwrap();
    let d = wait_for(|| {
        plain.progress();
        first.recv()
    })
    .unwrap();
    assert_eq!(&d.data[..], b"hello");
    assert_eq!(plain.stats().peer_sockets, 0);
}

/// Message `i` of client `from` in the test above: its number, then its client's byte.
fn numbered_message(from: u8, i: usize) -> Vec<u8> {
    let len = 16 + (i * 977) % 3000;
    let mut m = vec![from; len];
    m[..8].copy_from_slice(&(i as u64).to_le_bytes());
    m
}

/// Sends client `from`'s next messages to `to` until `total` are out, the endpoint has
/// no room, or 50 more went (so that the server gets a turn).
fn send_some(ep: &mut Endpoint, to: Peer, from: u8, sent: &mut usize, total: usize) {
    while *sent < total {
        match ep.send(
            to,
            myri_transport::Buf::copy_of(&numbered_message(from, *sent)),
        ) {
            Ok(_) => *sent += 1,
            Err(e) if e.error.is_would_block() => break,
            Err(e) => panic!("{e}"),
        }
        if (*sent).is_multiple_of(50) {
            break;
        }
    }
}
