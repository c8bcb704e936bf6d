//! Split sends over RPP (an RDM endpoint's `udp://` link): a split header, then the
//! payload bare, whole or in pieces of one packet each (see "Large messages over
//! `udp://`" in the module docs of [`crate::endpoint`]).

use super::*;

/// Why [`send_split`] took nothing.
pub(super) enum SplitRefused {
    /// RPP has no room for all of it now: progress, then retry.
    Busy,
    /// The peer failed or closed.
    Failed,
}

/// The sent pieces of a split send's payload: the first and last message ids and how
/// many there are (RPP numbers a peer's messages in sending order).
#[derive(Debug, Clone, Copy)]
pub(super) struct PieceIds {
    first: MsgId,
    last: MsgId,
    left: usize,
}

impl PieceIds {
    /// Counts the acknowledgement of message `id`: whether it was one of these pieces.
    pub(super) fn acked(&mut self, id: MsgId) -> bool {
        if id < self.first || id > self.last || self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// Whether every piece was acknowledged.
    pub(super) fn done(&self) -> bool {
        self.left == 0
    }
}

/// The payload of each bare piece of a split send of `len` bytes to `peer` over RPP, or
/// `None` where the message goes as one transport message with its header in front (a
/// copied message that fits one packet, or any copied one on a path whose packets carry
/// less than [`UDP_PIECE_MIN`]). `registered`: a copy-free send (always split; in one
/// piece on such a path, which RPP then cuts into packets and reassembles).
pub(super) fn split_piece(t: &Endpoint, peer: Peer, len: usize, registered: bool) -> Option<usize> {
    let packet = t.peer_packet_payload(peer)?;
    let pieces = packet >= UDP_PIECE_MIN;
    if registered {
        return Some(if pieces { packet } else { len.max(1) });
    }
    (pieces && len + HEADER_LEN > packet).then_some(packet)
}

/// Sends `header` as a split header, then the payload in pieces of at most `piece` bytes
/// (of equal length, so that no piece is a short tail), each a view of `mem`'s bytes
/// `range` (registered memory: no copy) or, without `mem`, of one copy of `parts`; all
/// of it or nothing.
pub(super) fn send_split(
    t: &mut Endpoint,
    peer: Peer,
    header: Header,
    parts: &[&[u8]],
    external: Option<(&Arc<dyn ExternalBytes>, Range<usize>)>,
    piece: usize,
) -> Result<PieceIds, SplitRefused> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let count = len.div_ceil(piece.max(1)).max(1);
    let each = len.div_ceil(count).max(1);
    if !t.can_send_messages(peer, 1 + count, crate::wire::SPLIT_LEN + len) {
        if !t.can_send_messages(peer, 0, 0) {
            return Err(SplitRefused::Failed);
        }
        return Err(SplitRefused::Busy);
    }
    let (mem, base): (Arc<dyn ExternalBytes>, usize) = match external {
        Some((mem, range)) => (mem.clone(), range.start),
        None => {
            // The one copy on this side, into memory RPP keeps until acknowledged.
            let mut v = Vec::with_capacity(len);
            parts.iter().for_each(|p| v.extend_from_slice(p));
            (Arc::new(v), 0)
        }
    };
    let head = header.emit_split(len as u64);
    // Taken, all of them: `can_send_messages` said so, and nothing else sends between.
    t.send(peer, myri_transport::Buf::copy_of(&head))
        .map_err(|_| SplitRefused::Failed)?;
    let mut ids = PieceIds {
        first: MsgId(0),
        last: MsgId(0),
        left: count,
    };
    for i in 0..count {
        let start = base + i * each;
        let end = base + ((i + 1) * each).min(len);
        let body =
            myri_transport::Buf::external(mem.clone(), start..end).ok_or(SplitRefused::Failed)?;
        let id = t.send(peer, body).map_err(|_| SplitRefused::Failed)?;
        if i == 0 {
            ids.first = id;
        }
        ids.last = id;
    }
    Ok(ids)
}

/// A split header taken whose payload (or the rest of it) is still to come.
pub(super) struct SplitIn {
    header: Header,
    /// Payload bytes still to come.
    left: u64,
    /// The payload's length.
    total: u64,
    /// The life of the sender the header came from ([`myri_transport::Delivery::life`]).
    life: u32,
}

