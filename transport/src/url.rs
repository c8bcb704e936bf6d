//! Transport URLs: which backend an endpoint runs on, where, and how.
//!
//! # Grammar
//!
//! ```text
//! url      = scheme "://" address [ "?" param *( "&" param ) ]
//! scheme   = "sim" | "udp" | "shm"                  (ASCII case-insensitive)
//! address  = sim: [ name ]                           the endpoint's name in its simulated world
//!            udp: host ":" port                      IPv4, "[" IPv6 "]" or a host name; port 0..=65535
//!            shm: name                               the shared-memory region, under /dev/shm
//! name     = 1*64 ( ALPHA | DIGIT | "-" | "_" | "." ) not starting with "."
//! param    = "reliable=" ( "1" | "0" | "true" | "false" | "yes" | "no" )   RPP on top or raw datagrams
//!          | "world=" name                           sim only: which simulated fabric (default "default")
//!          | "mtu=" 1*DIGIT                          largest datagram the endpoint sends
//!          | "gso=" ( "1" | "0" | ... as reliable )  udp only: segmentation offload and coalescing
//!          | "cc=" ( "cubic" | "newreno" | "bbr" | "off" )  RPP's congestion control (default cubic)
//!          | "pacing=" ( "1" | "0" | ... as reliable ) RPP paces bursts over the round trip
//!          | "integrity=" ( "crc32c" | "dma" | "none" )  how damaged datagrams are caught ("dma": sim only, its default)
//!          | "conn=" 1*16 HEXDIG                     RPP's connection id, shared by both ends
//!          | "key=" 64 HEXDIG                        a 32-byte key shared by both ends: RPP MACs every packet
//! ```
//!
//! # Who may talk to an endpoint
//!
//! A reliable endpoint acts only on packets that name its connection id and the pair of
//! incarnations of the connection's current lives (64 random bits each, drawn at open):
//! anything else is dropped and counted, never acted on. The connection id is a
//! constant unless `conn=` (or [`Options::connection_id`](crate::Options::connection_id))
//! sets one both ends know: an application id, or 64 more secret bits an off-path host
//! must guess. Against a host that can see the traffic, `key=` (or
//! [`myri_rpp::Config::mac_key`] in the options) makes every packet carry a BLAKE3 MAC
//! over header and payload; a packet whose MAC does not verify is dropped and counted.
//! The key is never printed: a URL's `Display` leaves it out.
//!
//! # Integrity
//!
//! `integrity=` says what checks a datagram's bytes end to end (see [`Integrity`]):
//! `dma` (`sim://` only, and its default) is the board's own DMA checksums, which the
//! endpoint compares on every datagram it receives, dropping and counting a mismatch
//! ([`Stats::bad_dma_checksum`](crate::Stats::bad_dma_checksum)), as a NIC's checksum
//! offload does for TCP; `crc32c` (the default where nothing better exists: `udp://`,
//! `shm://`) is RPP's CRC-32C in software at both ends; `none` asks for no check at all,
//! only when the user says so. Without `integrity=`, [`Options::integrity`](crate::Options::integrity)
//! decides; by default a reliable endpoint takes its scheme's [`Integrity::default_for`],
//! a raw one `none` (the channel as it is, checked by its links alone).
//!
//! # `udp://` and datagram sizes
//!
//! Without `mtu=`, an endpoint sends datagrams as large as
//! the path to each peer carries without IP fragmentation (the kernel's route MTU less
//! the IP and UDP headers: 1472 bytes on a 1500-byte Ethernet link, 65,507 on loopback)
//! and, where that is less than a UDP datagram, hands the kernel up to 64 of them per
//! system call (UDP segmentation offload, `UDP_SEGMENT`) and takes coalesced ones back
//! (`UDP_GRO`), as TCP does with TSO and GRO. `gso=1` forces that on (with `mtu=`, all
//! datagrams are `mtu` bytes at most, sent in batches), `gso=0` forces it off: datagrams
//! are still the path's size, one system call each. A kernel without segmentation
//! offload (before Linux 4.18) gets `gso=0`'s behaviour. An `mtu=` above the path's
//! makes the IP layer fragment each datagram: a lossless path then carries more bytes
//! per system call, but a datagram is lost with any of its fragments, and under loss the
//! receiving kernel's reassembly memory fills with incomplete datagrams and drops every
//! fragment until they time out (`ipfrag_time`, 30 s by default).
//!
//! # Reliability, parameters and peers
//!
//! Reliability is chosen by the `reliable` parameter: reliable (RPP) unless the URL says
//! `reliable=0` (or the endpoint's options say so and the URL says nothing). A URL names
//! each parameter at most once; an unknown one is an error, so a typo never silently
//! changes what runs. Peer addresses given to
//! [`Endpoint::insert_addr`](crate::Endpoint::insert_addr) are URLs of the same scheme
//! without parameters.
//!
//! [`Url`]'s `Display` writes the canonical form, which parses back to the same value.

