//! The protocols' own cost: two ends in one thread exchanging 8-byte messages over a
//! perfect in-memory channel (no faults, no I/O), RPP against the `kcp` crate, counted
//! in instructions per exchange (a ping and its echo) under callgrind.
//!
//! ```sh
//! cargo build --release -p myri-benches --bin proto_cost
//! # Both protocols, each run with a small and a large count; the difference cancels set-up:
//! target/release/proto_cost compare            # 2000 and 22000 exchanges by default
//! # One run by hand, and where its instructions go:
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.rpp target/release/proto_cost rpp 20000
//! callgrind_annotate /tmp/cg.rpp | head -40
//! ```
//!
//! Modes: `rpp` (the default [`Config`]: messages delivered as events), `rpp-inplace`
//! (`in_place_delivery`: a whole in-order message is handed over as a range of the
//! datagram), `kcp` (fast mode, `set_nodelay(true, 10, 2, true)`, the same window and
//! MTU). Each end, at its turn, takes what arrived, answers, runs its timers when due,
//! and sends; acknowledgements ride on the next message both ways (RPP's ack
//! coalescing; KCP's ack list goes out with its next flush). Virtual time moves by
//! `hop_ns` (default 5 µs, the default link's one-way delay) per hop, so timers and RTT
//! estimators run as they would on a link; KCP's clock ticks in microseconds.

use kcp::Kcp;
use myri_benches::cost::{self, CallgrindError};
use myri_rpp::{Config, Connection, Event, Instant, Received};
use std::cell::{Cell, RefCell};
use std::io::{self, Write};
use std::rc::Rc;
use std::time::Duration;
use thiserror::Error;

const CONV: u32 = 0x5250_5031;
const USAGE: &str = "usage: proto_cost rpp|rpp-inplace|kcp EXCHANGES [HOP_NS]\n       \
                     proto_cost compare [SMALL LARGE [HOP_NS]]";

/// What went wrong.
#[derive(Debug, Error)]
enum CostError {
    #[error("{0}\n{USAGE}")]
    Usage(String),
    #[error(transparent)]
    Callgrind(#[from] CallgrindError),
    #[error("the {0} exchange went wrong: {1}")]
    Exchange(&'static str, String),
}

/// Which protocol and delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Rpp,
    RppInPlace,
    Kcp,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Rpp, Mode::RppInPlace, Mode::Kcp];

    fn name(self) -> &'static str {
        match self {
            Mode::Rpp => "rpp",
            Mode::RppInPlace => "rpp-inplace",
            Mode::Kcp => "kcp",
        }
    }

    fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("proto_cost: {e}");
        std::process::exit(2);
    }
}

fn number(arg: Option<&String>, default: u64, what: &str) -> Result<u64, CostError> {
    cost::number(arg, default, what).map_err(CostError::Usage)
}

fn run(args: Vec<String>) -> Result<(), CostError> {
    let first = args
        .first()
        .ok_or_else(|| CostError::Usage("say which protocol, or compare".into()))?;
    if first == "compare" {
        let small = number(args.get(1), 2_000, "SMALL")?;
        let large = number(args.get(2), 22_000, "LARGE")?;
        let hop = number(args.get(3), 5_000, "HOP_NS")?;
        if large <= small {
            return Err(CostError::Usage("LARGE must exceed SMALL".into()));
        }
        return compare(small, large, hop);
    }
    let mode = Mode::parse(first)
        .ok_or_else(|| CostError::Usage(format!("unknown protocol {first:?}")))?;
    let exchanges = number(args.get(1), 20_000, "EXCHANGES")?;
    let hop = Duration::from_nanos(number(args.get(2), 5_000, "HOP_NS")?);
    let sum = match mode {
        Mode::Rpp => rpp(exchanges, hop, false),
        Mode::RppInPlace => rpp(exchanges, hop, true),
        Mode::Kcp => kcp(exchanges, hop),
    }
    .map_err(|why| CostError::Exchange(mode.name(), why))?;
    if sum != (0..exchanges).sum::<u64>() {
        return Err(CostError::Exchange(
            mode.name(),
            "echoes do not add up".into(),
        ));
    }
    println!("{}: {exchanges} exchanges of 8 bytes", mode.name());
    Ok(())
}

