//! What travels on a Myrinet link, as views over bytes that trust nothing.

pub mod crc8;
pub mod frame;
pub mod packet;
pub mod route;

pub use frame::{Frame, TYPE_CRL};
pub use packet::{MAX_BODY_LEN, MAX_WIRE_LEN, Packet, PacketError};
pub use route::{Route, RouteError};
