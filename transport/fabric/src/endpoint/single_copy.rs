//! The endpoint's side of the single-copy path ([`crate::cma`]): hellos and probes,
//! descriptors out, reads in, dones back.

use super::*;

/// Progress passes an unexpected single-copy message waits unread for its receive
/// before it is read into a heap buffer, releasing its sender (see "A send" in
/// [`crate::cma`]).
pub(super) const HOLD_PASSES: u64 = 256;

/// A single-copy message that matched no receive, not read yet: where it is, and whom
/// to answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    from: RemoteRead,
    /// The message's length.
    pub(super) len: usize,
    link: usize,
    peer: Peer,
    nonce: u64,
    id: u64,
    /// The progress pass it arrived in.
    since: u64,
}

impl FabricEndpoint {
    /// Sends `bytes` to `peer` on the native `link` as a descriptor: the peer reads them
    /// from this process and answers done, which completes the send (see
    /// [`crate::cma`]). The caller keeps `bytes` until then.
    pub(super) fn send_single_copy(
        &mut self,
        link: usize,
        peer: Peer,
        header: Header,
        bytes: &[u8],
        context: usize,
        completion: bool,
    ) -> Result<(), i32> {
        let id = self.cma_next;
        let d = CmaDescriptor {
            nonce: self.cma_word.nonce(),
            id,
            addr: bytes.as_ptr() as usize as u64,
            len: bytes.len() as u64,
        };
        let t = &mut self.links[link].transport;
        let mut buf = t.alloc(CMA_DESC_LEN);
        d.emit(&header, &mut buf);
        if let Err(e) = t.send(peer, buf) {
            return Err(match e.error {
                SendErrorKind::WouldBlock => {
                    self.progress();
                    -FI_EAGAIN
                }
                _ => -FI_EIO,
            });
        }
        self.cma_next += 1;
        self.counts.shm_sent += 1;
        self.counts.cma_sent += 1;
        let pending = PendingTx {
            context,
            flags: FI_SEND | kind_flags(header.tagged),
            completion,
        };
        self.links[link].cma_pending.push((id, pending));
        Ok(())
    }

    /// Offers the peer of `link` single-copy reads: a hello with this process's pid and
    /// nonce word. Until its answer, sends to it copy.
    pub(super) fn send_hello(&mut self, link: usize, peer: Peer) {
        let hello = Control::Hello {
            pid: std::process::id(),
            word: self.cma_word.addr(),
            nonce: self.cma_word.nonce(),
        };
        if self.send_control(link, peer, hello) {
            self.links[link].cma_tx = CmaTx::Probing;
        }
    }

    /// Sends a control message to `peer` on `link`, or queues it behind others when the
    /// ring has no room; false when the peer is not reachable (failed, closed).
    pub(super) fn send_control(&mut self, link: usize, peer: Peer, c: Control) -> bool {
        let bytes = c.emit();
        let l = &mut self.links[link];
        if !l.ctrlq.is_empty() {
            l.ctrlq.push_back((peer, bytes));
            return true;
        }
        match try_control(&mut l.transport, peer, &bytes) {
            Some(true) => true,
            Some(false) => {
                l.ctrlq.push_back((peer, bytes));
                true
            }
            None => false,
        }
    }

    /// Sends the control messages `link` queued, in order, as far as the ring takes them.
    pub(super) fn flush_control(&mut self, link: usize) {
        let l = &mut self.links[link];
        while let Some(&(peer, bytes)) = l.ctrlq.front() {
            if try_control(&mut l.transport, peer, &bytes) == Some(false) {
                return;
            }
            l.ctrlq.pop_front();
        }
    }

    /// Takes a control message from `peer` on `link` (out of band: between pieces of a
    /// message too).
    pub(super) fn take_control(&mut self, link: usize, peer: Peer, msg: &[u8]) {
        let Ok(c) = Control::parse(msg) else {
            self.malformed += 1;
            return;
        };
        match c {
            Control::Hello { pid, word, nonce } => {
                // A restart of the peer since shows among the completions ready: taken
                // first, so that this hello's life is the one noted.
                self.take_ready_completions(link);
                let probed = match i32::try_from(pid) {
                    Ok(pid) if self.cma => {
                        crate::cma::probe(pid, word, nonce).map(|()| Verified { pid, word, nonce })
                    }
                    Ok(_) => Err(CmaError::Forbidden(0)),
                    Err(_) => Err(CmaError::Malformed),
                };
                if probed.is_err() && self.cma {
                    self.counts.cma_failed += 1;
                }
                if let Err(CmaError::Forbidden(e)) = probed
                    && e != 0
                {
                    self.counts.cma_forbidden += 1;
                }
                self.links[link].cma_peer = probed.ok();
                let ok = probed.is_ok();
                self.send_control(link, peer, Control::Probed { nonce, ok });
            }
            Control::Probed { nonce, ok } => {
                let l = &mut self.links[link];
                if nonce == self.cma_word.nonce() && l.cma_tx == CmaTx::Probing {
                    l.cma_tx = if ok { CmaTx::On } else { CmaTx::Off };
                }
            }
            Control::Done { nonce, id, status } => {
                let l = &mut self.links[link];
                let at = l.cma_pending.iter().position(|&(i, _)| i == id);
                let Some(at) = at.filter(|_| nonce == self.cma_word.nonce()) else {
                    // Not a send of this endpoint's waiting: a forged or stray done.
                    self.malformed += 1;
                    return;
                };
                let (_, p) = l.cma_pending.remove(at);
                if status != 0 {
                    // The peer could not read it: copies from now on.
                    l.cma_tx = CmaTx::Off;
                }
                let err = (status != 0).then_some(FI_EIO);
                self.complete_send(p.context, p.flags, p.completion, err);
            }
        }
    }

