//! `shm://` endpoints: both sides of a region in one test process (each maps the region
//! on its own, as two processes would), raw and reliable, back-pressure, the heap
//! fallback, and a region left by a dead process.

mod common;

use common::{assert_same_messages, forge_dead_owner, take_deliveries, wait_for};
use myri_transport::{Buf, Completion, Endpoint, InsertError, OpenError, Options, PeerFailure};

/// A region name no other test or concurrent run uses.
fn unique(name: &str) -> String {
    format!("t{}-{name}", std::process::id())
}

fn open(url: &str) -> Endpoint {
    Endpoint::open(url).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

#[test]
fn raw_messages_are_written_and_read_in_the_region_with_no_copy() {
    let name = unique("raw");
    let url = format!("shm://{name}?reliable=0");
    let mut a = open(&url);
    let mut b = open(&url);
    let caps = a.capabilities();
    assert!(
        caps.reliable && caps.ordered && caps.copy_free,
        "a ring loses nothing and keeps order"
    );
    let to_b = a.insert_addr(&format!("shm://{name}")).unwrap();
    let to_a = b.insert_addr(&format!("shm://{name}")).unwrap();
    assert!(matches!(
        a.insert_addr("shm://other"),
        Err(InsertError::OtherRegion { .. })
    ));
    for i in 0..1000usize {
        let len = (i * 1237) % caps.mtu;
        let mut m = a.alloc(len);
        assert!(m.is_registered(), "a slot of the region");
        m.fill(i as u8);
        a.send(to_b, m).unwrap();
        let d = b.recv().expect("in the ring at once");
        assert_eq!((d.peer, d.data.len()), (to_a, len));
        assert!(d.data.iter().all(|&x| x == i as u8));
        assert!(d.data.is_registered(), "a view of the sender's slot");
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (
            sa.registered_sends,
            sa.copied_sends,
            sa.heap_sends,
            sa.heap_allocs
        ),
        (1000, 0, 0, 0)
    );
    assert_eq!((sb.registered_recvs, sb.heap_recvs), (1000, 0));
    drop((a, b));
    assert!(
        !myri_transport::shm_region_path(&name).exists(),
        "the last one out removes the region"
    );
}

/// A raw datagram written before a process takes the other side would be skipped by it:
/// `peer_attached` tells a sender when a datagram can reach someone (a UDP socket always
/// says yes).
#[test]
fn a_raw_sender_learns_when_the_other_side_is_taken() {
    let name = unique("attached");
    let url = format!("shm://{name}?reliable=0");
    let mut a = open(&url);
    let to_b = a.insert_addr(&format!("shm://{name}")).unwrap();
    assert!(!a.peer_attached(), "nobody on the other side yet");
    assert!(!a.peer_attached(), "asking again changes nothing");
    let mut b = open(&url);
    assert!(a.peer_attached(), "the other side taken");
    assert!(b.peer_attached(), "the first side was taken before");
    let to_a = b.insert_addr(&format!("shm://{name}")).unwrap();
    let mut m = a.alloc(5);
    m.copy_from_slice(b"hello");
    a.send(to_b, m).unwrap();
    let d = b.recv().expect("in the ring at once");
    assert_eq!((d.peer, &d.data[..]), (to_a, &b"hello"[..]));
    let mut u = open("udp://127.0.0.1:0");
    assert!(u.peer_attached());
}

#[test]
fn a_full_region_pushes_back_and_the_heap_fallback_is_copied_and_counted() {
    let name = unique("full");
    let url = format!("shm://{name}?reliable=0");
    let mut a = open(&url);
    let mut b = open(&url);
    let to_b = a.insert_addr(&format!("shm://{name}")).unwrap();
    b.insert_addr(&format!("shm://{name}")).unwrap();
    let mut sent = 0u32;
    let refused = loop {
        let mut m = a.alloc(4);
        m.copy_from_slice(&sent.to_le_bytes());
        match a.send(to_b, m) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
    };
    assert!(refused.error.is_would_block(), "{}", refused.error);
    assert_eq!(
        sent as usize,
        myri_transport::SHM_SLOTS,
        "every slot is with the peer"
    );
    assert!(
        !refused.buf.is_registered(),
        "no slot left: alloc fell back to the heap"
    );
    assert_eq!(
        &refused.buf[..],
        &sent.to_le_bytes(),
        "the refused buffer comes back intact"
    );
    assert_eq!(a.stats().would_block, 1);
    // The receiver reads (and drops) one message: its slot is the sender's again, and the
    // heap buffer is copied into it.
    let first = b.recv().unwrap();
    assert_eq!(&first.data[..], &0u32.to_le_bytes());
    drop(first);
    a.send(to_b, refused.buf).unwrap();
    assert_eq!(a.stats().copied_sends, 1);
    let mut got = Vec::new();
    while let Some(d) = b.recv() {
        got.push(u32::from_le_bytes(d.data[..4].try_into().unwrap()));
    }
    assert_eq!(got, (1..=sent).collect::<Vec<_>>());
}

#[test]
fn reliable_messages_of_any_size_arrive_in_order() {
    let name = unique("rel");
    let url = format!("shm://{name}");
    let mut a = open(&url);
    let mut b = open(&url);
    let to_b = a.insert_addr(&url).unwrap();
    b.insert_addr(&url).unwrap();
    let sizes: Vec<usize> = (0..60).map(|i| (i * 104_729) % 300_000).collect();
    let (mut next, mut got) = (0, 0);
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
            assert_eq!(d.data.len(), sizes[got]);
            assert!(d.data.iter().all(|&x| x == got as u8), "message {got}");
            got += 1;
        }
        (got == sizes.len()).then_some(())
    })
    .expect("all delivered");
    assert!(
        b.stats().registered_recvs > 0,
        "whole messages are views of the slot"
    );
}

