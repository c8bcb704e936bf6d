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

/// A second process attaching to a region, stopped between its two steps: it has claimed
/// side 1 (the owner word) but not yet bumped the side's epoch. Driven in this order in
/// one process, as the MPI start-up hang ran it between two.
struct HalfAttached {
    name: String,
    region: Arc<Region>,
    me: Opener,
}

const NATIVE: ShmMode = ShmMode::Native {
    max_message: 1 << 20,
};

impl HalfAttached {
    /// Claims side 1 of region `name` the way `open` does (vacant, or its owner gone),
    /// and stops there.
    fn claim(name: &str) -> HalfAttached {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(region_path(name))
            .expect("the region exists");
        let Existing::Ready(region) = existing(&file, name, &region_path(name)).unwrap() else {
            panic!("not initialized");
        };
        let region = Arc::new(region);
        let owner = region.word(side_word(1, layout::OWNER)).expect("in bounds");
        let cur = owner.load(Ordering::Acquire);
        assert!(!alive(cur), "side 1 is free");
        // This process stands for the newcomer: alive, which is all the peer looks at.
        owner
            .compare_exchange(cur, my_owner(), Ordering::AcqRel, Ordering::Acquire)
            .expect("side 1 was free");
        let me = Opener {
            owner: my_owner(),
            incarnation: 2,
            mode: NATIVE,
        };
        HalfAttached {
            name: name.to_owned(),
            region,
            me,
        }
    }

    /// The rest of `open`: bumps the epoch, adopts the peer.
    fn finish(self) -> ShmBackend {
        let path = region_path(&self.name);
        ShmBackend::attach(&self.name, path, self.region, 1, self.me, false).expect("attach")
    }
}

fn unique_name(what: &str) -> String {
    let name = format!("unit-{what}-{}", std::process::id());
    let _ = std::fs::remove_file(region_path(&name));
    name
}

/// `a` sends one message while `half` is half-way through attaching, then `half`
/// finishes and both run their passes until it arrives (bounded; nothing timed); it
/// must arrive, and no record may have been skipped as stale.
fn first_message_arrives(a: &mut ShmBackend, half: HalfAttached) {
    let sent = a.send_reliable(&RemoteAddr::Shm, Buf::copy_of(b"x"), 7);
    let mut pending = match sent {
        Ok(_) => None,
        Err(e) => {
            let would_block = matches!(e.error, SendErrorKind::WouldBlock);
            assert!(would_block, "{:?}", e.error);
            Some(e.buf)
        }
    };
    let mut b = half.finish();
    assert_eq!(b.side, 1);
    let mut got = None;
    for _ in 0..1000 {
        if let Some(buf) = pending.take() {
            a.check_peer();
            if let Err(e) = a.send_reliable(&RemoteAddr::Shm, buf, 7) {
                pending = Some(e.buf);
            }
        }
        a.progress();
        b.progress();
        if let Some(inc) = b.recv() {
            got = Some(inc.data.into_vec());
            break;
        }
    }
    assert_eq!(
        b.counters().stale,
        0,
        "the first message was skipped as stale"
    );
    assert_eq!(
        got.as_deref(),
        Some(&b"x"[..]),
        "the first message was lost"
    );
}

/// The start-up hang of MPI over `shm://`: the first side looked at the region while the
/// second had claimed its side but not bumped its epoch, took it for its peer, and sent
/// its first message naming the epoch before; the newcomer then skipped that message as
/// meant for its predecessor, and both waited for ever.
#[test]
fn a_message_sent_while_the_peer_is_half_attached_is_not_lost() {
    let name = unique_name("half-attached");
    let mut a = ShmBackend::open(&name, 1, NATIVE).expect("create");
    assert_eq!(a.side, 0);
    let half = HalfAttached::claim(&name);
    // The first side looks at the peer (its idle pass does this every 2 ms).
    a.check_peer();
    first_message_arrives(&mut a, half);
    drop(a);
    let _ = std::fs::remove_file(region_path(&name));
}

/// The same race met at attach: both sides of a region are taken over from processes
/// that died, and the one that attaches second finds the other half-way.
#[test]
fn a_newcomer_does_not_adopt_a_half_attached_peer() {
    let name = unique_name("both-new");
    // A pair that died left the region: both owner (and ready) words name a process
    // that is gone, each side in epoch 1.
    let x = ShmBackend::open(&name, 1, NATIVE).expect("create");
    let y = ShmBackend::open(&name, 1, NATIVE).expect("attach");
    let dead = |side: u64| (0x7fff_fff0_u64 << 32) | (1 + side);
    for side in 0..2 {
        for field in [layout::OWNER, layout::READY] {
            x.word(side_word(side, field))
                .store(dead(side as u64), Ordering::Release);
        }
    }
    // Dropped as a crash would leave them: nothing written, the region kept.
    std::mem::forget(x);
    std::mem::forget(y);
    let half = HalfAttached::claim(&name);
    let mut a = ShmBackend::open(&name, 1, NATIVE).expect("take side 0 over");
    assert_eq!(a.side, 0);
    first_message_arrives(&mut a, half);
    drop(a);
    let _ = std::fs::remove_file(region_path(&name));
}

