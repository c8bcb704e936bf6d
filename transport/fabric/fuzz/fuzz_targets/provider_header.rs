//! Arbitrary bytes as the provider's message header (what arrives from a peer): it parses
//! or is refused with a typed error, never panics; what parses emits the header that
//! parses back to the same value, and the bytes it came from but for the unused data
//! word.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_fabric::wire::{HEADER_LEN, Header};

fuzz_target!(|data: &[u8]| {
    let Ok((header, piece)) = Header::parse_piece(data) else {
        return;
    };
    assert_eq!(Header::parse(data), Ok(header));
    let mut out = [0u8; HEADER_LEN];
    header.emit_piece(&mut out, piece);
    assert_eq!(Header::parse_piece(&out), Ok((header, piece)));
    assert_eq!(out[..12], data[..12], "magic, version, flags and tag");
    if header.data.is_some() {
        assert_eq!(out[12..HEADER_LEN], data[12..HEADER_LEN], "the data word");
    }
});
