//! The Trapeze API of seed 003 on the host: an endpoint with send and receive rings in
//! board memory, control messages with attached payloads, header-id handlers, payload
//! tokens and send-completion callbacks.
//!
//! # The calls
//!
//! | seed 003                                   | here                                          |
//! |--------------------------------------------|-----------------------------------------------|
//! | `tpz_init`, `tpz_enable`                   | [`Api::tpz_init`] (one endpoint per board)    |
//! | `tpz_send_ring_size`, `tpz_rcv_ring_size`  | [`TpzEndpoint::send_ring_size`], [`TpzEndpoint::rcv_ring_size`] |
//! | `tpz_send_allowed`                         | [`TpzEndpoint::send_allowed`]                 |
//! | `tpz_get_sendmsg`                          | [`TpzEndpoint::get_sendmsg`]                  |
//! | `tpz_reserve`, `tpz_rereserve`, `tpz_mtod` | [`SendMsg::reserve`], [`SendMsg::rereserve`], [`SendMsg::mtod`] |
//! | `tpz_set_ctlmsg_len`                       | [`SendMsg::set_ctlmsg_len`]                   |
//! | `tpz_attach_sendmsg`, `tpz_set_payload_len` | [`SendMsg::attach`] (buffer, length, `io_completion_t`) |
//! | `tpz_detach_sendmsg`                       | [`SendMsg::detach`]                           |
//! | `tpz_senderr`                              | [`SendMsg::senderr`]                          |
//! | `tpz_release_sendmsg(msg, dest, spec)`     | [`TpzEndpoint::release_sendmsg`] with [`MsgSpec`] |
//! | `tpz_check_xmit_complete`                  | [`TpzEndpoint::check_xmit_complete`]          |
//! | `tpz_prime_rcvmsg`                         | [`TpzEndpoint::prime_rcvmsg`]                 |
//! | `tpz_get_rcvmsg`, `tpz_consume_rcvmsg`     | [`TpzEndpoint::get_rcvmsg`]                   |
//! | `tpz_peek_rcvmsg`                          | [`TpzEndpoint::peek_rcvmsg`] (`None` is `TPZ_NO_HID`) |
//! | `tpz_scan`, `tpz_rescan`, `tpz_mtod`       | [`RcvMsg::scan`], [`RcvMsg::rescan`], [`RcvMsg::mtod`] |
//! | `tpz_get_ctlmsg_len`, `tpz_get_payload_len` | [`RcvMsg::ctlmsg_len`], [`RcvMsg::payload_len`] |
//! | `tpz_attach_rcvmsg`, `tpz_detach_rcvmsg`, `tpz_attached` | [`TpzEndpoint::attach_rcvmsg`], [`TpzEndpoint::detach_rcvmsg`], [`TpzEndpoint::attached`] |
//! | `tpz_release_rcvmsg`                       | [`TpzEndpoint::release_rcvmsg`]               |
//! | `tpz_register_rcv_handler`, `tpz_remove_rcv_handler` | [`TpzEndpoint::register_rcv_handler`], [`TpzEndpoint::remove_rcv_handler`] |
//! | the driver's receive interrupt upcalls     | [`TpzEndpoint::dispatch`]                     |
//! | `tpz_slow_enqueue`, `tpz_slow_dequeue`     | messages with no handler go to [`TpzEndpoint::slow_dequeue`] |
//! | `tpz_get_token`, `tpz_release_token`, `tpz_cancel_token` | [`TpzEndpoint::get_token`], [`TpzEndpoint::release_token`], [`TpzEndpoint::cancel_token`] |
//!
//! # Where this differs from the seed
//!
//! The control message is built in a host shadow buffer and written to the ring entry by
//! PIO on release (§9 allows it). A payload larger than its buffer is refused by the MCP
//! and reported as [`PayloadStatus::TooLong`], never written past the end (§8 lets the
//! NIC overrun). A full receive ring drops and counts the message instead of locking up
//! the NIC. Receive entries are released to the MCP in ring order (a held entry holds back
//! the ones after it).

use super::gm::SramSegment;
use super::{Api, ApiError, Unit};
use crate::hcb::gm_area;
use crate::routes::RouteId;
use crate::trapeze::wire::{
    self, CTRLMSG_WORDS, ENDPOINT_LEN, IPT_SLOTS, MSG, PAYLOAD_MAX, PayloadStatus, RECV_RING,
    SEND_RING, ep, flags, ipt, recv_entry, send_entry,
};
use myri_device::hostmem::{DeviceBuf, HostBuf};
use std::collections::VecDeque;
use std::sync::Arc;
use thiserror::Error;

