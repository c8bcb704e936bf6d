//! The 16-bit ones-complement sum the DMA controller computes over every block it moves
//! (seed 002, §3.2: "the IP checksum ... not complemented").
//!
//! Data is summed as big-endian 16-bit words (the LANai's byte order), an odd final byte
//! being the high half of a last word. The sum is computed 8 bytes at a time in native
//! order and byte-swapped at the end, which RFC 1071 §2(B) shows gives the same result.

/// Continues a ones-complement sum over `data`, which starts at an even byte offset of
/// the transfer. Returns the folded 16-bit sum.
pub fn ones_complement_sum(data: &[u8]) -> u16 {
    fold(sum_native(data))
}

/// The unfolded sum of `data` as little-endian-read 16-bit words, in a u64.
fn sum_native(data: &[u8]) -> u64 {
    // The 32-bit halves of 64-bit words added into two u64s: no carry chain, so the
    // compiler sums several words per instruction in vector registers (every DMA block,
    // up to 8 KiB, is summed). No sum can overflow for any buffer smaller than 2^32 * 4
    // bytes.
    let (words, rest) = data.as_chunks::<8>();
    let (mut low, mut high) = (0u64, 0u64);
    for w in words {
        let w = u64::from_le_bytes(*w);
        low += w & 0xFFFF_FFFF;
        high += w >> 32;
    }
    let mut acc = low + high;
    let (words, rest) = rest.as_chunks::<4>();
    for w in words {
        acc += u64::from(u32::from_le_bytes(*w));
    }
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_le_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        // The odd byte is the high half of a big-endian word, that is the low byte of a
        // little-endian one.
        acc += u64::from(*last);
    }
    acc
}

/// Folds a native-order sum to 16 bits and converts it to big-endian word order.
fn fold(acc: u64) -> u16 {
    fold_native(acc).swap_bytes()
}

/// Folds a native-order sum to 16 bits, still in native order.
fn fold_native(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc as u16
}

/// Copies `src` into `dst` (the shorter length) and returns the unfolded native sum of
/// the bytes copied, in one pass: the DMA controller sums what it moves as it moves it.
pub(crate) fn copy_summing(dst: &mut [u8], src: &[u8]) -> u64 {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let (dst_words, _) = dst.as_chunks_mut::<8>();
    let (src_words, _) = src.as_chunks::<8>();
    let (mut low, mut high) = (0u64, 0u64);
    for (d, s) in dst_words.iter_mut().zip(src_words) {
        *d = *s;
        let w = u64::from_le_bytes(*s);
        low += w & 0xFFFF_FFFF;
        high += w >> 32;
    }
    let whole = n - n % 8;
    dst[whole..].copy_from_slice(&src[whole..]);
    low + high + sum_native(&src[whole..])
}

/// A ones-complement sum built from pieces of one transfer, in order (a transfer split at
/// host page boundaries, say). A piece that starts at an odd offset of the transfer has
/// its bytes in the other halves of the big-endian words; RFC 1071 §2(B): its sum is
/// byte-swapped before it is added.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PieceSum {
    acc: u64,
}

impl PieceSum {
    /// Adds the native sum `native` of the piece at byte `offset` of the transfer.
    #[inline]
    pub(crate) fn add(&mut self, offset: usize, native: u64) {
        self.acc += if offset % 2 == 1 {
            u64::from(fold_native(native).swap_bytes())
        } else {
            native
        };
    }

    /// Adds the bytes of the piece at byte `offset` of the transfer.
    #[inline]
    pub(crate) fn add_bytes(&mut self, offset: usize, bytes: &[u8]) {
        self.add(offset, sum_native(bytes));
    }

    /// The folded 16-bit sum, as [`ones_complement_sum`] gives it.
    #[inline]
    pub(crate) fn value(self) -> u16 {
        fold(self.acc)
    }
}

/// The sum of two 16-bit ones-complement sums.
pub fn combine(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xFFFF) + (s >> 16)) as u16
}

/// RFC 1071 one big-endian word at a time: the reference the fast sum is tested against.
#[cfg(test)]
pub(crate) fn tests_reference(data: &[u8]) -> u16 {
    tests::reference(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071, one big-endian word at a time.
    pub(crate) fn reference(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_complement_sum(&data), 0xddf2);
        assert_eq!(reference(&data), 0xddf2);
    }

    #[test]
    fn matches_the_reference_for_every_length_and_content() {
        let data: Vec<u8> = (0..2048u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        for len in 0..300 {
            assert_eq!(
                ones_complement_sum(&data[..len]),
                reference(&data[..len]),
                "len {len}"
            );
        }
        assert_eq!(ones_complement_sum(&data), reference(&data));
        let ones = vec![0xFFu8; 8193];
        assert_eq!(ones_complement_sum(&ones), reference(&ones));
    }

    #[test]
    fn copying_sums_what_it_copies() {
        let data: Vec<u8> = (0..9000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in (0..300).chain([4095, 4096, 4097, 8192, 8193, 9000]) {
            let mut out = vec![0u8; len];
            let native = copy_summing(&mut out, &data[..len]);
            assert_eq!(out, data[..len], "len {len}");
            assert_eq!(fold(native), reference(&data[..len]), "len {len}");
        }
    }

    #[test]
    fn pieces_at_odd_offsets_sum_like_the_whole() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + (i >> 3)) as u8).collect();
        for cuts in [[1usize, 2], [3, 4097], [2, 4096], [999, 1000], [1, 4999]] {
            let mut sum = PieceSum::default();
            let mut from = 0;
            for to in cuts.into_iter().chain([data.len()]) {
                sum.add_bytes(from, &data[from..to]);
                from = to;
            }
            assert_eq!(sum.value(), reference(&data), "cuts {cuts:?}");
        }
    }

    #[test]
    fn sums_combine() {
        let data: Vec<u8> = (0..100u8).collect();
        let (a, b) = data.split_at(40);
        assert_eq!(
            combine(ones_complement_sum(a), ones_complement_sum(b)),
            ones_complement_sum(&data)
        );
    }
}
