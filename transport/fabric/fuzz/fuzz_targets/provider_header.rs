//! Arbitrary bytes as the provider's message header (what arrives from a peer): it parses
//! or is refused with a typed error, never panics; what parses emits the header that
//! parses back to the same value, and the bytes it came from but for the unused data
//! word. A control message's or single-copy descriptor's body parses or is refused
//! alike, and what parses emits bytes that parse back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_fabric::wire::{CMA_DESC_LEN, CmaDescriptor, Control, HEADER_LEN, Header};

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
    if piece.control
        && let Ok(c) = Control::parse(data)
    {
        assert_eq!(Control::parse(&c.emit()), Ok(c));
    }
    if piece.cma
        && let Ok(d) = CmaDescriptor::parse(data)
    {
        let mut m = [0u8; CMA_DESC_LEN];
        d.emit(&header, &mut m);
        assert_eq!(CmaDescriptor::parse(&m), Ok(d));
        assert_eq!(m[..12], data[..12]);
        assert_eq!(m[HEADER_LEN..], data[HEADER_LEN..], "the descriptor's words");
    }
});