#[test]
fn a_dead_peer_is_reported_and_its_side_taken_over_by_a_newcomer() {
    let name = unique("crash");
    let url = format!("shm://{name}?reliable=0");
    let peer_url = format!("shm://{name}");
    let mut a = open(&url);
    let mut b = open(&url);
    let to_b = a.insert_addr(&peer_url).unwrap();
    b.insert_addr(&peer_url).unwrap();
    // b receives one message and holds it; two more wait in the ring when b "dies".
    for i in 0..3u8 {
        a.inject(to_b, &[i; 10]).unwrap();
    }
    let held = b.recv().unwrap();
    assert_eq!(&held.data[..], &[0; 10]);
    assert!(
        matches!(Endpoint::open(&url), Err(OpenError::AddrInUse { .. })),
        "two live sides"
    );
    forge_dead_owner(&name, 1);
    let (why, unsent) = wait_for(|| match a.poll_completion() {
        Some(Completion::PeerFailed { peer, why, unsent }) if peer == to_b => Some((why, unsent)),
        _ => None,
    })
    .expect("the death is noticed");
    assert_eq!(why, PeerFailure::ProcessGone, "{why}");
    assert!(unsent.is_empty(), "raw mode keeps nothing to hand back");
    assert!(
        a.send(to_b, Buf::copy_of(b"x")).is_err(),
        "a failed peer takes no sends"
    );
    // A newcomer takes the dead side; what was queued for the dead one is not delivered.
    let mut c = open(&url);
    let to_a = c.insert_addr(&peer_url).unwrap();
    assert!(c.recv().is_none(), "no stale message");
    c.inject(to_a, b"i am new").unwrap();
    let got = wait_for(|| a.recv()).expect("the newcomer is heard");
    assert_eq!(&got.data[..], b"i am new");
    assert!(
        matches!(a.poll_completion(), Some(Completion::PeerRestarted { peer, .. }) if peer == to_b),
        "the handle works again"
    );
    a.inject(to_b, b"welcome").unwrap();
    assert_eq!(&wait_for(|| c.recv()).unwrap().data[..], b"welcome");
    drop(held);
    drop(b);
    // The slots the dead side held or never read are a's again: a full window fits.
    for i in 0..myri_transport::SHM_SLOTS {
        let m = a.alloc(8);
        assert!(m.is_registered(), "slot {i} came back");
        a.send(to_b, m).unwrap();
        drop(wait_for(|| c.recv()).unwrap());
    }
}