impl SplitIn {
    /// The header `header` announcing `len` bytes, from the sender's life `life`.
    pub(super) fn new(header: Header, len: u64, life: u32) -> SplitIn {
        SplitIn {
            header,
            left: len,
            total: len,
            life,
        }
    }
}

impl FabricEndpoint {
    /// Takes `data`, the next message of `link`'s `peer` after a split header, as its
    /// payload or a piece of it (see the module docs); hands it back when it is not (the
    /// header, and what came of its payload, is then dropped, counted in
    /// [`FabricEndpoint::broken_pieces`]): a message of the sender's next life (RPP may
    /// hand it over before this side took the restart's completion) or longer than what
    /// is left of the payload.
    pub(super) fn take_bare(
        &mut self,
        link: usize,
        peer: Peer,
        data: RecvBuf,
        life: u32,
    ) -> Option<RecvBuf> {
        let key = (link, peer);
        let mut s = self.split.remove(&key)?;
        let n = data.len() as u64;
        let same_life = life == s.life;
        let open = self.reassembly.contains_key(&key);
        if same_life && n == s.left && !open {
            // The payload whole.
            self.counts.udp_received += 1;
            let src = self.source_of(link, peer);
            if let Some(Payload::Bare(data)) = self.incoming(src, s.header, Payload::Bare(data))
                && !data.is_registered()
            {
                let delivery = myri_transport::Delivery { peer, data, life };
                self.links[link].transport.recycle(delivery);
            }
            return None;
        }
        if !same_life || n == 0 || n > s.left {
            self.broken_pieces += 1;
            self.abandon_pieces(link, peer);
            return Some(data);
        }
        s.left -= n;
        let more = s.left > 0;
        let (header, expect) = (s.header, usize::try_from(s.total).unwrap_or(0));
        if more {
            self.split.insert(key, s);
        } else {
            self.counts.udp_received += 1;
        }
        let in_place = data.is_registered();
        self.take_piece(link, peer, header, more, &data, in_place, expect);
        None
    }

