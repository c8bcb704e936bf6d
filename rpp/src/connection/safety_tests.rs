//! Scripted tests of integrity modes and off-path safety: packets that do not name the
//! connection's pair, carry the wrong check or a bad MAC change a counter and nothing
//! else.

use super::tests::{at, config, conn, established, events, header, messages, transmit};
use super::*;
use crate::Stats;
use crate::testing::{CONN_ID, LinkConfig, Pair};
use crate::wire::{HEADER_LEN, Integrity, MacKey, offset};

/// `packet` with its header edited by `f`, resealed (a valid CRC and, with `key`, a
/// valid MAC): what a forger who knows the format produces.
fn forge(packet: &[u8], key: Option<&MacKey>, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut p = packet.to_vec();
    f(&mut p);
    wire::seal_packet(&mut p, key);
    p
}

fn put_u64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Hands `packet` to `c` and checks it was dropped for `reason` and changed nothing but
/// the counters `counted` says: no event, no packet out, no state, no delivery.
#[track_caller]
fn changes_only_a_counter(
    c: &mut Connection<Vec<u8>>,
    packet: &[u8],
    reason: DropReason,
    counted: impl FnOnce(&mut Stats),
) {
    let before = c.stats();
    let state = c.state();
    let timeout = c.poll_timeout();
    assert_eq!(c.handle_packet(at(20), packet), Received::Dropped(reason));
    let mut expected = Stats {
        packets_received: before.packets_received + 1,
        ..before
    };
    counted(&mut expected);
    assert_eq!(c.stats(), expected);
    assert_eq!(c.state(), state);
    assert_eq!(c.poll_timeout(), timeout, "no timer moved");
    assert!(events(c).is_empty(), "no event");
    assert!(
        transmit(c, at(20)).is_empty(),
        "no reset, no ack, nothing out"
    );
}

#[test]
fn packets_naming_another_pair_change_nothing_but_a_counter() {
    let (mut a, mut b) = established();
    a.send(b"genuine".to_vec()).unwrap();
    let data = transmit(&mut a, at(10)).remove(0);
    let mut close = data.clone();
    close[offset::FLAGS] = flags::CLOSE;
    wire::seal_packet(&mut close, None);
    for p in [&data, &close] {
        // Another connection id.
        let wrong_id = forge(p, None, |p| put_u64(p, offset::CONN_ID, CONN_ID ^ 1));
        changes_only_a_counter(&mut b, &wrong_id, DropReason::Foreign, |s| s.foreign += 1);
        // The peer's incarnation wrong (an earlier life, or a guess).
        let wrong_src = forge(p, None, |p| put_u64(p, offset::SRC_INCARNATION, 0xdead));
        changes_only_a_counter(&mut b, &wrong_src, DropReason::Stale, |s| s.stale += 1);
        // Ours wrong.
        let wrong_dst = forge(p, None, |p| put_u64(p, offset::DST_INCARNATION, 0xbeef));
        changes_only_a_counter(&mut b, &wrong_dst, DropReason::Stale, |s| s.stale += 1);
    }
    // The genuine packet still delivers, once.
    b.handle_packet(at(30), &data);
    assert_eq!(messages(&mut b), vec![b"genuine".to_vec()]);
    assert_eq!(b.state(), State::Established);
}

#[test]
fn a_forged_introduction_gets_a_challenge_and_never_resets() {
    let (mut a, mut b) = established();
    a.send(b"before".to_vec()).unwrap();
    let data = transmit(&mut a, at(10)).remove(0);
    // Someone who knows the connection id (not the incarnations) claims to be a new
    // life of a.
    let hello = forge(&data, None, |p| {
        p.truncate(HEADER_LEN);
        p[offset::FLAGS] = flags::HELLO;
        put_u64(p, offset::SRC_INCARNATION, 0x5eed);
        put_u64(p, offset::DST_INCARNATION, 0);
    });
    assert_eq!(
        b.handle_packet(at(11), &hello),
        Received::Dropped(DropReason::Stale)
    );
    assert_eq!(b.stats().restart_challenges, 1);
    assert!(events(&mut b).is_empty(), "no restart");
    // The challenge goes to the claimed life, naming it, and carries nothing of the
    // connection (no ack of a's data, no credit beyond a fresh one's).
    let out = transmit(&mut b, at(11));
    assert_eq!(out.len(), 1);
    let h = header(&out[0]);
    assert_eq!(
        (h.dst_incarnation, h.ack, h.flags & flags::DATA),
        (0x5eed, 0, 0)
    );
    // An off-path forger never sees b's incarnation, so whatever it sends next names the
    // wrong one and is dropped.
    let answer = forge(&data, None, |p| {
        put_u64(p, offset::SRC_INCARNATION, 0x5eed);
        put_u64(p, offset::DST_INCARNATION, b.incarnation() ^ 0xff);
    });
    changes_only_a_counter(&mut b, &answer, DropReason::Stale, |s| s.stale += 1);
    // The real a carries on as if nothing happened.
    b.handle_packet(at(12), &data);
    assert_eq!(messages(&mut b), vec![b"before".to_vec()]);
    assert_eq!(b.peer_incarnation(), Some(a.incarnation()));
}

