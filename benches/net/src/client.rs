//! The client side of a session with `myri serve`: hello, ping-pong and stream rounds,
//! goodbye. See the [module documentation](super).

use super::wire::{self, Control, KIND_DATA, KIND_PING, References, SessionCounters, SizeSpec};
use super::{RoundTime, StreamRound};
use myri_transport::{Completion, Endpoint, Options, Peer, Scheme, SendErrorKind, Stats, Url};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// RPP on top (true) or raw datagrams; the server must run the same.
    pub reliable: bool,
    /// The local endpoint's URL (`udp://` only; default: any port on the unspecified
    /// address of the server's family).
    pub bind: Option<String>,
    /// How long to wait for the server's first answer.
    pub connect_timeout: Duration,
    /// Raw mode: how long a ping or a control message waits before it counts as lost.
    pub exchange_timeout: Duration,
    /// How long a run may make no progress at all before the server counts as gone
    /// (reliable mode normally notices a dead server much sooner, through RPP).
    pub stall_timeout: Duration,
    /// Reliable streams: take a [`Sample`] of RPP's state this often during each round
    /// (none by default). The samples wait in memory for [`Client::take_samples`].
    pub sample_every: Option<Duration>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            reliable: true,
            bind: None,
            connect_timeout: Duration::from_secs(5),
            exchange_timeout: Duration::from_millis(20),
            stall_timeout: Duration::from_secs(30),
            sample_every: None,
        }
    }
}

/// RPP's state toward the server at one moment of a reliable stream round, taken every
/// [`ClientConfig::sample_every`]: what a user watching a flow over time (its window,
/// round trip and losses next to its goodput) needs, as `iperf3 -i` reports.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The stream round (1 for the first round of the session).
    pub round: u32,
    /// Time since the round's first message was handed to the transport.
    pub at: Duration,
    /// Messages of the round acknowledged by then (handed back as sent).
    pub acked_messages: u64,
    /// Their bytes.
    pub acked_bytes: u64,
    /// RPP's counters and state for the server at that moment.
    pub rpp: myri_rpp::Stats,
}

/// The sampling of a round in progress.
#[derive(Debug, Clone, Copy)]
struct Sampling {
    round: u32,
    start: Instant,
    next: Instant,
    every: Duration,
    acked_messages: u64,
    acked_bytes: u64,
}

/// Why a client run stopped.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Bad URL, a local address that cannot be bound, a scheme with no server.
    #[error("{0}")]
    Setup(String),
    /// The server never answered the hello.
    #[error(
        "no answer from {url} within {waited:?}: is `myri serve {url}` running there, and {mode}?"
    )]
    NoAnswer {
        /// The server's URL.
        url: String,
        /// How long the client waited.
        waited: Duration,
        /// Which mode the client ran, to compare with the server's.
        mode: &'static str,
    },
    /// The server failed (died, became unreachable) during the run.
    #[error("the server failed: {why}; {unacked} unacknowledged messages were handed back")]
    PeerFailed {
        /// Why the transport declared it failed.
        why: String,
        /// Messages not acknowledged, handed back by the transport.
        unacked: usize,
    },
    /// The server restarted during the run (a new incarnation answered).
    #[error(
        "the server restarted (incarnation {old} -> {new}); {unacked} unacknowledged messages were handed back"
    )]
    PeerRestarted {
        /// The incarnation the session began with.
        old: u64,
        /// The new one.
        new: u64,
        /// Messages the old incarnation had not acknowledged.
        unacked: usize,
    },
    /// The server closed the connection during the run.
    #[error("the server closed the connection; {unacked} unacknowledged messages were handed back")]
    PeerClosed {
        /// Messages not acknowledged.
        unacked: usize,
    },
    /// The server refused the session.
    #[error("the server refused: {0}")]
    Refused(String),
    /// The run made no progress for the stall timeout.
    #[error("no progress for {0:?}: the server stopped answering")]
    Stalled(Duration),
    /// A message larger than the endpoint carries.
    #[error("{0}")]
    TooLarge(String),
}

