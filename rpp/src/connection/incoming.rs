//! What comes in: datagrams from the channel (checked, matched to the connection's
//! pair, then taken apart into acknowledgement and data) and the timers.

use super::*;

impl<B: AsRef<[u8]>> Connection<B> {
    // ---- Handling what comes in -----------------------------------------------------

    /// Whether `datagram` passes this connection's checks (its version, the integrity
    /// mode the connection uses and that mode's check, the MAC when keyed) and names its
    /// connection id: what a driver asks before it acts on a packet outside the
    /// connection, such as one that would revive a failed peer. Nothing is counted.
    pub fn authenticates(&self, datagram: &[u8]) -> bool {
        let Ok(h) = Header::new_checked(datagram) else {
            return false;
        };
        self.check(&h).is_ok() && h.conn_id() == self.conn_id
    }

    /// The checks every datagram passes before anything in it is believed, each as
    /// configured: the version, the integrity byte (a packet may not choose a weaker
    /// mode), the CRC-32C in that mode, the MAC when keyed.
    #[inline(always)]
    fn check(&self, h: &Header<&[u8]>) -> Result<(), DropReason> {
        if h.version() != wire::VERSION {
            return Err(DropReason::Malformed);
        }
        if h.integrity_byte() != self.integrity_byte {
            return Err(DropReason::IntegrityMismatch);
        }
        if self.config.integrity == Integrity::Crc32c && !h.crc_ok() {
            return Err(DropReason::BadCrc);
        }
        if let Some(key) = &self.config.mac_key
            && !h.mac_ok(key)
        {
            return Err(DropReason::BadMac);
        }
        Ok(())
    }

