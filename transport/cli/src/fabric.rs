//! `myri fabric`: frames by source route across a simulated fabric of switches.

use crate::Failure;
use crate::opts::{FaultArgs, print_json};
use clap::{Args, ValueEnum};
use myri_device::board::{Board, BoardConfig, bring_up};
use myri_device::fabric::topology::line;
use myri_device::fabric::{
    CableConfig, Endpoint, Fabric, FabricBuilder, LinkId, LinkModel, SwitchSize,
};
use myri_device::run::run_threaded;
use myri_device::sched::{Outcome, Sim};
use myri_device::time::Time;
use myri_device::traffic::TrafficNode;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// How to run the boards.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricMode {
    /// The deterministic scheduler, in virtual time: the same seed gives the same trace.
    Sim,
    /// Every board on its own thread, in real time.
    Threaded,
}

/// Arguments of `myri fabric`.
#[derive(Args, Debug)]
pub struct FabricArgs {
    /// Number of boards, on a line of 8-port switches (one switch for up to 8).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub boards: u32,
    /// Total frames to send, spread over the boards, each to a random other board.
    #[arg(long, default_value_t = 1000)]
    pub packets: u64,
    /// Frame size in bytes (header included).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(14..=65000))]
    pub size: u32,
    /// Model SAN-1280 links (160 MB/s, 0.5 us per hop) instead of unthrottled ones.
    #[arg(long)]
    pub timed: bool,
    /// How to run the boards.
    #[arg(long, value_enum, default_value_t = FabricMode::Sim)]
    pub mode: FabricMode,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Print text, then one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

fn name(fabric: &Fabric, link: LinkId) -> String {
    let show = |e: Option<Endpoint>| match e {
        Some(Endpoint::Host(p)) => format!("board{}", p.0),
        Some(Endpoint::Switch(s, port)) => format!("sw{}.{}", s.0, port),
        None => "?".into(),
    };
    format!(
        "{} -> {}",
        show(fabric.link_end(LinkId(link.0 ^ 1))),
        show(fabric.link_end(link))
    )
}

/// Runs `myri fabric`.
pub fn run(args: &FabricArgs) -> Result<(), Failure> {
    let faults = args.faults.config()?;
    let model = if args.timed {
        LinkModel::SAN_1280
    } else {
        LinkModel::default()
    };
    let mut b = FabricBuilder::new(args.faults.seed);
    b.queue_limit(1 << 16);
    let ports = line(
        &mut b,
        args.boards as usize,
        SwitchSize::Eight,
        CableConfig::symmetric(model, faults),
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    let fabric = Arc::new(b.build());
    let n = u64::from(args.boards);
    let senders = Arc::new(AtomicU64::new(n));
    let mut nodes = Vec::new();
    for (i, &port) in ports.iter().enumerate() {
        let mut board = Board::new(BoardConfig::pci64b(i as u32));
        board.attach_link(fabric.clone(), port);
        bring_up(&mut board, Time::ZERO, &[]).map_err(|e| Failure::check(e.to_string()))?;
        let peers = ports
            .iter()
            .filter(|&&p| p != port)
            .filter_map(|&p| fabric.route(port, p))
            .collect();
        let share = args.packets / n + u64::from((i as u64) < args.packets % n);
        nodes.push(TrafficNode::new(
            i as u32,
            board,
            peers,
            share,
            args.size as usize,
            Duration::from_micros(1),
            args.faults.seed,
            senders.clone(),
        ));
    }
    let nodes = match args.mode {
        FabricMode::Sim => {
            let mut sim = Sim::new(fabric.clone());
            for node in nodes {
                sim.add(node);
            }
            match sim.run_until(Time::from_micros(3_600_000_000)) {
                Outcome::Idle => {}
                other => return Err(Failure::check(format!("simulation ended {other:?}"))),
            }
            sim.into_nodes()
        }
        FabricMode::Threaded => {
            let (nodes, finished) = run_threaded(&fabric, nodes, Duration::from_secs(600));
            if !finished {
                return Err(Failure::check("threaded run did not finish in 600 s"));
            }
            nodes
        }
    };
    let c = fabric.counters();
    let received: u64 = nodes.iter().map(|n| n.stats().received).sum();
    let corrupt: u64 = nodes
        .iter()
        .map(|n| n.stats().corrupt + n.stats().foreign + n.stats().overruns)
        .sum();
    let sent: u64 = nodes.iter().map(|n| n.stats().sent).sum();

    let mut links = Vec::new();
    println!(
        "fabric: {} boards, {} cables, mode {}, seed {}",
        args.boards,
        fabric.cables(),
        format!("{:?}", args.mode).to_lowercase(),
        args.faults.seed
    );
    println!(
        "{:<22} {:>9} {:>10} {:>8} {:>10} {:>11} {:>10}",
        "link", "offered", "delivered", "dropped", "corrupted", "duplicated", "reordered"
    );
    for l in 0..fabric.cables() as u32 * 2 {
        let id = LinkId(l);
        let lc = fabric.link_counters(id).unwrap_or_default();
        if lc.offered == 0 {
            continue;
        }
        let label = name(&fabric, id);
        println!(
            "{label:<22} {:>9} {:>10} {:>8} {:>10} {:>11} {:>10}",
            lc.offered,
            lc.passed,
            lc.dropped(),
            lc.corrupted,
            lc.duplicated,
            lc.reordered
        );
        links.push(json!({"link": label, "offered": lc.offered, "delivered": lc.passed, "dropped": lc.dropped(), "corrupted": lc.corrupted, "duplicated": lc.duplicated, "reordered": lc.reordered}));
    }
    println!(
        "total: sent {} delivered {} dropped {} (links {}, crc {}, routes {}, full queues {}) corrupted {} duplicated {} reordered {}",
        c.sent,
        c.delivered,
        c.dropped,
        c.link_drops,
        c.crc_errors,
        c.bad_routes,
        c.overflows,
        c.corrupted,
        c.duplicated,
        c.reordered
    );
    println!("boards: received {received} intact, {corrupt} bad");
    println!("trace hash: {:#018x}", fabric.trace_hash());
    if args.json {
        print_json(&json!({
            "boards": args.boards,
            "packets": args.packets,
            "mode": format!("{:?}", args.mode).to_lowercase(),
            "seed": args.faults.seed,
            "sent": c.sent,
            "delivered": c.delivered,
            "received": received,
            "dropped": c.dropped,
            "corrupted": c.corrupted,
            "duplicated": c.duplicated,
            "reordered": c.reordered,
            "crc_errors": c.crc_errors,
            "bad_routes": c.bad_routes,
            "trace_hash": format!("{:#018x}", fabric.trace_hash()),
            "links": links,
        }));
    }
    // Every frame is accounted for, and every delivered frame arrived intact.
    if sent != args.packets || c.sent != sent {
        return Err(Failure::check(format!(
            "sent {} of {} frames",
            c.sent, args.packets
        )));
    }
    if c.delivered + c.dropped != c.sent + c.duplicated {
        return Err(Failure::check("the fabric lost track of a frame"));
    }
    if received != c.delivered || corrupt != 0 {
        return Err(Failure::check(format!(
            "boards received {received} intact and {corrupt} bad of {} delivered",
            c.delivered
        )));
    }
    Ok(())
}