    /// Takes the completions `link`'s transport has ready, without a new pass.
    fn take_ready_completions(&mut self, link: usize) {
        let ready = self.links[link].transport.pending_completions();
        for _ in 0..ready {
            match self.links[link].transport.poll_completion() {
                Some(c) => self.take_completion(link, c),
                None => break,
            }
        }
    }

    /// Takes a single-copy descriptor from `peer` on `link`: matched against the posted
    /// receives as its message would be, read into the receive's buffers or, matching
    /// none, into a heap buffer queued as unexpected; then answered done (see
    /// [`crate::cma`]).
    pub(super) fn take_single_copy(&mut self, link: usize, peer: Peer, header: Header, msg: &[u8]) {
        let d = match CmaDescriptor::parse(msg) {
            Ok(d) => d,
            Err(_) => {
                // No nonce or id to answer to.
                self.malformed += 1;
                self.counts.cma_failed += 1;
                return;
            }
        };
        let status = match self.read_descriptor(link, peer, header, &d) {
            Ok(false) => return,
            Ok(true) => {
                self.counts.cma_received += 1;
                0
            }
            Err(_) => {
                self.counts.cma_failed += 1;
                FI_EIO as u32
            }
        };
        let done = Control::Done {
            nonce: d.nonce,
            id: d.id,
            status,
        };
        self.send_control(link, peer, done);
    }

    /// Reads the message `d` describes into the receive it matches, or holds it in the
    /// unexpected queue: whether it was answered now (else the read that takes it
    /// answers).
    fn read_descriptor(
        &mut self,
        link: usize,
        peer: Peer,
        header: Header,
        d: &CmaDescriptor,
    ) -> Result<bool, CmaError> {
        let v = match self.links[link].cma_peer {
            Some(v) if v.nonce == d.nonce && self.cma => v,
            _ => return Err(CmaError::Unverified),
        };
        let len = usize::try_from(d.len)
            .ok()
            .filter(|&l| l <= self.max_msg && d.addr.checked_add(d.len).is_some())
            .ok_or(CmaError::TooLong)?;
        let from = RemoteRead {
            pid: v.pid,
            addr: d.addr,
            word: v.word,
            nonce: v.nonce,
        };
        let src = self.source_of(link, peer);
        let k = usize::from(header.tagged);
        let found = (0..self.posted[k].len())
            .find(|&i| self.matches(&self.posted[k][i], header.tagged, src, header.tag));
        match found.and_then(|i| self.posted[k].remove(i)) {
            Some(mut p) => {
                let n = len.min(p.target.capacity());
                match p.target.read_remote(&from, n) {
                    Ok(()) => {
                        self.finish_recv(&p, src, header, n, len);
                        Ok(true)
                    }
                    Err(e) if e.sender_gone() => {
                        // As a dead sender's message in pieces: the receive completed
                        // nothing and takes the next message.
                        self.posted[k].push_front(p);
                        Err(e)
                    }
                    Err(e) => {
                        let entry = entry_for(p.context, header, src, 0, p.target.first());
                        self.recv_error(entry, len, FI_EIO);
                        Err(e)
                    }
                }
            }
            None => {
                // Held until a receive takes it, or read into a heap buffer after a
                // while (see "A send" in crate::cma).
                let held = Held {
                    from,
                    len,
                    link,
                    peer,
                    nonce: d.nonce,
                    id: d.id,
                    since: self.passes,
                };
                self.unexpected[k].push_back(Unexpected {
                    src,
                    header,
                    data: Payload::Held(held),
                });
                self.held += 1;
                self.counts.cma_held += 1;
                Ok(false)
            }
        }
    }

    /// The single-copy side of the end of the life of `link`'s peer: sends waiting for
    /// a done complete with `FI_EIO`, the probe is forgotten both ways (a new process is
    /// probed again), control messages for it are dropped.
    pub(super) fn single_copy_life_ended(&mut self, link: usize) {
        if self.held > 0 {
            // Its held messages can no longer be read: dropped, as a dead sender's
            // message in pieces is.
            let of_link = |m: &Unexpected| matches!(&m.data, Payload::Held(h) if h.link == link);
            let before = self.held;
            for q in &mut self.unexpected {
                q.retain(|m| !of_link(m));
            }
            self.claimed.retain(|_, m| !of_link(m));
            self.held = self.count_held();
            self.broken_pieces += (before - self.held) as u64;
        }
        let l = &mut self.links[link];
        l.cma_tx = CmaTx::Unknown;
        l.cma_peer = None;
        l.ctrlq.clear();
        for (_, p) in std::mem::take(&mut l.cma_pending) {
            self.complete_send(p.context, p.flags, p.completion, Some(FI_EIO));
        }
    }
}

