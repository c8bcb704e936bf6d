//! The SRAM page allocator of seed 001 (§3.1, Malloc for the LANai SRAM).
//!
//! # Shape
//!
//! The board's free SRAM is cut into 512-byte pages ([`PAGE`]). Used segments sit in an
//! AVL tree ordered by their first page (§3.1.2); each node also names the free segment
//! that directly follows it, if any, so that freeing a segment finds both neighbours to
//! merge with in one tree walk. Free segments are kept in size-class lists (§3.1.3): one
//! list per size from 1 to 510 pages and one last list for every run of 511 pages or
//! more, [`SIZE_CLASSES`] lists in all, with a bitmap of the non-empty lists standing for
//! the seed's "pointers to the next non-empty list". An allocation takes the smallest
//! adequate free segment (best fit), cuts what it needs from its start and puts the rest
//! back in its list; a free merges the segment with the free runs before and after it.
//!
//! # Owners
//!
//! Every segment belongs to a [`UserId`] (the seed keeps a pid per segment in the
//! driver and gives users only segment identifiers, §3.1.4). Users hold a [`SegmentId`]
//! (first page and a generation), so a stale or forged id is refused instead of freeing
//! somebody else's segment; [`SramAllocator::release_user`] frees everything a user
//! holds when it goes.
//!
//! The allocator runs on the host (as the seed's does): it only keeps books about SRAM and
//! never touches it.

use slab::Slab;
use thiserror::Error;

/// Bytes in an allocation page (seed 001, §3.1.1: file systems hand out 512-byte blocks).
pub const PAGE: u32 = 512;
/// Number of free lists: one per size from 1 to 510 pages, then one for larger runs.
pub const SIZE_CLASSES: usize = 511;

/// Who owns a segment (a host API user).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(pub u32);

/// A user's name for a segment: its first page and the generation of the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentId {
    page: u32,
    generation: u32,
}

/// Where an allocated segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// SRAM address of its first byte.
    pub addr: u32,
    /// Its length in bytes (whole pages).
    pub len: u32,
    /// Its owner.
    pub owner: UserId,
}

/// Why an allocation or a free was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AllocError {
    /// A request for no bytes.
    #[error("an sram segment of zero bytes was asked for")]
    ZeroSize,
    /// No free run is long enough.
    #[error("no free sram run of {want} pages (largest free run: {largest} pages)")]
    Exhausted {
        /// Pages asked for.
        want: u32,
        /// The longest free run now.
        largest: u32,
    },
    /// The id names no live segment (freed already, or never allocated).
    #[error("no live sram segment at page {page} (double free or a forged id)")]
    UnknownSegment {
        /// The page the id names.
        page: u32,
    },
    /// The segment belongs to another user.
    #[error("sram segment at page {page} belongs to user {owner:?}, not {caller:?}")]
    NotOwner {
        /// The segment's first page.
        page: u32,
        /// Its owner.
        owner: UserId,
        /// Who tried to free it.
        caller: UserId,
    },
}

/// An invariant of the allocator that does not hold (see [`SramAllocator::check`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("sram allocator invariant broken: {0}")]
pub struct InvariantBroken(pub String);

#[derive(Debug, Clone)]
struct UsedNode {
    start: u32,
    pages: u32,
    owner: UserId,
    generation: u32,
    /// The free segment right after this one (an index into `free`).
    next_free: Option<usize>,
    left: Option<usize>,
    right: Option<usize>,
    height: u8,
}

#[derive(Debug, Clone)]
struct FreeSeg {
    start: u32,
    pages: u32,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Counters of an allocator's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocCounters {
    /// Allocations made.
    pub allocs: u64,
    /// Segments freed.
    pub frees: u64,
    /// Allocations refused for want of room.
    pub exhausted: u64,
    /// Frees refused (unknown id or not the owner).
    pub bad_frees: u64,
    /// Free runs merged with a neighbour.
    pub merges: u64,
}

