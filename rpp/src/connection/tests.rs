//! Scripted tests, one per mechanism: each moves packets by hand (or through a lossless
//! [`Pair`]) and checks what the protocol does.

use super::*;
use crate::testing::{CONN_ID, LinkConfig, Pair};
use crate::wire::HEADER_LEN;
use std::time::Duration;

pub(super) fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

pub(super) fn at(micros: u64) -> Instant {
    Instant::from_nanos(micros * 1000)
}

/// The scripted tests' settings: congestion control and pacing off, so that the
/// mechanism under test alone decides what goes (`cc_tests` script those two).
pub(super) fn config() -> Config {
    Config {
        mtu: 1024,
        rto_initial: us(1000),
        rto_min: us(100),
        ack_delay: us(50),
        congestion: crate::congestion::CongestionControl::None,
        pacing: false,
        ..Config::default()
    }
}

pub(super) fn conn(config: Config, incarnation: u64) -> Connection<Vec<u8>> {
    Connection::new(config, incarnation, CONN_ID, Instant::ZERO).unwrap()
}

/// Every packet `c` wants to send at `now`.
pub(super) fn transmit(c: &mut Connection<Vec<u8>>, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; c.config().mtu];
    std::iter::from_fn(|| c.poll_transmit(now, &mut buf).map(|n| buf[..n].to_vec())).collect()
}

pub(super) fn events(c: &mut Connection<Vec<u8>>) -> Vec<Event<Vec<u8>>> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

pub(super) fn messages(c: &mut Connection<Vec<u8>>) -> Vec<Vec<u8>> {
    events(c)
        .into_iter()
        .filter_map(|e| {
            if let Event::Message(m) = e {
                Some(m)
            } else {
                None
            }
        })
        .collect()
}

pub(super) fn header(p: &[u8]) -> HeaderRepr {
    HeaderRepr::parse(&Header::new_checked(p).unwrap()).unwrap()
}

/// Two ends that have introduced themselves (nothing in flight afterwards).
pub(super) fn established() -> (Connection<Vec<u8>>, Connection<Vec<u8>>) {
    established_with(config())
}

/// [`established`] with both ends on `config`.
pub(super) fn established_with(config: Config) -> (Connection<Vec<u8>>, Connection<Vec<u8>>) {
    let (mut a, mut b) = (conn(config.clone(), 1), conn(config, 1));
    for p in transmit(&mut a, at(0)) {
        b.handle_packet(at(0), &p);
    }
    for p in transmit(&mut b, at(0)) {
        a.handle_packet(at(0), &p);
    }
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
    events(&mut a);
    events(&mut b);
    (a, b)
}

#[test]
fn introduction_establishes_both_ends() {
    let (mut a, mut b) = (conn(config(), 10), conn(config(), 20));
    let hello = transmit(&mut a, at(0));
    assert_eq!(hello.len(), 1);
    let h = header(&hello[0]);
    assert_eq!(
        (h.flags & flags::HELLO, h.src_incarnation, h.dst_incarnation),
        (flags::HELLO, 10, 0)
    );
    b.handle_packet(at(1), &hello[0]);
    assert!(matches!(
        events(&mut b)[..],
        [Event::Connected {
            peer_incarnation: 10
        }]
    ));
    let answer = transmit(&mut b, at(1));
    assert_eq!(answer.len(), 1, "an introduction is answered at once");
    assert_eq!(header(&answer[0]).dst_incarnation, 10);
    a.handle_packet(at(2), &answer[0]);
    assert!(matches!(
        events(&mut a)[..],
        [Event::Connected {
            peer_incarnation: 20
        }]
    ));
    assert_eq!(a.peer_incarnation(), Some(20));
}

#[test]
fn introduction_is_repeated_with_backoff_then_gives_up() {
    let mut a = conn(
        Config {
            max_retries: 3,
            ..config()
        },
        1,
    );
    let mut sent_at = Vec::new();
    let mut now = at(0);
    a.send(b"unsent".to_vec()).unwrap();
    for _ in 0..100 {
        if !transmit(&mut a, now).is_empty() {
            sent_at.push(now);
        }
        let Some(t) = a.poll_timeout() else { break };
        now = t;
        a.handle_timeout(now);
    }
    assert_eq!(a.state(), State::Failed);
    let ev = events(&mut a);
    let Some(Event::Failed { error, unsent }) = ev.last() else {
        panic!("{ev:?}")
    };
    assert_eq!(*error, ConnectionError::PeerUnreachable { retries: 3 });
    assert_eq!(unsent, &vec![b"unsent".to_vec()], "the message comes back");
    let gaps: Vec<_> = sent_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0]),
        "backing off: {gaps:?}"
    );
}

