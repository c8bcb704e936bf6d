//! Options shared by subcommands.

use clap::Args;
use myri_device::fabric::FaultConfig;
use std::time::Duration;

/// Fault injection on every link of the simulated fabric.
#[derive(Args, Debug, Clone)]
pub struct FaultArgs {
    /// Probability of dropping each packet on each link (0 to 1).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub loss: f64,
    /// Probability of flipping one bit of each packet on each link (caught by CRC-8).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub corrupt: f64,
    /// Probability of delivering each packet twice on each link.
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub dup: f64,
    /// Probability of holding each packet back so later ones overtake it, on each link.
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub reorder: f64,
    /// Seed of every random choice: the same seed replays the same run in sim mode.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
}

impl FaultArgs {
    /// The fault configuration, checked.
    pub fn config(&self) -> Result<FaultConfig, crate::Failure> {
        let c = FaultConfig {
            drop: self.loss,
            corrupt: self.corrupt,
            duplicate: self.dup,
            reorder: self.reorder,
            reorder_delay: Duration::from_micros(20),
            ..FaultConfig::default()
        };
        c.validate()
            .map_err(|e| crate::Failure::usage(e.to_string()))?;
        Ok(c)
    }
}

/// Prints one JSON object on a line. When the reader has gone (`myri ... --json | head`)
/// the process ends quietly with status 141, as a shell reports a command that SIGPIPE
/// ended; another write error ends it with a message and status 1.
pub fn print_json(v: &serde_json::Value) {
    use std::io::Write;
    let line = serde_json::to_string(v).unwrap_or_else(|_| "{}".into());
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("myri: writing the JSON output: {e}");
        std::process::exit(1);
    }
}
