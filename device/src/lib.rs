//! The bottom layer of myri: a simulated Myrinet PCI64 board and the fabric between boards.
//!
//! Work in progress: this crate is being built up module by module.

pub mod time;
pub mod wire;

pub use time::Time;
