//! System calls the standard library and `socket2` do not offer: `recvmmsg(2)`, so the
//! UDP backend takes a batch of datagrams with one call (and learns from a short batch
//! that the socket is empty, without a failing call to find out); `sendmsg(2)` with a
//! `UDP_SEGMENT` control message (generic segmentation offload: one call sends many
//! datagrams of one size); the `UDP_GRO` socket option and control message (the kernel
//! hands over coalesced datagrams of one flow with their segment size); and the path MTU
//! the kernel's route to a peer has (`IP_MTU` / `IPV6_MTU`). See the kernel's
//! `Documentation/networking/segmentation-offloads.rst` and `udp(7)`. Every `unsafe` block
//! has a `// SAFETY:` note; the shared-memory ring (the `myri-ring` crate) has its own.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

/// Most datagrams one [`recv_batch`] takes.
pub(crate) const MAX_BATCH: usize = 16;

/// `SOL_UDP` option and control message: the segment size of a segmentation-offload send
/// (`linux/udp.h`; the `libc` crate has it only for some targets).
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `SOL_UDP` option and control message: receive coalesced datagrams (`linux/udp.h`).
pub(crate) const UDP_GRO: libc::c_int = 104;
/// Most segments one segmentation-offload send carries (the kernel's `UDP_MAX_SEGMENTS`).
pub(crate) const MAX_SEGMENTS: usize = 64;
/// Bytes of control-message room per received datagram: one `cmsghdr` and an `int`, with
/// room to spare for a message the kernel adds that we do not ask for.
const CONTROL_LEN: usize = 64;

/// Control-message room, aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct ControlBuf([u8; CONTROL_LEN]);

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
    /// With receive coalescing on: the buffer holds datagrams of this many bytes one after
    /// the other (the last may be shorter), as the `UDP_GRO` control message said. `None`
    /// when the kernel added none (one datagram).
    pub(crate) segment: Option<usize>,
    /// The control messages were cut short or a `UDP_GRO` one was malformed (a size of
    /// zero, a wrong length): the buffer cannot be split safely.
    pub(crate) bad_control: bool,
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
/// many. `Err(WouldBlock)` when none was waiting. With `COALESCED` (the socket has
/// `UDP_GRO` on, [`set_gro`]) each entry also reads its control messages for the segment
/// size ([`Received::segment`]); without, the call sets up none (a constant, so the plain
/// path carries no test for it).
pub(crate) fn recv_batch<const COALESCED: bool, B: AsMut<[u8]>>(
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
    let mut control = [const { MaybeUninit::<ControlBuf>::uninit() }; MAX_BATCH];
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
        if COALESCED {
            let c = control[i].write(ControlBuf([0; CONTROL_LEN]));
            m.msg_hdr.msg_control = c.0.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = CONTROL_LEN as _;
        }
    }
    // SAFETY: `msgs[..n]` point at `n` iovecs, each covering one of the caller's buffers
    // (borrowed mutably for this call, so nothing else reads or writes them), and at `n`
    // address storages of the size given, and (when coalesced) at `n` control buffers of
    // the length given; all live on this frame until the call returns. The kernel writes
    // only within those and the message headers.
    // Through `syscall(2)`: see `socket_call`.
    let got = socket_call(unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            socket.as_raw_fd(),
            msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut::<libc::timespec>(),
        )
    })?;
    for (index, (m, a)) in msgs.iter().zip(&addrs).take(got).enumerate() {
        // SAFETY: `got <= n` and the first `n` entries were initialized above (the kernel
        // only wrote within them since).
        let (m, a) = unsafe { (m.assume_init_ref(), a.assume_init_ref()) };
        let Some(from) = socket_addr(a) else { continue };
        let (segment, bad_control) = if COALESCED {
            gro_segment(&m.msg_hdr)
        } else {
            (None, false)
        };
        out.push(Received {
            index,
            len: m.msg_len as usize,
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            from,
            segment,
            bad_control,
        });
    }
    Ok(got)
}

