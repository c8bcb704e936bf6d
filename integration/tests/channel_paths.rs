//! The channel API over the whole path: every send path, in every execution mode, over one
//! switch and over two switches with routes from a route file.

use myri_device::fabric::{
    CableConfig, Endpoint, FabricBuilder, FaultConfig, LinkModel, SwitchSize,
};
use myri_device::time::Time;
use myri_integration::{Cluster, ExecMode, HostProgram, MODES, Step, run};
use myri_mcp::hcb::counter;
use myri_mcp::{Api, ChanRequest, Channel, McpConfig, RecvMode, RouteFile, RouteId};
use std::time::Duration;

const SIZES: [usize; 10] = [0, 8, 64, 256, 257, 1000, 2048, 4000, 5000, 8192];

fn pattern(len: usize, seq: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seq) as u8 ^ (i >> 8) as u8)
        .collect()
}

/// Sends `count` packets of cycling sizes to a peer that echoes them; checks every echo.
struct Pinger {
    chan: Channel,
    route: RouteId,
    peer_chan: u8,
    count: u32,
    sent: u32,
    echoed: Vec<(u32, usize)>,
}

/// Turns every packet around to whoever sent it (by a fixed route).
struct Echo {
    chan: Channel,
    route: RouteId,
    reply_chan: u8,
    echoed: u32,
    stop_after: u32,
}

/// Takes every packet of its channel, keeping its first 11 bytes (the tag "from F to T"),
/// until it has `want` of them.
struct Collect {
    chan: Channel,
    got: Vec<String>,
    want: usize,
}

impl HostProgram for Collect {
    fn step(&mut self, api: &mut Api, _now: Time) -> Step {
        let mut progressed = false;
        while let Some(r) = api.recv(&self.chan).unwrap() {
            let tag = &r.as_slice()[..r.len().min(11)];
            self.got.push(String::from_utf8_lossy(tag).into_owned());
            progressed = true;
        }
        Step {
            progressed,
            done: self.got.len() >= self.want,
            wake: None,
        }
    }
}

enum Program {
    Ping(Pinger),
    Echo(Echo),
}

impl HostProgram for Program {
    fn step(&mut self, api: &mut Api, _now: Time) -> Step {
        match self {
            Program::Ping(p) => {
                let mut progressed = false;
                while let Some(r) = api.recv(&p.chan).unwrap() {
                    let seq = p.echoed.len() as u32;
                    let len = SIZES[seq as usize % SIZES.len()];
                    assert_eq!(
                        r.as_slice(),
                        &pattern(len, seq)[..],
                        "echo {seq} of {len} bytes"
                    );
                    p.echoed.push((seq, r.len()));
                    progressed = true;
                }
                // One packet in flight at a time: a ping-pong.
                if p.sent < p.count && p.echoed.len() as u32 == p.sent {
                    let len = SIZES[p.sent as usize % SIZES.len()];
                    let mut buf = api.get_send_buffer().unwrap();
                    buf.as_mut_slice()[..len].copy_from_slice(&pattern(len, p.sent));
                    drop(api.send(p.peer_chan, p.route, buf, len).unwrap());
                    p.sent += 1;
                    progressed = true;
                }
                Step {
                    progressed,
                    done: p.echoed.len() as u32 == p.count,
                    wake: None,
                }
            }
            Program::Echo(e) => {
                let mut progressed = false;
                while let Some(r) = api.recv(&e.chan).unwrap() {
                    let len = r.len();
                    drop(api.send_recv_buffer(e.reply_chan, e.route, r, len).unwrap());
                    e.echoed += 1;
                    progressed = true;
                }
                Step {
                    progressed,
                    done: e.echoed >= e.stop_after,
                    wake: None,
                }
            }
        }
    }
}

fn echo_run(
    mode: ExecMode,
    config: McpConfig,
    count: u32,
) -> (Vec<(u32, usize)>, Vec<u32>, Vec<u32>) {
    echo_run_on(CableConfig::default(), mode, config, count)
}

fn echo_run_on(
    cable: CableConfig,
    mode: ExecMode,
    config: McpConfig,
    count: u32,
) -> (Vec<(u32, usize)>, Vec<u32>, Vec<u32>) {
    let mut c = Cluster::pair(7, cable, mode, config);
    let to_b = c.route(0, 1, 1);
    let to_a = c.route(1, 0, 1);
    // Channels exist before any traffic: a packet for a channel not yet initialized is
    // dropped by the board, as it should be.
    let open = |api: &mut Api, n| {
        let ch = api.get_chan(ChanRequest::Specific(n)).unwrap();
        api.init_recv_chan(&ch).unwrap();
        ch
    };
    let (ping_chan, echo_chan) = (open(&mut c.apis[0], 2), open(&mut c.apis[1], 5));
    let programs = vec![
        Some(Program::Ping(Pinger {
            chan: ping_chan,
            route: to_b,
            peer_chan: 5,
            count,
            sent: 0,
            echoed: Vec::new(),
        })),
        Some(Program::Echo(Echo {
            chan: echo_chan,
            route: to_a,
            reply_chan: 2,
            echoed: 0,
            stop_after: count,
        })),
    ];
    let (programs, finished) = run(&mut c, mode, programs, Duration::from_secs(30));
    assert!(finished, "{mode:?}: the exchange finished");
    let Some(Program::Ping(p)) = &programs[0] else {
        unreachable!()
    };
    let ca = c.apis[0].mcp_counters().unwrap().values.to_vec();
    let cb = c.apis[1].mcp_counters().unwrap().values.to_vec();
    (p.echoed.clone(), ca, cb)
}

