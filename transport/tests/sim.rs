//! `sim://` endpoints: raw and reliable exchanges between simulated boards, stepped inline
//! in virtual time (deterministic).

mod common;

use common::{drive_until, pair, pair_with};
use myri_transport::{
    Buf, Completion, Endpoint, InsertError, MsgId, OpenError, Options, Scheme, SendErrorKind, Stats,
};

#[test]
fn raw_datagrams_cross_the_simulated_fabric_without_a_copy() {
    let (mut a, mut b, to_b, to_a) = pair(
        "sim://a?world=raw&reliable=0",
        "sim://b?world=raw&reliable=0",
        "sim://b",
        "sim://a",
    );
    assert!(!a.is_reliable());
    let caps = a.capabilities();
    assert_eq!(caps.scheme, Scheme::Sim);
    assert!(caps.copy_free && !caps.reliable);
    assert_eq!(caps.max_message_size, caps.mtu);
    for i in 0..100u32 {
        let len = 1 + (i as usize * 97) % caps.mtu;
        let mut m = a.alloc(len);
        assert!(m.is_registered(), "the board's DMA memory");
        m.fill(i as u8);
        a.send(to_b, m).unwrap();
        let d = drive_until(&mut [&mut a, &mut b], 1, |eps| eps[1].recv()).expect("delivered");
        assert_eq!(d.peer, to_a);
        assert_eq!(d.data.len(), len);
        assert!(d.data.iter().all(|&x| x == i as u8));
        assert!(
            d.data.is_registered(),
            "a view of the board's receive buffer"
        );
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (
            sa.sends,
            sa.registered_sends,
            sa.copied_sends,
            sa.heap_sends
        ),
        (100, 100, 0, 0)
    );
    assert_eq!(
        (sb.recvs, sb.registered_recvs, sb.heap_recvs),
        (100, 100, 0)
    );
}

#[test]
fn reliable_messages_of_any_size_arrive_once_and_in_order() {
    let (mut a, mut b, to_b, _) = pair(
        "sim://a?world=rel",
        "sim://b?world=rel",
        "sim://b",
        "sim://a",
    );
    assert!(a.is_reliable() && a.capabilities().reliable && a.capabilities().ordered);
    let sizes = [0usize, 1, 100, 8000, 8200, 50_000, 200_000];
    let mut sent = 0;
    let mut got = Vec::new();
    let mut acked = 0;
    for round in 0..3 {
        for &len in &sizes {
            let mut m = a.alloc(len);
            for (i, x) in m.iter_mut().enumerate() {
                *x = (i + round + len) as u8;
            }
            a.send(to_b, m).unwrap();
            sent += 1;
        }
    }
    drive_until(&mut [&mut a, &mut b], 200_000, |eps| {
        while let Some(d) = eps[1].recv() {
            got.push(d.data.to_vec());
        }
        while let Some(c) = eps[0].poll_completion() {
            if let Completion::Sent { .. } = c {
                acked += 1;
            }
        }
        (got.len() == sent && acked == sent).then_some(())
    })
    .expect("all delivered and acknowledged");
    let mut k = 0;
    for round in 0..3 {
        for &len in &sizes {
            let want: Vec<u8> = (0..len).map(|i| (i + round + len) as u8).collect();
            assert_eq!(got[k], want, "message {k}");
            k += 1;
        }
    }
    assert!(!a.has_unacked());
}

#[test]
fn names_are_checked() {
    let _a = Endpoint::open("sim://taken?world=names").unwrap();
    assert!(matches!(
        Endpoint::open("sim://taken?world=names"),
        Err(OpenError::AddrInUse { .. })
    ));
    let mut b = Endpoint::open("sim://?world=names").unwrap();
    assert!(b.local_url().starts_with("sim://ep"), "{}", b.local_url());
    assert!(matches!(
        b.insert_addr("sim://nobody"),
        Err(InsertError::NoSuchEndpoint { .. })
    ));
    assert!(matches!(
        b.insert_addr("udp://1.2.3.4:5"),
        Err(InsertError::OtherScheme { .. })
    ));
    assert!(matches!(
        b.insert_addr("sim://taken?reliable=0"),
        Err(InsertError::HasParams { .. })
    ));
    assert!(matches!(b.insert_addr("bogus"), Err(InsertError::Url(_))));
    let p = b.insert_addr("sim://taken").unwrap();
    assert_eq!(
        b.insert_addr("sim://taken").unwrap(),
        p,
        "same address, same handle"
    );
    let _ = Options::default();
}

fn quick_failure() -> Options {
    let mut o = Options::default();
    o.rpp.rto_initial = std::time::Duration::from_micros(200);
    o.rpp.rto_max = std::time::Duration::from_millis(1);
    o.rpp.keepalive = std::time::Duration::from_millis(1);
    o.rpp.max_retries = 3;
    o.rpp.peer_timeout = std::time::Duration::from_millis(5);
    o
}