/// A ping-pong of two-slot messages keeps using the same two slots: the lowest free ones.
/// Taking slots in turn walked it through all of them, one step per exchange, each step
/// onto pages not touched before (60-odd slow exchanges at the start of every MPI run).
#[test]
fn a_ping_pong_reuses_the_lowest_free_slots() {
    let name = unique_name("lowest-slots");
    let mut a = ShmBackend::open(&name, 1, NATIVE).expect("create");
    let mut b = ShmBackend::open(&name, 1, NATIVE).expect("attach");
    let mut used = std::collections::BTreeSet::new();
    for round in 0..200u64 {
        for piece in 0..2u64 {
            let mut buf = a.alloc(32 << 10).expect("a free slot");
            if let BufKind::Shm(s) = &buf.kind {
                used.insert(s.index());
            }
            buf[0] = piece as u8;
            let tag = round * 2 + piece;
            assert!(a.send_reliable(&RemoteAddr::Shm, buf, tag).is_ok());
        }
        // The receiver takes both and lets go of them; the sender collects them back.
        let mut got = 0;
        for _ in 0..1000 {
            b.progress();
            while let Some(inc) = b.recv() {
                assert_eq!(inc.data.len(), 32 << 10);
                got += 1;
            }
            a.progress();
            while a.native_poll_acked().is_some() {}
            if got == 2 && !a.has_unacked() {
                break;
            }
        }
        assert_eq!(got, 2, "round {round}");
    }
    assert_eq!(used.into_iter().collect::<Vec<_>>(), vec![0, 1]);
    drop((a, b));
    let _ = std::fs::remove_file(region_path(&name));
}

/// Set in the child process [`a_region_that_does_not_fit_is_a_typed_error`] runs itself
/// in.
const SMALL_SHM_CHILD: &str = "MYRI_TEST_SMALL_SHM_CHILD";

/// A region on a file system too small for it: over a 4 MiB tmpfs (a region is some
/// 8 MiB) mounted on `/dev/shm` in a private mount namespace, where the test runs
/// itself again (`unshare --mount`: root, or CAP_SYS_ADMIN, is needed). Creating one is
/// [`OpenError::ShmNoSpace`] naming the region, what it needs and what is free, and
/// leaves no file; opening one made sparse by another (its header written, the rest a
/// hole) is the same error, not a `SIGBUS`, and leaves the file to its maker. Skipped,
/// with the reason printed, only when neither root nor in CI (`CI` set).
#[test]
fn a_region_that_does_not_fit_is_a_typed_error() {
    if std::env::var_os(SMALL_SHM_CHILD).is_some() {
        small_shm_child();
        return;
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    });
    let name = "backend::shm::tests::a_region_that_does_not_fit_is_a_typed_error";
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o size=4m myri-test /dev/shm && exec \"$0\" \"$@\"")
        .arg(std::env::current_exe().expect("the test binary"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(SMALL_SHM_CHILD, "1")
        .output();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let out = match out {
        Ok(out) => out,
        Err(e) if !ci && !root => {
            println!("skipped: cannot run unshare ({e}); runs as root or in CI");
            return;
        }
        Err(e) => panic!("unshare: {e}"),
    };
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let ran = stdout.contains("test result: ok. 1 passed");
    if !out.status.success() && !ran && !ci && !root && !stdout.contains("panicked") {
        println!("skipped: no private mount namespace with a small /dev/shm: {stderr}");
        return;
    }
    assert!(
        out.status.success() && ran,
        "the child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// [`a_region_that_does_not_fit_is_a_typed_error`] over the small `/dev/shm`.
fn small_shm_child() {
    let free = crate::sys::free_bytes(&File::open("/dev/shm").expect("/dev/shm"))
        .expect("statvfs")
        .expect("a tmpfs has a size");
    assert!(free < region_len() as u64, "/dev/shm is not the small one");
    let need = region_len() as u64;
    // A new region.
    let name = "small-shm";
    let err = ShmBackend::open(
        name,
        1,
        ShmMode::Native {
            max_message: 1 << 20,
        },
    )
    .err()
    .expect("a region larger than /dev/shm");
    let text = err.to_string();
    match err {
        OpenError::ShmNoSpace {
            name: n,
            path,
            need: nd,
            free: fr,
        } => {
            assert_eq!((n.as_str(), path, nd), (name, region_path(name), need));
            assert!(fr < need && fr <= free, "{fr} free of {free}");
        }
        other => panic!("not ShmNoSpace: {other:?}"),
    }
    assert!(
        text.contains("small-shm") && text.contains(&need.to_string()),
        "{text}"
    );
    assert!(text.contains("--shm-size"), "{text}");
    assert!(!region_path(name).exists(), "the half-made region was left");
    // The same through the public API, in every mode.
    for url in ["shm://small-shm", "shm://small-shm?reliable=0"] {
        match crate::Endpoint::open(url) {
            Err(OpenError::ShmNoSpace { .. }) => {}
            Err(e) => panic!("{url}: {e:?}"),
            Ok(_) => panic!("{url}: opened"),
        }
    }
    // A sparse region of another maker: its header written, the rest a hole.
    let name = "sparse";
    let path = region_path(name);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .expect("create");
    let mut header = vec![0u8; layout::HEADER];
    for (at, v) in [
        (layout::MAGIC_AT, layout::MAGIC),
        (layout::VERSION_AT, layout::VERSION),
        (layout::SLOT_LEN_AT, SLOT_LEN as u64),
        (layout::SLOTS_AT, SLOTS as u64),
        (layout::RING_AT, RING_CAPACITY as u64),
    ] {
        header[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    std::io::Write::write_all(&mut &f, &header).expect("header");
    f.set_len(need).expect("sparse");
    match ShmBackend::open(
        name,
        1,
        ShmMode::Native {
            max_message: 1 << 20,
        },
    ) {
        Err(OpenError::ShmNoSpace { need: n, .. }) => {
            assert!(n > 0 && n < need, "only the hole is needed: {n} of {need}");
        }
        Err(e) => panic!("sparse region: {e:?}"),
        Ok(_) => panic!("sparse region opened"),
    }
    assert!(path.exists(), "another's region removed");
    drop(f);
    let _ = std::fs::remove_file(&path);
}
