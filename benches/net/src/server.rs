//! `myri serve`: a transport endpoint that echoes pings and sinks streams for any number
//! of clients, with the plain references beside it. See the [module documentation](super).
//!
//! One thread polls everything: the endpoint, the bare UDP socket, the TCP listener and
//! its connections, the bare ring. While traffic flows it spins (as the clients do, so
//! transport and reference are measured alike), staying on the source that last had
//! something and looking at the others every few turns; after [`ServerConfig::spin`]
//! with nothing to do it sleeps in `mio::Poll` (UDP sockets, signals) or in short naps
//! (shared memory has nothing to wake a poll). It also sleeps between messages while
//! more threads are runnable than the host has cores ([`CoreShare`]): a spinning server
//! would hold a core that its clients, or the kernel's network work, wait for.

use super::bare_udp::UdpReflector;
use super::cores::CoreShare;
use super::ring::RingReflector;
use super::tcp::TcpSink;
use super::wire::{self, Control, KIND_PING, References, SessionCounters, SizeSpec};
use mio::{Events, Interest, Poll, Token};
use myri_transport::{Address, Completion, Endpoint, Options, Peer, Scheme, Stats, Url};
use serde::Serialize;
use signal_hook_mio::v1_0::Signals;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;

const ENDPOINT: Token = Token(0);
const BARE_UDP: Token = Token(1);
const TCP_LISTEN: Token = Token(2);
const TCP_CONN: Token = Token(3);
const SIGNALS: Token = Token(4);

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// RPP on top (true) or raw, when the URL does not say (`reliable=`).
    pub reliable: bool,
    /// Offer the plain references (bare UDP socket and TCP listener, or bare ring).
    pub references: bool,
    /// Port of the bare UDP socket (0: any free port). The TCP listener takes the
    /// transport's port number when it is free, else any.
    pub reference_port: u16,
    /// How long to keep spinning after the last message before sleeping (while no
    /// thread waits for a core: see [`CoreShare`]).
    pub spin: Duration,
    /// Stop after the first session ends (cleanly or not).
    pub once: bool,
    /// Stop on SIGINT and SIGTERM (a command does; a server in a test thread does not).
    pub stop_on_signals: bool,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            reliable: true,
            references: true,
            reference_port: 0,
            spin: Duration::from_millis(100),
            once: false,
            stop_on_signals: false,
        }
    }
}

/// Why a server could not start or run.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The URL did not parse.
    #[error("bad url `{0}`: {1}")]
    Url(String, String),
    /// A scheme a server cannot run on.
    #[error("{0}:// endpoints live in one process: serve udp://HOST:PORT or shm://NAME")]
    Unsupported(Scheme),
    /// The endpoint could not be opened (port in use, region busy...).
    #[error("{0}")]
    Open(#[from] myri_transport::OpenError),
    /// The endpoint's socket could not be registered with the poller.
    #[error("{0}")]
    Register(#[from] myri_transport::RegisterError),
    /// A reference could not be set up.
    #[error("{0}")]
    Reference(String),
    /// The poller or the signal handlers failed.
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
}

/// What happened, as the server tells it.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ServerEvent {
    /// The server is up.
    Listening {
        /// Its transport URL (with the real port).
        url: String,
        /// RPP or raw.
        reliable: bool,
        /// Its endpoint's incarnation.
        incarnation: u64,
        /// The references it offers.
        references: References,
        /// Its process id.
        pid: u32,
    },
    /// A client said hello.
    SessionStarted {
        /// The client's handle.
        peer: u32,
        /// Its address.
        addr: String,
        /// Its session number.
        session: u64,
        /// Its endpoint's incarnation.
        incarnation: u64,
    },
    /// A client said goodbye.
    SessionEnded {
        /// The client's handle.
        peer: u32,
        /// Its address.
        addr: String,
        /// Its session number.
        session: u64,
        /// What was counted.
        counters: SessionCounters,
    },
    /// A session ended without goodbye: the client failed, restarted or was replaced.
    SessionLost {
        /// The client's handle.
        peer: u32,
        /// Its address.
        addr: String,
        /// The session number.
        session: u64,
        /// What was counted.
        counters: SessionCounters,
        /// Why.
        why: String,
        /// The client's new incarnation, when it restarted.
        new_incarnation: Option<u64>,
        /// Messages to it that were not acknowledged, handed back by the transport.
        unacked: usize,
        /// RPP's figures for the client when the session was lost (reliable mode).
        rpp: Option<RppFigures>,
    },
    /// A hello was refused.
    Refused {
        /// The client's address.
        addr: String,
        /// Why.
        why: String,
    },
}

