//! The plain reference for `shm://`: two processes over a bare shared-memory ring pair,
//! no slots, no descriptors, no protocol.
//!
//! The server creates a region file beside its transport region (`/dev/shm/myri-NAME+ref`,
//! a name no transport region can have) holding a header and two rings of
//! [`RING_CAPACITY`] bytes, client to server and back. Records use the framing of
//! [`super::wire`]: the server echoes pings and counts data, answering a stream's start
//! and its last message. A message larger than a ring record goes as several records.

use super::wire::{self, Control, KIND_DATA, KIND_PING};
use super::{RoundTime, StreamRound};
use myri_ring::raw::{self, Consumer, Producer, Region, RingError, RingPlace};
use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bytes of each ring's data.
pub const RING_CAPACITY: usize = 1 << 20;
const MAGIC: u64 = u64::from_le_bytes(*b"MYRIREF1");
const MAGIC_AT: usize = 0;
const PID_AT: usize = 8;
const HEADER: usize = 4096;

fn places() -> (RingPlace, RingPlace) {
    let to_server = RingPlace {
        offset: HEADER,
        capacity: RING_CAPACITY,
    };
    let to_client = RingPlace {
        offset: HEADER + (raw::RING_HEADER + RING_CAPACITY).next_multiple_of(4096),
        capacity: RING_CAPACITY,
    };
    (to_server, to_client)
}

fn region_len() -> usize {
    let (_, b) = places();
    b.offset + b.size()
}

/// Path of the reference region of transport region `name`.
pub fn region_path(name: &str) -> PathBuf {
    let mut p = myri_transport::shm_region_path(name).into_os_string();
    p.push("+ref");
    PathBuf::from(p)
}

fn pid_alive(pid: u64) -> bool {
    pid != 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// Why the reference region could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum RingRefError {
    /// Another live server holds the region.
    #[error("{0} belongs to another live server (pid {1})")]
    Busy(String, u64),
    /// The file is not a reference region.
    #[error("{0} is not a myri reference region")]
    NotARegion(String),
    /// An operating-system call failed.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// A ring's geometry was refused.
    #[error("{0}: {1}")]
    Ring(String, RingError),
}

fn map(path: &Path, create: bool) -> Result<Arc<Region>, RingRefError> {
    let shown = path.display().to_string();
    let io = |e| RingRefError::Io(shown.clone(), e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create)
        .open(path)
        .map_err(io)?;
    if create {
        file.set_len(region_len() as u64).map_err(io)?;
    } else if file.metadata().map_err(io)?.len() < region_len() as u64 {
        return Err(RingRefError::NotARegion(shown));
    }
    Ok(Arc::new(Region::map_file(&file).map_err(io)?))
}

fn rings(
    region: &Arc<Region>,
    path: &Path,
    server: bool,
) -> Result<(Producer, Consumer), RingRefError> {
    let shown = || path.display().to_string();
    let (to_server, to_client) = places();
    let (p_in, c_in) =
        raw::ring(region.clone(), to_server).map_err(|e| RingRefError::Ring(shown(), e))?;
    let (p_out, c_out) =
        raw::ring(region.clone(), to_client).map_err(|e| RingRefError::Ring(shown(), e))?;
    Ok(if server { (p_out, c_in) } else { (p_in, c_out) })
}

/// Sends one record, waiting at most `timeout` for room; whether it went.
fn spin_send(p: &mut Producer, data: &[u8], timeout: Duration) -> bool {
    let mut since = None;
    loop {
        match p.try_send(data) {
            Ok(()) => return true,
            Err(RingError::Full) => {
                // The other side is gone (or stuck): give up rather than spin forever.
                if since.get_or_insert_with(Instant::now).elapsed() > timeout {
                    return false;
                }
                std::hint::spin_loop();
            }
            // A record too large or a broken ring: the peer times out and says so.
            Err(_) => return false,
        }
    }
}

