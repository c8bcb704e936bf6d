//! The proxy's `udp://host:port` addresses: the transport's URL grammar
//! ([`myri_transport::url`]), for the `udp` scheme only and without parameters.

use myri_transport::{Address, ResolveError, Scheme, Url, UrlError};
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use thiserror::Error;

/// A `udp://host:port` address as written, not yet resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpUrl(Address);

/// Why a `udp://host:port` address could not be read or resolved.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    /// Parameters (`?reliable=0`...), which the proxy has no use for.
    #[error("{url:?}: the proxy takes no url parameters")]
    Params {
        /// The text.
        url: String,
    },
    /// Not a valid `udp://` URL (no port, a bad host or port, a path...).
    #[error("{url:?}: {source}")]
    Url {
        /// The text.
        url: String,
        /// What the parser found.
        #[source]
        source: UrlError,
    },
    /// The host name did not resolve (or resolved to no address).
    #[error("{0}")]
    Resolve(#[source] ResolveError),
}

impl FromStr for UdpUrl {
    type Err = UdpUrlError;

    fn from_str(text: &str) -> Result<UdpUrl, UdpUrlError> {
        let url = || text.to_string();
        let parsed = Url::parse(text).map_err(|source| match source {
            UrlError::NotAUrl(_) => UdpUrlError::NoScheme { url: url() },
            UrlError::UnknownScheme(scheme) => UdpUrlError::WrongScheme { url: url(), scheme },
            source => UdpUrlError::Url { url: url(), source },
        })?;
        if parsed.scheme() != Scheme::Udp {
            let scheme = parsed.scheme().to_string();
            return Err(UdpUrlError::WrongScheme { url: url(), scheme });
        }
        if parsed.has_params() {
            return Err(UdpUrlError::Params { url: url() });
        }
        Ok(UdpUrl(parsed.address))
    }
}

impl fmt::Display for UdpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<SocketAddr> for UdpUrl {
    fn from(addr: SocketAddr) -> UdpUrl {
        UdpUrl(Address::from(addr))
    }
}

impl UdpUrl {
    /// The address.
    pub fn address(&self) -> &Address {
        &self.0
    }

    /// The first address the host resolves to (an IP address resolves to itself).
    pub fn resolve(&self) -> Result<SocketAddr, UdpUrlError> {
        self.0.socket_addr().map_err(UdpUrlError::Resolve)
    }
}

/// The `udp://` form of a socket address.
pub fn udp_url(addr: SocketAddr) -> String {
    Address::from(addr).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_udp_urls() {
        let u: UdpUrl = "udp://127.0.0.1:7000".parse().unwrap();
        assert_eq!(u.to_string(), "udp://127.0.0.1:7000");
        assert_eq!(u.resolve().unwrap(), "127.0.0.1:7000".parse().unwrap());
        let v6: UdpUrl = "udp://[::1]:9".parse().unwrap();
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
            ("udp://:7000", "bad host"),
            ("udp://127.0.0.1", "has no port"),
            ("udp://127.0.0.1:", "bad port"),
            ("udp://[::1]", "has no port"),
            ("udp://[::1", "bad host"),
            ("udp://127.0.0.1:70000", "bad port `70000`"),
            ("udp://127.0.0.1:x", "bad port `x`"),
            ("udp://127.0.0.1:7/x", "unexpected `/x` after the address"),
            ("udp://[::1]x:7", "has no port"),
            ("udp://127.0.0.1:7?reliable=0", "takes no url parameters"),
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

    proptest! {
        #[test]
        fn no_text_makes_the_parser_panic(text in "\\PC{0,40}") {
            let _ = text.parse::<UdpUrl>();
        }

        #[test]
        fn every_socket_address_reads_back(addr: SocketAddr) {
            let url: UdpUrl = udp_url(addr).parse().unwrap();
            prop_assert_eq!(url.resolve().unwrap(), addr_without_scope(addr));
        }
    }

    /// An IPv6 socket address as text keeps no flow label or scope id.
    fn addr_without_scope(addr: SocketAddr) -> SocketAddr {
        SocketAddr::new(addr.ip(), addr.port())
    }
}