#[test]
fn a_message_arrives_and_its_buffer_comes_back_uncopied() {
    let (mut a, mut b) = established();
    let msg = b"copy-free".to_vec();
    let ptr = msg.as_ptr();
    let id = a.send(msg).unwrap();
    for p in transmit(&mut a, at(10)) {
        b.handle_packet(at(11), &p);
    }
    assert_eq!(messages(&mut b), vec![b"copy-free".to_vec()]);
    // One packet is below `ack_every`: the ack waits for the delay.
    assert!(transmit(&mut b, at(11)).is_empty());
    assert_eq!(b.poll_timeout(), Some(at(11) + config().ack_delay));
    for p in transmit(&mut b, at(61)) {
        a.handle_packet(at(62), &p);
    }
    let ev = events(&mut a);
    let Some(Event::Sent { id: sent, msg }) = ev.first() else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (*sent, msg.as_ptr()),
        (id, ptr),
        "the same buffer, never copied"
    );
    assert!(!a.has_pending());
}

#[test]
fn acks_are_coalesced_every_k_packets() {
    let (mut a, mut b) = established();
    for i in 0..4u8 {
        a.send(vec![i]).unwrap();
    }
    let ps = transmit(&mut a, at(10));
    assert_eq!(ps.len(), 4);
    b.handle_packet(at(11), &ps[0]);
    assert!(transmit(&mut b, at(11)).is_empty(), "one packet: held");
    b.handle_packet(at(11), &ps[1]);
    let acks = transmit(&mut b, at(11));
    assert_eq!(acks.len(), 1, "two packets: acked at once");
    assert_eq!(header(&acks[0]).ack, 2);
    assert_eq!(
        b.stats().acks_sent,
        2,
        "the introduction's answer and this one"
    );
}

#[test]
fn an_ack_goes_at_once_when_half_the_credit_is_used() {
    // A window smaller than `ack_every`: the sender could not fill `ack_every` packets, so
    // half the advertised credit brings the acknowledgement without the timer.
    let small = Config {
        recv_window: 4,
        ack_every: 16,
        ..config()
    };
    let (mut a, mut b) = (conn(small.clone(), 1), conn(small, 2));
    for p in transmit(&mut a, at(0)) {
        b.handle_packet(at(0), &p);
    }
    for p in transmit(&mut b, at(0)) {
        a.handle_packet(at(0), &p);
    }
    for i in 0..4u8 {
        a.send(vec![i]).unwrap();
    }
    let ps = transmit(&mut a, at(10));
    assert_eq!(ps.len(), 4, "the credit lets four go");
    b.handle_packet(at(11), &ps[0]);
    assert!(transmit(&mut b, at(11)).is_empty(), "a quarter: held");
    b.handle_packet(at(11), &ps[1]);
    let acks = transmit(&mut b, at(11));
    assert_eq!(acks.len(), 1, "half the credit: acked at once");
    assert_eq!(header(&acks[0]).ack, 2);
}

#[test]
fn a_gap_triggers_an_immediate_ack_with_sack() {
    let (mut a, mut b) = established();
    for i in 0..3u8 {
        a.send(vec![i]).unwrap();
    }
    let ps = transmit(&mut a, at(10));
    b.handle_packet(at(11), &ps[2]);
    let acks = transmit(&mut b, at(11));
    assert_eq!(acks.len(), 1, "out of order: acked at once");
    let view = Header::new_checked(&acks[0][..]).unwrap();
    let h = header(&acks[0]);
    assert_eq!(
        (h.ack, view.sack_words(), view.sack_word(0)),
        (0, 1, 1 << 62),
        "bit 1: sequence number 2"
    );
    assert!(
        messages(&mut b).is_empty(),
        "nothing delivered past the gap"
    );
    b.handle_packet(at(12), &ps[0]);
    b.handle_packet(at(12), &ps[1]);
    assert_eq!(messages(&mut b), vec![vec![0], vec![1], vec![2]]);
    assert_eq!(
        header(&transmit(&mut b, at(12))[0]).ack,
        3,
        "gap closed: acked at once"
    );
}

