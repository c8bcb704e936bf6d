//! The receive-DMA state machine (seed 000, Receiving; Appendix B).
//!
//! The receive engine is always armed with the rx pool buffer at the pool's incoming
//! index. When a packet completes, it is queued in the rx pool and the engine re-armed with
//! the next buffer; if the pool is full the packet is dropped by re-arming the same buffer
//! (the "lost" spare of the dual-pointer queue), and an overrun is dropped the same way. The
//! network is never blocked. Checking the frame header waits for the host DMA (seed 000
//! does it when deciding to DMA the packet to the host).

use super::Mcp;
use super::pool::{Ring, rx_buffer};
use crate::firmware::RecvMode;
use crate::hcb::{POOL_BUF, RX_POOL, counter};
use myri_device::board::Lanai;
use myri_device::engines::RecvState;
use myri_device::special::isr;
use myri_device::time::Time;

/// A received packet in the rx pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxEntry {
    /// SRAM address of the frame.
    pub buf: u32,
    /// Frame length (header included).
    pub len: u32,
    /// The receive epoch in which it completed (see [`RecvDma::epoch`]).
    pub epoch: u64,
}

/// The receive side's state.
pub struct RecvDma {
    pub(crate) rx: Ring<RxEntry>,
    layout: crate::hcb::Layout,
    /// Packets that have finished arriving (queued or dropped), for overlapped receive to
    /// notice that the packet it follows is gone.
    epoch: u64,
}

impl RecvDma {
    /// An empty rx pool.
    pub fn new(layout: &crate::hcb::Layout) -> RecvDma {
        RecvDma {
            rx: Ring::new(RX_POOL),
            layout: *layout,
            epoch: 0,
        }
    }

    /// Arms the engine for the first time and, in interrupt mode, unmasks its interrupts.
    pub fn start(&mut self, l: &mut Lanai<'_>, mode: RecvMode) {
        self.arm(l);
        if mode == RecvMode::Interrupt {
            l.set_eimr(isr::RECV_INT | isr::BUFF_INT);
        }
    }

    /// The buffer the engine is armed with.
    pub fn armed_buffer(&self) -> u32 {
        rx_buffer(&self.layout, self.rx.incoming())
    }

    /// Packets finished so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn arm(&mut self, l: &mut Lanai<'_>) {
        let buf = self.armed_buffer();
        // The buffer lies inside the rx pool, inside SRAM: arming cannot fail.
        let _ = l.arm_recv(buf, buf + POOL_BUF);
    }
}

/// Whether [`service`] has anything to look at: a finished packet or a disarmed engine.
#[inline]
pub fn has_work(l: &Lanai<'_>) -> bool {
    matches!(l.recv_state(), RecvState::Done { .. } | RecvState::Idle)
}

/// Handles a finished packet, if there is one. With `interrupt`, only when the LANai has a
/// receive interrupt pending (the interrupt-driven mode); otherwise whenever it is polled.
pub fn service(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>, interrupt: bool) -> bool {
    if interrupt && l.pending_interrupts(now) & (isr::RECV_INT | isr::BUFF_INT) == 0 {
        return false;
    }
    match l.recv_state() {
        RecvState::Done {
            start,
            end,
            overrun,
        } => {
            l.clear_isr(isr::RECV_INT | isr::BUFF_INT);
            mcp.recv.epoch += 1;
            if overrun {
                mcp.count(counter::DROP_OVERRUN);
            } else {
                mcp.count(counter::RECEIVED);
                let entry = RxEntry {
                    buf: start,
                    len: end - start,
                    epoch: mcp.recv.epoch,
                };
                if !mcp.recv.rx.push(entry) {
                    mcp.count(counter::DROP_RX_FULL);
                }
            }
            // Either the next buffer (queued) or the same one again (dropped).
            mcp.recv.arm(l);
            true
        }
        RecvState::Idle => {
            mcp.recv.arm(l);
            true
        }
        RecvState::Armed { .. } | RecvState::Receiving { .. } => false,
    }
}
