//! The UDP backend's tests: adaptive receive batches, segmentation offload and receive
//! coalescing over loopback.

use super::*;

/// Sends `count` numbered datagrams of 40 bytes to `to` from a plain socket.
fn burst(to: SocketAddr, first: u8, count: u8) -> std::net::UdpSocket {
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in first..first + count {
        tx.send_to(&[i; 40], to).unwrap();
    }
    tx
}

/// Everything one progress pass takes.
fn pass(b: &mut UdpBackend) -> Vec<(u8, usize, SocketAddr)> {
    b.progress();
    let mut got = Vec::new();
    while let Some(i) = b.recv() {
        let RemoteAddr::Udp(from) = i.from else {
            panic!("a udp backend hears from udp addresses")
        };
        got.push((i.data[0], i.data.len(), from));
    }
    got
}

#[test]
fn a_waiting_backend_polls_one_datagram_and_a_stream_grows_the_batch() {
    let mut b = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    let to = b.local;
    // Nothing waiting: a one-datagram poll, and the batch stays at one.
    assert!(pass(&mut b).is_empty());
    assert_eq!(b.batch, 1);
    // One datagram (a ping-pong): taken by that poll, with its sender.
    let tx = burst(to, 0, 1);
    assert_eq!(pass(&mut b), vec![(0, 40, tx.local_addr().unwrap())]);
    // A burst: 1, then 2, 4, 8, 8 ... per call until the pass's budget is spent; the
    // rest in the next pass; every datagram once, in order.
    let tx = burst(to, 1, 40);
    let mut seen: Vec<u8> = Vec::new();
    let first = pass(&mut b);
    assert_eq!(first.len(), RECV_BUDGET);
    assert_eq!(b.batch, RECV_BATCH);
    seen.extend(first.iter().map(|g| g.0));
    for _ in 0..4 {
        seen.extend(pass(&mut b).iter().map(|g| g.0));
    }
    assert_eq!(seen, (1..41).collect::<Vec<u8>>());
    assert!(pass(&mut b).is_empty());
    assert_eq!(b.batch, 1, "an empty socket brings the batch back to one");
    drop(tx);
}

/// Datagram `i` of a test batch: `len` bytes, a 4-byte header `[tag, i, 0, 0]` and a
/// payload of `i ^ tag`.
fn numbered(tag: u8, i: u8, len: usize) -> (Vec<u8>, Vec<u8>) {
    (vec![tag, i, 0, 0], vec![i ^ tag; len - 4])
}

/// Sends `lens.len()` numbered datagrams from `b` to `to` through `send_gather`, then
/// flushes.
fn send_batch(b: &mut UdpBackend, to: SocketAddr, tag: u8, lens: &[usize]) {
    let to = RemoteAddr::Udp(to);
    for (i, &len) in lens.iter().enumerate() {
        assert!(b.can_send(&to));
        let (h, p) = numbered(tag, i as u8, len);
        b.send_gather(&to, &h, &p).unwrap();
    }
    b.flush().unwrap();
}

/// Whether `d` is datagram `i` of a batch tagged `tag`, of `len` bytes.
fn is_numbered(d: &[u8], tag: u8, i: u8, len: usize) -> bool {
    d.len() == len && d[..4] == [tag, i, 0, 0] && d[4..].iter().all(|&x| x == i ^ tag)
}

/// Ten datagrams of 1000 bytes and a last one of 300.
const BATCH: [usize; 11] = [
    1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 300,
];

#[test]
fn an_offloaded_batch_arrives_as_its_datagrams_intact_and_in_order() {
    let mut tx = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    assert!(tx.gso_on, "this kernel offers UDP segmentation offload");
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    send_batch(&mut tx, rx.local_addr().unwrap(), 7, &BATCH);
    let c = tx.counters;
    assert_eq!((c.gso_sends, c.gso_segments, c.gso_fallbacks), (1, 11, 0));
    let mut buf = [0u8; 2048];
    for (i, &len) in BATCH.iter().enumerate() {
        let (n, from) = rx.recv_from(&mut buf).unwrap();
        assert_eq!(from, tx.local);
        assert!(is_numbered(&buf[..n], 7, i as u8, len), "datagram {i}");
    }
    // A datagram of another size, or longer than the first, starts a new send; one
    // that would exceed 64 segments too.
    let lens: Vec<usize> = [500, 500, 900, 900, 900]
        .into_iter()
        .chain([100; 70])
        .collect();
    send_batch(&mut tx, rx.local_addr().unwrap(), 8, &lens);
    let c = tx.counters;
    assert_eq!(
        (c.gso_sends, c.gso_segments),
        (1 + 4, 11 + 75),
        "500 x2; 900 x3 and a shorter last 100; 100 x64; 100 x5"
    );
    rx.set_nonblocking(true).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        let n = rx.recv(&mut buf).unwrap();
        assert!(is_numbered(&buf[..n], 8, i as u8, len), "datagram {i}");
    }
    assert!(rx.recv(&mut buf).is_err(), "nothing more");
}

