//! A plain first-fit page allocator: the baseline the seed 001 allocator is measured
//! against (benches `gm`).
//!
//! Free runs sit in one address-ordered vector; an allocation takes the first run long
//! enough, a free puts the run back in place and merges it with touching neighbours. It
//! keeps no owners and no tree: it is only as much allocator as a comparison needs.

/// A first-fit allocator over `pages` pages.
#[derive(Debug, Clone)]
pub struct FirstFit {
    pages: u32,
    /// Free runs as (first page, pages), in address order, never touching.
    free: Vec<(u32, u32)>,
    /// Live allocations as (first page, pages), in address order.
    live: Vec<(u32, u32)>,
}

impl FirstFit {
    /// All `pages` pages free.
    pub fn new(pages: u32) -> FirstFit {
        FirstFit {
            pages,
            free: if pages > 0 { vec![(0, pages)] } else { vec![] },
            live: Vec::new(),
        }
    }

    /// Pages managed.
    pub fn total_pages(&self) -> u32 {
        self.pages
    }

    /// The first page of a new run of `pages` pages, if one fits.
    pub fn alloc(&mut self, pages: u32) -> Option<u32> {
        if pages == 0 {
            return None;
        }
        let i = self.free.iter().position(|&(_, n)| n >= pages)?;
        let (start, n) = self.free[i];
        if n == pages {
            self.free.remove(i);
        } else {
            self.free[i] = (start + pages, n - pages);
        }
        let at = self.live.partition_point(|&(s, _)| s < start);
        self.live.insert(at, (start, pages));
        Some(start)
    }

    /// Frees the run starting at `start`; false if no live run starts there.
    pub fn free(&mut self, start: u32) -> bool {
        let Ok(at) = self.live.binary_search_by_key(&start, |&(s, _)| s) else {
            return false;
        };
        let (_, pages) = self.live.remove(at);
        let i = self.free.partition_point(|&(s, _)| s < start);
        let (mut lo, mut hi) = (start, start + pages);
        let mut remove_from = i;
        let mut remove_to = i;
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == start {
            lo = self.free[i - 1].0;
            remove_from = i - 1;
        }
        if i < self.free.len() && self.free[i].0 == hi {
            hi = self.free[i].0 + self.free[i].1;
            remove_to = i + 1;
        }
        self.free.splice(remove_from..remove_to, [(lo, hi - lo)]);
        true
    }

    /// Free pages in all.
    pub fn free_pages(&self) -> u32 {
        self.free.iter().map(|&(_, n)| n).sum()
    }

    /// Free runs.
    pub fn free_runs(&self) -> usize {
        self.free.len()
    }

    /// The longest free run, in pages.
    pub fn largest_free_run(&self) -> u32 {
        self.free.iter().map(|&(_, n)| n).max().unwrap_or(0)
    }

    /// The share of free pages outside the longest free run.
    pub fn fragmentation(&self) -> f64 {
        let free = self.free_pages();
        if free == 0 {
            return 0.0;
        }
        1.0 - f64::from(self.largest_free_run()) / f64::from(free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_takes_the_first_run_and_merges_on_free() {
        let mut f = FirstFit::new(10);
        let a = f.alloc(3).unwrap();
        let b = f.alloc(3).unwrap();
        let c = f.alloc(3).unwrap();
        assert_eq!((a, b, c), (0, 3, 6));
        assert_eq!(f.alloc(2), None);
        assert!(f.free(a) && f.free(c));
        assert_eq!(f.free_runs(), 2);
        assert_eq!(f.alloc(1), Some(0), "the first run, not the best one");
        assert!(!f.free(5), "no run starts at page 5");
        assert!(f.free(0) && f.free(b));
        assert_eq!((f.free_runs(), f.free_pages()), (1, 10));
        assert_eq!(f.fragmentation(), 0.0);
    }
}
