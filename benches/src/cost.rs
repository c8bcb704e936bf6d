//! What the cost harnesses (`src/bin/*_cost.rs`) share: two inline boards to run on, and
//! running a harness under callgrind to count its instructions.
//!
//! A harness runs its workload at a small and a large count, each under callgrind; the
//! difference of the two totals over the difference of the counts is the cost of one
//! unit of work, with set-up and tear-down cancelled out.

use myri_device::board::{Board, BoardConfig};
use myri_device::fabric::topology::star;
use myri_device::fabric::{CableConfig, FabricBuilder, SwitchSize};
use myri_mcp::{Api, ChanRequest, Channel, InitOptions, Mode, RouteSlot, Unit};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use thiserror::Error;

/// Two simulated boards on one 8-port switch, each run inline by its host (stepped by
/// its progress calls), route 1 on each leading to the other and channel 1 open on both.
pub struct InlinePair {
    /// The first board's API.
    pub a: Api,
    /// The second board's API.
    pub b: Api,
    /// Channel 1 of the first board.
    pub chan_a: Channel,
    /// Channel 1 of the second board.
    pub chan_b: Channel,
}

impl InlinePair {
    /// Builds the fabric and brings both boards up.
    ///
    /// # Panics
    /// If the fixed topology cannot be built (a bug, not an input).
    pub fn new() -> InlinePair {
        let mut fb = FabricBuilder::new(1);
        let ports = star(&mut fb, 2, SwitchSize::Eight, CableConfig::default()).expect("topology");
        let fabric = Arc::new(fb.build());
        let up = |i: usize| {
            let mut board = Board::new(BoardConfig::pci64b(i as u32));
            board.attach_link(fabric.clone(), ports[i]);
            let unit = Unit::new(board, 0x1_0000_0000 * (i as u64 + 1), Mode::Inline);
            let mut api = Api::init(&unit, InitOptions::default()).expect("init");
            let route = fabric.route(ports[i], ports[1 - i]).expect("route");
            api.add_route(RouteSlot::Id(1), &route).expect("add route");
            let chan = api.get_chan(ChanRequest::Specific(1)).expect("chan");
            api.init_recv_chan(&chan).expect("init chan");
            (api, chan)
        };
        let (a, chan_a) = up(0);
        let (b, chan_b) = up(1);
        InlinePair {
            a,
            b,
            chan_a,
            chan_b,
        }
    }
}

impl Default for InlinePair {
    fn default() -> InlinePair {
        InlinePair::new()
    }
}

/// Callgrind counts every byte a `rep movsb` (or `rep stosb`) moves as one instruction,
/// and glibc switches its memcpy (memset) to those above a few KiB: an 8192-byte copy
/// would count some 30 times what an 8052-byte one does. These tunables (for
/// `GLIBC_TUNABLES`) keep glibc on its vector loops at every size, so counts stay
/// proportional to the work.
pub const FLAT_COPIES: &str =
    "glibc.cpu.x86_rep_movsb_threshold=4294967295:glibc.cpu.x86_rep_stosb_threshold=4294967295";

