//! The plain reference for `udp://`: a bare UDP socket, no protocol on top.
//!
//! The server side ([`UdpReflector`]) echoes pings and counts data datagrams per client;
//! the client side ([`BareUdpClient`]) ping-pongs and streams with the same framing
//! ([`super::wire`]) and the same busy-polling as the transport's client, so the two are
//! measured alike. A message larger than one datagram goes as several datagrams of at
//! most [`MAX_DATAGRAM`] bytes, as the transport fragments it.

use super::wire::{self, Control, KIND_DATA, KIND_PING};
use super::{RoundTime, StreamRound};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

#[derive(Default)]
struct SinkCount {
    round: u32,
    received: u64,
    bytes: u64,
}

/// The server side: a non-blocking socket that echoes pings and counts data.
pub struct UdpReflector {
    socket: mio::net::UdpSocket,
    buf: Vec<u8>,
    sinks: HashMap<SocketAddr, SinkCount>,
    /// Datagrams echoed.
    pub echoed: u64,
    /// Data datagrams counted.
    pub sunk: u64,
}

impl UdpReflector {
    /// Binds `addr`.
    pub fn bind(addr: SocketAddr) -> std::io::Result<UdpReflector> {
        let socket = mio::net::UdpSocket::bind(addr)?;
        let sock = socket2::SockRef::from(&socket);
        let _ = sock.set_recv_buffer_size(4 << 20);
        let _ = sock.set_send_buffer_size(4 << 20);
        Ok(UdpReflector {
            socket,
            buf: vec![0; 1 << 16],
            sinks: HashMap::new(),
            echoed: 0,
            sunk: 0,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The socket, to register with a `mio::Poll`.
    pub fn socket(&mut self) -> &mut mio::net::UdpSocket {
        &mut self.socket
    }

    /// Handles what has arrived (at most 64 datagrams); returns whether anything did.
    pub fn poll(&mut self) -> bool {
        let mut worked = false;
        for _ in 0..64 {
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // ICMP errors for earlier sends, interrupted calls: nothing to do.
                Err(_) => continue,
            };
            worked = true;
            let msg = &self.buf[..n];
            match wire::header(msg) {
                Some(h) if h.kind == KIND_PING => {
                    let _ = self.socket.send_to(msg, from);
                    self.echoed += 1;
                }
                Some(_) => {
                    let s = self.sinks.entry(from).or_default();
                    s.received += 1;
                    s.bytes += n as u64;
                    self.sunk += 1;
                }
                None => self.control(n, from),
            }
        }
        worked
    }

    fn control(&mut self, n: usize, from: SocketAddr) {
        let reply = match wire::control(&self.buf[..n]) {
            Some(Ok(Control::StreamStart { round, .. })) => {
                let s = self.sinks.entry(from).or_default();
                *s = SinkCount {
                    round,
                    ..SinkCount::default()
                };
                Control::StreamAck {
                    round,
                    done: false,
                    received: 0,
                    bytes: 0,
                    errors: 0,
                }
            }
            Some(Ok(Control::StreamEnd { round })) => {
                let s = self.sinks.entry(from).or_default();
                let (received, bytes) = if s.round == round {
                    (s.received, s.bytes)
                } else {
                    (0, 0)
                };
                Control::StreamAck {
                    round,
                    done: true,
                    received,
                    bytes,
                    errors: 0,
                }
            }
            _ => return,
        };
        let _ = self.socket.send_to(&wire::encode_control(&reply), from);
    }
}

/// The client side: a connected, non-blocking socket, busy-polled.
pub struct BareUdpClient {
    socket: UdpSocket,
    buf: Vec<u8>,
    rx: Vec<u8>,
    round: u32,
    timeout: Duration,
}

impl BareUdpClient {
    /// A socket on `local` (the unspecified address of the server's family, port 0 for
    /// any) connected to the server's reflector at `server`. `timeout`: how long an
    /// exchange waits before it counts as lost.
    pub fn connect(
        local: SocketAddr,
        server: SocketAddr,
        timeout: Duration,
    ) -> std::io::Result<BareUdpClient> {
        let socket = UdpSocket::bind(local)?;
        socket.connect(server)?;
        socket.set_nonblocking(true)?;
        let sock = socket2::SockRef::from(&socket);
        let _ = sock.set_recv_buffer_size(4 << 20);
        let _ = sock.set_send_buffer_size(4 << 20);
        Ok(BareUdpClient {
            socket,
            buf: Vec::new(),
            rx: vec![0; 1 << 16],
            round: 0,
            timeout,
        })
    }

    /// `iters` ping-pongs of `size` bytes (at most [`MAX_DATAGRAM`]).
    pub fn pingpong_round(&mut self, size: usize, iters: u64) -> RoundTime {
        self.round = self.round.wrapping_add(1);
        let round = self.round as u8;
        let size = size.clamp(wire::HEADER_LEN, MAX_DATAGRAM);
        self.buf.resize(size, 0);
        let start = Instant::now();
        let mut timeouts = 0;
        for seq in 0..iters {
            wire::put_header(&mut self.buf, KIND_PING, round, seq);
            let sent_at = Instant::now();
            let _ = self.socket.send(&self.buf);
            loop {
                match self.socket.recv(&mut self.rx) {
                    Ok(n) => {
                        let h = wire::header(&self.rx[..n]);
                        if n == size && h.is_some_and(|h| h.round == round && h.seq == seq) {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        if sent_at.elapsed() > self.timeout {
                            timeouts += 1;
                            break;
                        }
                        std::hint::spin_loop();
                    }
                    Err(_) => {
                        if sent_at.elapsed() > self.timeout {
                            timeouts += 1;
                            break;
                        }
                    }
                }
            }
        }
        RoundTime {
            elapsed: start.elapsed(),
            exchanges: iters,
            timeouts,
        }
    }

    fn request(&mut self, c: &Control, round: u32, done: bool) -> Option<(u64, u64)> {
        let msg = wire::encode_control(c);
        for _ in 0..20 {
            let _ = self.socket.send(&msg);
            let sent_at = Instant::now();
            while sent_at.elapsed() < self.timeout {
                match self.socket.recv(&mut self.rx) {
                    Ok(n) => {
                        if let Some(Ok(Control::StreamAck {
                            round: r,
                            done: d,
                            received,
                            bytes,
                            ..
                        })) = wire::control(&self.rx[..n])
                            && r == round
                            && d == done
                        {
                            return Some((received, bytes));
                        }
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
        }
        None
    }

    /// Streams `count` messages of `size` bytes as fast as the socket takes them, then
    /// asks the reflector what arrived. `None` if it never answered.
    pub fn stream_round(&mut self, size: usize, count: u64) -> Option<StreamRound> {
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        let start = Control::StreamStart {
            round,
            count,
            sizes: wire::SizeSpec::Fixed(size),
            seed: 0,
            verify: false,
        };
        self.request(&start, round, false)?;
        let size = size.max(wire::HEADER_LEN);
        let datagram = size.min(MAX_DATAGRAM);
        self.buf.resize(datagram, 0);
        let t0 = Instant::now();
        let mut seq = 0u64;
        for _ in 0..count {
            let mut left = size;
            while left > 0 {
                let n = left.min(datagram);
                wire::put_header(&mut self.buf, KIND_DATA, round as u8, seq);
                loop {
                    match self.socket.send(&self.buf[..n.max(wire::HEADER_LEN)]) {
                        Ok(_) => break,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                        // ECONNREFUSED from an earlier ICMP error: the datagram is lost.
                        Err(_) => break,
                    }
                }
                seq += 1;
                left -= n;
            }
        }
        let (received, bytes) = self.request(&Control::StreamEnd { round }, round, true)?;
        Some(StreamRound {
            elapsed: t0.elapsed(),
            sent: seq,
            received,
            bytes,
            errors: 0,
        })
    }
}
