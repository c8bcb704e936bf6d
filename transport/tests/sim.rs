//! `sim://` endpoints: raw and reliable exchanges between simulated boards, stepped inline
//! in virtual time (deterministic).

mod common;

use common::{drive_until, pair};
use myri_transport::{Completion, Endpoint, Error, Options, Scheme};

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
        Err(Error::AddrInUse(_))
    ));
    let mut b = Endpoint::open("sim://?world=names").unwrap();
    assert!(b.local_url().starts_with("sim://ep"), "{}", b.local_url());
    assert!(matches!(
        b.insert_addr("sim://nobody"),
        Err(Error::AddrNotFound(_))
    ));
    assert!(matches!(
        b.insert_addr("udp://1.2.3.4:5"),
        Err(Error::BadPeerAddr { .. })
    ));
    assert!(matches!(
        b.insert_addr("sim://taken?reliable=0"),
        Err(Error::BadPeerAddr { .. })
    ));
    assert!(matches!(b.insert_addr("bogus"), Err(Error::Url(_))));
    let p = b.insert_addr("sim://taken").unwrap();
    assert_eq!(
        b.insert_addr("sim://taken").unwrap(),
        p,
        "same address, same handle"
    );
    let _ = Options::default();
}