/// Header ids the endpoint dispatches (`tpz_hid_t` values `0..MAX_HIDS`).
pub const MAX_HIDS: u16 = 64;
/// Bytes of a control message.
pub const CTRLMSG_BYTES: usize = CTRLMSG_WORDS * 4;

/// A Trapeze call that could not be done.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TpzError {
    /// The board already has an endpoint (seed 003: one client per interface).
    #[error("the board already has a trapeze endpoint")]
    EndpointInUse,
    /// The endpoint's SRAM could not be had.
    #[error("no sram for the endpoint: {0}")]
    Sram(#[from] super::gm::GmError),
    /// `tpz_reserve` or `tpz_scan` past the 30-word control message.
    #[error("{want} more bytes do not fit the control message ({room} left)")]
    CtlOverflow {
        /// Bytes asked for.
        want: usize,
        /// Bytes left.
        room: usize,
    },
    /// A payload longer than its buffer or than the largest payload.
    #[error("payload of {len} bytes exceeds {max}")]
    PayloadTooLong {
        /// Bytes asked for.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// `TPZ_UNSOL` or a token with no payload attached.
    #[error("the message names a payload but none is attached")]
    NoPayload,
    /// A header id outside `0..MAX_HIDS`.
    #[error("header id {0} is out of range (0..{MAX_HIDS})")]
    HidOutOfRange(u32),
    /// Every IPT slot is in use (`TPZ_REPLY_NOSLOT`).
    #[error("the incoming payload table is full")]
    NoSlot,
    /// A token whose slot does not hold it (released already, or forged).
    #[error("token {0:?} names no live payload buffer")]
    UnknownToken(Token),
    /// A receive entry that already has a payload buffer attached.
    #[error("receive entry {0} already has a payload buffer")]
    AlreadyAttached(u32),
    /// A buffer from another board's memory.
    #[error("buffer belongs to another board")]
    ForeignBuffer,
    /// Board access failed.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// How an outgoing message is sent (`tpz_msgspec_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgSpec {
    /// A pure control message (`TPZ_CTRL`); an attached payload is not sent.
    Ctrl,
    /// With its attached payload, into the receive entry's buffer (`TPZ_UNSOL`).
    Unsol,
    /// With its attached payload, into the buffer the receiver named by this token.
    Token(Token),
}

/// A payload token (`tpz_token_t`): an IPT slot and its key (seed 003, §2.4). Send it to
/// the peer inside a control message with [`Token::to_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token {
    /// The IPT slot.
    pub slot: u16,
    /// The key.
    pub key: u32,
}

impl Token {
    /// The token as 8 bytes (slot, pad, key).
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..2].copy_from_slice(&self.slot.to_be_bytes());
        b[4..].copy_from_slice(&self.key.to_be_bytes());
        b
    }

    /// A token from 8 bytes (what a peer sent).
    pub fn from_bytes(b: [u8; 8]) -> Token {
        Token {
            slot: u16::from_be_bytes([b[0], b[1]]),
            key: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// What an `io_completion_t` is told: the payload buffer is the caller's again.
#[derive(Debug)]
pub struct IoCompletion {
    /// The payload buffer.
    pub payload: HostBuf,
    /// Whether the message went out (false: refused by the MCP or aborted).
    pub sent: bool,
}

type Completion = Box<dyn FnOnce(IoCompletion) + Send>;

struct Attached {
    buf: HostBuf,
    len: usize,
    completion: Option<Completion>,
}

/// A send-ring entry being built (`tpz_msgbuf_t` from `tpz_get_sendmsg`).
pub struct SendMsg {
    ctl: Box<[u8; CTRLMSG_BYTES]>,
    len: usize,
    hid: u16,
    payload: Option<Attached>,
    aborted: bool,
}

impl core::fmt::Debug for SendMsg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendMsg")
            .field("hid", &self.hid)
            .field("len", &self.len)
            .field("payload", &self.payload.as_ref().map(|p| p.len))
            .finish()
    }
}