#[test]
fn every_path_crosses_one_switch_and_back_in_every_mode_with_the_same_results() {
    for recv_mode in [RecvMode::Interrupt, RecvMode::Polled] {
        let config = McpConfig {
            recv_mode,
            ..Default::default()
        };
        let results: Vec<_> = MODES.iter().map(|&m| echo_run(m, config, 60)).collect();
        let (echoed, a, b) = &results[0];
        assert_eq!(echoed.len(), 60);
        // Both directions used PIO (<= 256 bytes), plain DMA and overlapped DMA (>= 2048).
        for counters in [a, b] {
            assert_eq!(counters[counter::SENT as usize], 60);
            assert_eq!(counters[counter::PIO_SENDS as usize], 24);
            assert_eq!(counters[counter::OVERLAPPED_SENDS as usize], 24);
            assert_eq!(counters[counter::DELIVERED as usize], 60);
            assert_eq!(counters[counter::DROP_RX_FULL as usize], 0);
        }
        for (mode, r) in MODES.iter().zip(&results) {
            assert_eq!(
                r, &results[0],
                "{mode:?} differs from inline ({recv_mode:?})"
            );
        }
    }
}

/// Overlapped receive (seed 000, Receiving): with links that take time to carry a packet,
/// a polled MCP starts DMAing a large packet to the host while its tail is still on the
/// wire, and the bytes arrive intact (the pinger checks every echo).
#[test]
fn overlapped_receive_delivers_large_packets_while_they_arrive() {
    let cable = CableConfig::symmetric(LinkModel::SAN_2000, FaultConfig::default());
    let config = McpConfig {
        recv_mode: RecvMode::Polled,
        ..Default::default()
    };
    let (echoed, a, b) = echo_run_on(cable, ExecMode::Deterministic, config, 40);
    assert_eq!(echoed.len(), 40);
    for counters in [&a, &b] {
        // 2048, 4000, 5000 and 8192 bytes: 4 of every 10 packets, 16 of 40 each way.
        assert_eq!(counters[counter::OVERLAPPED_SENDS as usize], 16);
        assert!(
            counters[counter::OVERLAPPED_RECVS as usize] > 0,
            "no receive was overlapped: {counters:?}"
        );
        assert_eq!(counters[counter::DELIVERED as usize], 40);
        assert_eq!(counters[counter::DMA_FAULTS as usize], 0);
    }
    // Interrupt-driven receive takes each packet whole: nothing overlapped.
    let (_, a, _) = echo_run_on(cable, ExecMode::Deterministic, McpConfig::default(), 20);
    assert_eq!(a[counter::OVERLAPPED_RECVS as usize], 0);
}

