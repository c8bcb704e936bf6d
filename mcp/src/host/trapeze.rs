//! The Trapeze API of seed 003 (host side).
