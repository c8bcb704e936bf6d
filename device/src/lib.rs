//! The bottom layer of myri: a simulated Myrinet PCI64 board and the fabric between boards.
//!
//! Work in progress: this crate is being built up module by module.

pub mod control;
pub mod dma;
pub mod doorbell;
pub mod eeprom;
pub mod fabric;
pub mod hostmem;
pub mod sram;
pub mod time;
pub mod wire;

pub use time::Time;