/// RPP's counters for one client, as a lost session reports them.
#[derive(Debug, Clone, Serialize)]
pub struct RppFigures {
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// Data packets sent again.
    pub retransmitted: u64,
    /// Retransmission timeouts.
    pub rto_expirations: u64,
    /// Keepalive or persist probes sent.
    pub probes: u64,
    /// Packets declared lost.
    pub lost: u64,
    /// Packets dropped as stale (an earlier incarnation), malformed or beyond the window.
    pub dropped: u64,
    /// Smoothed round-trip time, microseconds.
    pub srtt_us: f64,
    /// Retransmission timeout, microseconds.
    pub rto_us: f64,
    /// Congestion window, bytes (`u64::MAX` without congestion control).
    pub cwnd: u64,
    /// Slow-start threshold, bytes (`u64::MAX` until the first loss).
    pub ssthresh: u64,
    /// Pacing rate, bytes per second (0 before a round trip was measured).
    pub pacing_rate: u64,
    /// Losses that reduced the congestion window, one per recovery period.
    pub congestion_events: u64,
}

impl From<myri_rpp::Stats> for RppFigures {
    fn from(s: myri_rpp::Stats) -> RppFigures {
        RppFigures {
            packets_sent: s.packets_sent,
            packets_received: s.packets_received,
            retransmitted: s.retransmitted,
            rto_expirations: s.rto_expirations,
            probes: s.probes,
            lost: s.lost,
            dropped: s.stale + s.malformed + s.beyond_window + s.bad_crc + s.foreign,
            cwnd: s.cwnd,
            ssthresh: s.ssthresh,
            pacing_rate: s.pacing_rate,
            congestion_events: s.congestion_events,
            srtt_us: s.srtt.as_secs_f64() * 1e6,
            rto_us: s.rto.as_secs_f64() * 1e6,
        }
    }
}

/// Why the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// SIGINT, SIGTERM (the number).
    Signal(i32),
    /// The first session ended ([`ServerConfig::once`]).
    Once,
    /// The stop flag was raised ([`Server::stop_flag`]).
    Stopped,
}

/// What the server did over its life.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerTotals {
    /// Hellos accepted.
    pub sessions_started: u64,
    /// Sessions that ended with goodbye.
    pub sessions_ended: u64,
    /// Sessions that ended otherwise.
    pub sessions_lost: u64,
    /// Everything counted in every session.
    pub counters: SessionCounters,
    /// Messages from peers with no session (a raw client whose hello was lost, or stale
    /// messages of a finished session).
    pub stray: u64,
    /// Peers declared failed after their session had ended (clients that left).
    pub peers_gone: u64,
    /// Bare UDP datagrams echoed.
    pub reference_udp_echoed: u64,
    /// Bare UDP data datagrams counted.
    pub reference_udp_received: u64,
    /// Bytes read from TCP connections.
    pub reference_tcp_bytes: u64,
    /// Bare ring records echoed.
    pub reference_ring_echoed: u64,
    /// Bare ring data records counted.
    pub reference_ring_received: u64,
}

struct StreamState {
    round: u32,
    count: u64,
    sizes: SizeSpec,
    seed: u64,
    verify: bool,
    next: u64,
    received: u64,
    bytes: u64,
    errors: u64,
}

struct Session {
    id: u64,
    incarnation: u64,
    counters: SessionCounters,
    stream: Option<StreamState>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Endpoint,
    BareUdp,
    Tcp,
    Ring,
}

