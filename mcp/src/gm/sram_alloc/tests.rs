//! The allocator's scripted cases and property tests (seed 001, §3.1).

use super::*;
use proptest::prelude::*;

const ME: UserId = UserId(1);
const YOU: UserId = UserId(2);

fn fresh(pages: u32) -> SramAllocator {
    SramAllocator::new(0x10_0000, pages * PAGE).unwrap()
}

#[test]
fn pages_are_512_bytes_and_the_range_is_rounded_inward() {
    let a = SramAllocator::new(0x1001, 3 * PAGE).unwrap();
    assert_eq!(a.base(), 0x1200, "base rounded up to a page");
    assert_eq!(a.total_pages(), 2, "end rounded down");
    assert!(SramAllocator::new(0x1001, 100).is_none());
    let mut a = fresh(8);
    let s = a.alloc(1, ME).unwrap();
    assert_eq!(a.info(s).unwrap().len, PAGE, "one byte takes a whole page");
    let s = a.alloc(PAGE + 1, ME).unwrap();
    assert_eq!(a.info(s).unwrap().len, 2 * PAGE);
    assert_eq!(a.alloc(0, ME), Err(AllocError::ZeroSize));
    a.check().unwrap();
}

#[test]
fn best_fit_takes_the_smallest_adequate_run() {
    let mut a = fresh(64);
    let ids: Vec<_> = [4, 1, 8, 1, 2, 1]
        .iter()
        .map(|&n| a.alloc(n * PAGE, ME).unwrap())
        .collect();
    // Free the 4-page and 2-page segments: holes of 4 and 2 pages.
    a.free(ids[0], ME).unwrap();
    a.free(ids[4], ME).unwrap();
    a.check().unwrap();
    let two = a.alloc(2 * PAGE, ME).unwrap();
    assert_eq!(
        a.info(two).unwrap().addr,
        a.info(ids[3]).unwrap().addr + PAGE,
        "the 2-page hole"
    );
    let three = a.alloc(3 * PAGE, ME).unwrap();
    assert_eq!(
        a.info(three).unwrap().addr,
        a.base(),
        "the 4-page hole, cut from its start"
    );
    a.check().unwrap();
}

#[test]
fn the_last_list_holds_runs_of_511_pages_and_more_and_picks_the_smallest() {
    let mut a = fresh(2000);
    let x = a.alloc(700 * PAGE, ME).unwrap();
    let sep = a.alloc(PAGE, ME).unwrap();
    let y = a.alloc(520 * PAGE, ME).unwrap();
    let _sep2 = a.alloc(PAGE, ME).unwrap();
    a.free(x, ME).unwrap();
    a.free(y, ME).unwrap();
    // Free runs: 700, 520, and the tail of 2000 - 1222 = 778 pages: all in the last list.
    assert_eq!(a.free_runs(), 3);
    a.check().unwrap();
    let z = a.alloc(515 * PAGE, ME).unwrap();
    assert_eq!(
        a.info(z).unwrap().addr,
        a.info(sep).unwrap().addr + PAGE,
        "the 520 run"
    );
    a.check().unwrap();
}

#[test]
fn bad_frees_are_refused_and_counted() {
    let mut a = fresh(16);
    let s = a.alloc(PAGE, ME).unwrap();
    assert_eq!(
        a.free(s, YOU),
        Err(AllocError::NotOwner {
            page: 0,
            owner: ME,
            caller: YOU
        })
    );
    a.free(s, ME).unwrap();
    assert_eq!(
        a.free(s, ME),
        Err(AllocError::UnknownSegment { page: 0 }),
        "double free"
    );
    // The same page handed out again: the old id stays dead.
    let t = a.alloc(PAGE, YOU).unwrap();
    assert_eq!(a.free(s, ME), Err(AllocError::UnknownSegment { page: 0 }));
    assert_eq!(a.info(s), None);
    assert_eq!(a.info(t).unwrap().owner, YOU);
    assert_eq!(a.counters().bad_frees, 3);
    a.check().unwrap();
}

