//! System calls the standard library and `socket2` do not offer: `recvmmsg(2)`, so the
//! UDP backend takes a batch of datagrams with one call (and learns from a short batch
//! that the socket is empty, without a failing call to find out). Every `unsafe` block has
//! a `// SAFETY:` note; this and [`crate::shm::raw`] are the crate's only unsafe code.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

/// Most datagrams one [`recv_batch`] takes.
pub(crate) const MAX_BATCH: usize = 16;

/// One received datagram of a batch: its length and its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    /// Which buffer it is in.
    pub(crate) index: usize,
    /// Bytes written into its buffer (a longer datagram was truncated to the buffer).
    pub(crate) len: usize,
    /// Whether the datagram was longer than its buffer.
    pub(crate) truncated: bool,
    /// Who sent it.
    pub(crate) from: SocketAddr,
}

/// The socket address in `storage` (IPv4 or IPv6; `None` for another family).
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`, which is smaller
            // than `sockaddr_storage` and needs no stricter alignment.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for `sockaddr_in6`.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Receives up to `bufs.len()` (at most [`MAX_BATCH`]) datagrams from `socket` without
/// blocking, datagram `i` into `bufs[i]`; appends what arrived to `out` and returns how
/// many. `Err(WouldBlock)` when none was waiting.
pub(crate) fn recv_batch<B: AsMut<[u8]>>(
    socket: &impl AsRawFd,
    bufs: &mut [B],
    out: &mut Vec<Received>,
) -> io::Result<usize> {
    let n = bufs.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // Only the first `n` entries are used, so only they are initialized (an empty poll of
    // a ping-pong would otherwise zero some 3 KiB of headers per call).
    let mut addrs = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; MAX_BATCH];
    let mut iovs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    for i in 0..n {
        let b = bufs[i].as_mut();
        addrs[i] = MaybeUninit::zeroed();
        iovs[i].write(libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        });
        let m = msgs[i].write(
            // SAFETY: all-zero is a valid value of this C struct (null pointers, zero
            // lengths); the fields that matter are set next.
            unsafe { MaybeUninit::zeroed().assume_init() },
        );
        m.msg_hdr.msg_name = addrs[i].as_mut_ptr().cast();
        m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        m.msg_hdr.msg_iov = iovs[i].as_mut_ptr();
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` point at `n` iovecs, each covering one of the caller's buffers
    // (borrowed mutably for this call, so nothing else reads or writes them), and at `n`
    // address storages of the size given; all live on this frame until the call returns.
    // The kernel writes only within those and the message headers.
    let got = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = got as usize;
    for (index, (m, a)) in msgs.iter().zip(&addrs).take(got).enumerate() {
        // SAFETY: `got <= n` and the first `n` entries were initialized above (the kernel
        // only wrote within them since).
        let (m, a) = unsafe { (m.assume_init_ref(), a.assume_init_ref()) };
        let Some(from) = socket_addr(a) else { continue };
        out.push(Received {
            index,
            len: m.msg_len as usize,
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            from,
        });
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_batch_takes_what_is_waiting_and_says_who_sent_it() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut storage = vec![vec![0u8; 16]; 4];
        let mut out = Vec::new();
        let e = recv_batch(&rx, &mut storage, &mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        for i in 0..3u8 {
            tx.send_to(&[i; 5], rx.local_addr().unwrap()).unwrap();
        }
        tx.send_to(&[9; 40], rx.local_addr().unwrap()).unwrap();
        // Loopback queues before send_to returns.
        let n = recv_batch(&rx, &mut storage, &mut out).unwrap();
        assert_eq!(n, 4);
        let from = tx.local_addr().unwrap();
        assert!(out.iter().all(|r| r.from == from));
        assert_eq!(
            out.iter()
                .map(|r| (r.index, r.len, r.truncated))
                .collect::<Vec<_>>(),
            [(0, 5, false), (1, 5, false), (2, 5, false), (3, 16, true)]
        );
        assert_eq!(&storage[1][..5], &[1; 5]);
        assert_eq!(&storage[3][..], &[9; 16]);
    }

    #[test]
    fn ipv6_and_unknown_families_convert() {
        // SAFETY: all-zero is a valid value of these C structs.
        let mut storage: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: as above.
        let mut a6: libc::sockaddr_in6 = unsafe { MaybeUninit::zeroed().assume_init() };
        a6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        a6.sin6_port = 7000u16.to_be();
        a6.sin6_addr.s6_addr = Ipv6Addr::LOCALHOST.octets();
        a6.sin6_scope_id = 3;
        // SAFETY: a `sockaddr_in6` fits in a `sockaddr_storage`, whose alignment suffices.
        unsafe { std::ptr::write((&raw mut storage).cast(), a6) };
        assert_eq!(
            socket_addr(&storage),
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::LOCALHOST,
                7000,
                0,
                3
            )))
        );
        storage.ss_family = libc::AF_UNIX as libc::sa_family_t;
        assert_eq!(socket_addr(&storage), None);
    }
}