/// How long the server waits for room in the ring to the client.
const SERVER_SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// The server side: echoes pings, counts data.
pub struct RingReflector {
    path: PathBuf,
    _region: Arc<Region>,
    tx: Producer,
    rx: Consumer,
    expect: u64,
    round: u32,
    received: u64,
    bytes: u64,
    /// Records echoed.
    pub echoed: u64,
    /// Data records counted.
    pub sunk: u64,
    /// Records that were not understood, or a broken ring.
    pub malformed: u64,
}

impl RingReflector {
    /// Creates the reference region of transport region `name` (replacing one left by a
    /// dead server).
    pub fn create(name: &str) -> Result<RingReflector, RingRefError> {
        let path = region_path(name);
        let region = match map(&path, true) {
            Ok(r) => r,
            Err(RingRefError::Io(_, e)) if e.kind() == ErrorKind::AlreadyExists => {
                if let Ok(old) = map(&path, false) {
                    let pid = old.word(PID_AT).map_or(0, |w| w.load(Ordering::Acquire));
                    if pid_alive(pid) && pid != u64::from(std::process::id()) {
                        return Err(RingRefError::Busy(path.display().to_string(), pid));
                    }
                }
                let _ = std::fs::remove_file(&path);
                map(&path, true)?
            }
            Err(e) => return Err(e),
        };
        let (tx, rx) = rings(&region, &path, true)?;
        let word = |at| region.word(at).expect("the header lies in the region");
        word(PID_AT).store(u64::from(std::process::id()), Ordering::Relaxed);
        word(MAGIC_AT).store(MAGIC, Ordering::Release);
        Ok(RingReflector {
            path,
            _region: region,
            tx,
            rx,
            expect: 0,
            round: 0,
            received: 0,
            bytes: 0,
            echoed: 0,
            sunk: 0,
            malformed: 0,
        })
    }

    /// The region's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Handles what has arrived (at most 64 records); returns whether anything did.
    pub fn poll(&mut self) -> bool {
        let mut worked = false;
        for _ in 0..64 {
            let reply = {
                let rec = match self.rx.try_read() {
                    Ok(r) => r,
                    Err(RingError::Empty) => break,
                    Err(_) => {
                        self.malformed += 1;
                        break;
                    }
                };
                worked = true;
                let msg = rec.as_slice();
                match wire::header(msg) {
                    Some(h) if h.kind == KIND_PING => {
                        if spin_send(&mut self.tx, msg, SERVER_SEND_TIMEOUT) {
                            self.echoed += 1;
                        }
                        None
                    }
                    Some(_) => {
                        self.sunk += 1;
                        self.received += 1;
                        self.bytes += msg.len() as u64;
                        (self.received == self.expect).then_some(Control::StreamAck {
                            round: self.round,
                            done: true,
                            received: self.received,
                            bytes: self.bytes,
                            errors: 0,
                        })
                    }
                    None => match wire::control(msg) {
                        Some(Ok(Control::StreamStart { round, count, .. })) => {
                            (self.round, self.expect) = (round, count);
                            (self.received, self.bytes) = (0, 0);
                            Some(Control::StreamAck {
                                round,
                                done: false,
                                received: 0,
                                bytes: 0,
                                errors: 0,
                            })
                        }
                        _ => {
                            self.malformed += 1;
                            None
                        }
                    },
                }
            };
            if let Some(c) = reply {
                spin_send(&mut self.tx, &wire::encode_control(&c), SERVER_SEND_TIMEOUT);
            }
        }
        worked
    }
}

