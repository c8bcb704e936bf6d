//! Arbitrary bytes as a frame the MCP receives, and as a route file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_mcp::RouteFile;
use myri_mcp::frame::{ApiFrame, FrameRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = ApiFrame::new_checked(data) {
        if let Ok(repr) = FrameRepr::parse(&frame) {
            assert_eq!(&repr.to_bytes()[..], &data[..4]);
        }
        let _ = frame.payload().len();
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(file) = RouteFile::parse(text) {
            assert_eq!(RouteFile::parse(&file.to_text()).unwrap().entries.len(), file.entries.len());
        }
    }
});