/// A failed peer's new life is heard and taken, whatever checks the endpoints use: the
/// board's DMA checksums, RPP's CRC-32C, a MAC.
#[test]
fn a_vanished_peer_fails_with_the_unacked_messages_handed_back_and_a_restart_is_seen() {
    let key = "0123456789abcdef".repeat(4);
    for (i, params) in [
        "&integrity=dma",
        "&integrity=crc32c",
        &format!("&key={key}"),
    ]
    .into_iter()
    .enumerate()
    {
        vanished_peer_comes_back(&format!("fail{i}"), params);
    }
}

fn vanished_peer_comes_back(world: &str, params: &str) {
    let open = |name: &str| {
        Endpoint::open_with(
            &format!("sim://{name}?world={world}{params}"),
            quick_failure(),
        )
        .unwrap()
    };
    let mut a = open("a");
    let b = open("b");
    let to_b = a.insert_addr("sim://b").unwrap();
    drop(b);
    for m in [&b"one"[..], b"two", b"three"] {
        a.inject(to_b, m).unwrap();
    }
    let unsent = drive_until(&mut [&mut a], 1_000_000, |eps| {
        match eps[0].poll_completion() {
            Some(Completion::PeerFailed { peer, unsent, .. }) if peer == to_b => Some(unsent),
            _ => None,
        }
    })
    .expect("failure is declared in bounded virtual time");
    let back: Vec<&[u8]> = unsent.iter().map(|b| &b[..]).collect();
    assert_eq!(back, [&b"one"[..], b"two", b"three"], "{params}");
    assert!(matches!(
        a.inject(to_b, b"x"),
        Err(SendErrorKind::PeerFailed { .. })
    ));

    // b comes back (a new process: a later incarnation) and speaks first.
    let mut b2 = open("b");
    let to_a = b2.insert_addr("sim://a").unwrap();
    b2.inject(to_a, b"back").unwrap();
    let d = drive_until(&mut [&mut a, &mut b2], 100_000, |eps| eps[0].recv())
        .unwrap_or_else(|| panic!("{params}: not heard; a {:?}", a.stats()));
    assert_eq!(&d.data[..], b"back");
    let restarted = std::iter::from_fn(|| a.poll_completion())
        .any(|c| matches!(c, Completion::PeerRestarted { peer, incarnation, .. } if peer == to_b && incarnation == b2.incarnation()));
    assert!(restarted, "{params}");
    a.inject(to_b, b"welcome back").unwrap();
    let d = drive_until(&mut [&mut a, &mut b2], 100_000, |eps| eps[1].recv()).expect("answered");
    assert_eq!(&d.data[..], b"welcome back");
}

#[test]
fn a_full_send_channel_is_would_block_with_the_buffer_handed_back() {
    let (mut a, _b, to_b, _) = pair(
        "sim://a?world=wb&reliable=0",
        "sim://b?world=wb&reliable=0",
        "sim://b",
        "sim://a",
    );
    let mut sent = 0;
    let e = loop {
        let mut m = a.alloc(1000);
        m.fill(7);
        match a.send(to_b, m) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
    };
    assert!(e.error.is_would_block(), "{}", e.error);
    assert!(sent >= 1);
    assert_eq!(e.buf.len(), 1000);
    assert!(e.buf.iter().all(|&x| x == 7));
    for _ in 0..1000 {
        a.progress();
    }
    a.send(to_b, e.buf)
        .expect("room again once the board has sent");

    // Reliable: RPP's bounded queue says the same.
    let mut o = Options::default();
    o.rpp.max_queued_messages = 4;
    let mut r = Endpoint::open_with("sim://r?world=wb", o).unwrap();
    let to_b = r.insert_addr("sim://b").unwrap();
    for _ in 0..4 {
        r.inject(to_b, b"m").unwrap();
    }
    assert!(matches!(
        r.inject(to_b, b"m"),
        Err(SendErrorKind::WouldBlock)
    ));
    assert_eq!(r.stats().would_block, 1);
}

#[test]
fn when_dma_memory_runs_out_heap_buffers_are_copied_at_send_and_counted() {
    let (mut a, mut b, to_b, _) = pair(
        "sim://a?world=heap&reliable=0",
        "sim://b?world=heap&reliable=0",
        "sim://b",
        "sim://a",
    );
    // The board has 64 DMA send buffers; `alloc` hands out all but the 8 kept for the
    // packets the endpoint must copy.
    let held: Vec<_> = (0..56).map(|_| a.alloc(100)).collect();
    assert!(
        held.iter().all(|m| m.is_registered()),
        "56 DMA send buffers"
    );
    let mut extra = a.alloc(100);
    assert!(!extra.is_registered(), "then the heap");
    extra.fill(9);
    assert_eq!(a.stats().heap_allocs, 1);
    drop(held);
    a.send(to_b, extra).unwrap();
    let d = drive_until(&mut [&mut a, &mut b], 1000, |eps| eps[1].recv()).unwrap();
    assert!(d.data.iter().all(|&x| x == 9) && d.data.len() == 100);
    let s = a.stats();
    assert_eq!(
        (s.heap_sends, s.copied_sends, s.registered_sends),
        (1, 1, 0)
    );
}

