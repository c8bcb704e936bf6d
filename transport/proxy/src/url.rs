//! The proxy's command-line values: `udp://host:port` addresses and durations like `10ms`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::time::Duration;
use thiserror::Error;

/// A `udp://host:port` address as written, not yet resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpUrl {
    /// The host: a name, an IPv4 address, or an IPv6 address without brackets.
    pub host: String,
    /// The port.
    pub port: u16,
}

/// Why a `udp://host:port` address could not be read or resolved.
#[derive(Debug, Error)]
pub enum UdpUrlError {
    /// No `scheme://` at the start.
    #[error("{url:?} is not a url: expected udp://host:port")]
    NoScheme {
        /// The text.
        url: String,
    },
    /// A scheme other than `udp`.
    #[error("{url:?}: the proxy forwards udp datagrams only; scheme {scheme:?} is not udp://")]
    WrongScheme {
        /// The text.
        url: String,
        /// The scheme found.
        scheme: String,
    },
    /// Nothing between `://` and `:port`.
    #[error("{url:?} has no host: expected udp://host:port")]
    NoHost {
        /// The text.
        url: String,
    },
    /// No `:port` at the end.
    #[error("{url:?} has no port: expected udp://host:port")]
    NoPort {
        /// The text.
        url: String,
    },
    /// A port that is not a number from 0 to 65535.
    #[error("{url:?}: port {port:?} is not a number from 0 to 65535")]
    BadPort {
        /// The text.
        url: String,
        /// The port as written.
        port: String,
    },
    /// A path, query or anything else after the port.
    #[error("{url:?}: unexpected {rest:?} after the port")]
    Trailing {
        /// The text.
        url: String,
        /// What follows the port.
        rest: String,
    },
    /// The host name did not resolve.
    #[error("cannot resolve {url}: {source}")]
    Resolve {
        /// The address.
        url: UdpUrl,
        /// Why.
        source: std::io::Error,
    },
    /// The host name resolved to no address.
    #[error("{url} resolves to no address")]
    NoAddress {
        /// The address.
        url: UdpUrl,
    },
}

impl FromStr for UdpUrl {
    type Err = UdpUrlError;

    fn from_str(text: &str) -> Result<UdpUrl, UdpUrlError> {
        let url = || text.to_string();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(UdpUrlError::NoScheme { url: url() });
        };
        if !scheme.eq_ignore_ascii_case("udp") {
            return Err(UdpUrlError::WrongScheme {
                url: url(),
                scheme: scheme.to_string(),
            });
        }
        if let Some(i) = rest.find(['/', '?', '#']) {
            return Err(UdpUrlError::Trailing {
                url: url(),
                rest: rest[i..].to_string(),
            });
        }
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let Some((host, after)) = bracketed.split_once(']') else {
                return Err(UdpUrlError::NoPort { url: url() });
            };
            let Some(port) = after.strip_prefix(':') else {
                return Err(if after.is_empty() {
                    UdpUrlError::NoPort { url: url() }
                } else {
                    UdpUrlError::Trailing {
                        url: url(),
                        rest: after.to_string(),
                    }
                });
            };
            (host, port)
        } else {
            let Some((host, port)) = rest.rsplit_once(':') else {
                return Err(UdpUrlError::NoPort { url: url() });
            };
            (host, port)
        };
        if host.is_empty() {
            return Err(UdpUrlError::NoHost { url: url() });
        }
        if port.is_empty() {
            return Err(UdpUrlError::NoPort { url: url() });
        }
        let port = port.parse::<u16>().map_err(|_| UdpUrlError::BadPort {
            url: url(),
            port: port.to_string(),
        })?;
        Ok(UdpUrl {
            host: host.to_string(),
            port,
        })
    }
}

impl fmt::Display for UdpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "udp://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "udp://{}:{}", self.host, self.port)
        }
    }
}

impl From<SocketAddr> for UdpUrl {
    fn from(addr: SocketAddr) -> UdpUrl {
        UdpUrl {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl UdpUrl {
    /// The first address the host resolves to (an IP address resolves to itself).
    pub fn resolve(&self) -> Result<SocketAddr, UdpUrlError> {
        let mut addrs = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|source| UdpUrlError::Resolve {
                url: self.clone(),
                source,
            })?;
        addrs
            .next()
            .ok_or_else(|| UdpUrlError::NoAddress { url: self.clone() })
    }
}

/// The `udp://` form of a socket address.
pub fn udp_url(addr: SocketAddr) -> String {
    UdpUrl::from(addr).to_string()
}

/// A duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Not a number followed by a unit.
    #[error(
        "{text:?} is not a duration: expected a number and a unit (ns, us, ms, s, m), like 10ms"
    )]
    Syntax {
        /// The text.
        text: String,
    },
    /// A number without a unit (other than 0).
    #[error("{text:?} has no unit: write {text}ms or {text}s (units: ns, us, ms, s, m)")]
    NoUnit {
        /// The text.
        text: String,
    },
    /// A unit that is not one of ns, us, ms, s, m.
    #[error("{text:?}: unknown unit {unit:?} (units: ns, us, ms, s, m)")]
    Unit {
        /// The text.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// Longer than the proxy can count.
    #[error("{text:?} is too long a duration")]
    TooLong {
        /// The text.
        text: String,
    },
}

