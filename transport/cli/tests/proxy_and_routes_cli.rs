//! The `myri proxy` and `myri routes` commands as a user runs them: output, JSON lines and
//! exit codes (0 success, 2 bad arguments or set-up).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MYRI: &str = env!("CARGO_BIN_EXE_myri");
const DEADLINE: Duration = Duration::from_secs(20);

fn myri(args: &[&str]) -> Output {
    Command::new(MYRI).args(args).output().expect("myri runs")
}

#[track_caller]
fn exit_code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Waits for a child to exit, killing it after the deadline.
#[track_caller]
fn wait(mut child: Child) -> Output {
    let end = Instant::now() + DEADLINE;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("myri did not exit: {:?}", child.wait_with_output());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().expect("output")
}

/// Starts `myri proxy --json` and reads its first line, the address it listens on.
fn spawn_proxy(args: &[&str]) -> (Child, BufReader<std::process::ChildStdout>, String) {
    let mut child = Command::new(MYRI)
        .arg("proxy")
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("myri runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the listening line");
    let v: serde_json::Value = serde_json::from_str(&first).expect("json");
    assert_eq!(v["event"], "listening");
    let listen = v["listen"].as_str().expect("listen").to_string();
    (child, stdout, listen)
}

fn rest(stdout: BufReader<std::process::ChildStdout>, out: &Output) -> Vec<serde_json::Value> {
    let mut bytes = Vec::new();
    for line in stdout.lines() {
        bytes.extend_from_slice(line.expect("line").as_bytes());
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(&out.stdout);
    json_lines(&bytes)
}

#[test]
fn the_proxy_forwards_counts_and_stops_at_its_packet_limit() {
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    server.set_read_timeout(Some(DEADLINE)).unwrap();
    let to = format!("udp://{}", server.local_addr().unwrap());
    let (child, stdout, listen) = spawn_proxy(&[
        "--listen",
        "udp://127.0.0.1:0",
        "--to",
        &to,
        "--packets",
        "3",
        "--seed",
        "9",
    ]);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = listen.trim_start_matches("udp://");
    for i in 0..3u8 {
        client.send_to(&[i; 10], addr).unwrap();
        let mut buf = [0; 64];
        let (n, _) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 10]);
    }
    let out = wait(child);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let lines = rest(stdout, &out);
    assert_eq!(lines[0]["event"], "session_opened");
    let last = lines.last().expect("a final line");
    assert_eq!(last["event"], "final");
    assert_eq!(last["reason"], "packet limit reached");
    assert_eq!(last["seed"], 9);
    assert_eq!(last["to_server"]["received"], 3);
    assert_eq!(last["to_server"]["forwarded"], 3);
    assert_eq!(last["to_server"]["received_bytes"], 30);
    assert_eq!(last["sessions"]["opened"], 1);
    // Three datagrams fit any socket buffer: the kernel dropped none, and says so.
    assert_eq!(last["to_server"]["kernel_drops"], 0, "{last}");
    assert_eq!(last["to_client"]["kernel_drops"], 0, "{last}");
}

/// Two UDP sockets on consecutive loopback ports.
fn consecutive_pair() -> [UdpSocket; 2] {
    (20_000..30_000u16)
        .find_map(|p| {
            let a = UdpSocket::bind(("127.0.0.1", p)).ok()?;
            let b = UdpSocket::bind(("127.0.0.1", p + 1)).ok()?;
            Some([a, b])
        })
        .expect("two free consecutive ports")
}