/// What a raw peer sent before it died is still delivered: the datagrams wait in the
/// ring (a long one in the dead side's slot, which stays mapped), and losing them would
/// lose messages the channel had taken, as a socket would not. The death is reported
/// beside them.
#[test]
fn what_a_dead_raw_peer_sent_before_it_died_is_delivered() {
    let name = unique("lastwords");
    let url = format!("shm://{name}?reliable=0");
    let peer_url = format!("shm://{name}");
    // a takes one delivery at a time from the ring, so that it notices the death while
    // the rest still wait there.
    let mut a =
        Endpoint::open_with(&url, Options::default().with_max_pending_deliveries(1)).unwrap();
    let mut b = open(&url);
    let to_b = a.insert_addr(&peer_url).unwrap();
    let to_a = b.insert_addr(&peer_url).unwrap();
    let long = vec![7u8; 60_000];
    // a has seen b alive: the first message arrived.
    b.inject(to_a, b"first").unwrap();
    assert_eq!(&wait_for(|| a.recv()).expect("first").data[..], b"first");
    b.inject(to_a, b"short").unwrap();
    b.send(to_a, Buf::copy_of(&long)).unwrap();
    b.inject(to_a, b"last").unwrap();
    forge_dead_owner(&name, 1);
    let failed = wait_for(|| match a.poll_completion() {
        Some(Completion::PeerFailed { peer, .. }) if peer == to_b => Some(()),
        _ => None,
    });
    assert!(failed.is_some(), "the death is noticed");
    let got = take_deliveries(&mut a);
    let expected = [b"short".to_vec(), long, b"last".to_vec()];
    assert_same_messages(&got, &expected);
    assert_eq!(a.stats().rpp_dropped, 0, "nothing dropped: {:?}", a.stats());
    drop(b);
}

#[test]
fn a_region_with_a_bad_header_is_refused() {
    let name = unique("bad");
    let path = myri_transport::shm_region_path(&name);
    std::fs::write(&path, vec![0xAB; 8192]).unwrap();
    // Too short for a region, with garbage for a magic word.
    let r = Endpoint::open(&format!("shm://{name}"));
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(r, Err(OpenError::BadRegion { .. })), "{r:?}");
}

#[test]
fn reliable_a_restarted_peer_gets_the_unacked_messages_back_and_nothing_stale_is_delivered() {
    restarted_peer(false);
}

#[test]
fn rpp_over_shm_a_restarted_peer_gets_the_unacked_messages_back_and_nothing_stale_is_delivered() {
    restarted_peer(true);
}

fn restarted_peer(rpp_over_shm: bool) {
    use myri_transport::Options;
    let name = unique(if rpp_over_shm {
        "restart-rpp"
    } else {
        "restart"
    });
    let url = format!("shm://{name}");
    let with = |incarnation| {
        Options::default()
            .with_incarnation(incarnation)
            .with_rpp_over_shm(rpp_over_shm)
    };
    let mut a = Endpoint::open_with(&url, with(50)).unwrap();
    let mut b = Endpoint::open_with(&url, with(100)).unwrap();
    let to_b = a.insert_addr(&url).unwrap();
    b.insert_addr(&url).unwrap();
    a.inject(to_b, b"m1").unwrap();
    let got = wait_for(|| {
        a.progress();
        b.recv()
    })
    .unwrap();
    assert_eq!(&got.data[..], b"m1");
    assert_eq!(a.is_native(), !rpp_over_shm);
    // Native reliability acknowledges what the application has dropped.
    drop(got);
    wait_for(|| {
        b.progress();
        match a.poll_completion() {
            Some(Completion::Sent { .. }) => Some(()),
            _ => None,
        }
    })
    .expect("m1 acknowledged");
    // b stops reading, two more messages go out, and b's process ends.
    a.inject(to_b, b"m2").unwrap();
    a.inject(to_b, b"m3").unwrap();
    drop(b);
    // A new process (a later incarnation) takes b's side and speaks.
    let mut c = Endpoint::open_with(&url, with(200)).unwrap();
    let to_a = c.insert_addr(&url).unwrap();
    c.inject(to_a, b"hi").unwrap();
    let unacked = wait_for(|| {
        c.progress();
        match a.poll_completion() {
            Some(Completion::PeerRestarted {
                peer,
                incarnation,
                unacked,
            }) if peer == to_b => Some((incarnation, unacked)),
            _ => None,
        }
    })
    .expect("the restart is seen");
    assert_eq!(unacked.0, 200);
    let back: Vec<&[u8]> = unacked.1.iter().map(|b| &b[..]).collect();
    assert_eq!(
        back,
        [&b"m2"[..], b"m3"],
        "what b never acknowledged comes back"
    );
    let hi = wait_for(|| {
        c.progress();
        a.recv()
    })
    .unwrap();
    assert_eq!(&hi.data[..], b"hi");
    a.inject(to_b, b"welcome").unwrap();
    let first = wait_for(|| {
        a.progress();
        c.recv()
    })
    .unwrap();
    assert_eq!(&first.data[..], b"welcome", "c never sees m2 or m3");
}