impl ClientError {
    /// Whether this is about the peer (failed, restarted, closed, silent), as opposed to
    /// the set-up.
    pub fn is_peer_failure(&self) -> bool {
        !matches!(self, ClientError::Setup(_) | ClientError::TooLarge(_))
    }
}

/// A session with a server. See the [module documentation](super).
pub struct Client {
    ep: Endpoint,
    peer: Peer,
    server_url: String,
    session: u64,
    round: u32,
    reliable: bool,
    server_incarnation: u64,
    peer_incarnation: Option<u64>,
    references: References,
    server_addr: Option<SocketAddr>,
    config: ClientConfig,
    /// Heap buffers the transport handed back, reused instead of allocating (and
    /// zeroing) new ones.
    spare: Vec<myri_transport::Buf>,
    /// The UDP socket's poller, to sleep while the transport pushes back.
    poll: Option<(mio::Poll, mio::Events)>,
    /// Messages sent and not yet handed back acknowledged (reliable mode).
    unacked: u64,
    /// The round being sampled, if [`ClientConfig::sample_every`] asks for samples.
    sampling: Option<Sampling>,
    /// Samples taken and not yet taken away.
    samples: Vec<Sample>,
}

/// Most heap buffers kept for reuse.
const SPARE_BUFFERS: usize = 2048;
/// A reliable stream keeps at most this many bytes of messages unacknowledged (and at
/// least [`STREAM_MIN_UNACKED`] messages), as an application that reuses its buffers
/// does: the transport would queue far more (128 MiB by default), each message in a
/// buffer of its own, and a run would then time the allocation and first touch of
/// every buffer rather than the transport. Twice RPP's window of 64 KiB packets.
const STREAM_UNACKED_BYTES: usize = 32 << 20;
/// See [`STREAM_UNACKED_BYTES`].
const STREAM_MIN_UNACKED: u64 = 16;
/// A ping-pong client waiting for an answer takes its completions every this many
/// empty receives (and at the first).
const COMPLETIONS_EVERY_SPINS: u32 = 16;

/// A number for this session: pid and clock, mixed.
fn session_number() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    wire::splitmix(t ^ u64::from(std::process::id()) << 40)
}

/// The local and peer URLs of a client of `server`.
fn urls(server: &Url, config: &ClientConfig) -> Result<(String, String), ClientError> {
    let mut peer = server.clone();
    peer.params = Default::default();
    let mode = if config.reliable { "1" } else { "0" };
    // What the server's URL says of how this end sends goes on the local endpoint's URL,
    // where the endpoint reads it: the datagram size, segmentation offload, and RPP's
    // congestion control and pacing (`cc=` and `pacing=` were dropped here before, so a
    // client given `?cc=newreno` ran the default controller).
    let p = &server.params;
    let flag = |b: bool| if b { "1" } else { "0" };
    let mut extra = String::new();
    if let Some(m) = p.mtu {
        extra += &format!("&mtu={m}");
    }
    if let Some(g) = p.gso {
        extra += &format!("&gso={}", flag(g));
    }
    if let Some(cc) = p.cc {
        extra += &format!("&cc={}", cc.as_str());
    }
    if let Some(pacing) = p.pacing {
        extra += &format!("&pacing={}", flag(pacing));
    }
    let local = match &server.address {
        myri_transport::Address::Udp { host, port } => {
            if config.bind.is_some() {
                let b = config.bind.clone().unwrap_or_default();
                let u: Url = b
                    .parse()
                    .map_err(|e| ClientError::Setup(format!("--bind {b}: {e}")))?;
                if u.scheme() != Scheme::Udp || u.has_params() {
                    return Err(ClientError::Setup(format!(
                        "--bind {b}: expected udp://host:port with no parameters"
                    )));
                }
                format!("{u}?reliable={mode}{extra}")
            } else {
                let v6 = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| ClientError::Setup(format!("{peer}: {e}")))?
                    .next()
                    .is_some_and(|a| a.is_ipv6());
                let any = if v6 { "[::]" } else { "0.0.0.0" };
                format!("udp://{any}:0?reliable={mode}{extra}")
            }
        }
        myri_transport::Address::Shm { name } => {
            if config.bind.is_some() {
                return Err(ClientError::Setup(
                    "--bind applies to udp:// only (a shm:// client takes the region's other side)"
                        .into(),
                ));
            }
            format!("shm://{name}?reliable={mode}{extra}")
        }
        myri_transport::Address::Sim { .. } => {
            return Err(ClientError::Setup(
                "sim:// endpoints live in one process: a server runs over udp:// or shm://".into(),
            ));
        }
        other => {
            return Err(ClientError::Setup(format!(
                "{}:// has no network benchmark client: a server runs over udp:// or shm://",
                other.scheme()
            )));
        }
    };
    Ok((local, peer.to_string()))
}

