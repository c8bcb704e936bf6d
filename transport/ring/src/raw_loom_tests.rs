//! Model checks of the ring's handoff. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p myri-ring --release --lib`.

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

/// A producer sends three records through a ring that holds two; the consumer reads
/// them. Loom reports any access to record bytes not ordered by the indices.
#[test]
fn records_cross_without_races() {
    loom::model(|| {
        let (mut p, mut c) = fresh(64);
        let producer = loom::thread::spawn(move || {
            for i in 0..3u8 {
                while p.try_send(&[i; 12]).is_err() {
                    loom::thread::yield_now();
                }
            }
        });
        let mut out = Vec::new();
        for i in 0..3u8 {
            loop {
                match c.try_recv(&mut out) {
                    Ok(_) => break,
                    Err(RingError::Empty) => loom::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(out, vec![i; 12]);
        }
        producer.join().unwrap();
    });
}