/// Reads a duration: a non-negative decimal number and a unit (`ns`, `us`, `ms`, `s`, `m`),
/// like `250us`, `10ms` or `1.5s`; `0` alone is zero.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let syntax = || DurationError::Syntax {
        text: text.to_string(),
    };
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(syntax());
    }
    let value: f64 = number.parse().map_err(|_| syntax())?;
    let scale = match unit.trim() {
        "" => {
            return Err(DurationError::NoUnit {
                text: text.to_string(),
            });
        }
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        other => {
            return Err(DurationError::Unit {
                text: text.to_string(),
                unit: other.to_string(),
            });
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| DurationError::TooLong {
        text: text.to_string(),
    })
}

/// Shows a duration the way [`parse_duration`] reads it back, in the largest exact unit.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0".into();
    }
    for (unit, size) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns.is_multiple_of(size) {
            return format!("{}{unit}", ns / size);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_udp_urls() {
        let u: UdpUrl = "udp://127.0.0.1:7000".parse().unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 7000));
        assert_eq!(u.to_string(), "udp://127.0.0.1:7000");
        let v6: UdpUrl = "udp://[::1]:9".parse().unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9));
        assert_eq!(v6.to_string(), "udp://[::1]:9");
        assert_eq!(v6.resolve().unwrap(), "[::1]:9".parse().unwrap());
        let name: UdpUrl = "UDP://localhost:0".parse().unwrap();
        assert!(name.resolve().unwrap().ip().is_loopback());
        assert_eq!(udp_url("127.0.0.1:5".parse().unwrap()), "udp://127.0.0.1:5");
    }

    #[test]
    fn every_bad_url_says_what_is_wrong() {
        let cases = [
            ("127.0.0.1:7000", "is not a url: expected udp://host:port"),
            ("tcp://127.0.0.1:7000", "scheme \"tcp\" is not udp://"),
            ("shm://ring", "scheme \"shm\" is not udp://"),
            ("udp://:7000", "has no host"),
            ("udp://127.0.0.1", "has no port"),
            ("udp://127.0.0.1:", "has no port"),
            ("udp://[::1]", "has no port"),
            ("udp://[::1", "has no port"),
            ("udp://127.0.0.1:70000", "port \"70000\" is not a number"),
            ("udp://127.0.0.1:x", "port \"x\" is not a number"),
            ("udp://127.0.0.1:7/x", "unexpected \"/x\" after the port"),
            ("udp://[::1]x:7", "unexpected \"x:7\" after the port"),
        ];
        for (text, want) in cases {
            let err = text.parse::<UdpUrl>().unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        let nowhere: UdpUrl = "udp://no-such-host.invalid:7".parse().unwrap();
        let err = nowhere.resolve().unwrap_err().to_string();
        assert!(
            err.starts_with("cannot resolve udp://no-such-host.invalid:7"),
            "{err}"
        );
    }

    #[test]
    fn reads_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("10ms"), Ok(ms(10)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 3 s"), Ok(Duration::from_secs(3)));
        for (text, want) in [
            ("10", "has no unit"),
            ("ms", "is not a duration"),
            ("-1ms", "is not a duration"),
            (".5s", "is not a duration"),
            ("1..5s", "is not a duration"),
            ("5h", "unknown unit \"h\""),
            ("1e999s", "unknown unit \"e999s\""),
            ("99999999999999999999999m", "too long"),
        ] {
            let err = parse_duration(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        for d in [
            ms(0),
            ms(10),
            Duration::from_micros(1500),
            Duration::from_nanos(3),
            ms(2000),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }

    proptest! {
        #[test]
        fn no_text_makes_the_parsers_panic(text in "\\PC{0,40}") {
            let _ = text.parse::<UdpUrl>();
            let _ = parse_duration(&text);
        }

        #[test]
        fn every_socket_address_reads_back(addr: SocketAddr) {
            let url: UdpUrl = udp_url(addr).parse().unwrap();
            prop_assert_eq!(url.port, addr.port());
            prop_assert_eq!(url.host.parse::<std::net::IpAddr>().unwrap(), addr.ip());
        }
    }
}