impl SendMsg {
    /// Pushes `n` bytes onto the control message and returns them to fill (`tpz_reserve`).
    pub fn reserve(&mut self, n: usize) -> Result<&mut [u8], TpzError> {
        let room = CTRLMSG_BYTES - self.len;
        if n > room {
            return Err(TpzError::CtlOverflow { want: n, room });
        }
        let at = self.len;
        self.len += n;
        Ok(&mut self.ctl[at..at + n])
    }

    /// The control message from its start, as reserved so far (`tpz_rereserve`).
    pub fn rereserve(&mut self) -> &mut [u8] {
        &mut self.ctl[..self.len]
    }

    /// The whole control-message buffer (`tpz_mtod`); set the length with
    /// [`SendMsg::set_ctlmsg_len`].
    pub fn mtod(&mut self) -> &mut [u8; CTRLMSG_BYTES] {
        &mut self.ctl
    }

    /// Sets the control message's length in words (`tpz_set_ctlmsg_len`).
    pub fn set_ctlmsg_len(&mut self, words: usize) -> Result<(), TpzError> {
        if words > CTRLMSG_WORDS {
            return Err(TpzError::CtlOverflow {
                want: words * 4,
                room: CTRLMSG_BYTES,
            });
        }
        self.len = words * 4;
        Ok(())
    }

    /// The control message's length in words, rounded up.
    pub fn ctlmsg_len(&self) -> usize {
        self.len.div_ceil(4)
    }

    /// Sets the header id the receiver dispatches on.
    pub fn set_hid(&mut self, hid: u16) {
        self.hid = hid;
    }

    /// Attaches `len` bytes of `buf` as the payload (`tpz_attach_sendmsg` and
    /// `tpz_set_payload_len`); `completion` (the `io_completion_t`) gets the buffer back
    /// once the message is sent. Refused beyond the buffer or [`PAYLOAD_MAX`].
    pub fn attach(
        &mut self,
        buf: HostBuf,
        len: usize,
        completion: impl FnOnce(IoCompletion) + Send + 'static,
    ) -> Result<Option<HostBuf>, (TpzError, HostBuf)> {
        let max = buf.len().min(PAYLOAD_MAX);
        if len > max {
            return Err((TpzError::PayloadTooLong { len, max }, buf));
        }
        let old = self.detach();
        self.payload = Some(Attached {
            buf,
            len,
            completion: Some(Box::new(completion)),
        });
        Ok(old)
    }

    /// Takes the attached payload buffer back (`tpz_detach_sendmsg`).
    pub fn detach(&mut self) -> Option<HostBuf> {
        self.payload.take().map(|a| a.buf)
    }

    /// Marks the message aborted (`tpz_senderr`): released, the MCP skips it.
    pub fn senderr(&mut self) {
        self.aborted = true;
    }
}

/// A received message (`tpz_msgbuf_t` from `tpz_get_rcvmsg`), read from its ring entry.
#[derive(Debug, Clone)]
pub struct RcvMsg {
    index: u32,
    primed: bool,
    hid: u16,
    ctl: Vec<u8>,
    payload_len: u32,
    status: PayloadStatus,
    token_slot: u16,
    scan: usize,
}

impl RcvMsg {
    /// Pops `n` bytes off the control message (`tpz_scan`).
    pub fn scan(&mut self, n: usize) -> Result<&[u8], TpzError> {
        let room = self.ctl.len() - self.scan;
        if n > room {
            return Err(TpzError::CtlOverflow { want: n, room });
        }
        let at = self.scan;
        self.scan += n;
        Ok(&self.ctl[at..at + n])
    }

    /// Back to the start of the control message (`tpz_rescan`).
    pub fn rescan(&mut self) -> &[u8] {
        self.scan = 0;
        &self.ctl
    }

    /// The control message (`tpz_mtod`).
    pub fn mtod(&self) -> &[u8] {
        &self.ctl
    }

    /// Its length in words (`tpz_get_ctlmsg_len`).
    pub fn ctlmsg_len(&self) -> usize {
        self.ctl.len() / 4
    }

    /// The header id.
    pub fn hid(&self) -> u16 {
        self.hid
    }

    /// Payload bytes delivered (`tpz_get_payload_len`, in bytes): 0 if none or dropped.
    pub fn payload_len(&self) -> u32 {
        self.payload_len
    }

    /// What became of the payload.
    pub fn payload_status(&self) -> PayloadStatus {
        self.status
    }