#[test]
fn coalesced_datagrams_are_split_into_views_of_one_slot() {
    let mut tx = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    let mut rx = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    assert!(rx.gro_on, "this kernel offers UDP receive coalescing");
    let free = rx.pool.available();
    send_batch(&mut tx, rx.local, 3, &BATCH);
    rx.progress();
    let mut got = Vec::new();
    while let Some(i) = rx.recv() {
        assert_eq!(i.from, RemoteAddr::Udp(tx.local));
        got.push(i.data);
    }
    assert_eq!(got.len(), BATCH.len());
    for (i, (d, &len)) in got.iter().zip(&BATCH).enumerate() {
        assert!(is_numbered(d, 3, i as u8, len), "datagram {i}");
        assert!(d.is_registered());
    }
    let c = rx.counters;
    assert!(
        c.gro_buffers >= 1 && c.gro_segments >= 2,
        "loopback coalesced the offloaded datagrams: {c:?}"
    );
    assert_eq!(c.malformed, 0);
    // Received into as many slots as there were coalesced buffers; every slot comes
    // back once its last view is dropped.
    let in_views = free - rx.pool.available();
    assert!(in_views < BATCH.len(), "{in_views} slots for 11 datagrams");
    let last = got.pop().unwrap();
    drop(got);
    let held = |rx: &UdpBackend| rx.rx.iter().filter(|b| matches!(b, RxBuf::Slot(_))).count();
    assert_eq!(
        rx.pool.available() + held(&rx) + 1,
        free,
        "the last view holds one"
    );
    drop(last);
    assert_eq!(rx.pool.available() + held(&rx), free);
}

