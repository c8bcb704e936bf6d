//! Arbitrary datagrams, interleaved with sends, timeouts and polls, into an RPP
//! connection: nothing panics, and what the receiver holds stays bounded.
//!
//! The input is a list of operations `[op][len: u16 le][bytes]`. Datagrams go in either
//! as they are (mostly stopped by the CRC-32C) or with a fixed-up version, integrity
//! byte, connection id, a valid CRC and (when the first input byte is odd, the
//! connection then requiring a MAC) a valid MAC, so the parser and the state machine
//! behind the checks are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use myri_rpp::wire::{self, HEADER_LEN};
use myri_rpp::wire::{Integrity, MacKey};
use myri_rpp::{Config, Connection, Instant};
use std::time::Duration;

const CONN_ID: u64 = 0x00C0_FFEE_1234_5678;

fn config() -> Config {
    Config::default()
        .with_mtu(1500)
        .with_recv_window(32)
        .with_send_window(32)
        .with_recv_buffer_bytes(64 << 10)
        .with_max_message_len(64 << 10)
        .with_max_queued_bytes(256 << 10)
        .with_max_queued_messages(64)
}

fuzz_target!(|data: &[u8]| {
    let key = (data.first().is_some_and(|b| b & 1 == 1)).then(|| MacKey::new([0x5A; 32]));
    let mut conn: Connection<Vec<u8>> =
        Connection::new(config().with_mac_key(key.clone()), 5, CONN_ID, Instant::ZERO)
            .expect("valid config");
    let mut now = Instant::ZERO;
    let mut out = vec![0u8; 1500];
    let mut rest = data;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let bytes = &rest[3..3 + len];
        rest = &rest[3 + len..];
        match op % 6 {
            0 => {
                conn.handle_packet(now, bytes);
            }
            1 => {
                // Make it look like ours, with a valid CRC.
                let mut p = bytes.to_vec();
                if p.len() >= HEADER_LEN {
                    use wire::offset;
                    p[offset::VERSION] = wire::VERSION;
                    p[offset::FLAGS] &= wire::flags::ALL;
                    p[offset::INTEGRITY] = Integrity::Crc32c.byte(key.is_some());
                    p[offset::CONN_ID..offset::CONN_ID + 8].copy_from_slice(&CONN_ID.to_be_bytes());
                    p[offset::RESERVED..offset::RESERVED + 2].fill(0);
                    wire::seal_packet(&mut p, key.as_ref());
                }
                conn.handle_packet(now, &p);
            }
            2 => {
                let micros = u64::from(bytes.first().copied().unwrap_or(0)) << 4;
                now += Duration::from_micros(micros);
                if conn.poll_timeout().is_some_and(|t| t <= now) {
                    conn.handle_timeout(now);
                }
            }
            3 => {
                let _ = conn.send(bytes.to_vec());
            }
            4 => while conn.poll_transmit(now, &mut out).is_some() {},
            _ => while conn.poll_event().is_some() {},
        }
        let c = config();
        assert!(conn.recv_held() <= 2 * c.recv_buffer_bytes + c.mtu, "holds {}", conn.recv_held());
        assert!(conn.queued_bytes() <= c.max_queued_bytes);
    }
});
