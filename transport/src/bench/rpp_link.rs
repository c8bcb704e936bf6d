//! RPP over one board's channel: the glue between a sans-IO [`Connection`] and the
//! unreliable channel API ([`Api`]), for host programs that run unchanged inline,
//! threaded and under the deterministic scheduler.
//!
//! **Sending** ([`BoardConnection::send_with`], [`BoardConnection::transmit`]): a message
//! of [`LEND_FROM`] bytes or more is written by the application straight into a DMA send
//! buffer, which is lent to the board while RPP keeps the message
//! ([`SendBuf::lend`](myri_mcp::SendBuf::lend)): every transmission of it, first or
//! resend, is the packet's header sent inline and the payload DMA'd from that buffer
//! ([`Api::send_lent`]), with no copy; the buffer returns to the channel when RPP hands
//! the message back acknowledged (or, if the board still reads it, at a later reap).
//! Shorter messages are owned buffers: RPP writes each packet's header into a DMA buffer
//! ([`Connection::poll_transmit_gather`]) and the payload is copied after it (for a few
//! bytes a copy costs less than a DMA from host memory). That copy is the one CLF had.
//! The buffer is, when there is one, the last receive buffer RPP was done with, turned
//! around as the raw echo does ([`Api::send_recv_buffer`]): an answer then takes no send
//! buffer and gives no receive buffer back to be posted again (it returns to its channel
//! once the board has sent it). A copied packet RPP hands out is never lost on the host:
//! when the send channel is full it waits, written, for the next call; lent packets are
//! sent only under a window within the channel's slots, so the channel has room for them.
//!
//! **Receiving** ([`BoardConnection::recv`]): each datagram is handed to RPP where the
//! board DMA'd it; a whole in-order message ([`Received::InPlace`]) is delivered as a view
//! of that receive buffer ([`Delivery::InPlace`]) with no copy, and the buffer goes back
//! to the channel when the delivery is dropped. Messages RPP had to assemble (fragments,
//! or packets that arrived out of order) come as owned buffers ([`Delivery::Owned`]).
//!
//! **Time** is the driver's: a real clock inline and threaded, virtual time under the
//! scheduler, so a simulated run is a function of its seed.

use myri_device::time::Time;
use myri_mcp::{Api, ApiError, Channel, LentSendBuf, RecvBuf, RouteId, SendBuf};
use myri_rpp::wire::MAX_HEADER_LEN;
use myri_rpp::{Config, Connection, Event, Instant, MessageId, Received, SendError, Stats};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The RPP configuration the board benchmarks use: the channel's largest payload as the
/// MTU, in-place delivery, and timers for a cluster link.
///
/// Acknowledgements are coalesced over 16 packets or 100 µs (every ack is a packet
/// through both boards, as costly to the hosts as a data packet short of its bytes); a
/// gap is still acked at once, and so is half the advertised credit used. At most 56
/// messages are held (queued or unacknowledged, 448 KiB of 8 KiB ones) before `send`
/// says it would block: a writer faster than the link waits, as on a socket with a
/// bounded send buffer, and the messages RPP hands back for reuse stay in the cache.
/// 56 is also as many as can be lent to the board (the channel's 64 send buffers less
/// those kept for headers and acknowledgements), so a stream of long messages never
/// falls back to copying.
/// Retries are generous because a host thread on a busy two-core machine can be
/// descheduled for milliseconds: a slow peer is not a dead one here.
pub fn board_config() -> Config {
    Config::default()
        .with_mtu(myri_mcp::hcb::MAX_PAYLOAD)
        .with_in_place_delivery(true)
        .with_ack_every(16)
        .with_ack_delay(Duration::from_micros(100))
        .with_max_queued_messages(56)
        .with_rto_min(Duration::from_micros(100))
        .with_max_retries(30)
}

fn instant(t: Time) -> Instant {
    Instant::from_nanos(t.as_nanos())
}

fn time(i: Instant) -> Time {
    Time::from_nanos(i.as_nanos())
}

/// Messages at least this long are written into a DMA buffer that is lent to the board
/// while RPP keeps the message (every transmission is a DMA from it); shorter ones are
/// owned buffers, copied into a send buffer per packet (for a few bytes a copy is cheaper
/// than a DMA from host memory).
pub const LEND_FROM: usize = 1024;

