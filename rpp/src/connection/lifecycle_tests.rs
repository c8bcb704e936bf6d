//! Scripted tests of a connection's life: restarts of the peer, its death, keepalives,
//! closing, aborting, and what waits for the peer's incarnation.

use super::tests::{at, config, conn, established, events, header, messages, transmit};
use super::*;
use crate::testing::{LinkConfig, Pair};
use std::time::Duration;

#[test]
fn a_restarted_peer_gets_a_new_incarnation_and_no_stale_packet_is_delivered() {
    let (mut a, mut b) = established();
    // b has something in flight to a, and a to b, when b restarts.
    b.send(b"from b's first life".to_vec()).unwrap();
    let stale_from_b = transmit(&mut b, at(10));
    a.send(b"to b's first life".to_vec()).unwrap();
    let stale_to_b = transmit(&mut a, at(10));
    let mut b2 = conn(config(), 2);
    // The old life's packets reach the new b, and a hears from the new b.
    for p in &stale_to_b {
        assert_eq!(
            b2.handle_packet(at(11), p),
            Received::Dropped(DropReason::Stale)
        );
    }
    b2.send(b"from b's second life".to_vec()).unwrap();
    let hello = transmit(&mut b2, at(12));
    assert_eq!(
        hello.len(),
        1,
        "only an introduction: b2 does not know a's life yet"
    );
    assert_eq!(header(&hello[0]).flags & flags::DATA, 0);
    a.handle_packet(at(13), &hello[0]);
    // a answers; b2 learns a's incarnation and sends its data.
    for p in transmit(&mut a, at(13)) {
        b2.handle_packet(at(14), &p);
    }
    for p in transmit(&mut b2, at(14)) {
        a.handle_packet(at(15), &p);
    }
    let ev = events(&mut a);
    let Some(Event::PeerRestarted {
        old: 1,
        new: 2,
        unacked,
    }) = ev.iter().find(|e| matches!(e, Event::PeerRestarted { .. }))
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        unacked,
        &vec![b"to b's first life".to_vec()],
        "a learns what the old life may not have had"
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Message(m) if m == b"from b's second life"))
    );
    // The old life's packet arrives late: never delivered.
    for p in &stale_from_b {
        assert_eq!(
            a.handle_packet(at(16), p),
            Received::Dropped(DropReason::Stale)
        );
    }
    assert!(messages(&mut a).is_empty());
    assert!(a.stats().stale >= 1 && b2.stats().stale >= 1);
}

#[test]
fn a_restart_through_the_pair_keeps_later_traffic_flowing() {
    let mut pair = Pair::new(config(), LinkConfig::default(), 5);
    pair.a.send(b"one".to_vec()).unwrap();
    pair.drive();
    assert_eq!(pair.b_messages(), vec![b"one".to_vec()]);
    let old = pair.b.incarnation();
    let new = pair.restart_b(config());
    assert_ne!(old, new);
    pair.a.send(b"two".to_vec()).unwrap();
    pair.b.send(b"three".to_vec()).unwrap();
    pair.drive();
    assert!(pair.a_events.iter().any(
        |e| matches!(e, Event::PeerRestarted { old: o, new: n, .. } if (*o, *n) == (old, new))
    ));
    assert!(
        pair.a.stats().restart_challenges >= 1,
        "the new life was challenged"
    );
    let got = pair.b_messages();
    // "two" was sent before a learned of the restart: it either reached the new life
    // (a then sees it acked) or came back in PeerRestarted; never both, never lost.
    let returned: Vec<_> = pair
        .a_events
        .iter()
        .filter_map(|e| {
            if let Event::PeerRestarted { unacked, .. } = e {
                Some(unacked.clone())
            } else {
                None
            }
        })
        .flatten()
        .collect();
    let acked = pair
        .a_events
        .iter()
        .any(|e| matches!(e, Event::Sent { msg, .. } if msg == b"two"));
    assert!(
        acked != returned.contains(&b"two".to_vec()),
        "{got:?} {returned:?}"
    );
    assert_eq!(got.contains(&b"two".to_vec()), acked);
    assert_eq!(pair.a_messages(), vec![b"three".to_vec()]);
}

#[test]
fn a_dead_peer_fails_the_connection_and_hands_every_message_back() {
    let mut pair = Pair::new(
        Config {
            max_retries: 4,
            ..config()
        },
        LinkConfig::default(),
        6,
    );
    pair.a.send(b"delivered".to_vec()).unwrap();
    pair.drive();
    pair.b_alive = false;
    let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 3000]).collect();
    for m in &msgs {
        pair.a.send(m.clone()).unwrap();
    }
    pair.drive();
    assert_eq!(pair.a.state(), State::Failed);
    let Some(Event::Failed { error, unsent }) = pair
        .a_events
        .iter()
        .find(|e| matches!(e, Event::Failed { .. }))
    else {
        panic!()
    };
    assert_eq!(*error, ConnectionError::PeerUnreachable { retries: 4 });
    assert_eq!(unsent, &msgs, "nothing silently lost");
    assert!(matches!(pair.a.send(vec![1]), Err(SendError::Closed(_))));
}

