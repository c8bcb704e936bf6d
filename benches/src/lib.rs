//! Benchmarks of myri (run with `cargo bench -p myri-benches`) and the cost harnesses
//! whose instruction counts are measured with `valgrind --tool=callgrind`.
//!
//! Speed targets are checked here, never in timed unit tests: each figure is reported as
//! a ratio to a plain reference measured in the same run.

pub mod cost;
pub mod rpp_kcp;
