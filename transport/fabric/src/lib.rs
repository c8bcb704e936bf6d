//! myri as a libfabric provider: `libmyri-fi.so`, which libfabric loads from
//! `FI_PROVIDER_PATH`, so that programs written to libfabric (`fi_pingpong`, Open MPI's
//! `mtl:ofi`) run over `myri-transport` unchanged.
//!
//! # What it does
//!
//! - `fi_getinfo` answers, honestly, `FI_EP_RDM` (a reliable transport endpoint: RPP over
//!   `udp://`, or the native reliability of `shm://`) and `FI_EP_DGRAM` (a raw one: a
//!   socket's datagrams, or the region's raw slots, a datagram of at most one slot, sent
//!   once the other side's process has taken the region) with `FI_MSG | FI_TAGGED |
//!   FI_SEND | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV`, addresses `FI_SOCKADDR_IN` on `udp://`, a 32-byte
//!   `FI_FORMAT_UNSPEC` name on `shm://` (or `FI_ADDR_STR`, the URL, on either), manual
//!   progress (automatic when the hints ask for it), no mode bits; `FI_ENODATA` for
//!   anything else (RMA, atomics, other endpoint types and address formats, ordering a
//!   DGRAM endpoint does not keep).
//! - Fabric, domain, endpoint, address vector (`FI_AV_MAP` and `FI_AV_TABLE`), completion
//!   queues of every format (`fi_cq_read`, `fi_cq_readfrom`, `fi_cq_readerr`, and
//!   `fi_cq_sread` by polling when a wait object was asked for), counters, memory
//!   registration (a key and a descriptor; an RDM send over `udp://` of at least 16 KiB
//!   whose `desc` is a region holding its buffer goes from that buffer without a copy
//!   and completes once acknowledged; DGRAM and other sends copy: see
//!   [`endpoint`], "Sending from registered memory"), an event queue that stays empty,
//!   `fi_getname`/`fi_setname`, `fi_close` of everything, `fi_control` (`FI_ENABLE`,
//!   `FI_GETOPSFLAG`/`FI_SETOPSFLAG`, `FI_GETFIDFLAG`).
//! - Messages: send, sendv, sendmsg, inject, senddata, injectdata, recv, recvv, recvmsg,
//!   and their tagged forms with ignore bits, `FI_DIRECTED_RECV`, `FI_PEEK`, `FI_CLAIM`,
//!   `FI_DISCARD` and `FI_REMOTE_CQ_DATA`; unexpected messages queued in arrival order
//!   and matched in posting order ([`endpoint`]); sends to self; `fi_cancel` of posted
//!   receives; truncation as an `FI_ETRUNC` error entry with nothing written past the
//!   buffer; RDM messages up to 64 MiB over `udp://` and 2 MiB over `shm://`. Tag and CQ
//!   data travel in a 20-byte header in
//!   front of each transport message ([`wire`]).
//! - Single-copy large messages between processes of one host ([`cma`]): an RDM send of
//!   at least 16 KiB from one buffer over `shm://` or an auto-shm region goes as a
//!   descriptor, and the receiver reads the bytes straight from the sender's buffer into
//!   the posted one with `process_vm_readv`; the send completes once the receiver has
//!   read them. Only toward a peer whose probe (a random nonce read back from the
//!   sender's memory) succeeded; copies wherever the kernel forbids it (seccomp),
//!   across pid namespaces, and with `FI_MYRI_CMA=0`.
//! - Manual progress: reading a completion queue or counter, and sending, drive the
//!   endpoints bound to it; except the queue read right after one that returned entries,
//!   which takes what the queue holds (an application that reads until the queue is
//!   empty, as Open MPI does, then answers at once, instead of after a progress pass).
//!   Automatic progress (`FI_PROGRESS_AUTO` in the hints' domain attributes, data or
//!   control: the provider's two are one): the domain runs a thread that drives its
//!   enabled endpoints, polling while they have work and backing off to a pass every
//!   100 us when idle ([`objects::AutoProgress`]), so sends finish and messages land
//!   while the application computes; queue reads still drive as well.
//! - Peers on one host over shared memory, automatically (auto-shm, on unless
//!   `FI_MYRI_SHM=0`): an RDM endpoint over `udp://` reaches an address-vector entry
//!   whose address is this host's (loopback or a local interface) over an `shm://`
//!   region named after both `udp://` addresses, once the peer's provider has opened its
//!   side and nothing sent to it over `udp://` is unacknowledged; until then, and with a
//!   peer that never opens its side, over `udp://`. Each direction switches once, in
//!   order ([`endpoint`] has the argument); completions still name the peer's
//!   address-vector entry. Off for DGRAM endpoints and whenever `FI_MYRI_VIA` or
//!   `FI_MYRI_RANK_PORTS` put a proxy between the ranks.
//!
//! # What it does not do
//!
//! No RMA, atomics, collectives, scalable or shared contexts, multi-receive, wait sets
//! or file-descriptor wait objects (`fi_cq_sread` polls). Sends other than the
//! copy-free and single-copy ones copy the caller's bytes into the transport's
//! registered memory, and a receive copies the message into the posted buffer (an
//! unexpected message held in registered memory is copied out once more); such a send
//! completes once every packet of it has left (over `udp://`: RPP's windows and pacer
//! no longer hold any back; over `shm://`: the last piece is on the ring), not when the
//! peer has it, so a lost packet is resent only while the application keeps progressing
//! (or, with automatic progress, the domain's thread does). Messages longer than the
//! `shm://` ring carries at once (2 MiB) go in pieces ([`wire`]). A peer that fails
//! before a send's packets left completes that send with `FI_EIO`; later sends to it
//! fail until it is back (a new incarnation over `udp://`, a new process on an `shm://`
//! region; see [`endpoint`] for a peer that restarts on a region). Under injected loss the tests run `fi_pingpong` through `myri proxy`, and the
//! MPI programs through `myri proxy --mesh` (`FI_MYRI_RANK_PORTS`: each rank binds one
//! address and names itself by its shadow address at the proxy, so every rank still sees
//! every other at the address in its address vector).
//!
//! # Loading it
//!
//! Cargo names the library `libmyri_fabric.so`; libfabric wants `libmyri-fi.so`.
//! `transport/fabric/install.sh [profile]` builds it and copies it to
//! `target/<profile>/fi/libmyri-fi.so`; then
//!
//! ```text
//! FI_PROVIDER_PATH=$PWD/target/release/fi fi_info -p myri
//! ```
//!
//! The tests do the same copy themselves. Environment variables (listed by `fi_info -e`):
//! `FI_MYRI_TRANSPORT` (`udp` or `shm`), `FI_MYRI_ADDR` (the IPv4 address endpoints
//! bind to, default `127.0.0.1`; set it to the host's address to reach other hosts),
//! `FI_MYRI_PORT` (the first endpoint's UDP port, default any), `FI_MYRI_VIA`
//! (`udp://A=udp://B,...`: send to peer A through B, a fault-injecting proxy such as
//! `myri proxy` in front of A; A then hears from the proxy's address, which is in no
//! address vector, so its receives see `FI_ADDR_NOTAVAIL` as the source),
//! `FI_MYRI_RANK_PORTS` (`BIND[,ADVERTISE]`: the first endpoint of the process of rank R,
//! from `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `PMIX_RANK` or `SLURM_PROCID`, binds port
//! BIND+R and gives port ADVERTISE+R, or `udp://HOST:P+R`, as its name: the shadow
//! address of a `myri proxy --mesh` in front of the ranks; a rank is unique across hosts,
//! as the shadow addresses at one proxy must be), `FI_MYRI_CC` (`none`, `newreno`, `cubic`
//! or `bbr`, RPP's congestion controller over `udp://`, default `cubic`),
//! `FI_MYRI_PACING=0` (pacing off), `FI_MYRI_MTU` (the largest `udp://` datagram toward
//! every peer, as a URL's `mtu=`; default each peer's path MTU; one it cannot use fails
//! `fi_endpoint` with `-FI_EINVAL`), `FI_MYRI_PEER_SOCKET=0`
//! (an endpoint's one `udp://` peer gets no socket of its own, see
//! `myri_transport::Options::peer_socket`),
//! `FI_MYRI_SHM=0` (auto-shm off: peers of this host
//! over `udp://` too, as the tests and `compare.sh` that measure UDP set),
//! `FI_MYRI_CMA=0` (no single-copy reads: large messages over `shm://` copied through
//! the region, see [`cma`]) and `FI_MYRI_STATS=1` (each endpoint prints, when closed,
//! how many messages it sent and received over `udp://` and over `shm://`, and how many
//! of those went single-copy).
//!
//! The provider declines libfabric's utility layering over its DGRAM endpoint (the
//! `fi_getinfo` a utility provider makes with libfabric's internal `OFI_CORE_PROV_ONLY`
//! flag): `myri;ofi_rxd` would be a second, slower RDM endpoint that libfabric lists
//! before this provider's own, and Open MPI, which matches `mtl_ofi_provider_include`
//! by prefix, would take it. So MPI needs nothing but the include list:
//!
//! ```text
//! mpirun --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include myri \
//!     -x FI_PROVIDER_PATH ...
//! ```
//!
//! `FI_MYRI_LAYERING=1` allows the layering (to compare against `myri;ofi_rxd`).
//!
//! Over `shm://` each pair of endpoints shares a region `/dev/shm/myri-mf-<a>-<b>`, and
//! with auto-shm each pair of `udp://` endpoints of one host
//! `/dev/shm/myri-ma<netns>-<a>-<b>` (about 8 MiB each, reserved when made: a region that
//! does not fit `/dev/shm` fails with `FI_ENOSPC` over `shm://`, and leaves the peer on
//! `udp://` with auto-shm, rather than a `SIGBUS` later); a process killed before
//! closing its endpoints leaves its regions there.

pub mod abi;
mod capi;
pub mod cma;
pub mod endpoint;
pub mod info;
pub mod objects;
pub mod wire;

pub use capi::{PARAMS, fi_prov_ini};
