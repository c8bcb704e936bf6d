//! Property tests: arbitrary interleavings of sends, deliveries, duplications, drops,
//! corruptions and the passing of time keep the protocol's invariants, and once the
//! channel heals everything sent arrives.
//!
//! Invariants checked after every operation:
//! * what each end delivered is a prefix of what the other sent: in order, no duplicate,
//!   byte-identical;
//! * the span of unacknowledged sequence numbers stays within the send window;
//! * the receiver holds no more than its buffer allows (twice the buffer: out-of-order
//!   packets may fill one, in-order data the other) plus one packet.

use myri_rpp::{Config, Connection, Event, Instant, State};
use proptest::prelude::*;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
    /// One end queues a message of this length.
    Send { from_a: bool, len: usize },
    /// A packet in flight arrives (index taken modulo what is in flight).
    Deliver { to_b: bool, index: usize },
    /// A packet arrives and stays in flight, to arrive again later.
    Duplicate { to_b: bool, index: usize },
    /// A packet is lost.
    Drop { to_b: bool, index: usize },
    /// A packet arrives with one bit flipped.
    Corrupt {
        to_b: bool,
        index: usize,
        bit: usize,
    },
    /// Time passes; timers that are due run.
    Wait { micros: u64 },
    /// One end's application takes its delivered messages (or not, for a while).
    Drain { a: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<bool>(), prop_oneof![0usize..64, 0usize..3000]).prop_map(|(from_a, len)| Op::Send { from_a, len }),
        6 => (any::<bool>(), any::<usize>()).prop_map(|(to_b, index)| Op::Deliver { to_b, index }),
        1 => (any::<bool>(), any::<usize>()).prop_map(|(to_b, index)| Op::Duplicate { to_b, index }),
        2 => (any::<bool>(), any::<usize>()).prop_map(|(to_b, index)| Op::Drop { to_b, index }),
        1 => (any::<bool>(), any::<usize>(), any::<usize>()).prop_map(|(to_b, index, bit)| Op::Corrupt { to_b, index, bit }),
        2 => (0u64..3000).prop_map(|micros| Op::Wait { micros }),
        2 => any::<bool>().prop_map(|a| Op::Drain { a }),
    ]
}

fn config() -> Config {
    Config::default()
        .with_mtu(512)
        .with_send_window(8)
        .with_recv_window(8)
        .with_recv_buffer_bytes(6000)
        .with_max_message_len(3000)
        .with_max_queued_bytes(20_000)
        .with_max_queued_messages(64)
        .with_rto_initial(Duration::from_micros(500))
        .with_rto_min(Duration::from_micros(100))
        .with_rto_max(Duration::from_millis(20))
        .with_ack_delay(Duration::from_micros(200))
        .with_keepalive(Duration::from_millis(50))
        // The ops may starve the channel for long: failing is not what is tested here.
        .with_max_retries(1_000_000)
}

/// One end and what the test knows about it.
struct End {
    conn: Connection<Vec<u8>>,
    /// Messages it accepted for sending, in order.
    sent: Vec<Vec<u8>>,
    /// Messages it delivered, in order.
    delivered: Vec<Vec<u8>>,
    /// Which messages were handed back as acknowledged (selective acks complete them in
    /// any order).
    acked: Vec<bool>,
}

impl End {
    fn new() -> End {
        End {
            conn: Connection::new(config(), 1, 9, Instant::ZERO).unwrap(),
            sent: Vec::new(),
            delivered: Vec::new(),
            acked: Vec::new(),
        }
    }

    fn drain(&mut self) {
        while let Some(e) = self.conn.poll_event() {
            match e {
                Event::Message(m) => self.delivered.push(m),
                Event::Sent { id, msg } => {
                    let i = id.0 as usize;
                    assert!(msg == self.sent[i], "message {i}: another buffer came back");
                    assert!(!self.acked[i], "message {i} handed back twice");
                    self.acked[i] = true;
                }
                Event::Connected { .. } => {}
                other => panic!("unexpected event {other:?}"),
            }
        }
    }
}

struct World {
    a: End,
    b: End,
    to_b: Vec<Vec<u8>>,
    to_a: Vec<Vec<u8>>,
    now: Instant,
    buf: Vec<u8>,
    msg_counter: u32,
}

impl World {
    fn transmit(&mut self) {
        for (end, out) in [(&mut self.a, &mut self.to_b), (&mut self.b, &mut self.to_a)] {
            loop {
                // Whenever `may_transmit` says no packet would come, none does.
                let may = end.conn.may_transmit();
                let Some(n) = end.conn.poll_transmit(self.now, &mut self.buf) else {
                    break;
                };
                assert!(may, "a packet came where may_transmit said none would");
                assert!(n <= config().mtu);
                out.push(self.buf[..n].to_vec());
            }
        }
    }

