//! Durations on the proxy's command line, like `10ms` or `1.5s` (not URLs: see
//! [`crate::url`] for those).

use std::time::Duration;
use thiserror::Error;

/// A duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Not a number followed by a unit.
    #[error(
        "{text:?} is not a duration: expected a number and a unit (ns, us, ms, s, m), like 10ms"
    )]
    Syntax {
        /// The text.
        text: String,
    },
    /// A number without a unit (other than 0).
    #[error("{text:?} has no unit: write {text}ms or {text}s (units: ns, us, ms, s, m)")]
    NoUnit {
        /// The text.
        text: String,
    },
    /// A unit that is not one of ns, us, ms, s, m.
    #[error("{text:?}: unknown unit {unit:?} (units: ns, us, ms, s, m)")]
    Unit {
        /// The text.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// Longer than the proxy can count.
    #[error("{text:?} is too long a duration")]
    TooLong {
        /// The text.
        text: String,
    },
}

/// Reads a duration: a non-negative decimal number and a unit (`ns`, `us`, `ms`, `s`, `m`),
/// like `250us`, `10ms` or `1.5s`; `0` alone is zero.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let syntax = || DurationError::Syntax {
        text: text.to_string(),
    };
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(syntax());
    }
    let value: f64 = number.parse().map_err(|_| syntax())?;
    let scale = match unit.trim() {
        "" => {
            return Err(DurationError::NoUnit {
                text: text.to_string(),
            });
        }
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        other => {
            return Err(DurationError::Unit {
                text: text.to_string(),
                unit: other.to_string(),
            });
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| DurationError::TooLong {
        text: text.to_string(),
    })
}

/// Shows a duration the way [`parse_duration`] reads it back, in the largest exact unit.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0".into();
    }
    for (unit, size) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns.is_multiple_of(size) {
            return format!("{}{unit}", ns / size);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("10ms"), Ok(ms(10)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 3 s"), Ok(Duration::from_secs(3)));
        for (text, want) in [
            ("10", "has no unit"),
            ("ms", "is not a duration"),
            ("-1ms", "is not a duration"),
            (".5s", "is not a duration"),
            ("1..5s", "is not a duration"),
            ("5h", "unknown unit \"h\""),
            ("1e999s", "unknown unit \"e999s\""),
            ("99999999999999999999999m", "too long"),
        ] {
            let err = parse_duration(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        for d in [
            ms(0),
            ms(10),
            Duration::from_micros(1500),
            Duration::from_nanos(3),
            ms(2000),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }

    proptest! {
        #[test]
        fn no_text_makes_the_parser_panic(text in "\\PC{0,40}") {
            let _ = parse_duration(&text);
        }
    }
}