    /// Takes one datagram from the channel. Anything that is not a valid packet of this
    /// connection is dropped and counted; nothing here panics.
    ///
    /// The acknowledgement a data packet carries is checked here (a bogus one drops the
    /// packet) but, unless it has a SACK bitmap (evidence of loss, acted on at once),
    /// applied at the next call that depends on it: [`Connection::poll_event`],
    /// [`Connection::poll_timeout`], [`Connection::handle_timeout`], the next
    /// `handle_packet`, [`Connection::close`], or a `poll_transmit` with anything to send
    /// but a new packet the window already lets go. The message the packet completes thus
    /// reaches the application, and a new packet (its answer, say) the channel, without
    /// the acknowledgement's bookkeeping in front of them; the result is the same as if it
    /// had been applied at once (round-trip samples and timers are as of the packet's
    /// arrival). Until then the getters ([`Connection::stats`],
    /// [`Connection::has_pending`], [`Connection::can_send`], ...) do not count it, and
    /// [`Connection::has_events`] says there is something to poll.
    pub fn handle_packet(&mut self, now: Instant, datagram: &[u8]) -> Received {
        self.apply_held_ack();
        self.stats.packets_received += 1;
        let Ok(h) = Header::new_checked(datagram) else {
            return self.dropped(now, DropReason::Malformed);
        };
        // The checks first, each as configured; nothing in the packet is believed before.
        if let Err(reason) = self.check(&h) {
            return self.dropped(now, reason);
        }
        let Ok(repr) = HeaderRepr::parse(&h) else {
            return self.dropped(now, DropReason::Malformed);
        };
        if repr.conn_id != self.conn_id {
            return self.dropped(now, DropReason::Foreign);
        }
        let names_us = repr.dst_incarnation == self.local_incarnation;
        if repr.dst_incarnation != 0 && !names_us {
            // Meant for an earlier life of ours (or made up). While introducing
            // ourselves, say who we are now at once.
            self.hello_due |= self.state == State::Connecting;
            return self.dropped(now, DropReason::Stale);
        }
        if matches!(self.state, State::Closed | State::Failed) {
            // The peer missed our CLOSE and keeps talking: tell it again.
            self.close_due |= self.we_closed
                && repr.flags & flags::CLOSE == 0
                && self.peer_incarnation == Some(repr.src_incarnation);
            return self.dropped(now, DropReason::Closed);
        }
        match self.peer_incarnation {
            None => {
                cold_path();
                self.peer_incarnation = Some(repr.src_incarnation);
                if self.state == State::Connecting {
                    self.state = State::Established;
                }
                self.hello_deadline = None;
                self.trace
                    .record(now, TraceKind::Connected, repr.src_incarnation);
                self.events.push_back(Event::Connected {
                    peer_incarnation: repr.src_incarnation,
                });
            }
            Some(p) if p == repr.src_incarnation => {}
            // The incarnation we challenged names ours: it hears us, it is the peer's new
            // life.
            Some(p) if names_us && self.challenge == Some(repr.src_incarnation) => {
                cold_path();
                self.challenge = None;
                self.peer_restarted(now, p, repr.src_incarnation);
            }
            Some(_) if repr.dst_incarnation == 0 && repr.flags & flags::HELLO != 0 => {
                // A new life of the peer introducing itself, or anyone who knows the
                // connection id: nothing changes until it answers a challenge naming it.
                self.challenge = Some(repr.src_incarnation);
                self.challenge_due = true;
                self.stats.restart_challenges += 1;
                return self.dropped(now, DropReason::Stale);
            }
            Some(_) => return self.dropped(now, DropReason::Stale),
        }
        self.last_heard = now;
        self.probes_unanswered = 0;
        self.probe_sent_at = None;
        let payload = h.payload();
        let data = repr.flags & flags::DATA != 0;
        if repr.flags & (flags::ACK_NOW | flags::HELLO) != 0 || repr.dst_incarnation == 0 {
            // Answer at once: a probe wants it, and an introducer must learn who we are.
            cold_path();
            self.recv.owe_ack(now, true);
        }
        let Ok(echo) = self.send.check_ack(repr.ack, repr.echo) else {
            return self.dropped(now, DropReason::Malformed);
        };
        let held = HeldAck {
            at: now,
            ack: repr.ack,
            echo,
            dsack: repr.dsack,
            credit: repr.credit,
            ack_delay_us: repr.ack_delay_us,
        };
        // A data packet's acknowledgement waits until the message it carries is delivered
        // and whatever the application sends in answer has gone (see the method's docs),
        // unless nothing of ours awaits one or it shows losses (a SACK bitmap).
        let sack_words = h.sack_words();
        if data && sack_words == 0 && repr.flags & flags::CLOSE == 0 && !self.send.is_idle() {
            self.held_ack = Some(held);
        } else if sack_words == 0 && held.dsack == 0 && self.send.ack_tells_nothing(held.ack, echo)
        {
            // The acknowledgement on every data packet of a one-way stream, to a sender
            // with nothing in flight that the packet does not already know of: only the
            // credit is news (what `on_ack` would conclude, in a few tests).
            self.send.peer_credit = held.credit;
            if held.credit > 0 {
                self.persist_probes = 0;
            }
            if self.send.in_flight == 0 {
                self.rto_deadline = None;
            }
        } else if sack_words == 0 {
            self.on_ack(&held, &[]);
        } else {
            cold_path();
            let mut sack = [0u64; MAX_SACK_WORDS];
            for (i, word) in sack.iter_mut().enumerate().take(sack_words) {
                *word = h.sack_word(i);
            }
            self.on_ack(&held, &sack[..sack_words]);
        }
        if repr.flags & flags::CLOSE != 0 {
            cold_path();
            self.trace.record(now, TraceKind::PeerClosed, 0);
            self.state = State::Closed;
            self.rto_deadline = None;
            self.hello_deadline = None;
            self.probe_sent_at = None;
            let unsent = self.send.take_all();
            self.events.push_back(Event::PeerClosed { unsent });
            return Received::Accepted;
        }
        if !data {
            return Received::Accepted;
        }
        let info = FragmentInfo {
            seq: repr.seq,
            msg_id: repr.msg_id,
            frag_index: repr.frag_index,
            frag_count: repr.frag_count,
            msg_len: repr.msg_len,
            tx: repr.tx,
        };
        let in_place = self.config.in_place_delivery && self.messages_queued == 0;
        let outcome = self.recv.on_data(
            info,
            payload,
            now,
            self.config.ack_every,
            in_place,
            &mut self.delivered,
        );
        if !self.delivered.is_empty() {
            cold_path();
            let mut delivered = core::mem::take(&mut self.delivered);
            for m in delivered.drain(..) {
                self.deliver(now, m);
            }
            self.delivered = delivered;
        }
        match outcome {
            DataOutcome::Whole(m) => {
                self.deliver(now, m);
                Received::Accepted
            }
            DataOutcome::InPlace => {
                self.stats.messages_delivered += 1;
                self.stats.bytes_delivered += payload.len() as u64;
                self.trace.record(now, TraceKind::Deliver, repr.msg_id);
                Received::InPlace {
                    id: MessageId(repr.msg_id),
                    payload: h.header_len()..datagram.len(),
                }
            }
            DataOutcome::Accepted => Received::Accepted,
            DataOutcome::Duplicate => {
                cold_path();
                self.stats.dup_packets += 1;
                self.trace
                    .record(now, TraceKind::Duplicate, u64::from(repr.seq));
                Received::Duplicate
            }
            DataOutcome::BeyondWindow => self.dropped(now, DropReason::BeyondWindow),
            DataOutcome::Violation(why) => {
                cold_path();
                self.fail(now, ConnectionError::ProtocolViolation(why));
                Received::Dropped(DropReason::Malformed)
            }
        }
    }

