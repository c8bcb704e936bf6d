//! The MCP's half of a Trapeze endpoint (seed 003, §2.1 to §2.4): it takes released
//! messages from the send ring, and fills the receive ring with incoming ones, placing
//! payloads in the buffer attached to the ring entry or in the one a payload token names.
//!
//! The endpoint lives in the SRAM workspace at the address the host publishes in the GM
//! area; the MCP looks at it only once the magic word is there and the whole endpoint lies
//! inside the workspace. Every index it reads from the host is checked against the ring
//! size, every length against the limits, every token against the IPT: a bad message is
//! counted and refused (its control message still delivered when only the payload is at
//! fault, as §8 says), and nothing is ever written past a buffer's end.

use super::Mcp;
use super::host_dma::{Source, Transfer, issue_delivery, start_fill};
use super::pool::{TxEntry, tx_buffer};
use super::recv::RxEntry;
use crate::frame::{HEADER_LEN, SUBTYPE_TRAPEZE};
use crate::hcb::{self, counter, gm_area};
use crate::trapeze::wire::{
    self, CTRLMSG_WORDS, ENDPOINT_LEN, MSG, PAYLOAD_MAX, PayloadStatus, RECV_RING, SEND_RING,
    TPZ_HEADER_LEN, TpzHeaderRepr, ep, flags, ipt, recv_entry, send_entry,
};
use myri_device::board::Lanai;
use myri_device::dma::Direction;
use myri_device::time::Time;

/// The MCP's books on the endpoint.
#[derive(Debug, Clone, Default)]
pub struct TpzState {
    /// The endpoint these books are about (0: none yet).
    base: u32,
    send_head: u32,
    send_done: u32,
    done: [bool; SEND_RING as usize],
    recv_filled: u32,
}

fn word(l: &Lanai<'_>, at: u32) -> u32 {
    l.sram_ref().read_u32(at).unwrap_or(0)
}

fn put(l: &mut Lanai<'_>, at: u32, v: u32) {
    let _ = l.sram().write_u32(at, v);
}

/// The endpoint's address if one is published and sound; a new one resets the books.
fn endpoint(mcp: &mut Mcp, l: &Lanai<'_>) -> Option<u32> {
    let base = word(l, mcp.layout.gm + gm_area::TPZ_ENDPOINT);
    if base == 0 {
        mcp.tpz.base = 0;
        return None;
    }
    let inside = base.is_multiple_of(4)
        && base >= mcp.layout.workspace
        && base
            .checked_add(ENDPOINT_LEN)
            .is_some_and(|e| e <= mcp.layout.workspace_end);
    if !inside || word(l, base + ep::MAGIC) != wire::MAGIC {
        return None;
    }
    if base != mcp.tpz.base {
        mcp.tpz = TpzState {
            base,
            ..TpzState::default()
        };
    }
    Some(base)
}

/// Whether the send ring may hold a released message (a few loads).
pub fn has_send(mcp: &Mcp, l: &Lanai<'_>) -> bool {
    let base = word(l, mcp.layout.gm + gm_area::TPZ_ENDPOINT);
    base != 0 && (base != mcp.tpz.base || word(l, base + ep::SEND_TAIL) != mcp.tpz.send_head)
}

