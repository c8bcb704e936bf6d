//! The goodput reference for `udp://` streaming: the same bytes over one TCP connection.
//!
//! Per round the client writes an 8-byte little-endian byte count, then that many bytes
//! (`count` writes of one message's size), and waits for the server to send the count
//! back once it has read them all. The server side ([`TcpSink`]) runs in the server's
//! polling loop beside the transport endpoint; the client side ([`TcpClient`]) blocks.

use super::StreamRound;
use mio::net::{TcpListener, TcpStream};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

struct Conn {
    stream: TcpStream,
    header: Vec<u8>,
    expected: u64,
    left: u64,
    /// Acknowledgement bytes not yet written.
    ack: Vec<u8>,
}

/// The server side: a listener and its connections, non-blocking.
pub struct TcpSink {
    listener: TcpListener,
    conns: Vec<Conn>,
    scratch: Vec<u8>,
    /// Where accepted connections are registered, and with which token.
    registry: Option<(mio::Registry, mio::Token)>,
    /// Bytes read from every connection.
    pub bytes: u64,
}

impl TcpSink {
    /// Listens on `addr`. With `registry`, accepted connections are registered there
    /// (readable, with the token given) so that a blocked poll wakes for their bytes.
    pub fn bind(
        addr: SocketAddr,
        registry: Option<(mio::Registry, mio::Token)>,
    ) -> std::io::Result<TcpSink> {
        Ok(TcpSink {
            listener: TcpListener::bind(addr)?,
            conns: Vec::new(),
            scratch: vec![0; 256 << 10],
            registry,
            bytes: 0,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The listener, to register with a `mio::Poll` (connections are polled by
    /// [`TcpSink::poll`] without registration).
    pub fn listener(&mut self) -> &mut TcpListener {
        &mut self.listener
    }

    /// Whether a connection is open.
    pub fn has_connections(&self) -> bool {
        !self.conns.is_empty()
    }

    /// Accepts and reads what is there; returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        let mut worked = false;
        while let Ok((mut stream, _)) = self.listener.accept() {
            let _ = stream.set_nodelay(true);
            if let Some((registry, token)) = &self.registry {
                let _ = registry.register(&mut stream, *token, mio::Interest::READABLE);
            }
            self.conns.push(Conn {
                stream,
                header: Vec::with_capacity(8),
                expected: 0,
                left: 0,
                ack: Vec::new(),
            });
            worked = true;
        }
        let scratch = &mut self.scratch;
        let mut bytes = 0;
        self.conns.retain_mut(|c| {
            let (alive, w, b) = Self::poll_conn(c, scratch);
            worked |= w;
            bytes += b;
            alive
        });
        self.bytes += bytes;
        worked
    }

    /// Reads from one connection: (still open, did anything, bytes counted).
    fn poll_conn(c: &mut Conn, scratch: &mut [u8]) -> (bool, bool, u64) {
        let mut worked = false;
        let mut counted = 0;
        loop {
            if !c.ack.is_empty() {
                match c.stream.write(&c.ack) {
                    Ok(n) => {
                        c.ack.drain(..n);
                        worked = true;
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return (false, true, counted),
                }
            }
            let want = if c.left == 0 {
                8 - c.header.len()
            } else {
                scratch
                    .len()
                    .min(usize::try_from(c.left).unwrap_or(usize::MAX))
            };
            let n = match c.stream.read(&mut scratch[..want]) {
                Ok(0) => return (false, true, counted),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return (true, worked, counted),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return (false, true, counted),
            };
            worked = true;
            if c.left == 0 {
                c.header.extend_from_slice(&scratch[..n]);
                if c.header.len() == 8 {
                    c.expected = u64::from_le_bytes(c.header[..].try_into().expect("8 bytes"));
                    c.left = c.expected;
                    c.header.clear();
                    if c.left == 0 {
                        c.ack.extend_from_slice(&0u64.to_le_bytes());
                    }
                }
            } else {
                c.left -= n as u64;
                counted += n as u64;
                if c.left == 0 {
                    c.ack.extend_from_slice(&c.expected.to_le_bytes());
                }
            }
        }
    }
}

/// The client side: one blocking connection.
pub struct TcpClient {
    stream: std::net::TcpStream,
    buf: Vec<u8>,
}

impl TcpClient {
    /// Connects to the server's sink.
    pub fn connect(server: SocketAddr) -> std::io::Result<TcpClient> {
        let stream =
            std::net::TcpStream::connect_timeout(&server, std::time::Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        Ok(TcpClient {
            stream,
            buf: Vec::new(),
        })
    }

    /// Writes `count` messages of `size` bytes; returns when the server has read them all.
    pub fn stream_round(&mut self, size: usize, count: u64) -> std::io::Result<StreamRound> {
        self.buf.resize(size, 0x5a);
        let total = size as u64 * count;
        let t0 = Instant::now();
        self.stream.write_all(&total.to_le_bytes())?;
        for _ in 0..count {
            self.stream.write_all(&self.buf)?;
        }
        let mut ack = [0u8; 8];
        self.stream.read_exact(&mut ack)?;
        let got = u64::from_le_bytes(ack);
        Ok(StreamRound {
            elapsed: t0.elapsed(),
            sent: count,
            received: if got == total { count } else { 0 },
            bytes: got,
            errors: u64::from(got != total),
        })
    }
}
