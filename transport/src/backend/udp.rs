//! `udp://host:port`: a non-blocking UDP socket (mio), so endpoints in two processes or on
//! two machines talk.
//!
//! Registered memory is a slab of equal slots allocated at open ([`SLAB_SLOTS`] of
//! [`SLOT_LEN`] bytes): `alloc` hands out slots, and datagrams are received straight into
//! free slots and handed to the application as views of them. A send reads the
//! application's buffer where it is (the kernel copies it, as it must); a gathered send
//! (RPP header + the application's payload) goes out with one `sendmsg` of two iovecs,
//! so the payload is never copied in user space either. When the slab is empty, `alloc`
//! falls back to the heap (the send still copies nothing here) and datagrams are received
//! into heap buffers (counted).
//!
//! Receiving takes a batch of up to [`RECV_BATCH`] datagrams with one `recvmmsg` call
//! (the `sys` module), into slots the backend keeps ready. A batch that comes back short
//! says the socket is empty, so a progress pass ends without a failing call to find that
//! out: a ping-pong costs the same system calls as over a bare socket. A pass takes at
//! most [`RECV_BUDGET`] datagrams, so the endpoint acknowledges a fast stream often.
//! The batch adapts: it doubles after a full one and shrinks to what the last one got,
//! and a batch of one is a plain `recvfrom`. A waiting endpoint (a ping-pong) then polls
//! with the cheapest call and sets up no message headers it will not use, which matters
//! because every pass's own work adds to the delay before it sees the next datagram.

use super::{Backend, BackendCounters, BackendEvent, Incoming, RemoteAddr, Sent};
use crate::buffer::{Buf, BufKind, PoolSlot, RecvBuf, RecvKind, SlotPool};
use crate::error::{Error, SendError};
use crate::sys;
use crate::url::{Address, Scheme};
use mio::net::UdpSocket;
use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Instant;

/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// Bytes of each slab slot: the largest datagram fits.
pub const SLOT_LEN: usize = 65_536;
/// Slots in the slab (4 MiB).
pub const SLAB_SLOTS: usize = 64;
/// Most datagrams taken from the socket in one progress pass: the endpoint then runs its
/// timers and sends its acknowledgements before it reads on, so a sender streaming into
/// a busy receiver hears from it every few datagrams instead of once per socket buffer.
pub const RECV_BUDGET: usize = 16;
/// Datagrams one `recvmmsg` call takes at most.
pub const RECV_BATCH: usize = 8;
/// Gathered packets up to this many bytes are copied together and sent with `sendto`.
pub const SMALL_SEND: usize = 256;

/// A buffer a batch is received into.
enum RxBuf {
    /// A slab slot (the datagram is handed out as a view of it).
    Slot(PoolSlot),
    /// Heap scratch memory, when the slab had none free: kept from batch to batch, and
    /// a datagram that lands here is handed out as a copy of just its bytes (no buffer
    /// of a slot's size is allocated and zeroed for every acknowledgement).
    Heap(Vec<u8>),
    /// Handed out; refilled before the next batch.
    Taken,
}

impl AsMut<[u8]> for RxBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            RxBuf::Slot(s) => s.as_mut_slice(),
            RxBuf::Heap(v) => v,
            RxBuf::Taken => &mut [],
        }
    }
}

/// The socket, its slab and its counters.
pub(crate) struct UdpBackend {
    socket: UdpSocket,
    local: SocketAddr,
    mtu: usize,
    pool: Arc<SlotPool>,
    /// Where the next batch is received: slab slots, heap buffers when the slab is
    /// empty ([`RECV_BATCH`] of them, refilled as datagrams are handed out).
    rx: Vec<RxBuf>,
    /// What the last batch's call reported.
    received: Vec<sys::Received>,
    /// Scratch buffers not in `rx` now, kept for the next time the slab runs out.
    scratch: Vec<Vec<u8>>,
    /// Datagrams of the last batch not yet handed out.
    ready: VecDeque<Incoming>,
    /// The last batch came back short, so the socket was empty then: this progress pass
    /// reads no more (no failing call to find out it is empty).
    drained: bool,
    epoch: Instant,
    counters: BackendCounters,
    /// Datagrams this progress pass may still take ([`RECV_BUDGET`] at its start).
    budget: usize,
    /// Datagrams the next call asks for (1 to [`RECV_BATCH`]).
    batch: usize,
    /// The one peer the socket is connected to ([`Backend::connect`]), if it is.
    connected: Option<SocketAddr>,
}