#[test]
fn a_bad_or_missing_mac_changes_nothing_but_a_counter() {
    let key = MacKey::new([0x42; 32]);
    let keyed = config().with_mac_key(Some(key.clone()));
    let (mut a, mut b) = (conn(keyed.clone(), 1), conn(keyed.clone(), 2));
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
    a.send(b"signed".to_vec()).unwrap();
    let data = transmit(&mut a, at(10)).remove(0);
    assert!(Header::new_checked(&data[..]).unwrap().mac_ok(&key));
    // Payload changed, the CRC fixed up: the MAC no longer matches.
    let mut tampered = data.clone();
    *tampered.last_mut().unwrap() ^= 1;
    let crc = wire::crc32c(&tampered[4..]);
    tampered[..4].copy_from_slice(&crc.to_be_bytes());
    changes_only_a_counter(&mut b, &tampered, DropReason::BadMac, |s| s.bad_mac += 1);
    // Sealed whole with another key.
    let other = forge(&data, Some(&MacKey::new([0x43; 32])), |_| {});
    changes_only_a_counter(&mut b, &other, DropReason::BadMac, |s| s.bad_mac += 1);
    // No MAC at all, from an end without the key: the integrity byte does not match.
    let mut plain = conn(config(), 1);
    plain.send(b"unsigned".to_vec()).unwrap();
    let unsigned = transmit(&mut plain, at(10)).remove(0);
    changes_only_a_counter(&mut b, &unsigned, DropReason::IntegrityMismatch, |s| {
        s.integrity_mismatch += 1
    });
    // The keyless end refuses the signed packet the same way.
    let mut plain_b = conn(config(), 2);
    assert_eq!(
        plain_b.handle_packet(at(10), &data),
        Received::Dropped(DropReason::IntegrityMismatch)
    );
    // The genuine packet still delivers.
    b.handle_packet(at(30), &data);
    assert_eq!(messages(&mut b), vec![b"signed".to_vec()]);
}

#[test]
fn an_integrity_mode_mismatch_is_dropped_and_counted() {
    for (sender, receiver) in [
        (Integrity::External, Integrity::Crc32c),
        (Integrity::None, Integrity::Crc32c),
        (Integrity::Crc32c, Integrity::External),
        (Integrity::External, Integrity::None),
    ] {
        let mut a = conn(config().with_integrity(sender), 1);
        let mut b = conn(config().with_integrity(receiver), 2);
        transmit(&mut b, at(0));
        a.send(b"x".to_vec()).unwrap();
        let hello = transmit(&mut a, at(0)).remove(0);
        assert_eq!(
            Header::new_checked(&hello[..]).unwrap().integrity(),
            Some(sender)
        );
        changes_only_a_counter(&mut b, &hello, DropReason::IntegrityMismatch, |s| {
            s.integrity_mismatch += 1
        });
        assert_eq!(b.peer_incarnation(), None, "{sender:?} -> {receiver:?}");
    }
}