/// DMA send buffers kept out of lending: every copied packet (an acknowledgement, a short
/// message) needs one, so lending all of them would leave RPP unable to acknowledge
/// anything.
const LEND_RESERVE: usize = 8;

/// At most this many messages are lent at once.
const LEND_MAX: usize = myri_mcp::host::unit::SEND_BUFS - LEND_RESERVE;

/// A message RPP keeps until the peer acknowledges it.
#[derive(Debug)]
pub enum BoardMsg {
    /// An owned buffer: each packet of it is copied into a DMA send buffer.
    Owned(Vec<u8>),
    /// The first `len` bytes of a DMA buffer lent to the board: packets are sent from it
    /// by DMA, with no copy.
    Lent {
        /// The buffer.
        buf: LentSendBuf,
        /// The message's length.
        len: usize,
    },
}

impl AsRef<[u8]> for BoardMsg {
    fn as_ref(&self) -> &[u8] {
        match self {
            BoardMsg::Owned(v) => v,
            BoardMsg::Lent { buf, len } => buf.as_slice().get(..*len).unwrap_or(&[]),
        }
    }
}

/// A message RPP delivered.
#[derive(Debug)]
pub enum Delivery {
    /// A view of the receive buffer the board DMA'd it into: `buf[range]`. Dropping it
    /// gives the buffer back to the channel.
    InPlace {
        /// The receive buffer.
        buf: RecvBuf,
        /// Where the message is in it.
        range: Range<usize>,
    },
    /// A message RPP assembled (from fragments or out-of-order packets).
    Owned(Vec<u8>),
}

impl Delivery {
    /// The message's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Delivery::InPlace { buf, range } => buf.as_slice().get(range.clone()).unwrap_or(&[]),
            Delivery::Owned(v) => v,
        }
    }

    /// The message's length.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the glue did (RPP's own counters are in [`Stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Packets handed to the send channel.
    pub packets_sent: u64,
    /// Packets taken from the receive channel.
    pub packets_received: u64,
    /// Payload bytes copied into DMA send buffers (packets of owned messages).
    pub bytes_copied: u64,
    /// Packets sent by DMA from a lent message buffer (no copy).
    pub packets_lent: u64,
    /// Messages written into lent DMA buffers.
    pub messages_lent: u64,
    /// Copied packets written into a receive buffer RPP was done with and sent back
    /// from it (no send buffer taken, no receive buffer given back and posted again).
    pub packets_turned: u64,
    /// Messages delivered in place, from the receive buffer.
    pub in_place: u64,
    /// Messages delivered as owned buffers RPP assembled.
    pub assembled: u64,
    /// Times a written packet waited because the send channel was full.
    pub channel_full: u64,
    /// Times no DMA send buffer was free.
    pub no_send_buffer: u64,
    /// Sends the channel refused for another reason (the packet is lost on the host; RPP
    /// retransmits it).
    pub send_errors: u64,
    /// Receives the channel reported as bad (a corrupt completion, counted by the API).
    pub recv_errors: u64,
    /// Packets RPP produced that do not fit a DMA buffer (never, with the MTU of
    /// [`board_config`]).
    pub oversize: u64,
}

impl LinkCounters {
    /// Adds `o` to these counters.
    pub fn add(&mut self, o: &LinkCounters) {
        self.packets_sent += o.packets_sent;
        self.packets_received += o.packets_received;
        self.bytes_copied += o.bytes_copied;
        self.packets_lent += o.packets_lent;
        self.messages_lent += o.messages_lent;
        self.packets_turned += o.packets_turned;
        self.in_place += o.in_place;
        self.assembled += o.assembled;
        self.channel_full += o.channel_full;
        self.no_send_buffer += o.no_send_buffer;
        self.send_errors += o.send_errors;
        self.recv_errors += o.recv_errors;
        self.oversize += o.oversize;
    }
}

/// Send buffers RPP handed back kept for reuse, at most.
const POOL: usize = 1024;

