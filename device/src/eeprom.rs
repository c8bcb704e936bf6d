//! The EEPROM board record (seed 002, §2.8), read-only at PCI offset `0x00A0_0000`.
//!
//! The record is 128 bytes, programmed big-endian. [`EepromRecord`] is a view over raw
//! bytes; [`Eeprom`] is the parsed form with [`Eeprom::parse`] and [`Eeprom::emit`].

use crate::sram::SramSize;
use thiserror::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const CLOCKVAL: Field = 0..4;
    pub const CPU_VERSION: Field = 4..6;
    pub const BOARD_ID: Field = 6..12;
    pub const SRAM_SIZE: Field = 12..16;
    pub const FPGA_VERSION: Field = 16..48;
    pub const MORE_VERSION: Field = 48..64;
    pub const DELAY_LINE: Field = 64..66;
    pub const BOARD_TYPE: Field = 66..68;
    pub const BUS_TYPE: Field = 68..70;
    pub const PRODUCT_CODE: Field = 70..72;
    pub const SERIAL_NUMBER: Field = 72..76;
    pub const BOARD_LABEL: Field = 76..108;
    pub const MAX_LANAI_SPEED: Field = 108..110;
    pub const FUTURE_USE: Field = 110..124;
    pub const UNUSED: Field = 124..128;
}

/// Length of the EEPROM record.
pub const RECORD_LEN: usize = field::UNUSED.end;

/// `board_type` of a LANai-9 board (GM_MYRINET_BOARD_TYPE_L5 in seed 002's sample).
pub const BOARD_TYPE_L5: u16 = 0x0003;
/// `bus_type` of a PCI board (GM_MYRINET_BUS_PCI).
pub const BUS_TYPE_PCI: u16 = 0x0002;

/// Why an EEPROM record was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EepromError {
    /// Fewer than [`RECORD_LEN`] bytes.
    #[error("eeprom record of {len} bytes is shorter than {RECORD_LEN}")]
    Truncated {
        /// Bytes given.
        len: usize,
    },
    /// An SRAM size no PCI64 board has.
    #[error("eeprom sram size {0:#x} is not 2, 4 or 8 MiB")]
    SramSize(u32),
    /// A CPU version other than LANai 7.x or 9.x.
    #[error("eeprom cpu version {0:#06x} is not a LANai 7 or LANai 9")]
    CpuVersion(u16),
    /// A maximum processor speed of zero.
    #[error("eeprom max lanai speed is zero")]
    MaxSpeed,
}

/// A view of the raw EEPROM record.
#[derive(Debug, Clone)]
pub struct EepromRecord<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! be_getter {
    ($name:ident, $field:ident, u16) => {
        #[doc = concat!("The `", stringify!($name), "` field.")]
        pub fn $name(&self) -> u16 {
            let b = &self.buffer.as_ref()[field::$field];
            u16::from_be_bytes([b[0], b[1]])
        }
    };
    ($name:ident, $field:ident, u32) => {
        #[doc = concat!("The `", stringify!($name), "` field.")]
        pub fn $name(&self) -> u32 {
            let b = &self.buffer.as_ref()[field::$field];
            u32::from_be_bytes([b[0], b[1], b[2], b[3]])
        }
    };
}

impl<T: AsRef<[u8]>> EepromRecord<T> {
    /// Wraps a buffer after checking its length.
    pub fn new_checked(buffer: T) -> Result<EepromRecord<T>, EepromError> {
        let len = buffer.as_ref().len();
        if len < RECORD_LEN {
            return Err(EepromError::Truncated { len });
        }
        Ok(EepromRecord { buffer })
    }

    be_getter!(clockval, CLOCKVAL, u32);
    be_getter!(cpu_version, CPU_VERSION, u16);
    be_getter!(sram_size, SRAM_SIZE, u32);
    be_getter!(delay_line_value, DELAY_LINE, u16);
    be_getter!(board_type, BOARD_TYPE, u16);
    be_getter!(bus_type, BUS_TYPE, u16);
    be_getter!(product_code, PRODUCT_CODE, u16);
    be_getter!(serial_number, SERIAL_NUMBER, u32);
    be_getter!(max_lanai_speed, MAX_LANAI_SPEED, u16);

    /// The 48-bit board id (the MAC address).
    pub fn board_id(&self) -> [u8; 6] {
        self.buffer.as_ref()[field::BOARD_ID]
            .try_into()
            .expect("6-byte field")
    }

