//! Sends from a lent buffer (`SendBuf::lend`, `Api::send_lent`): the board reads the
//! payload by DMA from where the host wrote it while the host keeps reading it, as many
//! times as it is sent, with no copy; the host gets it back for writing only when every
//! send of it is done, and a lent buffer dropped while the board reads it returns to the
//! free list later, never to two owners.

use myri_device::time::Time;
use myri_integration::Cluster;
use myri_mcp::host::unit::SEND_BUFS;
use myri_mcp::{ApiError, ChanRequest, RouteId};

fn pair() -> Cluster {
    Cluster::routed_pair(3)
}

/// Every packet board 1's application has on `chan` after a few progress rounds.
fn drain(c: &mut Cluster, chan: &myri_mcp::Channel, rounds: u64) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for r in 0..rounds {
        let now = Time::from_micros(10 + r);
        c.apis[0].progress(now);
        c.apis[1].progress(now);
        while let Some(p) = c.apis[1].recv(chan).unwrap() {
            got.push(p.as_slice().to_vec());
        }
    }
    got
}

#[test]
fn a_lent_buffer_is_sent_again_and_again_by_dma_and_comes_back_whole() {
    let mut c = pair();
    let chan = c.apis[1].get_chan(ChanRequest::Specific(1)).unwrap();
    c.apis[1].init_recv_chan(&chan).unwrap();
    let mut buf = c.apis[0].get_send_buffer().unwrap();
    let addr = buf.bus_addr();
    let message: Vec<u8> = (0..8000u32).map(|i| (i * 7 + 3) as u8).collect();
    buf.as_mut_slice()[..8000].copy_from_slice(&message);
    let lent = buf.lend();
    assert_eq!(lent.bus_addr(), addr, "the same memory, not a copy");
    let sends_before = c.apis[0].unit().counters().pio_sends;
    // Three sends of the whole message and one of a middle range, each with a header of
    // its own sent inline, while the host keeps reading the buffer.
    let mut tickets = Vec::new();
    for k in 0..3u8 {
        let t = c.apis[0]
            .send_lent(1, RouteId(1), &[0xA0 + k; 12], &lent, 0..8000)
            .unwrap();
        assert!(
            c.apis[0].buffer_busy(&t),
            "the board reads it for this send"
        );
        tickets.push(t);
        assert_eq!(
            &lent.as_slice()[..8000],
            &message[..],
            "readable while lent"
        );
    }
    drop(
        c.apis[0]
            .send_lent(1, RouteId(1), &[0xB0; 12], &lent, 1000..5000)
            .unwrap(),
    );
    assert!(lent.is_read_by_board());
    // Not writable while the board reads it.
    let lent = lent.try_unlend().unwrap_err();
    let got = drain(&mut c, &chan, 50);
    assert_eq!(got.len(), 4);
    for (k, p) in got.iter().take(3).enumerate() {
        assert_eq!(&p[..12], &[0xA0 + k as u8; 12]);
        assert_eq!(&p[12..], &message[..], "send {k} byte for byte");
    }
    assert_eq!(&got[3][..12], &[0xB0; 12]);
    assert_eq!(&got[3][12..], &message[1000..5000]);
    assert_eq!(
        c.apis[0].unit().counters().pio_sends,
        sends_before,
        "payloads went by DMA, not PIO"
    );
    // Every send done: the tickets say so and hold nothing; the buffer comes back
    // writable, the same memory.
    c.apis[0].reap_sent();
    for t in tickets {
        assert!(!c.apis[0].buffer_busy(&t));
        assert!(matches!(
            c.apis[0].take_back(t),
            Ok(myri_mcp::Reclaimed::Nothing)
        ));
    }
    assert!(!lent.is_read_by_board());
    let mut back = lent.try_unlend().unwrap();
    assert_eq!(back.bus_addr(), addr);
    back.as_mut_slice()[0] = 0xFF;
    // A short payload goes by PIO from the lent buffer, and needs no reader.
    let lent = back.lend();
    drop(
        c.apis[0]
            .send_lent(1, RouteId(1), &[0xC0; 4], &lent, 0..20)
            .unwrap(),
    );
    assert!(!lent.is_read_by_board(), "a PIO send copied it at once");
    let got = drain(&mut c, &chan, 20);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0][4], 0xFF);
    assert_eq!(&got[0][5..24], &message[1..20]);
}

