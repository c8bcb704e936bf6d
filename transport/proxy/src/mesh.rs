//! Mesh mode: the proxy between every pair of N peers, each of which may send to any other
//! first (the ranks of an MPI job), with every peer still seeing each other peer at one
//! fixed address of its own.
//!
//! Peer `i` has a real address `R_i`, where it receives, and a shadow address `S_i`, a
//! proxy socket that the others are told is `i`'s address (the libfabric provider's
//! `FI_MYRI_RANK_PORTS` binds `R_i` and advertises `S_i`). A datagram that arrives at
//! `S_i` from `R_j` (the sender is known by its source address) goes, after the faults,
//! from the socket `S_j` to `R_i`: `i` sees it coming from `S_j`, `j`'s advertised address,
//! and `i`'s answers to `S_j` reach `j` from `S_i` in turn. Datagrams from an address that
//! is no peer's real address are dropped and counted.
//!
//! Every ordered pair of peers (a link) has its own [`FaultPipe`], seeded from the seed and
//! the pair, so the same seed and the same datagrams on a link give the same faults there
//! whatever the other links carry. The counters are kept per link, summed in
//! [`MeshStats::total`], and the kernel's drops are counted per shadow socket.

use super::kernel;
use super::pipe::{FaultPipe, PipeConfig, PipeCounters};
use super::stats::DirectionStats;
use super::udp::{
    KERNEL_DROPS_EVERY, Limits, MAX_DATAGRAM, ProxyError, ProxyHandle, StopReason, StopSignals,
    is_refused, poll_timeout, time_since,
};
use super::url::udp_url;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use myri_device::Time;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

const WAKER: Token = Token(0);
const SIGNALS: Token = Token(1);
const FIRST_PEER: usize = 16;

/// The most peers of a mesh (each pair of them has a fault pipe each way).
pub const MAX_MESH_PEERS: usize = 64;

/// One peer of a mesh: where it receives, and the proxy's socket that stands for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeshPeer {
    /// Where the peer receives (its bound address).
    pub real: SocketAddr,
    /// The proxy socket the other peers send to for it (port 0 picks a free port; see
    /// [`MeshProxy::shadows`]).
    pub shadow: SocketAddr,
}

/// A mesh: its peers, the faults on every link, the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshConfig {
    /// The peers, in rank order.
    pub peers: Vec<MeshPeer>,
    /// The faults on every link.
    pub faults: PipeConfig,
    /// Seed of every fault decision.
    pub seed: u64,
}

impl MeshConfig {
    /// A clean mesh of `peers`, seed 1.
    pub fn new(peers: Vec<MeshPeer>) -> MeshConfig {
        MeshConfig {
            peers,
            faults: PipeConfig::clean(),
            seed: 1,
        }
    }

    /// `n` peers on consecutive ports: peer `i` receives at `real_base` + `i` and is
    /// stood for at `shadow_base` + `i` (a shadow base port of 0 gives every shadow a free
    /// port).
    pub fn consecutive(
        n: usize,
        real_base: SocketAddr,
        shadow_base: SocketAddr,
    ) -> Result<MeshConfig, ProxyError> {
        let nth = |base: SocketAddr, i: usize| -> Result<SocketAddr, ProxyError> {
            if base.port() == 0 {
                return Ok(base);
            }
            let port =
                u16::try_from(usize::from(base.port()) + i).map_err(|_| ProxyError::MeshPorts {
                    url: udp_url(base),
                    peers: n,
                })?;
            Ok(SocketAddr::new(base.ip(), port))
        };
        let peers = (0..n)
            .map(|i| {
                Ok(MeshPeer {
                    real: nth(real_base, i)?,
                    shadow: nth(shadow_base, i)?,
                })
            })
            .collect::<Result<_, ProxyError>>()?;
        Ok(MeshConfig::new(peers))
    }

    /// The same faults on every link.
    pub fn with_faults(mut self, faults: PipeConfig) -> MeshConfig {
        self.faults = faults;
        self
    }