    /// Queues a message RPP copied out for the application.
    pub(super) fn deliver(&mut self, now: Instant, m: Vec<u8>) {
        self.stats.messages_delivered += 1;
        self.stats.bytes_delivered += m.len() as u64;
        self.recv.undelivered_bytes += m.len();
        self.messages_queued += 1;
        self.trace.record(now, TraceKind::Deliver, m.len() as u64);
        self.events.push_back(Event::Message(m));
    }

    #[cold]
    #[inline(never)]
    pub(super) fn dropped(&mut self, now: Instant, reason: DropReason) -> Received {
        let s = &mut self.stats;
        match reason {
            DropReason::Malformed => s.malformed += 1,
            DropReason::BadCrc => s.bad_crc += 1,
            DropReason::Foreign => s.foreign += 1,
            DropReason::Stale => s.stale += 1,
            DropReason::BeyondWindow => s.beyond_window += 1,
            DropReason::BadMac => s.bad_mac += 1,
            DropReason::IntegrityMismatch => s.integrity_mismatch += 1,
            DropReason::Closed => {}
        }
        self.trace.record(now, TraceKind::Drop, reason as u64);
        Received::Dropped(reason)
    }

    pub(super) fn peer_restarted(&mut self, now: Instant, old: u64, new: u64) {
        self.trace.record(now, TraceKind::PeerRestarted, new);
        let unacked = self.send.take_all();
        self.recv.reset();
        self.peer_incarnation = Some(new);
        self.rto_deadline = None;
        self.timeouts = 0;
        self.recently_retransmitted.clear();
        self.send.peer_credit = INITIAL_CREDIT;
        self.events
            .push_back(Event::PeerRestarted { old, new, unacked });
    }

    /// Applies the acknowledgement held back from the last data packet, if any.
    #[inline]
    pub(super) fn apply_held_ack(&mut self) {
        if self.held_ack.is_some() {
            self.apply_held_ack_now();
        }
    }

    /// Out of line, so that the calls that find nothing held cost one test.
    #[inline(never)]
    pub(super) fn apply_held_ack_now(&mut self) {
        if let Some(a) = self.held_ack.take() {
            self.on_ack(&a, &[]);
        }
    }

