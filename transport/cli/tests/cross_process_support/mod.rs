//! Running the real `myri` binary in tests: JSON lines read as they come, waits on
//! conditions (a line, an exit) with generous deadlines, never on a timer that races.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The binary under test.
pub const MYRI: &str = env!("CARGO_BIN_EXE_myri");
/// Longest wait for anything (a bound for a broken build, never reached by a working one).
pub const DEADLINE: Duration = Duration::from_secs(45);

/// A running `myri`, its stdout read line by line on a thread.
pub struct Proc {
    name: String,
    child: Option<Child>,
    lines: Receiver<String>,
    /// Every stdout line read so far.
    pub seen: Vec<String>,
    stderr: Receiver<String>,
}

impl Proc {
    /// Starts `myri ARGS`.
    #[track_caller]
    pub fn spawn(args: &[&str]) -> Proc {
        let mut child = Command::new(MYRI)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("myri runs");
        let (tx, lines) = channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr) = channel();
        let mut err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        Proc {
            name: args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
            child: Some(child),
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Waits for a JSON line that `pred` accepts; returns it.
    #[track_caller]
    pub fn wait_json(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Ok(v) = serde_json::from_str::<Value>(&line)
                        && pred(&v)
                    {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{}: no {what} within {DEADLINE:?}; saw {:#?}",
                        self.name, self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: exited before {what}; saw {:#?}; stderr {}",
                    self.name,
                    self.seen,
                    self.stderr.recv_timeout(DEADLINE).unwrap_or_default()
                ),
            }
        }
    }

    /// Waits for the event `name` (a JSON line with `"event": name`).
    #[track_caller]
    pub fn wait_event(&mut self, name: &str) -> Value {
        self.wait_json(name, |v| v["event"] == name)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        let pid = libc::pid_t::try_from(self.pid()).expect("a pid");
        // The process is our child and has not been reaped, so the pid is still its.
        assert_eq!(unsafe_free_kill(pid, signal), 0, "kill({pid}, {signal})");
    }

    /// Waits for the exit; returns the status, every stdout line as JSON (non-JSON lines
    /// are kept as strings) and stderr.
    #[track_caller]
    pub fn wait_exit(mut self) -> (ExitStatus, Vec<Value>, String) {
        let mut child = self.child.take().expect("running");
        let end = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > end {
                let _ = child.kill();
                panic!(
                    "{}: did not exit within {DEADLINE:?}; saw {:#?}",
                    self.name, self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        while let Ok(line) = self.lines.recv_timeout(DEADLINE) {
            self.seen.push(line);
        }
        let stderr = self.stderr.recv_timeout(DEADLINE).unwrap_or_default();
        let json = self
            .seen
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::String(l.clone())))
            .collect();
        (status, json, stderr)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `kill(2)` through the `kill` command, so the tests need no unsafe code.
fn unsafe_free_kill(pid: libc::pid_t, signal: i32) -> i32 {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    if status.success() { 0 } else { -1 }
}

/// Runs `myri ARGS` to its end.
#[track_caller]
pub fn run(args: &[&str]) -> (ExitStatus, Vec<Value>, String) {
    Proc::spawn(args).wait_exit()
}

/// The last JSON line whose `key` is `value`.
#[track_caller]
pub fn last<'a>(lines: &'a [Value], key: &str, value: &str) -> &'a Value {
    lines
        .iter()
        .rev()
        .find(|v| v[key] == value)
        .unwrap_or_else(|| panic!("no line with {key} = {value} in {lines:#?}"))
}

/// A shared-memory region name no other test or run uses.
pub fn unique(name: &str) -> String {
    format!("x{}-{name}", std::process::id())
}

/// Starts `myri serve URL --json EXTRA...` and returns it with its listening line.
#[track_caller]
pub fn serve(url: &str, extra: &[&str]) -> (Proc, Value) {
    let mut args = vec!["serve", url, "--json"];
    args.extend_from_slice(extra);
    let mut p = Proc::spawn(&args);
    let listening = p.wait_event("listening");
    (p, listening)
}