#[test]
fn keepalives_keep_an_idle_connection_and_detect_a_silent_death() {
    let cfg = Config {
        keepalive: Duration::from_millis(10),
        max_retries: 3,
        peer_timeout: Duration::from_millis(50),
        ..config()
    };
    let mut pair = Pair::new(cfg, LinkConfig::default(), 7);
    pair.drive();
    pair.run_until(Instant::ZERO + Duration::from_secs(1));
    assert_eq!(
        (pair.a.state(), pair.b.state()),
        (State::Established, State::Established)
    );
    let probes = pair.a.stats().probes + pair.b.stats().probes;
    assert!(probes >= 50, "about one probe per 10 ms each way: {probes}");
    pair.b_alive = false;
    let died = pair.now;
    pair.run_until(died + Duration::from_secs(1));
    assert_eq!(pair.a.state(), State::Failed);
    let failed_at = pair.a_events.iter().any(|e| {
        matches!(
            e,
            Event::Failed {
                error: ConnectionError::PeerUnreachable { .. },
                ..
            }
        )
    });
    assert!(failed_at);
}

#[test]
fn close_finishes_what_is_in_flight_and_returns_the_peers_unsent_messages() {
    let mut pair = Pair::new(
        config(),
        LinkConfig {
            loss: 0.2,
            ..LinkConfig::default()
        },
        8,
    );
    pair.drive();
    for i in 0..10u8 {
        pair.a.send(vec![i; 2000]).unwrap();
    }
    pair.a.close();
    assert!(matches!(pair.a.send(vec![1]), Err(SendError::Closed(_))));
    // b has a message of its own queued while a closes: a's close waits for its own
    // messages to be acknowledged, and b's message races the close.
    pair.b.send(b"too late".to_vec()).unwrap();
    pair.drive();
    assert_eq!(pair.b_messages().len(), 10);
    assert!(pair.a_events.iter().any(|e| matches!(e, Event::Closed)));
    assert_eq!(pair.a.state(), State::Closed);
    assert_eq!(pair.b.state(), State::Closed);
    let peer_closed: Vec<_> = pair
        .b_events
        .iter()
        .filter_map(|e| {
            if let Event::PeerClosed { unsent } = e {
                Some(unsent.clone())
            } else {
                None
            }
        })
        .collect();
    let sent = pair
        .b_events
        .iter()
        .any(|e| matches!(e, Event::Sent { .. }));
    let delivered = pair.a_messages() == vec![b"too late".to_vec()];
    // b's message either made it before the close, or came back: never lost.
    assert!(
        peer_closed.len() == 1
            && (delivered && sent) != peer_closed[0].contains(&b"too late".to_vec()),
        "{peer_closed:?} {sent} {delivered}"
    );
}

#[test]
fn abort_fails_at_once_and_hands_everything_back() {
    let (mut a, mut b) = established();
    a.send(b"in flight".to_vec()).unwrap();
    for p in transmit(&mut a, at(1)) {
        b.handle_packet(at(2), &p);
    }
    a.send(b"queued".to_vec()).unwrap();
    a.abort(at(3), "peer process died");
    assert_eq!(a.state(), State::Failed);
    let ev = events(&mut a);
    let [
        Event::Failed {
            error: ConnectionError::Aborted("peer process died"),
            unsent,
        },
    ] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(unsent, &vec![b"in flight".to_vec(), b"queued".to_vec()]);
    assert!(transmit(&mut a, at(4)).is_empty() && a.poll_timeout().is_none());
    a.abort(at(5), "again");
    assert!(events(&mut a).is_empty(), "aborting twice does nothing");
}

#[test]
fn a_peer_silent_for_less_than_the_peer_timeout_is_not_declared_gone() {
    // A host that does not schedule the peer for 300 ms: a dozen backed-off timeouts pass,
    // more than max_retries, but not the peer timeout.
    let cfg = Config {
        max_retries: 3,
        peer_timeout: Duration::from_secs(1),
        rto_max: Duration::from_millis(50),
        ..config()
    };
    let mut pair = Pair::new(cfg, LinkConfig::default(), 11);
    pair.drive();
    pair.b_alive = false;
    pair.a_to_b.up = false;
    pair.a.send(b"patience".to_vec()).unwrap();
    pair.run_until(pair.now + Duration::from_millis(300));
    assert!(pair.a.stats().rto_expirations > 3, "{:?}", pair.a.stats());
    assert_eq!(
        pair.a.state(),
        State::Established,
        "silent 300 ms < 1 s: not gone"
    );
    pair.b_alive = true;
    pair.a_to_b.up = true;
    pair.drive();
    assert_eq!(pair.b_messages(), vec![b"patience".to_vec()]);
    // Silent past the peer timeout, it is gone.
    pair.b_alive = false;
    pair.a.send(b"too late".to_vec()).unwrap();
    pair.run_until(pair.now + Duration::from_secs(2));
    assert_eq!(pair.a.state(), State::Failed);
}

#[test]
fn no_data_goes_before_the_peers_life_is_known() {
    // A message queued while connecting waits for the introduction's answer: a data packet
    // that named no life of the peer would be taken by any later one, even after this
    // connection failed and handed the message back.
    let (mut a, mut b) = (conn(config(), 1), conn(config(), 7));
    a.send(b"wait for it".to_vec()).unwrap();
    let first = transmit(&mut a, at(0));
    assert_eq!(first.len(), 1);
    assert_eq!(header(&first[0]).flags, flags::HELLO);
    b.handle_packet(at(1), &first[0]);
    for p in transmit(&mut b, at(1)) {
        a.handle_packet(at(2), &p);
    }
    let data = transmit(&mut a, at(2));
    assert_eq!(data.len(), 1);
    let h = header(&data[0]);
    assert_eq!((h.flags & flags::DATA, h.dst_incarnation), (flags::DATA, 7));
    b.handle_packet(at(3), &data[0]);
    assert_eq!(messages(&mut b), vec![b"wait for it".to_vec()]);
}