    /// Checks the faults, the number of peers and that no address is given twice.
    pub fn validate(&self) -> Result<(), ProxyError> {
        self.faults.validate()?;
        let n = self.peers.len();
        if n == 0 || n > MAX_MESH_PEERS {
            return Err(ProxyError::MeshSize {
                peers: n,
                max: MAX_MESH_PEERS,
            });
        }
        let mut seen = HashSet::new();
        for (rank, p) in self.peers.iter().enumerate() {
            if p.real.port() == 0 {
                return Err(ProxyError::MeshPortZero {
                    rank,
                    url: udp_url(p.real),
                });
            }
            let addrs = [Some(p.real), (p.shadow.port() != 0).then_some(p.shadow)];
            for a in addrs.into_iter().flatten() {
                if !seen.insert(a) {
                    return Err(ProxyError::MeshDuplicate { url: udp_url(a) });
                }
            }
        }
        Ok(())
    }
}

/// One peer's addresses and what the kernel dropped at its shadow socket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MeshPeerStats {
    /// Where the peer receives, `udp://host:port`.
    pub real: String,
    /// The proxy's socket for it.
    pub shadow: String,
    /// Datagrams to this peer that the kernel dropped at its shadow socket before the
    /// proxy read them (a full receive buffer).
    pub kernel_drops: u64,
}

/// One link, from peer `from` to peer `to`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    /// The sending peer's rank.
    pub from: usize,
    /// The receiving peer's rank.
    pub to: usize,
    /// The link's fault pipe.
    #[serde(flatten)]
    pub pipe: PipeCounters,
    /// Forwarded datagrams the socket refused (a full send buffer); not sent.
    pub send_failed: u64,
    /// Datagrams waiting in the pipe (delayed or held back).
    pub pending: u64,
}

/// Everything a mesh proxy counted since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MeshStats {
    /// Milliseconds since the proxy started.
    pub elapsed_ms: u64,
    /// The seed of the fault decisions.
    pub seed: u64,
    /// The peers, in rank order.
    pub peers: Vec<MeshPeerStats>,
    /// Datagrams from an address that is no peer's, dropped.
    pub refused_unknown: u64,
    /// The links that carried at least one datagram, by sender then receiver.
    pub links: Vec<LinkStats>,
    /// All links together; `kernel_drops` is the sum over the peers' shadow sockets.
    pub total: DirectionStats,
}

/// The mesh proxy. See the module documentation.
pub struct MeshProxy {
    real: Vec<SocketAddr>,
    shadows: Vec<SocketAddr>,
    sockets: Vec<UdpSocket>,
    inodes: Vec<Option<u64>>,
    by_real: HashMap<SocketAddr, usize>,
    /// One per link, at `from * n + to`.
    pipes: Vec<FaultPipe<()>>,
    send_failed: Vec<u64>,
    /// The pipes holding datagrams.
    busy: BTreeSet<usize>,
    poll: Poll,
    stats: MeshStats,
    shared: ProxyHandle<MeshStats>,
    signals: StopSignals,
    start: Instant,
    buf: Vec<u8>,
    drops_read_at: Option<Time>,
}