/// The allocator. See the module documentation.
#[derive(Debug, Clone)]
pub struct SramAllocator {
    base: u32,
    pages: u32,
    used: Slab<UsedNode>,
    root: Option<usize>,
    free: Slab<FreeSeg>,
    heads: Vec<Option<usize>>,
    nonempty: [u64; SIZE_CLASSES.div_ceil(64)],
    /// The free run at the very start, before any used segment.
    head_free: Option<usize>,
    next_generation: u32,
    counters: AllocCounters,
}

fn class_of(pages: u32) -> usize {
    (pages.min(SIZE_CLASSES as u32) - 1) as usize
}

impl SramAllocator {
    /// An allocator over `[base, base + len)` of SRAM; `base` is rounded up and the end
    /// down to whole pages. `None` if not one page fits.
    pub fn new(base: u32, len: u32) -> Option<SramAllocator> {
        let first = base.checked_add(PAGE - 1)? / PAGE * PAGE;
        let end = base.checked_add(len)? / PAGE * PAGE;
        let pages = end.checked_sub(first)? / PAGE;
        if pages == 0 {
            return None;
        }
        let mut a = SramAllocator {
            base: first,
            pages,
            used: Slab::new(),
            root: None,
            free: Slab::new(),
            heads: vec![None; SIZE_CLASSES],
            nonempty: [0; SIZE_CLASSES.div_ceil(64)],
            head_free: None,
            next_generation: 1,
            counters: AllocCounters::default(),
        };
        a.head_free = Some(a.push_free(0, pages));
        Some(a)
    }

    /// SRAM address of the first managed page.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// Pages managed.
    pub fn total_pages(&self) -> u32 {
        self.pages
    }

    /// Counters.
    pub fn counters(&self) -> AllocCounters {
        self.counters
    }

    /// Live segments.
    pub fn live_segments(&self) -> usize {
        self.used.len()
    }

    /// Free pages in all.
    pub fn free_pages(&self) -> u32 {
        self.free.iter().map(|(_, f)| f.pages).sum()
    }

    /// Free runs (merged neighbours count once).
    pub fn free_runs(&self) -> usize {
        self.free.len()
    }

    /// The longest free run, in pages.
    pub fn largest_free_run(&self) -> u32 {
        self.free.iter().map(|(_, f)| f.pages).max().unwrap_or(0)
    }

    /// External fragmentation: the share of free pages outside the longest free run (0
    /// when all free space is one run).
    pub fn fragmentation(&self) -> f64 {
        let free = self.free_pages();
        if free == 0 {
            return 0.0;
        }
        1.0 - f64::from(self.largest_free_run()) / f64::from(free)
    }

    /// Allocates at least `bytes` (whole pages) for `owner` (seed 001, the GM library's
    /// LANai malloc).
    pub fn alloc(&mut self, bytes: u32, owner: UserId) -> Result<SegmentId, AllocError> {
        if bytes == 0 {
            return Err(AllocError::ZeroSize);
        }
        let want = bytes.div_ceil(PAGE);
        let Some(f) = self.best_fit(want) else {
            self.counters.exhausted += 1;
            return Err(AllocError::Exhausted {
                want,
                largest: self.largest_free_run(),
            });
        };
        let FreeSeg { start, pages, .. } = self.unlink_free(f);
        self.free.remove(f);
        let next_free = (pages > want).then(|| self.push_free(start + want, pages - want));
        // The used segment before this run pointed at it; the run is used now.
        match self.pred(start) {
            Some(p) => self.used[p].next_free = None,
            None => self.head_free = None,
        }
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let node = self.used.insert(UsedNode {
            start,
            pages: want,
            owner,
            generation,
            next_free,
            left: None,
            right: None,
            height: 1,
        });
        self.root = Some(self.insert(self.root, node));
        self.counters.allocs += 1;
        Ok(SegmentId {
            page: start,
            generation,
        })
    }

    /// Where a live segment is, if `id` names one.
    pub fn info(&self, id: SegmentId) -> Option<SegmentInfo> {
        let n = self.find(id.page)?;
        let u = &self.used[n];
        (u.generation == id.generation).then_some(SegmentInfo {
            addr: self.base + u.start * PAGE,
            len: u.pages * PAGE,
            owner: u.owner,
        })
    }

