//! The shm backend's own pieces: process liveness (zombies too) and descriptors.

use super::*;
use descriptor::{Descriptor, INLINE};

fn owner_of(pid: u32) -> u64 {
    (u64::from(pid) << 32) | start_time(pid).expect("the process exists") & 0xffff_ffff
}

#[test]
fn this_process_is_alive_and_a_wrong_start_time_is_not() {
    let me = my_owner();
    assert!(alive(me));
    assert!(!alive(me ^ 1), "a pid reused by another process");
    assert!(!alive(0));
}

#[test]
fn a_zombie_is_dead() {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let owner = owner_of(child.id());
    // It exits at once and stays a zombie until reaped: wait for that state (bounded,
    // no timer raced).
    let deadline = Instant::now() + Duration::from_secs(20);
    while proc_stat(child.id()).is_some_and(|(s, _)| s != 'Z') {
        assert!(Instant::now() < deadline, "the child never exited");
        std::thread::yield_now();
    }
    assert_eq!(proc_stat(child.id()).map(|(s, _)| s), Some('Z'));
    assert!(!alive(owner), "a zombie holds no side");
    child.wait().expect("reap");
    assert!(!alive(owner));
}

#[test]
fn descriptors_round_trip_their_flag_and_epochs() {
    let mut rec = [0u8; DESCRIPTOR];
    rec[..4].copy_from_slice(&(5 | MORE).to_le_bytes());
    rec[4..8].copy_from_slice(&65_536u32.to_le_bytes());
    rec[8..12].copy_from_slice(&7u32.to_le_bytes());
    rec[12..16].copy_from_slice(&9u32.to_le_bytes());
    rec[16..24].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    let d = descriptor(&rec).unwrap();
    assert_eq!(
        d,
        Descriptor {
            slot: 5,
            len: 65_536,
            more: true,
            inline: false,
            from_epoch: 7,
            to_epoch: 9,
            taken: u64::MAX - 3,
        }
    );
    assert_eq!(descriptor(&rec[..20]), None, "a short record");
}

#[test]
fn inline_descriptors_carry_their_bytes_and_name_no_slot() {
    let mut rec = [0u8; DESCRIPTOR + 8];
    rec[..4].copy_from_slice(&INLINE.to_le_bytes());
    rec[4..8].copy_from_slice(&3u32.to_le_bytes());
    rec[DESCRIPTOR..DESCRIPTOR + 3].copy_from_slice(b"abc");
    let d = descriptor(&rec).unwrap();
    assert!(d.inline && !d.more);
    assert_eq!(d.slot, usize::MAX, "no slot to give back");
    assert_eq!(descriptor::inline_payload(&rec, &d), b"abc");
    rec[4..8].copy_from_slice(&9u32.to_le_bytes());
    assert_eq!(descriptor(&rec), None, "bytes missing from the record");
    rec[..4].copy_from_slice(&(INLINE | MORE).to_le_bytes());
    rec[4..8].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(descriptor(&rec), None, "an inline fragment");
    let mut long = vec![0u8; DESCRIPTOR + 200];
    long[..4].copy_from_slice(&INLINE.to_le_bytes());
    long[4..8].copy_from_slice(&200u32.to_le_bytes());
    assert_eq!(descriptor(&long), None, "longer than an inline message");
}
