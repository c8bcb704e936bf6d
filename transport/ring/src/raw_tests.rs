use super::*;

fn fresh(capacity: usize) -> (Producer, Consumer) {
    let region = Arc::new(Region::heap(RING_HEADER + capacity));
    ring(
        region,
        RingPlace {
            offset: 0,
            capacity,
        },
    )
    .unwrap()
}

#[test]
fn records_come_out_in_order_and_intact() {
    let (mut p, mut c) = fresh(256);
    let mut out = Vec::new();
    assert_eq!(c.try_recv(&mut out), Err(RingError::Empty));
    for round in 0..200u32 {
        let len = (round as usize * 7) % 100;
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
        p.try_send(&data).unwrap();
        assert_eq!(c.try_recv(&mut out).unwrap(), len);
        assert_eq!(out, data, "round {round}");
    }
}

#[test]
fn a_full_ring_says_so_and_frees_up_as_it_is_read() {
    let (mut p, mut c) = fresh(128);
    let mut sent = 0;
    while p.try_send(&[sent as u8; 20]).is_ok() {
        sent += 1;
    }
    assert_eq!(p.try_send(&[0; 20]), Err(RingError::Full));
    assert_eq!(sent, 4, "four 28-byte records fill 128 bytes");
    let mut out = Vec::new();
    c.try_recv(&mut out).unwrap();
    assert_eq!(out, vec![0u8; 20]);
    p.try_send(&[9; 20]).unwrap();
    let mut got = Vec::new();
    while c.try_recv(&mut out).is_ok() {
        got.push(out[0]);
    }
    assert_eq!(got, vec![1, 2, 3, 9]);
}

#[test]
fn records_wrap_without_straddling_the_end() {
    let (mut p, mut c) = fresh(64);
    let mut out = Vec::new();
    for i in 0..100u8 {
        p.try_send(&[i; 13]).unwrap();
        p.try_send(&[i ^ 0xFF; 5]).unwrap();
        c.try_recv(&mut out).unwrap();
        assert_eq!(out, vec![i; 13]);
        c.try_recv(&mut out).unwrap();
        assert_eq!(out, vec![i ^ 0xFF; 5]);
    }
    assert_eq!(
        p.try_send(&[0; 25]),
        Err(RingError::TooLarge { len: 25, max: 24 })
    );
    p.try_send(&[]).unwrap();
    assert_eq!(c.try_recv(&mut out), Ok(0));
}

#[test]
fn zero_copy_grants() {
    let (mut p, mut c) = fresh(256);
    let mut g = p.try_reserve(100).unwrap();
    g.as_mut_slice()[..5].copy_from_slice(b"hello");
    g.commit(5);
    // A grant dropped without commit publishes nothing.
    let _ = p.try_reserve(50).unwrap();
    {
        let r = c.try_read().unwrap();
        assert_eq!(r.as_slice(), b"hello");
        assert_eq!(r.len(), 5);
    }
    assert_eq!(c.try_read().err(), Some(RingError::Empty));
}

#[test]
fn a_corrupt_ring_is_an_error_not_a_wild_access() {
    let region = Arc::new(Region::heap(RING_HEADER + 128));
    let place = RingPlace {
        offset: 0,
        capacity: 128,
    };
    let (mut p, mut c) = ring(region.clone(), place).unwrap();
    p.try_send(b"abc").unwrap();
    // A hostile producer publishes a tail far beyond what the ring holds.
    region.word(0).unwrap().store(10_000, Ordering::Release);
    assert_eq!(c.try_read().err(), Some(RingError::Corrupt("indices")));
    // Or writes a record header whose length runs past the published bytes.
    region.word(0).unwrap().store(16, Ordering::Release);
    let mut bad = Region::heap(RING_HEADER + 128);
    assert!(bad.write_at(RING_HEADER, &[0xFF, 0xFF, 0, 0, 0, 0, 0, 0]));
    let bad = Arc::new(bad);
    bad.word(0).unwrap().store(16, Ordering::Release);
    let (_, mut c2) = ring(bad, place).unwrap();
    assert_eq!(
        c2.try_read().err(),
        Some(RingError::Corrupt("record header"))
    );
    // And geometry that does not fit the region is refused.
    assert!(
        ring(
            Arc::new(Region::heap(64)),
            RingPlace {
                offset: 4096,
                capacity: 128
            }
        )
        .is_err()
    );
    assert!(
        ring(
            Arc::new(Region::heap(4096)),
            RingPlace {
                offset: 0,
                capacity: 100
            }
        )
        .is_err()
    );
    assert!(
        ring(
            Arc::new(Region::heap(4096)),
            RingPlace {
                offset: 8,
                capacity: 128
            }
        )
        .is_err()
    );
}