    fn bytes<const N: usize>(&self, f: core::ops::Range<usize>) -> [u8; N] {
        self.buffer.as_ref()[f].try_into().expect("field width")
    }
}

/// The parsed EEPROM record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eeprom {
    /// Value used to initialize the LANai clock (its multiplier bits are 6..4).
    pub clockval: u32,
    /// CPU version: `0x0701` is LANai 7.1, `0x0900` LANai 9.0.
    pub cpu_version: u16,
    /// 48-bit board id (MAC address).
    pub board_id: [u8; 6],
    /// SRAM size.
    pub sram_size: SramSize,
    /// FPGA information, NUL-padded text.
    pub fpga_version: [u8; 32],
    /// More FPGA information, NUL-padded text.
    pub more_version: [u8; 16],
    /// Obsolete delay-line value.
    pub delay_line_value: u16,
    /// Board type.
    pub board_type: u16,
    /// Bus type.
    pub bus_type: u16,
    /// Product code.
    pub product_code: u16,
    /// Myricom serial number.
    pub serial_number: u32,
    /// Expected board label, NUL-padded text.
    pub board_label: [u8; 32],
    /// Maximum LANai processor speed in MHz.
    pub max_lanai_speed: u16,
}

fn padded<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = text.len().min(N);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// The text before the first NUL, with anything not printable ASCII shown as `?`.
pub fn text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '?'
            }
        })
        .collect()
}

impl Eeprom {
    /// The typical PCI64B record of seed 002 §2.8, with the given id, serial and SRAM size.
    pub fn pci64b(board_id: [u8; 6], serial_number: u32, sram_size: SramSize) -> Eeprom {
        Eeprom {
            clockval: 0x0520_82a0,
            cpu_version: 0x0900,
            board_id,
            sram_size,
            fpga_version: padded("Thu Dec  9 16:13:40 1999"),
            more_version: [0; 16],
            delay_line_value: 0,
            board_type: BOARD_TYPE_L5,
            bus_type: BUS_TYPE_PCI,
            product_code: 0x003e,
            serial_number,
            board_label: padded("M3M-PCI64B-2"),
            max_lanai_speed: 134,
        }
    }

    /// Parses a record, refusing values no PCI64 board has.
    pub fn parse<T: AsRef<[u8]>>(record: &EepromRecord<T>) -> Result<Eeprom, EepromError> {
        let sram = record.sram_size();
        let sram_size = SramSize::from_bytes(sram).ok_or(EepromError::SramSize(sram))?;
        let cpu_version = record.cpu_version();
        if !matches!(cpu_version >> 8, 7 | 9) {
            return Err(EepromError::CpuVersion(cpu_version));
        }
        if record.max_lanai_speed() == 0 {
            return Err(EepromError::MaxSpeed);
        }
        Ok(Eeprom {
            clockval: record.clockval(),
            cpu_version,
            board_id: record.board_id(),
            sram_size,
            fpga_version: record.bytes(field::FPGA_VERSION),
            more_version: record.bytes(field::MORE_VERSION),
            delay_line_value: record.delay_line_value(),
            board_type: record.board_type(),
            bus_type: record.bus_type(),
            product_code: record.product_code(),
            serial_number: record.serial_number(),
            board_label: record.bytes(field::BOARD_LABEL),
            max_lanai_speed: record.max_lanai_speed(),
        })
    }

