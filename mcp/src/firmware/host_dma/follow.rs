//! Overlapped receive (seed 000, Receiving; polled mode only): the host DMA copies a
//! packet to the host while it is still arriving, a chunk at a time behind the receive
//! engine's live pointer, and finishes it with the ordinary delivery chain once it is in.
//! The chunks' written-back checksums add up to the record's `landed_head`.

use super::{Op, Status, Target, Transfer, deliver_chain, hcb_read, read_header, target};
use crate::firmware::{Mcp, csum};
use crate::frame::{HEADER_LEN, TRAILER_LEN};
use crate::hcb::{counter, recv_chan};
use myri_device::board::Lanai;
use myri_device::dma::Direction;
use myri_device::engines::RecvState;
use myri_device::time::Time;

/// Overlapped receive (polled mode only): start copying a packet to the host while it is
/// still arriving, once enough of it is in.
pub(super) fn follow_start(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    if mcp.config.recv_mode != crate::firmware::RecvMode::Polled || !mcp.recv.rx.is_empty() {
        return false;
    }
    let RecvState::Receiving { start, .. } = l.recv_state() else {
        return false;
    };
    let have = l.recv_pointer(now).saturating_sub(start);
    if have < HEADER_LEN as u32 + mcp.config.overlap_threshold {
        return false;
    }
    let (header, n) = read_header(l, start, HEADER_LEN as u32);
    let Ok(Some((chan, t))) = target(mcp, l, &header[..n]) else {
        return false;
    };
    // The trailer is never copied as payload: the last bytes in are held back.
    let n = have.saturating_sub((HEADER_LEN + TRAILER_LEN) as u32) & !3;
    if n > t.capacity {
        return false;
    }
    let chunk = Transfer {
        dir: Direction::LanaiToHost,
        lar: start + HEADER_LEN as u32,
        len: n,
        host: t.host,
    };
    let Ok((first, last)) = mcp.host.ring.issue(l, now, &[chunk]) else {
        return false;
    };
    let epoch = mcp.recv.epoch();
    mcp.host.op = Op::Follow {
        chan,
        buf: start,
        host: t.host,
        capacity: t.capacity,
        copied: 0,
        epoch,
        inflight: Some((first, last, n)),
        head: 0,
    };
    true
}

pub(super) fn follow_step(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    let Op::Follow {
        chan,
        buf,
        host,
        capacity,
        mut copied,
        epoch,
        inflight,
        mut head,
    } = mcp.host.op
    else {
        return false;
    };
    if let Some((first, last, n)) = inflight {
        match mcp.host.ring.status(l, last) {
            Status::Pending => return false,
            Status::Faulted => {
                // Give up following; the ordinary path delivers the packet from the start.
                mcp.host.ring.skip(l, now, first, last);
                mcp.count(counter::DMA_FAULTS);
                mcp.host.op = Op::Idle;
                return true;
            }
            Status::Done => {
                let sum = csum::written_back(l, mcp.host.ring.addr(last));
                head = csum::combine(head, csum::at_offset(sum, copied));
                copied += n;
            }
        }
    }
    if mcp.recv.epoch() != epoch {
        // The packet has finished arriving: queued at the head of the rx pool, or dropped.
        mcp.host.op = Op::Idle;
        let Some(e) = mcp
            .recv
            .rx
            .head()
            .filter(|e| e.buf == buf && e.epoch == epoch + 1)
        else {
            return true;
        };
        let Some(payload) = e
            .len
            .checked_sub((HEADER_LEN + TRAILER_LEN) as u32)
            .filter(|&p| p <= capacity)
        else {
            mcp.recv.rx.pop();
            mcp.count(counter::DROP_LENGTH);
            return true;
        };
        let sender = csum::read_trailer(l, e.buf, e.len);
        let c = mcp.layout.recv_chan(u32::from(chan));
        let poll = (u64::from(hcb_read(l, c + recv_chan::POLL_HI)) << 32)
            | u64::from(hcb_read(l, c + recv_chan::POLL_LO));
        let t = Target {
            host,
            capacity,
            poll,
            done: mcp.host.done[usize::from(chan)],
        };
        let Some(d) = deliver_chain(mcp, l, buf, payload, copied, &t, sender, head) else {
            return true;
        };
        if let Ok((first, last)) = mcp.host.ring.issue_tagged(l, now, &d.chain, d.tag) {
            mcp.host.op = Op::ToHost {
                chan,
                overlapped: true,
                first,
                last,
            };
        }
        return true;
    }
    // Whole words only, and never the trailer (the last bytes in): every chunk, and so the
    // tail, starts at an even offset and the host adds the sums without a swap.
    let avail = (l
        .recv_pointer(now)
        .saturating_sub(buf + (HEADER_LEN + TRAILER_LEN) as u32)
        & !3)
        .min(capacity & !3);
    let mut next = Op::Follow {
        chan,
        buf,
        host,
        capacity,
        copied,
        epoch,
        inflight: None,
        head,
    };
    if avail >= copied + mcp.config.overlap_chunk {
        let chunk = Transfer {
            dir: Direction::LanaiToHost,
            lar: buf + HEADER_LEN as u32 + copied,
            len: avail - copied,
            host: host + u64::from(copied),
        };
        if let Ok((first, last)) = mcp.host.ring.issue(l, now, &[chunk]) {
            next = Op::Follow {
                chan,
                buf,
                host,
                capacity,
                copied,
                epoch,
                inflight: Some((first, last, avail - copied)),
                head,
            };
        }
    }
    let progressed = inflight.is_some()
        || matches!(
            next,
            Op::Follow {
                inflight: Some(_),
                ..
            }
        );
    mcp.host.op = next;
    progressed
}