#[test]
fn two_threads_pass_records_of_every_size() {
    let (mut p, mut c) = fresh(1024);
    let n: u32 = if cfg!(miri) { 200 } else { 20_000 };
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..n {
                let len = (i as usize * 31) % 400;
                loop {
                    match p.try_reserve(len) {
                        Ok(mut g) => {
                            for (j, b) in g.as_mut_slice().iter_mut().enumerate() {
                                *b = (i as usize + j) as u8;
                            }
                            g.commit(len);
                            break;
                        }
                        Err(RingError::Full) => std::thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        for i in 0..n {
            loop {
                match c.try_read() {
                    Ok(r) => {
                        let len = (i as usize * 31) % 400;
                        assert_eq!(r.len(), len);
                        assert!(
                            r.as_slice()
                                .iter()
                                .enumerate()
                                .all(|(j, &b)| b == (i as usize + j) as u8),
                            "record {i}"
                        );
                        break;
                    }
                    Err(RingError::Empty) => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
}

#[test]
fn slots_are_written_by_one_handle_or_read_by_views_never_both() {
    let region = Arc::new(Region::heap(4096));
    assert!(SlotArea::new(region.clone(), 4000, 64, 2).is_err());
    assert!(SlotArea::new(region.clone(), 0, usize::MAX, 2).is_err());
    let area = SlotArea::new(region, 64, 100, 3).unwrap();
    let mut w = area.claim(1).unwrap();
    assert!(area.claim(1).is_none(), "one writer");
    assert!(area.view(1, 0, 4).is_none(), "no view while written");
    assert!(area.claim(3).is_none(), "out of range");
    w.as_mut_slice()[..4].copy_from_slice(b"abcd");
    assert_eq!(w.index(), 1);
    drop(w);
    let v = area.view(1, 1, 3).unwrap();
    let v2 = area.view(1, 0, 100).unwrap();
    assert!(area.view(1, 1, 100).is_none(), "past the slot");
    assert!(area.view(1, usize::MAX, 2).is_none(), "overflowing offset");
    assert_eq!(v.as_slice(), b"bcd");
    assert_eq!(&v2.as_slice()[..4], b"abcd");
    assert!(area.claim(1).is_none(), "no writer while viewed");
    drop((v, v2));
    assert!(area.claim(1).is_some());
}

#[test]
fn a_read_only_area_is_never_claimed_and_its_views_are_bounded() {
    let region = Arc::new(Region::heap(4096));
    // Another "process" writes the slots through its own area over the same bytes.
    let writer = SlotArea::new(region.clone(), 64, 100, 3).unwrap();
    let reader = SlotArea::read_only(region.clone(), 64, 100, 3).unwrap();
    assert!(SlotArea::read_only(region.clone(), 4000, 64, 2).is_err());
    let mut w = writer.claim(2).unwrap();
    w.as_mut_slice()[..3].copy_from_slice(b"xyz");
    drop(w);
    assert!(
        reader.claim(2).is_none(),
        "this process only reads these slots"
    );
    let v = reader.view(2, 0, 3).unwrap();
    let v2 = reader.view(2, 1, 2).unwrap();
    assert_eq!((v.as_slice(), v2.as_slice()), (&b"xyz"[..], &b"yz"[..]));
    assert!(reader.view(2, 0, 101).is_none(), "past the slot");
    assert!(reader.view(3, 0, 1).is_none(), "out of range");
    assert!(Arc::ptr_eq(v.area(), &reader));
    assert!(Arc::ptr_eq(v.area().region(), &region));
    drop((v, v2));
    assert!(reader.claim(2).is_none());
}

// Miri cannot map files; the heap regions above exercise the same unsafe code under it.
#[cfg(not(miri))]
#[test]
fn a_mapped_file_is_a_region() {
    let path = std::env::temp_dir().join(format!("myri-raw-test-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(8192).unwrap();
    let a = Region::map_file(&file).unwrap();
    let b = Region::map_file(&file).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(a.len(), 8192);
    a.word(64).unwrap().store(42, Ordering::Release);
    assert_eq!(
        b.word(64).unwrap().load(Ordering::Acquire),
        42,
        "both maps see one memory"
    );
}
