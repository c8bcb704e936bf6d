//! Trapeze endpoints on two boards in virtual time (seed 003).

use super::*;
use crate::gm::testbed::{Testbed, TestbedConfig};
use crate::hcb::counter;
use std::sync::Mutex;

struct Two {
    tb: Testbed,
    a: TpzEndpoint,
    b: TpzEndpoint,
    /// Next free page of B's and A's extra memory.
    next_b: usize,
    next_a: usize,
}

fn two() -> Two {
    let mut tb = Testbed::new(TestbedConfig::default()).unwrap();
    let a = tb.a.tpz_init().unwrap();
    let b = tb.b.tpz_init().unwrap();
    Two {
        tb,
        a,
        b,
        next_b: 0,
        next_a: 0,
    }
}

impl Two {
    fn buf_b(&mut self, len: usize, fill: u8) -> HostBuf {
        let mut h = self.tb.b.unit().claim_extra(self.next_b, len).unwrap();
        self.next_b += len.next_multiple_of(4096);
        h.as_mut_slice().fill(fill);
        h
    }

    fn buf_a(&mut self, len: usize, fill: u8) -> HostBuf {
        let mut h = self.tb.a.unit().claim_extra(self.next_a, len).unwrap();
        self.next_a += len.next_multiple_of(4096);
        h.as_mut_slice().fill(fill);
        h
    }

    fn settle(&mut self) {
        assert!(!self.tb.run_until(|_| false, 100_000), "boards go idle");
    }

    /// Sends a control message of `words` (hid `hid`) with `spec`, and `payload` bytes
    /// (of `fill`) attached if given.
    fn send(&mut self, hid: u16, words: &[u32], payload: Option<(usize, u8)>, spec: MsgSpec) {
        let mut m = self.a.get_sendmsg().unwrap().expect("a free send entry");
        m.set_hid(hid);
        for w in words {
            m.reserve(4).unwrap().copy_from_slice(&w.to_be_bytes());
        }
        if let Some((len, fill)) = payload {
            let buf = self.buf_a(len.max(1), fill);
            assert!(m.attach(buf, len, |_| {}).unwrap().is_none());
        }
        self.a.release_sendmsg(m, self.tb.route, spec).unwrap();
        self.settle();
    }

    fn prime_b(&mut self, len: usize) {
        while let Some(m) = self.b.prime_rcvmsg() {
            let buf = self.buf_b(len, 0);
            self.b.attach_rcvmsg(&m, buf).unwrap();
            self.b.release_rcvmsg(m).unwrap();
        }
    }
}

