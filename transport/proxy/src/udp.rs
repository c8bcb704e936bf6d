//! The proxy's event loop: sockets through `mio`, one fault pipe per direction.
//!
//! Clients send to the listening socket. Each client address gets a session with its own
//! upstream socket connected to the server, like a NAT: the server sees one address per
//! client, answers it, and the proxy sends the answer back to that client from the
//! listening address. Any UDP application works through it unchanged, as long as the
//! client speaks first. For peers that both may speak first, `upstream_bind` fixes the
//! upstream socket's address (so the server can be told where to send) and `client` pins
//! the one client; there is then a single session, open from the start.
//!
//! This is the outermost driver: it reads the clock and hands `now` to the pipes, which
//! make every fault decision. Timers have the resolution of `epoll` (a millisecond); a
//! deadline less than two milliseconds away is waited for by polling without sleeping.

use super::kernel;
use super::pipe::{FaultPipe, PipeConfig, PipeConfigError};
use super::stats::{DirectionStats, ProxyStats};
use super::url::udp_url;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use myri_device::Time;
use signal_hook_mio::v1_0::Signals;
use slab::Slab;
use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use thiserror::Error;

const LISTEN: Token = Token(0);
const WAKER: Token = Token(1);
const SIGNALS: Token = Token(2);
const FIRST_SESSION: usize = 16;

/// The largest UDP payload, and then some: no datagram is ever truncated.
pub(crate) const MAX_DATAGRAM: usize = 65_536;

/// What the proxy does: where it listens, where it forwards, and the faults.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    /// Where clients send (port 0 picks a free port; see [`UdpProxy::listen_addr`]).
    pub listen: SocketAddr,
    /// The server.
    pub upstream: SocketAddr,
    /// Faults on datagrams from the clients to the server.
    pub to_server: PipeConfig,
    /// Faults on datagrams from the server to the clients.
    pub to_client: PipeConfig,
    /// Seed of every fault decision.
    pub seed: u64,
    /// A session with no datagram either way for this long is closed.
    pub idle_timeout: Duration,
    /// The most sessions open at once; datagrams from further clients are dropped.
    pub max_clients: usize,
    /// Fixes the local address of the upstream socket (single-session mode).
    pub upstream_bind: Option<SocketAddr>,
    /// Accepts only this client; with `upstream_bind`, datagrams from the server go to it
    /// even before it has spoken.
    pub client: Option<SocketAddr>,
}

impl ProxyConfig {
    /// A clean proxy from `listen` to `upstream`: no faults, seed 1, sessions closed after
    /// two minutes idle, at most 1024 clients.
    pub fn new(listen: SocketAddr, upstream: SocketAddr) -> ProxyConfig {
        ProxyConfig {
            listen,
            upstream,
            to_server: PipeConfig::clean(),
            to_client: PipeConfig::clean(),
            seed: 1,
            idle_timeout: Duration::from_secs(120),
            max_clients: 1024,
            upstream_bind: None,
            client: None,
        }
    }

    /// The same faults both ways.
    pub fn with_faults(mut self, faults: PipeConfig) -> ProxyConfig {
        self.to_server = faults;
        self.to_client = faults;
        self
    }
}

