//! Helpers shared by the integration tests.
#![allow(dead_code)]

use myri_transport::{Endpoint, Options, Peer, shm_layout as layout};
use std::os::unix::fs::FileExt;

/// Each message's length and first byte: what an assertion shows of long messages that
/// differ (their bytes are then compared whole, without printing them).
fn lengths_and_first_bytes(ms: &[Vec<u8>]) -> Vec<(usize, Option<u8>)> {
    ms.iter().map(|m| (m.len(), m.first().copied())).collect()
}

/// Every message the endpoint has for the application now, in order.
pub fn take_deliveries(ep: &mut Endpoint) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while let Some(d) = ep.recv() {
        got.push(d.data.to_vec());
    }
    got
}

/// Asserts that `got` are the `expected` messages, in order: their lengths and first
/// bytes shown on a mismatch, their bytes compared whole without printing them.
#[track_caller]
pub fn assert_same_messages(got: &[Vec<u8>], expected: &[Vec<u8>]) {
    assert_eq!(
        lengths_and_first_bytes(got),
        lengths_and_first_bytes(expected),
        "lengths and first bytes, in order"
    );
    assert!(got == expected, "the messages' bytes");
}

/// Opens two endpoints and makes each the other's peer.
#[track_caller]
pub fn pair(a: &str, b: &str, a_sees_b: &str, b_sees_a: &str) -> (Endpoint, Endpoint, Peer, Peer) {
    pair_with(a, b, a_sees_b, b_sees_a, Options::default())
}

/// [`pair`] with `options` for both endpoints.
#[track_caller]
pub fn pair_with(
    a: &str,
    b: &str,
    a_sees_b: &str,
    b_sees_a: &str,
    options: Options,
) -> (Endpoint, Endpoint, Peer, Peer) {
    let mut ea =
        Endpoint::open_with(a, options.clone()).unwrap_or_else(|e| panic!("open {a}: {e}"));
    let mut eb = Endpoint::open_with(b, options).unwrap_or_else(|e| panic!("open {b}: {e}"));
    let to_b = ea.insert_addr(a_sees_b).unwrap();
    let to_a = eb.insert_addr(b_sees_a).unwrap();
    (ea, eb, to_b, to_a)
}

/// Progresses every endpoint in turn, at most `rounds` times, until `f` says done.
pub fn drive_until<T>(
    eps: &mut [&mut Endpoint],
    rounds: usize,
    mut f: impl FnMut(&mut [&mut Endpoint]) -> Option<T>,
) -> Option<T> {
    for _ in 0..rounds.max(1) {
        for e in eps.iter_mut() {
            e.progress();
        }
        if let Some(t) = f(eps) {
            return Some(t);
        }
    }
    None
}

/// Calls `f` until it returns something, for at most 20 s of real time (a bound for a
/// broken build, never reached by a working one: nothing here races a timer).
pub fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(t) = f() {
            return Some(t);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::yield_now();
    }
}

/// Makes side `side` of shm region `name` look owned by a process that does not exist.
pub fn forge_dead_owner(name: &str, side: usize) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(myri_transport::shm_region_path(name))
        .unwrap();
    let dead_pid: u64 = 0x7fff_fff0; // above any pid_max
    let at = layout::SIDE_AT + side * layout::SIDE_LEN + layout::OWNER;
    f.write_all_at(&((dead_pid << 32) | 1).to_le_bytes(), at as u64)
        .unwrap();
}
