//! Transport against reference, interleaved: short rounds A B A B (the order flipping
//! every round), one warm-up round each first, medians of the rounds.

use super::bare_udp::BareUdpClient;
use super::client::{Client, ClientError};
use super::ring::RingClient;
use super::tcp::TcpClient;
use super::wire::SizeSpec;
use super::{RoundTime, StreamRound};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Exchanges of a reference round between two progress passes of the transport.
const CHUNK: u64 = 256;

/// The plain references a client measures beside the transport.
#[derive(Default)]
pub struct Baselines {
    /// Bare UDP socket (`udp://`).
    pub udp: Option<BareUdpClient>,
    /// TCP connection (`udp://` streams).
    pub tcp: Option<TcpClient>,
    /// Bare shared-memory ring (`shm://`).
    pub ring: Option<RingClient>,
}

impl Baselines {
    /// Connects to the references the server of `client` offers. `timeout`: how long a
    /// bare exchange waits before it counts as lost. `tcp`: connect the TCP reference too.
    pub fn connect(client: &Client, timeout: Duration, tcp: bool) -> Result<Baselines, String> {
        let refs = client.references().clone();
        let mut b = Baselines::default();
        if let Some(server) = client.server_addr() {
            let port = refs
                .udp_port
                .ok_or("the server offers no bare udp reference (started with --no-baseline?)")?;
            let any: SocketAddr = if server.is_ipv6() {
                "[::]:0".parse().expect("an address")
            } else {
                "0.0.0.0:0".parse().expect("an address")
            };
            let at = SocketAddr::new(server.ip(), port);
            b.udp = Some(
                BareUdpClient::connect(any, at, timeout)
                    .map_err(|e| format!("bare udp reference at {at}: {e}"))?,
            );
            if tcp {
                let port = refs.tcp_port.ok_or("the server offers no tcp reference")?;
                let at = SocketAddr::new(server.ip(), port);
                b.tcp = Some(
                    TcpClient::connect(at).map_err(|e| format!("tcp reference at {at}: {e}"))?,
                );
            }
        } else {
            let path = refs
                .shm_ring
                .ok_or("the server offers no bare ring reference (started with --no-baseline?)")?;
            b.ring = Some(
                RingClient::open(Path::new(&path), Duration::from_secs(5))
                    .map_err(|e| format!("bare ring reference: {e}"))?,
            );
        }
        Ok(b)
    }

    /// The name of the ping-pong reference.
    pub fn pingpong_name(&self) -> &'static str {
        if self.udp.is_some() {
            "udp socket"
        } else {
            "shm ring"
        }
    }

    /// A reference ping-pong round, in chunks of [`CHUNK`] exchanges with a progress
    /// pass of the transport's `client` between them (not timed): the transport's
    /// session stays answered however long the reference takes (lost exchanges on a
    /// loaded machine can make it seconds).
    fn pingpong_round(
        &mut self,
        size: usize,
        iters: u64,
        client: &mut Client,
    ) -> Result<RoundTime, ClientError> {
        let mut total = RoundTime {
            elapsed: Duration::ZERO,
            exchanges: 0,
            timeouts: 0,
        };
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let r = match (self.udp.as_mut(), self.ring.as_mut()) {
                (Some(u), _) => u.pingpong_round(size, n),
                (None, Some(r)) => r
                    .pingpong_round(size, n)
                    .ok_or(ClientError::Stalled(Duration::from_secs(5)))?,
                (None, None) => return Err(ClientError::Setup("no reference".into())),
            };
            total.elapsed += r.elapsed;
            total.exchanges += r.exchanges;
            total.timeouts += r.timeouts;
            left -= n;
            client.keepalive()?;
        }
        Ok(total)
    }

    fn stream_round(&mut self, size: usize, count: u64) -> Result<StreamRound, ClientError> {
        let r = match (self.udp.as_mut(), self.ring.as_mut()) {
            (Some(u), _) => u.stream_round(size, count),
            (None, Some(r)) => r.stream_round(size, count),
            (None, None) => None,
        };
        r.ok_or(ClientError::Stalled(Duration::from_secs(5)))
    }
}

/// Ping-pong figures of one size.
#[derive(Debug, Clone)]
pub struct PingPongFigures {
    /// Bytes per message.
    pub size: usize,
    /// Median over rounds of the mean round-trip time, microseconds.
    pub rtt_us: f64,
    /// The same for the reference, if measured.
    pub reference_rtt_us: Option<f64>,
    /// Transport over reference.
    pub ratio: Option<f64>,
    /// Exchanges made over the transport (warm-up excluded).
    pub exchanges: u64,
    /// Of those, timed out (raw mode).
    pub timeouts: u64,
    /// The same for the reference.
    pub reference_timeouts: u64,
}

/// Stream figures.
#[derive(Debug, Clone)]
pub struct StreamFigures {
    /// Median goodput of the transport, MB/s.
    pub mb_per_s: f64,
    /// Every transport round.
    pub rounds: Vec<StreamRound>,
    /// Median goodput of the bare reference (UDP socket or ring), MB/s.
    pub reference_mb_per_s: Option<f64>,
    /// Messages (datagrams, records) the bare reference lost over all rounds.
    pub reference_lost: u64,
    /// Median goodput over TCP, MB/s (`udp://`).
    pub tcp_mb_per_s: Option<f64>,
}

impl StreamFigures {
    /// Messages sent over the transport, all rounds.
    pub fn sent(&self) -> u64 {
        self.rounds.iter().map(|r| r.sent).sum()
    }

    /// Messages the server received, all rounds.
    pub fn received(&self) -> u64 {
        self.rounds.iter().map(|r| r.received).sum()
    }