#[test]
fn exhaustion_is_an_error_naming_the_largest_run() {
    let mut a = fresh(10);
    let _x = a.alloc(4 * PAGE, ME).unwrap();
    let y = a.alloc(2 * PAGE, ME).unwrap();
    let _z = a.alloc(4 * PAGE, ME).unwrap();
    assert_eq!(
        a.alloc(PAGE, ME),
        Err(AllocError::Exhausted {
            want: 1,
            largest: 0
        })
    );
    a.free(y, ME).unwrap();
    assert_eq!(
        a.alloc(3 * PAGE, ME),
        Err(AllocError::Exhausted {
            want: 3,
            largest: 2
        })
    );
    assert_eq!(a.counters().exhausted, 2);
    a.check().unwrap();
}

#[test]
fn a_user_going_away_frees_only_its_own_segments() {
    let mut a = fresh(32);
    let mine: Vec<_> = (0..5).map(|_| a.alloc(PAGE * 2, ME).unwrap()).collect();
    let yours = a.alloc(PAGE, YOU).unwrap();
    let more = a.alloc(PAGE * 3, ME).unwrap();
    assert_eq!(a.release_user(ME), 6);
    a.check().unwrap();
    assert!(mine.iter().chain([&more]).all(|&s| a.info(s).is_none()));
    assert_eq!(a.info(yours).unwrap().owner, YOU);
    assert_eq!(a.free_pages(), 31);
    a.free(yours, YOU).unwrap();
    assert_eq!((a.free_runs(), a.largest_free_run()), (1, 32));
}

#[derive(Debug, Clone)]
enum Op {
    Alloc { pages: u32, user: u32 },
    Free { pick: usize, wrong_user: bool },
    Release { user: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop_oneof![1u32..8, 1u32..64, 400u32..700], 1u32..4)
            .prop_map(|(pages, user)| Op::Alloc { pages, user }),
        4 => (any::<usize>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, wrong_user)| Op::Free { pick, wrong_user }),
        1 => (1u32..4).prop_map(|user| Op::Release { user }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// After every step: the invariants hold (no two live segments overlap, every free run
    /// is in exactly one list, runs merged); and freeing everything leaves one run.
    #[test]
    fn random_workloads_keep_the_invariants_and_merge_back_to_one_run(
        ops in prop::collection::vec(op(), 1..300),
        pages in 64u32..3000,
    ) {
        let mut a = fresh(pages);
        let mut live: Vec<(SegmentId, UserId, u32, u32)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { pages: n, user } => {
                    let before = a.largest_free_run();
                    match a.alloc(n * PAGE, UserId(user)) {
                        Ok(id) => {
                            let info = a.info(id).unwrap();
                            prop_assert_eq!(info.len, n * PAGE);
                            live.push((id, UserId(user), info.addr, info.len));
                        }
                        Err(AllocError::Exhausted { largest, .. }) => {
                            prop_assert!(before < n);
                            prop_assert_eq!(largest, before);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Free { pick, wrong_user } if !live.is_empty() => {
                    let i = pick % live.len();
                    let (id, user, ..) = live[i];
                    if wrong_user {
                        let other = UserId(user.0 + 10);
                        let refused = matches!(a.free(id, other), Err(AllocError::NotOwner { .. }));
                        prop_assert!(refused);
                    } else {
                        a.free(id, user).unwrap();
                        live.swap_remove(i);
                        prop_assert!(a.free(id, user).is_err(), "double free refused");
                    }
                }
                Op::Free { .. } => {}
                Op::Release { user } => {
                    let n = live.iter().filter(|l| l.1 == UserId(user)).count();
                    prop_assert_eq!(a.release_user(UserId(user)), n);
                    live.retain(|l| l.1 != UserId(user));
                }
            }
            a.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
            // No two live segments overlap (the allocator's view and ours agree).
            let mut spans: Vec<(u32, u32)> = live.iter().map(|l| (l.2, l.2 + l.3)).collect();
            spans.sort_unstable();
            prop_assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
            prop_assert_eq!(a.segments().len(), live.len());
            let used: u32 = live.iter().map(|l| l.3 / PAGE).sum();
            prop_assert_eq!(used + a.free_pages(), pages);
        }
        for (id, user, ..) in live {
            a.free(id, user).unwrap();
        }
        a.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(a.free_runs(), 1);
        prop_assert_eq!(a.largest_free_run(), pages);
        prop_assert_eq!(a.fragmentation(), 0.0);
    }
}