#[test]
fn background_threads_progress_the_endpoints() {
    use myri_transport::BackgroundEndpoint;
    use std::time::Duration;
    let a = BackgroundEndpoint::new(Endpoint::open("sim://a?world=bg").unwrap()).unwrap();
    let b = BackgroundEndpoint::new(Endpoint::open("sim://b?world=bg").unwrap()).unwrap();
    let to_b = a.insert_addr("sim://b").unwrap();
    let to_a = b.insert_addr("sim://a").unwrap();
    for i in 0..50u8 {
        let mut m = a.alloc(3);
        m.fill(i);
        a.send(to_b, m).unwrap();
        let d = b
            .recv_timeout(Duration::from_secs(20))
            .expect("b's thread received it");
        assert_eq!(&d.data[..], &[i; 3]);
        b.send(to_a, myri_transport::Buf::copy_of(&[i])).unwrap();
        let back = a
            .recv_timeout(Duration::from_secs(20))
            .expect("a's thread received the answer");
        assert_eq!(&back.data[..], &[i]);
    }
    let a = a.into_inner();
    assert_eq!(a.stats().recvs, 50);
}

#[test]
fn datagrams_from_endpoints_never_inserted_are_counted_and_dropped() {
    let mut a = Endpoint::open("sim://a?world=unknown&reliable=0").unwrap();
    let mut stranger = Endpoint::open("sim://s?world=unknown&reliable=0").unwrap();
    let to_a = stranger.insert_addr("sim://a").unwrap();
    stranger.inject(to_a, b"psst").unwrap();
    let counted = drive_until(&mut [&mut stranger, &mut a], 1000, |eps| {
        (eps[1].stats().unknown_source == 1).then_some(())
    });
    assert!(counted.is_some());
    assert!(a.recv().is_none(), "dropped, not delivered");
}

/// Steps `a` and `b` until `b` has received `n` messages and `a` has had `n` sent
/// buffers handed back; returns the messages and the buffers, each in order.
fn delivered_and_handed_back(
    a: &mut Endpoint,
    b: &mut Endpoint,
    n: usize,
) -> (Vec<Vec<u8>>, Vec<(MsgId, Buf)>) {
    let mut got = Vec::new();
    let mut back = Vec::new();
    drive_until(&mut [a, b], 200_000, |eps| {
        while let Some(d) = eps[1].recv() {
            got.push(d.data.to_vec());
        }
        while let Some(c) = eps[0].poll_completion() {
            if let Completion::Sent { id, buf, .. } = c {
                back.push((id, buf));
            }
        }
        (got.len() == n && back.len() == n).then_some(())
    })
    .expect("delivered and acknowledged");
    (got, back)
}

/// Reliable sim:// sends from the application's own DMA buffer: RPP keeps it lent to the
/// board (readable by both, written by neither) until it is acknowledged, the board DMAs
/// each transmission from it, and the buffer the application gets back in `Sent` is the
/// very one it wrote, writable again. No copy on the way for messages of a KiB or more
/// (a shorter one is copied behind its header: cheaper than a second DMA).
#[test]
fn reliable_messages_go_from_the_applications_dma_buffer_with_no_copy() {
    let (mut a, mut b, to_b, _) = pair(
        "sim://a?world=lend",
        "sim://b?world=lend",
        "sim://b",
        "sim://a",
    );
    let mtu = a.capabilities().mtu;
    let mut wrote = std::collections::HashMap::new();
    let sizes = [300usize, 1000, 4000, 8192, 8000, 2000];
    for (i, &len) in sizes.iter().enumerate() {
        let mut m = a.alloc(len);
        assert!(
            m.is_registered(),
            "reliable mode too: the board's DMA memory"
        );
        m.fill(i as u8 + 1);
        wrote.insert(i as u64, m.as_ptr() as usize);
        a.send(to_b, m).unwrap();
    }
    let (got, back) = delivered_and_handed_back(&mut a, &mut b, sizes.len());
    for (i, &len) in sizes.iter().enumerate() {
        assert_eq!(got[i].len(), len);
        assert!(got[i].iter().all(|&x| x == i as u8 + 1), "message {i}");
    }
    for (id, mut buf) in back {
        assert!(buf.is_registered());
        assert_eq!(
            buf.as_ptr() as usize,
            wrote[&id.0],
            "the same DMA buffer came back"
        );
        buf.fill(0xEE);
        assert!(buf.iter().all(|&x| x == 0xEE), "writable again");
    }
    // Messages of a KiB or more went by DMA from the buffer they were written in; the
    // two shorter ones were copied behind their header (cheaper than lending them).
    let s = a.stats();
    let short = sizes.iter().filter(|&&len| len < 1024).count() as u64;
    assert_eq!(
        s.transmit_copies, short,
        "only the short messages were copied into a send buffer"
    );
    assert_eq!((s.registered_sends, s.heap_sends), (6, 0));
    // Messages longer than a DMA buffer still go, copied fragment by fragment.
    let mut big = a.alloc(3 * mtu);
    assert!(!big.is_registered());
    big.fill(9);
    a.send(to_b, big).unwrap();
    let d = drive_until(&mut [&mut a, &mut b], 200_000, |eps| eps[1].recv()).expect("delivered");
    assert_eq!(d.data.len(), 3 * mtu);
    assert!(a.stats().transmit_copies >= 3);
}