/// Why a callgrind run gave no count.
#[derive(Debug, Error)]
pub enum CallgrindError {
    /// Valgrind could not be started, or its output or directory not used.
    #[error("cannot run valgrind: {0} (is valgrind installed?)")]
    Io(#[from] io::Error),
    /// Valgrind ran, but the harness under it failed.
    #[error("valgrind failed on `{0}`")]
    Failed(String),
    /// The output file has no instruction total.
    #[error("no instruction total in {0}")]
    NoTotal(PathBuf),
    /// The output file has no per-instruction counts (callgrind ran without
    /// `--dump-instr=yes`, or the file is not a callgrind profile).
    #[error("no per-instruction counts in {0}")]
    NoInstructions(PathBuf),
    /// `objdump` (binutils) could not be run on the harness or printed no instructions.
    #[error("cannot read the instructions of {0} with objdump (is binutils installed?)")]
    Objdump(PathBuf),
}

/// Runs `exe args` under callgrind, writing the profile to `out` (with `env` set), and
/// returns the instructions it counted.
pub fn instructions(
    exe: &Path,
    out: &Path,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<u64, CallgrindError> {
    let events = callgrind(exe, out, args, env, &[])?;
    events
        .get("Ir")
        .ok_or_else(|| CallgrindError::NoTotal(out.to_path_buf()))
}

/// Callgrind's options for a model of the AMD EPYC hosts' caches: 32 KiB 8-way
/// instruction and data caches and a 512 KiB 8-way level 2, 64-byte lines. Adds the
/// events `I1mr` (instruction fetches that missed the instruction cache), `D1mr`,
/// `D1mw`, `ILmr`, `DLmr` and `DLmw`.
pub const EPYC_CACHES: [&str; 4] = [
    "--cache-sim=yes",
    "--I1=32768,8,64",
    "--D1=32768,8,64",
    "--LL=524288,8,64",
];

/// What one callgrind run counted: each event's total, by the name the profile gives it
/// (`Ir` for instructions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events(Vec<(String, u64)>);

impl Events {
    /// Reads the totals from a profile's text: its `events:` line names them, its
    /// `totals:` (or `summary:`) line counts them, and as in any callgrind cost line the
    /// events it leaves off at the end counted nothing.
    pub fn parse(profile: &str) -> Option<Events> {
        let names = profile.lines().find_map(|l| l.strip_prefix("events:"))?;
        let totals = profile.lines().find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })?;
        let values: Vec<u64> = totals
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let names: Vec<&str> = names.split_whitespace().collect();
        if values.is_empty() || values.len() > names.len() {
            return None;
        }
        let counts = values.into_iter().chain(std::iter::repeat(0));
        Some(Events(
            names.into_iter().map(str::to_string).zip(counts).collect(),
        ))
    }

    /// The total of event `name`, if the run counted it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }
}

/// How often each instruction ran, by address: read from a profile that callgrind wrote
/// with `--dump-instr=yes`. Counting the 64-byte lines of code whose instructions ran in
/// every unit of work measures the code one unit needs cached (its instruction working
/// set), which, unlike a cache model's miss count, does not move with the code's layout
/// in the cache's sets. Each address keeps the function it was counted in, so the lines
/// can be split by function too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstrCounts {
    /// Runs of each instruction, by address.
    counts: HashMap<u64, u64>,
    /// The function (an index into `functions`) each address was counted in.
    owners: HashMap<u64, usize>,
    functions: Vec<String>,
}

impl InstrCounts {
    /// Reads a profile's text: its `positions:` line must list `instr` first, and the
    /// instructions' own (exclusive) counts of the first event, `Ir`, are summed by
    /// address. Positions may be absolute (`0x401000`, `12`) or relative to the last
    /// (`+4`, `-2`, `*`), as callgrind compresses them; the cost line after a `calls=`
    /// line is the call's inclusive cost and is not an instruction's own.
    pub fn parse(profile: &str) -> Option<InstrCounts> {
        let positions = profile.lines().find_map(|l| l.strip_prefix("positions:"))?;
        let positions: Vec<&str> = positions.split_whitespace().collect();
        if positions.first() != Some(&"instr") {
            return None;
        }
        let mut last = vec![0u64; positions.len()];
        let mut c = InstrCounts::default();
        let mut index: HashMap<String, usize> = HashMap::new();
        costs(profile, |cost| {
            // A call's line moves the positions too: the next line is relative to it.
            let mut fields = cost.line.split_whitespace();
            for slot in last.iter_mut() {
                *slot = position(fields.next()?, *slot)?;
            }
            if !cost.inclusive {
                *c.counts.entry(last[0]).or_insert(0) += cost.ir;
                let f = match index.get(cost.function) {
                    Some(&f) => f,
                    None => {
                        let f = c.functions.len();
                        c.functions.push(cost.function.to_string());
                        index.insert(cost.function.to_string(), f);
                        f
                    }
                };
                c.owners.insert(last[0], f);
            }
            Some(())
        })?;
        Some(c)
    }

