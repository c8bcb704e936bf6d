//! `myri routes`: reads, checks and prints a route file (the format of
//! [`myri_mcp::RouteFile`]), naming every bad line, not only the first.

use crate::Failure;
use crate::opts::print_json;
use clap::Args;
use myri_mcp::routes::NUM_ROUTES;
use myri_mcp::{RouteFile, RouteFileError};
use serde_json::json;
use std::io::Read;
use std::path::PathBuf;

/// At most this many errors are listed; the count says how many there were.
const MAX_LISTED_ERRORS: usize = 50;

/// Arguments of `myri routes`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
A route file names source routes by id, one per line:

  # board 0 of the test rack
  1: 3          # one switch, out of port 3
  2: 15.7       # two switches: port 15, then port 7
  3: direct     # a cable straight to the other board

Ids are 1 to 63 (route 0 is always the direct cable), ports 0 to 63 joined by dots, at most \
32 hops; '#' starts a comment; blank lines are ignored; an id may appear once.

Exit codes: 0 the file is good; 2 it could not be read or has errors (each printed with its \
line number).")]
pub struct RoutesArgs {
    /// The route file to check; - reads standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print one JSON object: the routes, or the errors.
    #[arg(long)]
    pub json: bool,
}

/// The same error, said of line `line` (errors from parsing one line alone say line 1).
fn at_line(e: RouteFileError, at: usize) -> RouteFileError {
    use RouteFileError as E;
    match e {
        E::Syntax { text, .. } => E::Syntax { line: at, text },
        E::BadId { text, max, .. } => E::BadId {
            line: at,
            text,
            max,
        },
        E::BadPort { text, .. } => E::BadPort { line: at, text },
        E::BadRoute { source, .. } => E::BadRoute { line: at, source },
        E::Duplicate { id, first, .. } => E::Duplicate {
            line: at,
            id,
            first,
        },
        io @ E::Io { .. } => io,
    }
}

/// The line an error is about, if any.
fn line_of(e: &RouteFileError) -> Option<usize> {
    use RouteFileError as E;
    match e {
        E::Syntax { line, .. }
        | E::BadId { line, .. }
        | E::BadPort { line, .. }
        | E::BadRoute { line, .. }
        | E::Duplicate { line, .. } => Some(*line),
        E::Io { .. } => None,
    }
}