/// Three boards over two switches, with multi-hop routes read from a route file.
#[test]
fn three_boards_over_two_switches_with_routes_from_a_file() {
    for mode in MODES {
        let mut b = FabricBuilder::new(3);
        let s0 = b.add_switch(SwitchSize::Sixteen);
        let s1 = b.add_switch(SwitchSize::Eight);
        let ports: Vec<_> = (0..3).map(|_| b.add_host()).collect();
        let cable = CableConfig::default();
        b.connect(Endpoint::Host(ports[0]), Endpoint::Switch(s0, 2), cable)
            .unwrap();
        b.connect(Endpoint::Host(ports[1]), Endpoint::Switch(s0, 9), cable)
            .unwrap();
        b.connect(Endpoint::Switch(s0, 15), Endpoint::Switch(s1, 4), cable)
            .unwrap();
        b.connect(Endpoint::Host(ports[2]), Endpoint::Switch(s1, 6), cable)
            .unwrap();
        let mut c = Cluster::new(&b, ports, mode, McpConfig::default());
        // Route files as an operator would write them for each board.
        let files = [
            "# board 0\n1: 9     # board 1, same switch\n2: 15.6  # board 2, across\n",
            "# board 1\n1: 2\n2: 15.6\n",
            "# board 2\n1: 4.2   # board 0\n2: 4.9   # board 1\n",
        ];
        for (api, text) in c.apis.iter_mut().zip(files) {
            let ids = api.load_routes(&RouteFile::parse(text).unwrap()).unwrap();
            assert_eq!(ids, vec![RouteId(1), RouteId(2)]);
        }
        let chans: Vec<Channel> = c
            .apis
            .iter_mut()
            .map(|api| {
                let ch = api.get_chan(ChanRequest::Specific(1)).unwrap();
                api.init_recv_chan(&ch).unwrap();
                ch
            })
            .collect();
        // Everyone sends to everyone, one packet per destination, tagged with the source.
        let dest = [
            [None, Some(1), Some(2)],
            [Some(1), None, Some(2)],
            [Some(1), Some(2), None],
        ];
        for (from, row) in dest.iter().enumerate() {
            for (to, route) in row.iter().enumerate() {
                let Some(route) = route else { continue };
                let mut buf = c.apis[from].get_send_buffer().unwrap();
                let msg = format!("from {from} to {to}");
                buf.as_mut_slice()[..msg.len()].copy_from_slice(msg.as_bytes());
                let len = if to == 2 { 3000 } else { msg.len() };
                drop(c.apis[from].send(1, RouteId(*route), buf, len).unwrap());
            }
        }
        // Each board collects what reaches it, in every mode as `run` steps it (its own
        // threads and real time in threaded mode).
        let collectors = chans
            .into_iter()
            .map(|chan| {
                Some(Collect {
                    chan,
                    got: Vec::new(),
                    want: 2,
                })
            })
            .collect();
        let (collectors, _) = run(&mut c, mode, collectors, Duration::from_secs(30));
        let mut got: Vec<Vec<String>> = collectors
            .into_iter()
            .map(|p| p.map(|p| p.got).unwrap_or_default())
            .collect();
        for (to, msgs) in got.iter_mut().enumerate() {
            msgs.sort();
            let want: Vec<String> = (0..3)
                .filter(|&f| f != to)
                .map(|f| format!("from {f} to {to}")[..11].to_string())
                .collect();
            assert_eq!(msgs, &want, "{mode:?}: board {to}");
        }
    }
}

/// An idle board is skipped cheaply (`Api::is_quiet`), and whatever can give it work (a
/// send, a packet at its port, a freed receive buffer, a board access from outside)
/// ends the quiet before anything is missed.
#[test]
fn quiet_boards_wake_for_every_kind_of_work() {
    let mut c = Cluster::pair(
        7,
        CableConfig::default(),
        ExecMode::Inline,
        McpConfig::default(),
    );
    let route = c.route(0, 1, 1);
    c.route(1, 0, 1);
    let mut chans = Vec::new();
    for api in &mut c.apis {
        let chan = api.get_chan(ChanRequest::Specific(1)).expect("chan");
        api.init_recv_chan(&chan).expect("init chan");
        chans.push(chan);
    }
    let now = Time::from_micros(1_000_000);
    let settle = |api: &mut Api| {
        for _ in 0..4 {
            api.progress(now);
        }
    };
    let (a, b) = c.apis.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    settle(a);
    settle(b);
    assert!(a.is_quiet() && b.is_quiet(), "idle boards are quiet");
    assert!(!a.progress(now) && !b.progress(now));

    // A send is a host write: A wakes, sends, and B sees the packet at its port.
    let mut buf = a.get_send_buffer().expect("buffer");
    buf.as_mut_slice()[..4].copy_from_slice(&[1, 2, 3, 4]);
    let ticket = a.send(1, route, buf, 4).expect("send");
    assert!(!a.is_quiet(), "a queued send wakes the board");
    assert!(a.progress(now));
    assert!(!b.is_quiet(), "a packet at the port wakes the board");
    assert!(b.progress(now));
    let got = b.recv(&chans[1]).expect("recv").expect("delivered");
    assert_eq!(got.as_slice(), &[1, 2, 3, 4]);
    drop(ticket);

    // Giving the buffer back posts it: a host write the quiet board must see.
    settle(b);
    assert!(b.is_quiet());
    drop(got);
    assert!(!b.is_quiet(), "a reposted buffer wakes the board");
    settle(b);

    // Any access from outside (here: reading the board) ends the quiet too.
    assert!(b.is_quiet());
    c.units[1].with_firmware(|f| f.board.lanai_starts());
    assert!(!c.apis[1].is_quiet());

    // The quiet skip changes nothing a board does: every packet still arrives.
    let (a, b) = c.apis.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    for i in 0..50u8 {
        let mut buf = a.get_send_buffer().expect("buffer");
        buf.as_mut_slice()[0] = i;
        drop(a.send(1, route, buf, 1).expect("send"));
        for _ in 0..3 {
            a.progress(now);
            b.progress(now);
        }
        let got = b
            .recv(&chans[1])
            .expect("recv")
            .expect("every packet arrives");
        assert_eq!(got.as_slice(), &[i]);
    }
}