impl FabricEndpoint {
    fn count_held(&self) -> usize {
        let held = |m: &&Unexpected| matches!(m.data, Payload::Held(_));
        self.unexpected.iter().flatten().filter(held).count()
            + self.claimed.values().filter(held).count()
    }

    /// Answers a held message's sender: done, or failed with `status`.
    fn answer(&mut self, h: &Held, status: u32) {
        if status == 0 {
            self.counts.cma_received += 1;
        } else {
            self.counts.cma_failed += 1;
        }
        let done = Control::Done {
            nonce: h.nonce,
            id: h.id,
            status,
        };
        self.send_control(h.link, h.peer, done);
    }

    /// A receive takes a held message: read straight into its buffers (or, failing,
    /// an `FI_EIO` completion), then the sender is answered.
    pub(super) fn complete_held(&mut self, mut p: Posted, src: FiAddr, header: Header, h: &Held) {
        self.held -= 1;
        let n = h.len.min(p.target.capacity());
        let status = match p.target.read_remote(&h.from, n) {
            Ok(()) => {
                self.finish_recv(&p, src, header, n, h.len);
                0
            }
            Err(_) => {
                let entry = entry_for(p.context, header, src, 0, p.target.first());
                self.recv_error(entry, h.len, FI_EIO);
                FI_EIO as u32
            }
        };
        self.answer(h, status);
    }

    /// A message dropped by `FI_DISCARD`: a held one's sender is answered (its send
    /// succeeded: the message was taken, to be dropped).
    pub(super) fn discard_held(&mut self, msg: &Unexpected) {
        if let Payload::Held(h) = &msg.data {
            self.held -= 1;
            let done = Control::Done {
                nonce: h.nonce,
                id: h.id,
                status: 0,
            };
            self.send_control(h.link, h.peer, done);
        }
    }

    /// Reads the held messages that waited [`HOLD_PASSES`] passes in the unexpected
    /// queues into heap buffers, where they wait for their receive as copied messages
    /// do, and answers their senders: a program whose ranks all send before they
    /// receive does not wait for ever. One that cannot be read is dropped (its sender's
    /// send fails). A claimed one (`FI_PEEK | FI_CLAIM`) waits for its claim.
    pub(super) fn release_held(&mut self) {
        let now = self.passes;
        let due = |m: &Unexpected| matches!(&m.data, Payload::Held(h) if now.wrapping_sub(h.since) >= HOLD_PASSES);
        let mut answers = Vec::new();
        for q in &mut self.unexpected {
            q.retain_mut(|m| !due(m) || read_out(m, &mut answers));
        }
        for (h, status) in answers {
            self.held -= 1;
            self.answer(&h, status);
        }
    }
}

/// Reads held message `m` into a heap buffer it keeps from now on; whether it stays
/// (false: unreadable, to be dropped). The answer its sender gets goes to `answers`.
fn read_out(m: &mut Unexpected, answers: &mut Vec<(Held, u32)>) -> bool {
    let Payload::Held(h) = m.data else {
        return true;
    };
    let mut whole = vec![0u8; h.len];
    match crate::cma::read(&h.from, &mut whole) {
        Ok(()) => {
            m.data = Payload::Owned(whole);
            answers.push((h, 0));
            true
        }
        Err(_) => {
            answers.push((h, FI_EIO as u32));
            false
        }
    }
}