impl Client {
    /// Opens a local endpoint, inserts the server and says hello.
    pub fn connect(server: &str, config: ClientConfig) -> Result<Client, ClientError> {
        let url: Url = server
            .parse()
            .map_err(|e| ClientError::Setup(format!("{server}: {e}")))?;
        let (local, peer_url) = urls(&url, &config)?;
        let options = Options::default()
            .with_reliable(config.reliable)
            .with_rpp(super::rpp_config())
            // One server, as the bare UDP client the runs are compared with.
            .with_connect_one_peer(true);
        let mut ep = Endpoint::open_with(&local, options)
            .map_err(|e| ClientError::Setup(format!("opening {local}: {e}")))?;
        let peer = ep
            .insert_addr(&peer_url)
            .map_err(|e| ClientError::Setup(e.to_string()))?;
        let server_addr = ep
            .peer_url(peer)
            .and_then(|u| u.strip_prefix("udp://").and_then(|a| a.parse().ok()));
        let mut c = Client {
            ep,
            peer,
            server_url: peer_url,
            session: session_number(),
            round: 0,
            reliable: config.reliable,
            server_incarnation: 0,
            peer_incarnation: None,
            references: References::default(),
            server_addr,
            config,
            spare: Vec::new(),
            poll: None,
            unacked: 0,
            sampling: None,
            samples: Vec::new(),
        };
        if c.server_addr.is_some()
            && let Ok(poll) = mio::Poll::new()
            && c.ep.register(poll.registry(), mio::Token(0)).is_ok()
        {
            c.poll = Some((poll, mio::Events::with_capacity(8)));
        }
        c.hello()?;
        Ok(c)
    }