#[test]
fn coalesced_datagrams_of_two_senders_stay_apart() {
    let mut a = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    let mut b = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    let mut rx = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    for round in 0..3 {
        send_batch(&mut a, rx.local, 1, &BATCH);
        send_batch(&mut b, rx.local, 2, &BATCH[round..]);
    }
    // What each sender sent, in order: (index in its batch, length).
    let expect = |tag: u8| -> Vec<(u8, usize)> {
        let skip = |round: usize| if tag == 1 { 0 } else { round };
        (0..3)
            .flat_map(|round| {
                BATCH[skip(round)..]
                    .iter()
                    .enumerate()
                    .map(|(i, &len)| (i as u8, len))
            })
            .collect()
    };
    let mut got: [Vec<RecvBuf>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..100 {
        rx.progress();
        while let Some(i) = rx.recv() {
            let from = match i.from {
                RemoteAddr::Udp(f) if f == a.local => 0,
                RemoteAddr::Udp(f) if f == b.local => 1,
                other => panic!("from {other:?}"),
            };
            got[from].push(i.data);
        }
    }
    for (tag, got) in [(1u8, &got[0]), (2, &got[1])] {
        let expect = expect(tag);
        assert_eq!(got.len(), expect.len(), "sender {tag}");
        for (d, &(i, len)) in got.iter().zip(&expect) {
            assert!(is_numbered(d, tag, i, len), "sender {tag}, datagram {i}");
        }
    }
    assert!(rx.counters.gro_buffers >= 2, "{:?}", rx.counters);
}

#[test]
fn a_connected_socket_sends_its_batches_to_its_peer() {
    let mut tx = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = rx.local_addr().unwrap();
    tx.connect(&RemoteAddr::Udp(to)).unwrap();
    send_batch(&mut tx, to, 4, &BATCH);
    assert_eq!(tx.counters.gso_sends, 1);
    let mut buf = [0u8; 2048];
    for (i, &len) in BATCH.iter().enumerate() {
        let n = rx.recv(&mut buf).unwrap();
        assert!(is_numbered(&buf[..n], 4, i as u8, len), "datagram {i}");
    }
}

proptest::proptest! {
    #[test]
    fn a_coalesced_buffer_splits_into_its_datagrams_exactly(
        len in 0usize..70_000,
        segment in 0usize..70_000,
    ) {
        let ranges: Vec<_> = segment_ranges(len, segment).collect();
        let mut at = 0;
        for (i, r) in ranges.iter().enumerate() {
            proptest::prop_assert_eq!(r.start, at, "back to back from 0");
            proptest::prop_assert!(!r.is_empty());
            if i + 1 < ranges.len() {
                proptest::prop_assert_eq!(r.len(), segment.max(1));
            } else {
                proptest::prop_assert!(r.len() <= segment.max(1));
            }
            at = r.end;
        }
        proptest::prop_assert_eq!(at, len, "the whole buffer");
    }
}

#[test]
fn a_refused_offload_sends_one_by_one_and_loses_nothing() {
    let mut tx = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(true)).unwrap();
    // Without UDP checksums the kernel refuses segmentation offload (EINVAL).
    sys::set_no_check(&tx.socket).unwrap();
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    for round in 0..2u8 {
        send_batch(&mut tx, rx.local_addr().unwrap(), round, &BATCH);
        for (i, &len) in BATCH.iter().enumerate() {
            let n = rx.recv(&mut buf).unwrap();
            assert!(is_numbered(&buf[..n], round, i as u8, len), "{round}: {i}");
        }
        assert!(rx.recv(&mut buf).is_err(), "nothing more");
    }
    let c = tx.counters;
    assert_eq!(
        (c.gso_fallbacks, c.gso_sends, c.io_errors),
        (1, 0, 0),
        "refused once, then not tried again"
    );
    assert!(!tx.gso_ok);
}

#[test]
fn the_path_decides_the_datagram_size_unless_the_url_does() {
    let peer = RemoteAddr::Udp("127.0.0.1:9".parse().unwrap());
    // Loopback carries 64 KiB: datagrams stay whole, no offload, no coalescing.
    let mut auto = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    assert_eq!(auto.peer_mtu(&peer), MAX_DATAGRAM);
    assert!(!auto.gso_on && !auto.gro_on);
    // `mtu=` wins; small datagrams are worth offloading.
    let mut small = UdpBackend::open("127.0.0.1", 0, Some(1472), None).unwrap();
    assert_eq!(small.peer_mtu(&peer), 1472);
    assert!(small.gso_on && small.gro_on);
    let mut off = UdpBackend::open("127.0.0.1", 0, Some(1472), Some(false)).unwrap();
    assert_eq!(off.peer_mtu(&peer), 1472);
    assert!(!off.gso_on && !off.gro_on);
    // Off: the whole datagram goes out at once, nothing is staged.
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = RemoteAddr::Udp(rx.local_addr().unwrap());
    let (h, p) = numbered(1, 0, 1000);
    off.send_gather(&to, &h, &p).unwrap();
    let mut buf = [0u8; 2048];
    assert_eq!(rx.recv(&mut buf).unwrap(), 1000);
    assert_eq!(off.counters.gso_sends, 0);
}