/// A proxy that could not be set up or could not go on.
#[derive(Debug, Error)]
pub enum ProxyError {
    /// A fault setting that cannot be.
    #[error(transparent)]
    Config(#[from] PipeConfigError),
    /// Zero clients allowed.
    #[error("max clients must be at least 1")]
    NoClients,
    /// The listening address is the server's.
    #[error("--listen and --to are the same address {url}: the proxy would forward to itself")]
    ForwardsToItself {
        /// The address.
        url: String,
    },
    /// A mesh of no peers, or of more than [`MAX_MESH_PEERS`](crate::MAX_MESH_PEERS).
    #[error("a mesh has 1 to {max} peers, not {peers}")]
    MeshSize {
        /// The peers asked for.
        peers: usize,
        /// The most.
        max: usize,
    },
    /// A mesh peer's real address has port 0.
    #[error("mesh peer {rank}: its address {url} has port 0: datagrams cannot be sent there")]
    MeshPortZero {
        /// The peer.
        rank: usize,
        /// The address.
        url: String,
    },
    /// An address given twice among a mesh's real and shadow addresses.
    #[error(
        "{url} is given twice among the mesh's addresses: each peer needs its own real and shadow address"
    )]
    MeshDuplicate {
        /// The address.
        url: String,
    },
    /// Consecutive ports from a base that run past 65535.
    #[error("{peers} consecutive ports from {url} run past port 65535")]
    MeshPorts {
        /// The base address.
        url: String,
        /// The peers.
        peers: usize,
    },
    /// The server's port is 0.
    #[error("the server address {url} has port 0: datagrams cannot be sent there")]
    UpstreamPortZero {
        /// The address.
        url: String,
    },
    /// The listening socket could not be bound (port in use, address not on this host).
    #[error("cannot listen on {url}: {source}")]
    Listen {
        /// The address.
        url: String,
        /// Why.
        source: io::Error,
    },
    /// The upstream socket could not be bound to `upstream_bind`.
    #[error("cannot bind the upstream socket to {url}: {source}")]
    UpstreamBind {
        /// The address.
        url: String,
        /// Why.
        source: io::Error,
    },
    /// No route to the server.
    #[error("the server {url} is unreachable: {source}")]
    Unreachable {
        /// The address.
        url: String,
        /// Why.
        source: io::Error,
    },
    /// The event loop could not be made or failed.
    #[error("event loop: {0}")]
    Poll(io::Error),
    /// The signal handlers could not be installed.
    #[error("cannot watch for SIGINT/SIGTERM: {0}")]
    Signals(io::Error),
    /// A socket failed in a way that stops the proxy.
    #[error("socket error on {url}: {source}")]
    Socket {
        /// Which socket.
        url: String,
        /// Why.
        source: io::Error,
    },
}

impl ProxyError {
    /// Whether this is a bad argument or a set-up that could not be made (exit code 2), as
    /// opposed to a failure while running.
    pub fn is_setup(&self) -> bool {
        !matches!(self, ProxyError::Poll(_) | ProxyError::Socket { .. })
    }
}

/// When a run stops by itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Stop after this long; datagrams still delayed or held are counted unsent.
    pub duration: Option<Duration>,
    /// Stop reading after this many datagrams (both directions), and stop once all of them
    /// have been forwarded or dropped.
    pub packets: Option<u64>,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// SIGINT or SIGTERM (the signal number).
    Signal(i32),
    /// [`ProxyHandle::stop`].
    Requested,
    /// [`Limits::duration`] ran out.
    Duration,
    /// [`Limits::packets`] were all handled.
    Packets,
}

/// Something worth telling the user while the proxy runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ProxyEvent<'a> {
    /// The periodic counters.
    Report(&'a ProxyStats),
    /// A client's session opened.
    SessionOpened {
        /// The session number.
        id: u64,
        /// The client (`None` for a fixed upstream socket whose client has not spoken).
        client: Option<SocketAddr>,
        /// The upstream socket's address, as the server sees it.
        upstream_local: SocketAddr,
    },
    /// A session closed after its idle timeout.
    SessionClosed {
        /// The session number.
        id: u64,
        /// The client.
        client: Option<SocketAddr>,
    },
    /// A session's upstream socket could not be made; its datagrams are dropped.
    SessionFailed {
        /// The client.
        client: SocketAddr,
        /// Why.
        error: String,
    },
    /// The server's host answered "port unreachable" (reported once until the server
    /// answers again).
    UpstreamRefused {
        /// The session number.
        id: u64,
    },
}

/// Stops a running proxy and reads its counters from another thread (`S` is
/// [`ProxyStats`], or [`MeshStats`](crate::MeshStats) for a [`MeshProxy`](crate::MeshProxy)).
#[derive(Clone)]
pub struct ProxyHandle<S = ProxyStats> {
    pub(crate) waker: Arc<Waker>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) stats: Arc<Mutex<S>>,
}