    /// Frees a segment of `caller`'s, merging it with free neighbours (seed 001, §3.1.3).
    pub fn free(&mut self, id: SegmentId, caller: UserId) -> Result<(), AllocError> {
        let n = match self.find(id.page) {
            Some(n) if self.used[n].generation == id.generation => n,
            _ => {
                self.counters.bad_frees += 1;
                return Err(AllocError::UnknownSegment { page: id.page });
            }
        };
        let owner = self.used[n].owner;
        if owner != caller {
            self.counters.bad_frees += 1;
            return Err(AllocError::NotOwner {
                page: id.page,
                owner,
                caller,
            });
        }
        self.free_node(n);
        Ok(())
    }

    /// Frees every segment `user` holds (the user went away); returns how many.
    pub fn release_user(&mut self, user: UserId) -> usize {
        let mine: Vec<usize> = self
            .used
            .iter()
            .filter(|(_, u)| u.owner == user)
            .map(|(i, _)| i)
            .collect();
        for &n in &mine {
            self.free_node(n);
        }
        mine.len()
    }

    fn free_node(&mut self, n: usize) {
        let (start, pages, after) = {
            let u = &self.used[n];
            (u.start, u.pages, u.next_free)
        };
        self.root = self.remove(self.root, start);
        self.used.remove(n);
        let pred = self.pred(start);
        // Free runs are always merged, so the gap between the previous used segment (or
        // the start) and this one is empty or exactly one free run.
        let before = match pred {
            Some(p) => self.used[p].next_free,
            None => self.head_free,
        };
        let (mut lo, mut hi) = (start, start + pages);
        for f in [before, after].into_iter().flatten() {
            let seg = self.unlink_free(f);
            self.free.remove(f);
            lo = lo.min(seg.start);
            hi = hi.max(seg.start + seg.pages);
            self.counters.merges += 1;
        }
        let merged = self.push_free(lo, hi - lo);
        match pred {
            Some(p) => self.used[p].next_free = Some(merged),
            None => self.head_free = Some(merged),
        }
        self.counters.frees += 1;
    }

    // ---- size-class lists ----

    fn push_free(&mut self, start: u32, pages: u32) -> usize {
        let c = class_of(pages);
        let head = self.heads[c];
        let i = self.free.insert(FreeSeg {
            start,
            pages,
            prev: None,
            next: head,
        });
        if let Some(h) = head {
            self.free[h].prev = Some(i);
        }
        self.heads[c] = Some(i);
        self.nonempty[c / 64] |= 1 << (c % 64);
        i
    }

    fn unlink_free(&mut self, i: usize) -> FreeSeg {
        let seg = self.free[i].clone();
        let c = class_of(seg.pages);
        match seg.prev {
            Some(p) => self.free[p].next = seg.next,
            None => self.heads[c] = seg.next,
        }
        if let Some(nx) = seg.next {
            self.free[nx].prev = seg.prev;
        }
        if self.heads[c].is_none() {
            self.nonempty[c / 64] &= !(1 << (c % 64));
        }
        seg
    }

