//! A fault-injecting UDP proxy, the library behind `myri proxy`: it forwards datagrams both
//! ways between clients and a server while dropping, corrupting, duplicating, delaying and
//! reordering them from a seed, so that any UDP application, not only this stack, can be
//! tested under loss on a machine without netem.
//!
//! - [`pipe`]: the sans-IO fault core for one direction. It takes datagrams and `now` in
//!   and hands them out when due; every decision comes from the fabric's seeded
//!   [`FaultInjector`](myri_device::fabric::fault::FaultInjector), and every fault is counted.
//! - [`udp`]: the event loop over `mio` sockets, with one session (and one upstream socket)
//!   per client address, like a NAT.
//! - [`mesh`]: mesh mode, between every pair of N peers that may each speak first (the
//!   ranks of an MPI job): one shadow socket per peer stands for it, so every peer still
//!   sees each other at one address.
//! - [`stats`]: the counters, as `--json` prints them.
//! - [`kernel`]: large socket buffers, and what the kernel dropped before the proxy read.
//! - [`url`]: `udp://host:port` addresses, read with the transport's URL parser.
//! - [`duration`]: durations such as `10ms` on the command line.
//!
//! ```no_run
//! use myri_proxy::{Limits, PipeConfig, ProxyConfig, UdpProxy};
//! use myri_device::fabric::FaultConfig;
//!
//! let faults = PipeConfig {
//!     faults: FaultConfig::rates(0.05, 0.0, 0.01, 0.05),
//!     ..PipeConfig::default()
//! };
//! let config = ProxyConfig::new("127.0.0.1:7000".parse()?, "127.0.0.1:7001".parse()?)
//!     .with_faults(faults);
//! let mut proxy = UdpProxy::bind(config)?;
//! let reason = proxy.run(Limits::default(), None, |_| {})?;
//! println!("{reason:?}: {:?}", proxy.stats());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod duration;
pub mod kernel;
pub mod mesh;
pub mod pipe;
pub mod stats;
pub mod udp;
pub mod url;

pub use duration::{DurationError, format_duration, parse_duration};
pub use mesh::{
    LinkStats, MAX_MESH_PEERS, MeshConfig, MeshPeer, MeshPeerStats, MeshProxy, MeshStats,
};
pub use pipe::{Fate, FaultPipe, PipeConfig, PipeConfigError, PipeCounters, Transmit};
pub use stats::{DirectionStats, ProxyStats, SessionCounters};
pub use udp::{Limits, ProxyConfig, ProxyError, ProxyEvent, ProxyHandle, StopReason, UdpProxy};
pub use url::{UdpUrl, UdpUrlError, udp_url};