/// With the application holding every DMA send buffer it can get, sends a burst of 40
/// heap messages of `len` bytes and waits until all arrive; checks they arrived whole and
/// in order, and returns the sender's statistics and its connection's.
fn burst_with_every_buffer_held(world: &str, len: usize) -> (Stats, myri_rpp::Stats) {
    let (mut a, mut b, to_b, _) = pair(
        &format!("sim://a?world={world}"),
        &format!("sim://b?world={world}"),
        "sim://b",
        "sim://a",
    );
    let held: Vec<_> = (0..64).map(|_| a.alloc(64)).collect();
    assert!(held.iter().filter(|m| m.is_registered()).count() >= 50);
    for i in 0..40u8 {
        let mut m = a.alloc(len);
        assert!(!m.is_registered(), "heap: copied at transmit");
        m.fill(i);
        a.send(to_b, m).unwrap();
    }
    let mut got = Vec::new();
    drive_until(&mut [&mut a, &mut b], 100_000, |eps| {
        while let Some(d) = eps[1].recv() {
            got.push(d.data.to_vec());
        }
        (got.len() == 40).then_some(())
    })
    .expect("every message arrives");
    for (i, m) in got.iter().enumerate() {
        assert!(
            m.len() == len && m.iter().all(|&x| x == i as u8),
            "message {i}"
        );
    }
    drop(held);
    (a.stats(), a.peer_stats(to_b).unwrap())
}

/// A packet the board has no send buffer for waits whole for one, rather than being lost
/// to the channel and resent after a timeout: a burst of copied messages too long for PIO
/// (past 256 bytes with the headers, so each packet needs a send buffer to be DMA'd
/// from) stalls, and still arrives in order with nothing retransmitted.
#[test]
fn a_packet_with_no_free_send_buffer_waits_instead_of_being_lost() {
    let (stats, rpp) = burst_with_every_buffer_held("stall", 600);
    assert!(stats.transmit_stalls > 0, "the burst stalled: {stats:?}");
    assert_eq!(
        rpp.retransmitted, 0,
        "nothing was lost on the host: {rpp:?}"
    );
}

/// In reliable mode a message of at most `SEND_INLINE_MAX` bytes, which RPP copies behind
/// its header whatever holds it, is held in the `Buf` itself: `alloc` takes none of the
/// board's DMA buffers for it (all of them stay free for the application), the sends are
/// counted as inline, and each comes back in its completion.
#[test]
fn short_messages_are_held_in_the_buffer_itself() {
    use myri_transport::SEND_INLINE_MAX;
    let (mut a, mut b, to_b, _) = pair(
        "sim://a?world=inline",
        "sim://b?world=inline",
        "sim://b",
        "sim://a",
    );
    let lens = [0, 1, 8, SEND_INLINE_MAX];
    for (i, &len) in lens.iter().enumerate() {
        let mut m = a.alloc(len);
        assert!(m.is_inline() && !m.is_registered(), "{len} bytes: inline");
        m.fill(i as u8 + 1);
        a.send(to_b, m).unwrap();
    }
    let longer = a.alloc(SEND_INLINE_MAX + 1);
    assert!(longer.is_registered(), "one byte more: a DMA buffer");
    drop(longer);
    let (got, back) = delivered_and_handed_back(&mut a, &mut b, lens.len());
    for (i, &len) in lens.iter().enumerate() {
        assert_eq!(got[i], vec![i as u8 + 1; len], "message {i}");
        assert!(back[i].1.is_inline() && back[i].1.len() == len);
    }
    let s = a.stats();
    assert_eq!(
        (
            s.inline_sends,
            s.registered_sends,
            s.heap_sends,
            s.heap_allocs
        ),
        (4, 0, 0, 0)
    );
    // Every DMA send buffer but the reserve is still the application's to take.
    let held: Vec<_> = (0..56).map(|_| a.alloc(100)).collect();
    assert!(held.iter().all(|m| m.is_registered()));
}