/// Checks route-file text line by line: the file, or every error in it, in line order.
pub fn check(text: &str) -> Result<RouteFile, Vec<RouteFileError>> {
    let mut errors = Vec::new();
    let mut first_seen: Vec<Option<usize>> = vec![None; NUM_ROUTES as usize];
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        match RouteFile::parse(raw) {
            Err(e) => errors.push(at_line(e, line)),
            Ok(one) => {
                for (id, _, _) in one.entries {
                    let slot = &mut first_seen[id.0 as usize];
                    match *slot {
                        Some(first) => errors.push(RouteFileError::Duplicate {
                            line,
                            id: id.0,
                            first,
                        }),
                        None => *slot = Some(line),
                    }
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // The whole-file parse is the reference; line by line must agree with it.
    RouteFile::parse(text).map_err(|e| vec![e])
}

fn read(path: &PathBuf) -> Result<String, RouteFileError> {
    let io = |source| RouteFileError::Io {
        path: path.display().to_string(),
        source,
    };
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(io)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(io)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `myri routes`.
pub fn run(args: &RoutesArgs) -> Result<(), Failure> {
    let name = if args.file.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        args.file.display().to_string()
    };
    let checked = read(&args.file)
        .map_err(|e| vec![e])
        .and_then(|text| check(&text));
    let file = match checked {
        Ok(file) => file,
        Err(errors) if matches!(errors.as_slice(), [RouteFileError::Io { .. }]) => {
            let e = &errors[0];
            if args.json {
                print_json(&json!({"file": name, "ok": false, "error_count": 1,
                                   "errors": [{"line": null, "message": e.to_string()}]}));
            }
            return Err(Failure::usage(e.to_string()));
        }
        Err(errors) => {
            let n = errors.len();
            if args.json {
                let listed: Vec<_> = errors
                    .iter()
                    .take(MAX_LISTED_ERRORS)
                    .map(|e| json!({"line": line_of(e), "message": e.to_string()}))
                    .collect();
                print_json(&json!({"file": name, "ok": false, "error_count": n, "errors": listed}));
            } else {
                for e in errors.iter().take(MAX_LISTED_ERRORS) {
                    eprintln!("{name}: {e}");
                }
                if n > MAX_LISTED_ERRORS {
                    eprintln!("{name}: ... and {} more", n - MAX_LISTED_ERRORS);
                }
            }
            let what = if n == 1 { "error" } else { "errors" };
            return Err(Failure::usage(format!(
                "{name}: {n} {what}; no route loaded"
            )));
        }
    };
    let max = NUM_ROUTES - 1;
    if args.json {
        let routes: Vec<_> = file
            .entries
            .iter()
            .map(|(id, route, line)| {
                json!({
                    "id": id.0,
                    "route": route.to_string(),
                    "ports": route.ports().collect::<Vec<u8>>(),
                    "hops": route.len(),
                    "wire": hex(route.as_bytes()),
                    "line": line,
                })
            })
            .collect();
        print_json(&json!({
            "file": name,
            "ok": true,
            "routes": routes,
            "free_ids": max as usize - file.entries.len(),
        }));
        return Ok(());
    }
    let n = file.entries.len();
    println!(
        "{name}: {n} route{}, {} of ids 1..={max} free (route 0 is always the direct cable)",
        if n == 1 { "" } else { "s" },
        max as usize - n
    );
    if n > 0 {
        println!(
            "  {:>3}  {:<24} {:>4}  {:<24} {:>5}",
            "id", "route", "hops", "wire bytes", "line"
        );
    }
    for (id, route, line) in &file.entries {
        let wire = if route.is_empty() {
            "-".to_string()
        } else {
            hex(route.as_bytes())
        };
        println!(
            "  {:>3}  {:<24} {:>4}  {:<24} {:>5}",
            id.0,
            route.to_string(),
            route.len(),
            wire,
            line
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_file_checks_and_matches_the_whole_file_parse() {
        let text = "# rack\n\n1: 3\r\n2: 15.7   # two hops\n 3 : direct\n63: 0.1.2.3\n";
        let file = check(text).unwrap();
        assert_eq!(file, RouteFile::parse(text).unwrap());
        let got: Vec<(u32, String, usize)> = file
            .entries
            .iter()
            .map(|(id, r, l)| (id.0, r.to_string(), *l))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "3".into(), 3),
                (2, "15.7".into(), 4),
                (3, "direct".into(), 5),
                (63, "0.1.2.3".into(), 6)
            ]
        );
        assert_eq!(hex(file.entries[1].1.as_bytes()), "8f 87");
        assert!(check("").unwrap().entries.is_empty());
        assert!(check("# only a comment\n\n").unwrap().entries.is_empty());
    }

    #[test]
    fn every_bad_line_is_named_not_only_the_first() {
        let text = "1: 3\n0: 4\n\n2: 3.a\n# fine\n1: 5\nnonsense\n3: 1.64\n2: 9\n";
        let errors: Vec<String> = check(text)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            vec![
                "line 2: route id \"0\" is not 1..=63",
                "line 4: port \"a\" is not a number",
                "line 6: route id 1 was already defined on line 1",
                "line 7: expected `id: ports` or `id: direct`, found \"nonsense\"",
                "line 8: port 64 is out of range (0..=63)",
            ]
        );
        // Line 9 defines id 2, whose line 4 was bad: not a duplicate of a bad line.
        let lines: Vec<Option<usize>> = check(text).unwrap_err().iter().map(line_of).collect();
        assert_eq!(lines, vec![Some(2), Some(4), Some(6), Some(7), Some(8)]);
    }

    #[test]
    fn the_first_error_is_the_one_the_whole_file_parse_reports() {
        for text in ["1: 3\n1: 4\n", "x\n1: 2", "1: 3\n2: 3 4\n", "5: 1.2\n64: 1"] {
            let ours = check(text).unwrap_err()[0].to_string();
            let reference = RouteFile::parse(text).unwrap_err().to_string();
            assert_eq!(ours, reference, "{text:?}");
        }
    }

    #[test]
    fn an_unreadable_file_is_an_io_error() {
        let e = read(&PathBuf::from("/nonexistent/routes")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read route file /nonexistent/routes:")
        );
        assert_eq!(line_of(&e), None);
    }
}