    fn hello(&mut self) -> Result<(), ClientError> {
        let hello = wire::encode_control(&Control::Hello {
            version: wire::VERSION,
            session: self.session,
            reliable: self.reliable,
            incarnation: self.ep.incarnation(),
        });
        let session = self.session;
        let waited = self.config.connect_timeout;
        let r = self.request(&hello, waited, |c| match c {
            Control::HelloAck {
                session: s,
                incarnation,
                references,
                ..
            } if s == session => Some(Ok((incarnation, references))),
            Control::Refused { why } => Some(Err(why)),
            _ => None,
        });
        let (incarnation, references) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(why)) => return Err(ClientError::Refused(why)),
            Err(ClientError::Stalled(_) | ClientError::PeerFailed { .. }) => {
                return Err(ClientError::NoAnswer {
                    url: self.server_url.clone(),
                    waited,
                    mode: if self.reliable {
                        "does it run reliable (no --raw, no reliable=0)"
                    } else {
                        "does it run raw (--raw or reliable=0)"
                    },
                });
            }
            Err(e) => return Err(e),
        };
        self.server_incarnation = incarnation;
        self.references = references;
        Ok(())
    }

    // ---- Getters ---------------------------------------------------------------------

    /// The server's URL, as inserted.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The local endpoint's URL.
    pub fn local_url(&self) -> String {
        self.ep.local_url()
    }

    /// Whether the session runs RPP.
    pub fn is_reliable(&self) -> bool {
        self.reliable
    }

    /// The server endpoint's incarnation, as its hello answer said.
    pub fn server_incarnation(&self) -> u64 {
        self.server_incarnation
    }

    /// This endpoint's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.ep.incarnation()
    }

    /// The references the server offers.
    pub fn references(&self) -> &References {
        &self.references
    }

    /// The server's UDP socket address (`udp://` only).
    pub fn server_addr(&self) -> Option<SocketAddr> {
        self.server_addr
    }

    /// The endpoint's counters.
    pub fn stats(&self) -> Stats {
        self.ep.stats()
    }

    /// RPP's counters for the server (reliable mode).
    pub fn rpp_stats(&self) -> Option<myri_rpp::Stats> {
        self.ep.peer_stats(self.peer)
    }

    /// The longest message to the server that goes as one packet (reliable mode): the
    /// datagram size the endpoint chose for the path, less RPP's headers.
    pub fn packet_payload(&self) -> Option<usize> {
        self.ep.peer_packet_payload(self.peer)
    }

    /// Largest message the endpoint sends.
    pub fn max_message_size(&self) -> usize {
        self.ep.capabilities().max_message_size
    }

    // ---- Plumbing --------------------------------------------------------------------

    /// Takes the completions waiting; a failure of the server is an error.
    fn completions(&mut self) -> Result<(), ClientError> {
        while let Some(c) = self.ep.poll_completion() {
            match c {
                Completion::Connected {
                    peer_incarnation, ..
                } => {
                    self.peer_incarnation.get_or_insert(peer_incarnation);
                }
                Completion::PeerFailed { why, unsent, .. } => {
                    return Err(ClientError::PeerFailed {
                        why: why.to_string(),
                        unacked: unsent.len(),
                    });
                }
                Completion::PeerRestarted {
                    incarnation,
                    unacked,
                    ..
                } => {
                    return Err(ClientError::PeerRestarted {
                        old: self.peer_incarnation.unwrap_or(self.server_incarnation),
                        new: incarnation,
                        unacked: unacked.len(),
                    });
                }
                Completion::PeerClosed { unsent, .. } => {
                    return Err(ClientError::PeerClosed {
                        unacked: unsent.len(),
                    });
                }
                Completion::Sent { buf, .. } => {
                    self.unacked = self.unacked.saturating_sub(1);
                    // The round's own data messages, not the control messages
                    // around them.
                    if let Some(s) = self.sampling.as_mut()
                        && wire::header(&buf)
                            .is_some_and(|h| h.kind == KIND_DATA && h.round == s.round as u8)
                    {
                        s.acked_messages += 1;
                        s.acked_bytes += buf.len() as u64;
                    }
                    // Registered buffers go back to the backend (it receives into them too).
                    if !buf.is_registered() && self.spare.len() < SPARE_BUFFERS {
                        self.spare.push(buf);
                    }
                }
                // New peers, and completions of later versions, need nothing here.
                _ => {}
            }
        }
        self.sample_if_due(false);
        Ok(())
    }

    /// Takes a [`Sample`] if the round is sampled and one is due (or `last`, at the
    /// round's end, whenever it is sampled).
    fn sample_if_due(&mut self, last: bool) {
        let Some(s) = self.sampling.as_mut() else {
            return;
        };
        let now = Instant::now();
        if now < s.next && !last {
            return;
        }
        // The next sample is due an interval after this one was due, so samples keep
        // to the grid; after a long wait the missed ones are skipped, not taken late.
        s.next += s.every;
        if s.next <= now {
            s.next = now + s.every;
        }
        let s = *s;
        // The round's end right after a sample with nothing acknowledged since: the
        // sample stands for it.
        if last
            && self
                .samples
                .last()
                .is_some_and(|p| p.round == s.round && p.acked_messages == s.acked_messages)
        {
            return;
        }
        if let Some(rpp) = self.rpp_stats() {
            self.samples.push(Sample {
                round: s.round,
                at: now - s.start,
                acked_messages: s.acked_messages,
                acked_bytes: s.acked_bytes,
                rpp,
            });
        }
    }

    /// Samples reliable stream rounds every `every` from the next round on (none for
    /// `None` or zero); see [`ClientConfig::sample_every`].
    pub fn set_sample_every(&mut self, every: Option<Duration>) {
        self.config.sample_every = every;
    }

    /// The samples taken so far (see [`ClientConfig::sample_every`]), oldest first; the
    /// client keeps none of them.
    pub fn take_samples(&mut self) -> Vec<Sample> {
        std::mem::take(&mut self.samples)
    }

    /// Progresses until fewer than `most` messages are unacknowledged.
    fn wait_for_acks(&mut self, most: u64) -> Result<(), ClientError> {
        let since = Instant::now();
        loop {
            while self.ep.progress() {}
            self.completions()?;
            if self.unacked < most {
                return Ok(());
            }
            if since.elapsed() > self.config.stall_timeout {
                return Err(ClientError::Stalled(self.config.stall_timeout));
            }
            self.wait_for_room();
        }
    }

    /// Sends `buf`, progressing while the transport pushes back.
    fn send(&mut self, mut buf: myri_transport::Buf) -> Result<(), ClientError> {
        let mut since = None;
        loop {
            match self.ep.send(self.peer, buf) {
                Ok(_) => {
                    self.unacked += u64::from(self.reliable);
                    return Ok(());
                }
                Err(e) if e.error.is_would_block() => {
                    buf = e.buf;
                    while self.ep.progress() {}
                    self.completions()?;
                    self.wait_for_room();
                    let t = *since.get_or_insert_with(Instant::now);
                    if t.elapsed() > self.config.stall_timeout {
                        return Err(ClientError::Stalled(self.config.stall_timeout));
                    }
                }
                Err(e) => {
                    // A failed peer: the completion says why and hands back the rest.
                    self.completions()?;
                    return Err(match e.error {
                        SendErrorKind::TooLarge { .. } => {
                            ClientError::TooLarge(e.error.to_string())
                        }
                        other => ClientError::PeerFailed {
                            why: other.to_string(),
                            unacked: 1,
                        },
                    });
                }
            }
        }
    }

    /// The transport pushes back (its queue is full): sleep until the server's answer
    /// arrives or a timer is due, leaving the CPU to the receiver, as a blocking TCP
    /// writer does. Over shared memory, which has nothing to wake a poll, yield.
    fn wait_for_room(&mut self) {
        let Some((poll, events)) = self.poll.as_mut() else {
            std::thread::yield_now();
            return;
        };
        let timeout = self
            .ep
            .next_timeout()
            .map_or(Duration::from_millis(1), |t| {
                t.min(Duration::from_millis(1))
            });
        if timeout < Duration::from_millis(1) {
            // A poll's timeout is whole milliseconds (mio rounds up): a pacing deadline
            // tens of microseconds away would wait a millisecond, and a flow whose
            // client waits here would send at a fraction of its pacing rate beside one
            // that spins (measured: two flows at 200 Mbit/s shared 2.3 : 1 while one was
            // still queueing messages). Sleep to the deadline instead (a timer of
            // microseconds, 50 us of slack): acknowledgements that land meanwhile wait
            // in the socket, and the pacer's next packet is what this thread is for. A
            // yield can give the core away for a whole time slice on a busy host, longer
            // than the pacer's bucket, and the tokens past the bucket are lost.
            std::thread::sleep(timeout);
            return;
        }
        // Readiness is edge-triggered: the endpoint read the socket dry just before.
        let _ = poll.poll(events, Some(timeout));
    }

    /// Sends a control message (raw mode: again every exchange timeout) until `answer`
    /// recognizes a reply, or `patience` passes.
    fn request<T>(
        &mut self,
        msg: &[u8],
        patience: Duration,
        mut answer: impl FnMut(Control) -> Option<T>,
    ) -> Result<T, ClientError> {
        let start = Instant::now();
        let mut sent_at = start;
        self.send(myri_transport::Buf::copy_of(msg))?;
        loop {
            if let Some(d) = self.ep.recv() {
                if let Some(Ok(c)) = wire::control(&d.data)
                    && let Some(t) = answer(c)
                {
                    return Ok(t);
                }
                continue;
            }
            self.completions()?;
            let now = Instant::now();
            if now - start > patience {
                return Err(ClientError::Stalled(patience));
            }
            if !self.reliable
                && now - sent_at > self.config.exchange_timeout.max(Duration::from_millis(10))
            {
                sent_at = now;
                self.send(myri_transport::Buf::copy_of(msg))?;
            }
        }
    }

    /// One progress pass (not waiting): answers the server's probes and takes what
    /// arrived, so the session stays alive while the client measures something else.
    pub fn keepalive(&mut self) -> Result<(), ClientError> {
        while self.ep.recv().is_some() {}
        self.completions()
    }

    /// Progresses the endpoint for a millisecond and until nothing is unacknowledged, so
    /// that delayed acknowledgements go out and neither side retransmits while the
    /// client measures something else.
    pub fn settle(&mut self) -> Result<(), ClientError> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1)
            || (self.ep.has_unacked() && start.elapsed() < self.config.stall_timeout)
        {
            while self.ep.recv().is_some() {}
            self.completions()?;
        }
        Ok(())
    }

    /// A buffer of `len` bytes: a reused one when the transport handed one back, else a
    /// new one from the endpoint.
    fn buffer(&mut self, len: usize) -> myri_transport::Buf {
        if let Some(mut b) = self.spare.pop()
            && b.set_len(len)
        {
            return b;
        }
        self.ep.alloc(len)
    }

    fn next_round(&mut self) -> u32 {
        self.round = self.round.wrapping_add(1);
        self.round
    }

    // ---- Rounds ----------------------------------------------------------------------

    /// `iters` ping-pongs of `size` bytes (at least [`wire::HEADER_LEN`]). In raw mode a
    /// ping unanswered within the exchange timeout counts as a timeout, and the round
    /// goes on.
    pub fn pingpong_round(&mut self, size: usize, iters: u64) -> Result<RoundTime, ClientError> {
        let round = self.next_round() as u8;
        let size = size.max(wire::HEADER_LEN);
        let mut timeouts = 0;
        let start = Instant::now();
        for seq in 0..iters {
            let mut buf = self.ep.alloc(size);
            wire::put_header(&mut buf, KIND_PING, round, seq);
            self.send(buf)?;
            let sent_at = Instant::now();
            let mut spins = 0u32;
            loop {
                if let Some(d) = self.ep.recv() {
                    let h = wire::header(&d.data);
                    if d.data.len() == size && h.is_some_and(|h| h.round == round && h.seq == seq) {
                        break;
                    }
                    continue;
                }
                // Completions (a peer's failure, buffers handed back) at the first spin,
                // while the answer cannot be there yet, and then now and then: each poll
                // that finds none runs a whole progress pass, which `recv` does itself as
                // often as the transport needs.
                if spins.is_multiple_of(COMPLETIONS_EVERY_SPINS) {
                    self.completions()?;
                }
                spins = spins.wrapping_add(1);
                let waited = sent_at.elapsed();
                if !self.reliable && waited > self.config.exchange_timeout {
                    timeouts += 1;
                    break;
                }
                if waited > self.config.stall_timeout {
                    return Err(ClientError::Stalled(self.config.stall_timeout));
                }
            }
        }
        Ok(RoundTime {
            elapsed: start.elapsed(),
            exchanges: iters,
            timeouts,
        })
    }

    /// Streams `count` messages sized by `sizes` (seeded by `seed`), with each payload
    /// the pattern the server checks when `verify`. Returns when the server has answered
    /// after the last message (reliable: once it has them all).
    pub fn stream_round(
        &mut self,
        sizes: SizeSpec,
        count: u64,
        seed: u64,
        verify: bool,
    ) -> Result<StreamRound, ClientError> {
        if sizes.max() > self.max_message_size() {
            return Err(ClientError::TooLarge(format!(
                "messages of {} bytes are longer than the {} this endpoint carries{}",
                sizes.max(),
                self.max_message_size(),
                if self.reliable {
                    ""
                } else {
                    " (raw mode sends one datagram per message)"
                }
            )));
        }
        let round = self.next_round();
        let seed = wire::splitmix(seed ^ u64::from(round));
        let start = wire::encode_control(&Control::StreamStart {
            round,
            count,
            sizes,
            seed,
            verify,
        });
        let ack = |done: bool| {
            move |c| match c {
                Control::StreamAck {
                    round: r,
                    done: d,
                    received,
                    bytes,
                    errors,
                } if r == round && d == done => Some((received, bytes, errors)),
                _ => None,
            }
        };
        let patience = self.config.stall_timeout;
        self.request(&start, patience, ack(false))?;
        let t0 = Instant::now();
        self.sampling = self
            .config
            .sample_every
            .filter(|e| self.reliable && !e.is_zero())
            .map(|every| Sampling {
                round,
                start: t0,
                next: t0,
                every,
                acked_messages: 0,
                acked_bytes: 0,
            });
        let most_unacked = (STREAM_UNACKED_BYTES / sizes.max().max(1)) as u64;
        let most_unacked = most_unacked.max(STREAM_MIN_UNACKED);
        for seq in 0..count {
            if self.reliable && self.unacked >= most_unacked {
                self.wait_for_acks(most_unacked)?;
            }
            let size = sizes.size_of(seed, seq).max(wire::HEADER_LEN);
            let mut buf = self.buffer(size);
            wire::put_header(&mut buf, KIND_DATA, round as u8, seq);
            if verify {
                wire::fill_pattern(&mut buf[wire::HEADER_LEN..], seed, seq);
            }
            self.send(buf)?;
            self.sample_if_due(false);
        }
        let (received, bytes, errors) = if self.reliable {
            // The server answers by itself once it has every message.
            let mut last = (Instant::now(), u64::MAX);
            loop {
                if let Some(d) = self.ep.recv() {
                    if let Some(Ok(c)) = wire::control(&d.data)
                        && let Some(a) = ack(true)(c)
                    {
                        break a;
                    }
                    continue;
                }
                self.completions()?;
                let acked = self.rpp_stats().map_or(0, |s| s.packets_received);
                if acked != last.1 {
                    last = (Instant::now(), acked);
                } else if last.0.elapsed() > patience {
                    return Err(ClientError::Stalled(patience));
                } else {
                    // Nothing came: let the other runnable tasks have the core (the
                    // server, the kernel's network work) rather than spin through the
                    // time slice; on an idle host this returns at once.
                    std::thread::yield_now();
                }
            }
        } else {
            let end = wire::encode_control(&Control::StreamEnd { round });
            self.request(&end, patience, ack(true))?
        };
        let elapsed = t0.elapsed();
        if self.sampling.is_some() {
            // The round's last acknowledgements, for its last sample; an unsampled round
            // leaves them to the next call, as before sampling existed.
            self.completions()?;
            self.sample_if_due(true);
            self.sampling = None;
        }
        Ok(StreamRound {
            elapsed,
            sent: count,
            received,
            bytes,
            errors,
        })
    }

    /// Ends the session; returns what the server counted for it.
    pub fn bye(mut self) -> Result<SessionCounters, ClientError> {
        let session = self.session;
        let bye = wire::encode_control(&Control::Bye { session });
        let patience = self.config.connect_timeout;
        let counters = self.request(&bye, patience, |c| match c {
            Control::ByeAck {
                session: s,
                counters,
            } if s == session => Some(counters),
            _ => None,
        })?;
        // Let the last acknowledgements go out before the endpoint closes.
        let until = Instant::now() + Duration::from_millis(200);
        while self.ep.has_unacked() && Instant::now() < until {
            self.ep.progress();
        }
        Ok(counters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_url_s_sending_parameters_reach_the_local_endpoint() {
        let server: Url = "udp://127.0.0.1:7000?mtu=1472&gso=0&cc=bbr&pacing=0"
            .parse()
            .unwrap();
        let (local, peer) = urls(&server, &ClientConfig::default()).unwrap();
        let local: Url = local.parse().unwrap();
        assert_eq!(local.params.cc, Some(myri_transport::Congestion::Bbr));
        assert_eq!(local.params.pacing, Some(false));
        assert_eq!(local.params.gso, Some(false));
        assert_eq!(local.params.mtu, Some(1472));
        assert_eq!(peer, "udp://127.0.0.1:7000");
    }
}