#[test]
fn fast_retransmit_on_sack_evidence_without_a_timeout() {
    let (mut a, mut b) = established();
    for i in 0..5u8 {
        a.send(vec![i; 10]).unwrap();
    }
    let ps = transmit(&mut a, at(10));
    assert_eq!(ps.len(), 5);
    for p in &ps[1..] {
        b.handle_packet(at(11), p);
    }
    for p in transmit(&mut b, at(11)) {
        a.handle_packet(at(12), &p);
    }
    let again = transmit(&mut a, at(12));
    assert_eq!(again.len(), 1, "only the lost packet goes again");
    assert_eq!(header(&again[0]).seq, 0);
    let s = a.stats();
    assert_eq!((s.retransmitted, s.rto_expirations, s.lost), (1, 0, 1));
    b.handle_packet(at(13), &again[0]);
    assert_eq!(messages(&mut b).len(), 5);
}

#[test]
fn a_bitmap_too_long_for_a_data_packet_is_cut_and_followed_by_a_whole_one() {
    let (mut a, mut b) = established();
    // 200 packets from A; the first is lost, so B holds 199 beyond the gap: a bitmap of
    // four words, more than a data packet carries.
    for i in 0..200u32 {
        a.send(i.to_be_bytes().to_vec()).unwrap();
    }
    let ps = transmit(&mut a, at(10));
    assert_eq!(ps.len(), 200);
    for p in &ps[1..] {
        b.handle_packet(at(11), p);
    }
    // B's own acknowledgements go; then B sends data: its packet says what it can.
    let _ = transmit(&mut b, at(11));
    b.send(b"reply".to_vec()).unwrap();
    let out = transmit(&mut b, at(12));
    assert_eq!(
        out.len(),
        2,
        "a data packet, then an acknowledgement of its own"
    );
    let (data, ack) = (header(&out[0]), header(&out[1]));
    let (dv, av) = (
        Header::new_checked(&out[0][..]).unwrap(),
        Header::new_checked(&out[1][..]).unwrap(),
    );
    assert!(data.flags & wire::flags::DATA != 0 && ack.flags & wire::flags::DATA == 0);
    assert_eq!(
        (dv.sack_words(), data.echo),
        (wire::DATA_SACK_WORDS, 0),
        "the data packet's bitmap is cut to what fits, and it echoes nothing"
    );
    assert_eq!(av.sack_words(), 4, "the whole bitmap follows");
    assert_ne!(ack.echo, 0, "and the echo with it");
    assert_eq!(b.stats().sack_cuts, 1);
    // A takes the cut packet, then the whole one: only the packet really lost is resent.
    a.handle_packet(at(13), &out[0]);
    assert_eq!(a.stats().lost, 0, "nothing judged on a cut bitmap");
    a.handle_packet(at(13), &out[1]);
    let again = transmit(&mut a, at(13));
    assert_eq!(again.len(), 1, "only the lost packet goes again");
    assert_eq!(header(&again[0]).seq, 0);
    assert_eq!((a.stats().lost, a.stats().retransmitted), (1, 1));
    b.handle_packet(at(14), &again[0]);
    assert_eq!(messages(&mut b).len(), 200);
    assert_eq!(messages(&mut a), vec![b"reply".to_vec()]);
}

#[test]
fn the_retransmission_timeout_backs_off_exponentially() {
    let (mut a, _b) = established();
    a.send(b"into the void".to_vec()).unwrap();
    let mut now = at(10);
    assert_eq!(transmit(&mut a, now).len(), 1);
    let mut waits = Vec::new();
    for _ in 0..5 {
        let t = a.poll_timeout().unwrap();
        waits.push(t - now);
        now = t;
        a.handle_timeout(now);
        let again = transmit(&mut a, now);
        assert_eq!(again.len(), 1);
        assert_eq!(header(&again[0]).seq, 0);
    }
    for w in waits.windows(2) {
        assert_eq!(w[1], w[0] * 2, "{waits:?}");
    }
    assert_eq!(a.stats().rto_expirations, 5);
}

