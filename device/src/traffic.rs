//! A traffic generator: the smallest control program that exercises a board and the
//! fabric. It sends frames by source route with the send-DMA engine (route bytes placed
//! with the send alignment, then the frame) and receives with the receive-DMA engine,
//! checking every byte of what arrives.
//!
//! `myri fabric` runs one per board, under the deterministic scheduler or on threads.

use crate::board::Board;
use crate::engines::RecvState;
use crate::fabric::PortId;
use crate::fabric::fault::mix_seed;
use crate::sched::Node;
use crate::time::Time;
use crate::wire::{Frame, Route};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The packet type of traffic-generator frames.
pub const TYPE_TRAFFIC: u16 = 0x0372;
/// Bytes of header after the type: source (4) and sequence number (8).
const HEADER: usize = 2 + 4 + 8;
/// Where frames are built: the route ends at `FRAME`, which is word-aligned.
const FRAME: u32 = 0x1040;
/// The receive buffer.
const RX: u32 = 0x2_0000;
const RX_LEN: u32 = 0x1_0000;

/// What one generator counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficStats {
    /// Frames sent.
    pub sent: u64,
    /// Frames received intact.
    pub received: u64,
    /// Frames received whose payload did not match what was sent.
    pub corrupt: u64,
    /// Frames of another packet type.
    pub foreign: u64,
    /// Frames cut short by the receive buffer.
    pub overruns: u64,
}

/// One generator and the board it runs on.
pub struct TrafficNode {
    index: u32,
    board: Board,
    peers: Vec<Route>,
    to_send: u64,
    payload: usize,
    interval: Duration,
    next_send: Time,
    rng: ChaCha8Rng,
    stats: TrafficStats,
    senders_left: Arc<AtomicU64>,
    scratch: Vec<u8>,
}

/// The payload byte at `i` of frame `seq` from `source`: receivers recompute it.
fn pattern(source: u32, seq: u64, i: usize) -> u8 {
    (mix_seed(u64::from(source) << 40 ^ seq, i as u64 / 8) >> ((i % 8) * 8)) as u8
}

impl TrafficNode {
    /// A generator on `board` (running, link attached) that sends `to_send` frames of
    /// `payload` bytes, one every `interval`, each to a peer drawn from `peers` with a
    /// generator seeded from `seed`. `senders_left` counts generators still sending, shared
    /// by all (threaded runs use it to know when everyone is quiet).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: u32,
        board: Board,
        peers: Vec<Route>,
        to_send: u64,
        payload: usize,
        interval: Duration,
        seed: u64,
        senders_left: Arc<AtomicU64>,
    ) -> TrafficNode {
        let payload = payload.clamp(HEADER, RX_LEN as usize - 64);
        if to_send == 0 {
            senders_left.fetch_sub(1, Ordering::AcqRel);
        }
        TrafficNode {
            index,
            board,
            peers,
            to_send,
            payload,
            interval,
            next_send: Time::ZERO,
            rng: ChaCha8Rng::seed_from_u64(mix_seed(seed, u64::from(index))),
            stats: TrafficStats::default(),
            senders_left,
            scratch: Vec::new(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> TrafficStats {
        self.stats
    }

    /// The board.
    pub fn board(&self) -> &Board {
        &self.board
    }

    fn receive(&mut self) {
        let Ok(mut l) = self.board.lanai() else {
            return;
        };
        match l.recv_state() {
            RecvState::Done {
                start,
                end,
                overrun,
            } => {
                if overrun {
                    self.stats.overruns += 1;
                } else {
                    let bytes = l
                        .sram_ref()
                        .slice(start, (end - start) as usize)
                        .unwrap_or(&[]);
                    match Frame::new_checked(bytes) {
                        Ok(f) if f.packet_type() == TYPE_TRAFFIC && bytes.len() >= HEADER => {
                            let p = f.payload();
                            let source = u32::from_be_bytes(p[0..4].try_into().expect("4 bytes"));
                            let seq = u64::from_be_bytes(p[4..12].try_into().expect("8 bytes"));
                            let ok = bytes[HEADER..]
                                .iter()
                                .enumerate()
                                .all(|(i, &b)| b == pattern(source, seq, i));
                            if ok {
                                self.stats.received += 1;
                            } else {
                                self.stats.corrupt += 1;
                            }
                        }
                        _ => self.stats.foreign += 1,
                    }
                }
                let _ = l.arm_recv(RX, RX + RX_LEN);
            }
            RecvState::Idle => {
                let _ = l.arm_recv(RX, RX + RX_LEN);
            }
            _ => {}
        }
    }

    fn send(&mut self, now: Time) {
        if self.stats.sent >= self.to_send || now < self.next_send || self.peers.is_empty() {
            return;
        }
        let Ok(mut l) = self.board.lanai() else {
            return;
        };
        if !l.send_idle(now) {
            return;
        }
        let route = &self.peers[self.rng.random_range(0..self.peers.len())];
        let seq = self.stats.sent;
        self.scratch.clear();
        self.scratch.extend_from_slice(&TYPE_TRAFFIC.to_be_bytes());
        self.scratch.extend_from_slice(&self.index.to_be_bytes());
        self.scratch.extend_from_slice(&seq.to_be_bytes());
        self.scratch
            .extend((0..self.payload - HEADER).map(|i| pattern(self.index, seq, i)));
        let start = FRAME - route.len() as u32;
        let (smp, sa) = (start & !3, start & 3);
        let ok = l.sram().write(start, route.as_bytes()).is_ok()
            && l.sram().write(FRAME, &self.scratch).is_ok()
            && l.send(now, smp, sa, FRAME, false).is_ok();
        // The route takes the engine a moment at a throttled rate; the frame follows.
        let frame_at = l
            .board()
            .next_deadline(now)
            .filter(|t| *t > now)
            .unwrap_or(now);
        if ok
            && l.send(frame_at, FRAME, 0, FRAME + self.scratch.len() as u32, true)
                .is_ok()
        {
            self.stats.sent += 1;
            if self.stats.sent == self.to_send {
                self.senders_left.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.next_send = now + self.interval;
    }
}

impl Node for TrafficNode {
    fn poll(&mut self, now: Time) -> Option<Time> {
        self.board.advance(now);
        self.receive();
        self.send(now);
        self.board.advance(now);
        self.receive();
        let engine_free = self.board.send_ready_at(now);
        let sending = (self.stats.sent < self.to_send).then_some(self.next_send.max(engine_free));
        [self.board.next_deadline(now), sending]
            .into_iter()
            .flatten()
            .min()
    }

    fn port(&self) -> Option<PortId> {
        self.board.link_port()
    }

    fn is_done(&self) -> bool {
        let quiet = self
            .board
            .link_port()
            .is_none_or(|p| self.board.fabric().is_none_or(|f| f.queued(p) == 0));
        self.senders_left.load(Ordering::Acquire) == 0
            && quiet
            && !matches!(self.board.lanai_state(), Some(RecvState::Receiving { .. }))
    }
}

impl Board {
    /// The receive engine's state, if the LANai runs.
    pub fn lanai_state(&self) -> Option<RecvState> {
        self.tracker.lanai_running().then(|| self.recv.state())
    }
}
