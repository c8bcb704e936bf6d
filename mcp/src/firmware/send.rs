//! The send-DMA state machine (seed 000, Sending; Appendix B, Send DMA State Machine).
//!
//! It sends the tx pool's oldest packet. First the route: looked up by id in the HCB's
//! route table and laid out so that it ends exactly where the frame header starts; the
//! send alignment register skips the bytes of the first word before it. Then the frame
//! header and payload, ending the packet. An overlapped packet is sent behind the live
//! host-DMA pointer, a chunk at a time; its route goes out only with its first chunk, so a
//! host DMA that faults before any data arrives leaves nothing half-sent on the network.
//! A data frame's trailer (the sender checksum, [`crate::frame`]) goes out with the tail,
//! written by the host DMA's state machine once the engine's checksum is known.

use super::Mcp;
use super::host_dma::slot_done;
use super::pool::TxEntry;
use crate::frame::{HEADER_LEN, header_bytes, trailer_len};
use crate::hcb::{self, counter};
use myri_device::board::Lanai;
use myri_device::time::Time;

/// Where the send DMA is with the packet at the head of the tx pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SendDma {
    /// Nothing started.
    #[default]
    Idle,
    /// The route is going out; the frame follows in one piece.
    Route,
    /// Overlapped: `sent` payload bytes (header included once `sent > 0`) are out.
    Overlap {
        /// Payload bytes sent so far.
        sent: u32,
    },
    /// The tail has been handed to the engine; done when it is idle.
    Finishing,
}

/// Writes the route before the frame header and the header itself; returns the route's
/// first byte address and length, or `None` if the route id is no longer valid.
fn lay_out(mcp: &Mcp, l: &mut Lanai<'_>, e: &TxEntry) -> Option<(u32, u32)> {
    let at = mcp.layout.route(e.route);
    let s = l.sram_ref();
    if s.read_u32(at).ok()? & 1 == 0 {
        return None;
    }
    let len = s.read_u32(at + 4).ok()?.min(hcb::MAX_ROUTE as u32);
    let mut route = [0u8; hcb::MAX_ROUTE];
    s.read(at + 8, &mut route[..len as usize]).ok()?;
    let route = &route[..len as usize];
    let start = e.frame - len;
    l.sram().write(start, route).ok()?;
    l.sram()
        .write(e.frame, &header_bytes(e.subtype, e.chan))
        .ok()?;
    Some((start, len))
}

fn finish(mcp: &mut Mcp, l: &mut Lanai<'_>, e: TxEntry, sent: bool) {
    mcp.tx.pop();
    mcp.send = SendDma::Idle;
    if sent {
        mcp.count(counter::SENT);
        if e.pio {
            mcp.count(counter::PIO_SENDS);
        }
        if e.overlapped {
            mcp.count(counter::OVERLAPPED_SENDS);
        }
    } else {
        mcp.count(counter::SEND_ERRORS);
    }
    if e.pio {
        // A PIO slot's buffer is free only now that its bytes are on the network.
        slot_done(mcp, l, e.slot);
    }
    if e.tpz {
        super::trapeze::sent(mcp, l, e.slot, sent);
    }
}

/// Runs the send-DMA state machine for as long as the send engine is idle and there is
/// something to do (the engine takes the next piece as soon as it is free: with an
/// unthrottled link, route, frame and the next packet go out in one call). Returns
/// whether it made progress.
pub fn step(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    let mut progressed = false;
    while one_step(mcp, now, l) {
        progressed = true;
    }
    progressed
}

/// One action of the send-DMA state machine, if the engine can take it now.
fn one_step(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    let Some(e) = mcp.tx.head() else { return false };
    if !l.send_idle(now) {
        return false;
    }
    // A data frame's trailer (the sender checksum) follows the payload.
    let trailer = trailer_len(e.subtype) as u32;
    let end = e.frame + HEADER_LEN as u32 + e.len + trailer;
    match mcp.send {
        SendDma::Idle if e.overlapped => {
            if e.aborted {
                finish(mcp, l, e, false);
                return true;
            }
            let (have, complete) = mcp.host.fill(&e, now, l);
            if !complete && have < mcp.config.overlap_chunk {
                return false;
            }
            let Some((start, len)) = lay_out(mcp, l, &e) else {
                finish(mcp, l, e, false);
                return true;
            };
            if len > 0 {
                let _ = l.send(now, start & !3, start & 3, e.frame, false);
            }
            mcp.send = SendDma::Overlap { sent: 0 };
            true
        }
        SendDma::Idle => {
            let Some((start, len)) = lay_out(mcp, l, &e) else {
                finish(mcp, l, e, false);
                return true;
            };
            if len > 0 {
                let _ = l.send(now, start & !3, start & 3, e.frame, false);
                mcp.send = SendDma::Route;
            } else {
                let _ = l.send(now, e.frame, 0, end, true);
                mcp.send = SendDma::Finishing;
            }
            true
        }
        SendDma::Route => {
            let _ = l.send(now, e.frame, 0, end, true);
            mcp.send = SendDma::Finishing;
            true
        }
        SendDma::Overlap { sent } => {
            let (have, complete) = mcp.host.fill(&e, now, l);
            let upto = if complete { e.len } else { have & !3 };
            // Once the host DMA is complete the rest goes out with the tail, even if that
            // is nothing at all; before, only whole chunks do.
            let tail = complete;
            if !tail && upto < sent + mcp.config.overlap_chunk {
                return false;
            }
            let from = if sent == 0 {
                e.frame
            } else {
                e.frame + HEADER_LEN as u32 + sent
            };
            let upto = if tail { upto + trailer } else { upto };
            let _ = l.send(now, from, 0, e.frame + HEADER_LEN as u32 + upto, tail);
            mcp.send = if tail {
                SendDma::Finishing
            } else {
                SendDma::Overlap { sent: upto }
            };
            true
        }
        SendDma::Finishing => {
            finish(mcp, l, e, true);
            true
        }
    }
}