    /// Errors the server found, all rounds.
    pub fn errors(&self) -> u64 {
        self.rounds.iter().map(|r| r.errors).sum()
    }

    /// Bytes the server received, all rounds.
    pub fn bytes(&self) -> u64 {
        self.rounds.iter().map(|r| r.bytes).sum()
    }
}

/// Ping-pongs `iters` messages of `size` bytes over the transport in `rounds` rounds,
/// each followed or preceded by a reference round of as many exchanges when `baselines`
/// has one. `tick` is called after every round.
pub fn pingpong(
    client: &mut Client,
    mut baselines: Option<&mut Baselines>,
    size: usize,
    iters: u64,
    rounds: u32,
    mut tick: impl FnMut(),
) -> Result<PingPongFigures, ClientError> {
    let rounds = rounds.max(1);
    let per_round = iters.div_ceil(u64::from(rounds)).max(1);
    let warm = per_round.min(200);
    client.pingpong_round(size, warm)?;
    client.settle()?;
    if let Some(b) = baselines.as_deref_mut() {
        b.pingpong_round(size, warm, client)?;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut timeouts, mut ref_timeouts, mut exchanges) = (0, 0, 0);
    for round in 0..rounds {
        let mut transport = |client: &mut Client| -> Result<(), ClientError> {
            let r = client.pingpong_round(size, per_round)?;
            client.settle()?;
            timeouts += r.timeouts;
            exchanges += r.exchanges;
            a.push(r.rtt_us());
            Ok(())
        };
        match baselines.as_deref_mut() {
            None => transport(client)?,
            Some(base) => {
                let mut reference =
                    |base: &mut Baselines, client: &mut Client| -> Result<(), ClientError> {
                        let r = base.pingpong_round(size, per_round, client)?;
                        ref_timeouts += r.timeouts;
                        b.push(r.rtt_us());
                        Ok(())
                    };
                if round % 2 == 0 {
                    transport(client)?;
                    reference(base, client)?;
                } else {
                    reference(base, client)?;
                    transport(client)?;
                }
            }
        }
        tick();
    }
    let rtt_us = median(a);
    let reference_rtt_us = (!b.is_empty()).then(|| median(b));
    Ok(PingPongFigures {
        size,
        rtt_us,
        reference_rtt_us,
        ratio: reference_rtt_us.filter(|&r| r > 0.0).map(|r| rtt_us / r),
        exchanges,
        timeouts,
        reference_timeouts: ref_timeouts,
    })
}

/// What a stream run sends.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// Message sizes.
    pub sizes: SizeSpec,
    /// Messages per round.
    pub count: u64,
    /// Seed of sizes and patterns.
    pub seed: u64,
    /// Whether the server checks every byte.
    pub verify: bool,
    /// Rounds.
    pub rounds: u32,
}

/// Streams `spec.rounds` rounds over the transport, interleaved with rounds over the
/// references in `baselines` (fixed sizes only); one warm-up round each first when there
/// are references.
pub fn stream(
    client: &mut Client,
    baselines: Option<&mut Baselines>,
    spec: StreamSpec,
    mut tick: impl FnMut(),
) -> Result<StreamFigures, ClientError> {
    let fixed = match spec.sizes {
        SizeSpec::Fixed(n) => Some(n),
        SizeSpec::Random { .. } => None,
    };
    let baselines = baselines.filter(|_| fixed.is_some());
    let mut rounds = Vec::new();
    let (mut bare, mut tcp, mut lost) = (Vec::new(), Vec::new(), 0);
    match baselines {
        None => {
            for _ in 0..spec.rounds.max(1) {
                rounds.push(client.stream_round(spec.sizes, spec.count, spec.seed, spec.verify)?);
                tick();
            }
        }
        Some(base) => {
            let size = fixed.unwrap_or_default();
            let warm = spec.count.clamp(1, 64);
            client.stream_round(spec.sizes, warm, spec.seed, spec.verify)?;
            // The warm-up is not measured, nor sampled.
            drop(client.take_samples());
            client.settle()?;
            base.stream_round(size, warm)?;
            if let Some(t) = base.tcp.as_mut() {
                t.stream_round(size, warm)
                    .map_err(|e| ClientError::Setup(format!("tcp reference: {e}")))?;
            }
            for round in 0..spec.rounds.max(1) {
                let mut steps: [u8; 3] = [0, 1, 2];
                if round % 2 == 1 {
                    steps.reverse();
                }
                for step in steps {
                    match step {
                        0 => {
                            rounds.push(client.stream_round(
                                spec.sizes,
                                spec.count,
                                spec.seed,
                                spec.verify,
                            )?);
                            client.settle()?;
                        }
                        1 => {
                            let r = base.stream_round(size, spec.count)?;
                            lost += r.sent.saturating_sub(r.received);
                            bare.push(r.mb_per_s());
                        }
                        _ => {
                            if let Some(t) = base.tcp.as_mut() {
                                let r = t.stream_round(size, spec.count).map_err(|e| {
                                    ClientError::Setup(format!("tcp reference: {e}"))
                                })?;
                                tcp.push(r.mb_per_s());
                            }
                        }
                    }
                }
                tick();
            }
        }
    }
    let mb_per_s = median(rounds.iter().map(StreamRound::mb_per_s).collect());
    Ok(StreamFigures {
        mb_per_s,
        rounds,
        reference_mb_per_s: (!bare.is_empty()).then(|| median(bare)),
        reference_lost: lost,
        tcp_mb_per_s: (!tcp.is_empty()).then(|| median(tcp)),
    })
}

/// The median of some values (0 for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
