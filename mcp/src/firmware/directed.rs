//! The receiving MCP's half of a directed send (seed 001, §1.3.2 and §4.2.2): a packet
//! names a window the host registered in the GM area of SRAM and a byte offset into it;
//! the MCP checks the window, the key and the bounds, and places the bytes line by line
//! with one DMA block per line piece. No receive event reaches the host: the window is
//! simply written. A bad packet is dropped and counted, never placed anywhere else.

use super::Mcp;
use super::host_dma::{Transfer, issue_delivery};
use super::recv::RxEntry;
use crate::frame::HEADER_LEN;
use crate::gm::wire::{DIRECTED_HEADER_LEN, DirectedPacket, DirectedRepr, WindowRepr};
use crate::hcb::{counter, gm_area};
use myri_device::board::Lanai;
use myri_device::dma::Direction;
use myri_device::time::Time;

/// Most line pieces one directed packet may cover: one chain of DMA blocks, well inside
/// the control-block ring.
pub const MAX_PIECES: usize = 32;

/// Places the rx pool's head packet, a directed one, or drops it. Returns whether it did
/// anything (it always does: the packet is placed or dropped).
pub fn to_host(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>, e: &RxEntry) -> bool {
    match chain(mcp, l, e) {
        Ok(chain) => {
            if chain.is_empty() {
                // Nothing to place: done at once.
                mcp.recv.rx.pop();
                mcp.count(counter::DIRECTED_PLACED);
                return true;
            }
            issue_delivery(mcp, now, l, &chain, false)
        }
        Err(c) => {
            mcp.recv.rx.pop();
            mcp.count(c);
            true
        }
    }
}

fn chain(
    mcp: &Mcp,
    l: &Lanai<'_>,
    e: &RxEntry,
) -> Result<smallvec::SmallVec<[Transfer; MAX_PIECES]>, u32> {
    let body = e
        .len
        .checked_sub(HEADER_LEN as u32)
        .ok_or(counter::DROP_LENGTH)?;
    let mut head = [0u8; HEADER_LEN + DIRECTED_HEADER_LEN];
    let n = (e.len as usize).min(head.len());
    l.sram_ref()
        .read(e.buf, &mut head[..n])
        .map_err(|_| counter::DROP_LENGTH)?;
    let window = u32::from(head[3]);
    let packet = DirectedPacket::new_checked(&head[HEADER_LEN..n])
        .map_err(|_| counter::DROP_WINDOW_BOUNDS)?;
    let repr = DirectedRepr::parse(&packet);
    if window >= gm_area::NUM_WINDOWS {
        return Err(counter::DROP_WINDOW_UNKNOWN);
    }
    let entry = l
        .sram_ref()
        .slice(mcp.layout.window(window), WindowRepr::LEN)
        .ok()
        .and_then(|b| WindowRepr::parse(b).ok())
        .unwrap_or_default();
    if !entry.valid {
        return Err(counter::DROP_WINDOW_UNKNOWN);
    }
    if entry.key != repr.key {
        return Err(counter::DROP_WINDOW_KEY);
    }
    let len = body - DIRECTED_HEADER_LEN as u32;
    let pieces = entry
        .geometry
        .pieces(repr.offset, len, MAX_PIECES)
        .ok_or(counter::DROP_WINDOW_BOUNDS)?;
    let mut lar = e.buf + (HEADER_LEN + DIRECTED_HEADER_LEN) as u32;
    let mut out = smallvec::SmallVec::new();
    for (at, n) in pieces {
        let host = entry
            .host
            .checked_add(at)
            .ok_or(counter::DROP_WINDOW_BOUNDS)?;
        out.push(Transfer {
            dir: Direction::LanaiToHost,
            lar,
            len: n,
            host,
        });
        lar += n;
    }
    Ok(out)
}