/// A server. See the [module documentation](self).
pub struct Server {
    ep: Endpoint,
    reliable: bool,
    config: ServerConfig,
    poll: Poll,
    events: Events,
    signals: Option<Signals>,
    udp: Option<UdpReflector>,
    tcp: Option<TcpSink>,
    ring: Option<RingReflector>,
    references: References,
    sessions: HashMap<Peer, Session>,
    /// The last session that ended per peer, to answer a repeated goodbye (raw mode).
    ended: HashMap<Peer, (u64, SessionCounters)>,
    outbox: VecDeque<(Peer, myri_transport::Buf)>,
    totals: ServerTotals,
    stop: Arc<AtomicBool>,
    events_out: Vec<ServerEvent>,
    stop_reason: Option<StopReason>,
    /// Whether spinning takes a core another thread waits for.
    cores: CoreShare,
}

impl Server {
    /// Opens the endpoint at `url` and the references beside it.
    pub fn open(url: &str, config: ServerConfig) -> Result<Server, ServeError> {
        let parsed: Url = url.parse().map_err(|e: myri_transport::UrlError| {
            ServeError::Url(url.to_owned(), e.to_string())
        })?;
        if parsed.scheme() == Scheme::Sim {
            return Err(ServeError::Unsupported(Scheme::Sim));
        }
        let options = Options::default()
            .with_reliable(config.reliable)
            .with_accept_unknown_peers(true)
            .with_rpp(super::rpp_config());
        // A second server on a live server's region must not take the client's side: the
        // bare ring's region, held by the live server, says so first.
        let ring = match (&parsed.address, config.references) {
            (Address::Shm { name }, true) => Some(
                RingReflector::create(name).map_err(|e| ServeError::Reference(e.to_string()))?,
            ),
            _ => None,
        };
        let mut ep = Endpoint::open_with(url, options)?;
        let reliable = ep.is_reliable();
        let poll = Poll::new().map_err(|e| ServeError::Io("creating a poller", e))?;
        let registry = poll.registry();
        if parsed.scheme() == Scheme::Udp {
            ep.register(registry, ENDPOINT)?;
        }
        let (mut udp, mut tcp) = (None, None);
        let mut references = References::default();
        if let Some(r) = &ring {
            references.shm_ring = Some(r.path().display().to_string());
        }
        if config.references {
            // No reference runs beside the other schemes.
            if let Address::Udp { .. } = &parsed.address {
                let local: SocketAddr = ep
                    .local_url()
                    .trim_start_matches("udp://")
                    .parse()
                    .map_err(|_| ServeError::Reference("the endpoint's address".into()))?;
                let mut r = UdpReflector::bind(SocketAddr::new(local.ip(), config.reference_port))
                    .map_err(|e| {
                        ServeError::Reference(format!(
                            "binding the bare udp reference on port {}: {e}",
                            config.reference_port
                        ))
                    })?;
                registry
                    .register(r.socket(), BARE_UDP, Interest::READABLE)
                    .map_err(|e| ServeError::Io("registering a socket", e))?;
                let conn_registry = registry
                    .try_clone()
                    .map_err(|e| ServeError::Io("cloning the poll registry", e))?;
                let mut t = TcpSink::bind(
                    local,
                    Some((
                        conn_registry
                            .try_clone()
                            .map_err(|e| ServeError::Io("cloning the poll registry", e))?,
                        TCP_CONN,
                    )),
                )
                .or_else(|_| {
                    TcpSink::bind(
                        SocketAddr::new(local.ip(), 0),
                        Some((conn_registry, TCP_CONN)),
                    )
                })
                .map_err(|e| ServeError::Reference(format!("binding the tcp reference: {e}")))?;
                registry
                    .register(t.listener(), TCP_LISTEN, Interest::READABLE)
                    .map_err(|e| ServeError::Io("registering a socket", e))?;
                references.udp_port = r.local_addr().ok().map(|a| a.port());
                references.tcp_port = t.local_addr().ok().map(|a| a.port());
                (udp, tcp) = (Some(r), Some(t));
            }
        }
        let signals = if config.stop_on_signals {
            let mut s = Signals::new([libc::SIGINT, libc::SIGTERM])
                .map_err(|e| ServeError::Io("watching for SIGINT/SIGTERM", e))?;
            registry
                .register(&mut s, SIGNALS, Interest::READABLE)
                .map_err(|e| ServeError::Io("watching for SIGINT/SIGTERM", e))?;
            Some(s)
        } else {
            None
        };
        Ok(Server {
            ep,
            reliable,
            config,
            poll,
            events: Events::with_capacity(64),
            signals,
            udp,
            tcp,
            ring,
            references,
            sessions: HashMap::new(),
            ended: HashMap::new(),
            outbox: VecDeque::new(),
            totals: ServerTotals::default(),
            stop: Arc::new(AtomicBool::new(false)),
            events_out: Vec::new(),
            stop_reason: None,
            cores: CoreShare::new(),
        })
    }