    #[inline]
    pub(super) fn on_ack(&mut self, a: &HeldAck, sack: &[u64]) {
        let now = a.at;
        let threshold = self.rtt.time_threshold_nanos(self.reordering.eighths);
        let out = self.send.on_ack(
            a.ack,
            sack,
            a.echo,
            now,
            threshold,
            self.reordering.packets,
            &mut self.events,
        );
        if a.dsack != 0
            && let Some(&(_, by_timeout)) = self
                .recently_retransmitted
                .iter()
                .find(|&&(seq, _)| seq == a.dsack.wrapping_sub(1))
        {
            cold_path();
            self.stats.spurious_retransmits += 1;
            self.spurious_losses(1);
            if !by_timeout {
                self.reordering_seen(now);
            }
        }
        if out.late > 0 {
            cold_path();
            self.spurious_losses(out.late);
        }
        if out.reordered > 0 {
            cold_path();
            self.reordering_seen(now);
        }
        self.send.peer_credit = a.credit;
        if a.credit > 0 {
            self.persist_probes = 0;
        }
        if out.newly_acked > 0 && self.send.timeout_mark != 0 {
            cold_path();
            let mark = std::mem::take(&mut self.send.timeout_mark);
            self.check_spurious_timeout(mark, a.echo, out.before_mark, a.dsack != 0);
        }
        if out.newly_acked > 0 {
            self.stats.acks_received += 1;
            self.timeouts = 0;
            self.trace
                .record(now, TraceKind::Acked, u64::from(out.newly_acked));
        }
        if let Some(rtt) = out.rtt {
            self.rtt.sample_nanos(rtt, u64::from(a.ack_delay_us) * 1000);
            // A backed-off timeout stands until a new sample (Karn's algorithm). Going
            // back on any ack would let a timeout shorter than a queue's delay fire again
            // and again, each time resending the window.
            self.rtt.reset_backoff();
        }
        if out.acked_bytes > 0
            && let Some(cc) = self.cc.as_mut()
        {
            // The rate the path delivered at since the latest acknowledged packet went.
            let delivery = Delivery {
                delivered: self.send.delivered - out.prior_delivered,
                interval: out.send_elapsed.max(now.nanos_since(out.prior_time)),
                app_limited: out.sample_app_limited,
            };
            if self.rate_samples {
                let sample = RateSample {
                    delivered: delivery.delivered,
                    interval: delivery.interval,
                    prior_delivered: out.prior_delivered,
                    total_delivered: self.send.delivered,
                    app_limited: delivery.app_limited,
                    acked: out.acked_bytes,
                    lost: self.send.lost_bytes,
                    in_flight: self.send.bytes_in_flight,
                    rtt: out.rtt,
                    sent: out.acked_sent,
                };
                cc.on_rate_sample(now, &sample);
                self.cwnd = cc.window();
            }
            // Window-limited while this acknowledgement covers bytes of the last flight
            // that tested the window.
            let app_limited = self.send.delivered - out.acked_bytes >= self.window_tested_until;
            if !app_limited {
                if let Some(rtt) = out.rtt {
                    cc.on_rtt_sample(now, rtt);
                }
                cc.on_ack(now, out.acked_sent, out.acked_bytes, self.rtt.srtt_nanos());
                self.cwnd = cc.window();
            } else if !self.app_limited {
                // Once per spell of application-limited acknowledgements.
                self.stats.app_limited += 1;
                cc.on_app_limited(now);
                self.cwnd = cc.window();
            }
            self.app_limited = app_limited;
            self.measure_aggregation(now, out.acked_bytes, delivery);
        }
        if out.lost > 0 {
            cold_path();
            self.stats.lost += u64::from(out.lost);
            self.trace.record(now, TraceKind::Lost, u64::from(out.lost));
            self.congestion_event(now, false);
        }
        self.stats.messages_sent += u64::from(out.completed);
        if out.newly_acked > 0 || self.send.in_flight == 0 {
            self.rto_deadline =
                (self.send.in_flight > 0).then(|| now.add_nanos(self.rtt.rto_nanos()));
        }
    }

    /// A packet declared lost by the acknowledgements had arrived: reordering.
    #[inline(never)]
    fn reordering_seen(&mut self, now: Instant) {
        if self.reordering.evidence(now, self.rtt.srtt_nanos()) {
            self.stats.reordering_steps += 1;
        }
    }

    /// `n` packets declared lost turned out to have arrived (D-SACK, or acknowledged
    /// before their resend): once every loss of the last congestion event has, the
    /// event was reordering's doing and its reduction is undone.
    fn spurious_losses(&mut self, n: u32) {
        if self.undo_pending == 0 {
            return;
        }
        self.undo_pending = self.undo_pending.saturating_sub(n);
        if self.undo_pending == 0
            && let Some(cc) = self.cc.as_mut()
        {
            cc.on_spurious_congestion_event();
            self.cwnd = cc.window();
            self.stats.congestion_undos += 1;
        }
    }