    /// The addresses of instructions that ran at least `times` more often here than in
    /// `base`.
    fn run_since<'a>(
        &'a self,
        base: &'a InstrCounts,
        times: u64,
    ) -> impl Iterator<Item = u64> + 'a {
        self.counts
            .iter()
            .filter(move |&(a, &n)| {
                n.saturating_sub(base.counts.get(a).copied().unwrap_or(0)) >= times
            })
            .map(|(&a, _)| a)
    }

    /// The bytes of code that ran at least `times` more often here than in `base`, by
    /// the function they were counted in (most first, then by name), and in all; an
    /// instruction's size is its distance to the next in `sizes` (see
    /// [`instruction_sizes`]). The bytes over 64 are the fewest lines that code could
    /// fill: set beside [`InstrCounts::lines_run_since`], what the layout wastes (the code
    /// that did not run, jumped over, in the lines that did).
    pub fn bytes_run_since(
        &self,
        base: &InstrCounts,
        times: u64,
        sizes: &HashMap<u64, u64>,
    ) -> (u64, Vec<(&str, u64)>) {
        let mut per = vec![0u64; self.functions.len()];
        let mut all = 0;
        for a in self.run_since(base, times) {
            let size = sizes.get(&a).copied().unwrap_or(0);
            all += size;
            if let Some(&f) = self.owners.get(&a) {
                per[f] += size;
            }
        }
        (all, self.by_function(per))
    }

    /// A tally by function index, named, without the functions at zero, most first
    /// (then by name).
    fn by_function<N: Ord + Copy + Default>(&self, per: Vec<N>) -> Vec<(&str, N)> {
        let mut out: Vec<(&str, N)> = per
            .into_iter()
            .enumerate()
            .filter(|&(_, n)| n > N::default())
            .map(|(f, n)| (self.functions[f].as_str(), n))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        out
    }

    /// The addresses of the instructions counted, lowest and highest (`None` for none).
    pub fn address_range(&self) -> Option<(u64, u64)> {
        let lo = self.counts.keys().min()?;
        let hi = self.counts.keys().max()?;
        Some((*lo, *hi))
    }

    /// The 64-byte lines of code holding an instruction that ran at least `times` more
    /// often here than in `base` (the same program run for fewer units of work, so that
    /// start-up code cancels out).
    pub fn lines_run_since(&self, base: &InstrCounts, times: u64) -> usize {
        let lines: HashSet<u64> = self.run_since(base, times).map(|a| a / 64).collect();
        lines.len()
    }

    /// [`InstrCounts::lines_run_since`] by the function the instructions were counted in,
    /// most lines first (then by name). A line that holds instructions of two functions
    /// counts for both, so the sum may exceed the total a little.
    pub fn lines_by_function_since(&self, base: &InstrCounts, times: u64) -> Vec<(&str, usize)> {
        let mut lines: HashSet<(usize, u64)> = HashSet::new();
        for a in self.run_since(base, times) {
            if let Some(&f) = self.owners.get(&a) {
                lines.insert((f, a / 64));
            }
        }
        let mut per = vec![0usize; self.functions.len()];
        for (f, _) in lines {
            per[f] += 1;
        }
        self.by_function(per)
    }
}

/// The size of each instruction of `exe` from address `lo` to `hi`, disassembled by
/// `objdump -d`: callgrind's profile has the addresses of the instructions that ran, not
/// their lengths.
pub fn instruction_sizes(
    exe: &Path,
    lo: u64,
    hi: u64,
) -> Result<HashMap<u64, u64>, CallgrindError> {
    let out = Command::new("objdump")
        .arg("-d")
        .arg("--no-show-raw-insn")
        .arg(format!("--start-address={lo:#x}"))
        .arg(format!("--stop-address={:#x}", hi.saturating_add(16)))
        .arg(exe)
        .stderr(Stdio::null())
        .output()
        .map_err(|_| CallgrindError::Objdump(exe.to_path_buf()))?;
    let sizes = sizes_from_disassembly(&String::from_utf8_lossy(&out.stdout));
    if !out.status.success() || sizes.is_empty() {
        return Err(CallgrindError::Objdump(exe.to_path_buf()));
    }
    Ok(sizes)
}

/// Reads `objdump -d`'s listing: each instruction line starts with its address in hex and
/// a colon, and an instruction's size is the distance to the next one's address (the last
/// of a run of instructions, before a gap or a new section, has none and is left out).
/// Lines of other kinds (function labels, file names, blank) are skipped.
pub fn sizes_from_disassembly(listing: &str) -> HashMap<u64, u64> {
    let addrs: Vec<u64> = listing
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.trim_start().split_once(':')?;
            if !rest.starts_with(char::is_whitespace) {
                return None;
            }
            u64::from_str_radix(addr, 16).ok()
        })
        .collect();
    addrs
        .windows(2)
        .filter(|w| w[1] > w[0] && w[1] - w[0] <= 15)
        .map(|w| (w[0], w[1] - w[0]))
        .collect()
}

