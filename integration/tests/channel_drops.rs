//! What the board drops, and that it counts every drop and never blocks the network.

use myri_device::fabric::{CableConfig, FaultConfig, LinkId, LinkModel};
use myri_device::time::Time;
use myri_device::wire::Packet;
use myri_integration::{Cluster, ExecMode};
use myri_mcp::frame::FrameRepr;
use myri_mcp::hcb::{RECV_SLOTS, RX_POOL, counter};
use myri_mcp::{ChanRequest, McpConfig, RouteId};

#[test]
fn crc_corrupted_and_foreign_frames_are_dropped_and_counted() {
    let mut c = Cluster::pair(
        5,
        CableConfig::default(),
        ExecMode::Inline,
        McpConfig::default(),
    );
    c.route(0, 1, 1);
    let chan = c.apis[1].get_chan(ChanRequest::Specific(1)).unwrap();
    c.apis[1].init_recv_chan(&chan).unwrap();
    let now = Time::from_micros(1);
    // Every packet on the first link gets a bit flipped.
    c.fabric
        .set_faults(LinkId(0), FaultConfig::rates(0.0, 1.0, 0.0, 0.0), now)
        .unwrap();
    for _ in 0..10 {
        let buf = c.apis[0].get_send_buffer().unwrap();
        drop(c.apis[0].send(1, RouteId(1), buf, 100).unwrap());
        c.apis[0].progress(now);
    }
    c.fabric
        .set_faults(LinkId(0), FaultConfig::default(), now)
        .unwrap();
    // Frames that are not this MCP's: another type, another subtype, a channel out of
    // range, a channel not initialized, one shorter than a header.
    let route = c.fabric.route(c.ports[0], c.ports[1]).unwrap();
    let frame = |t: u16, sub: u8, chan: u8| {
        let mut b = FrameRepr { chan }.to_bytes().to_vec();
        b[0..2].copy_from_slice(&t.to_be_bytes());
        b[2] = sub;
        b.extend_from_slice(b"payload");
        b
    };
    for body in [
        frame(0x0371, 1, 1),
        frame(0x0370, 7, 1),
        frame(0x0370, 1, 200),
        frame(0x0370, 1, 6),
        vec![0x03],
    ] {
        c.fabric
            .transmit(now, c.ports[0], Packet::build(&route, &body).unwrap())
            .unwrap();
    }
    // And one good packet to show the channel still works.
    let buf = c.apis[0].get_send_buffer().unwrap();
    drop(c.apis[0].send(1, RouteId(1), buf, 5).unwrap());
    for _ in 0..10 {
        c.apis[0].progress(now);
        c.apis[1].progress(now);
    }
    let got = c.apis[1].recv(&chan).unwrap().expect("the good packet");
    assert_eq!(got.len(), 5);
    assert!(c.apis[1].recv(&chan).unwrap().is_none());
    let b = c.apis[1].mcp_counters().unwrap();
    let crc =
        c.fabric.port_counters(c.ports[1]).unwrap().crc_errors + c.fabric.counters().bad_routes;
    assert_eq!(
        crc, 10,
        "every corrupted packet was dropped at the port or the switch"
    );
    assert_eq!(b.get(counter::DROP_TYPE), 1);
    assert_eq!(b.get(counter::DROP_SUBTYPE), 1);
    assert_eq!(b.get(counter::DROP_CHANNEL), 2);
    assert_eq!(b.get(counter::DROP_LENGTH), 1);
    assert_eq!(b.get(counter::DELIVERED), 1);
}

#[test]
fn a_full_rx_pool_drops_without_blocking_the_sender() {
    {
        let mut c = Cluster::pair(
            9,
            CableConfig::symmetric(LinkModel::default(), FaultConfig::default()),
            ExecMode::Inline,
            McpConfig::default(),
        );
        c.route(0, 1, 1);
        let chan = c.apis[1].get_chan(ChanRequest::Specific(1)).unwrap();
        c.apis[1].init_recv_chan(&chan).unwrap();
        let total = 300u32;
        let now = Time::from_micros(1);
        // The receiver's application never reads: its posted buffers fill, then the rx
        // pool, then the board drops; the sender never notices.
        for i in 0..total {
            let mut buf = c.apis[0].get_send_buffer().unwrap();
            buf.as_mut_slice()[..4].copy_from_slice(&i.to_be_bytes());
            drop(c.apis[0].send(1, RouteId(1), buf, 1000).unwrap());
            c.apis[0].progress(now);
            c.apis[1].progress(now);
        }
        assert_eq!(
            c.apis[0].num_pending(),
            0,
            "every send completed: the sender was not blocked"
        );
        let b = c.apis[1].mcp_counters().unwrap();
        let queued = RX_POOL - 1;
        assert_eq!(b.get(counter::RECEIVED), total);
        assert_eq!(b.get(counter::DELIVERED), RECV_SLOTS);
        assert_eq!(b.get(counter::DROP_RX_FULL), total - RECV_SLOTS - queued);
        // The application now reads: the delivered packets, then the rx pool's, in order.
        let mut seen = Vec::new();
        for _ in 0..1000 {
            c.apis[1].progress(now);
            while let Some(r) = c.apis[1].recv(&chan).unwrap() {
                seen.push(u32::from_be_bytes(r.as_slice()[..4].try_into().unwrap()));
            }
        }
        assert_eq!(seen, (0..RECV_SLOTS + queued).collect::<Vec<_>>());
    }
}