/// Takes the next released send-ring message into a tx buffer (seed 003, §6,
/// `tpz_release_sendmsg`): the Trapeze header and control words by a LANai copy, the
/// payload by host DMA. Returns whether it did anything.
pub fn from_ring(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    if mcp.tx.is_full() {
        return false;
    }
    let Some(base) = endpoint(mcp, l) else {
        return false;
    };
    let head = mcp.tpz.send_head;
    if word(l, base + ep::SEND_TAIL) == head || head.wrapping_sub(mcp.tpz.send_done) >= SEND_RING {
        return false;
    }
    let at = wire::send_entry_at(base, head);
    let f = |o: u32| word(l, at + o);
    let (fl, route, hid, ctl_words, len) = (
        f(send_entry::FLAGS),
        f(send_entry::ROUTE),
        f(send_entry::HID),
        f(send_entry::CTL_WORDS),
        f(send_entry::PAYLOAD_LEN),
    );
    let host = (u64::from(f(send_entry::HOST_HI)) << 32) | u64::from(f(send_entry::HOST_LO));
    let (token_slot, token_key) = (f(send_entry::TOKEN_SLOT), f(send_entry::TOKEN_KEY));
    mcp.tpz.send_head = head.wrapping_add(1);
    put(l, base + ep::SEND_HEAD, mcp.tpz.send_head);
    if fl & flags::ABORTED != 0 {
        // `tpz_senderr`: skipped, and finished at once.
        sent(mcp, l, head, false);
        return true;
    }
    let has_payload = fl & flags::PAYLOAD != 0;
    let route_ok = route < hcb::NUM_ROUTES && word(l, mcp.layout.route(route)) & 1 == 1;
    let ok = route_ok
        && ctl_words as usize <= CTRLMSG_WORDS
        && len as usize <= PAYLOAD_MAX
        && (has_payload || len == 0)
        && hid <= u32::from(u16::MAX)
        && token_slot <= u32::from(u16::MAX);
    if !ok {
        mcp.count(counter::SEND_ERRORS);
        sent(mcp, l, head, false);
        return true;
    }
    let frame = tx_buffer(&mcp.layout, mcp.tx.incoming()) + hcb::ROUTE_AREA;
    let data = frame + HEADER_LEN as u32;
    let header = TpzHeaderRepr {
        hid: hid as u16,
        ctl_words: ctl_words as u8,
        flags: (fl & (flags::PAYLOAD | flags::TOKEN)) as u8,
        payload_len: len,
        token_slot: token_slot as u16,
        token_key,
    };
    let ctl = header.ctl_len() as u32;
    let _ = l.sram().write(data, &header.to_bytes());
    let _ = l
        .sram()
        .copy_within(at + MSG, data + TPZ_HEADER_LEN as u32, ctl as usize);
    let inline = TPZ_HEADER_LEN as u32 + ctl;
    let entry = TxEntry {
        frame,
        len: inline + len,
        chan: 0,
        route,
        slot: head,
        pio: false,
        overlapped: false,
        inline,
        aborted: false,
        subtype: SUBTYPE_TRAPEZE,
        tpz: true,
        csum: 0,
    };
    start_fill(mcp, now, l, entry, Source::Host(host), len)
}

/// Send-ring entry `i` is finished (sent, or refused): its status is written, and
/// SEND_DONE advances over every finished entry in ring order, so that the host calls the
/// completions in order (seed 003, §9, `io_completion_t`).
pub fn sent(mcp: &mut Mcp, l: &mut Lanai<'_>, i: u32, ok: bool) {
    let base = mcp.tpz.base;
    if base == 0 {
        return;
    }
    if ok {
        mcp.count(counter::TPZ_SENT);
    }
    let status = if ok { wire::SENT_OK } else { wire::SENT_ERROR };
    put(l, wire::send_entry_at(base, i) + send_entry::STATUS, status);
    let t = &mut mcp.tpz;
    t.done[(i % SEND_RING) as usize] = true;
    while t.send_done != t.send_head && t.done[(t.send_done % SEND_RING) as usize] {
        t.done[(t.send_done % SEND_RING) as usize] = false;
        t.send_done = t.send_done.wrapping_add(1);
    }
    let done = t.send_done;
    put(l, base + ep::SEND_DONE, done);
}

