//! The transport layer of myri: the library frameworks and applications link.
//!
//! # Backends
//!
//! An [`Endpoint`] is opened from a URL (see [`url`] for the grammar) on one of three
//! backends, each an unreliable datagram channel:
//!
//! | URL                | backend                                                           |
//! |--------------------|-------------------------------------------------------------------|
//! | `sim://name`       | a simulated myri board on an in-process fabric, in virtual time (the default, no set-up) |
//! | `udp://host:port`  | a UDP socket (mio): processes on any machines                      |
//! | `shm://name`       | a shared-memory region under `/dev/shm`: two processes of one host |
//!
//! # Reliable or raw, and the calls
//!
//! Each runs *reliable* (RPP, the `myri-rpp` crate, on top: exactly-once, in-order
//! delivery of messages up to 64 MiB, peer failure and restart detection; on `shm://`,
//! whose rings lose nothing and keep order, the backend's own native reliability with
//! the same contract and no RPP, unless [`Options::rpp_over_shm`]) or *raw*
//! (datagrams as the backend carries them), as the URL's `reliable=` parameter or
//! [`Options::reliable`] says. The shape is that of a libfabric provider or an Open MPI
//! BTL: [`Capabilities`] say what the endpoint can do; peers are small integer handles
//! ([`Peer`]) after [`Endpoint::insert_addr`]; [`Endpoint::send`] and [`Endpoint::recv`]
//! move messages, [`Endpoint::poll_completion`] reports acknowledged sends and peer
//! failures; [`Endpoint::progress`] does the work, called by the application or by a
//! background thread ([`BackgroundEndpoint`]); a UDP endpoint can be registered with the
//! application's `mio::Poll`. Errors are typed, one type per operation (see [`error`]);
//! a full queue is [`SendErrorKind::WouldBlock`] with the buffer handed back.
//!
//! # A first program
//!
//! ```
//! use myri_transport::Endpoint;
//! let mut a = Endpoint::open("sim://doc-a?world=doc").unwrap();
//! let mut b = Endpoint::open("sim://doc-b?world=doc").unwrap();
//! let to_b = a.insert_addr("sim://doc-b").unwrap();
//! b.insert_addr("sim://doc-a").unwrap();
//! let mut msg = a.alloc(5);
//! msg.copy_from_slice(b"hello");
//! a.send(to_b, msg).unwrap();
//! let got = loop {
//!     a.progress();
//!     if let Some(d) = b.recv() {
//!         break d;
//!     }
//! };
//! assert_eq!(&got.data[..], b"hello");
//! ```
//!
//! # Copy-free handoff
//!
//! Seed 000, Buffers; CLF's copy-free mechanism: see [`buffer`].
//! [`Endpoint::alloc`] gives a buffer in the backend's registered memory, `send` moves it
//! in, received messages are views that go back to the backend on drop, and a heap
//! buffer handed out when registered memory ran out is copied at send time, counted in
//! [`Stats::copied_sends`]. Raw mode sends and receives with no copy on every backend.
//! Reliable mode receives in place (a whole in-order message is a view of the datagram it
//! came in) and, on UDP, sends with a gathered `sendmsg` straight from the application's
//! buffer; on sim, the application's DMA buffer of a KiB or more is lent to the board
//! while RPP keeps the message (both read it, neither writes it) and each transmission is
//! a DMA from it, with no copy (a shorter message is copied behind its header, which
//! costs less than the second DMA); the buffer comes back writable in
//! [`Completion::Sent`]. A message longer than
//! a DMA buffer, and shm with [`Options::rpp_over_shm`] (whose rings send only from their
//! own slots), copy each transmitted packet once ([`Stats::transmit_copies`]). Native reliability on shm sends a
//! message of one slot from the application's slot and delivers it as a view, with no
//! copy; a longer one is copied into slots and reassembled once; a short one (at most
//! [`Capabilities::inject_size`], 64 bytes) is copied into its ring record, as
//! libfabric's inject does, so the receiver reads the ring alone.
//!
//! # What this layer does not do
//!
//! No connection set-up handshake beyond RPP's
//! introduction (peers are inserted by address, or accepted with
//! [`Options::accept_unknown_peers`]); no encryption or authentication (a peer is whoever
//! sends from its address); no congestion control beyond RPP's window and credit; raw mode
//! neither retransmits nor orders; a shm endpoint has exactly one peer, the other side of
//! its region; a sim world holds at most 16 endpoints of one process.
//!
//! This crate is the outermost driver of the stack: it is where clocks are read and
//! threads are spawned for the layers below, which take time as an argument.

#[cfg(not(target_os = "linux"))]
compile_error!(
    "myri-transport runs on Linux only: its udp:// backend uses recvmmsg, UDP_SEGMENT and \
     UDP_GRO, and its shm:// backend regions under /dev/shm"
);

pub(crate) mod backend;
pub mod background;
pub mod buffer;
pub mod endpoint;
pub mod error;
pub(crate) mod sys;
pub mod url;

/// Simulated worlds built with settings of the caller's: faults, the modelled board's
/// timing, how the clock runs and where the control programs run (see [`sim::SimWorld`]).
pub mod sim {
    pub use crate::backend::sim::{HEADER_LEN, SimClock, SimWorld, TICK_NANOS, WorldConfig};
}

pub use backend::shm::{
    SLOT_LEN as SHM_SLOT_LEN, SLOTS as SHM_SLOTS, layout as shm_layout,
    region_path as shm_region_path,
};
pub use background::BackgroundEndpoint;
pub use buffer::{Buf, ExternalBytes, RecvBuf, SEND_INLINE_MAX};
pub use endpoint::{
    Capabilities, Completion, DEFAULT_CONNECTION_ID, Delivery, Endpoint, MsgId, Options, Peer,
    Stats,
};
pub use error::{
    InsertError, OpenError, PeerFailure, RegionProblem, RegisterError, SendError, SendErrorKind,
    SpawnError, WorldError,
};
pub use url::{Address, Congestion, Integrity, ResolveError, Scheme, Url, UrlError, UrlKey};

/// Locks a mutex, ignoring poisoning: every critical section in this crate leaves its
/// state consistent before anything that could panic.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(recovered)
}

/// The guard of a poisoned lock. Cold, so that the branch to it is laid out away from
/// the lock calls inlined into hot paths.
#[cold]
fn recovered<G>(poisoned: std::sync::PoisonError<G>) -> G {
    poisoned.into_inner()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_lock_poisoned_by_a_panic_still_gives_its_state() {
        let m = Arc::new(Mutex::new(7u32));
        let held = m.clone();
        let panicked = std::thread::spawn(move || {
            let mut g = held.lock().expect("first lock");
            *g = 8;
            panic!("poisons the lock on purpose");
        })
        .join();
        assert!(panicked.is_err() && m.is_poisoned());
        assert_eq!(*super::lock(&m), 8);
    }
}