/// The `UDP_GRO` segment size among the control messages `msg` received, and whether they
/// were cut short or malformed.
fn gro_segment(msg: &libc::msghdr) -> (Option<usize>, bool) {
    let mut bad = msg.msg_flags & libc::MSG_CTRUNC != 0;
    let mut segment = None;
    #[allow(clippy::unnecessary_cast)] // `size_t` with glibc, `socklen_t` with musl
    let control_len = msg.msg_controllen as usize;
    if msg.msg_control.is_null() || control_len > CONTROL_LEN {
        return (None, bad || !msg.msg_control.is_null());
    }
    // SAFETY: `msg` was filled by the kernel: `msg_control` points at the caller's control
    // buffer (still alive and not written to) and `msg_controllen` is at most its length
    // (checked above), so the CMSG macros walk only within it.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: `CMSG_FIRSTHDR`/`CMSG_NXTHDR` return null or a header that lies whole
        // within the control buffer; the buffer is aligned for `cmsghdr`.
        let h = unsafe { &*cmsg };
        if h.cmsg_level == libc::SOL_UDP && h.cmsg_type == UDP_GRO {
            // SAFETY: `CMSG_LEN` only computes a length.
            let want = unsafe { libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) };
            if h.cmsg_len as usize != want as usize {
                bad = true;
            } else {
                // SAFETY: the header's length says an `int` of data follows it, within
                // the buffer; the data may be unaligned for `int`, so it is read unaligned.
                let size: libc::c_int =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
                match usize::try_from(size) {
                    Ok(s) if s > 0 => segment = Some(s),
                    _ => bad = true,
                }
            }
        }
        // SAFETY: as for `CMSG_FIRSTHDR`: `msg` describes the same valid buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    (segment, bad)
}

/// Sets an `int` socket option.
fn set_int_option(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is an `int` on this frame, its length given exactly; the
    // kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads an `int` socket option.
fn int_option(socket: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes (an `int`) into `value` and the
    // length back into `len`, both on this frame.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// Whether the kernel offers UDP segmentation offload on `socket` (Linux 4.18 and later
/// answer the `UDP_SEGMENT` option; a refusal at send time is still possible, see
/// [`send_segments`]).
pub(crate) fn gso_supported(socket: &impl AsRawFd) -> bool {
    int_option(socket, libc::SOL_UDP, UDP_SEGMENT).is_ok()
}

/// Turns receive coalescing (`UDP_GRO`) on or off: with it on, a receive may return
/// several datagrams of one flow in one buffer, which [`recv_batch`] with `coalesced`
/// reports.
pub(crate) fn set_gro(socket: &impl AsRawFd, on: bool) -> io::Result<()> {
    set_int_option(socket, libc::SOL_UDP, UDP_GRO, libc::c_int::from(on))
}

/// Asks the kernel to report the send errors it otherwise swallows for UDP (`IP_RECVERR`,
/// or `IPV6_RECVERR` on an IPv6 socket; `ip(7)`, `ipv6(7)`): a datagram dropped by a full
/// queue on its way out then fails its send with `ENOBUFS`. ICMP errors for the socket's
/// sends are then queued on its error queue too, which [`drain_errors`] empties.
pub(crate) fn set_recv_err(socket: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_int_option(socket, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)
    } else {
        set_int_option(socket, libc::IPPROTO_IP, libc::IP_RECVERR, 1)
    }
}

/// Empties the socket's error queue (`MSG_ERRQUEUE`; filled under [`set_recv_err`] by ICMP
/// errors, whose queued messages count against the receive buffer until read). Returns
/// how many it held, at most `max`.
pub(crate) fn drain_errors(socket: &impl AsRawFd, max: usize) -> usize {
    let mut drained = 0;
    let mut byte = [0u8; 1];
    while drained < max {
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: byte.len(),
        };
        // SAFETY: an all-zero `msghdr` is valid (no name, no control); it points at one
        // iovec on this frame covering `byte`, which outlives the call. The kernel writes
        // at most one byte there (the rest of the queued message is cut, MSG_TRUNC).
        let r = unsafe {
            let mut msg: libc::msghdr = MaybeUninit::zeroed().assume_init();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            libc::recvmsg(
                socket.as_raw_fd(),
                &raw mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            break;
        }
        drained += 1;
    }
    drained
}

/// Asks for a receive buffer of `bytes` (`SO_RCVBUF`, which the kernel caps at
/// `net.core.rmem_max`), and where it granted less, for the same past the cap
/// (`SO_RCVBUFFORCE`, allowed to a process with `CAP_NET_ADMIN`; refused otherwise, and
/// then the smaller buffer stays). Returns what the socket has then, as the kernel
/// reports it (twice the request: it counts its own bookkeeping in).
pub(crate) fn grow_recv_buffer(socket: &impl AsRawFd, bytes: usize) -> usize {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let _ = set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF, want);
    let got =
        |s: &_| int_option(s, libc::SOL_SOCKET, libc::SO_RCVBUF).map_or(0, |v| v.max(0) as usize);
    if got(socket) < bytes.saturating_mul(2) {
        let _ = set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want);
    }
    got(socket)
}

