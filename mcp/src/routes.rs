//! Route ids and route files (seed 000, Routes; MCP Features: "route file support").
//!
//! A route file names source routes by id, one per line:
//!
//! ```text
//! # board 0 of the test rack
//! 1: 3          # one switch, out of port 3
//! 2: 15.7       # two switches: port 15, then port 7
//! 3: direct     # a cable straight to the other board
//! ```
//!
//! An id is 1 to [`NUM_ROUTES`] - 1 (route 0 is always the direct
//! cable), ports are 0 to 63 separated by dots, `#` starts a comment, blank lines are
//! ignored. Every problem is reported with its line number.

pub use crate::hcb::NUM_ROUTES;
use myri_device::wire::{Route, RouteError};
use std::path::Path;
use thiserror::Error;

/// A route id: an index into the board's route table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteId(pub u32);

impl RouteId {
    /// Route 0: the direct cable.
    pub const DIRECT: RouteId = RouteId(0);
}

impl core::fmt::Display for RouteId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "route {}", self.0)
    }
}

/// A route file that could not be read.
#[derive(Debug, Error)]
pub enum RouteFileError {
    /// The file could not be opened or read.
    #[error("cannot read route file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line without `id: route`.
    #[error("line {line}: expected `id: ports` or `id: direct`, found {text:?}")]
    Syntax {
        /// Line number (1-based).
        line: usize,
        /// The line.
        text: String,
    },
    /// An id that is not a number in range.
    #[error("line {line}: route id {text:?} is not 1..={max}")]
    BadId {
        /// Line number.
        line: usize,
        /// The id as written.
        text: String,
        /// The largest id.
        max: u32,
    },
    /// A port that is not a number.
    #[error("line {line}: port {text:?} is not a number")]
    BadPort {
        /// Line number.
        line: usize,
        /// The port as written.
        text: String,
    },
    /// A route the wire format refuses.
    #[error("line {line}: {source}")]
    BadRoute {
        /// Line number.
        line: usize,
        /// Why.
        source: RouteError,
    },
    /// The same id twice.
    #[error("line {line}: route id {id} was already defined on line {first}")]
    Duplicate {
        /// Line number.
        line: usize,
        /// The id.
        id: u32,
        /// Where it was first defined.
        first: usize,
    },
}

/// A parsed route file: `(id, route, line)` in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteFile {
    /// The entries.
    pub entries: Vec<(RouteId, Route, usize)>,
}

impl RouteFile {
    /// Parses route-file text.
    pub fn parse(text: &str) -> Result<RouteFile, RouteFileError> {
        let mut entries: Vec<(RouteId, Route, usize)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let body = raw.split('#').next().unwrap_or("").trim();
            if body.is_empty() {
                continue;
            }
            let Some((id_text, route_text)) = body.split_once(':') else {
                return Err(RouteFileError::Syntax {
                    line,
                    text: raw.to_string(),
                });
            };
            let max = NUM_ROUTES - 1;
            let id = id_text
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|id| (1..=max).contains(id))
                .ok_or_else(|| RouteFileError::BadId {
                    line,
                    text: id_text.trim().to_string(),
                    max,
                })?;
            let route_text = route_text.trim();
            let route = if route_text == "direct" {
                Route::direct()
            } else {
                if route_text.is_empty() || route_text.split_whitespace().count() != 1 {
                    return Err(RouteFileError::Syntax {
                        line,
                        text: raw.to_string(),
                    });
                }
                let ports = route_text
                    .split('.')
                    .map(|p| {
                        p.parse::<u8>().map_err(|_| RouteFileError::BadPort {
                            line,
                            text: p.to_string(),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Route::from_ports(&ports)
                    .map_err(|source| RouteFileError::BadRoute { line, source })?
            };
            if let Some(&(_, _, first)) = entries.iter().find(|(other, _, _)| other.0 == id) {
                return Err(RouteFileError::Duplicate { line, id, first });
            }
            entries.push((RouteId(id), route, line));
        }
        Ok(RouteFile { entries })
    }

    /// Reads and parses a route file.
    pub fn load(path: &Path) -> Result<RouteFile, RouteFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| RouteFileError::Io {
            path: path.display().to_string(),
            source,
        })?;
        RouteFile::parse(&text)
    }

    /// The file's text form (what [`RouteFile::parse`] reads back).
    pub fn to_text(&self) -> String {
        self.entries
            .iter()
            .map(|(id, route, _)| format!("{}: {route}\n", id.0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comments_direct_and_multi_hop_routes() {
        let f = RouteFile::parse("# rack\n\n1: 3\n2: 15.7   # two hops\n 3 : direct\n").unwrap();
        let got: Vec<(u32, String, usize)> = f
            .entries
            .iter()
            .map(|(id, r, l)| (id.0, r.to_string(), *l))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "3".into(), 3),
                (2, "15.7".into(), 4),
                (3, "direct".into(), 5)
            ]
        );
        assert_eq!(RouteFile::parse(&f.to_text()).unwrap().entries.len(), 3);
    }

    #[test]
    fn every_problem_names_its_line() {
        let cases = [
            ("1 3", "line 1: expected"),
            ("0: 3", "route id \"0\" is not 1..=63"),
            ("64: 3", "is not 1..=63"),
            ("x: 3", "route id \"x\""),
            ("1: 3.a", "port \"a\" is not a number"),
            ("1: 3.300", "port \"300\""),
            ("1: 3.64", "port 64 is out of range"),
            ("1: 3 4", "expected"),
            ("1:", "expected"),
            (
                "1: 3\n1: 4",
                "line 2: route id 1 was already defined on line 1",
            ),
        ];
        for (text, want) in cases {
            let err = RouteFile::parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        let long = format!("1: {}", vec!["1"; 33].join("."));
        assert!(
            RouteFile::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("longer than the 32")
        );
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        let err = RouteFile::load(Path::new("/nonexistent/routes")).unwrap_err();
        assert!(matches!(err, RouteFileError::Io { .. }));
    }
}