#[test]
fn a_first_timeout_probes_with_one_packet_and_a_second_resends_the_window() {
    let (mut a, mut b) = established();
    for i in 0..4u8 {
        a.send(vec![i; 10]).unwrap();
    }
    let window = transmit(&mut a, at(10));
    assert_eq!(window.len(), 4);
    // The peer is slow, not gone: the first timeout sends only the oldest packet.
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    let probe = transmit(&mut a, t);
    assert_eq!(probe.len(), 1, "one probe, not the window");
    assert_eq!(header(&probe[0]).seq, 0);
    // The peer had everything: its acknowledgement of the probe acknowledges the rest,
    // and nothing more goes.
    for p in window.iter().chain(&probe) {
        b.handle_packet(t, p);
    }
    assert_eq!(messages(&mut b).len(), 4);
    for p in transmit(&mut b, t) {
        a.handle_packet(t, &p);
    }
    assert!(transmit(&mut a, t).is_empty());
    assert!(!a.has_pending());
    assert_eq!(a.stats().retransmitted, 1);

    // Now the window is lost for real, and the probe too: the second timeout in a row
    // resends everything that has been out for the timeout.
    for i in 0..4u8 {
        a.send(vec![i; 10]).unwrap();
    }
    let now = t + us(10);
    assert_eq!(transmit(&mut a, now).len(), 4);
    let t1 = a.poll_timeout().unwrap();
    a.handle_timeout(t1);
    assert_eq!(transmit(&mut a, t1).len(), 1, "the probe");
    let t2 = a.poll_timeout().unwrap();
    a.handle_timeout(t2);
    let again = transmit(&mut a, t2);
    let seqs: Vec<u32> = again.iter().map(|p| header(p).seq).collect();
    assert_eq!(seqs.len(), 4, "the window again: {seqs:?}");
    assert_eq!(a.stats().rto_expirations, 3);
}

#[test]
fn a_probe_whose_ack_shows_losses_resends_them_without_another_timeout() {
    let (mut a, mut b) = established();
    // A first exchange measures the round trip.
    a.send(b"warm".to_vec()).unwrap();
    for p in transmit(&mut a, at(5)) {
        b.handle_packet(at(6), &p);
    }
    let acked_at = b.poll_timeout().unwrap();
    for p in transmit(&mut b, acked_at) {
        a.handle_packet(acked_at + us(1), &p);
    }
    assert!(!a.has_pending() && a.stats().srtt < us(100));
    for i in 0..4u8 {
        a.send(vec![i; 10]).unwrap();
    }
    let window = transmit(&mut a, at(100));
    assert_eq!(window.len(), 4);
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    let probe = transmit(&mut a, t);
    assert_eq!(probe.len(), 1);
    // Only the probe arrives (its acknowledgement waits for the ack delay): the
    // acknowledgement shows 1..3 missing, sent long before.
    b.handle_packet(t + us(1), &probe[0]);
    let acked_at = b.poll_timeout().unwrap();
    assert!(acked_at < a.poll_timeout().unwrap());
    for p in transmit(&mut b, acked_at) {
        a.handle_packet(acked_at, &p);
    }
    let again = transmit(&mut a, acked_at);
    let seqs: Vec<u32> = again.iter().map(|p| header(p).seq).collect();
    assert_eq!(seqs, vec![2, 3, 4], "lost by the probe's evidence");
    assert_eq!(a.stats().rto_expirations, 1);
    for p in &again {
        b.handle_packet(acked_at, p);
    }
    assert_eq!(messages(&mut b).len(), 5);
}

#[test]
fn rtt_is_measured_and_the_timeout_follows_it() {
    let config = || Config {
        rto_min: us(10),
        ..config()
    };
    let mut pair = Pair::new(
        config(),
        LinkConfig {
            delay: us(20),
            bandwidth: None,
            ..LinkConfig::default()
        },
        1,
    );
    // Two at once: the second is acknowledged at once, a sample with no ack delay.
    pair.a.send(vec![1]).unwrap();
    pair.a.send(vec![2]).unwrap();
    pair.drive();
    for i in 0..50u32 {
        pair.a.send(i.to_be_bytes().to_vec()).unwrap();
        pair.drive();
    }
    let s = pair.a.stats();
    // 40 µs of propagation; the peer held each lone ack 50 µs, said so, and it came off
    // (RFC 9002: only when that does not take the sample below the smallest seen).
    assert!(s.srtt >= us(40) && s.srtt <= us(41), "{s:?}");
    // The timeout waits for the peer's ack delay too, and half a round trip at least
    // beyond the round trip.
    let margin = (s.rttvar * 4)
        .max(Duration::from_nanos(1000))
        .max(s.srtt / 2);
    let expected = (s.srtt + margin + config().ack_delay).clamp(config().rto_min, config().rto_max);
    assert_eq!(s.rto, expected, "{s:?}");
    assert!(s.rto > config().rto_min, "{s:?}");
}