impl<S: Clone> ProxyHandle<S> {
    /// Asks the proxy to stop; [`UdpProxy::run`] returns [`StopReason::Requested`].
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        // A failed wake means the loop is gone already.
        let _ = self.waker.wake();
    }

    /// The counters as of the proxy's last turn of its loop.
    pub fn stats(&self) -> S {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Session {
    id: u64,
    client: Option<SocketAddr>,
    socket: UdpSocket,
    last_active: Time,
    /// Fixed sessions (`upstream_bind`) never close.
    fixed: bool,
    /// "Port unreachable" was reported and the server has not answered since.
    refused_reported: bool,
    /// The socket's inode, which names it in `/proc/net/udp` (see [`kernel`]).
    inode: Option<u64>,
}

/// The fault-injecting UDP proxy. See the module documentation.
pub struct UdpProxy {
    config: ProxyConfig,
    poll: Poll,
    listen: UdpSocket,
    listen_addr: SocketAddr,
    sessions: Slab<Session>,
    by_client: HashMap<SocketAddr, usize>,
    by_id: HashMap<u64, usize>,
    next_id: u64,
    to_server: FaultPipe<u64>,
    to_client: FaultPipe<u64>,
    stats: ProxyStats,
    send_failed: [u64; 2],
    signals: StopSignals,
    shared: ProxyHandle,
    start: Instant,
    buf: Vec<u8>,
    /// The listening socket's inode (see [`kernel`]).
    listen_inode: Option<u64>,
    /// What the kernel dropped at session sockets since closed.
    closed_drops: u64,
    /// When the kernel's drop counts were last read (at most every
    /// [`KERNEL_DROPS_EVERY`] while running, and at the end).
    drops_read_at: Option<Time>,
}

/// How often the kernel's drop counts are read while the proxy runs.
pub(crate) const KERNEL_DROPS_EVERY: Duration = Duration::from_millis(100);

fn unspecified_like(addr: SocketAddr) -> SocketAddr {
    let ip = match addr {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

pub(crate) fn is_refused(e: &io::Error) -> bool {
    e.kind() == ErrorKind::ConnectionRefused
}

impl UdpProxy {
    /// Checks the configuration, binds the listening socket, and checks that the server's
    /// address can be routed to (UDP has no handshake: a server that is not running shows
    /// only later, as [`ProxyStats::upstream_refused`]).
    pub fn bind(config: ProxyConfig) -> Result<UdpProxy, ProxyError> {
        config.to_server.validate()?;
        config.to_client.validate()?;
        if config.max_clients == 0 {
            return Err(ProxyError::NoClients);
        }
        let upstream_url = udp_url(config.upstream);
        if config.upstream.port() == 0 {
            return Err(ProxyError::UpstreamPortZero { url: upstream_url });
        }
        if config.listen == config.upstream {
            return Err(ProxyError::ForwardsToItself { url: upstream_url });
        }
        // Is there a route to the server at all?
        let probe = std::net::UdpSocket::bind(unspecified_like(config.upstream))
            .and_then(|s| s.connect(config.upstream))
            .map_err(|source| ProxyError::Unreachable {
                url: upstream_url.clone(),
                source,
            });
        probe?;
        let mut listen = UdpSocket::bind(config.listen).map_err(|source| ProxyError::Listen {
            url: udp_url(config.listen),
            source,
        })?;
        let listen_addr = listen.local_addr().map_err(|source| ProxyError::Listen {
            url: udp_url(config.listen),
            source,
        })?;
        kernel::enlarge_buffers(&listen, kernel::SOCKET_BUFFER);
        let listen_inode = kernel::socket_inode(&listen);
        let poll = Poll::new().map_err(ProxyError::Poll)?;
        poll.registry()
            .register(&mut listen, LISTEN, Interest::READABLE)
            .map_err(ProxyError::Poll)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(ProxyError::Poll)?;
        let stats = ProxyStats {
            listen: udp_url(listen_addr),
            upstream: upstream_url,
            seed: config.seed,
            ..ProxyStats::default()
        };
        let mut proxy = UdpProxy {
            to_server: FaultPipe::new(config.to_server, config.seed, 0),
            to_client: FaultPipe::new(config.to_client, config.seed, 1),
            config,
            poll,
            listen,
            listen_addr,
            sessions: Slab::new(),
            by_client: HashMap::new(),
            by_id: HashMap::new(),
            next_id: 0,
            shared: ProxyHandle {
                waker: Arc::new(waker),
                stop: Arc::new(AtomicBool::new(false)),
                stats: Arc::new(Mutex::new(stats.clone())),
            },
            stats,
            send_failed: [0; 2],
            signals: StopSignals::default(),
            start: Instant::now(),
            buf: vec![0; MAX_DATAGRAM],
            listen_inode,
            closed_drops: 0,
            drops_read_at: None,
        };
        if let Some(bind) = proxy.config.upstream_bind {
            let url = udp_url(bind);
            let client = proxy.config.client;
            proxy
                .open_session(Time::ZERO, client, true)
                .map_err(|source| {
                    if source.kind() == ErrorKind::AddrInUse
                        || source.kind() == ErrorKind::AddrNotAvailable
                    {
                        ProxyError::UpstreamBind { url, source }
                    } else {
                        ProxyError::Unreachable {
                            url: udp_url(proxy.config.upstream),
                            source,
                        }
                    }
                })?;
        }
        proxy.publish();
        Ok(proxy)
    }

    /// The address clients send to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// The upstream socket's address of the fixed session (with `upstream_bind`).
    pub fn fixed_upstream_addr(&self) -> Option<SocketAddr> {
        self.sessions
            .iter()
            .find(|(_, s)| s.fixed)
            .and_then(|(_, s)| s.socket.local_addr().ok())
    }

    /// A handle to stop the proxy and read its counters from another thread.
    pub fn handle(&self) -> ProxyHandle {
        self.shared.clone()
    }

    /// Makes SIGINT and SIGTERM stop the run (with [`StopReason::Signal`]) instead of the
    /// process, so the counters can be printed.
    pub fn stop_on_signals(&mut self) -> Result<(), ProxyError> {
        self.signals.register(&self.poll, SIGNALS)
    }

    /// The counters now.
    pub fn stats(&self) -> ProxyStats {
        self.stats.clone()
    }

    fn now(&self) -> Time {
        time_since(self.start)
    }

    /// Runs until a limit, a signal or [`ProxyHandle::stop`]; calls `on_event` for the
    /// periodic report (every `report_every`, if given) and for session events. Datagrams
    /// still in the pipes at the end are counted as `unsent_at_exit`.
    pub fn run(
        &mut self,
        limits: Limits,
        report_every: Option<Duration>,
        mut on_event: impl FnMut(ProxyEvent<'_>),
    ) -> Result<StopReason, ProxyError> {
        let mut events = Events::with_capacity(256);
        let report_every = report_every.filter(|d| !d.is_zero());
        let start = self.now();
        let end = limits.duration.map(|d| start + d);
        let mut next_report = report_every.map(|d| start + d);
        let sweep_every =
            (self.config.idle_timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        let mut next_sweep = start + sweep_every;
        let mut published = start;
        let reason = loop {
            let now = self.now();
            self.flush(now);
            if now >= next_sweep {
                self.sweep(now, &mut on_event);
                next_sweep = now + sweep_every;
            }
            if let Some(at) = next_report.filter(|&at| now >= at) {
                self.refresh(now);
                on_event(ProxyEvent::Report(&self.stats));
                next_report = report_every.map(|d| (at + d).max(now));
            }
            if let Some(signal) = self.signals.caught() {
                break StopReason::Signal(signal);
            }
            if self.shared.stop.load(Ordering::Acquire) {
                break StopReason::Requested;
            }
            if end.is_some_and(|end| now >= end) {
                break StopReason::Duration;
            }
            let read_all = limits.packets.is_some_and(|n| self.received() >= n);
            if read_all && self.to_server.pending() + self.to_client.pending() == 0 {
                break StopReason::Packets;
            }
            let deadline = [
                self.to_server.poll_timeout(),
                self.to_client.poll_timeout(),
                end,
                next_report,
                Some(next_sweep),
            ]
            .into_iter()
            .flatten()
            .min();
            let timeout = deadline.map(|d| poll_timeout(d, now));
            // Other threads see the counters before the loop sleeps, and at least every
            // millisecond while it is busy.
            if timeout != Some(Duration::ZERO)
                || now.saturating_since(published) >= Duration::from_millis(1)
            {
                self.publish_at(now);
                published = now;
            }
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ProxyError::Poll(e)),
            }
            for event in events.iter() {
                match event.token() {
                    LISTEN => self.read_clients(limits.packets, &mut on_event)?,
                    WAKER => {}
                    SIGNALS => self.signals.read(),
                    Token(t) => self.read_server(t - FIRST_SESSION, limits.packets, &mut on_event),
                }
            }
        };
        self.to_server.discard();
        self.to_client.discard();
        self.drops_read_at = None;
        self.publish();
        Ok(reason)
    }

    fn received(&self) -> u64 {
        self.to_server.counters().received + self.to_client.counters().received
    }

    fn read_clients(
        &mut self,
        limit: Option<u64>,
        on_event: &mut impl FnMut(ProxyEvent<'_>),
    ) -> Result<(), ProxyError> {
        loop {
            if limit.is_some_and(|n| self.received() >= n) {
                return Ok(());
            }
            let (len, from) = match self.listen.recv_from(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier answer to a client that went away.
                Err(e) if is_refused(&e) || e.kind() == ErrorKind::ConnectionReset => continue,
                Err(source) => {
                    return Err(ProxyError::Socket {
                        url: udp_url(self.listen_addr),
                        source,
                    });
                }
            };
            let now = self.now();
            let Some(key) = self.session_for(now, from, on_event) else {
                continue;
            };
            let session = &mut self.sessions[key];
            session.last_active = now;
            let id = session.id;
            self.to_server.push(now, id, self.buf[..len].to_vec());
            self.flush(now);
        }
    }

    /// The session of a client, opened if need be; `None` if its datagram is refused.
    fn session_for(
        &mut self,
        now: Time,
        from: SocketAddr,
        on_event: &mut impl FnMut(ProxyEvent<'_>),
    ) -> Option<usize> {
        if let Some(&key) = self.by_client.get(&from) {
            return Some(key);
        }
        if self.config.client.is_some_and(|c| c != from) {
            self.stats.sessions.refused_not_client += 1;
            return None;
        }
        // The fixed session takes the first client that speaks.
        if let Some((key, s)) = self
            .sessions
            .iter_mut()
            .find(|(_, s)| s.fixed && s.client.is_none())
        {
            s.client = Some(from);
            self.by_client.insert(from, key);
            return Some(key);
        }
        let limit = if self.config.upstream_bind.is_some() {
            1
        } else {
            self.config.max_clients
        };
        if self.sessions.len() >= limit {
            self.stats.sessions.refused_full += 1;
            return None;
        }
        match self.open_session(now, Some(from), false) {
            Ok(key) => {
                let s = &self.sessions[key];
                on_event(ProxyEvent::SessionOpened {
                    id: s.id,
                    client: s.client,
                    upstream_local: s.socket.local_addr().unwrap_or(unspecified_like(from)),
                });
                Some(key)
            }
            Err(e) => {
                self.stats.sessions.refused_no_socket += 1;
                on_event(ProxyEvent::SessionFailed {
                    client: from,
                    error: e.to_string(),
                });
                None
            }
        }
    }

    fn open_session(
        &mut self,
        now: Time,
        client: Option<SocketAddr>,
        fixed: bool,
    ) -> io::Result<usize> {
        let local = self
            .config
            .upstream_bind
            .filter(|_| fixed)
            .unwrap_or_else(|| unspecified_like(self.config.upstream));
        let mut socket = UdpSocket::bind(local)?;
        socket.connect(self.config.upstream)?;
        kernel::enlarge_buffers(&socket, kernel::SOCKET_BUFFER);
        let inode = kernel::socket_inode(&socket);
        let entry = self.sessions.vacant_entry();
        let key = entry.key();
        self.poll.registry().register(
            &mut socket,
            Token(FIRST_SESSION + key),
            Interest::READABLE,
        )?;
        let id = self.next_id;
        self.next_id += 1;
        entry.insert(Session {
            id,
            client,
            socket,
            last_active: now,
            fixed,
            refused_reported: false,
            inode,
        });
        if let Some(c) = client {
            self.by_client.insert(c, key);
        }
        self.by_id.insert(id, key);
        self.stats.sessions.opened += 1;
        Ok(key)
    }

    fn read_server(
        &mut self,
        key: usize,
        limit: Option<u64>,
        on_event: &mut impl FnMut(ProxyEvent<'_>),
    ) {
        loop {
            if limit.is_some_and(|n| self.received() >= n) {
                return;
            }
            let Some(session) = self.sessions.get_mut(key) else {
                return;
            };
            let len = match session.socket.recv(&mut self.buf) {
                Ok(len) => len,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if is_refused(&e) => {
                    self.stats.upstream_refused += 1;
                    if !session.refused_reported {
                        session.refused_reported = true;
                        on_event(ProxyEvent::UpstreamRefused { id: session.id });
                    }
                    continue;
                }
                // Any other error belongs to this one socket: count it as a failed
                // receive would be, and keep serving the other sessions.
                Err(_) => return,
            };
            let now = time_since(self.start);
            session.last_active = now;
            session.refused_reported = false;
            if session.client.is_none() {
                self.stats.sessions.refused_no_client += 1;
                continue;
            }
            let id = session.id;
            self.to_client.push(now, id, self.buf[..len].to_vec());
            self.flush(now);
        }
    }

    /// Sends everything due at `now`.
    fn flush(&mut self, now: Time) {
        while let Some(t) = self.to_server.poll_transmit(now) {
            let session = self
                .by_id
                .get(&t.tag)
                .and_then(|&k| self.sessions.get_mut(k));
            let sent = match session {
                Some(s) => match s.socket.send(&t.bytes) {
                    Ok(_) => true,
                    Err(e) => {
                        if is_refused(&e) {
                            self.stats.upstream_refused += 1;
                        }
                        false
                    }
                },
                None => false,
            };
            if !sent {
                self.send_failed[0] += 1;
            }
        }
        while let Some(t) = self.to_client.poll_transmit(now) {
            let client = self
                .by_id
                .get(&t.tag)
                .and_then(|&k| self.sessions.get(k))
                .and_then(|s| s.client);
            let sent = client.is_some_and(|c| self.listen.send_to(&t.bytes, c).is_ok());
            if !sent {
                self.send_failed[1] += 1;
            }
        }
    }

    /// Closes the sessions idle for longer than the idle timeout.
    fn sweep(&mut self, now: Time, on_event: &mut impl FnMut(ProxyEvent<'_>)) {
        let idle = self.config.idle_timeout;
        let stale: Vec<usize> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.fixed && now.saturating_since(s.last_active) >= idle)
            .map(|(k, _)| k)
            .collect();
        for key in stale {
            let mut s = self.sessions.remove(key);
            self.closed_drops += s.inode.and_then(kernel::socket_drops).unwrap_or(0);
            // Deregistering a socket about to be closed cannot matter if it fails.
            let _ = self.poll.registry().deregister(&mut s.socket);
            if let Some(c) = s.client {
                self.by_client.remove(&c);
            }
            self.by_id.remove(&s.id);
            self.stats.sessions.closed_idle += 1;
            on_event(ProxyEvent::SessionClosed {
                id: s.id,
                client: s.client,
            });
        }
    }

    fn refresh(&mut self, now: Time) {
        let kernel_drops = [
            self.stats.to_server.kernel_drops,
            self.stats.to_client.kernel_drops,
        ];
        let direction = |p: &FaultPipe<u64>, send_failed, kernel_drops| DirectionStats {
            pipe: *p.counters(),
            send_failed,
            pending: p.pending() as u64,
            kernel_drops,
        };
        self.stats.elapsed_ms = now.as_nanos() / 1_000_000;
        self.stats.sessions.active = self.sessions.len() as u64;
        self.stats.to_server = direction(&self.to_server, self.send_failed[0], kernel_drops[0]);
        self.stats.to_client = direction(&self.to_client, self.send_failed[1], kernel_drops[1]);
        let due = self
            .drops_read_at
            .is_none_or(|at| now.saturating_since(at) >= KERNEL_DROPS_EVERY);
        if due {
            self.read_kernel_drops(now);
        }
    }

    /// Reads what the kernel dropped at the listening socket (datagrams to the server) and
    /// at the session sockets (datagrams to the clients).
    fn read_kernel_drops(&mut self, now: Time) {
        self.drops_read_at = Some(now);
        if let Some(d) = self.listen_inode.and_then(kernel::socket_drops) {
            self.stats.to_server.kernel_drops = d;
        }
        let open: u64 = self
            .sessions
            .iter()
            .filter_map(|(_, s)| s.inode.and_then(kernel::socket_drops))
            .sum();
        self.stats.to_client.kernel_drops = self.closed_drops + open;
    }

    fn publish_at(&mut self, now: Time) {
        self.refresh(now);
        let mut shared = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The addresses and the seed were set at bind time and never change.
        let s = &self.stats;
        shared.elapsed_ms = s.elapsed_ms;
        shared.sessions = s.sessions;
        shared.upstream_refused = s.upstream_refused;
        shared.to_server = s.to_server;
        shared.to_client = s.to_client;
    }

    fn publish(&mut self) {
        let now = self.now();
        self.publish_at(now);
    }
}

/// The proxy's clock: time since it started, as the pipes take it.
pub(crate) fn time_since(start: Instant) -> Time {
    Time::from_nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// SIGINT and SIGTERM as a reason to stop an event loop (once asked for), rather than
/// the end of the process: the run then stops and its counters can be printed.
#[derive(Default)]
pub(crate) struct StopSignals {
    signals: Option<Signals>,
    caught: Option<i32>,
}

impl StopSignals {
    /// Registers SIGINT and SIGTERM with `poll` under `token`.
    pub(crate) fn register(&mut self, poll: &Poll, token: Token) -> Result<(), ProxyError> {
        let mut signals =
            Signals::new([libc::SIGINT, libc::SIGTERM]).map_err(ProxyError::Signals)?;
        poll.registry()
            .register(&mut signals, token, Interest::READABLE)
            .map_err(ProxyError::Signals)?;
        self.signals = Some(signals);
        Ok(())
    }

    /// Takes the signals that arrived (the first one is kept).
    pub(crate) fn read(&mut self) {
        if let Some(signals) = self.signals.as_mut() {
            for signal in signals.pending() {
                self.caught.get_or_insert(signal);
            }
        }
    }

    /// The first signal caught, if any.
    pub(crate) fn caught(&self) -> Option<i32> {
        self.caught
    }
}

/// How long an event loop may sleep in epoll to wake at `deadline`: epoll rounds up to
/// whole milliseconds, so it sleeps a millisecond short of the deadline (not at all under
/// two) and polls the rest.
pub(crate) fn poll_timeout(deadline: Time, now: Time) -> Duration {
    let left = deadline.saturating_since(now);
    if left < Duration::from_millis(2) {
        Duration::ZERO
    } else {
        left - Duration::from_millis(1)
    }
}