    /// The transport URL clients use (with the real port).
    pub fn url(&self) -> String {
        let mode = if self.reliable { "" } else { "?reliable=0" };
        format!("{}{mode}", self.ep.local_url())
    }

    /// Whether the endpoint runs RPP.
    pub fn is_reliable(&self) -> bool {
        self.reliable
    }

    /// The references offered.
    pub fn references(&self) -> &References {
        &self.references
    }

    /// A flag that stops [`Server::run`] when raised (from any thread).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Totals so far.
    pub fn totals(&self) -> ServerTotals {
        let mut t = self.totals.clone();
        if let Some(u) = &self.udp {
            (t.reference_udp_echoed, t.reference_udp_received) = (u.echoed, u.sunk);
        }
        if let Some(tcp) = &self.tcp {
            t.reference_tcp_bytes = tcp.bytes;
        }
        if let Some(r) = &self.ring {
            (t.reference_ring_echoed, t.reference_ring_received) = (r.echoed, r.sunk);
        }
        t
    }

    /// The endpoint's counters.
    pub fn endpoint_stats(&self) -> Stats {
        self.ep.stats()
    }

    /// The event that says the server is up.
    pub fn listening_event(&self) -> ServerEvent {
        ServerEvent::Listening {
            url: self.url(),
            reliable: self.reliable,
            incarnation: self.ep.incarnation(),
            references: self.references.clone(),
            pid: std::process::id(),
        }
    }

    /// Serves until a signal, the stop flag, or (with `once`) the end of the first
    /// session; `on_event` hears of every session.
    pub fn run(
        &mut self,
        mut on_event: impl FnMut(&ServerEvent),
    ) -> Result<StopReason, ServeError> {
        let mut hot = Source::Endpoint;
        let mut last_work = Instant::now();
        let mut turn = 0u64;
        loop {
            turn += 1;
            let mut worked = self.poll_source(hot);
            if turn.is_multiple_of(32) || (!worked && turn.is_multiple_of(4)) {
                for s in [Source::Endpoint, Source::BareUdp, Source::Tcp, Source::Ring] {
                    if s != hot && self.poll_source(s) {
                        worked = true;
                        hot = s;
                    }
                }
            }
            if turn.is_multiple_of(16) {
                self.completions();
            }
            for e in self.events_out.drain(..) {
                on_event(&e);
            }
            if let Some(r) = self.stop_reason {
                if r == StopReason::Once {
                    self.finish();
                }
                return Ok(r);
            }
            let now = Instant::now();
            if worked {
                last_work = now;
                continue;
            }
            // Spinning holds a core: while others wait for one, sleep until something
            // arrives instead (a yield does not reach the threads queued on the other
            // cores).
            let idle = now - last_work > self.config.spin || self.cores.contended(now);
            if !idle {
                // A turn with nothing to do gives the core to whatever else is runnable
                // (on two vCPUs: the client and the kernel's network work) instead of
                // spinning through the time slice; on an idle host it returns at once.
                // Not before a sleep, which gives the core away anyway (the yields were
                // a large part of a contended server's profile: RESULTS, "RPP beside
                // TCP: where the longer round trip goes").
                std::thread::yield_now();
            }
            if turn.is_multiple_of(1024) || idle {
                if self.stop.load(Ordering::Relaxed) {
                    self.stop_reason = Some(StopReason::Stopped);
                    continue;
                }
                self.wait(idle)?;
            }
        }
    }

