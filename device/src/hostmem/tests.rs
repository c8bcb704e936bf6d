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