/// An RPP connection over one board's receive channel and a route to the peer's.
pub struct BoardConnection {
    conn: Connection<BoardMsg>,
    chan: Channel,
    route: RouteId,
    peer_chan: u8,
    /// At most this many sends unfinished by the board (`None`: as many as the send
    /// channel takes), counted as the seed's `myri_api0_num_pending` counts them: every
    /// send of this board's host, so the channel keeps room for a lent packet even when
    /// others share it.
    window: Option<usize>,
    /// Sends unfinished by the board: counted at the start of each transmit call and
    /// again when the window looks full, plus this connection's sends since.
    pending: usize,
    /// A DMA buffer taken when RPP had nothing to send, for next time.
    spare: Option<SendBuf>,
    /// A receive buffer RPP is done with, kept to write the next copied packet into and
    /// send back, as the raw echo turns a packet around: no buffer goes back to the
    /// channel and none is taken from the send pool (it returns to its channel once the
    /// board has sent it).
    turn: Option<RecvBuf>,
    /// A written packet the send channel had no room for: it goes first next time.
    held: Option<(OutBuf, usize)>,
    /// A copied packet written when no DMA buffer was free: it goes first next time.
    unplaced: Option<Vec<u8>>,
    /// Message buffers RPP handed back, for the next messages.
    pool: Vec<Vec<u8>>,
    /// Messages lent to the board and not yet handed back by RPP.
    lent: usize,
    failure: Option<String>,
    last_activity: Time,
    counters: LinkCounters,
    /// Published after every transmit: nothing of ours is queued or unacknowledged.
    idle: Option<Arc<AtomicBool>>,
}