#[test]
fn icmp_errors_under_recverr_are_counted_and_their_queue_emptied() {
    let mut b = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    // A port nobody listens on: a datagram to it brings back an ICMP port-unreachable,
    // which (under IP_RECVERR) waits on the error queue and fails the next call.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = RemoteAddr::Udp(closed.local_addr().unwrap());
    drop(closed);
    let (h, p) = numbered(9, 0, 40);
    b.send_gather(&to, &h, &p).unwrap();
    b.flush().unwrap();
    // The error fails a receive (the kernel queues the message before it sets the error),
    // is counted, and the receive empties the queue.
    for _ in 0..100_000 {
        if b.counters.io_errors > 0 {
            break;
        }
        pass(&mut b);
        std::thread::yield_now();
    }
    assert_eq!(b.counters.io_errors, 1, "{:?}", b.counters);
    assert_eq!(
        sys::drain_errors(&b.socket, 64),
        0,
        "the error queue was left full"
    );
    assert_eq!(
        b.counters.local_drops, 0,
        "loopback has no queue to drop from"
    );
    // A send to a live peer goes, whatever error the dead one left pending.
    b.send_gather(&to, &h, &p).unwrap();
    b.flush().unwrap();
    let live = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (h, p) = numbered(9, 7, 40);
    b.send_gather(&RemoteAddr::Udp(live.local_addr().unwrap()), &h, &p)
        .unwrap();
    b.flush().unwrap();
    let mut got = [0u8; 64];
    live.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let n = live.recv(&mut got).unwrap();
    assert!(is_numbered(&got[..n], 9, 7, 40));
    // The socket still receives.
    let tx = burst(b.local, 1, 1);
    let mut seen = Vec::new();
    for _ in 0..100_000 {
        seen = pass(&mut b);
        if !seen.is_empty() {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(seen, vec![(1, 40, tx.local_addr().unwrap())]);
}

/// Passes until `want` datagrams came (bounded: loopback hands a datagram over within
/// the sending call, so a few passes are plenty).
fn take(b: &mut UdpBackend, want: usize) -> Vec<(u8, usize, SocketAddr)> {
    let mut got = Vec::new();
    for _ in 0..10_000 {
        got.extend(pass(b));
        if got.len() >= want {
            break;
        }
        std::thread::yield_now();
    }
    got
}

#[test]
fn the_one_peer_gets_its_own_connected_socket_and_others_still_get_through() {
    let (mut b, peer, peer_addr) = with_peer_socket();
    assert_eq!(b.counters.peer_sockets, 1);
    let own = b.peer.as_ref().expect("a socket for the one peer");
    assert_eq!(own.socket.peer_addr().unwrap(), peer_addr);
    assert_eq!(
        own.socket.local_addr().unwrap(),
        b.local,
        "same port as the shared one"
    );
    // The port is still the endpoint's alone: a plain bind fails as before.
    let err = std::net::UdpSocket::bind(b.local).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AddrInUse);

    // The peer's datagrams come in on its own socket; sends to it leave by it, from the
    // endpoint's address.
    peer.send_to(&[1; 40], b.local).unwrap();
    assert_eq!(take(&mut b, 1), vec![(1, 40, peer_addr)]);
    let (h, p) = numbered(3, 0, 40);
    b.send_gather(&RemoteAddr::Udp(peer_addr), &h, &p).unwrap();
    b.flush().unwrap();
    peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut got = [0u8; 64];
    let (n, from) = peer.recv_from(&mut got).unwrap();
    assert!(is_numbered(&got[..n], 3, 0, 40));
    assert_eq!(from, b.local);
    // A ping-pong's waiting pass reads the peer's socket alone: one call, and the shared
    // socket once every SHARED_PERIOD passes.
    let calls = b.counters.recv_calls;
    for _ in 0..SHARED_PERIOD {
        pass(&mut b);
    }
    assert_eq!(b.counters.recv_calls - calls, SHARED_PERIOD + 1);

    // Someone else is heard within SHARED_PERIOD passes, on the shared socket.
    let other = burst(b.local, 7, 1);
    let mut seen = Vec::new();
    for _ in 0..SHARED_PERIOD {
        seen.extend(pass(&mut b));
    }
    assert_eq!(seen, vec![(7, 40, other.local_addr().unwrap())]);
    assert!(b.peer.is_some());
}

#[test]
fn a_second_peer_retires_the_socket_and_loses_nothing_it_held() {
    let (mut b, peer, peer_addr) = with_peer_socket();
    assert!(b.peer.is_some());
    // Five datagrams wait on the peer's socket, unread, when the second peer comes.
    for i in 0..5 {
        peer.send_to(&[i; 40], b.local).unwrap();
    }
    b.peer_added(&RemoteAddr::Udp("127.0.0.1:9".parse().unwrap()), 2, true);
    assert!(b.peer.is_none(), "a second peer retires it");
    // They are all handed out, in order, and later ones come on the shared socket.
    for i in 5..8 {
        peer.send_to(&[i; 40], b.local).unwrap();
    }
    let got = take(&mut b, 8);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..8).collect::<Vec<u8>>()
    );
    assert!(got.iter().all(|g| g.2 == peer_addr));
    // Without `allowed`, or with a connected socket, none is opened.
    let mut c = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    c.peer_added(&RemoteAddr::Udp(peer_addr), 1, false);
    assert!(c.peer.is_none());
    c.connect(&RemoteAddr::Udp(peer_addr)).unwrap();
    c.peer_added(&RemoteAddr::Udp(peer_addr), 1, true);
    assert!(c.peer.is_none());
    assert_eq!(c.counters.peer_sockets, 0);
}