#[test]
fn credit_stalls_the_sender_until_the_application_drains() {
    let small = Config {
        recv_buffer_bytes: 8 * 1024,
        max_message_len: 8 * 1024,
        ..config()
    };
    let mut pair = Pair::new(small, LinkConfig::default(), 3);
    let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1000]).collect();
    for m in &msgs {
        pair.a.send(m.clone()).unwrap();
    }
    // Run a while without taking b's messages out of the connection: b's buffer fills
    // and its credit closes. (Events stay inside `b` until polled.)
    for _ in 0..2000 {
        let now = pair.now;
        for p in std::iter::from_fn(|| pair.a_to_b.pop_due(now)).collect::<Vec<_>>() {
            pair.b.handle_packet(now, &p);
        }
        for p in transmit(&mut pair.b, now) {
            pair.b_to_a.send(now, &p);
        }
        for p in std::iter::from_fn(|| pair.b_to_a.pop_due(now)).collect::<Vec<_>>() {
            pair.a.handle_packet(now, &p);
        }
        if pair.a.poll_timeout().is_some_and(|t| t <= now) {
            pair.a.handle_timeout(now);
        }
        for p in transmit(&mut pair.a, now) {
            pair.a_to_b.send(now, &p);
        }
        pair.now = now + us(10);
    }
    let held = pair.b.recv_held();
    assert!(
        held <= 8 * 1024,
        "the receiver holds no more than its buffer: {held}"
    );
    assert_eq!(pair.a.stats().peer_credit, 0);
    assert!(pair.a.stats().credit_stalls >= 1);
    assert!(
        pair.a.stats().probes >= 1,
        "persist probes ask for a window update"
    );
    assert!(pair.a.has_pending());
    // The application drains: the credit opens and everything arrives.
    let mut got = Vec::new();
    for _ in 0..100 {
        got.extend(messages(&mut pair.b));
        pair.step();
        got.extend(pair.b_messages());
        if got.len() == msgs.len() {
            break;
        }
    }
    pair.drive();
    got.extend(pair.b_messages());
    assert_eq!(got, msgs);
    assert_eq!(
        pair.a.state(),
        State::Established,
        "a stall is not a failure"
    );
}

#[test]
fn send_would_block_past_the_bound_and_hands_the_buffer_back() {
    let mut a = conn(
        Config {
            max_queued_messages: 2,
            ..config()
        },
        1,
    );
    assert!(a.can_send(1));
    assert!(a.can_send_many(2, 2) && !a.can_send_many(3, 3));
    a.send(vec![1]).unwrap();
    assert!(!a.can_send_many(2, 2), "one slot left: a pair does not fit");
    a.send(vec![2]).unwrap();
    assert!(!a.can_send(0), "the queue is full whatever the length");
    assert_eq!(a.send(vec![3]), Err(SendError::WouldBlock(vec![3])));
    let big = Config {
        max_message_len: 100,
        max_queued_bytes: 250,
        ..config()
    };
    let mut a = conn(big, 1);
    assert!(!a.can_send(101), "too large for any queue");
    assert_eq!(a.send(vec![0; 101]).unwrap_err().into_inner().len(), 101);
    a.send(vec![0; 100]).unwrap();
    a.send(vec![0; 100]).unwrap();
    assert!(
        a.can_send(50) && !a.can_send(51),
        "the byte bound, to the byte"
    );
    assert!(a.can_send_many(2, 50) && !a.can_send_many(2, 51));
    assert!(matches!(
        a.send(vec![0; 100]),
        Err(SendError::WouldBlock(_))
    ));
    a.send(vec![0; 50]).unwrap();
    assert_eq!(a.queued_bytes(), 250);
    a.close();
    assert!(!a.can_send(0), "a closing connection takes nothing more");
    assert!(matches!(a.send(vec![]), Err(SendError::Closed(_))));
}