    /// The smallest non-empty class at or above `c`.
    fn next_nonempty(&self, c: usize) -> Option<usize> {
        let mut word = c / 64;
        let mut bits = self.nonempty[word] & (!0u64 << (c % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.nonempty.get(word)?;
        }
    }

    fn best_fit(&self, want: u32) -> Option<usize> {
        let c = self.next_nonempty(class_of(want))?;
        if c < SIZE_CLASSES - 1 {
            // An exact class: every run in it has c + 1 >= want pages.
            return self.heads[c];
        }
        // The last list: the smallest run that fits (the seed counts fewer than 16 there).
        let mut best: Option<(u32, usize)> = None;
        let mut at = self.heads[c];
        while let Some(i) = at {
            let f = &self.free[i];
            if f.pages >= want && best.is_none_or(|(p, _)| f.pages < p) {
                best = Some((f.pages, i));
            }
            at = f.next;
        }
        best.map(|(_, i)| i)
    }

    // ---- the AVL tree of used segments ----

    fn height(&self, n: Option<usize>) -> u8 {
        n.map_or(0, |n| self.used[n].height)
    }

    fn fix_height(&mut self, n: usize) {
        let h = self
            .height(self.used[n].left)
            .max(self.height(self.used[n].right))
            + 1;
        self.used[n].height = h;
    }

    fn balance_factor(&self, n: usize) -> i32 {
        i32::from(self.height(self.used[n].left)) - i32::from(self.height(self.used[n].right))
    }

    fn rotate_right(&mut self, n: usize) -> usize {
        let l = self.used[n]
            .left
            .expect("a right rotation has a left child");
        self.used[n].left = self.used[l].right;
        self.used[l].right = Some(n);
        self.fix_height(n);
        self.fix_height(l);
        l
    }

    fn rotate_left(&mut self, n: usize) -> usize {
        let r = self.used[n]
            .right
            .expect("a left rotation has a right child");
        self.used[n].right = self.used[r].left;
        self.used[r].left = Some(n);
        self.fix_height(n);
        self.fix_height(r);
        r
    }

    fn rebalance(&mut self, n: usize) -> usize {
        self.fix_height(n);
        let bf = self.balance_factor(n);
        if bf > 1 {
            let l = self.used[n].left.expect("left-heavy");
            if self.balance_factor(l) < 0 {
                self.used[n].left = Some(self.rotate_left(l));
            }
            return self.rotate_right(n);
        }
        if bf < -1 {
            let r = self.used[n].right.expect("right-heavy");
            if self.balance_factor(r) > 0 {
                self.used[n].right = Some(self.rotate_right(r));
            }
            return self.rotate_left(n);
        }
        n
    }

    fn insert(&mut self, at: Option<usize>, node: usize) -> usize {
        let Some(n) = at else { return node };
        let (child, before) = if self.used[node].start < self.used[n].start {
            let before = self.height(self.used[n].left);
            let l = self.insert(self.used[n].left, node);
            self.used[n].left = Some(l);
            (l, before)
        } else {
            let before = self.height(self.used[n].right);
            let r = self.insert(self.used[n].right, node);
            self.used[n].right = Some(r);
            (r, before)
        };
        if self.used[child].height == before {
            // The subtree kept its height: nothing above it changes.
            return n;
        }
        self.rebalance(n)
    }

    /// Removes the node starting at `start` from the subtree (the slab entry stays).
    fn remove(&mut self, at: Option<usize>, start: u32) -> Option<usize> {
        let n = at?;
        let s = self.used[n].start;
        if start < s {
            let before = self.height(self.used[n].left);
            let l = self.remove(self.used[n].left, start);
            self.used[n].left = l;
            if self.height(l) == before {
                // The subtree kept its height: nothing above it changes.
                return Some(n);
            }
        } else if start > s {
            let before = self.height(self.used[n].right);
            let r = self.remove(self.used[n].right, start);
            self.used[n].right = r;
            if self.height(r) == before {
                return Some(n);
            }
        } else {
            let (l, r) = (self.used[n].left, self.used[n].right);
            let (Some(_), Some(r)) = (l, r) else {
                return l.or(r);
            };
            // Replace with the smallest node of the right subtree.
            let mut m = r;
            while let Some(ml) = self.used[m].left {
                m = ml;
            }
            let new_right = self.remove(Some(r), self.used[m].start);
            self.used[m].right = new_right;
            self.used[m].left = l;
            return Some(self.rebalance(m));
        }
        Some(self.rebalance(n))
    }

    fn find(&self, start: u32) -> Option<usize> {
        let mut at = self.root;
        while let Some(n) = at {
            let s = self.used[n].start;
            at = match start.cmp(&s) {
                std::cmp::Ordering::Less => self.used[n].left,
                std::cmp::Ordering::Greater => self.used[n].right,
                std::cmp::Ordering::Equal => return Some(n),
            };
        }
        None
    }

    /// The used segment with the greatest start below `page`.
    fn pred(&self, page: u32) -> Option<usize> {
        let (mut at, mut best) = (self.root, None);
        while let Some(n) = at {
            if self.used[n].start < page {
                best = Some(n);
                at = self.used[n].right;
            } else {
                at = self.used[n].left;
            }
        }
        best
    }

    fn in_order(&self, at: Option<usize>, out: &mut Vec<usize>) {
        if let Some(n) = at {
            self.in_order(self.used[n].left, out);
            out.push(n);
            self.in_order(self.used[n].right, out);
        }
    }

    fn check_avl(&self, at: Option<usize>) -> Result<u8, InvariantBroken> {
        let Some(n) = at else { return Ok(0) };
        let l = self.check_avl(self.used[n].left)?;
        let r = self.check_avl(self.used[n].right)?;
        if l.abs_diff(r) > 1 || self.used[n].height != l.max(r) + 1 {
            return Err(InvariantBroken(format!(
                "node at page {} is unbalanced",
                self.used[n].start
            )));
        }
        Ok(l.max(r) + 1)
    }

    /// Checks every invariant: the tree is an ordered, balanced AVL tree; used segments do
    /// not overlap; every free run is in exactly one list, the one of its size; no two free
    /// runs touch; used and free runs tile the managed pages; each used segment's link
    /// names the free run right after it.
    pub fn check(&self) -> Result<(), InvariantBroken> {
        let bad = |s: String| Err(InvariantBroken(s));
        self.check_avl(self.root)?;
        let mut order = Vec::new();
        self.in_order(self.root, &mut order);
        if order.len() != self.used.len() {
            return bad(format!(
                "{} nodes in the tree, {} allocated",
                order.len(),
                self.used.len()
            ));
        }
        let mut seen = vec![0u32; self.free.capacity()];
        for c in 0..SIZE_CLASSES {
            let mut at = self.heads[c];
            let mut prev = None;
            let mut ttl = self.free.len() + 1;
            while let Some(i) = at {
                ttl -= 1;
                if ttl == 0 || !self.free.contains(i) {
                    return bad(format!("list {c} is cyclic or names a dead run"));
                }
                let f = &self.free[i];
                if class_of(f.pages) != c || f.prev != prev {
                    return bad(format!("run at page {} is in the wrong list", f.start));
                }
                seen[i] += 1;
                prev = Some(i);
                at = f.next;
            }
            let marked = self.nonempty[c / 64] & (1 << (c % 64)) != 0;
            if marked != self.heads[c].is_some() {
                return bad(format!("bitmap disagrees with list {c}"));
            }
        }
        for (i, f) in &self.free {
            if seen[i] != 1 {
                return bad(format!("run at page {} is in {} lists", f.start, seen[i]));
            }
        }
        // Walk the pages in address order: [head_free] used [free] used [free] ...
        let mut page = 0;
        let mut expect_free = self.head_free;
        if let Some(f) = expect_free {
            if self.free[f].start != 0 {
                return bad("the head run does not start at page 0".into());
            }
            page = self.free[f].pages;
        }
        for &n in &order {
            let u = &self.used[n];
            if u.start != page || u.pages == 0 {
                return bad(format!(
                    "used segment at page {} overlaps or leaves a gap (expected {page})",
                    u.start
                ));
            }
            page += u.pages;
            expect_free = u.next_free;
            if let Some(f) = expect_free {
                if self.free[f].start != page {
                    return bad(format!("next-free link of page {} is wrong", u.start));
                }
                page += self.free[f].pages;
            }
        }
        let _ = expect_free;
        if page != self.pages {
            return bad(format!("pages tile to {page}, not {}", self.pages));
        }
        let linked = self.head_free.iter().count()
            + order
                .iter()
                .filter(|&&n| self.used[n].next_free.is_some())
                .count();
        if linked != self.free.len() {
            return bad("a free run is not linked from its used neighbour: unmerged".into());
        }
        Ok(())
    }

    /// Live segments in address order, as (first byte, length, owner).
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let mut order = Vec::new();
        self.in_order(self.root, &mut order);
        order
            .into_iter()
            .map(|n| {
                let u = &self.used[n];
                SegmentInfo {
                    addr: self.base + u.start * PAGE,
                    len: u.pages * PAGE,
                    owner: u.owner,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