    /// The token slot the message was tagged with, if its payload went by token.
    pub fn token_slot(&self) -> Option<u16> {
        matches!(
            self.status,
            PayloadStatus::Token | PayloadStatus::BadToken | PayloadStatus::TooLong
        )
        .then_some(self.token_slot)
    }

    /// The receive-ring index of the entry.
    pub fn index(&self) -> u32 {
        self.index
    }
}

/// A message as a handler sees it (seed 003, §7, `rcvintr_t`).
#[derive(Debug)]
pub struct TpzDelivery<'a> {
    /// The message.
    pub msg: &'a RcvMsg,
    /// Its payload, if it landed in the entry's attached buffer.
    pub payload: Option<&'a [u8]>,
}

type Handler = Box<dyn FnMut(&TpzDelivery<'_>) + Send>;

/// Counters of the host side of an endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpzCounters {
    /// Messages released to the send ring.
    pub released: u64,
    /// Send completions called.
    pub completions: u64,
    /// Messages taken off the receive ring.
    pub received: u64,
    /// Messages passed to a handler.
    pub handled: u64,
    /// Messages whose header id had no handler (queued for `slow_dequeue`).
    pub no_handler: u64,
}

/// What one [`TpzEndpoint::dispatch`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Messages a handler took.
    pub handled: u32,
    /// Messages with no handler, left on the slow queue.
    pub no_handler: u32,
}

struct Pending {
    payload: Option<(DeviceBuf, Option<Completion>)>,
}

/// A Trapeze endpoint on a board. See the module documentation.
pub struct TpzEndpoint {
    unit: Arc<Unit>,
    seg: SramSegment,
    base: u32,
    send_tail: u32,
    send_completed: u32,
    pending: VecDeque<Pending>,
    recv_taken: u32,
    recv_released: u32,
    released: [bool; RECV_RING as usize],
    primed: u32,
    attached: Vec<Option<DeviceBuf>>,
    ipt: Vec<Option<(u32, DeviceBuf)>>,
    handlers: Vec<Option<Handler>>,
    slow: VecDeque<RcvMsg>,
    counters: TpzCounters,
}

impl core::fmt::Debug for TpzEndpoint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TpzEndpoint({:#x})", self.base)
    }
}

impl Api {
    /// Sets up the board's Trapeze endpoint (seed 003, `tpz_init` then `tpz_enable`):
    /// allocates its rings and IPT from the SRAM workspace as this user's segment, zeroes
    /// them and publishes the endpoint to the MCP.
    pub fn tpz_init(&mut self) -> Result<TpzEndpoint, TpzError> {
        {
            let mut g = self.unit.locked();
            if g.st.gm.tpz_attached {
                return Err(TpzError::EndpointInUse);
            }
            g.st.gm.tpz_attached = true;
        }
        // The endpoint's SRAM belongs to the driver, not to this user: it must outlive
        // the user only as long as the endpoint, which frees it when dropped.
        let made = (|| {
            let seg = self.sram_alloc_for(ENDPOINT_LEN, super::gm::DRIVER)?;
            let mut image = vec![0u8; ENDPOINT_LEN as usize];
            image[..4].copy_from_slice(&wire::MAGIC.to_be_bytes());
            let mut g = self.unit.locked();
            self.unit
                .board(&mut g, |b| b.pci_write_bytes(seg.addr(), &image))
                .map_err(ApiError::from)?;
            Ok::<_, TpzError>(seg)
        })();
        let seg = match made {
            Ok(s) => s,
            Err(e) => {
                self.unit.locked().st.gm.tpz_attached = false;
                return Err(e);
            }
        };
        let base = seg.addr();
        let e = TpzEndpoint {
            unit: self.unit.clone(),
            seg,
            base,
            send_tail: 0,
            send_completed: 0,
            pending: VecDeque::new(),
            recv_taken: 0,
            recv_released: 0,
            released: [false; RECV_RING as usize],
            primed: 0,
            attached: (0..RECV_RING).map(|_| None).collect(),
            ipt: (0..IPT_SLOTS).map(|_| None).collect(),
            handlers: (0..MAX_HIDS).map(|_| None).collect(),
            slow: VecDeque::new(),
            counters: TpzCounters::default(),
        };
        e.wr(self.layout.gm + gm_area::TPZ_ENDPOINT, base)?;
        Ok(e)
    }
}

impl TpzEndpoint {
    fn wr(&self, at: u32, v: u32) -> Result<(), ApiError> {
        self.unit.write_once(at, v)
    }

