//! A shared-memory region that another process wrote (one that crashed mid-write, a
//! buggy one, a hostile one): arbitrary bytes patched into a live region, in its header,
//! side records, rings, slot states or slots, then both sides run. Nothing panics or
//! hangs, and what a side reads from the region is checked before it is used.
//!
//! Input: `[mode][when]` then patches `[offset: u16 le][page: u8][len: u8][bytes]`. The
//! mode picks native reliability, RPP over the rings or raw datagrams; `when` says
//! whether the patches land before the second side attaches (a bad header, a forged
//! owner) or after the two have exchanged a few messages (bad descriptors and slots).
//! `page` selects a 4 KiB page of the region (the header, the rings and slot states of
//! both directions, the first slots), so the patches reach every structure.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_transport::{Endpoint, Options, shm_region_path};
use std::os::unix::fs::FileExt;

/// Pages a patch can land in: the header and the start of both directions' rings,
/// slot-state words and slots (a direction is a few hundred pages; patches reach its
/// first ones and, through `page`'s high values, the second direction).
fn page_offset(page: u8, region_len: u64) -> u64 {
    let pages = region_len / 4096;
    let p = u64::from(page);
    // The low half: the first pages; the high half: spread over the whole region.
    if p < 128 {
        p.min(pages - 1) * 4096
    } else {
        ((p - 128) * pages / 128) * 4096
    }
}

fn run(data: &[u8]) -> Option<()> {
    let (&mode, rest) = data.split_first()?;
    let (&when, mut patches) = rest.split_first()?;
    let name = format!("fuzz-{}", std::process::id());
    let path = shm_region_path(&name);
    let _ = std::fs::remove_file(&path);
    let url = format!("shm://{name}");
    let options = || {
        Options::default()
            .with_reliable(mode % 3 != 2)
            .with_rpp_over_shm(mode % 3 == 1)
    };
    let mut a = Endpoint::open_with(&url, options()).ok()?;
    let region = std::fs::OpenOptions::new().write(true).open(&path).ok()?;
    let region_len = region.metadata().ok()?.len();
    let mut patch = |patches: &mut &[u8]| {
        while let [lo, hi, page, len, tail @ ..] = *patches {
            let len = usize::from(*len).min(tail.len());
            let at = page_offset(*page, region_len) + u64::from(u16::from_le_bytes([*lo, *hi]));
            let _ =
                region.write_all_at(&tail[..len], at.min(region_len.saturating_sub(len as u64)));
            *patches = &tail[len..];
        }
    };
    if when % 2 == 0 {
        patch(&mut patches);
    }
    let b = Endpoint::open_with(&url, options());
    let mut b = match b {
        Ok(b) => b,
        Err(_) => {
            drop(a);
            let _ = std::fs::remove_file(&path);
            return None;
        }
    };
    let to_b = a.insert_addr(&url).ok();
    let to_a = b.insert_addr(&url).ok();
    for round in 0..4u8 {
        for (from, to, len) in [(&mut a, to_b, 10usize), (&mut b, to_a, 70_000)] {
            if let Some(peer) = to {
                let mut m = from.alloc(len + usize::from(round));
                m.fill(round);
                let _ = from.send(peer, m);
            }
        }
        if round == 1 && when % 2 == 1 {
            patch(&mut patches);
        }
        for _ in 0..8 {
            while a.recv().is_some() {}
            while b.recv().is_some() {}
            while a.poll_completion().is_some() {}
            while b.poll_completion().is_some() {}
        }
    }
    drop(a);
    drop(b);
    let _ = std::fs::remove_file(&path);
    Some(())
}

fuzz_target!(|data: &[u8]| {
    run(data);
});
