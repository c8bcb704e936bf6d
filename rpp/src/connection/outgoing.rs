//! What goes out: choosing the next packet (a resend, a new fragment, or a packet of
//! its own), within the window, the congestion window and the pacer, and writing it.

use super::*;

impl<B: AsRef<[u8]>> Connection<B> {
    // ---- What goes out --------------------------------------------------------------

    /// When [`Connection::handle_timeout`] should next be called.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.apply_held_ack();
        if matches!(self.state, State::Closed | State::Failed) {
            return None;
        }
        // The peer's credit holds data back and nothing is in flight to bring a new
        // credit: a persist probe will ask for one.
        let stalled = self.send.has_new()
            && !self.send.window_open(self.config.send_window)
            && self.send.in_flight == 0;
        if stalled && !self.stalled {
            self.stats.credit_stalls += 1;
        }
        self.stalled = stalled;
        let hello = self
            .hello_deadline
            .filter(|_| self.state == State::Connecting && self.rto_deadline.is_none());
        let next = earliest(
            self.recv.ack_deadline(self.timers.ack_delay),
            self.pacing_deadline,
        );
        let next = earliest(earliest(next, self.rto_deadline), hello);
        earliest(next, self.probe_deadline())
    }

    /// Whether a packet never sent before may go: the connection may send data, some
    /// waits, and the window, the peer's credit and the congestion window let it (the
    /// pacer is asked apart).
    pub(super) fn new_packet_may_go(&self, sending: bool) -> bool {
        sending
            && self.send.has_new()
            && self.send.window_open(self.config.send_window)
            && self.cc_room()
    }

    /// The flight now in the air tested the congestion window: acknowledgements of it are
    /// window-limited (see `window_tested_until`).
    #[inline]
    fn window_tested(&mut self) {
        self.window_tested_until = self.send.delivered + self.send.bytes_in_flight;
    }

    /// The congestion window holds new data back: it was tested (this flight's
    /// acknowledgements may grow it), and the pacer's last wait no longer decides when
    /// the next packet goes.
    #[inline]
    fn held_by_window(&mut self) {
        self.window_tested();
        if let Some(p) = self.pacer.as_mut() {
            p.window_holds();
        }
    }

    /// Whether the congestion window has room for another packet.
    #[inline]
    pub(super) fn cc_room(&self) -> bool {
        self.send.bytes_in_flight < self.flight_limit()
    }

    /// The most bytes the flight may hold: the congestion window, and what makes up for
    /// acknowledgements that came together (see the `aggregation` module).
    #[inline]
    pub(super) fn flight_limit(&self) -> u64 {
        self.cwnd.saturating_add(self.allowance)
    }

    /// When the pacer lets the next `packets` packets go, if not now (asked only once its
    /// bucket runs low).
    #[inline(never)]
    fn paced_until(&mut self, now: Instant, packets: u64) -> Option<Instant> {
        let (rate, window) = self.pacing_inputs();
        let t = self.pacer.as_mut()?.delay(now, rate, window, packets)?;
        self.stats.paced += 1;
        self.pacing_deadline = Some(t);
        Some(t)
    }

    /// The packets of the batch the next new packet would start, 0 for none (see the
    /// pacer's module documentation): none is under way, congestion control and pacing
    /// are on and the pacer spreads the window, the window holds two batches, and a
    /// batch's worth of new data waits (a shorter tail goes at once).
    #[inline]
    pub(super) fn batch_size(&self) -> u64 {
        // Below a quarter of a burst's time no pacing rate spreads a window (the cheap
        // answer for a cluster link, asked for every packet).
        if self.batch_left != 0
            || self.cc.is_none()
            || self.pacer.is_none()
            || self.rtt.srtt_nanos() < BURST_INTERVAL / 4
        {
            return 0;
        }
        let (rate, window) = self.pacing_inputs();
        match Pacer::batch(rate, window, self.max_packet) {
            Some(size)
                if self.cwnd >= 2 * size * self.max_packet
                    && self.send.unsent_at_least(size as usize) =>
            {
                size
            }
            _ => 0,
        }
    }

    /// The next data packet, a resend before a new one, if the congestion window and
    /// the pacer let one go.
    #[inline]
    fn take_data(&mut self, now: Instant, sending: bool) -> Option<DataRef> {
        let has_resend = !self.send.nothing_to_resend();
        if !(has_resend || sending && self.send.has_new()) {
            // Nothing to send at all: the common answer, found in two tests.
            return None;
        }
        let room = self.cc_room();
        // A resend goes when the window has room, or when nothing is in flight (the
        // timer's probe must go whatever the window).
        let resend = has_resend && (room || self.send.in_flight == 0);
        let new = self.new_packet_may_go(sending);
        // A new packet that starts a batch waits for room for the whole batch (an
        // acknowledgement of the flight brings it: the window holds two batches).
        let batch = if !resend && new { self.batch_size() } else { 0 };
        if batch != 0
            && self
                .flight_limit()
                .saturating_sub(self.send.bytes_in_flight)
                < batch * self.max_packet
        {
            if !self.batch_held {
                self.batch_held = true;
                self.stats.batch_holds += 1;
            }
            self.held_by_window();
            return None;
        }
        if !resend && !new {
            if !room
                && sending
                && self.send.has_new()
                && self.send.window_open(self.config.send_window)
            {
                self.stats.cwnd_limited += 1;
                self.held_by_window();
            }
            return None;
        }
        // The rest of a batch goes with its first packet; anything else asks the pacer,
        // a batch's first packet for the whole batch.
        let mid_batch = !resend && self.batch_left != 0;
        let packets = batch.max(1);
        if !mid_batch
            && self
                .pacer
                .as_ref()
                .is_some_and(|p| !p.has_tokens_for(packets))
            && self.paced_until(now, packets).is_some()
        {
            return None;
        }
        let d = match self.send.next_retransmit(now) {
            Some(d) => {
                cold_path();
                self.stats.retransmitted += 1;
                // A timeout's resend (whenever it goes): its D-SACK says nothing of
                // reordering.
                self.recently_retransmitted
                    .push_back((d.seq, self.send.last_resend_by_timeout));
                if self.recently_retransmitted.len() > 256 {
                    self.recently_retransmitted.pop_front();
                }
                self.trace
                    .record(now, TraceKind::Retransmit, u64::from(d.seq));
                d
            }
            None if new => {
                let d = self.send.next_new(now)?;
                self.stats.data_sent += 1;
                if batch != 0 {
                    self.batch_left = batch - 1;
                    self.batch_held = false;
                    self.stats.batches += 1;
                } else if self.batch_left != 0 {
                    self.batch_left -= 1;
                    self.batch_end = self.batch_left == 0;
                }
                d
            }
            None => return None,
        };
        // Whatever the pacer held back has gone (a deadline that passed while the window
        // held data back is cleared by handle_timeout).
        self.pacing_deadline = None;
        let bytes = u64::from(self.send.last_bytes);
        if let Some(cc) = self.cc.as_mut() {
            cc.on_sent(now, bytes);
            if self.send.bytes_in_flight.saturating_add(self.max_packet) >= self.flight_limit() {
                self.window_tested();
            }
        }
        if let Some(pacer) = self.pacer.as_mut() {
            pacer.on_sent(bytes);
        }
        Some(d)
    }

    pub(super) fn plan(&mut self, now: Instant) -> Option<Plan> {
        if matches!(self.state, State::Failed | State::Closed) {
            cold_path();
            if self.state == State::Failed || !self.close_due {
                return None;
            }
            self.close_due = false;
            self.stats.acks_sent += 1;
            self.stats.packets_sent += 1;
            let repr = HeaderRepr {
                flags: flags::CLOSE,
                integrity: self.config.integrity,
                mac: self.config.mac_key.is_some(),
                conn_id: self.conn_id,
                src_incarnation: self.local_incarnation,
                dst_incarnation: self.peer_incarnation.unwrap_or(0),
                ack: self.recv.rcv_nxt,
                ..HeaderRepr::default()
            };
            return Some(Plan {
                repr,
                sack_words: 0,
                payload: None,
                batch_end: false,
            });
        }
        if self.challenge_due
            && let Some(candidate) = self.challenge
        {
            cold_path();
            // Fields as a fresh connection's: the candidate knows nothing of this one.
            self.challenge_due = false;
            self.stats.acks_sent += 1;
            self.stats.packets_sent += 1;
            let repr = HeaderRepr {
                flags: flags::HELLO | flags::ACK_NOW,
                integrity: self.config.integrity,
                mac: self.config.mac_key.is_some(),
                conn_id: self.conn_id,
                src_incarnation: self.local_incarnation,
                dst_incarnation: candidate,
                credit: self.config.recv_window.min(INITIAL_CREDIT),
                ..HeaderRepr::default()
            };
            return Some(Plan {
                repr,
                sack_words: 0,
                payload: None,
                batch_end: false,
            });
        }
        // What goes: a resend, a new fragment, or a packet of its own for an
        // introduction, a probe, a close or an acknowledgement that is due.
        // No data before the peer's incarnation is known: a data packet must name the life
        // of the peer it is for, or a later life of the peer would take it (say it was
        // sent by a connection that has since failed and handed the message back).
        let sending = matches!(self.state, State::Established | State::Closing)
            && self.peer_incarnation.is_some();
        if self.held_ack.is_some()
            && ((self.send.has_new() && !self.new_packet_may_go(sending))
                || self.full_ack_due
                || !self.send.nothing_to_resend()
                || self.state == State::Closing)
        {
            // The held acknowledgement goes first where it may change what goes now: new
            // data the windows hold back (it may free room), a resend (it may show it
            // needless), a close waiting for the last acknowledgement. A new packet the
            // window lets through goes before it; and with nothing to send it stays held
            // for the next pass (`poll_timeout` applies it): the transmit loop asks once
            // more after its last packet, before the backend sends what it gathered, and
            // the acknowledgement's bookkeeping would hold the datagram back.
            self.apply_held_ack();
        }
        let data = if self.full_ack_due {
            None
        } else {
            self.take_data(now, sending)
        };
        let batch_end = core::mem::take(&mut self.batch_end);
        let mut flags = 0;
        if data.is_some() {
            flags |= flags::DATA;
        } else if self.hello_due {
            cold_path();
            self.hello_due = false;
            self.stats.acks_sent += 1;
        } else if self.full_ack_due {
            cold_path();
            self.stats.acks_sent += 1;
        } else if self.probe_due {
            cold_path();
            self.probe_due = false;
            flags |= flags::ACK_NOW;
            self.stats.probes += 1;
            self.stats.acks_sent += 1;
        } else if self.state == State::Closing && self.send.is_idle() {
            cold_path();
            flags |= flags::CLOSE;
            self.state = State::Closed;
            self.we_closed = true;
            self.rto_deadline = None;
            self.probe_sent_at = None;
            self.trace.record(now, TraceKind::Closed, 0);
            self.events.push_back(Event::Closed);
            self.stats.acks_sent += 1;
        } else if self
            .recv
            .ack_deadline(self.timers.ack_delay)
            .is_some_and(|t| t <= now)
        {
            self.stats.acks_sent += 1;
        } else {
            return None;
        }
        if self.state == State::Connecting || self.peer_incarnation.is_none() {
            cold_path();
            flags |= flags::HELLO;
        }
        let mut sack_words = self.recv.sack_words();
        let mut echo = self.recv.echo;
        // A data packet has room for DATA_SACK_WORDS of bitmap. A longer one is cut, and
        // the echo withheld: it would say that packets beyond the cut arrived, and the
        // sender would take those it cannot see acknowledged for lost. An acknowledgement
        // with the whole bitmap and the echo goes next.
        self.full_ack_due = false;
        if data.is_some() && usize::from(sack_words) > DATA_SACK_WORDS {
            cold_path();
            sack_words = DATA_SACK_WORDS as u8;
            echo = 0;
            self.stats.sack_cuts += 1;
            self.full_ack_due = true;
        }
        // In whole microseconds, from nanoseconds directly (no `Duration` between).
        let ack_delay_us = if echo == 0 {
            0
        } else {
            (now.nanos_since(self.recv.echo_at) / 1_000).min(u64::from(u16::MAX)) as u16
        };
        let credit = self.recv.credit();
        let mut repr = HeaderRepr {
            flags,
            integrity: self.config.integrity,
            mac: self.config.mac_key.is_some(),
            conn_id: self.conn_id,
            src_incarnation: self.local_incarnation,
            dst_incarnation: self.peer_incarnation.unwrap_or(0),
            ack: self.recv.rcv_nxt,
            credit,
            dsack: self.recv.dsack,
            echo,
            ack_delay_us,
            ..HeaderRepr::default()
        };
        if let Some(d) = data {
            repr.seq = d.seq;
            repr.msg_id = d.msg_id;
            repr.frag_index = d.frag;
            repr.frag_count = d.frags;
            repr.msg_len = d.msg_len as u32;
            repr.tx = self.send.last_tx();
            if self.rto_deadline.is_none() {
                self.rto_deadline = Some(now.add_nanos(self.rtt.rto_nanos()));
            }
        }
        self.recv.ack_sent();
        self.recv.advertised_credit = credit;
        self.stats.packets_sent += 1;
        Some(Plan {
            repr,
            sack_words,
            payload: data.map(|d| (d.msg_id, d.frag)),
            batch_end,
        })
    }

    /// Writes a plan's header into `out`; returns its length.
    #[inline]
    fn emit(&self, plan: &Plan, out: &mut [u8]) -> Option<usize> {
        if plan.sack_words == 0 {
            return plan.repr.emit(out, &[]);
        }
        self.emit_with_sack(plan, out)
    }

    /// [`Connection::emit`] for a header with a SACK bitmap, read from the receive half
    /// as `plan` found it (nothing changes the buffered packets in between).
    #[inline(never)]
    fn emit_with_sack(&self, plan: &Plan, out: &mut [u8]) -> Option<usize> {
        let (words, _) = self.recv.sack_bitmap()?;
        let used = usize::from(plan.sack_words).min(MAX_SACK_WORDS);
        plan.repr.emit(out, &words[..used])
    }

    /// Writes the next packet to send into `buf` (at least `config.mtu` bytes); returns
    /// its length, or `None` when nothing needs to go now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let plan = self.plan(now)?;
        let header_len = self.emit(&plan, buf)?;
        let payload = plan
            .payload
            .and_then(|(id, frag)| self.send.fragment_of(id, frag))
            .map_or(&[][..], |(_, bytes, _)| bytes);
        let total = header_len + payload.len();
        buf.get_mut(header_len..total)?.copy_from_slice(payload);
        match (&self.config.mac_key, self.config.integrity) {
            // The common case, without reading back what was just written.
            (None, Integrity::Crc32c) => wire::seal_crc(&mut buf[..total]),
            (None, _) => {}
            (key, _) => wire::seal_packet(&mut buf[..total], key.as_ref()),
        }
        Some(total)
    }

    /// Like [`Connection::poll_transmit`], without copying the payload: writes only the
    /// header into `header` (at least [`MAX_HEADER_LEN`] bytes) and lends the payload
    /// from the message being sent, for a channel that gathers the two (`sendmsg` with
    /// two iovecs, a DMA chain). A payload of at most [`INLINE_PAYLOAD`] bytes is copied
    /// behind the header when `header` has room for it (see [`Gather`]).
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        header: &mut [u8],
    ) -> Option<Gather<'_, B>> {
        if header.len() < MAX_HEADER_LEN {
            return None;
        }
        let plan = self.plan(now)?;
        let header_len = self.emit(&plan, header)?;
        let last = !self.may_transmit();
        let message = plan
            .payload
            .and_then(|(id, frag)| self.send.fragment_of(id, frag));
        let (payload, message) = match message {
            Some((buf, bytes, start)) => (bytes, Some((buf, start))),
            None => (&[][..], None),
        };
        let total = header_len + payload.len();
        if !payload.is_empty() && payload.len() <= INLINE_PAYLOAD && header.len() >= total {
            // Short: copied behind the header, one contiguous packet sealed in one pass.
            header[header_len..total].copy_from_slice(payload);
            match (&self.config.mac_key, self.config.integrity) {
                (None, Integrity::Crc32c) => wire::seal_crc(&mut header[..total]),
                (None, _) => {}
                (key, _) => wire::seal_packet(&mut header[..total], key.as_ref()),
            }
            return Some(Gather {
                header_len: total,
                payload: &[],
                message: None,
                batch_end: plan.batch_end,
                last,
            });
        }
        wire::seal(
            &mut header[..header_len],
            payload,
            self.config.mac_key.as_ref(),
        );
        Some(Gather {
            header_len,
            payload,
            message,
            batch_end: plan.batch_end,
            last,
        })
    }

    /// Whether [`Connection::poll_event`] has something (or an acknowledgement held back
    /// to apply): a cheap test for a driver that looks after every packet.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty() || self.held_ack.is_some()
    }

    /// Whether an event waits in the queue, not counting an acknowledgement held back: a
    /// driver that hands a message delivered in place to the application before anything
    /// else (see [`Connection::handle_packet`]) drains the queue first only when this
    /// says so, so that the events the packet raised still come before its message.
    #[inline]
    pub fn has_queued_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event<B>> {
        self.apply_held_ack();
        let e = self.events.pop_front()?;
        if let Event::Message(m) = &e {
            self.messages_queued -= 1;
            self.recv.undelivered_bytes -= m.len();
            // The application took bytes: if the peer was held back, say so at once.
            if self.recv.advertised_credit == 0 && self.recv.credit() > 0 {
                self.recv.owe_ack(self.last_heard, true);
            }
        }
        Some(e)
    }

    /// Bytes held for the application (buffered, being assembled, or delivered and not
    /// yet taken).
    pub fn recv_held(&self) -> usize {
        self.recv.held()
    }
}

/// The earlier of two deadlines, either of which may be unset.
#[inline]
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