    fn rd(&self, at: u32) -> Result<u32, ApiError> {
        self.unit.read_once(at)
    }

    fn wr_bytes(&self, at: u32, b: &[u8]) -> Result<(), ApiError> {
        let mut g = self.unit.locked();
        Ok(self.unit.board(&mut g, |brd| brd.pci_write_bytes(at, b))?)
    }

    fn rd_bytes(&self, at: u32, out: &mut [u8]) -> Result<(), ApiError> {
        let mut g = self.unit.locked();
        Ok(self.unit.board(&mut g, |brd| brd.pci_read_bytes(at, out))?)
    }

    fn own(&self, buf: &HostBuf) -> Result<(), TpzError> {
        if Arc::ptr_eq(buf.memory(), self.unit.memory()) {
            Ok(())
        } else {
            Err(TpzError::ForeignBuffer)
        }
    }

    /// Entries in the send ring (`tpz_send_ring_size`).
    pub fn send_ring_size(&self) -> u32 {
        SEND_RING
    }

    /// Entries in the receive ring (`tpz_rcv_ring_size`).
    pub fn rcv_ring_size(&self) -> u32 {
        RECV_RING
    }

    /// Host-side counters.
    pub fn counters(&self) -> TpzCounters {
        self.counters
    }

    /// SRAM address of the endpoint.
    pub fn sram_addr(&self) -> u32 {
        self.base
    }

    // ---- sending ----

    /// Calls the completion of every finished send, in ring order
    /// (`tpz_check_xmit_complete`); returns how many.
    pub fn check_xmit_complete(&mut self) -> Result<usize, TpzError> {
        let done = self.rd(self.base + ep::SEND_DONE)?;
        let mut n = 0;
        while self.send_completed != done && !self.pending.is_empty() {
            let i = self.send_completed;
            let status = self.rd(wire::send_entry_at(self.base, i) + send_entry::STATUS)?;
            let p = self.pending.pop_front().expect("checked non-empty");
            self.send_completed = self.send_completed.wrapping_add(1);
            if let Some((dev, completion)) = p.payload {
                let payload = dev.reclaim();
                if let Some(c) = completion {
                    c(IoCompletion {
                        payload,
                        sent: status == wire::SENT_OK,
                    });
                    self.counters.completions += 1;
                }
            }
            n += 1;
        }
        Ok(n)
    }

    /// Whether a send entry is free (`tpz_send_allowed`).
    pub fn send_allowed(&mut self) -> Result<bool, TpzError> {
        self.check_xmit_complete()?;
        Ok(self.send_tail.wrapping_sub(self.send_completed) < SEND_RING)
    }

    /// A fresh message to build, if a send entry is free (`tpz_get_sendmsg`); completions
    /// of finished sends are called first.
    pub fn get_sendmsg(&mut self) -> Result<Option<SendMsg>, TpzError> {
        if !self.send_allowed()? {
            return Ok(None);
        }
        Ok(Some(SendMsg {
            ctl: Box::new([0; CTRLMSG_BYTES]),
            len: 0,
            hid: 0,
            payload: None,
            aborted: false,
        }))
    }

