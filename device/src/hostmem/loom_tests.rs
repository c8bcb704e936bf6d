//! Model checks of the ownership handoff. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p myri-device --release --lib hostmem`.

use super::*;
use loom::sync::atomic::{AtomicUsize, Ordering as LoomOrdering};

const PAGE: usize = 64;

/// The host fills a buffer, hands it over and publishes a queue entry; the device takes
/// the entry, reads the bytes, writes a reply and publishes completion; the host then
/// reclaims and reads the reply. Loom explores every interleaving and reports any
/// unsynchronized access to the bytes.
#[test]
fn publish_consume_complete_reclaim() {
    loom::model(|| {
        let mem = HostMemory::new(0x1000, 2 * PAGE, PAGE).unwrap();
        let entry = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));

        let device = {
            let (mem, entry, done) = (Arc::clone(&mem), Arc::clone(&entry), Arc::clone(&done));
            loom::thread::spawn(move || {
                let bus = loop {
                    match entry.load(LoomOrdering::Acquire) {
                        0 => loom::thread::yield_now(),
                        bus => break bus as u64,
                    }
                };
                let mut got = [0u8; 4];
                mem.dma_read(bus, &mut got).unwrap();
                assert_eq!(got, [1, 2, 3, 4]);
                mem.dma_write(bus, &[9, 9]).unwrap();
                done.store(1, LoomOrdering::Release);
            })
        };

        let mut buf = mem.claim(0, PAGE).unwrap();
        buf.with_mut(|b| b[..4].copy_from_slice(&[1, 2, 3, 4]));
        let dev = buf.to_device();
        entry.store(dev.bus_addr() as usize, LoomOrdering::Release);
        while done.load(LoomOrdering::Acquire) == 0 {
            loom::thread::yield_now();
        }
        let buf = dev.reclaim();
        buf.with(|b| assert_eq!(&b[..4], &[9, 9, 3, 4]));
        device.join().unwrap();
    });
}

/// A host that reclaims too early (before the device says it is done) must not race the
/// DMA: the reclaim waits for the transfer to finish, or the transfer faults.
#[test]
fn early_reclaim_never_races_a_transfer() {
    loom::model(|| {
        let mem = HostMemory::new(0x1000, PAGE, PAGE).unwrap();
        let dev = mem.claim(0, PAGE).unwrap().to_device();
        let bus = dev.bus_addr();
        let device = {
            let mem = Arc::clone(&mem);
            loom::thread::spawn(move || mem.dma_write(bus, &[5; 8]).is_ok())
        };
        let buf = dev.reclaim();
        let seen = buf.with(|b| b[0]);
        let wrote = device.join().unwrap();
        // Either the DMA finished before the reclaim (and its bytes are visible), or it
        // found the page taken back and did nothing.
        assert_eq!(seen, if wrote { 5 } else { 0 });
    });
}

/// Spins until the lent buffer comes back for writing.
fn unlend(mut lent: LentBuf) -> HostBuf {
    loop {
        match lent.try_unlend() {
            Ok(buf) => return buf,
            Err(again) => {
                lent = again;
                loom::thread::yield_now();
            }
        }
    }
}

/// The host lends a buffer and keeps reading it while the device, holding a `LentRead`,
/// DMA-reads it and lets go; the host takes it back as soon as it can and writes. Loom
/// reports any read of the device not ordered before the host's write.
#[test]
fn lend_read_unlend_write() {
    loom::model(|| {
        let mem = HostMemory::new(0x1000, PAGE, PAGE).unwrap();
        let mut buf = mem.claim(0, PAGE).unwrap();
        buf.with_mut(|b| b[..4].copy_from_slice(&[1, 2, 3, 4]));
        let lent = buf.lend();
        let reader = lent.reader();
        let device = {
            let mem = Arc::clone(&mem);
            loom::thread::spawn(move || {
                let mut got = [0u8; 4];
                mem.dma_read(reader.bus_addr(), &mut got).unwrap();
                assert_eq!(got, [1, 2, 3, 4]);
                assert!(
                    mem.dma_write(reader.bus_addr(), &[0]).is_err(),
                    "lent pages are read-only"
                );
                drop(reader);
            })
        };
        lent.with(|b| assert_eq!(&b[..4], &[1, 2, 3, 4]));
        let mut buf = unlend(lent);
        buf.with_mut(|b| b[..4].fill(9));
        device.join().unwrap();
        assert_eq!(mem.owner(0), Some(Owner::Host));
    });
}

/// The host drops the `LentBuf` while the device still reads under its `LentRead`: the
/// pages stay lent until the device lets go. The host claims the range again as soon as
/// it can and writes; loom reports a write that could overlap the device's read.
#[test]
fn dropped_lending_outlives_the_device_read() {
    loom::model(|| {
        let mem = HostMemory::new(0x1000, PAGE, PAGE).unwrap();
        let mut buf = mem.claim(0, PAGE).unwrap();
        buf.with_mut(|b| b[0] = 7);
        let lent = buf.lend();
        let reader = lent.reader();
        let device = {
            let mem = Arc::clone(&mem);
            loom::thread::spawn(move || {
                let mut got = [0u8; 2];
                mem.dma_read(reader.bus_addr(), &mut got).unwrap();
                assert_eq!(got, [7, 0]);
            })
        };
        drop(lent);
        let mut buf = loop {
            match mem.claim(0, PAGE) {
                Ok(buf) => break buf,
                Err(e) => {
                    assert_eq!(
                        e,
                        HostMemError::InUse {
                            page: 0,
                            owner: Owner::Lent
                        }
                    );
                    loom::thread::yield_now();
                }
            }
        };
        buf.with_mut(|b| b[0] = 1);
        device.join().unwrap();
    });
}

/// A device read of lent pages made without a `LentRead` (a stray bus address) races the
/// host's take-back: either the read completes first and sees the lent bytes, or it finds
/// the pages taken back and faults; it never overlaps the host's write.
#[test]
fn a_read_without_a_reader_never_races_the_take_back() {
    loom::model(|| {
        let mem = HostMemory::new(0x1000, PAGE, PAGE).unwrap();
        let mut buf = mem.claim(0, PAGE).unwrap();
        buf.with_mut(|b| b[0] = 7);
        let lent = buf.lend();
        let bus = lent.bus_addr();
        let device = {
            let mem = Arc::clone(&mem);
            loom::thread::spawn(move || {
                let mut got = [0u8; 1];
                mem.dma_read(bus, &mut got).map(|_| got[0])
            })
        };
        let mut buf = unlend(lent);
        buf.with_mut(|b| b[0] = 1);
        match device.join().unwrap() {
            Ok(seen) => assert_eq!(seen, 7),
            Err(fault) => assert!(matches!(
                fault,
                DmaFault::NotDeviceOwned {
                    owner: Owner::Host,
                    ..
                }
            )),
        }
    });
}