/// Runs each mode under callgrind with `small` and `large` exchanges and prints the
/// instructions per exchange.
fn compare(small: u64, large: u64, hop: u64) -> Result<(), CostError> {
    let exe = std::env::current_exe().map_err(CallgrindError::from)?;
    let dir = cost::profile_dir("myri-proto-cost")?;
    println!(
        "instructions per exchange (8 B ping + 8 B echo), ({large} - {small}) exchanges, hop {hop} ns:"
    );
    let mut per = Vec::new();
    for mode in Mode::ALL {
        let mut totals = [0u64; 2];
        for (total, n) in totals.iter_mut().zip([small, large]) {
            let out = dir.join(format!("callgrind.{}.{n}.out", mode.name()));
            let args = [mode.name().to_string(), n.to_string(), hop.to_string()];
            *total = cost::instructions(&exe, &out, &args, &[])?;
        }
        let cost = (totals[1] as f64 - totals[0] as f64) / (large - small) as f64;
        println!(
            "  {:<12} {:>8.0}   ({} Ir at {small}, {} Ir at {large}; profile: {})",
            mode.name(),
            cost,
            totals[0],
            totals[1],
            dir.join(format!("callgrind.{}.{large}.out", mode.name()))
                .display()
        );
        per.push((mode, cost));
    }
    let kcp = per
        .iter()
        .find(|(m, _)| *m == Mode::Kcp)
        .map_or(1.0, |p| p.1);
    for (mode, cost) in &per {
        if *mode != Mode::Kcp {
            println!("  {} / kcp = {:.2}", mode.name(), cost / kcp);
        }
    }
    Ok(())
}

// ---- The channel ----------------------------------------------------------------------

/// A perfect channel one way: datagrams in the order sent, buffers reused.
#[derive(Default)]
struct Wire {
    queue: Vec<Vec<u8>>,
    pool: Vec<Vec<u8>>,
}

impl Wire {
    fn push(&mut self, datagram: &[u8]) {
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(datagram);
        self.queue.push(buf);
    }

    /// Hands each datagram to `take`, oldest first, and keeps the buffers.
    fn drain<E>(&mut self, mut take: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let mut queue = std::mem::take(&mut self.queue);
        let result = queue.iter().try_for_each(|d| take(d));
        self.pool.append(&mut queue);
        self.queue = queue;
        result
    }
}

// ---- RPP -------------------------------------------------------------------------------

/// One end's turn: take what arrived, let the application answer, run due timers, send.
fn rpp_turn(
    now: Instant,
    end: &mut Connection<[u8; 8]>,
    inbound: &mut Wire,
    outbound: &mut Wire,
    scratch: &mut [u8],
    answer: &mut impl FnMut(&mut Connection<[u8; 8]>, [u8; 8]) -> Result<(), String>,
) -> Result<(), String> {
    inbound.drain(|datagram| {
        if let Received::InPlace { payload, .. } = end.handle_packet(now, datagram) {
            let msg = datagram
                .get(payload)
                .and_then(|m| <[u8; 8]>::try_from(m).ok())
                .ok_or("a message of the wrong size")?;
            answer(end, msg)?;
        }
        Ok::<(), String>(())
    })?;
    while let Some(event) = end.poll_event() {
        match event {
            Event::Message(m) => {
                let msg: [u8; 8] = m[..]
                    .try_into()
                    .map_err(|_| "a message of the wrong size")?;
                end.recycle(m);
                answer(end, msg)?;
            }
            Event::Failed { error, .. } => return Err(error.to_string()),
            _ => {}
        }
    }
    if end.poll_timeout().is_some_and(|t| t <= now) {
        end.handle_timeout(now);
    }
    while let Some(n) = end.poll_transmit(now, scratch) {
        outbound.push(&scratch[..n]);
    }
    Ok(())
}

fn rpp(exchanges: u64, hop: Duration, in_place: bool) -> Result<u64, String> {
    let config = Config::default().with_in_place_delivery(in_place);
    let mut now = Instant::ZERO;
    let new = |now| Connection::<[u8; 8]>::new(config.clone(), 1, u64::from(CONV), now);
    let mut a = new(now).map_err(|e| e.to_string())?;
    let mut b = new(now).map_err(|e| e.to_string())?;
    let (mut a_to_b, mut b_to_a) = (Wire::default(), Wire::default());
    let mut scratch = vec![0u8; config.mtu];
    let sum = Cell::new(0u64);
    let got = Cell::new(0u64);
    let mut take = |_: &mut Connection<[u8; 8]>, msg: [u8; 8]| {
        sum.set(sum.get().wrapping_add(u64::from_le_bytes(msg)));
        got.set(got.get() + 1);
        Ok(())
    };
    let mut echo = |end: &mut Connection<[u8; 8]>, msg: [u8; 8]| {
        end.send(msg).map(drop).map_err(|e| e.to_string())
    };
    for i in 0..exchanges {
        a.send(i.to_le_bytes()).map_err(|e| e.to_string())?;
        rpp_turn(
            now,
            &mut a,
            &mut b_to_a,
            &mut a_to_b,
            &mut scratch,
            &mut take,
        )?;
        // The first ping also waits for the handshake: RPP sends no data before it knows
        // the peer's incarnation, so it takes a round trip or two more (a fixed set-up
        // cost, which `compare` subtracts with the other set-up work).
        let round_trips = if i == 0 { 8 } else { 1 };
        for _ in 0..round_trips {
            now += hop;
            rpp_turn(
                now,
                &mut b,
                &mut a_to_b,
                &mut b_to_a,
                &mut scratch,
                &mut echo,
            )?;
            now += hop;
            rpp_turn(
                now,
                &mut a,
                &mut b_to_a,
                &mut a_to_b,
                &mut scratch,
                &mut take,
            )?;
            if got.get() == i + 1 {
                break;
            }
        }
        if got.get() != i + 1 {
            return Err(format!(
                "the echo of ping {i} did not come back in its round trip"
            ));
        }
    }
    Ok(sum.get())
}