fn word(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[test]
fn inline_messages_dispatch_by_header_id_and_unknown_ids_wait_on_the_slow_queue() {
    let mut t = two();
    type Seen = Arc<Mutex<Vec<(u16, Vec<u8>)>>>;
    let seen: Seen = Arc::default();
    for hid in [1u16, 2] {
        let s = seen.clone();
        t.b.register_rcv_handler(hid, move |d| {
            assert!(d.payload.is_none(), "inline only");
            s.lock().unwrap().push((d.msg.hid(), d.msg.mtod().to_vec()));
        })
        .unwrap();
    }
    assert_eq!(
        t.b.register_rcv_handler(MAX_HIDS, |_| {}).unwrap_err(),
        TpzError::HidOutOfRange(64)
    );
    t.send(1, &[10, 11], None, MsgSpec::Ctrl);
    t.send(7, &[70], None, MsgSpec::Ctrl);
    t.send(2, &(0..30).collect::<Vec<_>>(), None, MsgSpec::Ctrl);
    t.send(1, &[], None, MsgSpec::Ctrl);
    assert_eq!(t.b.peek_rcvmsg().unwrap(), Some(1));
    let r = t.b.dispatch().unwrap();
    assert_eq!(
        r,
        DispatchReport {
            handled: 3,
            no_handler: 1
        }
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[0],
        (
            1,
            [10u32, 11].iter().flat_map(|w| w.to_be_bytes()).collect()
        )
    );
    assert_eq!(seen[1].0, 2);
    assert_eq!(seen[1].1.len(), 120, "30 words inline");
    assert_eq!(word(&seen[1].1[116..]), 29);
    assert_eq!(seen[2], (1, vec![]));
    let mut slow = t.b.slow_dequeue().unwrap();
    assert_eq!((slow.hid(), slow.ctlmsg_len()), (7, 1));
    assert_eq!(word(slow.scan(4).unwrap()), 70);
    assert!(matches!(
        slow.scan(1),
        Err(TpzError::CtlOverflow { want: 1, room: 0 })
    ));
    assert_eq!(slow.rescan().len(), 4);
    t.b.release_rcvmsg(slow).unwrap();
    assert_eq!(t.b.peek_rcvmsg().unwrap(), None, "TPZ_NO_HID");
    // Building past 30 words is refused.
    let mut m = t.a.get_sendmsg().unwrap().unwrap();
    m.reserve(100).unwrap();
    assert!(matches!(
        m.reserve(24),
        Err(TpzError::CtlOverflow { want: 24, room: 20 })
    ));
    assert!(m.set_ctlmsg_len(31).is_err());
}

#[test]
fn both_rings_wrap_around_in_order() {
    let mut t = two();
    let mut got = Vec::new();
    for i in 0..100u32 {
        let mut m = t.a.get_sendmsg().unwrap().expect("the receiver keeps up");
        m.reserve(4).unwrap().copy_from_slice(&i.to_be_bytes());
        m.set_hid(3);
        t.a.release_sendmsg(m, t.tb.route, MsgSpec::Ctrl).unwrap();
        if i % 5 == 4 {
            t.settle();
            while let Some(m) = t.b.get_rcvmsg().unwrap() {
                got.push(word(m.mtod()));
                t.b.release_rcvmsg(m).unwrap();
            }
        }
    }
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    assert!(t.a.send_tail > 6 * SEND_RING && t.b.recv_taken > 6 * RECV_RING);
}

#[test]
fn a_full_send_ring_says_so_and_a_full_receive_ring_drops_and_counts() {
    let mut t = two();
    for _ in 0..SEND_RING {
        let m = t.a.get_sendmsg().unwrap().unwrap();
        t.a.release_sendmsg(m, t.tb.route, MsgSpec::Ctrl).unwrap();
    }
    assert!(
        t.a.get_sendmsg().unwrap().is_none(),
        "sixteen pending: no entry free"
    );
    t.settle();
    // Sent now; the receiver holds every entry.
    for _ in 0..4 {
        let m = t.a.get_sendmsg().unwrap().unwrap();
        t.a.release_sendmsg(m, t.tb.route, MsgSpec::Ctrl).unwrap();
    }
    t.settle();
    let c = t.tb.b.mcp_counters().unwrap();
    assert_eq!(c.get(counter::TPZ_RECEIVED), RECV_RING);
    assert_eq!(c.get(counter::TPZ_DROP_RING), 4);
    // Released out of order, entries go back only in order.
    let msgs: Vec<_> = (0..RECV_RING)
        .map(|_| t.b.get_rcvmsg().unwrap().unwrap())
        .collect();
    assert!(t.b.get_rcvmsg().unwrap().is_none());
    let mut it = msgs.into_iter();
    let first = it.next().unwrap();
    for m in it {
        t.b.release_rcvmsg(m).unwrap();
    }
    assert_eq!(t.b.recv_released, 0, "entry 0 still held");
    t.b.release_rcvmsg(first).unwrap();
    assert_eq!(t.b.recv_released, RECV_RING);
}

#[test]
fn payloads_land_in_attached_buffers_which_detach_and_reattach() {
    let mut t = two();
    t.prime_b(4096);
    t.send(5, &[1], Some((3000, 0x3C)), MsgSpec::Unsol);
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(
        (m.payload_status(), m.payload_len()),
        (PayloadStatus::Attached, 3000)
    );
    assert!(t.b.attached(&m));
    t.b.with_payload(&m, |p| assert!(p.unwrap().iter().all(|&b| b == 0x3C)));
    let buf = t.b.detach_rcvmsg(&m).unwrap().unwrap();
    assert!(!t.b.attached(&m));
    assert!(buf.as_slice()[..3000].iter().all(|&b| b == 0x3C));
    assert!(
        buf.as_slice()[3000..].iter().all(|&b| b == 0),
        "nothing past the payload"
    );
    // Released without a fresh buffer: the next payload there is dropped, the message
    // still delivered.
    t.b.release_rcvmsg(m).unwrap();
    for _ in 1..RECV_RING {
        t.send(5, &[2], None, MsgSpec::Ctrl);
        let m = t.b.get_rcvmsg().unwrap().unwrap();
        t.b.release_rcvmsg(m).unwrap();
    }
    t.send(5, &[3], Some((100, 1)), MsgSpec::Unsol);
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(
        m.index() % RECV_RING,
        0,
        "the entry whose buffer was detached"
    );
    assert_eq!(
        (m.payload_status(), m.payload_len(), word(m.mtod())),
        (PayloadStatus::NoBuffer, 0, 3)
    );
    // Restock it, and a payload larger than the buffer is refused, not written past it.
    let small = t.buf_b(4096, 0x11);
    t.b.attach_rcvmsg(&m, small).unwrap();
    let again = t.buf_b(4096, 0);
    let (e, _) = t.b.attach_rcvmsg(&m, again).unwrap_err();
    assert_eq!(e, TpzError::AlreadyAttached(m.index()));
    t.b.release_rcvmsg(m).unwrap();
    t.send(5, &[4], Some((4097, 2)), MsgSpec::Unsol);
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(m.index() % RECV_RING, 1);
    t.b.release_rcvmsg(m).unwrap();
    let c = t.tb.b.mcp_counters().unwrap();
    assert_eq!(c.get(counter::TPZ_PAYLOAD_NO_BUFFER), 1);
    // A payload bigger than the attached buffer of entry 1 (4096 bytes):
    assert_eq!(c.get(counter::TPZ_PAYLOAD_TOO_LONG), 1);
    // And the sender refuses to attach more than its buffer holds.
    let mut sm = t.a.get_sendmsg().unwrap().unwrap();
    let b = t.buf_a(4096, 0);
    let (e, _) = sm.attach(b, 5000, |_| {}).unwrap_err();
    assert_eq!(
        e,
        TpzError::PayloadTooLong {
            len: 5000,
            max: 4096
        }
    );
    let (e, _) =
        t.a.release_sendmsg(sm, t.tb.route, MsgSpec::Unsol)
            .unwrap_err();
    assert_eq!(e, TpzError::NoPayload);
}

#[test]
fn tokens_serve_once_refuse_forged_keys_and_are_reused_after_release() {
    let mut t = two();
    t.prime_b(4096);
    let buf = t.buf_b(4096, 0xEE);
    let tok = t.b.get_token(buf).unwrap();
    // The token travels to the sender in a control message.
    let tok = Token::from_bytes(tok.to_bytes());
    t.send(9, &[1], Some((2048, 0x42)), MsgSpec::Token(tok));
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(
        (m.payload_status(), m.payload_len(), m.token_slot()),
        (PayloadStatus::Token, 2048, Some(tok.slot))
    );
    t.b.release_rcvmsg(m).unwrap();
    // A duplicate finds the key cancelled: payload dropped, control message delivered.
    t.send(9, &[2], Some((2048, 0x66)), MsgSpec::Token(tok));
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(
        (m.payload_status(), m.payload_len(), word(m.mtod())),
        (PayloadStatus::BadToken, 0, 2)
    );
    t.b.release_rcvmsg(m).unwrap();
    let buf = t.b.release_token(tok).unwrap();
    assert!(
        buf.as_slice()[..2048].iter().all(|&b| b == 0x42),
        "the first payload, not the duplicate"
    );
    assert!(buf.as_slice()[2048..].iter().all(|&b| b == 0xEE));
    assert_eq!(
        t.b.release_token(tok).unwrap_err(),
        TpzError::UnknownToken(tok)
    );
    // The slot is reused under a new key; the old token is stale, a forged key is refused.
    let tok2 = t.b.get_token(buf).unwrap();
    assert_eq!(tok2.slot, tok.slot);
    assert_ne!(tok2.key, tok.key);
    t.send(9, &[3], Some((16, 0x01)), MsgSpec::Token(tok));
    t.send(
        9,
        &[4],
        Some((16, 0x02)),
        MsgSpec::Token(Token {
            key: tok2.key ^ 0x8000,
            ..tok2
        }),
    );
    t.send(
        9,
        &[5],
        Some((16, 0x03)),
        MsgSpec::Token(Token { slot: 999, ..tok2 }),
    );
    for want in [3, 4, 5] {
        let m = t.b.get_rcvmsg().unwrap().unwrap();
        assert_eq!(
            (m.payload_status(), word(m.mtod())),
            (PayloadStatus::BadToken, want)
        );
        t.b.release_rcvmsg(m).unwrap();
    }
    // Too long for the token's buffer: refused, the buffer untouched.
    t.send(9, &[6], Some((5000, 0x77)), MsgSpec::Token(tok2));
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(m.payload_status(), PayloadStatus::TooLong);
    t.b.release_rcvmsg(m).unwrap();
    let buf = t.b.release_token(tok2).unwrap();
    assert!(buf.as_slice()[..2048].iter().all(|&b| b == 0x42));
    // Cancelled before use: the payload is dropped, the buffer comes back as it was.
    let tok3 = t.b.get_token(buf).unwrap();
    let buf = t.b.cancel_token(tok3).unwrap();
    t.send(9, &[7], Some((16, 0x09)), MsgSpec::Token(tok3));
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!(m.payload_status(), PayloadStatus::BadToken);
    assert!(buf.as_slice()[..16].iter().all(|&b| b == 0x42));
    let c = t.tb.b.mcp_counters().unwrap();
    assert_eq!(c.get(counter::TPZ_PAYLOAD_BAD_TOKEN), 5);
    assert_eq!(c.get(counter::TPZ_PAYLOAD_TOO_LONG), 1);
    // The IPT runs out.
    let mut held = Vec::new();
    for _ in 0..IPT_SLOTS {
        let b = t.buf_b(4096, 0);
        held.push(t.b.get_token(b).unwrap());
    }
    let b = t.buf_b(4096, 0);
    assert_eq!(t.b.get_token(b).unwrap_err().0, TpzError::NoSlot);
}

#[test]
fn send_completions_run_in_ring_order_and_aborted_sends_complete_unsent() {
    let mut t = two();
    t.prime_b(8192);
    let order: Arc<Mutex<Vec<(u32, bool)>>> = Arc::default();
    for i in 0..40u32 {
        let mut m = loop {
            if let Some(m) = t.a.get_sendmsg().unwrap() {
                break m;
            }
            t.tb.step();
        };
        m.reserve(4).unwrap().copy_from_slice(&i.to_be_bytes());
        let buf = t.buf_a(8192, i as u8);
        let o = order.clone();
        m.attach(buf, 256 + 200 * (i as usize % 30), move |c| {
            assert_eq!(c.payload.as_slice()[0], i as u8, "its own buffer back");
            o.lock().unwrap().push((i, c.sent));
        })
        .unwrap();
        if i % 7 == 3 {
            m.senderr();
        }
        t.a.release_sendmsg(m, t.tb.route, MsgSpec::Unsol).unwrap();
        if i % 3 == 0 {
            t.tb.step();
            while let Some(r) = t.b.get_rcvmsg().unwrap() {
                t.b.release_rcvmsg(r).unwrap();
            }
        }
    }
    t.settle();
    t.a.check_xmit_complete().unwrap();
    let order = order.lock().unwrap();
    assert_eq!(
        order.iter().map(|o| o.0).collect::<Vec<_>>(),
        (0..40).collect::<Vec<_>>()
    );
    assert!(order.iter().all(|&(i, sent)| sent == (i % 7 != 3)));
    assert_eq!(t.a.counters().completions, 40);
    assert_eq!(
        t.tb.a.mcp_counters().unwrap().get(counter::TPZ_SENT),
        40 - 6
    );
}

#[test]
fn one_endpoint_per_board() {
    let mut t = two();
    assert_eq!(t.tb.a.tpz_init().unwrap_err(), TpzError::EndpointInUse);
    let before = t.tb.a.sram_usage().unwrap().free_pages;
    drop(t.a);
    assert!(
        t.tb.a.sram_usage().unwrap().free_pages > before,
        "its sram is freed"
    );
    t.a = t.tb.a.tpz_init().unwrap();
}

#[test]
fn hostile_send_entries_are_refused_and_a_misplaced_endpoint_is_ignored() {
    let mut t = two();
    let done: Arc<Mutex<Vec<bool>>> = Arc::default();
    // Entries the host API would never write: 31 control words; a payload past the
    // maximum; a payload length with no payload flag; a route out of the table.
    let bad = [
        (31u32, 0u32, 0u32, 1u32),
        (1, flags::PAYLOAD, PAYLOAD_MAX as u32 + 4, 1),
        (1, 0, 64, 1),
        (1, 0, 0, 9999),
    ];
    for (words, fl, len, route) in bad {
        let i = t.a.send_tail;
        let at = wire::send_entry_at(t.a.base, i);
        t.a.wr(at + send_entry::FLAGS, fl).unwrap();
        t.a.wr(at + send_entry::ROUTE, route).unwrap();
        t.a.wr(at + send_entry::CTL_WORDS, words).unwrap();
        t.a.wr(at + send_entry::PAYLOAD_LEN, len).unwrap();
        t.a.wr(t.a.base + ep::SEND_TAIL, i + 1).unwrap();
        t.a.send_tail = i + 1;
        t.a.pending.push_back(Pending { payload: None });
    }
    // A good one after them still goes, and completes in order.
    let mut m = t.a.get_sendmsg().unwrap().unwrap();
    m.reserve(4).unwrap().copy_from_slice(&7u32.to_be_bytes());
    let buf = t.buf_a(64, 0);
    let d = done.clone();
    m.attach(buf, 64, move |c| d.lock().unwrap().push(c.sent))
        .unwrap();
    t.prime_b(4096);
    t.a.release_sendmsg(m, t.tb.route, MsgSpec::Unsol).unwrap();
    t.settle();
    assert_eq!(t.a.check_xmit_complete().unwrap(), 5);
    assert_eq!(*done.lock().unwrap(), vec![true]);
    let c = t.tb.a.mcp_counters().unwrap();
    assert_eq!(
        (c.get(counter::SEND_ERRORS), c.get(counter::TPZ_SENT)),
        (4, 1)
    );
    for i in 0..4 {
        let s =
            t.a.rd(wire::send_entry_at(t.a.base, i) + send_entry::STATUS)
                .unwrap();
        assert_eq!(s, wire::SENT_ERROR);
    }
    let m = t.b.get_rcvmsg().unwrap().unwrap();
    assert_eq!((word(m.mtod()), m.payload_len()), (7, 64));
    t.b.release_rcvmsg(m).unwrap();
    // B's endpoint pointer moved onto the HCB: the MCP ignores it and drops, counting.
    let layout = t.tb.b.layout;
    t.b.wr(layout.gm + gm_area::TPZ_ENDPOINT, layout.base)
        .unwrap();
    t.send(1, &[1], None, MsgSpec::Ctrl);
    assert_eq!(
        t.tb.b.mcp_counters().unwrap().get(counter::TPZ_DROP_RING),
        1
    );
    t.b.wr(layout.gm + gm_area::TPZ_ENDPOINT, t.b.base).unwrap();
}