/// The layers of the stack an instruction can belong to, in the order they are printed.
pub const LAYERS: [&str; 6] = ["device", "mcp", "rpp", "transport", "harness", "other"];

/// Instructions by the layer of the stack whose code ran them, read from a callgrind
/// profile. An instruction belongs to the crate of its source file (its innermost inlined
/// location: `rpp/src/...` is RPP's even where the endpoint inlined it); one from the
/// standard library or another crate belongs to the crate of the function it was built
/// into (a queue's `push_back` inside `myri_transport::endpoint::Endpoint::send` is the
/// transport's). What is left (libc, other crates' own functions) is "other". That splits
/// what an exchange costs into the protocol, the endpoint around it and the board below.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layers(HashMap<&'static str, u64>);

impl Layers {
    /// Reads a profile's text, compressed names or not: the instructions' own counts of
    /// the first event, which must be `Ir`, summed by layer (the cost line after a
    /// `calls=` line is the call's inclusive cost and is left out).
    pub fn parse(profile: &str) -> Option<Layers> {
        let mut sums = HashMap::new();
        costs(profile, |cost| {
            if !cost.inclusive {
                *sums.entry(layer_of(cost.file, cost.function)).or_insert(0) += cost.ir;
            }
            Some(())
        })?;
        Some(Layers(sums))
    }

    /// Instructions per unit of work, by layer in [`LAYERS`]' order, of this run against
    /// `base` (the same program run for `units` fewer units of work).
    pub fn per_unit_since(&self, base: &Layers, units: u64) -> Vec<(&'static str, f64)> {
        let get = |l: &Layers, k: &str| l.0.get(k).copied().unwrap_or(0);
        LAYERS
            .iter()
            .map(|&k| {
                let n = get(self, k).saturating_sub(get(base, k));
                (k, n as f64 / units.max(1) as f64)
            })
            .collect()
    }
}

/// One cost line of a callgrind profile, with where it stands.
struct Cost<'a> {
    /// The line: its positions, then its counts.
    line: &'a str,
    /// Its count of the first event, `Ir`.
    ir: u64,
    /// Whether it is a call's inclusive cost (the line after `calls=`), not the
    /// instruction's own.
    inclusive: bool,
    /// The source file of the code it counts (an inlined one's own file).
    file: &'a str,
    /// The function the code was built into.
    function: &'a str,
}

/// Calls `each` with every cost line of `profile`, in order, names compressed or not;
/// `None` if the first event is not `Ir`, a name or count is malformed, or `each` says so.
fn costs(profile: &str, mut each: impl FnMut(Cost<'_>) -> Option<()>) -> Option<()> {
    let positions = profile
        .lines()
        .find_map(|l| l.strip_prefix("positions:"))
        .map_or(1, |p| p.split_whitespace().count());
    let events = profile.lines().find_map(|l| l.strip_prefix("events:"))?;
    if events.split_whitespace().next() != Some("Ir") {
        return None;
    }
    let mut files = HashMap::new();
    let mut functions = HashMap::new();
    let (mut object_file, mut file, mut function) = (String::new(), String::new(), String::new());
    let mut inclusive = false;
    for line in profile.lines() {
        let Some(first) = line.bytes().next() else {
            continue;
        };
        if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'*') {
            let ir = match line.split_whitespace().nth(positions) {
                Some(v) => v.parse::<u64>().ok()?,
                None => 0,
            };
            each(Cost {
                line,
                ir,
                inclusive: std::mem::take(&mut inclusive),
                file: &file,
                function: &function,
            })?;
            continue;
        }
        let Some((key, rest)) = line.split_once('=') else {
            continue;
        };
        match key {
            "fl" => {
                object_file = name(&mut files, rest)?;
                file.clone_from(&object_file);
            }
            "fi" | "fe" => file = name(&mut files, rest)?,
            "fn" => {
                function = name(&mut functions, rest)?;
                file.clone_from(&object_file);
            }
            // Callees' names: read only to learn the ids they define.
            "cfi" | "cfl" => drop(name(&mut files, rest)?),
            "cfn" => drop(name(&mut functions, rest)?),
            "calls" => inclusive = true,
            _ => {}
        }
    }
    Some(())
}

