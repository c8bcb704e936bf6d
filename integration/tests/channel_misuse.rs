//! Every misuse of the channel API is a typed error, counted, and harms nothing.

use myri_device::board::{Board, BoardConfig};
use myri_device::time::Time;
use myri_device::wire::Route;
use myri_integration::Cluster;
use myri_mcp::hcb::{NUM_CHANNELS, NUM_ROUTES, SEND_SLOTS, SIG_MIDDLE};
use myri_mcp::host::unit::{BUF_LEN, SEND_BUFS};
use myri_mcp::{
    Api, ApiError, ChanRequest, InitOptions, McpConfig, Mode, RouteId, RouteSlot, Unit,
};

fn pair() -> Cluster {
    Cluster::routed_pair(1)
}

#[test]
fn channel_misuse() {
    let mut c = pair();
    let api = &mut c.apis[0];
    assert_eq!(
        api.get_chan(ChanRequest::Specific(NUM_CHANNELS as u32))
            .unwrap_err(),
        ApiError::ChannelOutOfRange(8)
    );
    let three = api.get_chan(ChanRequest::Specific(3)).unwrap();
    assert_eq!(
        api.get_chan(ChanRequest::Specific(3)).unwrap_err(),
        ApiError::ChannelInUse(3)
    );
    // Receive on a channel not initialized.
    assert_eq!(api.recv(&three).unwrap_err(), ApiError::NotInitialized(3));
    assert_eq!(
        api.recv_poll(&three).unwrap_err(),
        ApiError::NotInitialized(3)
    );
    let rest: Vec<_> = (0..NUM_CHANNELS - 1)
        .map(|_| api.get_chan(ChanRequest::Any).unwrap())
        .collect();
    assert_eq!(
        api.get_chan(ChanRequest::Any).unwrap_err(),
        ApiError::NoChannels
    );
    drop(rest);
    api.rele_chan(three);
    assert_eq!(
        api.get_chan(ChanRequest::Specific(3)).unwrap().number(),
        3,
        "released channels can be taken again"
    );
    // A channel of another board.
    let other = c.apis[1].get_chan(ChanRequest::Specific(0)).unwrap();
    assert_eq!(
        c.apis[0].init_recv_chan(&other).unwrap_err(),
        ApiError::ForeignChannel(0)
    );
    assert_eq!(
        c.apis[0].recv(&other).unwrap_err(),
        ApiError::ForeignChannel(0)
    );
}

#[test]
fn send_misuse() {
    let mut c = pair();
    let (a, b) = c.apis.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let buf = a.get_send_buffer().unwrap();
    let e = a.send(0, RouteId(9), buf, 8).unwrap_err();
    assert_eq!(e.error, ApiError::UnknownRoute(RouteId(9)));
    let e = a.send(0, RouteId(NUM_ROUTES + 5), e.buf, 8).unwrap_err();
    assert_eq!(e.error, ApiError::UnknownRoute(RouteId(NUM_ROUTES + 5)));
    let e = a
        .send(NUM_CHANNELS as u8, RouteId(1), e.buf, 8)
        .unwrap_err();
    assert_eq!(e.error, ApiError::ChannelOutOfRange(8));
    let e = a.send(0, RouteId(1), e.buf, BUF_LEN + 1).unwrap_err();
    assert_eq!(
        e.error,
        ApiError::TooLong {
            len: BUF_LEN + 1,
            max: BUF_LEN
        }
    );
    let e = a
        .send_inline(0, RouteId(1), &[0u8; 600], e.buf, 8)
        .unwrap_err();
    assert!(matches!(e.error, ApiError::TooLong { .. }));
    // A buffer from another board.
    let foreign = b.get_send_buffer().unwrap();
    let e = a.send(0, RouteId(1), foreign, 8).unwrap_err();
    assert_eq!(e.error, ApiError::ForeignBuffer);
    // Route table misuse.
    assert_eq!(
        a.add_route(RouteSlot::Id(0), &Route::direct()).unwrap_err(),
        ApiError::RouteIdOutOfRange(0)
    );
    assert_eq!(
        a.add_route(RouteSlot::Id(NUM_ROUTES), &Route::direct())
            .unwrap_err(),
        ApiError::RouteIdOutOfRange(NUM_ROUTES)
    );
    for _ in 2..NUM_ROUTES {
        a.add_route(RouteSlot::Next, &Route::from_ports(&[1]).unwrap())
            .unwrap();
    }
    assert_eq!(
        a.add_route(RouteSlot::Next, &Route::direct()).unwrap_err(),
        ApiError::RouteTableFull
    );
    assert!(a.unit().counters().errors >= 9, "misuse is counted");
}

