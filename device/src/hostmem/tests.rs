use super::*;

const BASE: u64 = 0x1_0000_0000;
const PAGE: usize = 256;

fn region(pages: usize) -> Arc<HostMemory> {
    HostMemory::new(BASE, pages * PAGE, PAGE).unwrap()
}

#[test]
fn impossible_layouts_are_refused() {
    assert!(matches!(
        HostMemory::new(0, 1024, 100),
        Err(HostMemError::Layout(_))
    ));
    assert!(matches!(
        HostMemory::new(0, 1024, 32),
        Err(HostMemError::Layout(_))
    ));
    assert!(matches!(
        HostMemory::new(0, 0, 256),
        Err(HostMemError::Layout(_))
    ));
    assert!(matches!(
        HostMemory::new(0, 1000, 256),
        Err(HostMemError::Layout(_))
    ));
    assert!(matches!(
        HostMemory::new(0x80, 1024, 256),
        Err(HostMemError::Layout(_))
    ));
    assert!(matches!(
        HostMemory::new(u64::MAX - 255, 512, 256),
        Err(HostMemError::Layout(_))
    ));
}

#[test]
fn a_buffer_goes_to_the_device_and_comes_back() {
    let mem = region(4);
    let mut buf = mem.claim(PAGE, 300).unwrap();
    assert_eq!(buf.bus_addr(), BASE + PAGE as u64);
    buf.as_mut_slice().copy_from_slice(&[7u8; 300]);
    let dev = buf.to_device();
    assert_eq!(mem.owner(PAGE), Some(Owner::Device));
    assert_eq!(
        mem.owner(2 * PAGE),
        Some(Owner::Device),
        "a 300-byte buffer covers two pages"
    );

    let mut seen = [0u8; 300];
    mem.dma_read(dev.bus_addr(), &mut seen).unwrap();
    assert_eq!(seen, [7u8; 300]);
    mem.dma_write(dev.bus_addr() + 10, &[1, 2, 3]).unwrap();

    let buf = dev.reclaim();
    assert_eq!(&buf.as_slice()[8..14], &[7, 7, 1, 2, 3, 7]);
    assert_eq!(mem.owner(PAGE), Some(Owner::Host));
    drop(buf);
    assert_eq!(mem.owner(PAGE), Some(Owner::Free));
    assert!(
        mem.claim(PAGE, 2 * PAGE).is_ok(),
        "freed pages can be claimed again"
    );
}

#[test]
fn the_device_cannot_touch_what_it_does_not_own() {
    let mem = region(4);
    let host = mem.claim(0, PAGE).unwrap();
    let mut out = [0u8; 4];
    assert_eq!(
        mem.dma_read(host.bus_addr(), &mut out),
        Err(DmaFault::NotDeviceOwned {
            bus: BASE,
            page: 0,
            owner: Owner::Host
        })
    );
    assert_eq!(
        mem.dma_write(BASE + 3 * PAGE as u64, &out),
        Err(DmaFault::NotDeviceOwned {
            bus: BASE + 3 * PAGE as u64,
            page: 3,
            owner: Owner::Free
        })
    );
    // A transfer that starts in a device page and runs into a host page faults without
    // touching either, and leaves the device page usable.
    let dev = mem.claim(PAGE, PAGE).unwrap().to_device();
    let straddle = dev.bus_addr() + PAGE as u64 - 2;
    let _host2 = mem.claim(2 * PAGE, PAGE).unwrap();
    assert!(matches!(
        mem.dma_write(straddle, &[9; 4]),
        Err(DmaFault::NotDeviceOwned { page: 2, .. })
    ));
    assert_eq!(
        mem.owner(PAGE),
        Some(Owner::Device),
        "no page is left busy after a fault"
    );
    assert_eq!(
        dev.reclaim().as_slice()[PAGE - 2..],
        [0, 0],
        "nothing was written"
    );
}

#[test]
fn bus_addresses_outside_the_region_fault() {
    let mem = region(2);
    let mut out = [0u8; 8];
    for bus in [0, BASE - 1, BASE + 2 * PAGE as u64 - 4, u64::MAX - 2] {
        assert!(
            matches!(
                mem.dma_read(bus, &mut out),
                Err(DmaFault::OutOfRange { .. })
            ),
            "{bus:#x}"
        );
    }
    assert!(
        mem.dma_write(BASE, &[]).is_ok(),
        "an empty transfer touches nothing"
    );
}

