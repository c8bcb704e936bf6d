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
fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    (acc as u16).swap_bytes()
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
    fn sums_combine() {
        let data: Vec<u8> = (0..100u8).collect();
        let (a, b) = data.split_at(40);
        assert_eq!(
            combine(ones_complement_sum(a), ones_complement_sum(b)),
            ones_complement_sum(&data)
        );
    }
}