impl MeshProxy {
    /// Checks the configuration and binds every shadow socket.
    pub fn bind(config: MeshConfig) -> Result<MeshProxy, ProxyError> {
        config.validate()?;
        let n = config.peers.len();
        let poll = Poll::new().map_err(ProxyError::Poll)?;
        let mut sockets = Vec::with_capacity(n);
        let mut shadows = Vec::with_capacity(n);
        let mut inodes = Vec::with_capacity(n);
        for (i, p) in config.peers.iter().enumerate() {
            let listen_error = |source| ProxyError::Listen {
                url: udp_url(p.shadow),
                source,
            };
            let mut socket = UdpSocket::bind(p.shadow).map_err(listen_error)?;
            shadows.push(socket.local_addr().map_err(listen_error)?);
            kernel::enlarge_buffers(&socket, kernel::SOCKET_BUFFER);
            inodes.push(kernel::socket_inode(&socket));
            poll.registry()
                .register(&mut socket, Token(FIRST_PEER + i), Interest::READABLE)
                .map_err(ProxyError::Poll)?;
            sockets.push(socket);
        }
        // A shadow that picked a free port may have taken a peer's real port.
        let real: Vec<SocketAddr> = config.peers.iter().map(|p| p.real).collect();
        if let Some(s) = shadows.iter().find(|s| real.contains(s)) {
            return Err(ProxyError::MeshDuplicate { url: udp_url(*s) });
        }
        let waker = Waker::new(poll.registry(), WAKER).map_err(ProxyError::Poll)?;
        let pipes = (0..n * n)
            .map(|link| FaultPipe::new(config.faults, config.seed, 2 + link as u64))
            .collect();
        let stats = MeshStats {
            seed: config.seed,
            peers: real
                .iter()
                .zip(&shadows)
                .map(|(r, s)| MeshPeerStats {
                    real: udp_url(*r),
                    shadow: udp_url(*s),
                    kernel_drops: 0,
                })
                .collect(),
            ..MeshStats::default()
        };
        Ok(MeshProxy {
            by_real: real.iter().enumerate().map(|(i, r)| (*r, i)).collect(),
            real,
            shadows,
            sockets,
            inodes,
            pipes,
            send_failed: vec![0; n * n],
            busy: BTreeSet::new(),
            poll,
            shared: ProxyHandle {
                waker: Arc::new(waker),
                stop: Arc::new(AtomicBool::new(false)),
                stats: Arc::new(Mutex::new(stats.clone())),
            },
            stats,
            signals: StopSignals::default(),
            start: Instant::now(),
            buf: vec![0; MAX_DATAGRAM],
            drops_read_at: None,
        })
    }

    /// The shadow addresses as bound, in rank order: what each peer is to advertise.
    pub fn shadows(&self) -> &[SocketAddr] {
        &self.shadows
    }

    /// A handle to stop the proxy and read its counters from another thread.
    pub fn handle(&self) -> ProxyHandle<MeshStats> {
        self.shared.clone()
    }

    /// Makes SIGINT and SIGTERM stop the run (with [`StopReason::Signal`]).
    pub fn stop_on_signals(&mut self) -> Result<(), ProxyError> {
        self.signals.register(&self.poll, SIGNALS)
    }

    /// The counters now.
    pub fn stats(&self) -> MeshStats {
        self.stats.clone()
    }

    fn now(&self) -> Time {
        time_since(self.start)
    }

    fn n(&self) -> usize {
        self.real.len()
    }

    fn received(&self) -> u64 {
        self.pipes.iter().map(|p| p.counters().received).sum()
    }

    fn pending(&self) -> usize {
        self.busy.iter().map(|&l| self.pipes[l].pending()).sum()
    }