use core::fmt;
use core::str::FromStr;
use std::net::{SocketAddr, ToSocketAddrs};
use thiserror::Error;

/// Longest name (sim endpoint, shm region, world).
pub const MAX_NAME_LEN: usize = 64;

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// The in-process simulated fabric of myri boards.
    Sim,
    /// UDP sockets.
    Udp,
    /// A shared-memory region between two processes of one host.
    Shm,
}

impl Scheme {
    /// The scheme as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Sim => "sim",
            Scheme::Udp => "udp",
            Scheme::Shm => "shm",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an endpoint is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Address {
    /// An endpoint of a simulated world; `None` asks for a generated name.
    Sim {
        /// Its name.
        name: Option<String>,
    },
    /// A UDP socket address.
    Udp {
        /// Host name or IP address (an IPv6 address without its brackets).
        host: String,
        /// Port (0: any free port, for a local endpoint).
        port: u16,
    },
    /// A shared-memory region.
    Shm {
        /// The region's name.
        name: String,
    },
}

impl Address {
    /// Its scheme.
    pub fn scheme(&self) -> Scheme {
        match self {
            Address::Sim { .. } => Scheme::Sim,
            Address::Udp { .. } => Scheme::Udp,
            Address::Shm { .. } => Scheme::Shm,
        }
    }

    /// The socket address of a `udp://` address: the first the resolver gives for its
    /// host (an IP address resolves to itself).
    pub fn socket_addr(&self) -> Result<SocketAddr, ResolveError> {
        let Address::Udp { host, port } = self else {
            return Err(ResolveError::NotUdp {
                scheme: self.scheme(),
            });
        };
        (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|source| ResolveError::Lookup {
                addr: self.to_string(),
                source,
            })?
            .next()
            .ok_or_else(|| ResolveError::NoAddress {
                addr: self.to_string(),
            })
    }
}

/// The address as a URL without parameters (`udp://[::1]:9`, `shm://ring`).
impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Sim { name } => write!(f, "sim://{}", name.as_deref().unwrap_or("")),
            Address::Shm { name } => write!(f, "shm://{name}"),
            Address::Udp { host, port } if host.contains(':') => {
                write!(f, "udp://[{host}]:{port}")
            }
            Address::Udp { host, port } => write!(f, "udp://{host}:{port}"),
        }
    }
}

impl From<SocketAddr> for Address {
    fn from(addr: SocketAddr) -> Address {
        Address::Udp {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

/// Why [`Address::socket_addr`] found no socket address.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// Only `udp://` addresses are socket addresses.
    #[error("{scheme}:// addresses are not socket addresses")]
    NotUdp {
        /// The address's scheme.
        scheme: Scheme,
    },
    /// The resolver failed (an unknown host name, say).
    #[error("cannot resolve {addr}: {source}")]
    Lookup {
        /// The address, as a URL.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The host resolved to no address.
    #[error("{addr} resolves to no address")]
    NoAddress {
        /// The address, as a URL.
        addr: String,
    },
}

/// What catches a datagram damaged between the two applications' memories (`integrity=`).
/// Each scheme's default is the best its path offers ([`Integrity::default_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Integrity {
    /// RPP's CRC-32C over header and payload, computed in software at both ends: what
    /// every backend can do, and the default where nothing better exists (`udp://`,
    /// `shm://`).
    Crc32c,
    /// The board's DMA checksums (`sim://` only, and its default): the sending board's
    /// DMA engine sums the payload as it reads it from host memory, the receiving one as
    /// it writes it into host memory (`myri_mcp::RecvBuf::checksums`), and the endpoint
    /// drops a datagram whose sums differ, as checksum offload does for TCP. Covers the
    /// boards' memories, their engines and the fabric at no cost in software; not either
    /// host's memory before the sending DMA or after the receiving one, which
    /// [`Integrity::Crc32c`] also covers (computed by the hosts as RPP writes and reads
    /// each packet).
    Dma,
    /// No check beyond the links' own (the link's CRC-8 on `sim://`, UDP's checksum):
    /// only when the user asks.
    None,
}

impl Integrity {
    /// The value as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Integrity::Crc32c => "crc32c",
            Integrity::Dma => "dma",
            Integrity::None => "none",
        }
    }

