//! The physical reference for the board benchmarks: the same ping-pong or stream between
//! two threads over a plain shared-memory ring, with no stack at all.
//!
//! The echoing (or receiving) thread is started once and parked between rounds, so
//! that rounds alternate with the stack's without thread start-up in the figures and
//! without the reference's threads competing with the stack's.

use super::Reference;
use myri_ring::{Consumer, Producer, RingError, heap_ring};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ring size: room for the largest benchmark records with a window of them in flight.
const CAPACITY: usize = 1 << 18;

const IDLE: u64 = 0;
const PINGPONG: u64 = 1;
const STREAM: u64 = 2;
const STOP: u64 = 3;

/// What the worker is asked to do: a command and its count.
struct Control {
    command: AtomicU64,
    count: AtomicU64,
}

/// Two threads joined by two shared-memory rings.
pub struct RingReference {
    to_worker: Producer,
    from_worker: Consumer,
    control: Arc<Control>,
    worker: Option<JoinHandle<()>>,
    scratch: Vec<u8>,
}

fn spin_send(p: &mut Producer, data: &[u8]) {
    while let Err(e) = p.try_send(data) {
        match e {
            RingError::Full => std::hint::spin_loop(),
            other => panic!("reference ring: {other}"),
        }
    }
}

fn worker(mut rx: Consumer, mut tx: Producer, control: Arc<Control>) {
    // Received bytes land here, as a receiving application's buffer would: the reference
    // moves the data to this core, as the stack does.
    let mut sink = vec![0u8; 1 << 16];
    loop {
        match control.command.load(Ordering::Acquire) {
            STOP => return,
            IDLE => std::thread::park_timeout(Duration::from_millis(5)),
            cmd => {
                let count = control.count.load(Ordering::Relaxed);
                let mut seen = 0;
                while seen < count {
                    // Echo each record back (ping-pong), or count them and answer once.
                    let r = match rx.try_read() {
                        Ok(r) => r,
                        Err(RingError::Empty) => {
                            std::hint::spin_loop();
                            continue;
                        }
                        Err(e) => panic!("reference ring: {e}"),
                    };
                    seen += 1;
                    let n = r.len().min(sink.len());
                    sink[..n].copy_from_slice(&r.as_slice()[..n]);
                    if cmd == PINGPONG {
                        let data = r.as_slice();
                        loop {
                            match tx.try_reserve(data.len()) {
                                Ok(mut g) => {
                                    g.as_mut_slice().copy_from_slice(data);
                                    g.commit(data.len());
                                    break;
                                }
                                Err(RingError::Full) => std::hint::spin_loop(),
                                Err(e) => panic!("reference ring: {e}"),
                            }
                        }
                    }
                }
                if cmd == STREAM {
                    spin_send(&mut tx, &seen.to_be_bytes());
                }
                control.command.store(IDLE, Ordering::Release);
            }
        }
    }
}

impl RingReference {
    /// Starts the worker thread.
    pub fn new() -> RingReference {
        let (to_worker, worker_rx) = heap_ring(CAPACITY).expect("ring geometry");
        let (worker_tx, from_worker) = heap_ring(CAPACITY).expect("ring geometry");
        let control = Arc::new(Control {
            command: AtomicU64::new(IDLE),
            count: AtomicU64::new(0),
        });
        let c = control.clone();
        let worker = std::thread::Builder::new()
            .name("ring-reference".into())
            .spawn(move || worker(worker_rx, worker_tx, c))
            .expect("spawn the reference thread");
        RingReference {
            to_worker,
            from_worker,
            control,
            worker: Some(worker),
            scratch: Vec::new(),
        }
    }

    fn start(&self, command: u64, count: u64) {
        self.control.count.store(count, Ordering::Relaxed);
        self.control.command.store(command, Ordering::Release);
        if let Some(w) = &self.worker {
            w.thread().unpark();
        }
    }

    fn wait_idle(&self) {
        while self.control.command.load(Ordering::Acquire) != IDLE {
            std::hint::spin_loop();
        }
    }

    fn recv(&mut self) {
        loop {
            match self.from_worker.try_recv(&mut self.scratch) {
                Ok(_) => return,
                Err(RingError::Empty) => std::hint::spin_loop(),
                Err(e) => panic!("reference ring: {e}"),
            }
        }
    }
}

impl Default for RingReference {
    fn default() -> Self {
        RingReference::new()
    }
}

impl Reference for RingReference {
    fn pingpong_round(&mut self, size: usize, iters: u64) -> Vec<Duration> {
        let data = vec![0x5Au8; size];
        let mut rtts = Vec::with_capacity(iters as usize);
        self.start(PINGPONG, iters);
        for _ in 0..iters {
            let t = Instant::now();
            spin_send(&mut self.to_worker, &data);
            self.recv();
            rtts.push(t.elapsed());
        }
        self.wait_idle();
        rtts
    }

    fn stream_round(&mut self, size: usize, count: u64, window: usize) -> f64 {
        let data = vec![0xA5u8; size];
        let record = (size + 8).next_multiple_of(8);
        self.start(STREAM, count);
        let t = Instant::now();
        for _ in 0..count {
            // At most `window` records unread by the worker.
            while self.to_worker.unread() >= window * record {
                std::hint::spin_loop();
            }
            spin_send(&mut self.to_worker, &data);
        }
        self.recv();
        let secs = t.elapsed().as_secs_f64();
        self.wait_idle();
        (count as usize * size) as f64 / secs
    }
}

impl Drop for RingReference {
    fn drop(&mut self) {
        self.control.command.store(STOP, Ordering::Release);
        if let Some(w) = self.worker.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_on_one_worker() {
        let mut r = RingReference::new();
        for _ in 0..3 {
            assert_eq!(r.pingpong_round(8, 50).len(), 50);
            assert!(r.stream_round(8192, 40, 8) > 0.0);
        }
    }
}
