//! `myri info`: a board's EEPROM record and its state after the initialization sequence.

use crate::Failure;
use crate::opts::print_json;
use clap::Args;
use clap::builder::TypedValueParser;
use myri_device::board::{Board, BoardConfig, bring_up, config};
use myri_device::control::{bits, multiplier_tenths};
use myri_device::eeprom::text;
use myri_device::sram::SramSize;
use myri_device::time::Time;
use serde_json::json;

/// Arguments of `myri info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Which simulated board (its board id and serial number derive from it).
    #[arg(long, default_value_t = 0)]
    pub unit: u32,
    /// SRAM size in MiB: 2, 4 or 8.
    #[arg(long, default_value_t = 2, value_parser = clap::builder::PossibleValuesParser::new(["2", "4", "8"]).map(|s| s.parse::<u32>().unwrap_or(2)))]
    pub sram: u32,
    /// PCI bus clock in MHz of the slot the board sits in (33 or 66).
    #[arg(long, default_value_t = 33, value_parser = clap::builder::PossibleValuesParser::new(["33", "66"]).map(|s| s.parse::<u32>().unwrap_or(33)))]
    pub pci_mhz: u32,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `myri info`.
pub fn run(args: &InfoArgs) -> Result<(), Failure> {
    let mut cfg = BoardConfig::pci64b(args.unit);
    cfg.pci_mhz = args.pci_mhz;
    cfg.eeprom.sram_size = match args.sram {
        4 => SramSize::Mib4,
        8 => SramSize::Mib8,
        _ => SramSize::Mib2,
    };
    let mut board = Board::new(cfg);
    let before = board.missing_init_step();
    let ran_at =
        bring_up(&mut board, Time::ZERO, &[]).map_err(|e| Failure::check(e.to_string()))?;
    let e = board.eeprom().clone();
    let control = board
        .pci_read_u32(ran_at, config::CONTROL)
        .map_err(|e| Failure::check(e.to_string()))?;
    let clockval = board
        .pci_read_u32(ran_at, config::SPECIAL + myri_device::special::reg::CLOCK)
        .unwrap_or(0);
    let multiplier = multiplier_tenths(clockval).map_or(0.0, |t| f64::from(t) / 10.0);
    let state = |run: u32, name: &str| {
        format!(
            "{name} {}",
            if control & run != 0 {
                "running"
            } else {
                "in reset"
            }
        )
    };
    let cpu = format!("{}.{}", e.cpu_version >> 8, e.cpu_version & 0xFF);
    if args.json {
        print_json(&json!({
            "board_id": e.board_id_string(),
            "serial_number": e.serial_number,
            "product_code": e.product_code,
            "board_type": e.board_type,
            "bus_type": e.bus_type,
            "board_label": text(&e.board_label),
            "fpga_version": text(&e.fpga_version),
            "cpu_version": cpu,
            "sram_bytes": e.sram_size.bytes(),
            "eeprom_clockval": format!("{:#010x}", e.clockval),
            "max_lanai_speed_mhz": e.max_lanai_speed,
            "pci_mhz": args.pci_mhz,
            "clockval": format!("{clockval:#010x}"),
            "multiplier": multiplier,
            "lanai_mhz": board.lanai_mhz(),
            "control": format!("{control:#010x}"),
            "lanai_running": control & bits::LANAI_RUN != 0,
            "ebus_running": control & bits::EBUS_RUN != 0,
            "board_running": control & bits::BOARD_RUN != 0,
            "init_done_us": ran_at.as_nanos() / 1_000,
            "missing_step_before_init": before.map(|s| s as u8),
        }));
        return Ok(());
    }
    println!("EEPROM record (seed 002 §2.8)");
    println!("  board id          {}", e.board_id_string());
    println!("  serial number     {}", e.serial_number);
    println!(
        "  product code      {:#06x}   board label {:?}",
        e.product_code,
        text(&e.board_label)
    );
    println!(
        "  board type        {:#06x}   bus type {:#06x}",
        e.board_type, e.bus_type
    );
    println!("  cpu version       LANai {cpu}");
    println!("  sram size         {} KiB", e.sram_size.bytes() / 1024);
    println!("  clockval          {:#010x}", e.clockval);
    println!("  max lanai speed   {} MHz", e.max_lanai_speed);
    println!("  fpga version      {:?}", text(&e.fpga_version));
    println!();
    println!("State after the initialization sequence (seed 002 §2.4)");
    if let Some(step) = before {
        println!("  before            refused to run: {step} missing");
    }
    println!(
        "  done at           {ran_at} (19 steps, three 10 ms settling delays and a 1 ms speed measurement)"
    );
    println!(
        "  clock             clockval {clockval:#010x}: {multiplier:.1}x of a {} MHz PCI bus -> LANai at {} MHz",
        args.pci_mhz,
        board.lanai_mhz()
    );
    println!(
        "  control register  {control:#010x}: {}, {}, {}",
        state(bits::BOARD_RUN, "board"),
        state(bits::EBUS_RUN, "e-bus"),
        state(bits::LANAI_RUN, "lanai")
    );
    Ok(())
}
