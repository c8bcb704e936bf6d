//! The transport layer of myri: what frameworks and applications plug in, and the `myri`
//! command.
//!
//! This crate is the outermost driver of the stack: it is where clocks are read and
//! threads are spawned for the layers below, which take time as an argument.

pub mod bench;
pub mod shm;