/// Resolves `host:port` to one socket address (the first the resolver gives).
pub(crate) fn resolve(host: &str, port: u16) -> Result<SocketAddr, Error> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::AddrNotFound(format!("udp://{host}:{port}: {e}")))?
        .next()
        .ok_or_else(|| Error::AddrNotFound(format!("udp://{host}:{port}: no address")))
}

impl UdpBackend {
    /// Binds `host:port`.
    pub(crate) fn open(host: &str, port: u16, mtu: Option<usize>) -> Result<UdpBackend, Error> {
        let addr = resolve(host, port)?;
        let socket = UdpSocket::bind(addr).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => Error::AddrInUse(format!("udp://{addr}")),
            ErrorKind::AddrNotAvailable => {
                Error::AddrNotFound(format!("udp://{addr} is not an address of this host"))
            }
            _ => Error::Io {
                op: "binding the udp socket",
                source: e,
            },
        })?;
        let local = socket
            .local_addr()
            .map_err(Error::io("reading the bound address"))?;
        let mtu = mtu.unwrap_or(MAX_DATAGRAM);
        if mtu > MAX_DATAGRAM {
            return Err(Error::Config(format!(
                "mtu {mtu} is larger than a udp datagram ({MAX_DATAGRAM})"
            )));
        }
        // Room for bursts: the default socket buffers drop under a fast stream.
        let sock = socket2::SockRef::from(&socket);
        let _ = sock.set_recv_buffer_size(4 << 20);
        let _ = sock.set_send_buffer_size(4 << 20);
        Ok(UdpBackend {
            socket,
            local,
            mtu,
            pool: SlotPool::new(SLAB_SLOTS, SLOT_LEN),
            rx: (0..RECV_BATCH).map(|_| RxBuf::Taken).collect(),
            received: Vec::with_capacity(RECV_BATCH),
            scratch: Vec::new(),
            ready: VecDeque::with_capacity(RECV_BATCH),
            drained: false,
            epoch: Instant::now(),
            counters: BackendCounters::default(),
            budget: RECV_BUDGET,
            batch: 1,
            connected: None,
        })
    }

    fn addr(to: &RemoteAddr) -> Result<SocketAddr, Error> {
        match to {
            RemoteAddr::Udp(a) => Ok(*a),
            other => Err(Error::AddrNotFound(format!("{other:?}"))),
        }
    }

    fn sent(&mut self, r: std::io::Result<usize>) -> Result<Sent, Error> {
        match r {
            Ok(_) => Ok(Sent { copied: false }),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Err(Error::WouldBlock),
            Err(e) => {
                self.counters.io_errors += 1;
                Err(Error::Io {
                    op: "sending a datagram",
                    source: e,
                })
            }
        }
    }
}

impl UdpBackend {
    /// Gives the first `n` receive buffers memory again: slab slots while there are
    /// free ones, heap buffers otherwise.
    fn refill(&mut self, n: usize) {
        for b in &mut self.rx[..n] {
            match b {
                RxBuf::Taken => {
                    *b = match self.pool.take() {
                        Some(s) => RxBuf::Slot(s),
                        None => {
                            RxBuf::Heap(self.scratch.pop().unwrap_or_else(|| vec![0; SLOT_LEN]))
                        }
                    };
                }
                // Scratch memory makes way for a slot as soon as one is free again.
                RxBuf::Heap(_) => {
                    if let Some(s) = self.pool.take()
                        && let RxBuf::Heap(v) = std::mem::replace(b, RxBuf::Slot(s))
                    {
                        self.scratch.push(v);
                    }
                }
                RxBuf::Slot(_) => {}
            }
        }
    }

    /// Receives up to `want` datagrams into `rx[..want]`, reported in `received`: one
    /// `recvfrom`, or one `recvmmsg` for more. A slot holds any UDP datagram, so nothing
    /// `recvfrom` takes is ever cut short.
    fn receive(&mut self, want: usize) -> std::io::Result<usize> {
        if want != 1 {
            return sys::recv_batch(&self.socket, &mut self.rx[..want], &mut self.received);
        }
        let (len, from) = self.socket.recv_from(self.rx[0].as_mut())?;
        self.received.push(sys::Received {
            index: 0,
            len,
            truncated: false,
            from,
        });
        Ok(1)
    }