#[test]
fn a_mesh_forwards_between_its_peers_and_counts_per_link() {
    let peers = consecutive_pair();
    for p in &peers {
        p.set_read_timeout(Some(DEADLINE)).unwrap();
    }
    let to = format!("udp://{}", peers[0].local_addr().unwrap());
    let mut child = Command::new(MYRI)
        .args([
            "proxy",
            "--mesh",
            "2",
            "--listen",
            "udp://127.0.0.1:0",
            "--to",
            &to,
        ])
        .args(["--packets", "4", "--seed", "5", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("myri runs");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the listening line");
    let v: serde_json::Value = serde_json::from_str(&first).expect("json");
    assert_eq!(v["event"], "listening");
    let shadow = |i: usize| -> String {
        let url = v["mesh"][i]["shadow"].as_str().expect("a shadow address");
        url.trim_start_matches("udp://").to_string()
    };
    for i in 0..2 {
        assert_eq!(
            v["mesh"][i]["real"],
            format!("udp://{}", peers[i].local_addr().unwrap())
        );
    }
    // Each peer sends first, twice, to the other's shadow; each datagram comes from the
    // sender's shadow.
    for k in 0..2u8 {
        peers[0].send_to(&[k; 7], shadow(1)).unwrap();
        peers[1].send_to(&[10 + k; 9], shadow(0)).unwrap();
    }
    let mut buf = [0; 64];
    for k in 0..2u8 {
        let (n, from) = peers[1].recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.to_string()), (&[k; 7][..], shadow(0)));
        let (n, from) = peers[0].recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.to_string()), (&[10 + k; 9][..], shadow(1)));
    }
    let out = wait(child);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let lines = rest(stdout, &out);
    let last = lines.last().expect("a final line");
    assert_eq!(last["event"], "final");
    assert_eq!(last["reason"], "packet limit reached");
    assert_eq!(last["seed"], 5);
    assert_eq!(last["total"]["received"], 4);
    assert_eq!(last["total"]["forwarded"], 4);
    assert_eq!(last["total"]["kernel_drops"], 0, "{last}");
    assert_eq!(last["refused_unknown"], 0);
    let links = last["links"].as_array().expect("links");
    assert_eq!(links.len(), 2, "{last}");
    assert_eq!((&links[0]["from"], &links[0]["to"]), (&0.into(), &1.into()));
    assert_eq!(links[0]["received_bytes"], 14);
    assert_eq!(links[1]["received_bytes"], 18);
}

#[test]
fn sigint_prints_the_counters_and_exits_cleanly() {
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = format!("udp://{}", server.local_addr().unwrap());
    let (child, stdout, _) = spawn_proxy(&[
        "--listen",
        "udp://127.0.0.1:0",
        "--to",
        &to,
        "--loss",
        "0.5",
    ]);
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let out = wait(child);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let lines = rest(stdout, &out);
    let last = lines.last().expect("a final line");
    assert_eq!(last["event"], "final");
    assert_eq!(last["reason"], "SIGINT");
}