    /// The first acknowledgement of new data after a timeout that declared persistent
    /// congestion decides whether the timeouts were spurious. If they were, the collapse
    /// of the window is undone and the packets the timeout declared lost and that have
    /// not gone again are in flight again, for the acknowledgements on their way to
    /// settle (any truly lost is found again by the usual rules).
    ///
    /// The echo names the transmission that brought the newest data the peer has (a
    /// duplicate is not echoed). One sent before the timeouts (`mark`) says that the
    /// packets were late, not lost: a peer host that did not run its driver for a while,
    /// a queue that grew faster than the round-trip estimate, a packet whose resends
    /// arrived right behind it. Unless the acknowledgement also reports a duplicate
    /// (`duplicate`, its D-SACK): then a resend reached a peer that had the packet
    /// already, as after an outage that lost the acknowledgements of the last packets
    /// before it, and the echo may be of one of those. The timeouts were spurious then
    /// only if nothing sent before the mark is left unacknowledged.
    ///
    /// Without an echo from before the mark the acknowledgement itself decides: the
    /// timeouts were spurious if it covers packets last sent before the mark
    /// (`before_mark`) and leaves none of them out. After a real outage the packets that
    /// were on the wire when it began are missing, so the reduction stands.
    #[inline(never)]
    fn check_spurious_timeout(
        &mut self,
        mark: u64,
        echo: Option<u64>,
        before_mark: u32,
        duplicate: bool,
    ) {
        let echoed = echo.is_some_and(|e| e <= mark);
        let spurious = (echoed && !duplicate)
            || ((echoed || before_mark > 0) && !self.send.unacked_sent_by(mark));
        if !spurious {
            return;
        }
        self.send.restore_lost();
        self.send.lost_count = 0;
        self.send.lost_bytes = 0;
        if let Some(cc) = self.cc.as_mut() {
            cc.on_spurious_congestion_event();
            self.cwnd = cc.window();
            self.stats.congestion_undos += 1;
        }
        self.stats.spurious_timeouts += 1;
    }

    /// The driver's network stack dropped a packet of this connection on its way out: its
    /// queue to the first hop was full (a UDP send failing with `ENOBUFS` under
    /// `IP_RECVERR`). That is congestion at this host, and Linux tells TCP of it at once
    /// (`tcp_enter_cwr`); a protocol that learned of it only from the loss a round trip
    /// later would keep filling the queue, and take more than its share from a TCP flow
    /// through it. The window is reduced as for a loss, at most once per round trip (a
    /// drop within a round trip of the last reduction belongs to the same event) and for
    /// good (no undo); the packet itself is found lost and sent again by the usual rules.
    pub fn on_local_congestion(&mut self, now: Instant) {
        self.stats.local_congestion += 1;
        let Some(cc) = self.cc.as_mut() else {
            return;
        };
        let before = self.cwnd;
        // As if the lost packet had been sent a round trip ago: the controller's recovery
        // period then covers the round trip after its last reduction.
        let sent = Instant::from_nanos(now.as_nanos().saturating_sub(self.rtt.srtt_nanos()));
        cc.on_congestion_event(now, sent, false, 0);
        self.cwnd = cc.window();
        self.refresh_allowance();
        if self.cwnd < before {
            self.stats.congestion_events += 1;
            self.undo_pending = 0;
            self.trace.record(now, TraceKind::Lost, 0);
        }
    }

    /// Takes `acked` newly acknowledged bytes into the measure of acknowledgements that
    /// come together, for a paced loss-based controller in congestion avoidance (a
    /// controller that steers by delivery rate, BBR, sizes its flight itself; slow start
    /// doubles the window anyway), and sets the allowance past the window from it.
    fn measure_aggregation(&mut self, now: Instant, acked: u64, delivery: Delivery) {
        if !self.aggregates() {
            self.allowance = 0;
            return;
        }
        // What comes together unheld: an acknowledgement's packets, or what the pacer
        // let go at once.
        let (pace, window) = self.pacing_inputs();
        let per_ack = u64::from(self.config.ack_every) * self.max_packet;
        let flight = Flight {
            window: self.cwnd,
            srtt: self.rtt.srtt_nanos(),
            quantum: per_ack.max(Pacer::capacity(pace, window, self.max_packet)),
            pace,
        };
        self.aggregation.on_ack(now, acked, flight, delivery);
        self.allowance = self.aggregation.allowance(self.cwnd);
    }

    /// Whether the flight may go past the window for acknowledgements that came together
    /// (see [`Connection::measure_aggregation`]).
    fn aggregates(&self) -> bool {
        self.pacer.is_some()
            && !self.rate_samples
            && self.cc.as_ref().is_some_and(|c| !c.in_slow_start())
    }

    /// Sets the allowance past the window for the window as it is now.
    fn refresh_allowance(&mut self) {
        self.allowance = if self.aggregates() {
            self.aggregation.allowance(self.cwnd)
        } else {
            0
        };
    }