#[test]
fn claims_are_exclusive_and_all_or_nothing() {
    let mem = region(4);
    let _a = mem.claim(PAGE, PAGE).unwrap();
    assert_eq!(
        mem.claim(0, 2 * PAGE).unwrap_err(),
        HostMemError::InUse {
            page: 1,
            owner: Owner::Host
        }
    );
    assert_eq!(mem.owner(0), Some(Owner::Free), "a failed claim rolls back");
    assert_eq!(
        mem.claim(10, 5).unwrap_err(),
        HostMemError::Unaligned {
            offset: 10,
            page_size: PAGE
        }
    );
    assert_eq!(mem.claim(0, 0).unwrap_err(), HostMemError::Empty);
    assert!(matches!(
        mem.claim(3 * PAGE, 2 * PAGE),
        Err(HostMemError::OutOfRange { .. })
    ));
    assert!(matches!(
        mem.claim(PAGE, usize::MAX),
        Err(HostMemError::OutOfRange { .. })
    ));
}

#[test]
fn shared_words_take_whole_aligned_words_only() {
    let mem = region(2);
    let words = mem.share(0, 64).unwrap();
    mem.dma_write(words.bus_addr() + 8, &0xDEAD_BEEFu32.to_be_bytes())
        .unwrap();
    assert_eq!(words.load_be(8).unwrap(), 0xDEAD_BEEF);
    words.store_be(4, 42).unwrap();
    let mut out = [0u8; 4];
    mem.dma_read(words.bus_addr() + 4, &mut out).unwrap();
    assert_eq!(u32::from_be_bytes(out), 42);
    assert_eq!(
        mem.dma_write(words.bus_addr() + 2, &[0; 4]),
        Err(DmaFault::SharedUnaligned {
            bus: words.bus_addr() + 2,
            len: 4
        })
    );
    assert_eq!(
        mem.dma_write(words.bus_addr(), &[0; 3]),
        Err(DmaFault::SharedUnaligned {
            bus: words.bus_addr(),
            len: 3
        })
    );
    assert_eq!(words.load_be(62), Err(HostMemError::BadWord { offset: 62 }));
    assert_eq!(words.load_be(64), Err(HostMemError::BadWord { offset: 64 }));
    assert!(matches!(
        mem.share(PAGE, 6),
        Err(HostMemError::BadWord { .. })
    ));
}

#[test]
fn dropping_a_device_buffer_frees_it() {
    let mem = region(1);
    drop(mem.claim(0, 8).unwrap().to_device());
    assert_eq!(mem.owner(0), Some(Owner::Free));
    let mut out = [0u8; 1];
    assert!(mem.dma_read(BASE, &mut out).is_err());
}