impl BoardConnection {
    /// A connection starting at `now` that receives on `chan` and sends by `route` to the
    /// peer's channel `peer_chan`, keeping at most `window` sends in the send channel.
    /// Both ends use the same `conn_id`; `incarnation` is this end's (non-zero).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Config,
        incarnation: u64,
        conn_id: u32,
        chan: Channel,
        route: RouteId,
        peer_chan: u8,
        window: Option<usize>,
        now: Time,
    ) -> Result<BoardConnection, String> {
        let conn = Connection::new(config, incarnation, u64::from(conn_id), instant(now))
            .map_err(|e| e.to_string())?;
        Ok(BoardConnection {
            conn,
            chan,
            route,
            peer_chan,
            window: window.map(|w| w.clamp(1, myri_mcp::hcb::SEND_SLOTS as usize)),
            pending: 0,
            spare: None,
            turn: None,
            held: None,
            unplaced: None,
            pool: Vec::new(),
            lent: 0,
            failure: None,
            last_activity: now,
            counters: LinkCounters::default(),
            idle: None,
        })
    }

    /// The RPP connection.
    pub fn connection(&self) -> &Connection<BoardMsg> {
        &self.conn
    }

    /// RPP's counters.
    pub fn stats(&self) -> Stats {
        self.conn.stats()
    }

    /// The glue's counters.
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// Why the connection failed, if it did (the peer was unreachable or restarted).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Gives back the receive channel (to run something else on it).
    pub fn into_channel(self) -> Channel {
        self.chan
    }

    /// Queues a message of `len` bytes that `fill` writes: from [`LEND_FROM`] bytes into
    /// a DMA buffer lent to the board while RPP keeps it, else (or when no buffer is free
    /// for lending) into a reused buffer RPP handed back. Says `false` when RPP's queue is
    /// full: try after a [`BoardConnection::recv`] that took acknowledgements.
    pub fn send_with(&mut self, api: &mut Api, len: usize, fill: impl FnOnce(&mut [u8])) -> bool {
        if !self.conn.can_send(len) {
            return false;
        }
        // Lent packets are sent only under a window, which keeps the send channel from
        // filling: a lent packet RPP has written cannot wait for room as a copied one can.
        if self.window.is_some()
            && (LEND_FROM..=myri_mcp::host::unit::BUF_LEN).contains(&len)
            && self.lent < LEND_MAX
            && let Ok(mut buf) = api.get_send_buffer()
        {
            fill(&mut buf.as_mut_slice()[..len]);
            let msg = BoardMsg::Lent {
                buf: buf.lend(),
                len,
            };
            return match self.send_msg(msg) {
                Ok(_) => {
                    self.lent += 1;
                    self.counters.messages_lent += 1;
                    true
                }
                // The buffer goes back to the channel when the message drops.
                Err(_) => false,
            };
        }
        let mut msg = self.pool.pop().unwrap_or_default();
        msg.resize(len, 0);
        fill(&mut msg);
        match self.send_msg(BoardMsg::Owned(msg)) {
            Ok(_) => true,
            Err(msg) => {
                self.take_back(msg);
                false
            }
        }
    }

    /// Queues `msg` for reliable, in-order delivery; RPP keeps it until acknowledged.
    pub fn send(&mut self, msg: Vec<u8>) -> Result<MessageId, Vec<u8>> {
        self.send_msg(BoardMsg::Owned(msg)).map_err(|m| match m {
            BoardMsg::Owned(v) => v,
            BoardMsg::Lent { .. } => unreachable!("an owned message comes back owned"),
        })
    }

    fn send_msg(&mut self, msg: BoardMsg) -> Result<MessageId, BoardMsg> {
        match self.conn.send(msg) {
            Ok(id) => Ok(id),
            Err(e) => {
                let closed = matches!(e, SendError::Closed(_));
                let msg = e.into_inner();
                if closed && self.failure.is_none() {
                    self.failure = Some("the connection is closed".into());
                }
                Err(msg)
            }
        }
    }

    /// A message RPP handed back: an owned buffer is kept for the next messages, a lent
    /// one goes back to the channel (at once, or when the board has finished reading it).
    fn take_back(&mut self, msg: BoardMsg) {
        match msg {
            BoardMsg::Owned(v) => {
                if self.pool.len() < POOL {
                    self.pool.push(v);
                }
            }
            BoardMsg::Lent { .. } => self.lent -= 1,
        }
    }

    /// Whether messages are queued or unacknowledged.
    pub fn has_pending(&self) -> bool {
        self.conn.has_pending()
    }

    /// A flag this end keeps up to date after every [`BoardConnection::transmit`]: set
    /// while nothing it sent is queued or unacknowledged. The other end's driver, on
    /// another thread or node, waits for it before closing the books.
    pub fn idle_flag(&mut self) -> Arc<AtomicBool> {
        self.idle
            .get_or_insert_with(|| Arc::new(AtomicBool::new(false)))
            .clone()
    }

    /// When a packet last went out or came in.
    pub fn last_activity(&self) -> Time {
        self.last_activity
    }

    /// Gives a delivered message's buffer back: an owned one to RPP; a receive buffer is
    /// kept to send the next copied packet from, or goes back to its channel.
    pub fn recycle(&mut self, d: Delivery) {
        match d {
            Delivery::Owned(v) => self.conn.recycle(v),
            Delivery::InPlace { buf, .. } => self.keep_for_turning(buf),
        }
    }

    /// Keeps a receive buffer RPP is done with for the next copied packet, if none is
    /// kept yet; else it goes back to its channel.
    fn keep_for_turning(&mut self, buf: RecvBuf) {
        if self.turn.is_none() {
            self.turn = Some(buf);
        }
    }

    /// The next message RPP delivers, taking datagrams from the receive channel as
    /// needed; `None` when nothing more has arrived. Acknowledged messages' buffers are
    /// kept for reuse; a failure is recorded ([`BoardConnection::failure`]).
    pub fn recv(&mut self, api: &mut Api, now: Time) -> Option<Delivery> {
        let t = instant(now);
        loop {
            // Events first: in-place delivery only happens with none queued, so the order
            // of messages is kept.
            while let Some(e) = self.conn.poll_event() {
                match e {
                    Event::Message(m) => {
                        self.counters.assembled += 1;
                        return Some(Delivery::Owned(m));
                    }
                    Event::Sent { msg, .. } => self.take_back(msg),
                    Event::Failed { error, unsent } => {
                        self.failure.get_or_insert_with(|| error.to_string());
                        unsent.into_iter().for_each(|m| self.take_back(m));
                    }
                    Event::PeerRestarted { old, new, .. } => {
                        self.failure.get_or_insert_with(|| {
                            format!("the peer restarted (incarnation {old} -> {new})")
                        });
                    }
                    Event::PeerClosed { .. } => {
                        self.failure
                            .get_or_insert_with(|| "the peer closed the connection".into());
                    }
                    _ => {}
                }
            }
            let buf = match api.recv(&self.chan) {
                Ok(Some(b)) => b,
                Ok(None) => return None,
                Err(_) => {
                    self.counters.recv_errors += 1;
                    continue;
                }
            };
            self.counters.packets_received += 1;
            self.last_activity = now;
            if let Received::InPlace { payload, .. } = self.conn.handle_packet(t, buf.as_slice()) {
                self.counters.in_place += 1;
                return Some(Delivery::InPlace {
                    buf,
                    range: payload,
                });
            }
            // Anything else was taken (or dropped and counted) by RPP: the receive
            // buffer is kept to send the next packet from, or goes back to the channel.
            self.keep_for_turning(buf);
        }
    }

    /// Runs RPP's timers when due and sends every packet it has, while the send channel
    /// takes them. Returns whether a packet went out.
    pub fn transmit(&mut self, api: &mut Api, now: Time) -> bool {
        let t = instant(now);
        if self.conn.poll_timeout().is_some_and(|d| d <= t) {
            self.conn.handle_timeout(t);
        }
        self.transmit_packets(api, now, false)
    }

    /// Sends the next packet RPP has and nothing more: for a message just queued, an
    /// answer say, that should reach the board at the driver's next progress with only
    /// its own packet's work before it. Timers, the acknowledgement a delivered message's
    /// packet carried (RPP holds it back, see [`Connection::handle_packet`]) and further
    /// packets are left to the next [`BoardConnection::transmit`], which the program
    /// should call in its next step. Returns whether a packet went out.
    pub fn transmit_first(&mut self, api: &mut Api, now: Time) -> bool {
        self.transmit_packets(api, now, true)
    }

    fn transmit_packets(&mut self, api: &mut Api, now: Time, first_only: bool) -> bool {
        let t = instant(now);
        let mut sent = false;
        if self.window.is_some() {
            // Once a call, as the raw sender counts once a step: the board may have
            // finished sends, and others on this host may have sent.
            self.pending = api.num_pending();
        }
        let mut stack = [0u8; MAX_HEADER_LEN];
        while !(sent && first_only) && self.room(api) {
            if let Some((buf, len)) = self.held.take() {
                if !self.post(api, buf, len, now) {
                    break;
                }
                sent = true;
                continue;
            }
            if let Some(packet) = self.unplaced.take() {
                // A copied packet written while no DMA buffer was free goes first, in
                // the first one there is.
                let Some(mut buf) = self
                    .take_out()
                    .or_else(|| api.get_send_buffer().ok().map(OutBuf::Send))
                else {
                    self.counters.no_send_buffer += 1;
                    self.unplaced = Some(packet);
                    break;
                };
                buf.buffer_mut()[..packet.len()].copy_from_slice(&packet);
                if !self.post(api, buf, packet.len(), now) {
                    break;
                }
                sent = true;
                continue;
            }
            // The header goes straight into a kept receive buffer or the spare DMA
            // buffer, taken while idle, or else onto the stack, so that no buffer is
            // fetched between RPP's packet and the board; a lent packet needs no buffer
            // of its own at all.
            let mut out = self.take_out();
            let dst: &mut [u8] = match &mut out {
                Some(b) => b.buffer_mut(),
                None => &mut stack,
            };
            let Some(g) = self.conn.poll_transmit_gather(t, dst) else {
                // Nothing (more) to send. A call that sent nothing takes a buffer for the
                // next packet now, off that packet's path; one that sent leaves it to a
                // later call, once the board has what was sent.
                if out.is_none() && !sent {
                    self.spare = api.get_send_buffer().ok();
                }
                self.put_out(out);
                break;
            };
            let (header_len, payload) = (g.header_len, g.payload);
            if let Some((BoardMsg::Lent { buf: lent, .. }, at)) = g.message {
                let range = at..at + payload.len();
                let sent_lent =
                    api.send_lent(self.peer_chan, self.route, &dst[..header_len], lent, range);
                self.put_out(out);
                match sent_lent {
                    Ok(_ticket) => {
                        // The ticket is dropped: the lent buffer stays RPP's, and the
                        // window counts the send with the board's own count.
                        self.counters.packets_lent += 1;
                        self.posted(now);
                        sent = true;
                        continue;
                    }
                    Err(_) => {
                        // Never for want of room (the window is within the channel's
                        // slots): the packet is lost on the host, and RPP resends it.
                        self.counters.send_errors += 1;
                        break;
                    }
                }
            }
            let len = header_len + payload.len();
            if len > myri_mcp::host::unit::BUF_LEN {
                self.counters.oversize += 1;
                self.put_out(out);
                continue;
            }
            let buf = match out {
                Some(mut buf) => {
                    buf.buffer_mut()[header_len..len].copy_from_slice(payload);
                    buf
                }
                None => match api.get_send_buffer() {
                    Ok(mut buf) => {
                        let out = buf.as_mut_slice();
                        out[..header_len].copy_from_slice(&stack[..header_len]);
                        out[header_len..len].copy_from_slice(payload);
                        OutBuf::Send(buf)
                    }
                    Err(_) => {
                        // Written, and no buffer to put it in: it waits, whole, for one.
                        self.counters.no_send_buffer += 1;
                        let mut packet = Vec::with_capacity(len);
                        packet.extend_from_slice(&stack[..header_len]);
                        packet.extend_from_slice(payload);
                        self.unplaced = Some(packet);
                        break;
                    }
                },
            };
            self.counters.bytes_copied += payload.len() as u64;
            if !self.post(api, buf, len, now) {
                break;
            }
            sent = true;
        }
        if let Some(idle) = &self.idle {
            idle.store(!self.conn.has_pending(), Ordering::Release);
        }
        sent
    }

    /// When RPP next needs [`BoardConnection::transmit`] to run by itself.
    pub fn next_wake(&mut self) -> Option<Time> {
        self.conn.poll_timeout().map(time)
    }

    /// [`BoardConnection::next_wake`] for a host program's step, which drivers read only
    /// from a step that did not progress: `None` after one that did (no timer computed
    /// between a packet and the board).
    pub fn wake_unless(&mut self, progressed: bool) -> Option<Time> {
        if progressed { None } else { self.next_wake() }
    }

    /// Whether the send channel has room under the window (the count of unfinished
    /// sends is taken again from the board when it looks full).
    fn room(&mut self, api: &mut Api) -> bool {
        let Some(window) = self.window else {
            return true;
        };
        if self.pending >= window {
            self.pending = api.num_pending();
        }
        self.pending < window
    }

    /// A packet the send channel took: counted, also under the window.
    fn posted(&mut self, now: Time) {
        self.counters.packets_sent += 1;
        self.last_activity = now;
        self.pending += 1;
    }

    /// Hands a written packet to the send channel; `false` if it did not take it (no room:
    /// the packet is held for the next call; another error: it is counted and dropped,
    /// and RPP will send it again).
    fn post(&mut self, api: &mut Api, buf: OutBuf, len: usize, now: Time) -> bool {
        // The buffer goes back (to the free list, or to its receive channel) as soon as
        // the board has sent it, with no ticket to make and drop.
        let (peer, route) = (self.peer_chan, self.route);
        let refused = match buf {
            OutBuf::Send(buf) => match api.send_and_release(peer, route, buf, len) {
                Ok(()) => None,
                Err(e) => Some((e.error, OutBuf::Send(e.buf))),
            },
            OutBuf::Turn(buf) => match api.send_recv_buffer_and_release(peer, route, buf, len) {
                Ok(()) => {
                    self.counters.packets_turned += 1;
                    None
                }
                Err(e) => Some((e.error, OutBuf::Turn(e.buf))),
            },
        };
        let Some(refused) = refused else {
            self.posted(now);
            return true;
        };
        match refused {
            (ApiError::SendQueueFull, buf) => {
                self.counters.channel_full += 1;
                self.held = Some((buf, len));
            }
            (_, buf) => {
                self.counters.send_errors += 1;
                self.put_out(Some(buf));
            }
        }
        false
    }

    /// A buffer to write the next copied packet into: a kept receive buffer first (it is
    /// owed to its channel anyway), else the spare send buffer.
    fn take_out(&mut self) -> Option<OutBuf> {
        self.turn
            .take()
            .map(OutBuf::Turn)
            .or_else(|| self.spare.take().map(OutBuf::Send))
    }

    /// Puts back a buffer [`BoardConnection::take_out`] gave that was not sent.
    fn put_out(&mut self, buf: Option<OutBuf>) {
        match buf {
            Some(OutBuf::Send(b)) => self.spare = Some(b),
            Some(OutBuf::Turn(b)) => self.turn = Some(b),
            None => {}
        }
    }
}

/// A DMA buffer a copied packet is written into: a send buffer, or a receive buffer
/// turned around.
enum OutBuf {
    Send(SendBuf),
    Turn(RecvBuf),
}

impl OutBuf {
    fn buffer_mut(&mut self) -> &mut [u8] {
        match self {
            OutBuf::Send(b) => b.as_mut_slice(),
            OutBuf::Turn(b) => b.buffer_mut(),
        }
    }
}