    /// Looks for signals; when `idle`, first drains every source and then sleeps until
    /// something may have arrived.
    fn wait(&mut self, idle: bool) -> Result<(), ServeError> {
        let timeout = if idle {
            // Everything read to the end, so the edge-triggered poll wakes for anything new
            // (a progress pass takes a bounded number of datagrams, and those that were
            // only acknowledgements deliver nothing: progress until it finds nothing).
            loop {
                let mut any = false;
                for s in [Source::Endpoint, Source::BareUdp, Source::Tcp, Source::Ring] {
                    any |= self.poll_source(s);
                }
                // Every socket read (a plain pass may skip one: `progress_all`).
                any |= self.ep.progress_all();
                if !any {
                    break;
                }
            }
            self.completions();
            if !self.events_out.is_empty() || self.stop_reason.is_some() {
                return Ok(());
            }
            let nap = if self.ring.is_some() || self.ep.capabilities().scheme == Scheme::Shm {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(50)
            };
            Some(self.ep.next_timeout().map_or(nap, |t| t.min(nap)))
        } else {
            Some(Duration::ZERO)
        };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ServeError::Io("polling", e)),
        }
        let signalled = self.events.iter().any(|e| e.token() == SIGNALS);
        if signalled
            && let Some(s) = self.signals.as_mut()
            && let Some(sig) = s.pending().next()
        {
            self.stop_reason = Some(StopReason::Signal(sig));
        }
        Ok(())
    }

    /// Lets the last answers go out (until acknowledged, at most a second) before the
    /// endpoint closes.
    fn finish(&mut self) {
        let until = Instant::now() + Duration::from_secs(1);
        while (self.ep.has_unacked() || !self.outbox.is_empty()) && Instant::now() < until {
            self.poll_source(Source::Endpoint);
            self.completions();
        }
    }

    fn poll_source(&mut self, s: Source) -> bool {
        match s {
            Source::Endpoint => self.poll_endpoint(),
            Source::BareUdp => self.udp.as_mut().is_some_and(UdpReflector::poll),
            Source::Tcp => self.tcp.as_mut().is_some_and(TcpSink::poll),
            Source::Ring => self.ring.as_mut().is_some_and(RingReflector::poll),
        }
    }

    fn poll_endpoint(&mut self) -> bool {
        let mut worked = false;
        while let Some((peer, buf)) = self.outbox.pop_front() {
            match self.ep.send(peer, buf) {
                Ok(_) => worked = true,
                Err(e) if e.error.is_would_block() => {
                    self.outbox.push_front((peer, e.buf));
                    break;
                }
                // The peer failed: its completion tells.
                Err(_) => {}
            }
        }
        for _ in 0..256 {
            let Some(d) = self.ep.recv() else { break };
            worked = true;
            self.handle(d.peer, &d.data);
            self.ep.recycle(d);
        }
        worked
    }

    fn send(&mut self, peer: Peer, bytes: &[u8]) {
        let mut buf = self.ep.alloc(bytes.len());
        buf.copy_from_slice(bytes);
        if !self.outbox.is_empty() {
            self.outbox.push_back((peer, buf));
            return;
        }
        match self.ep.send(peer, buf) {
            Ok(_) => {}
            Err(e) if e.error.is_would_block() => self.outbox.push_back((peer, e.buf)),
            Err(_) => {}
        }
    }

    fn send_control(&mut self, peer: Peer, c: &Control) {
        self.send(peer, &wire::encode_control(c));
    }

    fn addr(&self, peer: Peer) -> String {
        self.ep.peer_url(peer).unwrap_or_default()
    }

    fn handle(&mut self, peer: Peer, data: &[u8]) {
        match wire::header(data) {
            Some(h) if h.kind == KIND_PING => {
                self.send(peer, data);
                match self.sessions.get_mut(&peer) {
                    Some(s) => s.counters.echoed += 1,
                    None => self.totals.stray += 1,
                }
                self.totals.counters.echoed += 1;
            }
            Some(h) => self.data(peer, h, data),
            None => match wire::control(data) {
                Some(Ok(c)) => self.control(peer, c),
                _ => {
                    self.totals.counters.malformed += 1;
                    if let Some(s) = self.sessions.get_mut(&peer) {
                        s.counters.malformed += 1;
                    }
                }
            },
        }
    }

    fn data(&mut self, peer: Peer, h: wire::Header, data: &[u8]) {
        let reliable = self.reliable;
        let Some(s) = self.sessions.get_mut(&peer) else {
            self.totals.stray += 1;
            return;
        };
        let Some(st) = s.stream.as_mut() else {
            s.counters.out_of_order += 1;
            self.totals.counters.out_of_order += 1;
            return;
        };
        let c = &mut s.counters;
        let t = &mut self.totals.counters;
        let mut bad = |field: fn(&mut SessionCounters) -> &mut u64| {
            *field(c) += 1;
            *field(t) += 1;
            st.errors += 1;
        };
        if h.round != st.round as u8 {
            bad(|c| &mut c.out_of_order);
            return;
        }
        if (reliable && h.seq != st.next) || h.seq < st.next {
            bad(|c| &mut c.out_of_order);
        }
        st.next = st.next.max(h.seq + 1);
        let want = st.sizes.size_of(st.seed, h.seq).max(wire::HEADER_LEN);
        if data.len() != want {
            bad(|c| &mut c.bad_length);
        } else if st.verify && !wire::check_pattern(&data[wire::HEADER_LEN..], st.seed, h.seq) {
            bad(|c| &mut c.bad_content);
        }
        st.received += 1;
        st.bytes += data.len() as u64;
        c.received += 1;
        c.bytes += data.len() as u64;
        t.received += 1;
        t.bytes += data.len() as u64;
        if reliable && st.received == st.count {
            let ack = Control::StreamAck {
                round: st.round,
                done: true,
                received: st.received,
                bytes: st.bytes,
                errors: st.errors,
            };
            self.send_control(peer, &ack);
        }
    }

    fn control(&mut self, peer: Peer, c: Control) {
        match c {
            Control::Hello {
                version,
                session,
                reliable,
                incarnation,
            } => self.hello(peer, version, session, reliable, incarnation),
            Control::StreamStart {
                round,
                count,
                sizes,
                seed,
                verify,
            } => {
                let Some(s) = self.sessions.get_mut(&peer) else {
                    self.totals.stray += 1;
                    return;
                };
                let repeat = s.stream.as_ref().is_some_and(|st| st.round == round);
                if !repeat {
                    s.stream = Some(StreamState {
                        round,
                        count,
                        sizes,
                        seed,
                        verify,
                        next: 0,
                        received: 0,
                        bytes: 0,
                        errors: 0,
                    });
                }
                let st = s.stream.as_ref().expect("just set");
                let ack = Control::StreamAck {
                    round,
                    done: false,
                    received: st.received,
                    bytes: st.bytes,
                    errors: st.errors,
                };
                self.send_control(peer, &ack);
                if self.reliable && count == 0 && !repeat {
                    // An empty stream: its end is its start.
                    let mut end = ack;
                    if let Control::StreamAck { done, .. } = &mut end {
                        *done = true;
                    }
                    self.send_control(peer, &end);
                }
            }
            Control::StreamEnd { round } => {
                let ack = match self.sessions.get(&peer).and_then(|s| s.stream.as_ref()) {
                    Some(st) if st.round == round => Control::StreamAck {
                        round,
                        done: true,
                        received: st.received,
                        bytes: st.bytes,
                        errors: st.errors,
                    },
                    _ => Control::StreamAck {
                        round,
                        done: true,
                        received: 0,
                        bytes: 0,
                        errors: 0,
                    },
                };
                self.send_control(peer, &ack);
            }
            Control::Bye { session } => {
                let counters = match self.sessions.get(&peer) {
                    Some(s) if s.id == session => {
                        let s = self.sessions.remove(&peer).expect("present");
                        self.totals.sessions_ended += 1;
                        self.events_out.push(ServerEvent::SessionEnded {
                            peer: peer.0,
                            addr: self.addr(peer),
                            session,
                            counters: s.counters.clone(),
                        });
                        self.ended.insert(peer, (session, s.counters.clone()));
                        if self.config.once {
                            self.stop_reason = Some(StopReason::Once);
                        }
                        s.counters
                    }
                    // A goodbye repeated because our answer was lost.
                    _ => match self.ended.get(&peer) {
                        Some((id, c)) if *id == session => c.clone(),
                        _ => return,
                    },
                };
                self.send_control(peer, &Control::ByeAck { session, counters });
            }
            _ => {
                self.totals.counters.malformed += 1;
            }
        }
    }

    fn hello(&mut self, peer: Peer, version: u32, session: u64, reliable: bool, incarnation: u64) {
        let addr = self.addr(peer);
        let refuse = if version != wire::VERSION {
            Some(format!(
                "protocol version {version}; this server speaks {}",
                wire::VERSION
            ))
        } else if reliable != self.reliable {
            Some(format!(
                "this server runs {}",
                if self.reliable { "reliable" } else { "raw" }
            ))
        } else {
            None
        };
        if let Some(why) = refuse {
            self.events_out.push(ServerEvent::Refused {
                addr,
                why: why.clone(),
            });
            self.send_control(peer, &Control::Refused { why });
            return;
        }
        // A restart or failure of the peer that came before this hello ends its old
        // session first.
        self.completions();
        match self.sessions.get(&peer) {
            Some(s) if s.id == session => {}
            Some(_) => {
                self.lose(
                    peer,
                    "replaced by a new session from the same address".into(),
                    None,
                    0,
                );
                self.start(peer, addr, session, incarnation);
            }
            None => self.start(peer, addr, session, incarnation),
        }
        let ack = Control::HelloAck {
            version: wire::VERSION,
            session,
            incarnation: self.ep.incarnation(),
            references: self.references.clone(),
        };
        self.send_control(peer, &ack);
    }

    fn start(&mut self, peer: Peer, addr: String, session: u64, incarnation: u64) {
        self.sessions.insert(
            peer,
            Session {
                id: session,
                incarnation,
                counters: SessionCounters::default(),
                stream: None,
            },
        );
        self.totals.sessions_started += 1;
        self.events_out.push(ServerEvent::SessionStarted {
            peer: peer.0,
            addr,
            session,
            incarnation,
        });
    }

    /// Ends `peer`'s session, if it has one, as lost.
    fn lose(&mut self, peer: Peer, why: String, new_incarnation: Option<u64>, unacked: usize) {
        let Some(s) = self.sessions.remove(&peer) else {
            self.totals.peers_gone += u64::from(new_incarnation.is_none());
            return;
        };
        self.totals.sessions_lost += 1;
        self.events_out.push(ServerEvent::SessionLost {
            peer: peer.0,
            addr: self.addr(peer),
            session: s.id,
            counters: s.counters,
            why,
            new_incarnation,
            unacked,
            rpp: self.ep.peer_stats(peer).map(RppFigures::from),
        });
        if self.config.once {
            self.stop_reason = Some(StopReason::Once);
        }
    }

    fn completions(&mut self) {
        while let Some(c) = self.ep.poll_completion() {
            match c {
                Completion::PeerFailed { peer, why, unsent } => {
                    self.outbox.retain(|(p, _)| *p != peer);
                    self.lose(peer, format!("failed: {why}"), None, unsent.len());
                }
                Completion::PeerRestarted {
                    peer,
                    incarnation,
                    unacked,
                } => {
                    let old = self.sessions.get(&peer).map(|s| s.incarnation);
                    self.lose(
                        peer,
                        format!(
                            "the client restarted (incarnation {} -> {incarnation})",
                            old.unwrap_or(0)
                        ),
                        Some(incarnation),
                        unacked.len(),
                    );
                }
                Completion::PeerClosed { peer, unsent } => {
                    self.lose(
                        peer,
                        "the client closed its connection".into(),
                        None,
                        unsent.len(),
                    );
                }
                // Sends, new peers, connections (and completions of later versions) need
                // nothing here.
                _ => {}
            }
        }
    }
}