/// Two real threads pass one buffer back and forth many times; every byte the host wrote
/// is what the device reads, and the reverse.
#[test]
fn threads_hand_a_buffer_back_and_forth() {
    use std::sync::Mutex;
    use std::sync::mpsc;
    let mem = region(2);
    let (to_dev, dev_rx) = mpsc::channel::<DeviceBuf>();
    let (to_host, host_rx) = mpsc::channel::<DeviceBuf>();
    let seen = Mutex::new(0u32);
    let rounds = if cfg!(miri) { 5 } else { 500 };
    std::thread::scope(|s| {
        let mem2 = Arc::clone(&mem);
        let seen = &seen;
        s.spawn(move || {
            for round in 0..rounds {
                let dev = dev_rx.recv().unwrap();
                let mut data = vec![0u8; dev.len()];
                mem2.dma_read(dev.bus_addr(), &mut data).unwrap();
                assert!(data.iter().all(|&b| b == round as u8));
                mem2.dma_write(dev.bus_addr(), &vec![round as u8 ^ 0xFF; dev.len()])
                    .unwrap();
                *seen.lock().unwrap() += 1;
                to_host.send(dev).unwrap();
            }
        });
        let mut buf = mem.claim(0, 2 * PAGE).unwrap();
        for round in 0..rounds {
            buf.as_mut_slice().fill(round as u8);
            to_dev.send(buf.to_device()).unwrap();
            buf = host_rx.recv().unwrap().reclaim();
            assert!(buf.as_slice().iter().all(|&b| b == round as u8 ^ 0xFF));
        }
    });
    assert_eq!(*seen.lock().unwrap(), rounds);
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn lent_types_cross_threads() {
    assert_send_sync::<LentBuf>();
    assert_send_sync::<LentRead>();
}

#[test]
fn a_lent_buffer_is_read_by_host_and_device_and_written_by_neither() {
    let mem = region(4);
    let mut buf = mem.claim(PAGE, PAGE + 44).unwrap();
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = i as u8;
    }
    let lent = buf.lend();
    assert_eq!(lent.len(), PAGE + 44);
    assert!(!lent.is_empty());
    assert_eq!(lent.offset(), PAGE);
    assert_eq!(lent.bus_addr(), BASE + PAGE as u64);
    assert!(Arc::ptr_eq(lent.memory(), &mem));
    assert_eq!(mem.owner(PAGE), Some(Owner::Lent));
    assert_eq!(
        mem.owner(2 * PAGE),
        Some(Owner::Lent),
        "a partial last page is lent too"
    );
    assert_eq!(mem.owner(3 * PAGE), Some(Owner::Free));
    let want: Vec<u8> = (0..PAGE + 44).map(|i| i as u8).collect();
    assert_eq!(lent.as_slice(), &want[..]);
    assert_eq!(lent.with(|b| b[PAGE + 3]), want[PAGE + 3]);

    // Several readers at once, each reading across the page boundary while the host reads.
    let readers: Vec<LentRead> = (0..3).map(|_| lent.reader()).collect();
    assert_eq!(lent.readers(), 3);
    let host_view = lent.as_slice();
    for (i, r) in readers.iter().enumerate() {
        assert_eq!(
            (r.bus_addr(), r.len(), r.is_empty()),
            (lent.bus_addr(), PAGE + 44, false)
        );
        let at = PAGE - 10 + i;
        let mut out = [0u8; 20];
        let sum = mem.dma_read(r.bus_addr() + at as u64, &mut out).unwrap();
        assert_eq!(out[..], want[at..at + 20]);
        assert_eq!(sum, crate::dma::checksum::ones_complement_sum(&out));
    }
    assert_eq!(host_view, &want[..], "the host's view did not move");
    assert_eq!(mem.owner(PAGE), Some(Owner::Lent), "a read leaves no pin");

    // Writes fault, whole or straddling, and change nothing.
    assert_eq!(
        mem.dma_write(lent.bus_addr() + 5, &[0xEE; 4]),
        Err(DmaFault::NotDeviceOwned {
            bus: lent.bus_addr() + 5,
            page: 1,
            owner: Owner::Lent
        })
    );
    let dev = mem.claim(0, PAGE).unwrap().to_device();
    assert!(matches!(
        mem.dma_write(dev.bus_addr() + PAGE as u64 - 2, &[0xEE; 4]),
        Err(DmaFault::NotDeviceOwned {
            page: 1,
            owner: Owner::Lent,
            ..
        })
    ));
    assert_eq!(
        mem.owner(0),
        Some(Owner::Device),
        "the device page is not left busy"
    );
    assert_eq!(lent.as_slice(), &want[..]);
    // A read straddling a device page and a lent page is fine.
    let mut out = [0u8; 4];
    mem.dma_read(dev.bus_addr() + PAGE as u64 - 2, &mut out)
        .unwrap();
    assert_eq!(out, [0, 0, 0, 1]);
    // Past the buffer's end, but in its last page: lent, readable.
    mem.dma_read(lent.bus_addr() + (PAGE + 44) as u64, &mut out)
        .unwrap();
    assert_eq!(out, [0; 4]);
    drop(readers);
    assert_eq!(lent.readers(), 0);
    let back = lent.try_unlend().unwrap();
    assert_eq!(back.as_slice(), &want[..]);
}

#[test]
fn try_unlend_waits_for_the_last_reader() {
    let mem = region(2);
    let mut buf = mem.claim(0, 2 * PAGE).unwrap();
    buf.as_mut_slice().fill(3);
    let lent = buf.lend();
    let first = lent.reader();
    let second = lent.reader();
    let lent = lent.try_unlend().unwrap_err();
    drop(first);
    let lent = lent.try_unlend().unwrap_err();
    assert_eq!(lent.readers(), 1);
    assert_eq!(
        mem.owner(0),
        Some(Owner::Lent),
        "a refused unlend changes nothing"
    );
    assert_eq!(mem.owner(PAGE), Some(Owner::Lent));
    drop(second);
    let mut buf = lent.try_unlend().unwrap();
    assert_eq!(mem.owner(0), Some(Owner::Host));
    assert_eq!(mem.owner(PAGE), Some(Owner::Host));
    buf.as_mut_slice()[PAGE..].fill(8);
    let mut out = [0u8; 2];
    assert!(matches!(
        mem.dma_read(buf.bus_addr(), &mut out),
        Err(DmaFault::NotDeviceOwned {
            owner: Owner::Host,
            ..
        })
    ));
    // Lent again, the new bytes are what the board reads; and it can be handed over.
    let lent = buf.lend();
    let r = lent.reader();
    mem.dma_read(r.bus_addr() + PAGE as u64 - 1, &mut out)
        .unwrap();
    assert_eq!(out, [3, 8]);
    drop(r);
    let dev = lent.try_unlend().unwrap().to_device();
    mem.dma_write(dev.bus_addr(), &[1]).unwrap();
    assert_eq!(dev.reclaim().as_slice()[..2], [1, 3]);
}