    /// Parses raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Eeprom, EepromError> {
        Eeprom::parse(&EepromRecord::new_checked(bytes)?)
    }

    /// Writes the record into `out` (at least [`RECORD_LEN`] bytes); reserved fields are zero.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), EepromError> {
        if out.len() < RECORD_LEN {
            return Err(EepromError::Truncated { len: out.len() });
        }
        let out = &mut out[..RECORD_LEN];
        out.fill(0);
        out[field::CLOCKVAL].copy_from_slice(&self.clockval.to_be_bytes());
        out[field::CPU_VERSION].copy_from_slice(&self.cpu_version.to_be_bytes());
        out[field::BOARD_ID].copy_from_slice(&self.board_id);
        out[field::SRAM_SIZE].copy_from_slice(&self.sram_size.bytes().to_be_bytes());
        out[field::FPGA_VERSION].copy_from_slice(&self.fpga_version);
        out[field::MORE_VERSION].copy_from_slice(&self.more_version);
        out[field::DELAY_LINE].copy_from_slice(&self.delay_line_value.to_be_bytes());
        out[field::BOARD_TYPE].copy_from_slice(&self.board_type.to_be_bytes());
        out[field::BUS_TYPE].copy_from_slice(&self.bus_type.to_be_bytes());
        out[field::PRODUCT_CODE].copy_from_slice(&self.product_code.to_be_bytes());
        out[field::SERIAL_NUMBER].copy_from_slice(&self.serial_number.to_be_bytes());
        out[field::BOARD_LABEL].copy_from_slice(&self.board_label);
        out[field::MAX_LANAI_SPEED].copy_from_slice(&self.max_lanai_speed.to_be_bytes());
        debug_assert!(out[field::FUTURE_USE].iter().all(|&b| b == 0));
        Ok(())
    }

    /// The record as bytes.
    pub fn to_bytes(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        self.emit(&mut out).expect("buffer is RECORD_LEN bytes");
        out
    }

    /// Whether the CPU is a LANai 9 (whose processor runs at twice the selected clock).
    pub fn is_lanai9(&self) -> bool {
        self.cpu_version >> 8 == 9
    }

    /// The board id as `00:60:dd:7f:bf:d6`.
    pub fn board_id_string(&self) -> String {
        self.board_id
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample record of seed 002 §2.8, as bytes.
    fn sample_bytes() -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..4].copy_from_slice(&[0x05, 0x20, 0x82, 0xa0]);
        b[4..6].copy_from_slice(&[0x09, 0x00]);
        b[6..12].copy_from_slice(&[0x00, 0x60, 0xdd, 0x7f, 0xbf, 0xd6]);
        b[12..16].copy_from_slice(&[0x00, 0x20, 0x00, 0x00]);
        b[16..40].copy_from_slice(b"Thu Dec  9 16:13:40 1999");
        b[66..68].copy_from_slice(&[0x00, 0x03]);
        b[68..70].copy_from_slice(&[0x00, 0x02]);
        b[70..72].copy_from_slice(&[0x00, 0x3e]);
        b[72..76].copy_from_slice(&52689u32.to_be_bytes());
        b[76..88].copy_from_slice(b"M3M-PCI64B-2");
        b[108..110].copy_from_slice(&134u16.to_be_bytes());
        b
    }

    fn sample() -> Eeprom {
        Eeprom::pci64b([0x00, 0x60, 0xdd, 0x7f, 0xbf, 0xd6], 52689, SramSize::Mib2)
    }

    #[test]
    fn deconstruct() {
        let bytes = sample_bytes();
        let r = EepromRecord::new_checked(&bytes[..]).unwrap();
        assert_eq!(r.clockval(), 0x0520_82a0);
        assert_eq!(r.cpu_version(), 0x0900);
        assert_eq!(r.sram_size(), 0x0020_0000);
        assert_eq!(r.product_code(), 0x003e);
        assert_eq!(r.serial_number(), 52689);
        assert_eq!(r.max_lanai_speed(), 134);
    }

    #[test]
    fn parse_and_emit_round_trip() {
        let parsed = Eeprom::from_bytes(&sample_bytes()).unwrap();
        assert_eq!(parsed, sample());
        assert_eq!(parsed.to_bytes(), sample_bytes());
        assert_eq!(parsed.board_id_string(), "00:60:dd:7f:bf:d6");
        assert_eq!(text(&parsed.fpga_version), "Thu Dec  9 16:13:40 1999");
        assert!(parsed.is_lanai9());
    }

    #[test]
    fn impossible_values() {
        assert_eq!(
            Eeprom::from_bytes(&sample_bytes()[..127]),
            Err(EepromError::Truncated { len: 127 })
        );
        let mut b = sample_bytes();
        b[12..16].copy_from_slice(&0x0030_0000u32.to_be_bytes());
        assert_eq!(
            Eeprom::from_bytes(&b),
            Err(EepromError::SramSize(0x0030_0000))
        );
        let mut b = sample_bytes();
        b[4..6].copy_from_slice(&[0x05, 0x00]);
        assert_eq!(Eeprom::from_bytes(&b), Err(EepromError::CpuVersion(0x0500)));
        let mut b = sample_bytes();
        b[108..110].copy_from_slice(&[0, 0]);
        assert_eq!(Eeprom::from_bytes(&b), Err(EepromError::MaxSpeed));
        let mut short = [0u8; 64];
        assert_eq!(
            sample().emit(&mut short),
            Err(EepromError::Truncated { len: 64 })
        );
    }

    #[test]
    fn text_hides_unprintable_bytes() {
        assert_eq!(text(b"ab\x01c\0zz"), "ab?c");
    }
}
