//! `shm://` native reliability (reliable mode with no RPP): fragmentation and reassembly,
//! acknowledgement when the receiving application drops a message (or, for a message
//! carried inline in the ring, when the receiving endpoint takes it), hand-back of what a
//! dead peer never took, back-pressure, and the RPP-over-shm option. Both sides live in
//! this test process, each mapping the region on its own.

mod common;

use common::{assert_same_messages, forge_dead_owner, take_deliveries, wait_for};
use myri_transport::{Buf, Completion, Endpoint, Options, Peer, PeerFailure};

fn unique(name: &str) -> String {
    format!("t{}-n{name}", std::process::id())
}

/// Two native reliable endpoints on region `name`, each the other's peer.
fn native_pair(name: &str) -> (Endpoint, Endpoint, Peer, Peer) {
    let url = format!("shm://{name}");
    let mut a = Endpoint::open(&url).unwrap();
    let mut b = Endpoint::open(&url).unwrap();
    let to_b = a.insert_addr(&url).unwrap();
    let to_a = b.insert_addr(&url).unwrap();
    assert!(a.is_native() && b.is_native());
    (a, b, to_b, to_a)
}

/// Longer than an inline message: goes through a slot.
const SLOT_MESSAGE: usize = 100;

/// `tag` padded to [`SLOT_MESSAGE`] bytes.
fn slot_message(tag: &[u8]) -> Vec<u8> {
    let mut v = tag.to_vec();
    v.resize(SLOT_MESSAGE, b'.');
    v
}

/// A byte pattern that tells message `i` and its offsets apart.
fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k.wrapping_mul(31) ^ i) as u8).collect()
}