#[test]
fn try_unlend_refuses_while_a_transfer_is_in_flight() {
    // A transfer pins the pages it reads: simulate one in flight on the second page (as
    // `dma_read` leaves it between its begin and end) and check the take-back refuses and
    // rolls back the first page.
    let mem = region(2);
    let lent = mem.claim(0, 2 * PAGE).unwrap().lend();
    mem.begin_device_access(lent.bus_addr(), PAGE, 8, false)
        .unwrap();
    let lent = lent.try_unlend().unwrap_err();
    assert_eq!(
        mem.owner(0),
        Some(Owner::Lent),
        "the first page is lent again"
    );
    mem.end_device_access(1, 2);
    assert!(lent.try_unlend().is_ok());
}

#[test]
fn lent_pages_are_freed_by_the_last_of_buffer_and_readers() {
    let mem = region(2);
    let lent = mem.claim(0, PAGE + 1).unwrap().lend();
    let r1 = lent.reader();
    let r2 = lent.reader();
    drop(lent);
    assert_eq!(
        mem.owner(0),
        Some(Owner::Lent),
        "readers still hold the pages"
    );
    assert_eq!(mem.owner(PAGE), Some(Owner::Lent));
    assert_eq!(
        mem.claim(0, PAGE).unwrap_err(),
        HostMemError::InUse {
            page: 0,
            owner: Owner::Lent
        }
    );
    let mut out = [0u8; 4];
    mem.dma_read(r2.bus_addr() + PAGE as u64 - 2, &mut out)
        .unwrap();
    drop(r1);
    assert!(mem.claim(PAGE, PAGE).is_err());
    mem.dma_read(r2.bus_addr(), &mut out).unwrap();
    drop(r2);
    assert_eq!(mem.owner(0), Some(Owner::Free));
    assert_eq!(mem.owner(PAGE), Some(Owner::Free));
    assert!(mem.dma_read(BASE, &mut out).is_err(), "freed pages fault");
    assert!(mem.claim(0, 2 * PAGE).is_ok(), "and can be claimed again");

    // Without readers, dropping the buffer frees at once.
    let mem = region(1);
    drop(mem.claim(0, 8).unwrap().lend());
    assert_eq!(mem.owner(0), Some(Owner::Free));
}

#[test]
fn a_transfer_in_flight_outlives_the_lending() {
    // The buffer and its last reader are gone while a read is still running on the page:
    // the page drains (no new transfer may start) and the transfer's end frees it.
    let mem = region(1);
    let lent = mem.claim(0, PAGE).unwrap().lend();
    mem.begin_device_access(BASE, 0, 4, false).unwrap();
    drop(lent);
    assert_eq!(mem.owner(0), Some(Owner::Lent));
    assert!(mem.claim(0, PAGE).is_err());
    let mut out = [0u8; 4];
    assert!(matches!(
        mem.dma_read(BASE, &mut out),
        Err(DmaFault::NotDeviceOwned {
            owner: Owner::Lent,
            ..
        })
    ));
    mem.end_device_access(0, 1);
    assert_eq!(mem.owner(0), Some(Owner::Free));
    assert!(mem.claim(0, PAGE).is_ok());
}

/// Real threads read one lent buffer at once while the host reads it; the host takes it
/// back as soon as the readers let go (spinning on `try_unlend`, no other
/// synchronization), rewrites it and lends it again, many times. Under Miri this checks
/// the hand-back for data races.
#[test]
fn threads_read_a_lent_buffer_together() {
    use std::sync::mpsc;
    let mem = region(3);
    let rounds = if cfg!(miri) { 3 } else { 300 };
    let mut buf = mem.claim(0, 2 * PAGE + 100).unwrap();
    std::thread::scope(|s| {
        let mut senders = Vec::new();
        for t in 0..2 {
            let (tx, rx) = mpsc::channel::<(LentRead, u8)>();
            senders.push(tx);
            let mem = Arc::clone(&mem);
            s.spawn(move || {
                for (reader, round) in rx {
                    let mut data = vec![0u8; reader.len() - t];
                    mem.dma_read(reader.bus_addr() + t as u64, &mut data)
                        .unwrap();
                    assert!(data.iter().all(|&b| b == round));
                    drop(reader);
                }
            });
        }
        for round in 0..rounds {
            buf.as_mut_slice().fill(round as u8);
            let mut lent = buf.lend();
            for tx in &senders {
                tx.send((lent.reader(), round as u8)).unwrap();
            }
            assert!(lent.as_slice().iter().all(|&b| b == round as u8));
            buf = loop {
                match lent.try_unlend() {
                    Ok(buf) => break buf,
                    Err(again) => {
                        lent = again;
                        std::thread::yield_now();
                    }
                }
            };
        }
        drop(senders);
    });
}