#[test]
fn large_messages_are_fragmented_and_reassembled() {
    let mut pair = Pair::new(
        config(),
        LinkConfig {
            mtu: 1024,
            ..LinkConfig::default()
        },
        4,
    );
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    pair.a.send(big.clone()).unwrap();
    pair.a.send(Vec::new()).unwrap();
    pair.a.send(vec![9; config().max_payload()]).unwrap();
    pair.a.send(vec![8; config().max_payload() + 1]).unwrap();
    pair.drive();
    let got = pair.b_messages();
    assert_eq!(got.len(), 4);
    assert!(
        got[0] == big
            && got[1].is_empty()
            && got[2].len() == config().max_payload()
            && got[3].len() == config().max_payload() + 1
    );
    assert_eq!(pair.a_to_b.stats.oversize, 0, "no packet exceeds the MTU");
    assert!(pair.a.stats().data_sent >= 1_000_000 / config().max_payload() as u64);
}

#[test]
fn garbage_is_dropped_and_counted() {
    let (mut a, mut b) = established();
    a.send(b"x".to_vec()).unwrap();
    let p = transmit(&mut a, at(10)).remove(0);
    assert_eq!(
        b.handle_packet(at(11), &p[..HEADER_LEN - 1]),
        Received::Dropped(DropReason::Malformed)
    );
    let mut bad = p.clone();
    bad[HEADER_LEN] ^= 0x10;
    assert_eq!(
        b.handle_packet(at(11), &bad),
        Received::Dropped(DropReason::BadCrc)
    );
    let mut other = Connection::<Vec<u8>>::new(config(), 1, CONN_ID + 1, Instant::ZERO).unwrap();
    let foreign = transmit(&mut other, at(0)).remove(0);
    assert_eq!(
        b.handle_packet(at(11), &foreign),
        Received::Dropped(DropReason::Foreign)
    );
    assert_eq!(b.handle_packet(at(11), &p), Received::Accepted);
    assert_eq!(b.handle_packet(at(11), &p), Received::Duplicate);
    let s = b.stats();
    assert_eq!(
        (
            s.malformed,
            s.bad_crc,
            s.foreign,
            s.dup_packets,
            s.messages_delivered
        ),
        (1, 1, 1, 1, 1)
    );
}

#[test]
fn an_ack_for_packets_never_sent_is_dropped() {
    let (mut a, mut b) = established();
    b.send(b"y".to_vec()).unwrap();
    let p = transmit(&mut b, at(10)).remove(0);
    let mut h = header(&p);
    h.ack = 1000;
    let mut forged = vec![0u8; HEADER_LEN + 1];
    h.emit(&mut forged, &[]).unwrap();
    forged[HEADER_LEN] = b'y';
    wire::seal_packet(&mut forged, None);
    assert_eq!(
        a.handle_packet(at(11), &forged),
        Received::Dropped(DropReason::Malformed)
    );
    assert!(messages(&mut a).is_empty());
}

#[test]
fn a_data_packets_ack_waits_until_the_answer_has_gone() {
    let (mut a, mut b) = established();
    let ping = b"ping".to_vec();
    let ping_ptr = ping.as_ptr();
    let ping_id = a.send(ping).unwrap();
    for p in transmit(&mut a, at(10)) {
        b.handle_packet(at(11), &p);
    }
    assert_eq!(messages(&mut b), vec![b"ping".to_vec()]);
    b.send(b"pong".to_vec()).unwrap();
    let pong = transmit(&mut b, at(12));
    assert_eq!(pong.len(), 1);
    assert_eq!(header(&pong[0]).ack, 1, "the answer acknowledges the ping");
    // The answer delivers a message and acknowledges the ping: the message is there at
    // once, the ack is checked but held back.
    assert!(matches!(
        a.handle_packet(at(20), &pong[0]),
        Received::Accepted
    ));
    let held = a.stats();
    assert_eq!((held.acks_received, held.in_flight), (0, 1));
    assert!(a.has_pending() && a.has_events());
    // A new message goes with the window as it stood, still before the ack is applied.
    a.send(b"next".to_vec()).unwrap();
    let mut buf = vec![0u8; a.config().mtu];
    let n = a.poll_transmit(at(21), &mut buf).unwrap();
    assert_eq!(header(&buf[..n]).seq, 1);
    assert_eq!(a.stats().acks_received, 0);
    // Draining the rest leaves it held: nothing waits that it could let go, and the
    // backend sends what the loop gathered only after its last call.
    assert!(a.poll_transmit(at(21), &mut buf).is_none());
    assert_eq!(a.stats().acks_received, 0, "still held after the drain");
    // The next call that depends on it applies it, as of its arrival: the ping is
    // acknowledged, its buffer handed back, and the round trip measured from send to
    // arrival.
    let ev = events(&mut a);
    let s = a.stats();
    assert_eq!((s.acks_received, s.in_flight), (1, 1));
    assert_eq!(s.srtt, us(10));
    assert!(
        matches!(&ev[0], Event::Message(m) if m.as_slice() == b"pong"),
        "{ev:?}"
    );
    assert!(
        matches!(&ev[1], Event::Sent { id, msg } if *id == ping_id && msg.as_ptr() == ping_ptr),
        "{ev:?}"
    );
}