#[test]
fn a_lent_buffer_dropped_while_the_board_reads_it_is_freed_after() {
    let mut c = pair();
    let chan = c.apis[1].get_chan(ChanRequest::Specific(1)).unwrap();
    c.apis[1].init_recv_chan(&chan).unwrap();
    // Take every send buffer; lend one, send it, drop it at once.
    let mut bufs: Vec<_> = (0..SEND_BUFS)
        .map(|_| c.apis[0].get_send_buffer().unwrap())
        .collect();
    let mut last = bufs.pop().unwrap();
    let addr = last.bus_addr();
    last.as_mut_slice()[..6000].fill(0x5A);
    let lent = last.lend();
    let ticket = c.apis[0]
        .send_lent(1, RouteId(1), &[1; 8], &lent, 0..6000)
        .unwrap();
    drop(lent);
    drop(ticket);
    c.apis[0].reap_sent();
    assert_eq!(
        c.apis[0].get_send_buffer().unwrap_err(),
        ApiError::NoSendBuffers,
        "not free while the board may still read it"
    );
    let got = drain(&mut c, &chan, 50);
    assert_eq!(got.len(), 1);
    assert!(got[0][8..].iter().all(|&b| b == 0x5A), "sent whole");
    let again = c.apis[0].get_send_buffer().unwrap();
    assert_eq!(again.bus_addr(), addr, "free once the board is done");
    drop(bufs);
}

#[test]
fn lent_send_misuse_is_a_typed_error() {
    let mut c = pair();
    let buf = c.apis[0].get_send_buffer().unwrap();
    let lent = buf.lend();
    // Past the buffer's end.
    let cap = lent.capacity();
    assert!(matches!(
        c.apis[0].send_lent(1, RouteId(1), &[], &lent, 0..cap + 1),
        Err(ApiError::TooLong { .. })
    ));
    // Another board's buffer.
    assert!(matches!(
        c.apis[1].send_lent(1, RouteId(1), &[], &lent, 0..10),
        Err(ApiError::ForeignBuffer)
    ));
    // A route never set.
    assert!(matches!(
        c.apis[0].send_lent(1, RouteId(7), &[], &lent, 0..10),
        Err(ApiError::UnknownRoute(_))
    ));
    // Nothing was sent: the buffer comes back at once.
    assert!(lent.try_unlend().is_ok());
}

#[test]
fn a_lent_buffer_taken_back_in_place_waits_for_the_board_and_returns_once() {
    let mut c = pair();
    let chan = c.apis[1].get_chan(ChanRequest::Specific(1)).unwrap();
    c.apis[1].init_recv_chan(&chan).unwrap();
    // Every send buffer taken but one, which is lent and sent.
    let bufs: Vec<_> = (1..SEND_BUFS)
        .map(|_| c.apis[0].get_send_buffer().unwrap())
        .collect();
    let mut buf = c.apis[0].get_send_buffer().unwrap();
    let addr = buf.bus_addr();
    buf.as_mut_slice()[..4000].fill(0x5A);
    let mut lent = buf.lend();
    c.apis[0]
        .send_lent_untracked(1, RouteId(1), &[0xA1; 12], &lent, 0..4000)
        .unwrap();
    assert!(lent.is_read_by_board());
    // Refused while the board reads it, and the handle is as it was.
    assert!(lent.try_unlend_in_place().is_none());
    assert_eq!(lent.bus_addr(), addr);
    assert!(lent.as_slice()[..4000].iter().all(|&b| b == 0x5A));
    let got = drain(&mut c, &chan, 50);
    assert_eq!(got.len(), 1);
    assert!(got[0][12..].iter().all(|&b| b == 0x5A), "sent whole");
    c.apis[0].reap_sent();
    let mut back = lent
        .try_unlend_in_place()
        .expect("writable once every send is done");
    assert_eq!(back.bus_addr(), addr, "the same memory");
    back.as_mut_slice()[0] = 1;
    // The emptied handle holds nothing: it gives nothing back again, the board refuses
    // it, and dropping it frees nothing.
    assert!(lent.try_unlend_in_place().is_none());
    assert!(lent.as_slice().is_empty());
    assert!(matches!(
        c.apis[0].send_lent(1, RouteId(1), &[], &lent, 0..10),
        Err(ApiError::ForeignBuffer)
    ));
    drop(lent);
    assert_eq!(
        c.apis[0].get_send_buffer().unwrap_err(),
        ApiError::NoSendBuffers,
        "the buffer taken back is the application's, not free"
    );
    drop(back);
    let again = c.apis[0].get_send_buffer().unwrap();
    assert_eq!(
        again.bus_addr(),
        addr,
        "free once, when the application drops it"
    );
    assert_eq!(
        c.apis[0].get_send_buffer().unwrap_err(),
        ApiError::NoSendBuffers,
        "and only once"
    );
    drop(bufs);
}