// ---- KCP -------------------------------------------------------------------------------

/// KCP's output: each datagram it writes goes on the wire to the other end.
#[derive(Clone, Default)]
struct Outbox(Rc<RefCell<Wire>>);

impl Write for Outbox {
    fn write(&mut self, datagram: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().push(datagram);
        Ok(datagram.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn kcp_end(out: Outbox) -> Result<Kcp<Outbox>, String> {
    let config = Config::default();
    let mut k = Kcp::new(CONV, out);
    k.set_nodelay(true, 10, 2, true);
    let window = u16::try_from(config.send_window).map_err(|e| e.to_string())?;
    k.set_wndsize(window, window);
    k.set_mtu(config.mtu).map_err(|e| e.to_string())?;
    Ok(k)
}

/// One end's turn: take what arrived, let the application answer, then send once: by
/// `update` when its interval is due, else by `flush` if the application sent.
/// `answer` says whether it sent.
fn kcp_turn(
    ticks: u32,
    end: &mut Kcp<Outbox>,
    inbound: &Outbox,
    mut sent: bool,
    recv_buf: &mut [u8],
    answer: &mut impl FnMut(&mut Kcp<Outbox>, [u8; 8]) -> Result<bool, String>,
) -> Result<(), String> {
    let due = end.check(ticks) == 0;
    if !due {
        // Sets KCP's clock (it reads it for RTT samples and timestamps); no flush.
        end.update(ticks).map_err(|e| e.to_string())?;
    }
    inbound
        .0
        .borrow_mut()
        .drain(|datagram| end.input(datagram).map(drop))
        .map_err(|e| e.to_string())?;
    while let Ok(n) = end.recv(recv_buf) {
        let msg: [u8; 8] = recv_buf[..n]
            .try_into()
            .map_err(|_| "a message of the wrong size")?;
        sent |= answer(end, msg)?;
    }
    if due {
        // The interval is due (always, the first time): `update` flushes everything.
        end.update(ticks).map_err(|e| e.to_string())?;
    } else if sent {
        end.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn kcp(exchanges: u64, hop: Duration) -> Result<u64, String> {
    let (to_b, to_a) = (Outbox::default(), Outbox::default());
    let mut a = kcp_end(to_b.clone())?;
    let mut b = kcp_end(to_a.clone())?;
    let mut recv_buf = vec![0u8; 64];
    let mut now = Duration::ZERO;
    // KCP's clock in microseconds (see the rpp_kcp benchmark for why).
    let ticks = |t: Duration| t.as_micros() as u32;
    let sum = Cell::new(0u64);
    let got = Cell::new(0u64);
    let mut take = |_: &mut Kcp<Outbox>, msg: [u8; 8]| {
        sum.set(sum.get().wrapping_add(u64::from_le_bytes(msg)));
        got.set(got.get() + 1);
        Ok(false)
    };
    let mut echo = |end: &mut Kcp<Outbox>, msg: [u8; 8]| {
        end.send(&msg).map_err(|e| e.to_string())?;
        Ok(true)
    };
    for i in 0..exchanges {
        a.send(&i.to_le_bytes()).map_err(|e| e.to_string())?;
        kcp_turn(ticks(now), &mut a, &to_a, true, &mut recv_buf, &mut take)?;
        now += hop;
        kcp_turn(ticks(now), &mut b, &to_b, false, &mut recv_buf, &mut echo)?;
        now += hop;
        kcp_turn(ticks(now), &mut a, &to_a, false, &mut recv_buf, &mut take)?;
        if got.get() != i + 1 {
            return Err(format!(
                "the echo of ping {i} did not come back in its round trip"
            ));
        }
    }
    Ok(sum.get())
}