    /// Releases a message to the MCP for `dest` (`tpz_release_sendmsg`). A refused message
    /// comes back with the reason.
    pub fn release_sendmsg(
        &mut self,
        mut msg: SendMsg,
        dest: RouteId,
        spec: MsgSpec,
    ) -> Result<(), (TpzError, SendMsg)> {
        if let Some(p) = &msg.payload
            && let Err(e) = self.own(&p.buf)
        {
            return Err((e, msg));
        }
        if !matches!(self.send_allowed(), Ok(true)) {
            return Err((TpzError::Api(ApiError::SendQueueFull), msg));
        }
        if dest.0 >= crate::hcb::NUM_ROUTES {
            return Err((ApiError::UnknownRoute(dest).into(), msg));
        }
        let with_payload = !matches!(spec, MsgSpec::Ctrl);
        if with_payload && msg.payload.is_none() {
            return Err((TpzError::NoPayload, msg));
        }
        let (len, host) = match (&msg.payload, with_payload) {
            (Some(p), true) => (p.len as u32, p.buf.bus_addr()),
            _ => (0, 0),
        };
        let mut fl = 0;
        if msg.aborted {
            fl |= flags::ABORTED;
        }
        if with_payload {
            fl |= flags::PAYLOAD;
        }
        let token = match spec {
            MsgSpec::Token(t) => {
                fl |= flags::TOKEN;
                t
            }
            _ => Token { slot: 0, key: 0 },
        };
        let i = self.send_tail;
        let at = wire::send_entry_at(self.base, i);
        let mut entry = [0u8; MSG as usize + CTRLMSG_BYTES];
        let words = [
            (send_entry::FLAGS, fl),
            (send_entry::ROUTE, dest.0),
            (send_entry::HID, u32::from(msg.hid)),
            (send_entry::CTL_WORDS, msg.ctlmsg_len() as u32),
            (send_entry::PAYLOAD_LEN, len),
            (send_entry::HOST_HI, (host >> 32) as u32),
            (send_entry::HOST_LO, host as u32),
            (send_entry::TOKEN_SLOT, u32::from(token.slot)),
            (send_entry::TOKEN_KEY, token.key),
            (send_entry::STATUS, 0),
        ];
        for (o, v) in words {
            entry[o as usize..o as usize + 4].copy_from_slice(&v.to_be_bytes());
        }
        entry[MSG as usize..].copy_from_slice(&msg.ctl[..]);
        // The payload is the board's before the entry that names it is published.
        let payload = msg
            .payload
            .take()
            .map(|p| (p.buf.to_device(), p.completion));
        let written = self
            .wr_bytes(at, &entry)
            .and_then(|()| self.wr(self.base + ep::SEND_TAIL, i.wrapping_add(1)));
        if let Err(e) = written {
            msg.payload = payload.map(|(d, c)| Attached {
                len: len as usize,
                buf: d.reclaim(),
                completion: c,
            });
            return Err((e.into(), msg));
        }
        self.send_tail = i.wrapping_add(1);
        self.pending.push_back(Pending { payload });
        self.counters.released += 1;
        self.unit.kick();
        Ok(())
    }

    // ---- receiving ----

    /// The next receive entry to stock with a payload buffer before traffic starts
    /// (`tpz_prime_rcvmsg`): attach a buffer with [`TpzEndpoint::attach_rcvmsg`], then
    /// release it. `None` once every entry was primed.
    pub fn prime_rcvmsg(&mut self) -> Option<RcvMsg> {
        if self.primed >= RECV_RING {
            return None;
        }
        let index = self.primed;
        self.primed += 1;
        Some(RcvMsg {
            index,
            primed: true,
            hid: 0,
            ctl: Vec::new(),
            payload_len: 0,
            status: PayloadStatus::None,
            token_slot: 0,
            scan: 0,
        })
    }

    /// Attaches a payload buffer to the message's receive entry (`tpz_attach_rcvmsg`):
    /// the next message received there with an unsolicited payload lands in it.
    pub fn attach_rcvmsg(&mut self, msg: &RcvMsg, buf: HostBuf) -> Result<(), (TpzError, HostBuf)> {
        if let Err(e) = self.own(&buf) {
            return Err((e, buf));
        }
        let i = (msg.index % RECV_RING) as usize;
        if self.attached[i].is_some() {
            return Err((TpzError::AlreadyAttached(msg.index), buf));
        }
        let at = wire::recv_entry_at(self.base, msg.index);
        let cap = buf.len().min(u32::MAX as usize) as u32;
        let host = buf.bus_addr();
        let dev = buf.to_device();
        let written = self
            .wr(at + recv_entry::ATT_HI, (host >> 32) as u32)
            .and_then(|()| self.wr(at + recv_entry::ATT_LO, host as u32))
            .and_then(|()| self.wr(at + recv_entry::ATT_CAP, cap));
        if let Err(e) = written {
            return Err((e.into(), dev.reclaim()));
        }
        self.attached[i] = Some(dev);
        Ok(())
    }

    /// Takes the payload buffer off the message's receive entry (`tpz_detach_rcvmsg`):
    /// it holds the payload, if one was delivered there. Attach a fresh buffer before the
    /// entry is released, or payloads arriving there are dropped and counted.
    pub fn detach_rcvmsg(&mut self, msg: &RcvMsg) -> Result<Option<HostBuf>, TpzError> {
        let i = (msg.index % RECV_RING) as usize;
        let Some(dev) = self.attached[i].take() else {
            return Ok(None);
        };
        self.wr(
            wire::recv_entry_at(self.base, msg.index) + recv_entry::ATT_CAP,
            0,
        )?;
        Ok(Some(dev.reclaim()))
    }