#[test]
fn a_registered_backend_wakes_for_both_sockets_and_reads_both_before_a_sleep() {
    let (mut b, peer, peer_addr) = with_peer_socket();
    let mut poll = mio::Poll::new().unwrap();
    b.register(poll.registry(), mio::Token(3)).unwrap();
    assert!(b.peer.is_some(), "registering keeps the peer's socket");
    let mut events = mio::Events::with_capacity(4);
    let mut wakes = |poll: &mut mio::Poll| {
        poll.poll(&mut events, Some(std::time::Duration::from_secs(5)))
            .unwrap();
        events.iter().any(|e| e.token() == mio::Token(3))
    };
    // The peer's datagram wakes the poll (its socket was registered too), and a pass
    // takes it.
    peer.send_to(&[1; 40], b.local).unwrap();
    assert!(wakes(&mut poll));
    assert_eq!(pass(&mut b), vec![(1, 40, peer_addr)]);
    // A stranger's datagram wakes it as well; a plain pass that is not the periodic one
    // leaves it on the shared socket, a pass asked to read everything takes it (what a
    // caller runs before it sleeps again).
    let stranger = burst(b.local, 2, 1);
    assert!(wakes(&mut poll));
    while (b.passes + 1).is_multiple_of(SHARED_PERIOD) {
        pass(&mut b);
    }
    assert!(
        pass(&mut b).is_empty(),
        "a plain pass skips the shared socket"
    );
    b.read_all_next_pass();
    assert_eq!(pass(&mut b), vec![(2, 40, stranger.local_addr().unwrap())]);
    // A peer socket opened while registered is registered too.
    let mut c = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    let mut poll_c = mio::Poll::new().unwrap();
    c.register(poll_c.registry(), mio::Token(3)).unwrap();
    c.peer_added(&RemoteAddr::Udp(peer_addr), 1, true);
    assert!(c.peer.is_some());
    peer.send_to(&[3; 40], c.local).unwrap();
    assert!(wakes(&mut poll_c));
    assert_eq!(pass(&mut c), vec![(3, 40, peer_addr)]);
    c.deregister(poll_c.registry()).unwrap();
    b.deregister(poll.registry()).unwrap();
}

/// A backend whose one peer (a plain socket, returned with its address) has a socket of
/// its own.
fn with_peer_socket() -> (UdpBackend, std::net::UdpSocket, SocketAddr) {
    let mut b = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let peer_addr = peer.local_addr().unwrap();
    b.peer_added(&RemoteAddr::Udp(peer_addr), 1, true);
    (b, peer, peer_addr)
}

/// The estimate of what a datagram costs its receiver's socket is never below what this
/// kernel charges, and the capacity it gives is what the socket really queues.
#[test]
fn the_receive_capacity_is_what_the_socket_queues() {
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for len in [
        8, 100, 1472, 4000, 8192, 9000, 16_000, 16_384, 32_768, 65_507,
    ] {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(&vec![1; len], rx.local_addr().unwrap()).unwrap();
        let charged = sys::queued_charge(&rx).unwrap();
        assert!(
            kernel_charge(len) >= charged,
            "{len} bytes: estimated {} against {charged} charged",
            kernel_charge(len)
        );
    }
    let b = UdpBackend::open("127.0.0.1", 0, None, None).unwrap();
    let n = b
        .recv_capacity(65_507)
        .expect("a socket has a receive buffer") as usize;
    assert!(n >= 1);
    let tx_many = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let big = vec![7u8; 65_507];
    for _ in 0..n {
        tx_many.send_to(&big, b.local).unwrap();
    }
    let mut buf = vec![0u8; 65_536];
    let mut queued = 0;
    while b.socket.recv_from(&mut buf).is_ok() {
        queued += 1;
    }
    assert_eq!(queued, n, "every datagram within the capacity was queued");
}