#[test]
fn messages_longer_than_a_slot_are_fragmented_and_reassembled_in_order() {
    let (mut a, mut b, to_b, to_a) = native_pair(&unique("frag"));
    let caps = a.capabilities();
    assert!(caps.reliable && caps.ordered && caps.copy_free);
    assert!(caps.max_message_size >= 1 << 20, "{caps:?}");
    assert_eq!(caps.inject_size, 64, "short messages travel in the ring");
    let slot = myri_transport::SHM_SLOT_LEN;
    // Around the slot size, several slots, and the full MiB; small ones in between.
    let sizes = [
        0,
        8,
        slot - 1,
        slot,
        slot + 1,
        3 * slot + 17,
        1 << 20,
        12,
        (1 << 20) - 5,
        2 * slot,
    ];
    let (mut next, mut got, mut acked) = (0, 0, 0);
    wait_for(|| {
        while next < sizes.len() {
            match a.send(to_b, Buf::from_vec(pattern(next, sizes[next]))) {
                Ok(id) => {
                    assert_eq!(id.0, next as u64);
                    next += 1;
                }
                Err(e) if e.error.is_would_block() => {
                    assert_eq!(e.buf.len(), sizes[next], "the refused buffer comes back");
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        a.progress();
        while let Some(d) = b.recv() {
            assert_eq!(d.peer, to_a);
            assert_eq!(d.data.len(), sizes[got], "message {got}");
            assert!(d.data[..] == pattern(got, sizes[got])[..], "message {got}");
            let in_slot = sizes[got] > caps.inject_size && sizes[got] <= slot;
            assert_eq!(d.data.is_registered(), in_slot, "message {got}");
            got += 1;
            b.recycle(d);
        }
        while let Some(c) = a.poll_completion() {
            if let Completion::Sent { id, buf, .. } = c {
                assert_eq!(
                    buf.len(),
                    sizes[id.0 as usize],
                    "the sent buffer comes back"
                );
                acked += 1;
            }
        }
        (acked == sizes.len()).then_some(())
    })
    .expect("all delivered and acknowledged");
    assert_eq!(got, sizes.len());
    assert!(!a.has_unacked());
    let sb = b.stats();
    assert_eq!(sb.recvs, sizes.len() as u64);
    assert_eq!(
        sb.heap_recvs, 8,
        "the multi-slot messages were reassembled, the 3 short ones copied out of the ring"
    );
    assert_eq!(sb.stale + sb.malformed, 0);
}

#[test]
fn one_slot_messages_are_not_copied_and_the_slot_itself_comes_back_when_dropped() {
    let (mut a, mut b, to_b, _) = native_pair(&unique("inplace"));
    let mut m = a.alloc(SLOT_MESSAGE);
    assert!(m.is_registered(), "a slot of the region");
    m.copy_from_slice(&slot_message(b"in place"));
    let at = m.as_ptr();
    let id = a.send(to_b, m).unwrap();
    let d = b.recv().expect("on the ring at once");
    assert!(d.data.is_registered(), "a view of the sender's slot");
    assert_eq!(&d.data[..], slot_message(b"in place"));
    // Not acknowledged while the receiver holds it.
    for _ in 0..100 {
        assert!(!matches!(
            a.poll_completion(),
            Some(Completion::Sent { .. })
        ));
    }
    assert!(a.has_unacked());
    drop(d);
    let back = wait_for(|| match a.poll_completion() {
        Some(Completion::Sent { id: i, buf, .. }) => Some((i, buf)),
        _ => None,
    })
    .unwrap();
    assert_eq!(back.0, id);
    assert!(back.1.is_registered());
    assert_eq!(back.1.as_ptr(), at, "the very slot comes back");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.registered_sends, sa.copied_sends), (1, 0));
    assert_eq!((sb.registered_recvs, sb.heap_recvs), (1, 0));
}

#[test]
fn back_pressure_when_the_slots_run_out_and_while_a_long_message_is_going_out() {
    let (mut a, mut b, to_b, _) = native_pair(&unique("bp"));
    // The receiver holds every message: the slots run out.
    let mut held = Vec::new();
    let refused = loop {
        let mut m = a.alloc(SLOT_MESSAGE);
        m[..4].copy_from_slice(&(held.len() as u32).to_le_bytes());
        match a.send(to_b, m) {
            Ok(_) => held.push(b.recv().expect("there")),
            Err(e) => break e,
        }
    };
    assert!(refused.error.is_would_block(), "{}", refused.error);
    assert_eq!(held.len(), myri_transport::SHM_SLOTS);
    assert_eq!(
        &refused.buf[..4],
        &64u32.to_le_bytes(),
        "the buffer comes back intact"
    );
    assert_eq!(a.stats().would_block, 1);
    // Three slots come back: a message of 5 slots goes out part-way and the next send
    // waits for it.
    held.drain(..3);
    // Their buffers come back in Sent completions; dropped, the slots are free.
    while a.poll_completion().is_some() {}
    let slot = myri_transport::SHM_SLOT_LEN;
    let long = pattern(7, 5 * slot);
    a.send(to_b, Buf::from_vec(long.clone())).unwrap();
    let e = a.send(to_b, Buf::copy_of(b"after")).unwrap_err();
    assert!(
        e.error.is_would_block(),
        "one long message part-way out at a time"
    );
    assert!(b.recv().is_none(), "not whole yet");
    held.clear();
    let d = wait_for(|| {
        while a.poll_completion().is_some() {}
        b.recv()
    })
    .unwrap();
    assert!(d.data[..] == long[..]);
    a.send(to_b, e.buf).unwrap();
    assert_eq!(&wait_for(|| b.recv()).unwrap().data[..], b"after");
}

#[test]
fn a_send_waits_for_a_process_on_the_other_side() {
    let name = unique("alone");
    let url = format!("shm://{name}");
    let mut a = Endpoint::open(&url).unwrap();
    let to_b = a.insert_addr(&url).unwrap();
    let e = a.send(to_b, Buf::copy_of(b"early")).unwrap_err();
    assert!(e.error.is_would_block(), "{}", e.error);
    let mut b = Endpoint::open(&url).unwrap();
    b.insert_addr(&url).unwrap();
    a.send(to_b, e.buf).unwrap();
    assert_eq!(&wait_for(|| b.recv()).unwrap().data[..], b"early");
    let c = wait_for(|| match a.poll_completion() {
        Some(Completion::Connected {
            peer,
            peer_incarnation,
        }) => Some((peer, peer_incarnation)),
        _ => None,
    });
    assert_eq!(c, Some((to_b, b.incarnation())));
}

#[test]
fn a_dead_peer_hands_back_every_message_it_did_not_take() {
    let name = unique("death");
    let (mut a, mut b, to_b, _) = native_pair(&name);
    let big = pattern(3, 3 * myri_transport::SHM_SLOT_LEN + 5);
    // m0 taken and dropped (acknowledged); m1 read and held; m2, m3 (3 slots) and m4 unread.
    a.inject(to_b, &slot_message(b"m0")).unwrap();
    drop(b.recv().unwrap());
    a.inject(to_b, &slot_message(b"m1")).unwrap();
    let held = b.recv().unwrap();
    a.inject(to_b, &slot_message(b"m2")).unwrap();
    a.send(to_b, Buf::from_vec(big.clone())).unwrap();
    a.inject(to_b, &slot_message(b"m4")).unwrap();
    forge_dead_owner(&name, 1);
    let mut sent = Vec::new();
    let (why, unsent) = wait_for(|| match a.poll_completion() {
        Some(Completion::Sent { id, .. }) => {
            sent.push(id.0);
            None
        }
        Some(Completion::PeerFailed { peer, why, unsent }) if peer == to_b => Some((why, unsent)),
        _ => None,
    })
    .expect("the death is noticed");
    assert_eq!(sent, [0], "what it took came back before");
    assert_eq!(why, PeerFailure::ProcessGone, "{why}");
    let back: Vec<&[u8]> = unsent.iter().map(|b| &b[..]).collect();
    let (m1, m2, m4) = (
        slot_message(b"m1"),
        slot_message(b"m2"),
        slot_message(b"m4"),
    );
    assert_eq!(
        back,
        [&m1[..], &m2[..], &big[..], &m4[..]],
        "in send order, intact"
    );
    assert!(
        a.send(to_b, Buf::copy_of(b"x")).is_err(),
        "a failed peer takes no sends"
    );
    assert_eq!(a.stats().peer_failures, 1);
    // Every slot is free again (the handed-back ones once dropped): a full window fits.
    drop(unsent);
    drop(held);
    drop(b);
    let mut c = Endpoint::open(&format!("shm://{name}")).unwrap();
    c.insert_addr(&format!("shm://{name}")).unwrap();
    c.inject(Peer(0), b"new").unwrap();
    assert_eq!(&wait_for(|| a.recv()).unwrap().data[..], b"new");
    assert!(
        matches!(a.poll_completion(), Some(Completion::PeerRestarted { peer, incarnation, unacked }) if peer == to_b && incarnation == c.incarnation() && unacked.is_empty())
    );
    assert!(c.recv().is_none(), "nothing meant for the dead one");
    for i in 0..myri_transport::SHM_SLOTS {
        let m = a.alloc(8);
        assert!(m.is_registered(), "slot {i} came back");
        assert_eq!(
            a.send(to_b, m).unwrap().0,
            i as u64,
            "ids start again at zero"
        );
        drop(wait_for(|| c.recv()).unwrap());
        while a.poll_completion().is_some() {}
    }
}

/// What a peer sent before it died is still delivered, whole, in order: a message on the
/// ring is in the region, which outlives the process, and the sender's side may already
/// have counted it as gone (the libfabric provider completes a send once it is on the
/// ring). The death is reported beside them. (What the survivor had sent the dead one
/// comes back, as above.)
#[test]
fn what_a_dead_peer_sent_before_it_died_is_delivered() {
    let name = unique("lastwords");
    let url = format!("shm://{name}");
    // a takes one delivery at a time from the ring, so that it notices the death while
    // the rest still wait there.
    let mut a =
        Endpoint::open_with(&url, Options::default().with_max_pending_deliveries(1)).unwrap();
    let mut b = Endpoint::open(&url).unwrap();
    let to_b = a.insert_addr(&url).unwrap();
    let to_a = b.insert_addr(&url).unwrap();
    assert!(a.is_native() && b.is_native());
    // a has seen b alive.
    b.inject(to_a, b"first").unwrap();
    assert_eq!(&wait_for(|| a.recv()).unwrap().data[..], b"first");
    let big = pattern(5, 3 * myri_transport::SHM_SLOT_LEN + 5);
    let sent = [
        b"inline".to_vec(),
        slot_message(b"slot"),
        big,
        b"last".to_vec(),
    ];
    for m in &sent {
        b.send(to_a, Buf::copy_of(m)).unwrap();
    }
    forge_dead_owner(&name, 1);
    let failed = wait_for(|| match a.poll_completion() {
        Some(Completion::PeerFailed { peer, why, .. }) if peer == to_b => Some(why),
        _ => None,
    });
    assert_eq!(failed, Some(PeerFailure::ProcessGone));
    let got = take_deliveries(&mut a);
    assert_same_messages(&got, &sent);
    assert_eq!(a.stats().stale, 0, "{:?}", a.stats());
    drop(b);
}

#[test]
fn rpp_over_shm_stays_available_as_an_option() {
    let name = unique("rpp");
    let url = format!("shm://{name}");
    let options = || Options::default().with_rpp_over_shm(true);
    let mut a = Endpoint::open_with(&url, options()).unwrap();
    let mut b = Endpoint::open_with(&url, options()).unwrap();
    assert!(a.is_reliable() && !a.is_native());
    let to_b = a.insert_addr(&url).unwrap();
    b.insert_addr(&url).unwrap();
    let sizes = [8, 100_000, 1 << 20, 3];
    for (i, &len) in sizes.iter().enumerate() {
        a.send(to_b, Buf::from_vec(pattern(i, len))).unwrap();
        let d = wait_for(|| {
            a.progress();
            b.recv()
        })
        .unwrap();
        assert!(d.data[..] == pattern(i, len)[..], "message {i}");
    }
    assert!(a.peer_stats(to_b).is_some(), "RPP runs");
    assert!(
        a.stats().transmit_copies > 0,
        "RPP's packets are copied into slots"
    );
}

#[test]
fn a_native_endpoint_refuses_a_peer_that_runs_rpp() {
    let name = unique("mixed");
    let url = format!("shm://{name}");
    let mut rpp = Endpoint::open_with(&url, Options::default().with_rpp_over_shm(true)).unwrap();
    let mut native = Endpoint::open(&url).unwrap();
    let to_rpp = native.insert_addr(&url).unwrap();
    let to_native = rpp.insert_addr(&url).unwrap();
    let e = native.send(to_rpp, Buf::copy_of(b"x")).unwrap_err();
    assert!(
        e.error.to_string().contains("both sides must agree"),
        "{}",
        e.error
    );
    // What the RPP side sends is not taken for messages.
    rpp.inject(to_native, b"hello").unwrap();
    for _ in 0..100 {
        rpp.progress();
        assert!(native.recv().is_none());
    }
    assert!(native.stats().stale > 0);
}

#[test]
fn short_messages_travel_inline_in_order_with_slot_ones_and_are_acknowledged_once_taken() {
    let (mut a, mut b, to_b, to_a) = native_pair(&unique("inline"));
    let inject = a.capabilities().inject_size;
    let sizes = [8, SLOT_MESSAGE, 0, inject, inject + 1, 3, 200, 12];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(i, len);
        let buf = if i.is_multiple_of(2) {
            let mut m = a.alloc(len);
            assert!(m.is_registered());
            m.copy_from_slice(&data);
            m
        } else {
            Buf::from_vec(data)
        };
        assert_eq!(a.send(to_b, buf).unwrap().0, i as u64);
    }
    // The receiver takes them all, in order, and holds them.
    let held: Vec<_> = (0..sizes.len())
        .map(|i| {
            let d = b.recv().expect("in order, at once");
            assert_eq!(d.peer, to_a);
            assert!(d.data[..] == pattern(i, sizes[i])[..], "message {i}");
            assert_eq!(d.data.is_registered(), sizes[i] > inject, "message {i}");
            d
        })
        .collect();
    assert!(b.recv().is_none(), "exactly once");
    // The inline ones are acknowledged though the application still holds them, with
    // their buffers intact; the slot ones only once dropped.
    let short: Vec<u64> = (0..sizes.len() as u64)
        .filter(|&i| sizes[i as usize] <= inject)
        .collect();
    let mut sent = Vec::new();
    let take = |a: &mut Endpoint, sent: &mut Vec<u64>| {
        while let Some(c) = a.poll_completion() {
            if let Completion::Sent { id, buf, .. } = c {
                let i = id.0 as usize;
                assert!(
                    buf[..] == pattern(i, sizes[i])[..],
                    "message {i} comes back"
                );
                assert_eq!(buf.is_registered(), i.is_multiple_of(2), "its own buffer");
                sent.push(id.0);
            }
        }
    };
    wait_for(|| {
        take(&mut a, &mut sent);
        (sent.len() == short.len()).then_some(())
    })
    .expect("the inline messages are acknowledged");
    for _ in 0..1000 {
        take(&mut a, &mut sent);
    }
    assert_eq!(sent, short, "not the ones held in slots");
    assert!(a.has_unacked());
    drop(held);
    wait_for(|| {
        take(&mut a, &mut sent);
        (sent.len() == sizes.len()).then_some(())
    })
    .expect("all acknowledged");
    assert!(!a.has_unacked());
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.registered_sends, sa.copied_sends), (4, 4));
    assert_eq!((sb.recvs, sb.heap_recvs), (8, 5));
    assert_eq!(sb.stale + sb.malformed, 0);
}

