//! The link-level CRC-8 of a Myrinet packet (seed 000, Protocol; seed 002, §4.1).
//!
//! Every packet on a link ends with one CRC-8 byte computed over all the bytes before it.
//! The polynomial is x^8 + x^2 + x + 1 (0x07), initial value 0, no reflection, no final
//! xor. A switch that consumes a route byte must recompute the CRC; because this CRC is
//! linear, [`strip_leading`] does it in constant time instead of rescanning the packet.

use crc::{CRC_8_SMBUS, Crc, Table};

/// The CRC-8 algorithm used on every link.
pub const CRC8: Crc<u8, Table<16>> = Crc::<u8, Table<16>>::new(&CRC_8_SMBUS);

const POLY: u16 = 0x107;

/// The CRC-8 of `bytes`.
#[inline]
pub fn checksum(bytes: &[u8]) -> u8 {
    CRC8.checksum(bytes)
}

/// Multiplication of two polynomials of degree < 8 modulo the CRC polynomial.
const fn mulmod(mut a: u8, mut b: u8) -> u8 {
    let mut acc: u8 = 0;
    while b != 0 {
        if b & 1 != 0 {
            acc ^= a;
        }
        b >>= 1;
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLY & 0xff) as u8;
        }
    }
    acc
}

/// The multiplicative order of x modulo the polynomial: x^127 = 1.
const ORDER: usize = 127;

/// `X_POW_8N[n % ORDER]` is x^(8n) mod G.
const X_POW_8N: [u8; ORDER] = {
    let mut table = [0u8; ORDER];
    // x^8 mod G is the polynomial's low byte.
    let x8 = (POLY & 0xff) as u8;
    let mut acc: u8 = 1;
    let mut n = 0;
    while n < ORDER {
        table[n] = acc;
        acc = mulmod(acc, x8);
        n += 1;
    }
    table
};

/// `CRC_OF_BYTE[b]` is the CRC-8 of the one-byte message `[b]`, that is b·x^8 mod G.
const CRC_OF_BYTE: [u8; 256] = {
    let mut table = [0u8; 256];
    let x8 = (POLY & 0xff) as u8;
    let mut b = 0;
    while b < 256 {
        table[b] = mulmod(b as u8, x8);
        b += 1;
    }
    table
};

/// The CRC-8 of a message after its first byte is removed.
///
/// `crc` is the CRC-8 of `first` followed by `rest_len` more bytes; the result is the
/// CRC-8 of those `rest_len` bytes alone. Runs in constant time.
#[inline]
pub fn strip_leading(crc: u8, first: u8, rest_len: usize) -> u8 {
    crc ^ term(first, rest_len)
}

/// What one byte contributes to a message's CRC-8: the CRC-8 of a message that is `value`
/// followed by `bytes_after` zero bytes. Because the CRC is linear, XOR-ing a byte of a
/// message with `value` changes its CRC-8 by exactly this. Runs in constant time.
#[inline]
pub fn term(value: u8, bytes_after: usize) -> u8 {
    mulmod(CRC_OF_BYTE[value as usize], X_POW_8N[bytes_after % ORDER])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time reference from the definition.
    fn reference(bytes: &[u8]) -> u8 {
        let mut crc = 0u8;
        for &b in bytes {
            crc ^= b;
            for _ in 0..8 {
                crc = if crc & 0x80 != 0 {
                    (crc << 1) ^ 0x07
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn matches_reference_and_check_value() {
        // The catalogue check value of CRC-8/SMBUS.
        assert_eq!(checksum(b"123456789"), 0xF4);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 2, 7, 64, 999, 1000] {
            assert_eq!(checksum(&data[..len]), reference(&data[..len]));
        }
    }

    #[test]
    fn x_has_order_127() {
        assert_eq!(X_POW_8N[0], 1);
        let mut acc = 1u8;
        for k in 1..=ORDER {
            acc = mulmod(acc, 2);
            assert_eq!(acc == 1, k == ORDER, "x^{k}");
        }
    }

    #[test]
    fn strip_leading_equals_recompute() {
        let data: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for len in 1..data.len() {
            let msg = &data[..len];
            let stripped = strip_leading(checksum(msg), msg[0], len - 1);
            assert_eq!(stripped, checksum(&msg[1..]), "len {len}");
        }
    }
}
