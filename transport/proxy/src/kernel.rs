//! What the kernel does with the proxy's sockets before the proxy sees a datagram: the
//! receive buffers it is asked to keep, and the datagrams it dropped because one was full.
//!
//! A proxy that injects loss must not lose datagrams of its own unnoticed: a burst larger
//! than a socket's receive buffer is dropped by the kernel, and a user would take it for
//! the injected loss. The proxy asks for large buffers, and reads each socket's drop count,
//! the per-socket counter the `SO_RXQ_OVFL` control message reports (`sk_drops`), from
//! `/proc/net/udp` and `/proc/net/udp6` by the socket's inode: the same number, without a
//! `recvmsg` with control messages on every datagram (and without `unsafe` code).

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

/// The receive and send buffer the proxy asks for on every socket (the kernel may cap it at
/// `net.core.rmem_max` / `wmem_max`).
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Asks for `bytes` of receive and send buffer on `socket`; returns the receive buffer the
/// kernel granted (it reports twice what it keeps for data), if it says.
pub fn enlarge_buffers(socket: &impl AsFd, bytes: usize) -> Option<usize> {
    let s = socket2::SockRef::from(socket);
    // A refusal leaves the default buffers: the proxy works, and counts what they drop.
    let _ = s.set_recv_buffer_size(bytes);
    let _ = s.set_send_buffer_size(bytes);
    s.recv_buffer_size().ok()
}

/// The inode of a socket, which names it in `/proc/net/udp`.
pub fn socket_inode(socket: &impl AsFd) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let fd = socket.as_fd().as_raw_fd();
    std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|m| m.ino())
}

/// The kernel's drop count of the UDP socket with inode `inode`, from `/proc/net/udp` and
/// `/proc/net/udp6`; `None` when no such socket is listed (not Linux, or closed).
pub fn socket_drops(inode: u64) -> Option<u64> {
    ["/proc/net/udp", "/proc/net/udp6"]
        .into_iter()
        .find_map(|path| {
            let table = std::fs::read_to_string(path).ok()?;
            drops_in(&table, inode)
        })
}

/// The `drops` column of the row of `table` (the text of `/proc/net/udp`) whose `inode`
/// column is `inode`.
pub fn drops_in(table: &str, inode: u64) -> Option<u64> {
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    // The header names "tx_queue rx_queue" and "tr tm->when" as one column each, where rows
    // have two fields: count the row's fields from the end, where "inode ... drops" sit.
    let from_end = |name: &str| header.iter().rev().position(|h| *h == name);
    let (inode_back, drops_back) = (from_end("inode")?, from_end("drops")?);
    lines.find_map(|row| {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let back = |k: usize| fields.len().checked_sub(k + 1).map(|i| fields[i]);
        let ino: u64 = back(inode_back)?.parse().ok()?;
        (ino == inode)
            .then(|| back(drops_back)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  133: 0100007F:1B58 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 5125811 2 0000000000000000 0
  134: 0100007F:1D4C 0100007F:1B58 01 00000000:00034000 00:00000000 00000000     0        0 5125812 2 0000000000000000 4711
";

    #[test]
    fn the_drops_column_of_the_socket_by_inode() {
        assert_eq!(drops_in(TABLE, 5125811), Some(0));
        assert_eq!(drops_in(TABLE, 5125812), Some(4711));
        assert_eq!(drops_in(TABLE, 42), None);
        assert_eq!(drops_in("", 5125811), None);
        assert_eq!(drops_in("garbage\nmore garbage", 5125811), None);
    }

    /// A socket nobody reads, sent more than its receive buffer holds: the kernel's drops
    /// show in its count.
    #[test]
    fn a_full_receive_buffer_is_counted() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4096)
            .unwrap();
        let inode = socket_inode(&rx).unwrap();
        assert_eq!(
            socket_drops(inode),
            Some(0),
            "a new socket has dropped nothing"
        );
        let to = rx.local_addr().unwrap();
        for _ in 0..200 {
            tx.send_to(&[7u8; 1000], to).unwrap();
        }
        // Loopback delivers within the send, or in the kernel's softirq thread soon after
        // on a busy host: the count may take a few turns of the scheduler to show the
        // drops (a bounded count of them, far more than that takes).
        let mut drops = socket_drops(inode).unwrap();
        for _ in 0..100_000 {
            if drops > 0 {
                break;
            }
            std::thread::yield_now();
            drops = socket_drops(inode).unwrap();
        }
        assert!(drops > 0 && drops < 200, "{drops}");
    }
}