/// A packet short enough for PIO (a short message and its headers, an acknowledgement)
/// is written into the board's send slot from where it is and needs no send buffer: with
/// every DMA buffer held by the application, a burst of short messages goes without a
/// stall, in order, nothing retransmitted.
#[test]
fn short_packets_go_by_pio_without_a_send_buffer() {
    let (stats, rpp) = burst_with_every_buffer_held("piogather", 100);
    assert_eq!(stats.transmit_stalls, 0, "nothing waited: {stats:?}");
    assert_eq!(rpp.retransmitted, 0, "nothing was lost: {rpp:?}");
}

/// A ping-pong's answer leaves before the acknowledgement bookkeeping of the message it
/// answers, and carries the acknowledgement: no packet of its own is needed for one.
#[test]
fn a_ping_pong_needs_no_acknowledgement_packets() {
    let (mut a, mut b, to_b, to_a) = pair(
        "sim://a?world=pingack",
        "sim://b?world=pingack",
        "sim://b",
        "sim://a",
    );
    for i in 0..200u64 {
        a.send(to_b, myri_transport::Buf::copy_of(&i.to_be_bytes()))
            .unwrap();
        let ping = (0..1000)
            .find_map(|_| {
                a.progress();
                b.recv()
            })
            .expect("the ping arrives");
        assert_eq!(&ping.data[..], &i.to_be_bytes());
        let echo = myri_transport::Buf::copy_of(&ping.data);
        drop(ping);
        b.send(to_a, echo).unwrap();
        let pong = (0..1000)
            .find_map(|_| {
                b.progress();
                a.recv()
            })
            .expect("the pong arrives");
        assert_eq!(&pong.data[..], &i.to_be_bytes());
        while a.poll_completion().is_some() {}
    }
    let (sa, sb) = (a.peer_stats(to_b).unwrap(), b.peer_stats(to_a).unwrap());
    assert_eq!((sa.data_sent, sb.data_sent), (200, 200), "nothing resent");
    assert!(
        sa.acks_sent + sb.acks_sent <= 4,
        "acknowledgements ride on the answers: {} and {} packets of their own",
        sa.acks_sent,
        sb.acks_sent
    );
    assert_eq!(sa.messages_sent, 200, "each pong acknowledged its ping");
}

/// A receiver that does nothing but `recv` still acknowledges what it gets, however
/// often a message is waiting at its progress passes (the pass that hands messages over
/// leaves its acknowledgements to the next, which runs in full).
#[test]
fn a_receiver_that_only_receives_acknowledges_everything() {
    let (mut a, mut b, to_b, _) = pair(
        "sim://a?world=recvonly",
        "sim://b?world=recvonly",
        "sim://b",
        "sim://a",
    );
    let (mut sent, mut received, mut acked) = (0u64, 0u64, 0u64);
    for _ in 0..20_000 {
        if sent < 500
            && a.send(to_b, myri_transport::Buf::copy_of(&sent.to_be_bytes()))
                .is_ok()
        {
            sent += 1;
        }
        while let Some(c) = a.poll_completion() {
            acked += u64::from(matches!(c, Completion::Sent { .. }));
        }
        if let Some(d) = b.recv() {
            assert_eq!(&d.data[..], &received.to_be_bytes(), "in order");
            received += 1;
        }
        if acked == 500 {
            break;
        }
    }
    assert_eq!((sent, received, acked), (500, 500, 500));
}