#[test]
fn the_text_summary_names_every_counter() {
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = format!("udp://{}", server.local_addr().unwrap());
    let out = myri(&[
        "proxy",
        "--listen",
        "udp://127.0.0.1:0",
        "--to",
        &to,
        "--duration",
        "1ms",
    ]);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for row in [
        "received",
        "dropped (loss)",
        "corrupted",
        "duplicated",
        "delayed",
        "held for reordering",
        "forwarded",
        "send failed",
        "unsent at exit",
        "sessions:",
    ] {
        assert!(text.contains(row), "{row}: {text}");
    }
    assert!(text.contains("(duration reached)"), "{text}");
    assert!(
        stderr(&out).contains(&format!("-> {to}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_proxy_arguments_and_set_ups_exit_with_2() {
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let taken = format!("udp://{}", taken.local_addr().unwrap());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--listen", "127.0.0.1:1", "--to", "udp://127.0.0.1:2"],
            "is not a url: expected udp://host:port",
        ),
        (
            &["--listen", "udp://127.0.0.1:0", "--to", "tcp://127.0.0.1:2"],
            "scheme \"tcp\" is not udp://",
        ),
        (
            &["--listen", "udp://127.0.0.1:0", "--to", "udp://127.0.0.1"],
            "has no port",
        ),
        (
            &["--listen", &taken, "--to", "udp://127.0.0.1:2"],
            "address already in use",
        ),
        (
            &["--listen", "udp://127.0.0.1:0", "--to", "udp://127.0.0.1:0"],
            "has port 0",
        ),
        (
            &[
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:2",
                "--loss",
                "1.5",
            ],
            "1.5 is not a probability in [0, 1]",
        ),
        (
            &[
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:2",
                "--delay",
                "10",
            ],
            "has no unit",
        ),
        (
            &[
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:2",
                "--reorder-gap",
                "0",
            ],
            "--reorder-gap",
        ),
        (
            &[
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:2",
                "--upstream-bind",
                &taken,
            ],
            "cannot bind the upstream socket",
        ),
        (&["--listen", "udp://127.0.0.1:0"], "--to <URL>"),
        (
            &[
                "--mesh",
                "0",
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:2",
            ],
            "not in 1..=64",
        ),
        (
            &[
                "--mesh",
                "2",
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:2",
                "--client",
                "udp://127.0.0.1:3",
            ],
            "cannot be used with",
        ),
        (
            &[
                "--mesh",
                "3",
                "--listen",
                "udp://127.0.0.1:0",
                "--to",
                "udp://127.0.0.1:65534",
            ],
            "3 consecutive ports from udp://127.0.0.1:65534 run past port 65535",
        ),
        (
            &[
                "--mesh",
                "2",
                "--listen",
                "udp://127.0.0.1:3001",
                "--to",
                "udp://127.0.0.1:3000",
            ],
            "udp://127.0.0.1:3001 is given twice",
        ),
    ];
    for (args, want) in cases {
        let out = myri(&[&["proxy"], *args].concat());
        assert_eq!(exit_code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).to_lowercase().contains(&want.to_lowercase()),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn the_help_explains_every_option() {
    let out = myri(&["proxy", "--help"]);
    assert_eq!(exit_code(&out), 0);
    let help = String::from_utf8_lossy(&out.stdout);
    for option in [
        "--listen",
        "--to",
        "--loss",
        "--corrupt",
        "--dup",
        "--reorder",
        "--reorder-gap",
        "--reorder-hold",
        "--delay",
        "--jitter",
        "--direction",
        "--seed",
        "--json",
        "--interval",
        "--duration",
        "--packets",
        "--idle-timeout",
        "--max-clients",
        "--queue-limit-mib",
        "--upstream-bind",
        "--client",
        "--mesh",
        "FI_MYRI_RANK_PORTS",
        "Exit codes",
    ] {
        assert!(help.contains(option), "{option} missing from --help");
    }
    let out = myri(&["routes", "--help"]);
    assert_eq!(exit_code(&out), 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("FILE"));
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("myri-routes-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn routes_prints_a_good_file_as_text_and_json() {
    let path = temp_file("good", "# rack\n1: 3\n2: 15.7  # two hops\n3: direct\n");
    let p = path.to_str().unwrap();
    let out = myri(&["routes", p]);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("3 routes, 60 of ids 1..=63 free"), "{text}");
    assert!(
        text.lines().any(
            |l| l.split_whitespace().collect::<Vec<_>>() == ["2", "15.7", "2", "8f", "87", "3"]
        ),
        "{text}"
    );
    let out = myri(&["routes", p, "--json"]);
    assert_eq!(exit_code(&out), 0);
    let v = &json_lines(&out.stdout)[0];
    assert_eq!(v["ok"], true);
    assert_eq!(v["routes"][1]["ports"], serde_json::json!([15, 7]));
    assert_eq!(v["routes"][1]["wire"], "8f 87");
    assert_eq!(v["routes"][2]["route"], "direct");
    assert_eq!(v["free_ids"], 60);
}

#[test]
fn routes_names_every_bad_line_and_exits_with_2() {
    let path = temp_file("bad", "1: 3\n0: 4\n2: 3.a\n1: 5\n");
    let p = path.to_str().unwrap();
    let out = myri(&["routes", p]);
    assert_eq!(exit_code(&out), 2);
    let err = stderr(&out);
    for want in [
        "line 2: route id \"0\" is not 1..=63",
        "line 3: port \"a\" is not a number",
        "line 4: route id 1 was already defined on line 1",
        "3 errors; no route loaded",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert!(out.stdout.is_empty());
    let out = myri(&["routes", p, "--json"]);
    assert_eq!(exit_code(&out), 2);
    let v = &json_lines(&out.stdout)[0];
    assert_eq!(v["ok"], false);
    assert_eq!(v["error_count"], 3);
    assert_eq!(v["errors"][2]["line"], 4);
    let out = myri(&["routes", "/nonexistent/routes"]);
    assert_eq!(exit_code(&out), 2);
    assert!(stderr(&out).contains("cannot read route file /nonexistent/routes"));
}

#[test]
fn routes_reads_standard_input() {
    use std::io::Write;
    let mut child = Command::new(MYRI)
        .args(["routes", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"7: 1.2.3\n")
        .unwrap();
    let out = wait(child);
    assert_eq!(exit_code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("<stdin>: 1 route,"));
}
