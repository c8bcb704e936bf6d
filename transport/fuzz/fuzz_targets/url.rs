//! Arbitrary text as a transport URL: it parses or is refused with a typed error, never
//! panics; what parses prints in a canonical form that parses back to the same value,
//! but for `key=`, a secret that is never printed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_transport::Url;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = text.parse::<Url>() else {
        return;
    };
    let canonical = url.to_string();
    let again: Url = canonical
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} printed as {canonical:?}, which does not parse: {e}"));
    let mut expected = url.clone();
    expected.params.key = None;
    assert_eq!(again, expected, "{text:?} -> {canonical:?}");
    assert_eq!(again.to_string(), canonical);
});
