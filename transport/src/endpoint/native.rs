//! Reliable mode on a backend that is reliable itself (`shm://`): no RPP, the backend
//! sends straight on its channel, acknowledges what the peer's application took and hands
//! back what a dead peer never took. See [`Options::rpp_over_shm`](super::Options) for
//! the contract, and `backend::shm::native` for how the region does it.

use super::{Completion, Delivery, Endpoint, MsgId, Peer};
use crate::backend::{Backend, NativeReliability, RemoteAddr};
use crate::buffer::Buf;
use crate::error::{PeerFailure, SendError};

/// Calls of [`Endpoint::recv`] (a message taken off the ring, or an empty ring) between
/// two progress passes: a program that spins on `recv` while waiting for a message looks
/// at the ring at each call, and does the rest of a pass (acknowledgements, events,
/// fragments) every so often.
const FAST_RECVS: u32 = 32;

impl Endpoint {
    /// Sends `buf` to `peer` (at `addr`) with the backend's own reliability (out of
    /// line: `send`'s own code is RPP's path).
    #[inline(never)]
    pub(super) fn send_native(
        &mut self,
        peer: Peer,
        addr: RemoteAddr,
        buf: Buf,
    ) -> Result<MsgId, SendError> {
        let slot = &mut self.peers[peer.0 as usize];
        let id = slot.next_id;
        let (registered, external) = (buf.is_registered(), buf.is_external());
        let Some(backend) = self.backend.native() else {
            unreachable!("an endpoint runs native reliability only on a backend that has it");
        };
        match backend.send_reliable(&addr, buf, id) {
            Ok(sent) => {
                slot.next_id += 1;
                let s = &mut self.stats;
                s.sends += 1;
                s.copied_sends += u64::from(sent.copied);
                if registered {
                    s.registered_sends += 1;
                } else if external {
                    s.external_sends += 1;
                } else {
                    s.heap_sends += 1;
                }
                Ok(MsgId(id))
            }
            Err(e) => {
                self.stats.would_block += u64::from(e.error.is_would_block());
                Err(e)
            }
        }
    }

    /// [`Endpoint::recv`] with native reliability: a message on the ring from the live
    /// peer is handed out at once (after any event the backend learned while reading it);
    /// an empty ring answers `None` at once too. A whole progress pass (fragments to push
    /// out, acknowledgements to collect, the peer to look at) runs when the peer is not
    /// known yet, when the backend has news, and every `FAST_RECVS` calls.
    pub(super) fn recv_native(&mut self) -> Option<Delivery> {
        if let Some(d) = self.deliveries.pop_front() {
            return Some(d);
        }
        if self.fast_recvs < FAST_RECVS
            && let Some(peer) = self.native_peer
            && !self.peers[peer.0 as usize].failed
        {
            self.fast_recvs += 1;
            let Some(inc) = self.backend.recv() else {
                if self.backend.has_events() {
                    self.progress_native();
                }
                return self.deliveries.pop_front();
            };
            if self.backend.has_events() {
                self.backend_events();
            }
            // From the peer's life that just ended, if it failed: it sent this before it
            // died (a successor's messages come after its restart is told).
            self.stats.recvs += 1;
            if inc.data.is_registered() {
                self.stats.registered_recvs += 1;
            } else {
                self.stats.heap_recvs += 1;
            }
            return Some(Delivery {
                peer,
                data: inc.data,
                life: 0,
            });
        }
        self.progress_native();
        self.deliveries.pop_front()
    }

    /// [`Endpoint::progress`] with native reliability: takes what arrived (a restart the
    /// backend saw while reading is told before the new life's messages) and what was
    /// acknowledged. No clock, no timer.
    pub(super) fn progress_native(&mut self) -> bool {
        self.fast_recvs = 0;
        let mut worked = self.backend.progress();
        worked |= self.backend_events();
        while self.deliveries.len() < self.options.max_pending_deliveries {
            let Some(inc) = self.backend.recv() else {
                break;
            };
            worked = true;
            self.backend_events();
            let Some(peer) = self.native_peer.or_else(|| self.unknown_sender(inc.from)) else {
                continue;
            };
            // A failed peer's message was sent before it died: delivered.
            self.deliver(peer, inc.data);
        }
        worked |= self.native_completions();
        worked
    }

    /// Native reliability: the peer's process is gone. Messages it took are acknowledged
    /// first; the rest come back in [`Completion::PeerFailed`], or, when a new process
    /// already took its place, in the [`Completion::PeerRestarted`] that follows.
    pub(super) fn native_peer_gone(&mut self, peer: Peer, why: PeerFailure, replaced: bool) {
        self.native_completions();
        let unsent = self
            .backend
            .native()
            .map(NativeReliability::take_unacked)
            .unwrap_or_default();
        let slot = &mut self.peers[peer.0 as usize];
        if replaced {
            slot.restart_unacked.extend(unsent);
            return;
        }
        if slot.failed {
            return;
        }
        slot.failed = true;
        self.stats.peer_failures += 1;
        self.completions
            .push_back(Completion::PeerFailed { peer, why, unsent });
    }

    /// Native reliability: a new process took the peer's side: a new incarnation, ids
    /// from zero, and the handle works again.
    pub(super) fn native_peer_replaced(&mut self, peer: Peer) {
        let incarnation = self
            .backend
            .native_ref()
            .and_then(NativeReliability::peer_incarnation)
            .unwrap_or(0);
        let slot = &mut self.peers[peer.0 as usize];
        slot.failed = false;
        slot.next_id = 0;
        slot.announced = Some(incarnation);
        let unacked = std::mem::take(&mut slot.restart_unacked);
        self.completions.push_back(Completion::PeerRestarted {
            peer,
            incarnation,
            unacked,
        });
    }

    /// Native reliability: acknowledged messages become [`Completion::Sent`], and a peer
    /// process first seen becomes [`Completion::Connected`]. Returns whether there was
    /// anything.
    fn native_completions(&mut self) -> bool {
        let Some(peer) = self.native_peer else {
            return false;
        };
        let mut worked = false;
        while let Some((id, buf)) = self
            .backend
            .native()
            .and_then(NativeReliability::poll_acked)
        {
            worked = true;
            self.completions.push_back(Completion::Sent {
                peer,
                id: MsgId(id),
                buf,
            });
        }
        let slot = &mut self.peers[peer.0 as usize];
        if slot.announced.is_none()
            && !slot.failed
            && let Some(peer_incarnation) = self
                .backend
                .native_ref()
                .and_then(NativeReliability::peer_incarnation)
        {
            slot.announced = Some(peer_incarnation);
            self.completions.push_back(Completion::Connected {
                peer,
                peer_incarnation,
            });
            worked = true;
        }
        worked
    }
}
