//! Source routes (seed 000, Myrinet Overview; seed 000, Frame Structure).
//!
//! A Myrinet packet carries its path in its first bytes: each crossbar switch on the way
//! consumes one route byte and forwards the rest of the packet out of the port that byte
//! names. In this model a route byte is `0x80 | port`: bit 7 marks a switch hop, bit 6 is
//! reserved and must be zero, bits 5..0 are the absolute output port (0..=63). A packet
//! arriving at a host has no route bytes left; its first bytes are the packet type.

use core::fmt;
use smallvec::SmallVec;
use thiserror::Error;

/// Bit 7 of a route byte: this byte is a switch hop.
pub const HOP_FLAG: u8 = 0x80;
/// Bit 6 of a route byte: reserved, must be zero.
pub const RESERVED_FLAG: u8 = 0x40;
/// The largest port number a route byte can name.
pub const MAX_PORT: u8 = 0x3F;
/// The longest route this model accepts, in hops.
pub const MAX_ROUTE_LEN: usize = 32;

/// Why a route or route byte was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RouteError {
    /// A byte does not have the hop flag (bit 7) set.
    #[error("route byte {byte:#04x} at hop {hop} is not a switch hop (bit 7 clear)")]
    NotAHop {
        /// Position of the byte in the route.
        hop: usize,
        /// The byte.
        byte: u8,
    },
    /// A byte has the reserved bit 6 set.
    #[error("route byte {byte:#04x} at hop {hop} has reserved bit 6 set")]
    Reserved {
        /// Position of the byte in the route.
        hop: usize,
        /// The byte.
        byte: u8,
    },
    /// A port number above [`MAX_PORT`].
    #[error("port {port} is out of range (0..={MAX_PORT})")]
    PortOutOfRange {
        /// The port asked for.
        port: u32,
    },
    /// More hops than [`MAX_ROUTE_LEN`].
    #[error("route of {len} hops is longer than the {MAX_ROUTE_LEN} allowed")]
    TooLong {
        /// The length asked for.
        len: usize,
    },
}

/// Encodes a switch hop out of `port`.
pub fn hop(port: u8) -> Result<u8, RouteError> {
    if port > MAX_PORT {
        return Err(RouteError::PortOutOfRange { port: port.into() });
    }
    Ok(HOP_FLAG | port)
}

/// Decodes one route byte into the output port it names.
pub fn decode_hop(hop_index: usize, byte: u8) -> Result<u8, RouteError> {
    if byte & HOP_FLAG == 0 {
        return Err(RouteError::NotAHop {
            hop: hop_index,
            byte,
        });
    }
    if byte & RESERVED_FLAG != 0 {
        return Err(RouteError::Reserved {
            hop: hop_index,
            byte,
        });
    }
    Ok(byte & MAX_PORT)
}

/// A checked source route: zero to [`MAX_ROUTE_LEN`] switch hops.
///
/// The empty route is a direct cable between two boards (route 0 of seed 000).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Route {
    bytes: SmallVec<[u8; 8]>,
}

impl Route {
    /// The empty route: a direct cable.
    pub fn direct() -> Route {
        Route::default()
    }

    /// A route through the given output ports, one per switch.
    pub fn from_ports(ports: &[u8]) -> Result<Route, RouteError> {
        if ports.len() > MAX_ROUTE_LEN {
            return Err(RouteError::TooLong { len: ports.len() });
        }
        let bytes = ports.iter().map(|&p| hop(p)).collect::<Result<_, _>>()?;
        Ok(Route { bytes })
    }

    /// Parses route bytes as they appear on the wire.
    pub fn parse(bytes: &[u8]) -> Result<Route, RouteError> {
        if bytes.len() > MAX_ROUTE_LEN {
            return Err(RouteError::TooLong { len: bytes.len() });
        }
        for (i, &b) in bytes.iter().enumerate() {
            decode_hop(i, b)?;
        }
        Ok(Route {
            bytes: SmallVec::from_slice(bytes),
        })
    }

    /// The route bytes, first hop first.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The output port of each hop, first hop first.
    pub fn ports(&self) -> impl Iterator<Item = u8> + '_ {
        self.bytes.iter().map(|b| b & MAX_PORT)
    }

    /// Number of switch hops.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether this is the direct-cable route.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Route({self})")
    }
}

/// Shown as the output ports joined by dots (`3.1.7`), or `direct` for the empty route.
impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("direct");
        }
        for (i, port) in self.ports().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{port}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn construct_and_parse_agree() {
        let route = Route::from_ports(&[3, 0, 15, 63]).unwrap();
        assert_eq!(route.as_bytes(), &[0x83, 0x80, 0x8F, 0xBF]);
        assert_eq!(Route::parse(route.as_bytes()).unwrap(), route);
        assert_eq!(route.to_string(), "3.0.15.63");
        assert_eq!(Route::direct().to_string(), "direct");
        assert_eq!(route.ports().collect::<Vec<_>>(), vec![3, 0, 15, 63]);
    }

    #[test]
    fn bad_bytes_are_refused_with_their_position() {
        assert_eq!(
            Route::parse(&[0x81, 0x05]),
            Err(RouteError::NotAHop { hop: 1, byte: 0x05 })
        );
        assert_eq!(
            Route::parse(&[0xC1]),
            Err(RouteError::Reserved { hop: 0, byte: 0xC1 })
        );
        assert_eq!(hop(64), Err(RouteError::PortOutOfRange { port: 64 }));
    }

    #[test]
    fn impossible_lengths() {
        assert_eq!(
            Route::parse(&[0x80; 33]),
            Err(RouteError::TooLong { len: 33 })
        );
        assert!(Route::parse(&[0x80; 32]).is_ok());
        assert_eq!(
            Route::from_ports(&[1; 40]),
            Err(RouteError::TooLong { len: 40 })
        );
    }
}