    fn arrive(&mut self, to_b: bool, packet: &[u8]) {
        let end = if to_b { &mut self.b } else { &mut self.a };
        end.conn.handle_packet(self.now, packet);
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Send { from_a, len } => {
                self.msg_counter += 1;
                let msg: Vec<u8> = (0..len)
                    .map(|i| (i as u32 ^ self.msg_counter.wrapping_mul(2654435761)) as u8)
                    .collect();
                let end = if from_a { &mut self.a } else { &mut self.b };
                if let Ok(id) = end.conn.send(msg.clone()) {
                    assert_eq!(id.0 as usize, end.sent.len(), "ids count messages");
                    end.sent.push(msg);
                    end.acked.push(false);
                }
            }
            Op::Deliver { to_b, index }
            | Op::Duplicate { to_b, index }
            | Op::Drop { to_b, index }
            | Op::Corrupt { to_b, index, .. } => {
                let queue = if to_b { &mut self.to_b } else { &mut self.to_a };
                if queue.is_empty() {
                    return;
                }
                let i = index % queue.len();
                let packet = match &op {
                    Op::Duplicate { .. } => queue[i].clone(),
                    _ => queue.remove(i),
                };
                match op {
                    Op::Drop { .. } => {}
                    Op::Corrupt { bit, .. } => {
                        let mut bad = packet;
                        let bit = bit % (bad.len() * 8);
                        bad[bit / 8] ^= 1 << (bit % 8);
                        self.arrive(to_b, &bad);
                    }
                    _ => self.arrive(to_b, &packet),
                }
            }
            Op::Wait { micros } => {
                self.now += Duration::from_micros(micros);
                for end in [&mut self.a, &mut self.b] {
                    if end.conn.poll_timeout().is_some_and(|t| t <= self.now) {
                        end.conn.handle_timeout(self.now);
                    }
                }
            }
            Op::Drain { a } => {
                if a {
                    self.a.drain()
                } else {
                    self.b.drain()
                }
            }
        }
        self.transmit();
    }

    fn check(&self) {
        for (from, to) in [(&self.a, &self.b), (&self.b, &self.a)] {
            assert!(
                to.delivered.len() <= from.sent.len(),
                "more delivered than sent"
            );
            for (i, m) in to.delivered.iter().enumerate() {
                assert!(
                    *m == from.sent[i],
                    "message {i} delivered out of order, twice, or altered"
                );
            }
            let s = from.conn.stats();
            assert!(
                s.unacked_span <= config().send_window,
                "window exceeded: {s:?}"
            );
            assert!(
                to.conn.recv_held() <= 2 * config().recv_buffer_bytes + config().mtu,
                "receiver holds {}",
                to.conn.recv_held()
            );
            assert_ne!(from.conn.state(), State::Failed);
        }
    }

    /// A perfect channel from now on: everything in flight arrives in order, time passes,
    /// until both ends are quiet.
    fn heal(&mut self) {
        for _ in 0..100_000 {
            self.a.drain();
            self.b.drain();
            let delivered = !self.to_b.is_empty() || !self.to_a.is_empty();
            for p in std::mem::take(&mut self.to_b) {
                self.arrive(true, &p);
            }
            for p in std::mem::take(&mut self.to_a) {
                self.arrive(false, &p);
            }
            self.transmit();
            self.a.drain();
            self.b.drain();
            let idle = !self.a.conn.has_pending()
                && !self.b.conn.has_pending()
                && self.to_a.is_empty()
                && self.to_b.is_empty();
            if idle
                && self.a.delivered.len() == self.b.sent.len()
                && self.b.delivered.len() == self.a.sent.len()
            {
                return;
            }
            if !delivered {
                // Nothing on the wire: let the earliest timer run.
                let next = [self.a.conn.poll_timeout(), self.b.conn.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                if let Some(t) = next {
                    self.now = self.now.max(t);
                }
                self.apply(Op::Wait { micros: 0 });
            }
            self.check();
        }
        panic!("the channel healed but the connection did not finish");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_keeps_the_invariants(ops in proptest::collection::vec(op(), 1..400)) {
        let mut w = World { a: End::new(), b: End::new(), to_b: Vec::new(), to_a: Vec::new(), now: Instant::ZERO, buf: vec![0; 512], msg_counter: 0 };
        w.transmit();
        for op in ops {
            w.apply(op);
            w.check();
        }
        w.heal();
        w.check();
        assert!(w.b.delivered == w.a.sent && w.a.delivered == w.b.sent, "everything arrives once healed");
        assert!(w.a.acked.iter().chain(&w.b.acked).all(|&a| a), "every buffer handed back");
    }
}