    /// Moves what the last batch received into `ready`, as views of its buffers.
    fn hand_out(&mut self) {
        for r in self.received.drain(..) {
            self.budget = self.budget.saturating_sub(1);
            let Some(b) = self.rx.get_mut(r.index) else {
                continue;
            };
            if r.truncated {
                // Longer than a slot, which no UDP datagram is: never from a peer of ours.
                self.counters.malformed += 1;
                continue;
            }
            let storage = match b {
                RxBuf::Slot(_) => match std::mem::replace(b, RxBuf::Taken) {
                    RxBuf::Slot(s) => RecvKind::Pool(s),
                    _ => continue,
                },
                RxBuf::Heap(v) => {
                    self.counters.recv_heap += 1;
                    RecvKind::Heap(v[..r.len.min(v.len())].to_vec())
                }
                RxBuf::Taken => continue,
            };
            self.ready.push_back(Incoming {
                from: RemoteAddr::Udp(r.from),
                data: RecvBuf::new(storage, 0..r.len),
            });
        }
    }
}

impl Backend for UdpBackend {
    fn scheme(&self) -> Scheme {
        Scheme::Udp
    }

    fn local_url(&self) -> String {
        format!("udp://{}", self.local)
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn ordered(&self) -> bool {
        false
    }

    fn lossless(&self) -> bool {
        false
    }

    fn gather_copies(&self) -> bool {
        false
    }

    fn now(&self) -> u64 {
        super::nanos_since(self.epoch)
    }

    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, Error> {
        let Address::Udp { host, port } = addr else {
            return Err(Error::AddrNotFound(format!("{addr:?}")));
        };
        if *port == 0 {
            return Err(Error::AddrNotFound(format!(
                "udp://{host}:0 (port 0 is no peer)"
            )));
        }
        let mut a = resolve(host, *port)?;
        // An IPv4 peer of an IPv6 socket (or the reverse) is unreachable: say so now.
        if a.is_ipv4() != self.local.is_ipv4() {
            let other = (host.as_str(), *port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| it.find(|x| x.is_ipv4() == self.local.is_ipv4()));
            a = other.ok_or_else(|| {
                Error::AddrNotFound(format!(
                    "udp://{host}:{port} has no address of the local socket's family ({})",
                    self.local
                ))
            })?;
        }
        Ok(RemoteAddr::Udp(a))
    }

    fn addr_url(&self, addr: &RemoteAddr) -> String {
        match addr {
            RemoteAddr::Udp(a) => format!("udp://{a}"),
            other => format!("{other:?}"),
        }
    }

    fn alloc(&mut self, len: usize) -> Option<Buf> {
        if len > SLOT_LEN {
            return None;
        }
        Some(Buf::new(BufKind::Pool(self.pool.take()?), len))
    }

    fn send(&mut self, to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError> {
        let r = Self::addr(to).and_then(|a| {
            if buf.len() > self.mtu {
                return Err(Error::TooLarge {
                    len: buf.len(),
                    max: self.mtu,
                });
            }
            let r = if self.connected == Some(a) {
                self.socket.send(&buf)
            } else {
                self.socket.send_to(&buf, a)
            };
            self.sent(r)
        });
        match r {
            // The buffer goes back to the slab (or the heap) now: the kernel has its bytes.
            Ok(s) => Ok(s),
            Err(error) => Err(SendError { error, buf }),
        }
    }

    fn send_gather(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, Error> {
        let a = Self::addr(to)?;
        let len = header.len() + payload.len();
        if len > self.mtu {
            return Err(Error::TooLarge { len, max: self.mtu });
        }
        // A small packet is put together on the stack and sent with `sendto`: cheaper in
        // the kernel than `sendmsg`'s message header and vector (and the copy is a few
        // dozen bytes); a large one is gathered by the kernel from where it lies.
        if len <= SMALL_SEND {
            let mut packet = [0u8; SMALL_SEND];
            packet[..header.len()].copy_from_slice(header);
            packet[header.len()..len].copy_from_slice(payload);
            let r = if self.connected == Some(a) {
                self.socket.send(&packet[..len])
            } else {
                self.socket.send_to(&packet[..len], a)
            };
            return self.sent(r);
        }
        let iov = [IoSlice::new(header), IoSlice::new(payload)];
        let socket = socket2::SockRef::from(&self.socket);
        let r = if self.connected == Some(a) {
            socket.send_vectored(&iov)
        } else {
            socket.send_to_vectored(&iov, &a.into())
        };
        self.sent(r)
    }

    fn can_send(&mut self, _to: &RemoteAddr) -> bool {
        true
    }

    fn recv(&mut self) -> Option<Incoming> {
        if let Some(i) = self.ready.pop_front() {
            return Some(i);
        }
        if self.budget == 0 || self.drained {
            return None;
        }
        // Bounded: a socket that keeps failing is counted, not spun on.
        for _ in 0..64 {
            let want = self.budget.min(self.batch);
            self.refill(want);
            self.received.clear();
            match self.receive(want) {
                Ok(got) => {
                    self.drained = got < want;
                    self.batch = if got == want {
                        (self.batch * 2).min(RECV_BATCH)
                    } else {
                        got.max(1)
                    };
                    self.hand_out();
                    match self.ready.pop_front() {
                        Some(i) => return Some(i),
                        None if self.drained => return None,
                        // Every datagram of a full batch was dropped: read on.
                        None => continue,
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.drained = true;
                    self.batch = 1;
                    return None;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    // An ICMP error for an earlier send (port unreachable): not fatal.
                    self.counters.io_errors += 1;
                    continue;
                }
            }
        }
        None
    }

    fn progress(&mut self) -> bool {
        self.budget = RECV_BUDGET;
        self.drained = false;
        false
    }

    fn poll_event(&mut self) -> Option<BackendEvent> {
        None
    }

    fn counters(&self) -> BackendCounters {
        self.counters
    }

    fn connect(&mut self, to: &RemoteAddr) -> Result<(), Error> {
        let a = Self::addr(to)?;
        self.socket
            .connect(a)
            .map_err(Error::io("connecting the udp socket to its one peer"))?;
        self.connected = Some(a);
        Ok(())
    }

    fn udp_socket(&mut self) -> Option<&mut UdpSocket> {
        Some(&mut self.socket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `count` numbered datagrams of 40 bytes to `to` from a plain socket.
    fn burst(to: SocketAddr, first: u8, count: u8) -> std::net::UdpSocket {
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in first..first + count {
            tx.send_to(&[i; 40], to).unwrap();
        }
        tx
    }

    /// Everything one progress pass takes.
    fn pass(b: &mut UdpBackend) -> Vec<(u8, usize, SocketAddr)> {
        b.progress();
        let mut got = Vec::new();
        while let Some(i) = b.recv() {
            let RemoteAddr::Udp(from) = i.from else {
                panic!("a udp backend hears from udp addresses")
            };
            got.push((i.data[0], i.data.len(), from));
        }
        got
    }

    #[test]
    fn a_waiting_backend_polls_one_datagram_and_a_stream_grows_the_batch() {
        let mut b = UdpBackend::open("127.0.0.1", 0, None).unwrap();
        let to = b.local;
        // Nothing waiting: a one-datagram poll, and the batch stays at one.
        assert!(pass(&mut b).is_empty());
        assert_eq!(b.batch, 1);
        // One datagram (a ping-pong): taken by that poll, with its sender.
        let tx = burst(to, 0, 1);
        assert_eq!(pass(&mut b), vec![(0, 40, tx.local_addr().unwrap())]);
        // A burst: 1, then 2, 4, 8, 8 ... per call until the pass's budget is spent; the
        // rest in the next pass; every datagram once, in order.
        let tx = burst(to, 1, 40);
        let mut seen: Vec<u8> = Vec::new();
        let first = pass(&mut b);
        assert_eq!(first.len(), RECV_BUDGET);
        assert_eq!(b.batch, RECV_BATCH);
        seen.extend(first.iter().map(|g| g.0));
        for _ in 0..4 {
            seen.extend(pass(&mut b).iter().map(|g| g.0));
        }
        assert_eq!(seen, (1..41).collect::<Vec<u8>>());
        assert!(pass(&mut b).is_empty());
        assert_eq!(b.batch, 1, "an empty socket brings the batch back to one");
        drop(tx);
    }
}