#[test]
fn would_block_instead_of_blocking() {
    let mut c = pair();
    let a = &mut c.apis[0];
    // Without progress the board sends nothing: the send channel fills up.
    for _ in 0..SEND_SLOTS {
        let buf = a.get_send_buffer().unwrap();
        drop(a.send(0, RouteId(1), buf, 1000).unwrap());
    }
    let buf = a.get_send_buffer().unwrap();
    let e = a.send(0, RouteId(1), buf, 1000).unwrap_err();
    assert_eq!(e.error, ApiError::SendQueueFull);
    assert_eq!(a.num_pending(), SEND_SLOTS as usize);
    // And with every buffer held, there is none to get.
    let mut held = vec![e.buf];
    while held.len() + (SEND_SLOTS as usize) < SEND_BUFS {
        held.push(a.get_send_buffer().unwrap());
    }
    assert_eq!(a.get_send_buffer().unwrap_err(), ApiError::NoSendBuffers);
    assert!(a.unit().counters().would_block >= 2);
    // Progress frees everything again (each progress call is a bounded slice of the
    // MCP's work, so it takes a few).
    for _ in 0..16 {
        a.progress(Time::from_micros(1));
    }
    assert_eq!(a.num_pending(), 0);
    assert!(a.get_send_buffer().is_ok());
}

#[test]
fn a_freed_but_unsent_buffer_is_not_handed_out_again() {
    let mut c = pair();
    let a = &mut c.apis[0];
    let mut bufs: Vec<_> = (0..SEND_BUFS)
        .map(|_| a.get_send_buffer().unwrap())
        .collect();
    let mut last = bufs.pop().unwrap();
    let addr = last.bus_addr();
    last.as_mut_slice()[..4000].fill(0xEE);
    let ticket = a.send(0, RouteId(1), last, 4000).unwrap();
    assert!(a.buffer_busy(&ticket));
    drop(ticket); // freed, not yet sent
    a.reap_sent();
    assert_eq!(
        a.get_send_buffer().unwrap_err(),
        ApiError::NoSendBuffers,
        "not before the board has sent it"
    );
    a.progress(Time::from_micros(1));
    let again = a.get_send_buffer().unwrap();
    assert_eq!(again.bus_addr(), addr, "after it is sent, it is free");
    assert!(
        again.as_slice()[..4000].iter().all(|&b| b == 0xEE),
        "and unharmed"
    );
    // A ticket taken back while busy says so and can be asked again.
    let t = a.send(0, RouteId(1), again, 4000).unwrap();
    let (err, t) = a.take_back(t).unwrap_err();
    assert_eq!(err, ApiError::Busy);
    a.progress(Time::from_micros(2));
    assert!(matches!(
        a.take_back(t).unwrap(),
        myri_mcp::Reclaimed::Send(_)
    ));
    drop(bufs);
}

#[test]
fn an_mcp_that_does_not_answer_times_out() {
    let board = Board::new(BoardConfig::pci64b(0));
    let unit = Unit::new(board, 1 << 32, Mode::Inline);
    let opts = InitOptions {
        mcp: McpConfig {
            mute: true,
            ..Default::default()
        },
        attempts: 500,
        ..Default::default()
    };
    assert_eq!(
        Api::init(&unit, opts).err(),
        Some(ApiError::HandshakeTimeout { attempts: 500 })
    );
    assert!(unit.counters().errors >= 1);
}

#[test]
fn later_users_attach_and_a_signature_mismatch_is_caught() {
    let board = Board::new(BoardConfig::pci64b(0));
    let unit = Unit::new(board, 1 << 32, Mode::Inline);
    let mut first = Api::init(&unit, InitOptions::default()).unwrap();
    let ch = first.get_chan(ChanRequest::Specific(0)).unwrap();
    // A second user attaches without reloading: the first one's channel is still taken.
    let mut second = Api::init(&unit, InitOptions::default()).unwrap();
    assert_eq!(
        second.get_chan(ChanRequest::Specific(0)).unwrap_err(),
        ApiError::ChannelInUse(0)
    );
    assert_eq!(
        unit.with_firmware(|f| f.board.lanai_starts()),
        1,
        "the MCP was loaded once"
    );
    // Corrupt the middle signature: the next user's check refuses the board.
    let layout = myri_mcp::hcb::Layout::new(2 << 20).unwrap();
    unit.with_firmware(|f| {
        f.board
            .pci_write_u32(Time::ZERO, layout.middle, 0xBAD0_BAD0)
    })
    .unwrap();
    let err = Api::init(&unit, InitOptions::default()).err().unwrap();
    assert_eq!(
        err,
        ApiError::SignatureMismatch {
            at: layout.middle,
            expected: SIG_MIDDLE,
            found: 0xBAD0_BAD0
        }
    );
    // Forcing a reload brings a fresh MCP and a sane HCB.
    let forced = Api::init(
        &unit,
        InitOptions {
            force_init: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(unit.with_firmware(|f| f.board.lanai_starts()), 2);
    drop((ch, forced, second));
}