/// An answer sent at once leaves only a quick pass behind (the pass that delivered the
/// question defers its timers, and the answer's send does that work): the connection's
/// timers must still run. After a ping-pong the pinger vanishes while the echo's last
/// answer is unacknowledged; the echo, which only progresses, must resend it and declare
/// the peer failed in bounded virtual time, handing the answer back.
#[test]
fn an_answer_sent_at_once_keeps_the_connections_timers() {
    let (mut a, mut b, to_b, to_a) = pair_with(
        "sim://a?world=answertimer",
        "sim://b?world=answertimer",
        "sim://b",
        "sim://a",
        quick_failure(),
    );
    for i in 0..20u64 {
        a.inject(to_b, &i.to_be_bytes()).unwrap();
        let ping = drive_until(&mut [&mut a], 1000, |_| b.recv()).expect("the ping arrives");
        b.inject(to_a, &ping.data).unwrap();
        drop(ping);
        let pong = drive_until(&mut [&mut b], 1000, |_| a.recv()).expect("the pong arrives");
        assert_eq!(&pong.data[..], &i.to_be_bytes());
    }
    // The last ping's answer is in flight when the pinger goes.
    a.inject(to_b, b"last").unwrap();
    let ping = drive_until(&mut [&mut a], 1000, |_| b.recv()).expect("the last ping arrives");
    drop(a);
    b.inject(to_a, &ping.data).unwrap();
    drop(ping);
    let unsent = drive_until(&mut [&mut b], 1_000_000, |eps| {
        while let Some(c) = eps[0].poll_completion() {
            if let Completion::PeerFailed { peer, unsent, .. } = c {
                assert_eq!(peer, to_a);
                return Some(unsent);
            }
        }
        None
    })
    .expect("the echo's timers run: the vanished pinger is declared failed");
    let back: Vec<&[u8]> = unsent.iter().map(|b| &b[..]).collect();
    assert_eq!(back, [&b"last"[..]], "the unacknowledged answer comes back");
    let s = b.peer_stats(to_a).unwrap();
    assert!(s.rto_expirations > 0, "the answer was resent on its timer");
}

/// The same quick pass must still take what arrived meanwhile: a stream one way, every
/// message answered at once, while the sender keeps its window full, so that packets
/// reach the echo's board during its answers' sends (whose kick steps the board). Every
/// message and answer arrives in order with nothing resent: a datagram left waiting in
/// the host's ring would wait for a timer, and be resent.
#[test]
fn an_answer_sent_at_once_still_takes_what_arrived_meanwhile() {
    let (mut a, mut b, to_b, to_a) = pair(
        "sim://a?world=answerrecv",
        "sim://b?world=answerrecv",
        "sim://b",
        "sim://a",
    );
    const N: u64 = 2_000;
    let (mut sent, mut echoed, mut answers) = (0u64, 0u64, 0u64);
    for _ in 0..200_000 {
        while sent < N && a.inject(to_b, &sent.to_be_bytes()).is_ok() {
            sent += 1;
        }
        while let Some(d) = b.recv() {
            assert_eq!(&d.data[..], &echoed.to_be_bytes(), "in order");
            b.inject(to_a, &d.data).unwrap();
            echoed += 1;
        }
        while let Some(d) = a.recv() {
            assert_eq!(&d.data[..], &answers.to_be_bytes(), "answers in order");
            answers += 1;
        }
        while a.poll_completion().is_some() || b.poll_completion().is_some() {}
        if answers == N {
            break;
        }
    }
    assert_eq!((sent, echoed, answers), (N, N, N));
    let (sa, sb) = (a.peer_stats(to_b).unwrap(), b.peer_stats(to_a).unwrap());
    assert_eq!(
        (sa.rto_expirations, sb.rto_expirations),
        (0, 0),
        "nothing waited for a timer"
    );
    // The only packets resent are those a board dropped (its receive pool full under
    // the sender's window), found lost by the acknowledgements, not by a timer.
    let dropped: u64 = [a.board_drops(), b.board_drops()]
        .iter()
        .flatten()
        .map(|&(_, n)| n)
        .sum();
    assert_eq!(sa.retransmitted + sb.retransmitted, dropped);
}

/// The case that quick pass guards against, step by step: a message reaches the echo's
/// board after the pass that delivered the last one and before the echo's answer, whose
/// send steps the board (the kick) and so moves the message into the host's ring. The
/// echo's very next receive must find it, not wait for a timer.
#[test]
fn a_message_the_answers_kick_took_in_is_received_at_once() {
    let (mut a, mut b, to_b, to_a) = pair(
        "sim://a?world=answerkick",
        "sim://b?world=answerkick",
        "sim://b",
        "sim://a",
    );
    // Connect first: the first exchange carries the introductions.
    a.inject(to_b, b"hello").unwrap();
    let d = drive_until(&mut [&mut a], 1000, |_| b.recv()).expect("introduced");
    b.inject(to_a, &d.data).unwrap();
    drop(d);
    drive_until(&mut [&mut b], 1000, |_| a.recv()).expect("answered");
    for i in 0..50u64 {
        a.inject(to_b, &(2 * i).to_be_bytes()).unwrap();
        let d = drive_until(&mut [&mut a], 1000, |_| b.recv()).expect("the first arrives");
        assert_eq!(&d.data[..], &(2 * i).to_be_bytes());
        // The second reaches b's board now (a's send steps a's board onto the fabric);
        // b's answer to the first then steps b's board.
        a.inject(to_b, &(2 * i + 1).to_be_bytes()).unwrap();
        b.inject(to_a, &d.data).unwrap();
        drop(d);
        let next = (0..3).find_map(|_| b.recv());
        let next = next.expect("the message the answer's kick took in is received at once");
        assert_eq!(&next.data[..], &(2 * i + 1).to_be_bytes());
        b.inject(to_a, &next.data).unwrap();
        drop(next);
        for want in [2 * i, 2 * i + 1] {
            let got = drive_until(&mut [&mut b], 1000, |_| a.recv()).expect("the answers");
            assert_eq!(&got.data[..], &want.to_be_bytes());
        }
        while a.poll_completion().is_some() || b.poll_completion().is_some() {}
    }
}