#[test]
fn inline_messages_a_dead_peer_did_not_take_come_back_intact_and_its_successor_skips_them() {
    let name = unique("inline-death");
    let url = format!("shm://{name}");
    let (mut a, mut b, to_b, _) = native_pair(&name);
    // i0 taken (acknowledged though held); s1 taken and held in its slot; i2, s3, i4 unread.
    a.inject(to_b, b"i0").unwrap();
    let taken = b.recv().unwrap();
    a.inject(to_b, &slot_message(b"s1")).unwrap();
    let held = b.recv().unwrap();
    a.inject(to_b, b"i2").unwrap();
    a.inject(to_b, &slot_message(b"s3")).unwrap();
    let mut m = a.alloc(2);
    m.copy_from_slice(b"i4");
    let at = m.as_ptr();
    a.send(to_b, m).unwrap();
    // The peer dies and a new process takes its side before the survivor looks: the
    // newcomer skips what was meant for its predecessor, which does not count as taken.
    forge_dead_owner(&name, 1);
    drop((taken, b));
    let mut c = Endpoint::open(&url).unwrap();
    c.insert_addr(&url).unwrap();
    assert!(c.recv().is_none(), "nothing meant for the dead one");
    let mut sent = Vec::new();
    let unacked = wait_for(|| match a.poll_completion() {
        Some(Completion::Sent { id, .. }) => {
            sent.push(id.0);
            None
        }
        Some(Completion::PeerRestarted { unacked, .. }) => Some(unacked),
        Some(Completion::PeerFailed { why, .. }) => panic!("seen as a restart: {why}"),
        _ => None,
    })
    .expect("the restart is noticed");
    assert_eq!(sent, [0], "only what the dead one took");
    let back: Vec<&[u8]> = unacked.iter().map(|b| &b[..]).collect();
    let (s1, s3) = (slot_message(b"s1"), slot_message(b"s3"));
    assert_eq!(
        back,
        [&s1[..], b"i2", &s3[..], b"i4"],
        "in send order, intact"
    );
    assert_eq!(unacked[3].as_ptr(), at, "the very slot comes back");
    drop(unacked);
    // The new life: nothing stale, messages both ways.
    c.inject(Peer(0), b"new").unwrap();
    assert_eq!(&wait_for(|| a.recv()).unwrap().data[..], b"new");
    a.inject(to_b, b"hello").unwrap();
    assert_eq!(&wait_for(|| c.recv()).unwrap().data[..], b"hello");
    assert!(c.recv().is_none() && a.recv().is_none());
    wait_for(|| matches!(a.poll_completion(), Some(Completion::Sent { .. })).then_some(()))
        .expect("the new life's message is acknowledged");
    // (The dead one's view, dropped only now, gave its slot back after the hand-back.)
    drop(held);
}