/// A name in a profile, `(id) name` defining an id, `(id)` naming it again, or the
/// name itself where names are not compressed (which may start with a bracket too, as
/// callgrind's `(below main)` does).
fn name(table: &mut HashMap<u64, String>, field: &str) -> Option<String> {
    let compressed = field
        .strip_prefix('(')
        .and_then(|rest| rest.split_once(')'))
        .and_then(|(id, name)| Some((id.parse::<u64>().ok()?, name)));
    let Some((id, name)) = compressed else {
        return Some(field.to_string());
    };
    let name = name.trim();
    if name.is_empty() {
        table.get(&id).cloned()
    } else {
        table.insert(id, name.to_string());
        Some(name.to_string())
    }
}

/// The layer an instruction belongs to: its source file's crate in the workspace, else
/// the crate of the function it was built into (see [`Layers`]).
fn layer_of(file: &str, function: &str) -> &'static str {
    // Each layer with its source directory and the crates whose functions are its own.
    const LAYER_SOURCES: [(&str, &str, &[&str]); 5] = [
        ("device", "/device/src/", &["myri_device"]),
        ("mcp", "/mcp/src/", &["myri_mcp"]),
        ("rpp", "/rpp/src/", &["myri_rpp"]),
        ("transport", "/transport/src/", &["myri_transport"]),
        ("harness", "/benches/", &["rpp_board_cost", "myri_benches"]),
    ];
    if let Some(&(layer, ..)) = LAYER_SOURCES.iter().find(|(_, dir, _)| file.contains(dir)) {
        return layer;
    }
    let krate = function
        .trim_start_matches('<')
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("");
    LAYER_SOURCES
        .iter()
        .find(|(_, _, crates)| crates.contains(&krate))
        .map_or("other", |&(layer, ..)| layer)
}

/// One field of a callgrind position: absolute (decimal or `0x` hex), relative to the
/// last (`+n`, `-n`) or the same (`*`).
fn position(field: &str, last: u64) -> Option<u64> {
    let number = |s: &str| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    };
    match field.as_bytes().first()? {
        b'*' => Some(last),
        b'+' => last.checked_add(number(&field[1..])?),
        b'-' => last.checked_sub(number(&field[1..])?),
        _ => number(field),
    }
}

/// Runs `exe args` under callgrind with `options` (say [`EPYC_CACHES`], or
/// `--toggle-collect=FUNCTION` to count only what runs inside a function), writing the
/// profile to `out` (with `env` set), and returns what it counted.
pub fn callgrind(
    exe: &Path,
    out: &Path,
    args: &[String],
    env: &[(&str, &str)],
    options: &[&str],
) -> Result<Events, CallgrindError> {
    let status = Command::new("valgrind")
        .envs(env.iter().copied())
        .arg("--tool=callgrind")
        .args(options)
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(CallgrindError::Failed(args.join(" ")));
    }
    let text = std::fs::read_to_string(out)?;
    Events::parse(&text).ok_or_else(|| CallgrindError::NoTotal(out.to_path_buf()))
}