/// An answer sent at once may be longer than the send window lets go at once, its first
/// packets held back by the answerer's own earlier packets in flight, whose acknowledgement
/// the question carried and the send applies only after its packets have gone. What that
/// acknowledgement lets go must go then, not wait for a timer: a ping-pong of messages of
/// many packets with a small window, every answer sent at once, runs with no timer
/// expiry and no retransmission, in bounded virtual time.
#[test]
fn a_long_answer_sent_at_once_goes_whole_without_a_timer() {
    for (window, packets) in [(4u32, 4usize), (4, 9), (8, 8), (2, 5)] {
        let world = format!("longanswer{window}x{packets}");
        let mut o = Options::default();
        o.rpp.send_window = window;
        o.rpp.recv_window = window;
        let (mut a, mut b, to_b, to_a) = pair_with(
            &format!("sim://a?world={world}"),
            &format!("sim://b?world={world}"),
            "sim://b",
            "sim://a",
            o,
        );
        let len = packets * a.peer_packet_payload(to_b).unwrap();
        for i in 0..30u8 {
            a.send(to_b, Buf::from_vec(vec![i; len])).unwrap();
            let q = drive_until(&mut [&mut a], 20_000, |_| b.recv())
                .unwrap_or_else(|| panic!("window {window}, {packets} packets: question {i}"));
            assert_eq!((q.data.len(), q.data[0]), (len, i));
            b.send(to_a, Buf::from_vec(q.data.to_vec())).unwrap();
            drop(q);
            let r = drive_until(&mut [&mut b], 20_000, |_| a.recv())
                .unwrap_or_else(|| panic!("window {window}, {packets} packets: answer {i}"));
            assert_eq!((r.data.len(), r.data[len - 1]), (len, i));
            while a.poll_completion().is_some() || b.poll_completion().is_some() {}
        }
        assert_no_timer_fired(
            &a,
            to_b,
            &b,
            to_a,
            &format!("window {window}, {packets} packets"),
        );
    }
}

/// Neither end's retransmission timer fired and neither resent anything.
#[track_caller]
fn assert_no_timer_fired(
    a: &Endpoint,
    to_b: myri_transport::Peer,
    b: &Endpoint,
    to_a: myri_transport::Peer,
    what: &str,
) {
    let (sa, sb) = (a.peer_stats(to_b).unwrap(), b.peer_stats(to_a).unwrap());
    assert_eq!(
        (sa.rto_expirations, sb.rto_expirations),
        (0, 0),
        "{what}: timer expiries"
    );
    assert_eq!(
        (sa.retransmitted, sb.retransmitted),
        (0, 0),
        "{what}: packets resent"
    );
}

/// The same when the answer is one packet: the answerer's earlier message filled its
/// send window, the question acknowledges that message, and the answer can go only once
/// that acknowledgement, held while the question is handed over, is applied (RPP applies
/// a held acknowledgement before new data the windows hold back). The answer must go with
/// the send, not wait for the asker's timer to resend the question.
#[test]
fn a_short_answer_behind_a_full_window_goes_when_the_question_opens_it() {
    let mut o = Options::default();
    // b's window holds its long message (4 packets) and its last answer, which the next
    // question acknowledges with the message.
    o.rpp.send_window = 5;
    // The question carries that acknowledgement: a sends none of its own (its receive
    // window never fills, and it acknowledges only every 64 packets or after 50 ms).
    o.rpp.ack_every = 64;
    o.rpp.ack_delay = std::time::Duration::from_millis(50);
    let (mut a, mut b, to_b, to_a) = pair_with(
        "sim://a?world=shortbehind",
        "sim://b?world=shortbehind",
        "sim://b",
        "sim://a",
        o,
    );
    let long = 4 * b.peer_packet_payload(to_a).unwrap();
    for i in 0..20u8 {
        // b's message, which fills b's window; a takes it.
        b.send(to_a, Buf::from_vec(vec![i; long])).unwrap();
        let m = drive_until(&mut [&mut b], 20_000, |_| a.recv()).expect("the long message");
        assert_eq!((m.data.len(), m.data[0]), (long, i));
        drop(m);
        // a's one-packet question carries the acknowledgement of all of it.
        a.inject(to_b, &[i]).unwrap();
        let q = drive_until(&mut [&mut a], 20_000, |_| b.recv()).expect("the question");
        assert_eq!(&q.data[..], &[i]);
        // b answers at once.
        b.inject(to_a, &q.data).unwrap();
        drop(q);
        let r = drive_until(&mut [&mut b], 20_000, |_| a.recv()).expect("the answer");
        assert_eq!(&r.data[..], &[i]);
        while a.poll_completion().is_some() || b.poll_completion().is_some() {}
    }
    assert_no_timer_fired(&a, to_b, &b, to_a, "answers behind a full window");
}