    /// Whether the message's receive entry has a payload buffer (`tpz_attached`).
    pub fn attached(&self, msg: &RcvMsg) -> bool {
        self.attached[(msg.index % RECV_RING) as usize].is_some()
    }

    /// Runs `f` on the payload delivered into the message's attached buffer, if any.
    pub fn with_payload<R>(&mut self, msg: &RcvMsg, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let i = (msg.index % RECV_RING) as usize;
        if msg.status != PayloadStatus::Attached {
            return f(None);
        }
        let Some(dev) = self.attached[i].take() else {
            return f(None);
        };
        // Under the unit's lock nothing else runs the MCP; the DMA that filled the buffer
        // finished before the entry was published.
        let host = dev.reclaim();
        // A buffer attached after this message arrived may be shorter than its payload.
        let r = f(host.as_slice().get(..msg.payload_len as usize));
        self.attached[i] = Some(host.to_device());
        r
    }

    fn filled(&self) -> Result<u32, ApiError> {
        self.rd(self.base + ep::RECV_FILLED)
    }

    /// The header id of the next undelivered message without taking it
    /// (`tpz_peek_rcvmsg`); `None` is `TPZ_NO_HID`.
    pub fn peek_rcvmsg(&mut self) -> Result<Option<u16>, TpzError> {
        if self.filled()? == self.recv_taken {
            return Ok(None);
        }
        let at = wire::recv_entry_at(self.base, self.recv_taken);
        Ok(Some(self.rd(at + recv_entry::HID)? as u16))
    }