    /// Drops the split payloads still coming on `link` (the transport's deliveries all
    /// taken) from a peer that failed or restarted since their header: no more of them
    /// will come. A receive a payload in pieces had matched is posted again.
    pub(super) fn drop_dead_splits(&mut self, link: usize) {
        let t = &self.links[link].transport;
        let dead: SmallVec<[Peer; 2]> = self
            .split
            .iter()
            .filter(|&(&(l, p), s)| l == link && (t.peer_failed(p) || t.peer_life(p) != s.life))
            .map(|(&(_, p), _)| p)
            .collect();
        for peer in dead {
            self.split.remove(&(link, peer));
            self.broken_pieces += 1;
            self.abandon_pieces(link, peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::AddressVector;
    use std::sync::Mutex;

    /// A posted receive's buffer, written at each piece's offset (a write past its end
    /// panics).
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl RecvTarget for Buffer {
        fn capacity(&self) -> usize {
            lock(&self.0).len()
        }
        fn write_at(&mut self, offset: usize, data: &[u8]) {
            lock(&self.0)[offset..offset + data.len()].copy_from_slice(data);
        }
        fn first(&self) -> usize {
            0
        }
    }

    /// An RDM endpoint at `url` as the provider opens one, with a queue of its own.
    fn endpoint_at(av: &Av, url: &str) -> (FabricEndpoint, Cq) {
        endpoint_with(av, url, transport_options(EpType::Rdm))
    }

    fn endpoint_with(av: &Av, url: &str, options: myri_transport::Options) -> (FabricEndpoint, Cq) {
        let t = Endpoint::open_with(url, options).unwrap();
        let mut ep = FabricEndpoint::new(EpType::Rdm, t, crate::info::RDM_MAX_MSG);
        let cq: Cq = Default::default();
        ep.bind.av = Some(av.clone());
        ep.bind.tx_cq = Some((cq.clone(), false));
        ep.bind.rx_cq = Some((cq.clone(), false));
        (ep, cq)
    }

    /// Two endpoints on one address vector: (a, a's queue), (b, b's queue, b's address).
    fn pair() -> ((FabricEndpoint, Cq), (FabricEndpoint, Cq, FiAddr)) {
        pair_with(transport_options(EpType::Rdm))
    }

    /// [`pair`], the receiver `b` opened with `options`.
    fn pair_with(
        options: myri_transport::Options,
    ) -> ((FabricEndpoint, Cq), (FabricEndpoint, Cq, FiAddr)) {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let a = endpoint_at(&av, "udp://127.0.0.1:0");
        let (b, b_cq) = endpoint_with(&av, "udp://127.0.0.1:0", options);
        let b_addr = lock(&av).insert(b.local_url().to_owned());
        (a, (b, b_cq, b_addr))
    }

    /// `len` bytes that differ from piece to piece and from `seed` to `seed`.
    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ seed)
            .collect()
    }

    fn header(tag: u64) -> Header {
        Header {
            tagged: true,
            tag,
            data: None,
        }
    }

    /// Posts a tagged receive of `cap` bytes for `tag`; its buffer.
    fn post(ep: &mut FabricEndpoint, context: usize, tag: u64, cap: usize) -> Arc<Mutex<Vec<u8>>> {
        let buf = Arc::new(Mutex::new(vec![0u8; cap]));
        let posted = Posted {
            context,
            src: FI_ADDR_UNSPEC,
            tag,
            ignore: 0,
            target: Target::new(Buffer(buf.clone())),
            completion: true,
        };
        ep.post_recv(true, posted, Probe::None).unwrap();
        buf
    }

    /// Sends, retrying while the transport is busy.
    fn send(ep: &mut FabricEndpoint, dest: FiAddr, tag: u64, data: &[u8]) {
        for _ in 0..1_000_000 {
            match ep.send(dest, header(tag), &[data], tag as usize, true) {
                Ok(()) => return,
                Err(e) => assert_eq!(e, -FI_EAGAIN),
            }
        }
        panic!("send never taken: {:?}", ep.counts);
    }

    /// Progresses both (through `relay` when some) until `done`.
    #[track_caller]
    fn drive(
        a: &mut FabricEndpoint,
        b: &mut FabricEndpoint,
        mut relay: Option<&mut Relay>,
        mut done: impl FnMut(&FabricEndpoint, &FabricEndpoint) -> bool,
    ) {
        for _ in 0..5_000_000 {
            if done(a, b) {
                return;
            }
            a.progress();
            if let Some(r) = relay.as_deref_mut() {
                r.pump();
            }
            b.progress();
            if let Some(r) = relay.as_deref_mut() {
                r.pump();
            }
        }
        panic!(
            "never done: a {:?} b {:?} split {} reassembly {} posted {} unexpected {} broken {} malformed {}",
            a.counts,
            b.counts,
            b.split.len(),
            b.reassembly.len(),
            b.posted[TAGGED].len(),
            b.unexpected[TAGGED].len(),
            b.broken_pieces,
            b.malformed
        );
    }

    fn entries(cq: &Cq) -> usize {
        lock(&cq.queue).len()
    }

    /// A completion, or the error entry in front.
    fn take(cq: &Cq) -> Result<crate::objects::Entry, ErrorEntry> {
        let mut out = Vec::new();
        // The guard dropped before the error is taken (a second lock would wait for ever).
        let taken = lock(&cq.queue).take(1, &mut out);
        match taken {
            Ok(()) => Ok(out[0]),
            Err(_) => Err(lock(&cq.queue).take_err().unwrap()),
        }
    }

    /// One large message of `len` bytes with a receive posted: every piece one packet,
    /// delivered from its datagram and copied once into the buffer.
    fn lands_once(len: usize) {
        // In one thread the sender runs ahead of the receiver: its window, capped to
        // what the receiver's socket queues, keeps it from overrunning the kernel's
        // buffer (nothing dropped, nothing sent twice). The retransmission timer is set
        // far beyond the run, so that a pause of the thread (a busy host) cannot make a
        // needless resend while the packets wait in the socket: only a loss could.
        let mut options = transport_options(EpType::Rdm);
        options.rpp.rto_initial = std::time::Duration::from_secs(30);
        options.rpp.rto_min = std::time::Duration::from_secs(30);
        options.rpp.rto_max = std::time::Duration::from_secs(30);
        let ((mut a, a_cq), (mut b, b_cq, b_addr)) = pair_with(options);
        let data = bytes(len, 1);
        let buf = post(&mut b, 1, 7, len);
        send(&mut a, b_addr, 7, &data);
        drive(&mut a, &mut b, None, |_, _| {
            entries(&b_cq) > 0 && entries(&a_cq) > 0
        });
        let e = take(&b_cq).unwrap();
        assert_eq!((e.context, e.len, e.tag), (1, len, 7));
        assert!(*lock(&buf) == data, "data intact");
        assert_eq!(take(&a_cq).unwrap().context, 7, "the send completes");
        assert_eq!(a.counts.udp_pieces_sent, 1);
        assert_eq!(
            (b.counts.udp_placed, b.counts.udp_placed_bytes),
            (1, len as u64)
        );
        let packet = a.links[0].transport.peer_packet_payload(Peer(0)).unwrap();
        let pieces = len.div_ceil(packet) as u64;
        let (sa, sb) = (a.links[0].transport.stats(), b.links[0].transport.stats());
        assert_eq!(sa.external_sends, pieces, "each piece a view of one copy");
        assert_eq!(sb.heap_recvs, 0, "nothing reassembled by RPP");
        assert_eq!(sb.recvs, 1 + pieces, "the header and the pieces");
        let rpp = a.links[0].transport.peer_stats(Peer(0)).unwrap();
        assert_eq!(rpp.retransmitted, 0, "no socket overrun: {rpp:?}");
    }

    #[test]
    fn a_large_message_over_udp_lands_in_the_posted_buffer_with_one_copy() {
        lands_once(5 << 20);
        lands_once(100_000);
    }

    #[test]
    fn a_64_mib_message_over_udp_lands_in_the_posted_buffer_with_one_copy() {
        lands_once(crate::info::RDM_MAX_MSG);
    }

    /// A buffer shorter than the message: `FI_ETRUNC`, what fits written, nothing past
    /// it; the next message is matched as usual.
    #[test]
    fn a_large_message_into_a_short_buffer_is_truncated() {
        let ((mut a, _a_cq), (mut b, b_cq, b_addr)) = pair();
        let data = bytes(3 << 20, 2);
        let cap = (1 << 20) + 12_345;
        let buf = post(&mut b, 1, 7, cap);
        let next = post(&mut b, 2, 8, 100);
        send(&mut a, b_addr, 7, &data);
        send(&mut a, b_addr, 8, b"next");
        drive(&mut a, &mut b, None, |_, _| entries(&b_cq) >= 2);
        let e = take(&b_cq).unwrap_err();
        assert_eq!(
            (e.err, e.olen, e.entry.len),
            (FI_ETRUNC, data.len() - cap, cap)
        );
        assert!(lock(&buf)[..] == data[..cap]);
        let e = take(&b_cq).unwrap();
        assert_eq!((e.context, e.len), (2, 4));
        assert_eq!(&lock(&next)[..4], b"next");
    }

    /// No receive posted when it came: the message waits whole (copied), a peek sees
    /// it, a claim takes it.
    #[test]
    fn an_unexpected_large_message_is_peeked_claimed_and_intact() {
        let ((mut a, _a_cq), (mut b, b_cq, b_addr)) = pair();
        let data = bytes(3 << 20, 3);
        send(&mut a, b_addr, 9, &data);
        drive(&mut a, &mut b, None, |_, b| b.unexpected[TAGGED].len() == 1);
        let probe = |context, buf: &Arc<Mutex<Vec<u8>>>| Posted {
            context,
            src: FI_ADDR_UNSPEC,
            tag: 9,
            ignore: 0,
            target: Target::new(Buffer(buf.clone())),
            completion: true,
        };
        let buf = Arc::new(Mutex::new(vec![0u8; data.len()]));
        b.post_recv(true, probe(5, &buf), Probe::PeekClaim).unwrap();
        let e = take(&b_cq).unwrap();
        assert_eq!((e.context, e.len), (5, data.len()));
        b.post_recv(true, probe(5, &buf), Probe::Claim).unwrap();
        let e = take(&b_cq).unwrap();
        assert_eq!((e.context, e.len), (5, data.len()));
        assert!(*lock(&buf) == data, "data intact");
        assert_eq!(b.counts.udp_placed, 0, "waited, so copied twice");
        // And the next, posted first, lands once.
        let buf = post(&mut b, 6, 9, data.len());
        send(&mut a, b_addr, 9, &data);
        drive(&mut a, &mut b, None, |_, _| entries(&b_cq) > 0);
        assert_eq!(take(&b_cq).unwrap().context, 6);
        assert!(*lock(&buf) == data);
        assert_eq!(b.counts.udp_placed, 1);
    }

    /// A UDP relay between two endpoints that lets `a`'s datagrams through as `pass`
    /// says: the sender's side of a fault.
    struct Relay {
        sock: std::net::UdpSocket,
        a: std::net::SocketAddr,
        b: std::net::SocketAddr,
        /// `a`'s datagrams seen, and whether the n-th (from 0) and its size pass.
        seen: usize,
        pass: Box<dyn FnMut(usize, usize) -> bool>,
    }

    impl Relay {
        fn between(
            a: &mut FabricEndpoint,
            b: &FabricEndpoint,
            pass: impl FnMut(usize, usize) -> bool + 'static,
        ) -> Relay {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.set_nonblocking(true).unwrap();
            let addr = |url: &str| url.trim_start_matches("udp://").parse().unwrap();
            let relay_url = format!("udp://{}", sock.local_addr().unwrap());
            a.via.insert(b.local_url().to_owned(), relay_url);
            Relay {
                a: addr(a.local_url()),
                b: addr(b.local_url()),
                sock,
                seen: 0,
                pass: Box::new(pass),
            }
        }

        fn pump(&mut self) {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                let to = if from == self.a { self.b } else { self.a };
                if from == self.a {
                    self.seen += 1;
                    if !(self.pass)(self.seen - 1, n) {
                        continue;
                    }
                }
                let _ = self.sock.send_to(&buf[..n], to);
            }
        }
    }