    /// Whether `scheme`'s backend can provide it (`dma` needs the board).
    pub fn available_on(self, scheme: Scheme) -> bool {
        self != Integrity::Dma || scheme == Scheme::Sim
    }

    /// What a reliable endpoint of `scheme` uses unless told otherwise: the best check its
    /// path offers. On `sim://` the boards' DMA engines already sum every byte they move
    /// (seed 002), so that is the check; elsewhere nothing better than RPP's CRC-32C
    /// exists.
    pub fn default_for(scheme: Scheme) -> Integrity {
        match scheme {
            Scheme::Sim => Integrity::Dma,
            _ => Integrity::Crc32c,
        }
    }
}

impl fmt::Display for Integrity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The parameters of a URL (each `None` when the URL does not name it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Params {
    /// `reliable=`: RPP on top (true) or raw datagrams (false).
    pub reliable: Option<bool>,
    /// `world=`: the simulated world (sim only).
    pub world: Option<String>,
    /// `mtu=`: the largest datagram to send.
    pub mtu: Option<usize>,
    /// `gso=`: UDP segmentation offload and receive coalescing (udp only): forced on
    /// (true), off (false), or chosen per path (`None`).
    pub gso: Option<bool>,
    /// `integrity=`: what checks datagrams end to end.
    pub integrity: Option<Integrity>,
    /// `cc=`: RPP's congestion controller (reliable endpoints; `None`: the options').
    pub cc: Option<Congestion>,
    /// `pacing=`: whether RPP paces bursts (reliable endpoints; `None`: the options').
    pub pacing: Option<bool>,
    /// `conn=`: RPP's connection id (reliable endpoints; `None`: the options').
    pub conn: Option<u64>,
    /// `key=`: the key RPP authenticates every packet with (reliable endpoints; `None`:
    /// the options').
    pub key: Option<UrlKey>,
}

/// A MAC key given in a URL (`key=`, 64 hex digits): 32 secret bytes, never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UrlKey(pub [u8; 32]);

impl fmt::Debug for UrlKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UrlKey(..)")
    }
}

/// RPP's congestion controller, as a URL names it (`cc=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Congestion {
    /// `cubic`: CUBIC (RFC 9438), the default.
    Cubic,
    /// `newreno`: NewReno-style AIMD.
    NewReno,
    /// `bbr`: BBR v1, a model of the path's bandwidth and round trip (for a path shared
    /// with TCP BBR flows, beside which a loss-based controller gets little).
    Bbr,
    /// `off`: no congestion control: the send window and the receiver's credit alone.
    Off,
}

impl Congestion {
    /// The value as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Congestion::Cubic => "cubic",
            Congestion::NewReno => "newreno",
            Congestion::Bbr => "bbr",
            Congestion::Off => "off",
        }
    }
}

impl Params {
    fn is_empty(&self) -> bool {
        *self == Params::default()
    }
}

/// A parsed transport URL. See the [module documentation](self) for the grammar.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Url {
    /// Where.
    pub address: Address,
    /// How.
    pub params: Params,
}