/// Sends one message from `a` to `b` and steps both for a while; returns whether it
/// arrived.
fn one_message_arrives(a: &mut Endpoint, b: &mut Endpoint, to_b: myri_transport::Peer) -> bool {
    a.send(to_b, myri_transport::Buf::copy_of(b"who goes there"))
        .unwrap();
    drive_until(&mut [a, b], 2000, |eps| eps[1].recv()).is_some()
}

const KEY_A: &str = "0101010101010101010101010101010101010101010101010101010101010101";
const KEY_B: &str = "0202020202020202020202020202020202020202020202020202020202020202";

/// Both ends name the same connection id and key: they talk, every packet MACed.
/// Another id, or another key, and nothing either end sends is acted on: every packet
/// dropped and counted, as foreign or as a bad MAC; no message delivered, none
/// acknowledged.
#[test]
fn connection_ids_and_keys_from_the_url_separate_who_may_talk() {
    let url = |n: &str, world: &str, q: &str| format!("sim://{n}?world={world}&{q}");
    // The same id and key on both ends.
    let same = format!("conn=5eed&key={KEY_A}");
    let (mut a, mut b, to_b, to_a) = pair(
        &url("a", "keys1", &same),
        &url("b", "keys1", &same),
        "sim://b",
        "sim://a",
    );
    assert!(one_message_arrives(&mut a, &mut b, to_b));
    assert_eq!(b.peer_stats(to_a).unwrap().bad_mac, 0);

    // Another connection id: the receiver drops every packet as foreign.
    let (mut a, mut b, to_b, to_a) = pair(
        &url("a", "keys2", "conn=1"),
        &url("b", "keys2", "conn=2"),
        "sim://b",
        "sim://a",
    );
    assert!(!one_message_arrives(&mut a, &mut b, to_b));
    let (sa, sb) = (a.peer_stats(to_b).unwrap(), b.peer_stats(to_a).unwrap());
    assert!(
        sb.foreign > 0 && sb.foreign == sb.packets_received,
        "{sb:?}"
    );
    assert!(
        sa.foreign > 0 && sa.foreign == sa.packets_received,
        "{sa:?}"
    );
    assert_eq!(
        (sb.messages_delivered, sa.messages_sent),
        (0, 0),
        "nothing acted on"
    );

    // Another key: every packet fails its MAC.
    let (mut a, mut b, to_b, to_a) = pair(
        &url("a", "keys3", &format!("key={KEY_A}")),
        &url("b", "keys3", &format!("key={KEY_B}")),
        "sim://b",
        "sim://a",
    );
    assert!(!one_message_arrives(&mut a, &mut b, to_b));
    let (sa, sb) = (a.peer_stats(to_b).unwrap(), b.peer_stats(to_a).unwrap());
    assert!(
        sb.bad_mac > 0 && sb.bad_mac == sb.packets_received,
        "{sb:?}"
    );
    assert!(
        sa.bad_mac > 0 && sa.bad_mac == sa.packets_received,
        "{sa:?}"
    );
    assert_eq!(
        (sb.messages_delivered, sa.messages_sent),
        (0, 0),
        "nothing acted on"
    );

    // A key only one end has: the other drops what it cannot verify.
    let (mut a, mut b, to_b, _) = pair(
        &url("a", "keys4", &format!("key={KEY_A}")),
        &url("b", "keys4", "reliable=1"),
        "sim://b",
        "sim://a",
    );
    assert!(!one_message_arrives(&mut a, &mut b, to_b));
}

/// A key or a connection id where no RPP runs would protect nothing: refused at open.
#[test]
fn a_key_without_rpp_is_refused() {
    for u in [
        format!("sim://k1?world=nokey&reliable=0&key={KEY_A}"),
        "sim://k2?world=nokey&reliable=0&conn=7".to_string(),
        format!("shm://myri-nokey-{}?key={KEY_A}", std::process::id()),
    ] {
        let e = Endpoint::open(&u).unwrap_err();
        assert!(matches!(e, OpenError::NeedsRpp { .. }), "{u}: {e}");
        assert!(
            !e.to_string().contains("0101"),
            "the key is not repeated: {e}"
        );
    }
    let ok = Endpoint::open_with(
        "sim://k3?world=nokey",
        Options::default().with_connection_id(0x1234),
    );
    assert!(ok.is_ok());
}