/// Delivers the rx pool's head packet, a Trapeze one, into the receive ring, or drops
/// it. Returns whether it did anything.
pub fn to_host(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>, e: &RxEntry) -> bool {
    let body = e.len.saturating_sub(HEADER_LEN as u32) as usize;
    let parsed = l
        .sram_ref()
        .slice(e.buf + HEADER_LEN as u32, body)
        .ok()
        .map(TpzHeaderRepr::parse);
    let Some(Ok(h)) = parsed else {
        mcp.recv.rx.pop();
        mcp.count(counter::TPZ_DROP_MALFORMED);
        return true;
    };
    let Some(base) = endpoint(mcp, l) else {
        mcp.recv.rx.pop();
        mcp.count(counter::TPZ_DROP_RING);
        return true;
    };
    let filled = mcp.tpz.recv_filled;
    if filled.wrapping_sub(word(l, base + ep::RECV_RELEASED)) >= RECV_RING {
        // The host has not released entries (or claims to have released more than were
        // filled): the ring is full. Drop rather than block the network.
        mcp.recv.rx.pop();
        mcp.count(counter::TPZ_DROP_RING);
        return true;
    }
    let at = wire::recv_entry_at(base, filled);
    let ctl_from = e.buf + (HEADER_LEN + TPZ_HEADER_LEN) as u32;
    let _ = l.sram().copy_within(ctl_from, at + MSG, h.ctl_len());
    put(l, at + recv_entry::HID, u32::from(h.hid));
    put(l, at + recv_entry::CTL_WORDS, u32::from(h.ctl_words));
    let len = h.payload_len;
    let mut cancel = None;
    let (status, dest) = if len == 0 {
        (PayloadStatus::None, None)
    } else if u32::from(h.flags) & flags::TOKEN != 0 {
        let slot = u32::from(h.token_slot);
        let s = wire::ipt_at(base, slot);
        let key = word(l, s + ipt::KEY);
        if slot >= wire::IPT_SLOTS || key == 0 || key != h.token_key {
            (PayloadStatus::BadToken, None)
        } else {
            // A token serves once: the key is cancelled on receipt (seed 003, §8).
            cancel = Some(s + ipt::KEY);
            let host =
                (u64::from(word(l, s + ipt::HOST_HI)) << 32) | u64::from(word(l, s + ipt::HOST_LO));
            if len > word(l, s + ipt::CAP) {
                (PayloadStatus::TooLong, None)
            } else {
                (PayloadStatus::Token, Some(host))
            }
        }
    } else {
        let cap = word(l, at + recv_entry::ATT_CAP);
        let host = (u64::from(word(l, at + recv_entry::ATT_HI)) << 32)
            | u64::from(word(l, at + recv_entry::ATT_LO));
        if cap == 0 {
            (PayloadStatus::NoBuffer, None)
        } else if len > cap {
            (PayloadStatus::TooLong, None)
        } else {
            (PayloadStatus::Attached, Some(host))
        }
    };
    put(l, at + recv_entry::PAYLOAD_STATUS, status.to_word());
    put(
        l,
        at + recv_entry::PAYLOAD_LEN,
        if dest.is_some() { len } else { 0 },
    );
    put(l, at + recv_entry::TOKEN_SLOT, u32::from(h.token_slot));
    match status {
        PayloadStatus::BadToken => mcp.count(counter::TPZ_PAYLOAD_BAD_TOKEN),
        PayloadStatus::TooLong => mcp.count(counter::TPZ_PAYLOAD_TOO_LONG),
        PayloadStatus::NoBuffer => mcp.count(counter::TPZ_PAYLOAD_NO_BUFFER),
        _ => {}
    }
    let Some(host) = dest else {
        if let Some(k) = cancel {
            put(l, k, 0);
        }
        mcp.recv.rx.pop();
        delivered(mcp, l, true);
        return true;
    };
    let chain = [Transfer {
        dir: Direction::LanaiToHost,
        lar: ctl_from + h.ctl_len() as u32,
        len,
        host,
    }];
    if !issue_delivery(mcp, now, l, &chain, true) {
        return false;
    }
    if let Some(k) = cancel {
        put(l, k, 0);
    }
    true
}

/// The receive entry being filled is complete (its payload landed, or its DMA faulted
/// and the payload is reported dropped): RECV_FILLED publishes it to the host.
pub fn delivered(mcp: &mut Mcp, l: &mut Lanai<'_>, ok: bool) {
    let base = mcp.tpz.base;
    if base == 0 {
        return;
    }
    if !ok {
        let at = wire::recv_entry_at(base, mcp.tpz.recv_filled);
        put(l, at + recv_entry::PAYLOAD_LEN, 0);
        put(
            l,
            at + recv_entry::PAYLOAD_STATUS,
            PayloadStatus::NoBuffer.to_word(),
        );
    }
    mcp.tpz.recv_filled = mcp.tpz.recv_filled.wrapping_add(1);
    put(l, base + ep::RECV_FILLED, mcp.tpz.recv_filled);
    mcp.count(counter::TPZ_RECEIVED);
}