/// Why a URL did not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum UrlError {
    /// No `://` after the scheme.
    #[error(
        "`{0}` is not a transport url: expected scheme://address (sim://, udp://host:port or shm://name)"
    )]
    NotAUrl(String),
    /// A scheme this crate has no backend for.
    #[error("unknown scheme `{0}`: expected sim, udp or shm")]
    UnknownScheme(String),
    /// A name with characters outside the allowed set, empty where one is needed, or too long.
    #[error("bad name `{0}`: use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'")]
    BadName(String),
    /// A udp address without `:port`.
    #[error("udp address `{0}` has no port: expected host:port")]
    MissingPort(String),
    /// A port that is not a number in 0..=65535.
    #[error("bad port `{0}`: expected a number from 0 to 65535")]
    BadPort(String),
    /// A host that is neither an IP address nor a host name.
    #[error("bad host `{0}`")]
    BadHost(String),
    /// Something after the address other than `?params`.
    #[error("unexpected `{0}` after the address (transport urls have no path)")]
    UnexpectedPath(String),
    /// A parameter that is not `key=value`.
    #[error("bad parameter `{0}`: expected key=value")]
    BadParam(String),
    /// A parameter this crate does not know.
    #[error(
        "unknown parameter `{0}`: expected reliable, world, mtu, gso, cc, pacing, integrity, conn or key"
    )]
    UnknownParam(String),
    /// A `key=` that is not 64 hex digits (the value is not repeated: it is a secret).
    #[error("bad value for parameter `key`: expected 64 hex digits (32 bytes)")]
    BadKey,
    /// A known parameter with a value it cannot take.
    #[error("bad value `{value}` for parameter `{key}`")]
    BadParamValue {
        /// The parameter.
        key: String,
        /// Its value.
        value: String,
    },
    /// A parameter named twice.
    #[error("parameter `{0}` is given twice")]
    DuplicateParam(String),
    /// A parameter that does not apply to the scheme.
    #[error("parameter `{key}` does not apply to {scheme}:// urls")]
    ParamNotForScheme {
        /// The parameter.
        key: String,
        /// The scheme.
        scheme: Scheme,
    },
    /// An integrity the scheme's backend cannot provide (`dma` off `sim://`).
    #[error(
        "integrity={integrity} is not available on {scheme}:// (the board's dma checksums are sim:// only)"
    )]
    IntegrityNotForScheme {
        /// What was asked for.
        integrity: Integrity,
        /// The scheme.
        scheme: Scheme,
    },
}

/// 32 bytes from exactly 64 hex digits.
fn hex_key(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Whether `s` is a valid name.
pub fn is_valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn name(s: &str) -> Result<String, UrlError> {
    if is_valid_name(s) {
        Ok(s.to_owned())
    } else {
        Err(UrlError::BadName(s.to_owned()))
    }
}

fn host_port(s: &str) -> Result<(String, u16), UrlError> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| UrlError::BadHost(s.to_owned()))?;
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(UrlError::BadHost(s.to_owned()));
        }
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| UrlError::MissingPort(s.to_owned()))?;
        (v6.to_owned(), port)
    } else {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| UrlError::MissingPort(s.to_owned()))?;
        let ok = !host.is_empty()
            && host.len() <= 253
            && !host.starts_with(['-', '.'])
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'));
        if !ok {
            return Err(UrlError::BadHost(host.to_owned()));
        }
        (host.to_ascii_lowercase(), port)
    };
    let valid_digits =
        !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    let port = valid_digits
        .then(|| port.parse::<u16>().ok())
        .flatten()
        .ok_or_else(|| UrlError::BadPort(port.to_owned()))?;
    Ok((host, port))
}

fn flag(key: &str, value: &str) -> Result<bool, UrlError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(UrlError::BadParamValue {
            key: key.to_owned(),
            value: value.to_owned(),
        }),
    }
}

