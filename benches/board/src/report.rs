//! What a board benchmark reports, whichever protocol ran it.

use super::harness::Accounting;
use myri_rpp::Stats;
use std::time::Duration;

/// Results of a ping-pong.
#[derive(Debug, Clone)]
pub struct PingPongReport {
    /// Packet size.
    pub size: usize,
    /// Exchanges.
    pub iters: u64,
    /// Median one-way latency (half the round trip), in microseconds.
    pub one_way_us: f64,
    /// Bandwidth as seed 000 defines it for ping-pong: bytes / 2 / time, in MB/s.
    pub mb_per_s: f64,
    /// Exchanges that timed out.
    pub timeouts: u64,
    /// Packet accounting.
    pub accounting: Accounting,
    /// The reference's median one-way latency, if one was measured.
    pub baseline_one_way_us: Option<f64>,
    /// Sum of the answered exchanges' round-trip times.
    pub total_rtt: Duration,
    /// What RPP did, when the run was over RPP.
    pub rpp: Option<RppReport>,
}

/// Results of a stream.
#[derive(Debug, Clone)]
pub struct StreamReport {
    /// Packet size.
    pub size: usize,
    /// Packets per stream.
    pub count: u64,
    /// Most sends in flight.
    pub window: usize,
    /// Median bandwidth, MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
    /// Streams whose acknowledgement never came.
    pub timeouts: u64,
    /// Packets (raw) or messages (RPP) the sender sent, over all streams: fewer than
    /// `count` a stream when a raw stream ended early (its sink, hearing nothing for its
    /// idle time, acknowledged what it had).
    pub sent: u64,
    /// Packets the sink received, over all streams.
    pub delivered: u64,
    /// Packet accounting.
    pub accounting: Accounting,
    /// The reference's median bandwidth, if one was measured.
    pub baseline_mb_per_s: Option<f64>,
    /// Sum of the streams' durations (first send to acknowledgement) that were acked.
    pub total_time: Duration,
    /// What RPP did, when the run was over RPP.
    pub rpp: Option<RppReport>,
}

/// What RPP did over a run: each end's connection counters and endpoint counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RppReport {
    /// Board A's connection (the pinging or sending side).
    pub client: Stats,
    /// Board B's connection (the echoing or receiving side).
    pub server: Stats,
    /// The endpoints' own counters (A, B): copies, in-place deliveries, datagrams.
    pub endpoints: [myri_transport::Stats; 2],
    /// Each end's protocol trace hash (A, B): in sim mode the same seed gives the same.
    pub trace_hashes: [u64; 2],
}

impl RppReport {
    /// Data packets sent again, both ends.
    pub fn retransmitted(&self) -> u64 {
        self.client.retransmitted + self.server.retransmitted
    }

    /// Retransmissions the receiver already had (D-SACK), both ends.
    pub fn spurious_retransmits(&self) -> u64 {
        self.client.spurious_retransmits + self.server.spurious_retransmits
    }

    /// Retransmission timer expiries, both ends.
    pub fn rto_expirations(&self) -> u64 {
        self.client.rto_expirations + self.server.rto_expirations
    }

    /// Packets declared lost from acknowledgement evidence, both ends.
    pub fn lost(&self) -> u64 {
        self.client.lost + self.server.lost
    }

    /// Data packets received twice, both ends.
    pub fn dup_packets(&self) -> u64 {
        self.client.dup_packets + self.server.dup_packets
    }

    /// Packets that failed the CRC-32C (passed the link's CRC-8), both ends.
    pub fn bad_crc(&self) -> u64 {
        self.client.bad_crc + self.server.bad_crc
    }

    /// Datagrams whose boards' DMA checksums differed (passed the link's CRC-8), dropped
    /// by the endpoints before RPP saw them, both ends.
    pub fn bad_dma_checksums(&self) -> u64 {
        self.endpoints[0].bad_dma_checksum + self.endpoints[1].bad_dma_checksum
    }

    /// Packets carrying no data (acknowledgements, probes), both ends.
    pub fn acks_sent(&self) -> u64 {
        self.client.acks_sent + self.server.acks_sent
    }
}