/// `authenticates` (what a driver asks before acting on a packet outside a connection,
/// such as one reviving a failed peer) passes exactly what `handle_packet`'s checks pass:
/// the connection's integrity mode and its check, its MAC, its id; it counts nothing.
#[test]
fn authenticates_applies_the_connections_own_checks() {
    for integrity in [Integrity::Crc32c, Integrity::External, Integrity::None] {
        let key = MacKey::new([0x42; 32]);
        for mac in [None, Some(key.clone())] {
            let cfg = config().with_integrity(integrity).with_mac_key(mac.clone());
            let mut a = conn(cfg.clone(), 1);
            let b = conn(cfg, 2);
            let hello = transmit(&mut a, at(0)).remove(0);
            let case = format!("{integrity:?}, mac {}", mac.is_some());
            assert!(b.authenticates(&hello), "{case}");
            let before = b.stats();
            // Another connection id, resealed as a forger would.
            let foreign = forge(&hello, mac.as_ref(), |p| {
                put_u64(p, offset::CONN_ID, CONN_ID ^ 1)
            });
            assert!(!b.authenticates(&foreign), "{case}: foreign id");
            // Another integrity mode: a packet may not choose a weaker check.
            for other in [Integrity::Crc32c, Integrity::External, Integrity::None] {
                if other != integrity {
                    let c = config().with_integrity(other).with_mac_key(mac.clone());
                    let other_hello = transmit(&mut conn(c, 1), at(0)).remove(0);
                    assert!(!b.authenticates(&other_hello), "{case}: {other:?}");
                }
            }
            // Damaged: caught by the CRC or the MAC where there is one.
            let mut damaged = hello.clone();
            *damaged.last_mut().unwrap() ^= 1;
            let checked = integrity == Integrity::Crc32c || mac.is_some();
            assert_eq!(b.authenticates(&damaged), !checked, "{case}: damaged");
            if mac.is_some() {
                let other_key = forge(&hello, Some(&MacKey::new([0x43; 32])), |_| {});
                assert!(!b.authenticates(&other_key), "{case}: another key");
            }
            assert!(!b.authenticates(&hello[..HEADER_LEN - 1]), "{case}: short");
            assert_eq!(b.stats(), before, "{case}: nothing counted");
        }
    }
}

/// External integrity: RPP computes no CRC (the field is zero) and takes the channel's
/// word for it; the messages arrive as with a CRC.
#[test]
fn external_integrity_sends_no_crc_and_delivers() {
    let cfg = config().with_integrity(Integrity::External);
    let mut a = conn(cfg.clone(), 1);
    let hello = transmit(&mut a, at(0)).remove(0);
    let h = Header::new_checked(&hello[..]).unwrap();
    assert_eq!((h.integrity(), h.crc()), (Some(Integrity::External), 0));
    let mut pair = Pair::new(cfg, LinkConfig::default(), 3);
    let msgs: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; i * 97]).collect();
    for m in &msgs {
        pair.a.send(m.clone()).unwrap();
    }
    pair.drive();
    assert_eq!(pair.b_messages(), msgs);
    let s = pair.b.stats();
    assert_eq!((s.bad_crc, s.integrity_mismatch), (0, 0));
}

/// With no CRC but a MAC, the MAC catches every corrupted packet: everything arrives
/// intact over a link that flips bits.
#[test]
fn a_mac_alone_catches_corruption() {
    let cfg = config()
        .with_integrity(Integrity::None)
        .with_mac_key(Some(MacKey::derive("myri-rpp test", b"secret")));
    let link = LinkConfig {
        corrupt: 0.05,
        loss: 0.01,
        ..LinkConfig::default()
    };
    let mut pair = Pair::new(cfg, link, 11);
    let msgs: Vec<Vec<u8>> = (0..300).map(|i| vec![(i * 7) as u8; i * 31]).collect();
    for m in &msgs {
        pair.a.send(m.clone()).unwrap();
    }
    pair.drive();
    assert_eq!(pair.b_messages(), msgs);
    let caught = pair.a.stats().bad_mac + pair.b.stats().bad_mac;
    let flipped = pair.a_to_b.stats.corrupted + pair.b_to_a.stats.corrupted;
    assert!(flipped > 0);
    // Nearly every flip is caught by the MAC; the rest made the header unreadable or
    // its integrity byte wrong, or hit the unused CRC field (harmless: it checks
    // nothing in this mode).
    let dropped = caught
        + pair.a.stats().integrity_mismatch
        + pair.b.stats().integrity_mismatch
        + pair.a.stats().malformed
        + pair.b.stats().malformed;
    assert!(
        caught * 10 > flipped * 9 && dropped <= flipped,
        "{caught} of {flipped}"
    );
}
