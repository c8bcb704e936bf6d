//! Arbitrary bytes as what the GM and Trapeze paths of the MCP read from the wire and
//! from SRAM: a directed header, a window entry and the pieces it cuts a range into, and a
//! Trapeze packet header checked against its packet's length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_mcp::gm::wire::{DirectedPacket, DirectedRepr, WindowRepr};
use myri_mcp::trapeze::wire::{TpzHeaderRepr, CTRLMSG_WORDS, PAYLOAD_MAX, TPZ_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = DirectedPacket::new_checked(data) {
        let r = DirectedRepr::parse(&p);
        assert_eq!(&r.to_bytes()[..], &data[..8]);
        assert_eq!(p.data().len(), data.len() - 8);
    }
    if let Ok(w) = WindowRepr::parse(data) {
        let len = data.len() as u32;
        let offset = data.first().copied().unwrap_or(0) as u32 * 97;
        if let Some(pieces) = w.geometry.pieces(offset, len, 32) {
            let span = w.geometry.span().expect("pieces only for a sound window");
            assert!(pieces.len() <= 32);
            assert_eq!(pieces.iter().map(|p| u64::from(p.1)).sum::<u64>(), u64::from(len));
            for (at, n) in pieces {
                assert!(at + u64::from(n) <= span, "a piece outside the window");
            }
        }
    }
    if let Ok(h) = TpzHeaderRepr::parse(data) {
        assert!(usize::from(h.ctl_words) <= CTRLMSG_WORDS);
        assert!(h.payload_len as usize <= PAYLOAD_MAX);
        assert_eq!(TPZ_HEADER_LEN + h.ctl_len() + h.payload_len as usize, data.len());
        let b = h.to_bytes();
        assert_eq!(TpzHeaderRepr::parse(&[&b[..], &data[TPZ_HEADER_LEN..]].concat()), Ok(h));
    }
});