impl Drop for RingReflector {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The client side.
pub struct RingClient {
    _region: Arc<Region>,
    tx: Producer,
    rx: Consumer,
    buf: Vec<u8>,
    round: u32,
    timeout: Duration,
}

impl RingClient {
    /// Maps the reference region at `path` (as the server announced it). `timeout`: how
    /// long an exchange waits before the server counts as gone.
    pub fn open(path: &Path, timeout: Duration) -> Result<RingClient, RingRefError> {
        let region = map(path, false)?;
        let magic = region
            .word(MAGIC_AT)
            .map_or(0, |w| w.load(Ordering::Acquire));
        if magic != MAGIC {
            return Err(RingRefError::NotARegion(path.display().to_string()));
        }
        let (tx, mut rx) = rings(&region, path, false)?;
        // Whatever a previous client left unread is not ours.
        while rx.try_read().is_ok() {}
        Ok(RingClient {
            _region: region,
            tx,
            rx,
            buf: Vec::new(),
            round: 0,
            timeout,
        })
    }

    fn max_record(&self) -> usize {
        self.tx.max_record()
    }

    /// `iters` ping-pongs of `size` bytes. `None` if the server stopped answering.
    pub fn pingpong_round(&mut self, size: usize, iters: u64) -> Option<RoundTime> {
        self.round = self.round.wrapping_add(1);
        let round = self.round as u8;
        let size = size.clamp(wire::HEADER_LEN, self.max_record());
        self.buf.resize(size, 0);
        let start = Instant::now();
        for seq in 0..iters {
            wire::put_header(&mut self.buf, KIND_PING, round, seq);
            if !spin_send(&mut self.tx, &self.buf, self.timeout) {
                return None;
            }
            let sent_at = Instant::now();
            loop {
                match self.rx.try_read() {
                    Ok(r) => {
                        let h = wire::header(r.as_slice());
                        if h.is_some_and(|h| h.round == round && h.seq == seq) {
                            break;
                        }
                    }
                    Err(RingError::Empty) => {
                        if sent_at.elapsed() > self.timeout {
                            return None;
                        }
                        std::hint::spin_loop();
                    }
                    Err(_) => return None,
                }
            }
        }
        Some(RoundTime {
            elapsed: start.elapsed(),
            exchanges: iters,
            timeouts: 0,
        })
    }

    fn await_ack(&mut self, round: u32, done: bool) -> Option<(u64, u64)> {
        let since = Instant::now();
        loop {
            match self.rx.try_read() {
                Ok(r) => {
                    if let Some(Ok(Control::StreamAck {
                        round: got,
                        done: d,
                        received,
                        bytes,
                        ..
                    })) = wire::control(r.as_slice())
                        && got == round
                        && d == done
                    {
                        return Some((received, bytes));
                    }
                }
                Err(RingError::Empty) => {
                    if since.elapsed() > self.timeout {
                        return None;
                    }
                    std::hint::spin_loop();
                }
                Err(_) => return None,
            }
        }
    }

    /// Streams `count` messages of `size` bytes; returns when the server has counted the
    /// last. `None` if it stopped answering.
    pub fn stream_round(&mut self, size: usize, count: u64) -> Option<StreamRound> {
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        let size = size.max(wire::HEADER_LEN);
        let record = size.min(self.max_record());
        let per_message = size.div_ceil(record) as u64;
        let start = Control::StreamStart {
            round,
            count: count * per_message,
            sizes: wire::SizeSpec::Fixed(size),
            seed: 0,
            verify: false,
        };
        if !spin_send(&mut self.tx, &wire::encode_control(&start), self.timeout) {
            return None;
        }
        self.await_ack(round, false)?;
        self.buf.resize(record, 0x5a);
        let t0 = Instant::now();
        let mut seq = 0;
        for _ in 0..count {
            let mut left = size;
            while left > 0 {
                let n = left.min(record).max(wire::HEADER_LEN);
                wire::put_header(&mut self.buf, KIND_DATA, round as u8, seq);
                if !spin_send(&mut self.tx, &self.buf[..n], self.timeout) {
                    return None;
                }
                seq += 1;
                left = left.saturating_sub(n);
            }
        }
        let (received, bytes) = self.await_ack(round, true)?;
        Some(StreamRound {
            elapsed: t0.elapsed(),
            sent: seq,
            received,
            bytes,
            errors: 0,
        })
    }
}