fn params(scheme: Scheme, query: &str) -> Result<Params, UrlError> {
    let mut p = Params::default();
    for item in query.split('&') {
        let (key, value) = item
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| UrlError::BadParam(item.to_owned()))?;
        let dup = || UrlError::DuplicateParam(key.to_owned());
        match key {
            "reliable" => {
                if p.reliable.replace(flag(key, value)?).is_some() {
                    return Err(dup());
                }
            }
            "world" => {
                if scheme != Scheme::Sim {
                    return Err(UrlError::ParamNotForScheme {
                        key: key.to_owned(),
                        scheme,
                    });
                }
                if p.world.replace(name(value)?).is_some() {
                    return Err(dup());
                }
            }
            "gso" => {
                if scheme != Scheme::Udp {
                    return Err(UrlError::ParamNotForScheme {
                        key: key.to_owned(),
                        scheme,
                    });
                }
                if p.gso.replace(flag(key, value)?).is_some() {
                    return Err(dup());
                }
            }
            "integrity" => {
                let integrity = match value.to_ascii_lowercase().as_str() {
                    "crc32c" => Integrity::Crc32c,
                    "dma" => Integrity::Dma,
                    "none" => Integrity::None,
                    _ => {
                        return Err(UrlError::BadParamValue {
                            key: key.to_owned(),
                            value: value.to_owned(),
                        });
                    }
                };
                if !integrity.available_on(scheme) {
                    return Err(UrlError::IntegrityNotForScheme { integrity, scheme });
                }
                if p.integrity.replace(integrity).is_some() {
                    return Err(dup());
                }
            }
            "cc" => {
                let cc = match value.to_ascii_lowercase().as_str() {
                    "cubic" => Congestion::Cubic,
                    "newreno" => Congestion::NewReno,
                    "bbr" => Congestion::Bbr,
                    "off" | "none" | "0" => Congestion::Off,
                    _ => {
                        return Err(UrlError::BadParamValue {
                            key: key.to_owned(),
                            value: value.to_owned(),
                        });
                    }
                };
                if p.cc.replace(cc).is_some() {
                    return Err(dup());
                }
            }
            "pacing" => {
                if p.pacing.replace(flag(key, value)?).is_some() {
                    return Err(dup());
                }
            }
            "conn" => {
                let hex = value.bytes().all(|b| b.is_ascii_hexdigit());
                let id = (hex && !value.is_empty() && value.len() <= 16)
                    .then(|| u64::from_str_radix(value, 16).ok())
                    .flatten()
                    .ok_or_else(|| UrlError::BadParamValue {
                        key: key.to_owned(),
                        value: value.to_owned(),
                    })?;
                if p.conn.replace(id).is_some() {
                    return Err(dup());
                }
            }
            "key" => {
                // The value is a secret: an error names the parameter, not the value.
                let key_bytes = hex_key(value).ok_or(UrlError::BadKey)?;
                if p.key.replace(UrlKey(key_bytes)).is_some() {
                    return Err(dup());
                }
            }
            "mtu" => {
                let bad = || UrlError::BadParamValue {
                    key: key.to_owned(),
                    value: value.to_owned(),
                };
                let mtu = (value.len() <= 9 && value.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| value.parse::<usize>().ok())
                    .flatten()
                    .filter(|&m| m > 0)
                    .ok_or_else(bad)?;
                if p.mtu.replace(mtu).is_some() {
                    return Err(dup());
                }
            }
            _ => return Err(UrlError::UnknownParam(key.to_owned())),
        }
    }
    Ok(p)
}

impl FromStr for Url {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Url, UrlError> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| UrlError::NotAUrl(s.to_owned()))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "sim" => Scheme::Sim,
            "udp" => Scheme::Udp,
            "shm" => Scheme::Shm,
            _ => return Err(UrlError::UnknownScheme(scheme.to_owned())),
        };
        let (addr, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        if let Some(i) = addr.find('/') {
            return Err(UrlError::UnexpectedPath(addr[i..].to_owned()));
        }
        let address = match scheme {
            Scheme::Sim if addr.is_empty() => Address::Sim { name: None },
            Scheme::Sim => Address::Sim {
                name: Some(name(addr)?),
            },
            Scheme::Shm => Address::Shm { name: name(addr)? },
            Scheme::Udp => {
                let (host, port) = host_port(addr)?;
                Address::Udp { host, port }
            }
        };
        let params = match query {
            Some(q) => params(scheme, q)?,
            None => Params::default(),
        };
        Ok(Url { address, params })
    }
}

impl Url {
    /// Parses a URL (the same as `s.parse()`).
    pub fn parse(s: &str) -> Result<Url, UrlError> {
        s.parse()
    }

    /// Its scheme.
    pub fn scheme(&self) -> Scheme {
        self.address.scheme()
    }

