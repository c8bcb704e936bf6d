//! The Trapeze messaging API of seed 003 on the simulated board.
pub mod wire;
