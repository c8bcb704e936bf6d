//! The bottom layer of myri: a simulated Myrinet PCI64 board and the fabric between boards.
//!
//! # What this layer does
//!
//! * **The board** (seed 002, the PCI64 programmer's guide): big-endian [`sram`] of 2, 4
//!   or 8 MiB; the [`control`] register and the §2.4 initialization sequence, checked step
//!   by step; the [`eeprom`] record; the [`dma`] controller walking chains of control
//!   blocks in four priority-ordered channels; the [`doorbell`] FIFO with limit counters;
//!   the LANai [`special`] registers; the packet interface's send and receive [`engines`];
//!   all put together in [`board::Board`], which the host reaches through its PCI window
//!   and a control program through [`board::Lanai`].
//! * **Host DMA memory** ([`hostmem`]): one region addressed by bus address in which every
//!   page is owned by one side at a time and handed over with release/acquire, so that a
//!   control program's bad DMA address is a typed fault and never a data race. This is the
//!   crate's only `unsafe` code.
//! * **The network** (seed 000, Myrinet Overview and Frame Structure): the [`wire`]
//!   formats (source routes, packets with their CRC-8, the type field), and the [`fabric`]
//!   of cables and 8- and 16-port crossbar switches with an optional bandwidth/latency
//!   model and seeded fault injection (independent and burst loss, bit flips,
//!   duplication, reordering, delay and jitter, link flapping, loss of the first packet
//!   after link init), every event counted and folded into a trace hash.
//! * **Time and execution**: nothing here reads a clock; every call takes [`Time`]. The
//!   deterministic scheduler ([`sched`]) runs a whole fabric in virtual time from one
//!   seed; the threaded mode ([`run`]) runs nodes on threads against a real clock and is
//!   the one outermost driver in this crate. [`traffic`] is a small control program that
//!   exercises boards and fabric.
//!
//! # What it does not do
//!
//! It runs no control program of its own beyond the traffic generator: the Myrinet
//! Control Program and the host API live in the `mcp` crate. It offers no reliability:
//! packets are dropped, corrupted and reordered exactly as configured. It does not model
//! the LANai's instruction set, the CRC-32 engine, or the E-bus DMA registers reserved for
//! FPGA access.
//!
//! # Example
//!
//! ```
//! use myri_device::board::{Board, BoardConfig, bring_up};
//! use myri_device::time::Time;
//!
//! let mut board = Board::new(BoardConfig::pci64b(0));
//! // The LANai refuses to run until the host has brought it out of reset in order.
//! assert!(board.lanai().is_err());
//! let running_at = bring_up(&mut board, Time::ZERO, &[]).unwrap();
//! assert_eq!(running_at, Time::from_micros(41_000));
//! assert!(board.lanai().is_ok());
//! ```

pub mod board;
pub mod control;
pub mod dma;
pub mod doorbell;
pub mod eeprom;
pub mod engines;
pub mod fabric;
pub mod hostmem;
pub mod run;
pub mod sched;
pub mod special;
pub mod sram;
pub mod time;
pub mod traffic;
pub mod wire;

pub use time::Time;