/// A directory for profiles under the system's temporary directory.
pub fn profile_dir(name: &str) -> Result<PathBuf, CallgrindError> {
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A whole-number argument, `default` when absent; the error names `what`.
pub fn number(arg: Option<&String>, default: u64, what: &str) -> Result<u64, String> {
    match arg {
        None => Ok(default),
        Some(a) => a
            .parse()
            .map_err(|_| format!("{what} must be a whole number, not {a:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_by_name_from_a_profile() {
        let profile =
            "version: 1\ncmd: x\nevents: Ir I1mr D1mr\nfn=(1) main\n3 10 1 0\ntotals: 1200 34 5\n";
        let e = Events::parse(profile).expect("parsed");
        assert_eq!(e.get("Ir"), Some(1200));
        assert_eq!(e.get("I1mr"), Some(34));
        assert_eq!(e.get("D1mr"), Some(5));
        assert_eq!(e.get("Bcm"), None);
        // No totals, a count that is not a number, more counts than names: no events.
        assert_eq!(Events::parse("events: Ir\n"), None);
        assert_eq!(Events::parse("events: Ir\ntotals: 1x\n"), None);
        assert_eq!(Events::parse("events: Ir\nsummary: 1 2\n"), None);
        assert_eq!(
            Events::parse("events: Ir\nsummary: 77\n").and_then(|e| e.get("Ir")),
            Some(77)
        );
        // Events left off the end of the totals counted nothing.
        let e = Events::parse("events: Ir I1mr\ntotals: 0\n").expect("parsed");
        assert_eq!((e.get("Ir"), e.get("I1mr")), (Some(0), Some(0)));
    }

    #[test]
    fn instruction_counts_follow_compressed_positions_and_skip_inclusive_costs() {
        let profile = "positions: instr line\nevents: Ir I1mr\nfn=(1) main\n\
            0x1000 10 5\n+4 * 5 1\n+60 +1 5\ncfn=(2) f\ncalls=5 0x2000 3\n* * 900\n\
            +2 -1 5\nfn=(2) f\n0x2000 3 5\n-0x10 * 7\n";
        let c = InstrCounts::parse(profile).expect("parsed");
        let get = |a: u64| c.counts.get(&a).copied();
        assert_eq!(get(0x1000), Some(5));
        assert_eq!(get(0x1004), Some(5));
        // The call site's own cost only: 5, not the 900 the call included.
        assert_eq!(get(0x1040), Some(5));
        assert_eq!(get(0x1042), Some(5));
        assert_eq!(get(0x2000), Some(5));
        assert_eq!(get(0x1ff0), Some(7));
        // Against a run with none of it: lines 0x1000/64, 0x1040/64, 0x2000/64 and
        // 0x1ff0/64 ran at least 5 times; only the last at least 6.
        let none = InstrCounts::default();
        assert_eq!(c.lines_run_since(&none, 5), 4);
        assert_eq!(c.lines_run_since(&none, 6), 1);
        assert_eq!(c.lines_run_since(&c, 1), 0);
        // By function: main's two lines, f's two (0x2000 and 0x1ff0, in two lines).
        assert_eq!(c.lines_by_function_since(&none, 5), [("f", 2), ("main", 2)]);
        assert_eq!(c.lines_by_function_since(&none, 6), [("f", 1)]);
        assert!(c.lines_by_function_since(&c, 1).is_empty());
        // Without instruction positions, or with another first event: nothing to read.
        assert_eq!(
            InstrCounts::parse("positions: line\nevents: Ir\n1 2\n"),
            None
        );
        assert_eq!(InstrCounts::parse("positions: instr\nevents: I1mr\n"), None);
        assert_eq!(
            InstrCounts::parse("positions: instr\nevents: Ir\n+x 3\n"),
            None
        );
    }

    #[test]
    fn executed_bytes_come_from_the_disassembly_by_function() {
        let listing = "\n/x/h:     file format elf64-x86-64\n\nDisassembly of section .text:\n\n\
            0000000000001000 <main>:\n    1000:\tpush   %rbp\n    1001:\tmov    %rsp,%rbp\n\
            /w/src/main.rs:3\n    1004:\tcall   2000 <f>\n    1009:\tret\n\n\
            0000000000002000 <f>:\n    2000:\tnop\n    2003:\tret\n";
        let sizes = sizes_from_disassembly(listing);
        assert_eq!(sizes.get(&0x1000), Some(&1));
        assert_eq!(sizes.get(&0x1001), Some(&3));
        assert_eq!(sizes.get(&0x1004), Some(&5));
        // The last before a gap of more than an instruction's 15 bytes, and the very
        // last, have no size; the function label and file name lines are no instructions.
        assert_eq!(sizes.get(&0x1009), None);
        assert_eq!(sizes.get(&0x2000), Some(&3));
        assert_eq!(sizes.len(), 4);
        let profile = "positions: instr line\nevents: Ir\nfn=(1) main\n\
            0x1000 1 5\n+1 * 5\n+3 * 5\nfn=(2) f\n0x2000 1 4\n";
        let c = InstrCounts::parse(profile).expect("parsed");
        let none = InstrCounts::default();
        assert_eq!(c.address_range(), Some((0x1000, 0x2000)));
        assert_eq!(c.bytes_run_since(&none, 5, &sizes), (9, vec![("main", 9)]));
        assert_eq!(
            c.bytes_run_since(&none, 4, &sizes),
            (12, vec![("main", 9), ("f", 3)])
        );
        assert_eq!(c.bytes_run_since(&c, 1, &sizes), (0, vec![]));
        assert_eq!(none.address_range(), None);
    }

    #[test]
    fn layers_go_by_source_file_then_by_the_function_built_into() {
        let profile = "positions: instr line\nevents: Ir\n\
            fl=(1) /w/rpp/src/connection/send.rs\nfn=(1) myri_rpp::connection::x\n0x10 1 7\n\
            fi=(2) /rustc/abc/library/alloc/src/vec/mod.rs\n+4 * 3\n\
            fl=(3) /w/transport/src/endpoint/mod.rs\nfn=(2) myri_transport::endpoint::Endpoint::send\n\
            0x20 5 11\nfi=(1)\n+1 * 13\nfe=(2)\n+1 * 17\n\
            cfi=(4) /w/device/src/board/mod.rs\ncfn=(3) myri_device::board::Board::advance\n\
            calls=1 0x90 4\n+1 * 1000\n\
            fl=(4)\nfn=(3)\n0x90 4 19\nfl=(5) /lib/libc.so\nfn=(4) memcpy\n0x99 0 23\n\
            fn=(5) <myri_mcp::Api as core::ops::Drop>::drop\n0x9a 0 29\n";
        let l = Layers::parse(profile).expect("parsed");
        let get = |k: &str| l.0.get(k).copied().unwrap_or(0);
        // RPP's own line and the vector code built into its function.
        assert_eq!(get("rpp"), 7 + 3 + 13);
        // The endpoint's line and the vector code inlined into it, by id; not the call's
        // inclusive 1000.
        assert_eq!(get("transport"), 11 + 17);
        assert_eq!(get("device"), 19);
        assert_eq!(get("mcp"), 29);
        assert_eq!(get("other"), 23);
        let base = Layers::default();
        let per = l.per_unit_since(&base, 2);
        assert_eq!(per.len(), LAYERS.len());
        assert_eq!(per[2], ("rpp", 11.5));
        assert_eq!(l.per_unit_since(&l, 2)[2], ("rpp", 0.0));
        // Uncompressed names read the same.
        let plain = "events: Ir\nfl=/w/mcp/src/host/mod.rs\nfn=f\n3 5\nfl=/lib/c.so\n\
            fn=(below main)\n4 2\n";
        let l = Layers::parse(plain).expect("parsed");
        assert_eq!((l.0.get("mcp"), l.0.get("other")), (Some(&5), Some(&2)));
        // Another first event, a cost that is no number, a name id never defined.
        assert_eq!(Layers::parse("events: I1mr\n"), None);
        assert_eq!(Layers::parse("events: Ir\n3 x\n"), None);
        assert_eq!(Layers::parse("events: Ir\nfl=(9)\n"), None);
    }

    #[test]
    fn numbers_default_parse_and_name_what_is_wrong() {
        assert_eq!(number(None, 7, "N"), Ok(7));
        assert_eq!(number(Some(&"42".to_string()), 7, "N"), Ok(42));
        let e = number(Some(&"4x".to_string()), 7, "COUNT").unwrap_err();
        assert!(e.contains("COUNT") && e.contains("4x"), "{e}");
    }

    #[test]
    fn the_pair_carries_a_packet_each_way_on_route_one() {
        let mut p = InlinePair::new();
        let now = myri_device::time::Time::from_micros(1_000_000);
        let buf = p.a.get_send_buffer().expect("buffer");
        p.a.send_and_release(1, myri_mcp::RouteId(1), buf, 8)
            .expect("send");
        let mut got = None;
        for _ in 0..100 {
            p.a.progress(now);
            p.b.progress(now);
            got = p.b.recv(&p.chan_b).expect("recv");
            if got.is_some() {
                break;
            }
        }
        assert_eq!(got.expect("arrived").len(), 8);
    }
}