    /// Takes the next undelivered message (`tpz_get_rcvmsg`, `tpz_consume_rcvmsg`).
    pub fn get_rcvmsg(&mut self) -> Result<Option<RcvMsg>, TpzError> {
        let filled = self.filled()?;
        if filled == self.recv_taken || filled.wrapping_sub(self.recv_taken) > RECV_RING {
            return Ok(None);
        }
        let index = self.recv_taken;
        let at = wire::recv_entry_at(self.base, index);
        let mut head = [0u8; 32];
        self.rd_bytes(at, &mut head)?;
        let w = |o: u32| {
            let o = o as usize;
            u32::from_be_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]])
        };
        let words = (w(recv_entry::CTL_WORDS) as usize).min(CTRLMSG_WORDS);
        let mut ctl = vec![0u8; words * 4];
        self.rd_bytes(at + MSG, &mut ctl)?;
        self.recv_taken = index.wrapping_add(1);
        self.counters.received += 1;
        Ok(Some(RcvMsg {
            index,
            primed: false,
            hid: w(recv_entry::HID) as u16,
            ctl,
            payload_len: w(recv_entry::PAYLOAD_LEN).min(PAYLOAD_MAX as u32),
            status: PayloadStatus::from_word(w(recv_entry::PAYLOAD_STATUS)),
            token_slot: w(recv_entry::TOKEN_SLOT) as u16,
            scan: 0,
        }))
    }

    /// Gives the message's receive entry back to the MCP (`tpz_release_rcvmsg`). Entries
    /// go back in ring order: one released early waits for the ones before it.
    pub fn release_rcvmsg(&mut self, msg: RcvMsg) -> Result<(), TpzError> {
        if msg.primed {
            return Ok(());
        }
        self.released[(msg.index % RECV_RING) as usize] = true;
        let before = self.recv_released;
        while self.recv_released != self.recv_taken
            && self.released[(self.recv_released % RECV_RING) as usize]
        {
            self.released[(self.recv_released % RECV_RING) as usize] = false;
            self.recv_released = self.recv_released.wrapping_add(1);
        }
        if self.recv_released != before {
            self.wr(self.base + ep::RECV_RELEASED, self.recv_released)?;
        }
        Ok(())
    }

    /// Registers the handler for header id `hid` (`tpz_register_rcv_handler`).
    pub fn register_rcv_handler(
        &mut self,
        hid: u16,
        handler: impl FnMut(&TpzDelivery<'_>) + Send + 'static,
    ) -> Result<(), TpzError> {
        let slot = self
            .handlers
            .get_mut(usize::from(hid))
            .ok_or(TpzError::HidOutOfRange(hid.into()))?;
        *slot = Some(Box::new(handler));
        Ok(())
    }

    /// Removes the handler of `hid` (`tpz_remove_rcv_handler`); whether there was one.
    pub fn remove_rcv_handler(&mut self, hid: u16) -> Result<bool, TpzError> {
        let slot = self
            .handlers
            .get_mut(usize::from(hid))
            .ok_or(TpzError::HidOutOfRange(hid.into()))?;
        Ok(slot.take().is_some())
    }

    /// Takes every undelivered message and hands it to the handler registered for its
    /// header id, then releases its entry (what the driver's receive interrupt does, seed
    /// 003 §7). A message whose id has no handler goes to the slow queue, unreleased.
    pub fn dispatch(&mut self) -> Result<DispatchReport, TpzError> {
        let mut report = DispatchReport::default();
        while let Some(msg) = self.get_rcvmsg()? {
            let hid = usize::from(msg.hid);
            let Some(mut handler) = self.handlers.get_mut(hid).and_then(Option::take) else {
                report.no_handler += 1;
                self.counters.no_handler += 1;
                self.slow.push_back(msg);
                continue;
            };
            self.with_payload(&msg, |payload| handler(&TpzDelivery { msg: &msg, payload }));
            self.handlers[hid] = Some(handler);
            report.handled += 1;
            self.counters.handled += 1;
            self.release_rcvmsg(msg)?;
        }
        Ok(report)
    }

    /// The oldest message no handler took (`tpz_slow_dequeue`); release it when done.
    pub fn slow_dequeue(&mut self) -> Option<RcvMsg> {
        self.slow.pop_front()
    }

    // ---- payload tokens ----

    /// Designates `buf` for an incoming payload and returns the token a sender names it
    /// by (`tpz_get_token`); refused with [`TpzError::NoSlot`] when the IPT is full.
    pub fn get_token(&mut self, buf: HostBuf) -> Result<Token, (TpzError, HostBuf)> {
        if let Err(e) = self.own(&buf) {
            return Err((e, buf));
        }
        let Some(slot) = self.ipt.iter().position(Option::is_none) else {
            return Err((TpzError::NoSlot, buf));
        };
        let key = self.unit.locked().st.gm.next_key();
        let at = wire::ipt_at(self.base, slot as u32);
        let host = buf.bus_addr();
        let cap = buf.len().min(u32::MAX as usize) as u32;
        let dev = buf.to_device();
        // The key goes last: the MCP never matches a slot whose buffer is half written.
        let written = self
            .wr(at + ipt::HOST_HI, (host >> 32) as u32)
            .and_then(|()| self.wr(at + ipt::HOST_LO, host as u32))
            .and_then(|()| self.wr(at + ipt::CAP, cap))
            .and_then(|()| self.wr(at + ipt::KEY, key));
        if let Err(e) = written {
            return Err((e.into(), dev.reclaim()));
        }
        self.ipt[slot] = Some((key, dev));
        Ok(Token {
            slot: slot as u16,
            key,
        })
    }

    fn take_token(&mut self, token: Token) -> Result<HostBuf, TpzError> {
        let slot = usize::from(token.slot);
        match self.ipt.get(slot) {
            Some(Some((key, _))) if *key == token.key => {}
            _ => return Err(TpzError::UnknownToken(token)),
        }
        // The slot is disabled on the board before its buffer changes hands, whether or
        // not the MCP already cancelled it on receipt.
        self.wr(wire::ipt_at(self.base, u32::from(token.slot)) + ipt::KEY, 0)?;
        let (_, dev) = self.ipt[slot].take().expect("checked above");
        Ok(dev.reclaim())
    }

    /// Frees the token's IPT slot after its message arrived and returns the buffer, now
    /// holding the payload (`tpz_release_token`).
    pub fn release_token(&mut self, token: Token) -> Result<HostBuf, TpzError> {
        self.take_token(token)
    }

    /// Cancels a token whose message will not come (`tpz_cancel_token`): the IPT entry is
    /// disabled on the board and the buffer returned.
    pub fn cancel_token(&mut self, token: Token) -> Result<HostBuf, TpzError> {
        self.take_token(token)
    }
}

impl Drop for TpzEndpoint {
    fn drop(&mut self) {
        if let Some(layout) = self.unit.layout() {
            let _ = self.wr(layout.gm + gm_area::TPZ_ENDPOINT, 0);
        }
        self.unit.locked().st.gm.tpz_attached = false;
        let _ = &self.seg;
    }
}

#[cfg(test)]
mod tests;