#[test]
fn every_call_that_depends_on_a_held_ack_applies_it_first() {
    type Step = fn(&mut Connection<Vec<u8>>);
    let calls: [(&str, Step); 5] = [
        ("poll_event", |c| {
            c.poll_event();
        }),
        ("poll_timeout", |c| {
            c.poll_timeout();
        }),
        ("handle_timeout", |c| c.handle_timeout(at(21))),
        ("close", |c| c.close()),
        ("handle_packet", |c| {
            c.handle_packet(at(21), b"not a packet");
        }),
    ];
    for (name, call) in calls {
        let (mut a, mut b) = established();
        a.send(b"ping".to_vec()).unwrap();
        for p in transmit(&mut a, at(10)) {
            b.handle_packet(at(11), &p);
        }
        b.send(b"pong".to_vec()).unwrap();
        for p in transmit(&mut b, at(12)) {
            a.handle_packet(at(20), &p);
        }
        assert_eq!(a.stats().acks_received, 0, "{name}: held");
        call(&mut a);
        let s = a.stats();
        assert_eq!((s.acks_received, s.in_flight), (1, 0), "{name}: applied");
        assert_eq!(s.srtt, us(10), "{name}: as of the arrival");
    }
}

#[test]
fn a_held_ack_goes_before_a_resend_and_a_failure() {
    // Two messages out and both arrive, but the peer's answer (a data packet that
    // acknowledges them) comes after the timer declared the first lost. The resend must
    // wait for the answer's acknowledgement to be applied, which cancels it; and nothing
    // the peer acknowledged is handed back when a connection fails.
    let (mut a, mut b) = established();
    a.send(vec![1; 10]).unwrap();
    a.send(vec![2; 10]).unwrap();
    for p in transmit(&mut a, at(10)) {
        b.handle_packet(at(11), &p);
    }
    b.send(b"data".to_vec()).unwrap();
    let answer = transmit(&mut b, at(11));
    assert_eq!(answer.len(), 1);
    a.handle_timeout(at(10) + us(1000));
    assert_eq!(a.stats().lost, 1);
    a.handle_packet(at(1020), &answer[0]);
    let again = transmit(&mut a, at(1021));
    assert!(
        again.iter().all(|p| header(p).flags & flags::DATA == 0),
        "nothing resent"
    );
    assert_eq!(a.stats().retransmitted, 0);
    let (mut c, mut d) = established();
    c.send(b"acked".to_vec()).unwrap();
    c.send(b"never".to_vec()).unwrap();
    let ps = transmit(&mut c, at(10));
    d.handle_packet(at(11), &ps[0]);
    d.send(b"data".to_vec()).unwrap();
    for p in transmit(&mut d, at(11)) {
        c.handle_packet(at(12), &p);
    }
    c.abort(at(13), "test");
    let unsent: Vec<Vec<u8>> = events(&mut c)
        .into_iter()
        .flat_map(|e| match e {
            Event::Failed { unsent, .. } => unsent,
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        unsent,
        vec![b"never".to_vec()],
        "the acknowledged one is not handed back"
    );
}

#[test]
fn in_place_delivery_points_into_the_datagram() {
    let cfg = Config {
        in_place_delivery: true,
        ..config()
    };
    let (mut a, mut b) = (conn(cfg.clone(), 1), conn(cfg, 1));
    for p in transmit(&mut a, at(0)) {
        b.handle_packet(at(0), &p);
    }
    for p in transmit(&mut b, at(0)) {
        a.handle_packet(at(0), &p);
    }
    a.send(b"in place".to_vec()).unwrap();
    let p = transmit(&mut a, at(1)).remove(0);
    let Received::InPlace { id, payload } = b.handle_packet(at(2), &p) else {
        panic!()
    };
    assert_eq!((id, &p[payload]), (MessageId(0), &b"in place"[..]));
    assert!(messages(&mut b).is_empty(), "not delivered twice");
    assert_eq!(b.stats().messages_delivered, 1);
}

#[test]
fn gathered_transmit_lends_the_callers_buffer() {
    let (mut a, mut b) = established();
    let msg = vec![5u8; 3000];
    let range = msg.as_ptr_range();
    a.send(msg).unwrap();
    let mut header_buf = [0u8; MAX_HEADER_LEN];
    let mut lasts = Vec::new();
    while let Some(g) = a.poll_transmit_gather(at(1), &mut header_buf) {
        assert!(
            range.contains(&g.payload.as_ptr()),
            "payload borrowed from the message"
        );
        let mut packet = header_buf[..g.header_len].to_vec();
        packet.extend_from_slice(g.payload);
        lasts.push(g.last);
        b.handle_packet(at(2), &packet);
    }
    // Only the last packet says nothing follows it, and then nothing did.
    let n = 3000usize.div_ceil(config().max_payload());
    let mut expected = vec![false; n];
    expected[n - 1] = true;
    assert_eq!(lasts, expected);
    assert!(!a.may_transmit());
    assert_eq!(messages(&mut b), vec![vec![5u8; 3000]]);
}

#[test]
fn a_short_payload_comes_inline_when_the_header_buffer_has_room() {
    for key in [None, Some(crate::MacKey::new([7; 32]))] {
        let mut cfg = config();
        cfg.mac_key = key;
        let (mut a, mut b) = established_with(cfg);
        let short = vec![3u8; INLINE_PAYLOAD];
        let long = vec![4u8; INLINE_PAYLOAD + 1];
        a.send(short.clone()).unwrap();
        a.send(long.clone()).unwrap();
        let mut buf = [0u8; MAX_HEADER_LEN + INLINE_PAYLOAD];
        let mut shapes = Vec::new();
        while let Some(g) = a.poll_transmit_gather(at(1), &mut buf) {
            shapes.push((g.payload.len(), g.message.is_some()));
            let mut packet = buf[..g.header_len].to_vec();
            packet.extend_from_slice(g.payload);
            b.handle_packet(at(2), &packet);
        }
        // The short one whole in the buffer (nothing lent), the long one gathered.
        assert_eq!(shapes, vec![(0, false), (INLINE_PAYLOAD + 1, true)]);
        assert_eq!(messages(&mut b), vec![short, long]);
        assert_eq!(b.stats().bad_crc, 0);
    }
}

#[test]
fn a_spurious_retransmission_is_reported_by_dsack() {
    let (mut a, mut b) = established();
    a.send(b"slow ack".to_vec()).unwrap();
    let first = transmit(&mut a, at(10)).remove(0);
    b.handle_packet(at(11), &first);
    // The ack is slow; a times out and sends again; b sees a duplicate and says so.
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    let again = transmit(&mut a, t).remove(0);
    assert_eq!(b.handle_packet(t, &again), Received::Duplicate);
    for p in transmit(&mut b, t) {
        assert_eq!(header(&p).dsack, 1, "D-SACK names sequence number 0");
        a.handle_packet(t, &p);
    }
    assert_eq!(a.stats().spurious_retransmits, 1);
}

#[test]
fn config_is_checked() {
    assert!(
        Connection::<Vec<u8>>::new(
            Config {
                mtu: 10,
                ..config()
            },
            1,
            1,
            Instant::ZERO
        )
        .is_err()
    );
    assert!(
        Connection::<Vec<u8>>::new(
            Config {
                send_window: 0,
                ..config()
            },
            1,
            1,
            Instant::ZERO
        )
        .is_err()
    );
    assert!(
        Connection::<Vec<u8>>::new(config(), 0, 1, Instant::ZERO).is_err(),
        "incarnation 0 is reserved"
    );
}