    /// Whether it names any parameter.
    pub fn has_params(&self) -> bool {
        !self.params.is_empty()
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.address)?;
        let mut sep = '?';
        let mut put = |f: &mut fmt::Formatter<'_>, kv: String| {
            let r = write!(f, "{sep}{kv}");
            sep = '&';
            r
        };
        if let Some(r) = self.params.reliable {
            put(f, format!("reliable={}", u8::from(r)))?;
        }
        if let Some(w) = &self.params.world {
            put(f, format!("world={w}"))?;
        }
        if let Some(m) = self.params.mtu {
            put(f, format!("mtu={m}"))?;
        }
        if let Some(g) = self.params.gso {
            put(f, format!("gso={}", u8::from(g)))?;
        }
        if let Some(c) = self.params.cc {
            put(f, format!("cc={}", c.as_str()))?;
        }
        if let Some(p) = self.params.pacing {
            put(f, format!("pacing={}", u8::from(p)))?;
        }
        if let Some(i) = self.params.integrity {
            put(f, format!("integrity={i}"))?;
        }
        if let Some(c) = self.params.conn {
            put(f, format!("conn={c:x}"))?;
        }
        // `key=` is a secret and is never printed.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_schemes_parse() {
        let u: Url = "sim://alice?world=lab&reliable=0".parse().unwrap();
        assert_eq!(
            u.address,
            Address::Sim {
                name: Some("alice".into())
            }
        );
        assert_eq!(u.params.reliable, Some(false));
        assert_eq!(u.params.world.as_deref(), Some("lab"));
        assert_eq!(
            Url::parse("sim://").unwrap().address,
            Address::Sim { name: None }
        );
        let u = Url::parse("sim://a?cc=NewReno&pacing=0").unwrap();
        assert_eq!(
            (u.params.cc, u.params.pacing),
            (Some(Congestion::NewReno), Some(false))
        );
        assert_eq!(u.to_string(), "sim://a?cc=newreno&pacing=0");
        let u = Url::parse("udp://h:1?cc=BBR").unwrap();
        assert_eq!(u.params.cc, Some(Congestion::Bbr));
        assert_eq!(u.to_string(), "udp://h:1?cc=bbr");
        assert!(matches!(
            Url::parse("udp://h:1?cc=vegas"),
            Err(UrlError::BadParamValue { .. })
        ));
        let u = Url::parse("udp://h:1?gso=yes&mtu=1472").unwrap();
        assert_eq!((u.params.gso, u.params.mtu), (Some(true), Some(1472)));
        assert_eq!(u.to_string(), "udp://h:1?mtu=1472&gso=1");
        let u = Url::parse("UDP://[::1]:9000?mtu=1472").unwrap();
        assert_eq!(
            u.address,
            Address::Udp {
                host: "::1".into(),
                port: 9000
            }
        );
        assert_eq!(u.params.mtu, Some(1472));
        assert_eq!(u.to_string(), "udp://[::1]:9000?mtu=1472");
        let u = Url::parse("udp://LocalHost:0").unwrap();
        assert_eq!(
            u.address,
            Address::Udp {
                host: "localhost".into(),
                port: 0
            }
        );
        assert_eq!(
            Url::parse("shm://ring-1").unwrap().address,
            Address::Shm {
                name: "ring-1".into()
            }
        );
    }

    #[test]
    fn bad_urls_get_the_error_that_says_why() {
        let e = |s: &str| Url::parse(s).unwrap_err();
        assert!(matches!(e("localhost:9000"), UrlError::NotAUrl(_)));
        assert_eq!(e("tcp://a:1"), UrlError::UnknownScheme("tcp".into()));
        assert_eq!(e("udp://a:65536"), UrlError::BadPort("65536".into()));
        assert_eq!(e("udp://a:-1"), UrlError::BadPort("-1".into()));
        assert_eq!(e("udp://a:"), UrlError::BadPort(String::new()));
        assert_eq!(e("udp://a"), UrlError::MissingPort("a".into()));
        assert!(matches!(e("udp://[::1:80"), UrlError::BadHost(_)));
        assert!(matches!(e("udp://[zz]:80"), UrlError::BadHost(_)));
        assert!(matches!(e("udp://a b:80"), UrlError::BadHost(_)));
        assert_eq!(e("shm://"), UrlError::BadName(String::new()));
        assert_eq!(e("shm://../x"), UrlError::UnexpectedPath("/x".into()));
        assert_eq!(e("shm://a/b"), UrlError::UnexpectedPath("/b".into()));
        assert_eq!(e("shm://.hidden"), UrlError::BadName(".hidden".into()));
        assert_eq!(
            e("sim://a?reliable=maybe"),
            UrlError::BadParamValue {
                key: "reliable".into(),
                value: "maybe".into()
            }
        );
        assert_eq!(
            e("sim://a?colour=red"),
            UrlError::UnknownParam("colour".into())
        );
        assert_eq!(
            e("sim://a?reliable=1&reliable=0"),
            UrlError::DuplicateParam("reliable".into())
        );
        assert_eq!(e("sim://a?reliable"), UrlError::BadParam("reliable".into()));
        assert!(matches!(
            e("udp://a:1?world=x"),
            UrlError::ParamNotForScheme { .. }
        ));
        assert!(matches!(
            e("sim://a?gso=1"),
            UrlError::ParamNotForScheme { .. }
        ));
        assert_eq!(
            e("udp://a:1?gso=1&gso=0"),
            UrlError::DuplicateParam("gso".into())
        );
        assert!(matches!(
            e("udp://a:1?mtu=0"),
            UrlError::BadParamValue { .. }
        ));
        assert!(matches!(
            e(&format!("shm://{}", "x".repeat(65))),
            UrlError::BadName(_)
        ));
    }

    #[test]
    fn conn_and_key_parse_and_the_key_is_never_printed() {
        let u = Url::parse("udp://h:1?conn=DeadBeef01&reliable=1").unwrap();
        assert_eq!(u.params.conn, Some(0x00de_adbe_ef01));
        assert_eq!(u.to_string(), "udp://h:1?reliable=1&conn=deadbeef01");
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let u = Url::parse(&format!("sim://a?key={hex}")).unwrap();
        let key = u.params.key.clone().expect("a key");
        assert_eq!(key.0[..4], [0x00, 0x11, 0x22, 0x33]);
        assert_eq!(key.0[31], 0xff);
        assert_eq!(u.to_string(), "sim://a", "the key is left out");
        assert!(!format!("{u:?}").contains("aabb"), "nor shown by Debug");
        assert!(Url::parse("sim://a?conn=").is_err());
        for bad in ["conn=12345678901234567", "conn=xyz", "conn=-1", "conn=+1"] {
            assert!(
                matches!(
                    Url::parse(&format!("sim://a?{bad}")),
                    Err(UrlError::BadParamValue { .. })
                ),
                "{bad}"
            );
        }
        let plus = format!("+f{}", &hex[2..]);
        for bad in [
            &hex[..62],
            &format!("{hex}00"),
            &hex.replace('0', "g"),
            "é",
            &plus,
        ] {
            let e = Url::parse(&format!("sim://a?key={bad}")).unwrap_err();
            assert_eq!(e, UrlError::BadKey, "{bad}");
            assert!(!e.to_string().contains(&bad[..bad.len().min(8)]), "{e}");
        }
        assert_eq!(
            Url::parse("sim://a?conn=1&conn=2").unwrap_err(),
            UrlError::DuplicateParam("conn".into())
        );
    }

    #[test]
    fn integrity_parses_per_scheme() {
        let i = |s: &str| Url::parse(s).map(|u| u.params.integrity);
        assert_eq!(i("sim://a"), Ok(None));
        assert_eq!(i("sim://a?integrity=dma"), Ok(Some(Integrity::Dma)));
        assert_eq!(i("sim://a?integrity=DMA"), Ok(Some(Integrity::Dma)));
        assert_eq!(i("sim://a?integrity=crc32c"), Ok(Some(Integrity::Crc32c)));
        assert_eq!(i("sim://a?integrity=none"), Ok(Some(Integrity::None)));
        assert_eq!(i("udp://h:1?integrity=none"), Ok(Some(Integrity::None)));
        assert_eq!(i("shm://r?integrity=crc32c"), Ok(Some(Integrity::Crc32c)));
        assert_eq!(
            i("udp://h:1?integrity=dma"),
            Err(UrlError::IntegrityNotForScheme {
                integrity: Integrity::Dma,
                scheme: Scheme::Udp
            })
        );
        assert!(matches!(
            i("shm://r?integrity=dma"),
            Err(UrlError::IntegrityNotForScheme { .. })
        ));
        assert_eq!(
            i("sim://a?integrity=md5"),
            Err(UrlError::BadParamValue {
                key: "integrity".into(),
                value: "md5".into()
            })
        );
        assert_eq!(
            i("sim://a?integrity=dma&integrity=dma"),
            Err(UrlError::DuplicateParam("integrity".into()))
        );
        let u = Url::parse("sim://a?integrity=dma&reliable=1&world=w").unwrap();
        assert_eq!(u.to_string(), "sim://a?reliable=1&world=w&integrity=dma");
        assert!(u.has_params());
        assert_eq!(Integrity::default_for(Scheme::Sim), Integrity::Dma);
        assert_eq!(Integrity::default_for(Scheme::Udp), Integrity::Crc32c);
        assert_eq!(Integrity::default_for(Scheme::Shm), Integrity::Crc32c);
        for scheme in [Scheme::Sim, Scheme::Udp, Scheme::Shm] {
            assert!(Integrity::default_for(scheme).available_on(scheme));
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn arb_name() -> impl Strategy<Value = String> {
            "[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}"
        }

        fn arb_url() -> impl Strategy<Value = Url> {
            let address = prop_oneof![
                proptest::option::of(arb_name()).prop_map(|name| Address::Sim { name }),
                arb_name().prop_map(|name| Address::Shm { name }),
                (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| Address::Udp {
                    host: std::net::Ipv4Addr::from(ip).to_string(),
                    port
                }),
                (any::<[u16; 8]>(), any::<u16>()).prop_map(|(ip, port)| Address::Udp {
                    host: std::net::Ipv6Addr::from(ip).to_string(),
                    port
                }),
                (
                    "[a-z][a-z0-9-]{0,20}(\\.[a-z][a-z0-9-]{0,10}){0,3}",
                    any::<u16>()
                )
                    .prop_map(|(host, port)| Address::Udp { host, port }),
            ];
            (
                address,
                proptest::option::of(any::<bool>()),
                proptest::option::of(arb_name()),
                proptest::option::of(1usize..1 << 20),
                proptest::option::of(any::<bool>()),
                proptest::option::of(proptest::sample::select(vec![
                    Congestion::Cubic,
                    Congestion::NewReno,
                    Congestion::Bbr,
                    Congestion::Off,
                ])),
                proptest::option::of(any::<bool>()),
                proptest::option::of(prop_oneof![
                    Just(Integrity::Crc32c),
                    Just(Integrity::Dma),
                    Just(Integrity::None)
                ]),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(
                    |(address, reliable, world, mtu, gso, cc, pacing, integrity, conn)| {
                        let world = world.filter(|_| address.scheme() == Scheme::Sim);
                        let gso = gso.filter(|_| address.scheme() == Scheme::Udp);
                        let integrity = integrity.filter(|i| i.available_on(address.scheme()));
                        Url {
                            address,
                            params: Params {
                                reliable,
                                world,
                                mtu,
                                gso,
                                cc,
                                pacing,
                                integrity,
                                conn,
                                key: None,
                            },
                        }
                    },
                )
        }

        proptest! {
            #[test]
            fn canonical_form_round_trips(u in arb_url()) {
                let s = u.to_string();
                prop_assert_eq!(Url::parse(&s), Ok(u), "{}", s);
            }

            #[test]
            fn any_string_parses_or_errs_without_panicking(s in "\\PC{0,80}") {
                let _ = Url::parse(&s);
            }

            #[test]
            fn any_port_text_is_checked(port in "[0-9]{1,7}") {
                let r = Url::parse(&format!("udp://127.0.0.1:{port}"));
                let n: u64 = port.parse().unwrap();
                if port.len() <= 5 && n <= 65535 {
                    prop_assert_eq!(r.unwrap().address, Address::Udp { host: "127.0.0.1".into(), port: n as u16 });
                } else {
                    prop_assert_eq!(r, Err(UrlError::BadPort(port)));
                }
            }

            #[test]
            fn mangled_urls_never_panic(u in arb_url(), cut in 0usize..60, junk in "[:/?&=\\[\\]a-z0-9]{0,4}") {
                let mut s = u.to_string();
                let cut = cut.min(s.len());
                if s.is_char_boundary(cut) {
                    s.insert_str(cut, &junk);
                }
                let _ = Url::parse(&s);
            }
        }
    }
}