/// Sends one control message: `Some(true)` taken, `Some(false)` no room now, `None`
/// refused for good (the peer failed or closed).
fn try_control(t: &mut Endpoint, peer: Peer, bytes: &[u8; CONTROL_LEN]) -> Option<bool> {
    let mut buf = t.alloc(CONTROL_LEN);
    buf.copy_from_slice(bytes);
    match t.send(peer, buf) {
        Ok(_) => Some(true),
        Err(e) if e.error.is_would_block() => Some(false),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cma::CMA_MIN;
    use crate::objects::AddressVector;
    use std::sync::{Arc, Mutex};

    /// Bytes, single-copy reads and writes that landed in a [`Buffer`].
    #[derive(Default)]
    struct Landed {
        mem: Vec<u8>,
        reads: usize,
        writes: usize,
    }

    /// Fill of the bytes around a [`Buffer`]: nothing may land there.
    const FENCE: u8 = 0xEE;

    /// A receive buffer at byte `skew` of a vector (unaligned), with a fence of 64 bytes
    /// before and after; single-copy reads land straight in it.
    struct Buffer {
        landed: Arc<Mutex<Landed>>,
        skew: usize,
        cap: usize,
    }

    impl Buffer {
        fn new(cap: usize, skew: usize) -> (Buffer, Arc<Mutex<Landed>>) {
            let landed = Arc::new(Mutex::new(Landed {
                mem: vec![FENCE; 64 + skew + cap + 64],
                ..Landed::default()
            }));
            let b = Buffer {
                landed: landed.clone(),
                skew: 64 + skew,
                cap,
            };
            (b, landed)
        }
    }

    impl RecvTarget for Buffer {
        fn capacity(&self) -> usize {
            self.cap
        }
        fn write_at(&mut self, offset: usize, data: &[u8]) {
            assert!(offset + data.len() <= self.cap, "written past the buffer");
            let mut g = lock(&self.landed);
            let at = self.skew + offset;
            g.mem[at..at + data.len()].copy_from_slice(data);
            g.writes += 1;
        }
        fn first(&self) -> usize {
            0
        }
        fn read_remote(&mut self, from: &RemoteRead, n: usize) -> Result<(), CmaError> {
            assert!(n <= self.cap, "read past the buffer");
            let mut g = lock(&self.landed);
            g.reads += 1;
            let at = self.skew;
            crate::cma::read(from, &mut g.mem[at..at + n])
        }
    }

    /// What landed: the buffer's bytes, after checking the fences.
    #[track_caller]
    fn landed(l: &Arc<Mutex<Landed>>, skew: usize, cap: usize) -> (Vec<u8>, usize, usize) {
        let g = lock(l);
        let (at, end) = (64 + skew, 64 + skew + cap);
        assert!(g.mem[..at].iter().all(|&b| b == FENCE), "before the buffer");
        assert!(g.mem[end..].iter().all(|&b| b == FENCE), "after the buffer");
        (g.mem[at..end].to_vec(), g.reads, g.writes)
    }

    /// Two `shm://` RDM endpoints, each with its own transmit and receive queues.
    fn pair(name: &str) -> ([FabricEndpoint; 2], [FiAddr; 2], [[Cq; 2]; 2]) {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let cqs: [[Cq; 2]; 2] = Default::default();
        let token = |s: &str| format!("{name}{}{s}", std::process::id());
        let mut eps = [token("a"), token("b")]
            .map(|t| FabricEndpoint::new_shm(EpType::Rdm, &t, crate::info::SHM_RDM_MAX_MSG));
        for (ep, [tx, rx]) in eps.iter_mut().zip(&cqs) {
            ep.bind.av = Some(av.clone());
            ep.bind.tx_cq = Some((tx.clone(), false));
            ep.bind.rx_cq = Some((rx.clone(), false));
        }
        let addrs = eps
            .each_ref()
            .map(|e| lock(&av).insert(e.local_url().to_owned()));
        (eps, addrs, cqs)
    }

    fn posted(context: usize, target: Buffer) -> Posted {
        Posted {
            context,
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: u64::MAX,
            target: Target::new(target),
            completion: true,
        }
    }

    fn header(seq: u64) -> Header {
        Header {
            tagged: true,
            tag: seq,
            data: Some(seq),
        }
    }

    fn message(n: usize, seq: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 7 + seq * 13) % 253) as u8).collect()
    }

    /// Sends `msg` from the first endpoint to the second, held (as every send but an
    /// inject is).
    fn send(eps: &mut [FabricEndpoint; 2], to: FiAddr, msg: &[u8], seq: usize) {
        let mut turns = 0;
        while let Err(e) = eps[0].send_held(to, header(seq as u64), &[msg], seq, true) {
            assert_eq!(e, -FI_EAGAIN);
            eps[1].progress();
            turns += 1;
            assert!(turns < 1_000_000, "send {seq} never taken");
        }
    }

    #[track_caller]
    fn drive(eps: &mut [FabricEndpoint; 2], mut done: impl FnMut(&[FabricEndpoint; 2]) -> bool) {
        let mut turns = 0;
        while !done(eps) {
            eps[0].progress();
            eps[1].progress();
            turns += 1;
            assert!(turns < 2_000_000, "stuck");
        }
    }

    fn entries(cq: &Cq) -> Vec<Entry> {
        let mut out = Vec::new();
        let _ = lock(&cq.queue).take(64, &mut out);
        out
    }

    /// The sender's link to the second endpoint.
    fn link(eps: &[FabricEndpoint; 2], to: FiAddr) -> usize {
        eps[0].peers[&to].0
    }

    /// One large message, copied, whose hello gets the probe's answer back.
    fn warm_up(eps: &mut [FabricEndpoint; 2], addrs: [FiAddr; 2], cqs: &[[Cq; 2]; 2]) {
        let msg = message(CMA_MIN, 99);
        let (b, l) = Buffer::new(CMA_MIN, 0);
        eps[1].post_recv(true, posted(99, b), Probe::None).unwrap();
        let before = eps[0].counts.cma_sent;
        send(eps, addrs[1], &msg, 99);
        drive(eps, |e| {
            let link = &e[0].links[e[0].peers[&addrs[1]].0];
            link.cma_tx != CmaTx::Probing && lock(&l).writes > 0
        });
        assert_eq!(landed(&l, 0, CMA_MIN).0, msg);
        assert_eq!(eps[0].counts.cma_sent, before, "the first is copied");
        entries(&cqs[0][0]);
        entries(&cqs[1][1]);
    }

    const SIZES: [usize; 9] = [
        CMA_MIN,
        CMA_MIN + 1,
        100,
        65_536 + 7,
        100_003,
        5_000,
        (1 << 20) + 3,
        3 << 20,
        CMA_MIN - 1,
    ];

    /// Large messages go single-copy, read straight into the posted (unaligned) buffers,
    /// at sizes that are not multiples of a page and from unaligned sender buffers,
    /// short ones copied, all in order; messages that came before their receive, with
    /// their receiver progressing and no receive posted for a while, were read into heap
    /// buffers (their sends completed before any receive was posted) and wait whole; a
    /// receive too short takes what fits and gets FI_ETRUNC.
    #[test]
    fn single_copy_reads_land_in_the_posted_buffers_in_order() {
        let (mut eps, addrs, cqs) = pair("c1");
        warm_up(&mut eps, addrs, &cqs);
        assert_eq!(eps[0].links[link(&eps, addrs[1])].cma_tx, CmaTx::On);
        let large = SIZES.iter().filter(|&&n| n >= CMA_MIN).count() as u64;
        let msgs: Vec<Vec<u8>> = SIZES
            .iter()
            .enumerate()
            .map(|(k, &n)| message(n + 5, k))
            .collect();
        // Posted first, then unexpected.
        for unexpected in [false, true] {
            let before = eps[0].counts;
            let mut bufs = Vec::new();
            for (k, &n) in SIZES.iter().enumerate() {
                let (b, l) = Buffer::new(n, k % 8);
                bufs.push((b, l));
            }
            let mut targets = Vec::new();
            for (k, (b, l)) in bufs.into_iter().enumerate() {
                if unexpected {
                    targets.push((Some(b), l));
                } else {
                    eps[1].post_recv(true, posted(k, b), Probe::None).unwrap();
                    targets.push((None, l));
                }
            }
            // From byte k % 5 of each message's vector: unaligned.
            for (k, &n) in SIZES.iter().enumerate() {
                let at = k % 5;
                let m = &msgs[k][at..at + n];
                send(&mut eps, addrs[1], m, k);
            }
            let all = SIZES.len();
            let mut sent = Vec::new();
            drive(&mut eps, |_| {
                sent.extend(entries(&cqs[0][0]));
                sent.len() == all
            });
            let contexts: Vec<usize> = sent.iter().map(|e| e.context).collect();
            let mut sorted = contexts.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..all).collect::<Vec<_>>());
            if unexpected {
                assert_eq!(eps[1].unexpected[TAGGED].len(), all, "all waiting whole");
                for (k, (b, _)) in targets.iter_mut().enumerate() {
                    let b = b.take().unwrap();
                    eps[1].post_recv(true, posted(k, b), Probe::None).unwrap();
                }
            }
            let mut got = Vec::new();
            drive(&mut eps, |_| {
                got.extend(entries(&cqs[1][1]));
                got.len() == all
            });
            let order: Vec<(usize, u64, usize)> =
                got.iter().map(|e| (e.context, e.tag, e.len)).collect();
            let want: Vec<_> = SIZES
                .iter()
                .enumerate()
                .map(|(k, &n)| (k, k as u64, n))
                .collect();
            assert_eq!(order, want, "unexpected: {unexpected}");
            for (k, &n) in SIZES.iter().enumerate() {
                let (bytes, reads, writes) = landed(&targets[k].1, k % 8, n);
                let at = k % 5;
                assert!(bytes[..] == msgs[k][at..at + n], "size {n}: bytes differ");
                let single = n >= CMA_MIN && !unexpected;
                assert_eq!(
                    reads,
                    usize::from(single),
                    "size {n}, unexpected: {unexpected}"
                );
                assert_eq!(writes == 0, single, "size {n}, unexpected: {unexpected}");
            }
            let c = eps[0].counts;
            assert_eq!(c.cma_sent - before.cma_sent, large);
            assert_eq!(c.shm_sent - before.shm_sent, all as u64);
        }
        assert_eq!(eps[1].counts.cma_received, 2 * large);
        assert_eq!(eps[1].counts.cma_failed, 0);
        // Truncated.
        let n = 200_001;
        let m = message(n, 7);
        let (b, l) = Buffer::new(n - 5, 3);
        eps[1].post_recv(true, posted(50, b), Probe::None).unwrap();
        send(&mut eps, addrs[1], &m, 50);
        drive(&mut eps, |_| {
            lock(&cqs[1][1].queue).take_err().is_some_and(|e| {
                assert_eq!(
                    (e.err, e.olen, e.entry.len, e.entry.context),
                    (FI_ETRUNC, 5, n - 5, 50)
                );
                true
            })
        });
        drive(&mut eps, |_| !entries(&cqs[0][0]).is_empty());
        let (bytes, reads, _) = landed(&l, 3, n - 5);
        assert!(bytes[..] == m[..n - 5]);
        assert_eq!(reads, 1);
        assert!(
            lock(&cqs[0][0].queue).take_err().is_none(),
            "the send succeeded"
        );
    }

    /// FI_PEEK and FI_CLAIM see an unexpected single-copy message as any other.
    #[test]
    fn peek_and_claim_of_a_single_copy_message() {
        let (mut eps, addrs, cqs) = pair("c2");
        warm_up(&mut eps, addrs, &cqs);
        let n = 70_000;
        let m = message(n, 1);
        send(&mut eps, addrs[1], &m, 1);
        drive(&mut eps, |e| !e[1].unexpected[TAGGED].is_empty());
        let (b, _) = Buffer::new(n, 0);
        eps[1]
            .post_recv(true, posted(5, b), Probe::PeekClaim)
            .unwrap();
        let peeked = entries(&cqs[1][1]);
        assert_eq!((peeked[0].len, peeked[0].tag), (n, 1));
        let (b, l) = Buffer::new(n, 1);
        eps[1].post_recv(true, posted(5, b), Probe::Claim).unwrap();
        assert_eq!(entries(&cqs[1][1])[0].len, n);
        let (bytes, reads, writes) = landed(&l, 1, n);
        assert!(bytes == m);
        assert_eq!(
            (reads, writes),
            (1, 0),
            "read straight into the claiming receive"
        );
        assert_eq!(eps[0].counts.cma_sent, 1);
        drive(&mut eps, |_| !entries(&cqs[0][0]).is_empty());
        // FI_PEEK | FI_DISCARD of a held one: dropped unread, its send succeeds.
        send(&mut eps, addrs[1], &m, 2);
        drive(&mut eps, |e| !e[1].unexpected[TAGGED].is_empty());
        let (b, _) = Buffer::new(n, 0);
        eps[1]
            .post_recv(true, posted(6, b), Probe::PeekDiscard)
            .unwrap();
        assert!(eps[1].unexpected[TAGGED].is_empty());
        assert_eq!(eps[1].held, 0);
        let mut sent = Vec::new();
        drive(&mut eps, |_| {
            sent.extend(entries(&cqs[0][0]));
            !sent.is_empty()
        });
        assert_eq!(sent[0].context, 2);
        assert!(lock(&cqs[0][0].queue).take_err().is_none());
    }

    /// A message that came before its receive waits unread, its send not complete,
    /// until the receive is posted a few passes later: then it is read straight into
    /// it, and the send completes.
    #[test]
    fn an_unexpected_message_is_held_until_its_receive() {
        let (mut eps, addrs, cqs) = pair("c6");
        warm_up(&mut eps, addrs, &cqs);
        let n = 1_000_001;
        let m = message(n, 6);
        send(&mut eps, addrs[1], &m[..], 6);
        drive(&mut eps, |e| !e[1].unexpected[TAGGED].is_empty());
        assert_eq!(eps[1].held, 1);
        for _ in 0..3 {
            eps[0].progress();
            eps[1].progress();
        }
        assert!(
            entries(&cqs[0][0]).is_empty(),
            "not complete before it is read"
        );
        let (b, l) = Buffer::new(n, 5);
        eps[1].post_recv(true, posted(6, b), Probe::None).unwrap();
        let (bytes, reads, writes) = landed(&l, 5, n);
        assert!(bytes == m);
        assert_eq!(
            (reads, writes),
            (1, 0),
            "one read, straight into the receive"
        );
        drive(&mut eps, |_| !entries(&cqs[0][0]).is_empty());
        assert_eq!(eps[1].held, 0);
        assert_eq!((eps[1].counts.cma_held, eps[1].counts.cma_received), (1, 1));
    }

    /// Both endpoints send a large message to the other before either posts a receive
    /// (a program that counts on the provider buffering): held, then read into heap
    /// buffers after a bounded number of passes, so both sends complete; the receives
    /// posted afterwards get the bytes.
    #[test]
    fn two_sides_that_send_before_they_receive_do_not_wait_for_ever() {
        let (mut eps, addrs, cqs) = pair("c7");
        warm_up(&mut eps, addrs, &cqs);
        eps.swap(0, 1);
        let back = [addrs[1], addrs[0]];
        let cqs_back = [cqs[1].clone(), cqs[0].clone()];
        warm_up(&mut eps, back, &cqs_back);
        eps.swap(0, 1);
        let n = 200_003;
        let m = [message(n, 1), message(n, 2)];
        let mut turns = 0;
        while let Err(e) = eps[0].send_held(addrs[1], header(1), &[&m[0]], 1, true) {
            assert_eq!(e, -FI_EAGAIN);
            eps[1].progress();
            turns += 1;
            assert!(turns < 1_000_000);
        }
        while let Err(e) = eps[1].send_held(addrs[0], header(2), &[&m[1]], 2, true) {
            assert_eq!(e, -FI_EAGAIN);
            eps[0].progress();
            turns += 1;
            assert!(turns < 1_000_000);
        }
        assert_eq!((eps[0].counts.cma_sent, eps[1].counts.cma_sent), (1, 1));
        // Both wait for their send's completion, progressing, receiving nothing.
        let mut done = [false; 2];
        drive(&mut eps, |_| {
            done[0] |= !entries(&cqs[0][0]).is_empty();
            done[1] |= !entries(&cqs[1][0]).is_empty();
            done == [true, true]
        });
        for (r, s) in [(1, 0), (0, 1)] {
            assert_eq!(eps[r].held, 0);
            let (b, l) = Buffer::new(n, 0);
            eps[r].post_recv(true, posted(9, b), Probe::None).unwrap();
            let (bytes, reads, _) = landed(&l, 0, n);
            assert!(bytes == m[s], "from {s}");
            assert_eq!(reads, 0, "read into a heap buffer before");
            assert_eq!(eps[r].counts.cma_received, 1);
        }
    }

    /// Sends and checks one large message after the warm-up; whether it went single-copy.
    fn one_large(eps: &mut [FabricEndpoint; 2], addrs: [FiAddr; 2], cqs: &[[Cq; 2]; 2]) -> bool {
        let before = eps[0].counts.cma_sent;
        let n = 300_007;
        let m = message(n, 3);
        let (b, l) = Buffer::new(n, 2);
        eps[1].post_recv(true, posted(3, b), Probe::None).unwrap();
        send(eps, addrs[1], &m, 3);
        drive(eps, |_| {
            !lock(&cqs[1][1].queue).is_empty() && !lock(&cqs[0][0].queue).is_empty()
        });
        assert!(landed(&l, 2, n).0 == m);
        entries(&cqs[0][0]);
        entries(&cqs[1][1]);
        eps[0].counts.cma_sent > before
    }

    /// FI_MYRI_CMA=0 on the receiver (it refuses the probe) or the sender (it never
    /// offers), or a probe that reads another value than the hello's nonce: every
    /// message copied, intact.
    #[test]
    fn refused_or_failed_probes_leave_the_copying_path() {
        for case in ["receiver off", "sender off", "probe fails", "on"] {
            let (mut eps, addrs, cqs) = pair(&format!("c3{}", case.len()));
            match case {
                "receiver off" => eps[1].cma = false,
                "sender off" => eps[0].cma = false,
                _ => {}
            }
            if case == "probe fails" {
                // The hello goes with the first large send; the word changes before the
                // receiver reads it.
                let msg = message(CMA_MIN, 0);
                let (b, _) = Buffer::new(CMA_MIN, 0);
                eps[1].post_recv(true, posted(0, b), Probe::None).unwrap();
                send(&mut eps, addrs[1], &msg, 0);
                eps[0].cma_word.spoil();
            }
            warm_up(&mut eps, addrs, &cqs);
            let single = one_large(&mut eps, addrs, &cqs);
            assert_eq!(single, case == "on", "{case}");
            let state = eps[0].links[link(&eps, addrs[1])].cma_tx;
            let want = match case {
                "sender off" => CmaTx::Unknown,
                "on" => CmaTx::On,
                _ => CmaTx::Off,
            };
            assert_eq!(state, want, "{case}");
            assert_eq!(
                eps[1].counts.cma_failed,
                u64::from(case == "probe fails"),
                "{case}"
            );
        }
    }

    /// The receiver goes (its endpoint closed) with a single-copy send not read yet: the
    /// send completes with FI_EIO. A new process on the same region is probed again, and
    /// large sends to it go single-copy once it said yes.
    #[test]
    fn a_peer_gone_with_a_single_copy_send_pending_fails_it() {
        let (mut eps, addrs, cqs) = pair("c4");
        warm_up(&mut eps, addrs, &cqs);
        let n = 1 << 20;
        let m = message(n, 4);
        send(&mut eps, addrs[1], &m, 4);
        assert_eq!(eps[0].counts.cma_sent, 1);
        let token = eps[1]
            .local_url()
            .strip_prefix("shm://")
            .unwrap()
            .to_owned();
        let av = eps[1].bind.av.clone().unwrap();
        let l = link(&eps, addrs[1]);
        let [mut a, b] = eps;
        drop(b);
        let mut turns = 0;
        let err = loop {
            a.progress();
            if let Some(e) = lock(&cqs[0][0].queue).take_err() {
                break e;
            }
            turns += 1;
            assert!(turns < 5_000_000, "the pending send never completed");
        };
        assert_eq!((err.err, err.entry.context), (FI_EIO, 4));
        assert!(entries(&cqs[0][0]).is_empty(), "one completion for it");
        assert!(a.links[l].cma_pending.is_empty());
        // The new process: same token, same region.
        let mut b = FabricEndpoint::new_shm(EpType::Rdm, &token, crate::info::SHM_RDM_MAX_MSG);
        b.bind.av = Some(av);
        b.bind.tx_cq = Some((cqs[1][0].clone(), false));
        b.bind.rx_cq = Some((cqs[1][1].clone(), false));
        let mut eps = [a, b];
        drive(&mut eps, |e| e[0].links[l].attached);
        assert_eq!(eps[0].links[l].cma_tx, CmaTx::Unknown, "probed again");
        warm_up(&mut eps, addrs, &cqs);
        assert!(one_large(&mut eps, addrs, &cqs));
        assert_eq!(eps[1].counts.cma_received, 1);
    }

    /// Descriptors the sender never sent (another nonce, an unmapped address, a length
    /// beyond the largest message, a body of the wrong length) are refused with a typed
    /// error, counted, and read nothing into the posted buffer (an unmapped address
    /// completes the receive it matched with FI_EIO); the stray dones they draw are
    /// dropped by the sender, which goes on single-copy.
    #[test]
    fn forged_descriptors_are_refused_and_counted() {
        let (mut eps, addrs, cqs) = pair("c5");
        warm_up(&mut eps, addrs, &cqs);
        let l = link(&eps, addrs[1]);
        let nonce = eps[0].cma_word.nonce();
        let forge = |eps: &mut [FabricEndpoint; 2], d: CmaDescriptor, len: usize| {
            let peer = eps[0].peers[&addrs[1]].1;
            let t = &mut eps[0].links[l].transport;
            let mut buf = t.alloc(len);
            let mut m = [0u8; CMA_DESC_LEN];
            d.emit(&header(8), &mut m);
            buf.copy_from_slice(&m[..len]);
            t.send(peer, buf).unwrap();
        };
        let (b, target) = Buffer::new(1000, 1);
        eps[1].post_recv(true, posted(8, b), Probe::None).unwrap();
        let real = CmaDescriptor {
            nonce,
            id: 1 << 40,
            addr: 4096,
            len: 1000,
        };
        let cases = [
            (
                "another nonce",
                CmaDescriptor {
                    nonce: nonce ^ 1,
                    ..real
                },
                CMA_DESC_LEN,
            ),
            (
                "too long",
                CmaDescriptor {
                    len: u64::MAX,
                    ..real
                },
                CMA_DESC_LEN,
            ),
            (
                "wraps",
                CmaDescriptor {
                    addr: u64::MAX - 10,
                    ..real
                },
                CMA_DESC_LEN,
            ),
            ("short body", real, CMA_DESC_LEN - 1),
        ];
        for (k, (case, d, len)) in cases.into_iter().enumerate() {
            forge(&mut eps, d, len);
            drive(&mut eps, |e| e[1].counts.cma_failed == k as u64 + 1);
            assert_eq!(
                eps[1].posted[TAGGED].len(),
                1,
                "{case}: the receive is still posted"
            );
        }
        assert_eq!(eps[1].malformed, 1, "the short body");
        let (_, reads, writes) = landed(&target, 1, 1000);
        assert_eq!((reads, writes), (0, 0));
        // The right nonce and an unmapped address: the receive it matched fails.
        forge(&mut eps, real, CMA_DESC_LEN);
        drive(&mut eps, |e| e[1].counts.cma_failed == 5);
        let err = lock(&cqs[1][1].queue).take_err().unwrap();
        assert_eq!((err.err, err.entry.context, err.olen), (FI_EIO, 8, 1000));
        let (_, reads, writes) = landed(&target, 1, 1000);
        assert_eq!((reads, writes), (1, 0));
        // The stray dones: dropped by the sender, which is still single-copy.
        drive(&mut eps, |e| e[0].malformed == 4);
        assert_eq!(eps[0].links[l].cma_tx, CmaTx::On);
        assert!(one_large(&mut eps, addrs, &cqs));
    }

    /// The sender goes (its endpoint closed, its word cleared) while a message of its
    /// waits unread at the receiver: the receiver drops it (the death seen first) or
    /// fails its read (the hold's bound first), and never delivers it.
    #[test]
    fn a_held_message_of_a_sender_gone_is_never_delivered() {
        let (mut eps, addrs, cqs) = pair("c8");
        warm_up(&mut eps, addrs, &cqs);
        let n = 100_000;
        let m = message(n, 8);
        send(&mut eps, addrs[1], &m, 8);
        drive(&mut eps, |e| e[1].held == 1);
        let [a, mut b] = eps;
        let before = b.broken_pieces + b.counts.cma_failed;
        drop(a);
        let mut turns = 0;
        while b.held > 0 {
            b.progress();
            turns += 1;
            assert!(turns < 50_000_000, "never dropped");
        }
        assert!(b.unexpected[TAGGED].is_empty());
        assert_eq!(b.broken_pieces + b.counts.cma_failed, before + 1);
        let (buf, l) = Buffer::new(n, 0);
        b.post_recv(true, posted(8, buf), Probe::None).unwrap();
        for _ in 0..1000 {
            b.progress();
        }
        assert!(entries(&cqs[1][1]).is_empty(), "nothing delivered");
        assert_eq!(landed(&l, 0, n).1, 0, "nothing read");
    }
}