    /// Lost pieces: sent again, taken out of order by RPP, the message intact.
    #[test]
    fn a_large_message_survives_loss() {
        let ((mut a, a_cq), (mut b, b_cq, b_addr)) = pair();
        let mut relay = Relay::between(&mut a, &b, |n, len| len < 30_000 || n % 7 != 3 || n > 200);
        let data = bytes(4 << 20, 4);
        let buf = post(&mut b, 1, 7, data.len());
        send(&mut a, b_addr, 7, &data);
        drive(&mut a, &mut b, Some(&mut relay), |_, _| {
            entries(&b_cq) > 0 && entries(&a_cq) > 0
        });
        assert_eq!(take(&b_cq).unwrap().len, data.len());
        assert!(*lock(&buf) == data, "data intact");
        let s = a.links[0].transport.peer_stats(Peer(0)).unwrap();
        assert!(s.retransmitted > 0, "{s:?}");
        assert_eq!(b.broken_pieces, 0);
    }

    /// The sender dies part-way through a large message and comes back at the same
    /// address: the receiver drops the partial message and gives its receive back, which
    /// the new life's first message takes.
    #[test]
    fn a_sender_restarting_mid_message_gives_the_receive_back() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let (mut a, _) = endpoint_at(&av, "udp://127.0.0.1:0");
        let a_url = a.local_url().to_owned();
        let (mut b, b_cq) = endpoint_at(&av, "udp://127.0.0.1:0");
        let b_addr = lock(&av).insert(b.local_url().to_owned());
        // The first four pieces pass, nothing of the first life's after them.
        let big = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let cut = std::rc::Rc::new(std::cell::Cell::new(true));
        let (big2, cut2) = (big.clone(), cut.clone());
        let mut relay = Relay::between(&mut a, &b, move |_, len| {
            if !cut2.get() {
                return true;
            }
            if len > 30_000 {
                big2.set(big2.get() + 1);
            }
            big2.get() <= 4
        });
        let buf = post(&mut b, 1, 7, 2 << 20);
        send(&mut a, b_addr, 7, &bytes(2 << 20, 5));
        drive(&mut a, &mut b, Some(&mut relay), |_, b| {
            big.get() > 4
                && b.reassembly.len() == 1
                && b.links[0].transport.pending_deliveries() == 0
        });
        assert!(b.posted[TAGGED].is_empty(), "matched by the first piece");
        drop(a);
        let (mut a, _) = endpoint_at(&av, &a_url);
        a.via.insert(
            b.local_url().to_owned(),
            format!("udp://{}", relay.sock.local_addr().unwrap()),
        );
        cut.set(false);
        send(&mut a, b_addr, 7, b"second life");
        drive(&mut a, &mut b, Some(&mut relay), |_, _| entries(&b_cq) > 0);
        let e = take(&b_cq).unwrap();
        assert_eq!(
            (e.context, e.len),
            (1, 11),
            "the receive, given back, took the new message"
        );
        assert_eq!(&lock(&buf)[..11], b"second life");
        assert_eq!(b.broken_pieces, 1);
        assert!(b.reassembly.is_empty() && b.split.is_empty());
        assert_eq!(b.counts.udp_placed, 0);
    }
}