    /// Tells the congestion controller of the packets the send half declared lost.
    #[inline(never)]
    fn congestion_event(&mut self, now: Instant, persistent: bool) {
        let (count, bytes, sent) = (
            self.send.lost_count,
            self.send.lost_bytes,
            self.send.lost_sent,
        );
        self.send.lost_count = 0;
        self.send.lost_bytes = 0;
        let Some(cc) = self.cc.as_mut() else {
            return;
        };
        let before = self.cwnd;
        cc.on_congestion_event(now, sent, persistent, bytes);
        self.cwnd = cc.window();
        self.refresh_allowance();
        if persistent {
            self.stats.congestion_events += 1;
            self.stats.persistent_congestion += 1;
            self.undo_pending = 0;
        } else if self.cwnd < before {
            self.stats.congestion_events += 1;
            self.undo_pending = count;
            self.reordering.reduced();
        } else if self.undo_pending > 0 {
            // More losses of the same event: all must prove spurious to undo it.
            self.undo_pending += count;
        }
    }

    /// Runs the timers due at `now`: retransmission, introduction, probes, pacing.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.apply_held_ack();
        if self.pacing_deadline.is_some_and(|t| t <= now) {
            // The held packet goes at the next poll_transmit.
            self.pacing_deadline = None;
        }
        if matches!(self.state, State::Closed | State::Failed) {
            return;
        }
        let retries = self.config.max_retries;
        // Gone: every retry unanswered, and silent for long enough.
        let silent = now.nanos_since(self.last_heard) >= self.timers.peer_timeout;
        let gone = |count: u32| count > retries && silent;
        if self.rto_deadline.is_some_and(|t| t <= now) {
            self.timeouts += 1;
            self.stats.rto_expirations += 1;
            self.trace
                .record(now, TraceKind::Rto, u64::from(self.timeouts));
            if gone(self.timeouts) {
                return self.fail(now, ConnectionError::PeerUnreachable { retries });
            }
            let lost = self
                .send
                .on_timeout(now, self.rtt.rto_nanos(), self.timeouts);
            self.stats.lost += u64::from(lost);
            // The first timeout only probes (as QUIC's probe timeout, no congestion
            // signal); a second in a row is persistent congestion. Further ones in the
            // same silence collapse nothing more (the window is at its floor; Linux
            // reduces ssthresh once per series too), and leave the controller's undo and
            // the Eifel mark as the second one set them.
            if self.timeouts == 2 {
                self.send.timeout_mark = self.send.tx_order();
                self.congestion_event(now, true);
            } else {
                self.send.lost_count = 0;
                self.send.lost_bytes = 0;
            }
            self.rtt.back_off();
            self.rto_deadline = Some(now.add_nanos(self.rtt.rto_nanos()));
        }
        // Introductions repeat on their own timer only while no data is in flight: data
        // sent while connecting carries the introduction, and its timer backs off.
        if self.state == State::Connecting
            && self.rto_deadline.is_none()
            && self.hello_deadline.is_some_and(|t| t <= now)
        {
            self.hellos += 1;
            if gone(self.hellos) {
                return self.fail(now, ConnectionError::PeerUnreachable { retries });
            }
            self.hello_due = true;
            // The first introduction waits one timeout for its answer, each repeat twice
            // as long as the one before.
            let wait = self
                .rtt
                .rto_nanos()
                .saturating_mul(1 << (self.hellos - 1).min(16))
                .min(self.timers.rto_max);
            self.hello_deadline = Some(now.add_nanos(wait));
        }
        if self.probe_deadline().is_some_and(|t| t <= now) {
            if self.probe_sent_at.is_some() {
                self.probes_unanswered += 1;
                if gone(self.probes_unanswered) {
                    return self.fail(now, ConnectionError::PeerUnreachable { retries });
                }
            }
            if self.stalled {
                self.persist_probes += 1;
            }
            self.probe_due = true;
            self.probe_sent_at = Some(now);
        }
    }

    /// When the next keepalive or persist probe is due: only while nothing is in flight
    /// (the retransmission timer covers the rest) and the peer is known.
    pub(super) fn probe_deadline(&self) -> Option<Instant> {
        if !matches!(self.state, State::Established | State::Closing)
            || self.rto_deadline.is_some()
            || self.probe_due
        {
            return None;
        }
        let backed_off = |n: u32| {
            self.rtt
                .rto_nanos()
                .saturating_mul(1 << n.min(16))
                .min(self.timers.rto_max)
        };
        if let Some(sent) = self.probe_sent_at {
            // Unanswered: try again, backing off.
            return Some(sent.add_nanos(backed_off(self.probes_unanswered)));
        }
        let wait = if self.stalled {
            backed_off(self.persist_probes)
        } else {
            self.timers.keepalive
        };
        Some(self.last_heard.add_nanos(wait))
    }
}