/// A socket call made straight through `syscall(2)`. The C library's wrappers of the
/// socket calls are thread cancellation points: in a process with more than one thread (an
/// MPI rank has several) each call sets and clears the calling thread's asynchronous
/// cancellation with atomic operations, about 20 ns a call here, on every send and every
/// poll of a busy-polling endpoint. Nothing here is ever cancelled, so the calls skip
/// that. Returns the call's result, or the error `errno` holds.
fn socket_call(result: libc::c_long) -> io::Result<usize> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result as usize)
    }
}

/// Receives one datagram into `buf` (`recvfrom(2)`, not waiting: the caller's sockets are
/// non-blocking) and says who sent it. A datagram longer than `buf` is cut short.
pub(crate) fn recv_from(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    let mut addr = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf` (borrowed mutably for
    // the call) and at most `len` bytes of address into `addr`, updating `len`; all live
    // on this frame or in the caller's borrow until the call returns.
    let got = socket_call(unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            socket.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
            0,
            addr.as_mut_ptr(),
            &raw mut len,
        )
    })?;
    // SAFETY: zeroed storage is a valid `sockaddr_storage`; the kernel wrote a whole
    // address of the socket's family (or nothing, leaving family 0) within it.
    let from = socket_addr(unsafe { addr.assume_init_ref() })
        .ok_or_else(|| io::Error::other("a datagram from an address that is not IP"))?;
    Ok((got, from))
}

/// Receives one datagram into `buf` from a connected socket, whose datagrams all come
/// from its peer (`recv(2)`, not waiting). A datagram longer than `buf` is cut short.
pub(crate) fn recv(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, borrowed mutably for
    // the call; no address is asked for (null pointers).
    socket_call(unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            socket.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
            0,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    })
}

/// Sends `data` as one datagram (`sendto(2)`): to `to`, or to the socket's connected peer
/// when `None`.
pub(crate) fn send_to(
    socket: &impl AsRawFd,
    data: &[u8],
    to: Option<SocketAddr>,
) -> io::Result<usize> {
    let addr = to.map(socket2::SockAddr::from);
    let (name, len) = match &addr {
        Some(a) => (a.as_ptr().cast::<libc::sockaddr>(), a.len()),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: the kernel reads `data` (borrowed for the call) and the address `addr`
    // holds (alive on this frame), `len` bytes of it, or none.
    socket_call(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            socket.as_raw_fd(),
            data.as_ptr(),
            data.len(),
            libc::MSG_NOSIGNAL,
            name,
            len,
        )
    })
}

/// Sends `header` then `payload` as one datagram, gathered by the kernel (`sendmsg(2)`
/// with two iovecs): to `to`, or to the socket's connected peer when `None`.
pub(crate) fn send_gather(
    socket: &impl AsRawFd,
    header: &[u8],
    payload: &[u8],
    to: Option<SocketAddr>,
) -> io::Result<usize> {
    let addr = to.map(socket2::SockAddr::from);
    let iov = [
        libc::iovec {
            iov_base: header.as_ptr().cast_mut().cast(),
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: payload.as_ptr().cast_mut().cast(),
            iov_len: payload.len(),
        },
    ];
    // SAFETY: all-zero is a valid value of this C struct; the fields used are set next.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    if let Some(a) = &addr {
        msg.msg_name = a.as_ptr().cast_mut().cast();
        msg.msg_namelen = a.len();
    }
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len();
    // SAFETY: `msg` points at the address (or none) and two iovecs over `header` and
    // `payload` (only read by the kernel despite the `*mut` in the C type), all alive on
    // this frame or in the caller's borrows until the call returns.
    socket_call(unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            socket.as_raw_fd(),
            &raw const msg,
            libc::MSG_NOSIGNAL,
        )
    })
}

/// Bytes the kernel charges the socket's receive queue now (`SO_MEMINFO`'s first word,
/// `SK_MEMINFO_RMEM_ALLOC`): what its queued datagrams cost, as tests check it.
#[cfg(test)]
pub(crate) fn queued_charge(socket: &impl AsRawFd) -> io::Result<usize> {
    /// `asm-generic/socket.h`.
    const SO_MEMINFO: libc::c_int = 55;
    let mut info = [0u32; 9];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes (the array's size) into `info`, which
    // lives on this frame, and updates `len`.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info[0] as usize)
}

/// Turns off UDP checksums on sends (`SO_NO_CHECK`): the kernel then refuses
/// segmentation offload with `EINVAL`, which tests use to check the fallback.
#[cfg(test)]
pub(crate) fn set_no_check(socket: &impl AsRawFd) -> io::Result<()> {
    /// `asm-generic/socket.h`.
    const SO_NO_CHECK: libc::c_int = 11;
    set_int_option(socket, libc::SOL_SOCKET, SO_NO_CHECK, 1)
}

/// Sends `data` as datagrams of `segment` bytes each (the last may be shorter) with one
/// `sendmsg` carrying a `UDP_SEGMENT` control message: to `to`, or to the socket's
/// connected peer when `None`. `data` holds at most [`MAX_SEGMENTS`] segments and one
/// datagram's worth of bytes. The kernel refuses with `EINVAL` or `EIO` when it (or the
/// route) cannot segment; nothing is sent then.
pub(crate) fn send_segments(
    socket: &impl AsRawFd,
    to: Option<SocketAddr>,
    data: &[u8],
    segment: u16,
) -> io::Result<usize> {
    let addr = to.map(socket2::SockAddr::from);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let mut control = ControlBuf([0; CONTROL_LEN]);
    // SAFETY: all-zero is a valid value of this C struct; the fields used are set next.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    if let Some(a) = &addr {
        msg.msg_name = a.as_ptr().cast_mut().cast();
        msg.msg_namelen = a.len();
    }
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    // SAFETY: `CMSG_SPACE` only computes a length.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    debug_assert!(space <= CONTROL_LEN);
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer is `CONTROL_LEN` bytes, aligned for `cmsghdr`, and
    // `msg_controllen` (one `u16` message's space) fits in it, so the first header and its
    // data lie within it; the data may be unaligned for `u16`, so it is written unaligned.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment);
    }
    // SAFETY: `msg` points at the address (or none), one iovec over `data` (only read by
    // the kernel despite the `*mut` in the C type) and the control buffer, all alive on
    // this frame until the call returns. Through `syscall(2)`: see `socket_call`.
    socket_call(unsafe { libc::syscall(libc::SYS_sendmsg, socket.as_raw_fd(), &raw const msg, 0) })
}

/// The largest UDP payload that leaves for `to` without IP fragmentation, as the kernel's
/// route says (the link MTU, or a smaller path MTU it learned), asked with a throwaway
/// socket connected to `to` (no packet is sent): `IP_MTU` less 28 bytes of headers over
/// IPv4, `IPV6_MTU` less 48 over IPv6. `local` picks the source address (its port is
/// ignored).
pub(crate) fn path_payload(local: SocketAddr, to: SocketAddr) -> io::Result<usize> {
    let mut from = local;
    from.set_port(0);
    let probe = std::net::UdpSocket::bind(from)?;
    probe.connect(to)?;
    let (mtu, headers) = if to.is_ipv4() {
        (int_option(&probe, libc::IPPROTO_IP, libc::IP_MTU)?, 28)
    } else {
        (int_option(&probe, libc::IPPROTO_IPV6, libc::IPV6_MTU)?, 48)
    };
    usize::try_from(mtu)
        .ok()
        .and_then(|m| m.checked_sub(headers))
        .ok_or_else(|| io::Error::other(format!("the kernel gave a path mtu of {mtu}")))
}

/// Room on the file system of `file` (`fstatvfs(3)`): bytes free to an unprivileged
/// user, or `None` when it reports no size at all (ramfs: no limit).
pub(crate) fn free_bytes(file: &impl AsRawFd) -> io::Result<Option<u64>> {
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: the kernel writes one `statvfs` into `st`, which is that big and lives on
    // this frame; the descriptor stays open for the call.
    let r = unsafe { libc::fstatvfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call succeeded, so it initialized `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    let (blocks, avail, frsize) = (st.f_blocks as u64, st.f_bavail as u64, st.f_frsize as u64);
    Ok((blocks != 0).then(|| avail.saturating_mul(frsize)))
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
        let e = recv_batch::<false, _>(&rx, &mut storage, &mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        for i in 0..3u8 {
            tx.send_to(&[i; 5], rx.local_addr().unwrap()).unwrap();
        }
        tx.send_to(&[9; 40], rx.local_addr().unwrap()).unwrap();
        // Loopback queues before send_to returns.
        let n = recv_batch::<false, _>(&rx, &mut storage, &mut out).unwrap();
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
    fn the_direct_calls_send_and_receive_as_the_library_does() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let (to, from) = (rx.local_addr().unwrap(), tx.local_addr().unwrap());
        let mut buf = [0u8; 8];
        let e = recv_from(&rx, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            recv(&rx, &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );

        // To an address, then gathered, then over a connected socket.
        assert_eq!(send_to(&tx, b"abc", Some(to)).unwrap(), 3);
        assert_eq!(
            send_gather(&tx, b"head", b"er+payload", Some(to)).unwrap(),
            14
        );
        tx.connect(to).unwrap();
        assert_eq!(send_to(&tx, b"x", None).unwrap(), 1);
        assert_eq!(send_gather(&tx, b"", b"yz", None).unwrap(), 2);

        assert_eq!(recv_from(&rx, &mut buf).unwrap(), (3, from));
        assert_eq!(&buf[..3], b"abc");
        // Longer than the buffer: cut short, as recvfrom(2) does.
        assert_eq!(recv_from(&rx, &mut buf).unwrap(), (8, from));
        assert_eq!(&buf, b"header+p");
        assert_eq!(recv(&rx, &mut buf).unwrap(), 1);
        assert_eq!(buf[0], b'x');
        assert_eq!(recv(&rx, &mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"yz");
        assert_eq!(
            recv(&rx, &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );

        // No destination on a socket that is not connected: the kernel's error, typed.
        let lone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = send_to(&lone, b"?", None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EDESTADDRREQ));
    }

    #[test]
    fn a_receive_buffer_grows_past_the_hosts_cap_where_allowed() {
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let want = rmem_max + (1 << 20);
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let got = grow_recv_buffer(&s, want);
        assert_eq!(
            got,
            int_option(&s, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap() as usize
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(got, 2 * want, "root may pass rmem_max");
        } else {
            assert!(got >= 2 * rmem_max.min(want), "{got}");
        }
    }

    /// A message header over `control`, holding one control message of `level`, `kind`
    /// and `data`, with the length field `len` (the right one when `None`).
    fn one_control_message(
        control: &mut ControlBuf,
        level: libc::c_int,
        kind: libc::c_int,
        data: &[u8],
        len: Option<usize>,
    ) -> libc::msghdr {
        // SAFETY: all-zero is a valid value of this C struct.
        let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        msg.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: `CMSG_SPACE` only computes a length.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(data.len() as u32) } as _;
        // SAFETY: the buffer is aligned for `cmsghdr` and `CONTROL_LEN` bytes, more than
        // one message with `data.len()` (at most 8) bytes of data needs.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = level;
            (*c).cmsg_type = kind;
            (*c).cmsg_len = len.unwrap_or(libc::CMSG_LEN(data.len() as u32) as usize) as _;
            std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
        }
        msg
    }

    #[test]
    fn control_messages_give_the_segment_size_and_bad_ones_are_flagged() {
        let mut c = ControlBuf([0; CONTROL_LEN]);
        let gro = |c: &mut ControlBuf, data: &[u8], len| {
            gro_segment(&one_control_message(c, libc::SOL_UDP, UDP_GRO, data, len))
        };
        assert_eq!(
            gro(&mut c, &1400i32.to_ne_bytes(), None),
            (Some(1400), false)
        );
        assert_eq!(
            gro(&mut c, &0i32.to_ne_bytes(), None),
            (None, true),
            "size 0"
        );
        assert_eq!(gro(&mut c, &(-5i32).to_ne_bytes(), None), (None, true));
        assert_eq!(gro(&mut c, &[1, 2], None), (None, true), "short data");
        // A length field past the buffer ends the walk without reading beyond it.
        assert_eq!(gro(&mut c, &1400i32.to_ne_bytes(), Some(4096)).0, None);
        // Another kind of message is skipped.
        let m = one_control_message(&mut c, libc::SOL_IP, 8, &7i32.to_ne_bytes(), None);
        assert_eq!(gro_segment(&m), (None, false));
        let mut m = one_control_message(&mut c, libc::SOL_UDP, UDP_GRO, &9i32.to_ne_bytes(), None);
        m.msg_flags = libc::MSG_CTRUNC;
        assert_eq!(gro_segment(&m), (Some(9), true), "cut short");
        m.msg_controllen = (CONTROL_LEN + 1) as _;
        assert_eq!(gro_segment(&m), (None, true), "longer than the buffer");
    }

    #[test]
    fn segments_go_out_whole_and_come_back_coalesced() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(gso_supported(&tx));
        set_gro(&rx, true).unwrap();
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let to = Some(rx.local_addr().unwrap());
        assert_eq!(send_segments(&tx, to, &data, 1000).unwrap(), 2500);
        let mut storage = vec![vec![0u8; 4096]; 1];
        let mut out = Vec::new();
        recv_batch::<true, _>(&rx, &mut storage, &mut out).unwrap();
        assert_eq!(
            (out[0].len, out[0].segment, out[0].bad_control),
            (2500, Some(1000), false)
        );
        assert_eq!(&storage[0][..2500], &data[..]);
        // Far more segments than any kernel takes (64, 128 since Linux 6.9): refused.
        let e = send_segments(&tx, to, &vec![0; 30_000], 100).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        // Loopback's MTU is 64 KiB; the kernel says at most an IP packet's 65,535 bytes.
        assert_eq!(
            path_payload(tx.local_addr().unwrap(), rx.local_addr().unwrap()).unwrap(),
            65_535 - 28
        );
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