    /// Runs until a limit, a signal or [`ProxyHandle::stop`]; calls `on_report` every
    /// `report_every` (if given). Datagrams still in the pipes at the end are counted as
    /// `unsent_at_exit`.
    pub fn run(
        &mut self,
        limits: Limits,
        report_every: Option<Duration>,
        mut on_report: impl FnMut(&MeshStats),
    ) -> Result<StopReason, ProxyError> {
        let mut events = Events::with_capacity(256);
        let report_every = report_every.filter(|d| !d.is_zero());
        let start = self.now();
        let end = limits.duration.map(|d| start + d);
        let mut next_report = report_every.map(|d| start + d);
        let mut published = start;
        let reason = loop {
            let now = self.now();
            self.flush(now);
            if let Some(at) = next_report.filter(|&at| now >= at) {
                self.refresh(now);
                on_report(&self.stats);
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
            if read_all && self.pending() == 0 {
                break StopReason::Packets;
            }
            let deadline = self
                .busy
                .iter()
                .filter_map(|&l| self.pipes[l].poll_timeout())
                .chain([end, next_report].into_iter().flatten())
                .min();
            let timeout = deadline.map(|d| poll_timeout(d, now));
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
                    WAKER => {}
                    SIGNALS => self.signals.read(),
                    Token(t) => self.read_peer(t - FIRST_PEER, limits.packets)?,
                }
            }
        };
        for p in &mut self.pipes {
            p.discard();
        }
        self.busy.clear();
        self.drops_read_at = None;
        let now = self.now();
        self.publish_at(now);
        Ok(reason)
    }

    /// Reads the datagrams that arrived at peer `to`'s shadow socket.
    fn read_peer(&mut self, to: usize, limit: Option<u64>) -> Result<(), ProxyError> {
        let n = self.n();
        loop {
            if limit.is_some_and(|l| self.received() >= l) {
                return Ok(());
            }
            let Some(socket) = self.sockets.get(to) else {
                return Ok(());
            };
            let (len, from) = match socket.recv_from(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier datagram to a peer not (or no longer) there.
                Err(e) if is_refused(&e) || e.kind() == ErrorKind::ConnectionReset => continue,
                Err(source) => {
                    return Err(ProxyError::Socket {
                        url: udp_url(self.shadows[to]),
                        source,
                    });
                }
            };
            let Some(&from) = self.by_real.get(&from) else {
                self.stats.refused_unknown += 1;
                continue;
            };
            let now = self.now();
            let link = from * n + to;
            self.pipes[link].push(now, (), self.buf[..len].to_vec());
            self.busy.insert(link);
            self.flush_link(link, now);
        }
    }

    /// Sends everything due at `now`.
    fn flush(&mut self, now: Time) {
        let busy: Vec<usize> = self.busy.iter().copied().collect();
        for link in busy {
            self.flush_link(link, now);
        }
    }

    /// Sends what is due on one link: from the sender's shadow socket to the receiver.
    fn flush_link(&mut self, link: usize, now: Time) {
        let n = self.n();
        let (from, to) = (link / n, link % n);
        while let Some(t) = self.pipes[link].poll_transmit(now) {
            if self.sockets[from].send_to(&t.bytes, self.real[to]).is_err() {
                self.send_failed[link] += 1;
            }
        }
        if self.pipes[link].pending() == 0 {
            self.busy.remove(&link);
        }
    }

    fn refresh(&mut self, now: Time) {
        let n = self.n();
        self.stats.elapsed_ms = now.as_nanos() / 1_000_000;
        self.stats.links = (0..n * n)
            .filter(|&l| self.pipes[l].counters().received > 0)
            .map(|l| LinkStats {
                from: l / n,
                to: l % n,
                pipe: *self.pipes[l].counters(),
                send_failed: self.send_failed[l],
                pending: self.pipes[l].pending() as u64,
            })
            .collect();
        let mut total = DirectionStats::default();
        for l in &self.stats.links {
            add(&mut total.pipe, &l.pipe);
            total.send_failed += l.send_failed;
            total.pending += l.pending;
        }
        let due = self
            .drops_read_at
            .is_none_or(|at| now.saturating_since(at) >= KERNEL_DROPS_EVERY);
        if due {
            self.drops_read_at = Some(now);
            // One read of the kernel's tables for all the shadow sockets.
            let tables: Vec<String> = ["/proc/net/udp", "/proc/net/udp6"]
                .into_iter()
                .filter_map(|path| std::fs::read_to_string(path).ok())
                .collect();
            for (p, inode) in self.stats.peers.iter_mut().zip(&self.inodes) {
                let drops = inode.and_then(|i| tables.iter().find_map(|t| kernel::drops_in(t, i)));
                if let Some(d) = drops {
                    p.kernel_drops = d;
                }
            }
        }
        total.kernel_drops = self.stats.peers.iter().map(|p| p.kernel_drops).sum();
        self.stats.total = total;
    }

    fn publish_at(&mut self, now: Time) {
        self.refresh(now);
        *self
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.stats.clone();
    }
}

/// Adds the counters of `b` to `a`.
fn add(a: &mut PipeCounters, b: &PipeCounters) {
    a.received += b.received;
    a.received_bytes += b.received_bytes;
    a.dropped += b.dropped;
    a.queue_full += b.queue_full;
    a.corrupted += b.corrupted;
    a.duplicated += b.duplicated;
    a.delayed += b.delayed;
    a.reorder_held += b.reorder_held;
    a.reordered += b.reordered;
    a.reorder_unmatched += b.reorder_unmatched;
    a.forwarded += b.forwarded;
    a.forwarded_bytes += b.forwarded_bytes;
    a.unsent_at_exit += b.unsent_at_exit;
}
