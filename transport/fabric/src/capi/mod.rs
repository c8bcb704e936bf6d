//! The C surface: `fi_prov_ini` and every function libfabric calls through the tables
//! this provider hands out. All of the provider's `unsafe` code is here.
//!
//! Each object handed to C is a `#[repr(C)]` Rust struct whose first field is the C
//! `fid_*` struct, boxed; a fid pointer from C is used only after it is found in the
//! registry of live objects with the right class, so a stale, foreign or null fid gets
//! `-FI_EINVAL` instead of a crash. Every entry point runs its body under
//! `catch_unwind` and answers a panic with `-FI_EOTHER`.

#![allow(unsafe_code)]

use crate::abi::*;
use crate::endpoint::{AppIo, EpType, FabricEndpoint, Posted, Probe, Target, transport_options};
use crate::info::{self, Answer, Backend, Hints};
use crate::objects::{
    AddressVector, AutoProgress, Av, Cntr, CompletionQueue, Counter, Cq, Progress, lock,
};
use crate::wire::{HEADER_LEN, Header};
use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const API_VERSION: u32 = fi_version(1, 17);
const PROV_VERSION: u32 = fi_version(0, 1);

// ---- Guards and the registry of live objects -----------------------------------------

fn guard(f: impl FnOnce() -> Result<isize, i32>) -> isize {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => e as isize,
        Err(_) => -(FI_EOTHER as isize),
    }
}

fn guard_int(f: impl FnOnce() -> Result<isize, i32>) -> c_int {
    guard(f) as c_int
}

/// Live objects by address: looked up on every call from C (each `fi_cq_read` of a
/// polling loop), so hashed by foldhash rather than SipHash (the keys are our own heap
/// addresses, not chosen by anyone).
type Registry = foldhash::HashMap<usize, usize>;

static LIVE: Mutex<Option<Registry>> = Mutex::new(None);

fn register<T>(obj: Box<T>, class: usize) -> *mut T {
    let p = Box::into_raw(obj);
    lock(&LIVE)
        .get_or_insert_with(Registry::default)
        .insert(p as usize, class);
    p
}

fn is_live(p: *const c_void, class: usize) -> bool {
    !p.is_null() && lock(&LIVE).as_ref().and_then(|m| m.get(&(p as usize))) == Some(&class)
}

fn class_of(p: *const c_void) -> Option<usize> {
    lock(&LIVE).as_ref()?.get(&(p as usize)).copied()
}

/// The live object of `class` at `p`.
fn obj<'a, T>(p: *const c_void, class: usize) -> Result<&'a T, i32> {
    if !is_live(p, class) {
        return Err(-FI_EINVAL);
    }
    // SAFETY: the registry holds only pointers from `register` of a `T` of this class
    // that were not closed yet; objects are shared (`&`) and mutate through mutexes.
    Ok(unsafe { &*(p as *const T) })
}

/// Removes `p` from the registry and frees it.
fn unregister<T>(p: *mut T, class: usize) -> Result<(), i32> {
    let removed = lock(&LIVE)
        .as_mut()
        .and_then(|m| m.remove_entry(&(p as usize)));
    match removed {
        Some((_, c)) if c == class => {
            // SAFETY: registered from `Box::into_raw` of a `T` and now out of the
            // registry, so no other call finds it again.
            drop(unsafe { Box::from_raw(p) });
            Ok(())
        }
        Some((k, c)) => {
            lock(&LIVE)
                .get_or_insert_with(Registry::default)
                .insert(k, c);
            Err(-FI_EINVAL)
        }
        None => Err(-FI_EINVAL),
    }
}

/// Writes `value` through `out`, a pointer from C checked for null.
fn put<T>(out: *mut T, value: T) -> Result<(), i32> {
    if out.is_null() {
        return Err(-FI_EINVAL);
    }
    // SAFETY: C gave a non-null pointer to space for a `T` (the libfabric contract).
    unsafe { out.write(value) };
    Ok(())
}

/// A C string argument, or `None` for null.
fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null C strings from libfabric are NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// A reference to a C struct argument, or `None` for null.
fn c_ref<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: libfabric passes either null or a valid struct for the call's duration.
    unsafe { p.as_ref() }
}

// ---- The provider ----------------------------------------------------------------------

struct Provider(UnsafeCell<FiProvider>);
// SAFETY: libfabric reads the provider struct; this crate never writes it after start.
unsafe impl Sync for Provider {}

static PROVIDER: Provider = Provider(UnsafeCell::new(FiProvider {
    version: PROV_VERSION,
    fi_version: API_VERSION,
    context: FiContext {
        internal: [std::ptr::null_mut(); 4],
    },
    name: c"myri".as_ptr(),
    getinfo: Some(getinfo),
    fabric: Some(fabric_open),
    cleanup: Some(cleanup),
}));

type ParamDefine =
    unsafe extern "C" fn(*const FiProvider, *const c_char, c_int, *const c_char, ...) -> c_int;

/// The provider's environment variables, as `fi_info -e` lists them.
pub const PARAMS: [(&CStr, &CStr); 13] = [
    (
        c"transport",
        c"Backend: udp (processes on any hosts) or shm (processes of one host). Default: udp",
    ),
    (
        c"addr",
        c"IPv4 address endpoints bind to (peers must reach it). Default: 127.0.0.1",
    ),
    (
        c"port",
        c"UDP port of the first endpoint (later ones take any). Default: 0 (any)",
    ),
    (
        c"via",
        c"Send to some udp peers through other addresses, as udp://A=udp://B,... (a fault-injecting proxy B in front of peer A). Default: none",
    ),
    (
        c"rank_ports",
        c"BIND[,ADVERTISE]: the first endpoint of the process of rank R (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID) binds port BIND+R and names itself (fi_getname) port ADVERTISE+R, or udp://HOST:P+R for ADVERTISE=udp://HOST:P (a myri proxy --mesh in front of the ranks). Overrides port. Default: none",
    ),
    (
        c"cc",
        c"RPP's congestion controller over udp (FI_EP_RDM): cubic, bbr, newreno or none. Default: cubic",
    ),
    (
        c"pacing",
        c"0: RPP sends bursts unpaced over udp (FI_EP_RDM). Default: 1 (paced)",
    ),
    (
        c"peer_socket",
        c"0: an endpoint with one udp peer sends and receives on its shared socket alone. Default: 1 (the one peer gets a socket of its own, connected to it: the kernel skips a route lookup per datagram each way)",
    ),
    (
        c"mtu",
        c"The largest udp datagram, header included, toward every peer (as a udp:// URL's mtu=, e.g. 1500 for a path of Ethernet frames). Default: each peer's path MTU as the kernel's route gives it (64 KiB on loopback). A value that is not a usable size fails fi_endpoint with -FI_EINVAL",
    ),
    (
        c"shm",
        c"0: a udp RDM endpoint talks to peers of this host over udp too. Default: 1 (over a shared-memory region once the peer's provider opened its side; always off with via or rank_ports)",
    ),
    (
        c"cma",
        c"0: no single-copy reads (process_vm_readv) between processes of one host; large messages over shm are copied through the region. Default: 1 (on toward each peer whose probe succeeds)",
    ),
    (
        c"stats",
        c"1: each endpoint prints to stderr, when closed, how many messages it sent and received over udp and over shm. Default: 0",
    ),
    (
        c"layering",
        c"1: let libfabric's utility providers layer over this provider's DGRAM endpoint (myri;ofi_rxd, a second RDM endpoint listed before this provider's own). Default: 0",
    ),
];

/// The flag libfabric's utility providers (`ofi_rxd`, `ofi_rxm`) set on the `fi_getinfo`
/// that looks for a core provider to layer over (`OFI_CORE_PROV_ONLY` in libfabric's
/// `ofi.h`, bit 59 since 1.6).
const OFI_CORE_PROV_ONLY: u64 = 1 << 59;

/// Whether a `fi_getinfo` with `flags` is a utility provider looking for something to
/// layer over, and `FI_MYRI_LAYERING` (`layering`) does not allow it. The provider's own
/// RDM endpoint is reliable already; `ofi_rxd` over its DGRAM endpoint would be a second,
/// slower one that libfabric lists first (external providers come after its ordered
/// list), and Open MPI, which matches `mtl_ofi_provider_include` by prefix, would take
/// it for `myri`.
fn refuses_layering(flags: u64, layering: Option<String>) -> bool {
    flags & OFI_CORE_PROV_ONLY != 0 && layering.as_deref() != Some("1")
}

/// libfabric's entry point: the provider.
#[unsafe(no_mangle)]
pub extern "C" fn fi_prov_ini() -> *mut FiProvider {
    let prov = PROVIDER.0.get();
    let _ = catch_unwind(|| {
        // SAFETY: dlsym on the default namespace or libfabric's own handle (loaded
        // before it loads us); the symbol, when found, is libfabric's variadic
        // `fi_param_define`, called with no variadic arguments and help strings free
        // of format directives.
        unsafe {
            let handle = libc::dlopen(
                c"libfabric.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_NOLOAD,
            );
            let scope = if handle.is_null() {
                libc::RTLD_DEFAULT
            } else {
                handle
            };
            let sym = libc::dlsym(scope, c"fi_param_define".as_ptr());
            if !sym.is_null() {
                let define: ParamDefine = std::mem::transmute(sym);
                for (name, help) in PARAMS {
                    define(prov, name.as_ptr(), FI_PARAM_STRING, help.as_ptr());
                }
            }
            if !handle.is_null() {
                libc::dlclose(handle);
            }
        }
    });
    prov
}

unsafe extern "C" fn cleanup() {}

fn env(name: &str) -> Option<String> {
    std::env::var(format!("FI_MYRI_{}", name.to_uppercase())).ok()
}

/// `FI_MYRI_VIA`: `udp://a=udp://b,...`, peers reached through other addresses.
fn via() -> HashMap<String, String> {
    env("via")
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| {
            let (a, b) = pair.split_once('=')?;
            Some((a.trim().to_owned(), b.trim().to_owned()))
        })
        .collect()
}

/// Whether `udp://` RDM endpoints reach peers of this host over shared memory
/// (`FI_MYRI_SHM`, on unless `0`; off whenever `FI_MYRI_VIA` or `FI_MYRI_RANK_PORTS`
/// route traffic through a proxy).
fn auto_shm() -> bool {
    auto_shm_wanted(env("shm"), env("via"), env("rank_ports"))
}

/// [`auto_shm`] from the values of `FI_MYRI_SHM`, `FI_MYRI_VIA` and `FI_MYRI_RANK_PORTS`.
fn auto_shm_wanted(shm: Option<String>, via: Option<String>, rank_ports: Option<String>) -> bool {
    shm.as_deref() != Some("0") && via.is_none() && rank_ports.is_none()
}

fn backend() -> Result<Backend, i32> {
    match env("transport").as_deref() {
        None | Some("udp") => Ok(Backend::Udp),
        Some("shm") => Ok(Backend::Shm),
        _ => Err(-FI_ENODATA),
    }
}

static NEXT_PORT_TAKEN: AtomicU64 = AtomicU64::new(0);

/// Where a `udp://` endpoint opened without a source address binds, and the address it
/// names itself by when that is another (`FI_MYRI_RANK_PORTS` with an advertised port).
fn default_bind() -> Result<(String, Option<String>), i32> {
    let addr = env("addr").unwrap_or_else(|| "127.0.0.1".into());
    let first = NEXT_PORT_TAKEN.fetch_add(1, Ordering::Relaxed) == 0;
    if let Some(spec) = env("rank_ports").filter(|_| first) {
        let rank = world_rank().ok_or(-FI_EINVAL)?;
        return rank_ports(&addr, &spec, rank).ok_or(-FI_EINVAL);
    }
    let port = match env("port") {
        Some(p) if first => p,
        _ => "0".into(),
    };
    Ok((format!("udp://{addr}:{port}"), None))
}

/// The process's rank in its job, from the launcher's environment: unique across the hosts
/// of the job, as advertised addresses through one proxy must be.
fn world_rank() -> Option<u32> {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok())
    .and_then(|r| r.trim().parse().ok())
}

/// `FI_MYRI_RANK_PORTS` = `BIND[,ADVERTISE]` for `rank`: the bind URL on `addr`, and the
/// advertised URL (`ADVERTISE` is a base port on `addr` or `udp://HOST:BASE`).
fn rank_ports(addr: &str, spec: &str, rank: u32) -> Option<(String, Option<String>)> {
    let nth = |base: &str| -> Option<u16> {
        let base: u16 = base.trim().parse().ok()?;
        u16::try_from(u32::from(base) + rank).ok()
    };
    let (bind, advertise) = match spec.split_once(',') {
        Some((b, a)) => (b, Some(a.trim())),
        None => (spec, None),
    };
    let bind = format!("udp://{addr}:{}", nth(bind)?);
    let advertise = match advertise {
        None => None,
        Some(a) => {
            let (host, base) = match a.strip_prefix("udp://") {
                Some(hp) => hp.rsplit_once(':')?,
                None => (addr, a),
            };
            let url = format!("udp://{host}:{}", nth(base)?);
            Some(sockaddr_of(&url).map(|_| url)?)
        }
    };
    Some((bind, advertise))
}

// ---- Addresses -------------------------------------------------------------------------

const SOCKADDR_IN_LEN: usize = size_of::<libc::sockaddr_in>();
/// Bytes of an `shm://` endpoint's address in `FI_FORMAT_UNSPEC`: its URL, NUL-padded.
pub(crate) const SHM_ADDR_LEN: usize = 32;

fn sockaddr_of(url: &str) -> Option<libc::sockaddr_in> {
    let sa: SocketAddr = url.strip_prefix("udp://")?.parse().ok()?;
    let SocketAddr::V4(v4) = sa else { return None };
    Some(libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    })
}

fn url_of(sa: &libc::sockaddr_in) -> Option<String> {
    if i32::from(sa.sin_family) != libc::AF_INET {
        return None;
    }
    let ip = Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
    Some(format!(
        "udp://{}",
        SocketAddrV4::new(ip, u16::from_be(sa.sin_port))
    ))
}

/// Reads one address of `format` at `p` (`FI_ADDR_STR`: a C string).
fn read_addr(format: u32, p: *const c_void) -> Option<String> {
    if p.is_null() {
        return None;
    }
    if format == FI_ADDR_STR {
        return c_str(p as *const c_char);
    }
    if format == FI_FORMAT_UNSPEC {
        // SAFETY: an shm address is `SHM_ADDR_LEN` bytes (its length, told by getinfo
        // and fi_getname).
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), SHM_ADDR_LEN) };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(SHM_ADDR_LEN);
        let url = std::str::from_utf8(&bytes[..end]).ok()?;
        return url.starts_with("shm://").then(|| url.to_owned());
    }
    // SAFETY: `p` points at a `struct sockaddr_in` (the endpoint's address format);
    // read unaligned as applications pack addresses in byte buffers.
    let sa = unsafe { (p as *const libc::sockaddr_in).read_unaligned() };
    url_of(&sa)
}

/// Writes `url` in `format` into `buf` of `*len` bytes; `*len` becomes the size needed.
fn write_addr(format: u32, url: &str, buf: *mut c_void, len: *mut size_t) -> Result<(), i32> {
    if len.is_null() {
        return Err(-FI_EINVAL);
    }
    let bytes: Vec<u8> = if format == FI_ADDR_STR {
        let mut v = url.as_bytes().to_vec();
        v.push(0);
        v
    } else if format == FI_FORMAT_UNSPEC {
        if url.len() >= SHM_ADDR_LEN {
            return Err(-FI_EINVAL);
        }
        let mut v = url.as_bytes().to_vec();
        v.resize(SHM_ADDR_LEN, 0);
        v
    } else {
        let sa = sockaddr_of(url).ok_or(-FI_EADDRNOTAVAIL)?;
        // SAFETY: `sockaddr_in` is plain old data; its bytes are read once.
        unsafe { std::slice::from_raw_parts((&raw const sa).cast::<u8>(), SOCKADDR_IN_LEN) }
            .to_vec()
    };
    // SAFETY: `len` was checked for null and points at the caller's size.
    let room = unsafe { *len };
    // SAFETY: as above.
    unsafe { *len = bytes.len() };
    if room < bytes.len() || buf.is_null() {
        return Err(-FI_ETOOSMALL);
    }
    // SAFETY: `buf` holds `room >= bytes.len()` bytes (the caller's claim).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len()) };
    Ok(())
}

const FI_ETOOSMALL: c_int = 257;

// ---- fi_getinfo ------------------------------------------------------------------------

fn read_hints(h: &FiInfo) -> Hints {
    let tx = c_ref(h.tx_attr);
    let rx = c_ref(h.rx_attr);
    let ep = c_ref(h.ep_attr);
    let dom = c_ref(h.domain_attr);
    let fab = c_ref(h.fabric_attr);
    Hints {
        caps: h.caps,
        mode: h.mode,
        addr_format: h.addr_format,
        ep_type: ep.map_or(FI_EP_UNSPEC, |e| e.type_),
        ctx_caps: tx.map_or(0, |t| t.caps) | rx.map_or(0, |r| r.caps),
        tx_op_flags: tx.map_or(0, |t| t.op_flags),
        rx_op_flags: rx.map_or(0, |r| r.op_flags),
        msg_order: tx.map_or(0, |t| t.msg_order) | rx.map_or(0, |r| r.msg_order),
        max_msg_size: ep.map_or(0, |e| e.max_msg_size),
        mem_tag_format: ep.map_or(0, |e| e.mem_tag_format),
        progress: dom.map_or([0, 0], |d| [d.data_progress, d.control_progress]),
        av_type: dom.map_or(FI_AV_UNSPEC, |d| d.av_type),
        domain_name: dom.and_then(|d| c_str(d.name)),
        fabric_name: fab.and_then(|f| c_str(f.name)),
    }
}

fn calloc<T>() -> Result<*mut T, i32> {
    // SAFETY: calloc of one zeroed `T`; every struct allocated here is valid zeroed
    // (integers and pointers), and libfabric frees them with free().
    let p = unsafe { libc::calloc(1, size_of::<T>()) } as *mut T;
    if p.is_null() { Err(-FI_ENOMEM) } else { Ok(p) }
}

fn strdup(s: &CStr) -> Result<*mut c_char, i32> {
    // SAFETY: `s` is a valid C string; libfabric frees the copy with free().
    let p = unsafe { libc::strdup(s.as_ptr()) };
    if p.is_null() { Err(-FI_ENOMEM) } else { Ok(p) }
}

fn addr_bytes(format: u32, url: &str) -> Result<(*mut c_void, usize), i32> {
    let mut len: size_t = match format {
        FI_ADDR_STR => url.len() + 1,
        FI_FORMAT_UNSPEC => SHM_ADDR_LEN,
        _ => SOCKADDR_IN_LEN,
    };
    // SAFETY: malloc of `len` bytes, filled by `write_addr` below; freed by libfabric.
    let p = unsafe { libc::malloc(len) };
    if p.is_null() {
        return Err(-FI_ENOMEM);
    }
    if let Err(e) = write_addr(format, url, p, &mut len) {
        // SAFETY: `p` came from malloc above and is not handed out.
        unsafe { libc::free(p) };
        return Err(e);
    }
    Ok((p, len))
}

/// Builds one `fi_info` (freed by libfabric's `fi_freeinfo`).
fn build_info(a: &Answer, src: Option<&str>, dest: Option<&str>) -> Result<*mut FiInfo, i32> {
    let info = calloc::<FiInfo>()?;
    // SAFETY: `info` is a fresh zeroed allocation; each field is set once. On an error
    // what was built so far is left linked to it for `free_info`.
    let r = (|| unsafe {
        let i = &mut *info;
        i.caps = a.caps;
        i.mode = 0;
        i.addr_format = a.addr_format;
        if let Some(url) = src {
            (i.src_addr, i.src_addrlen) = addr_bytes(a.addr_format, url)?;
        }
        if let Some(url) = dest {
            (i.dest_addr, i.dest_addrlen) = addr_bytes(a.addr_format, url)?;
        }
        i.tx_attr = calloc()?;
        *i.tx_attr = FiTxAttr {
            caps: a.caps,
            mode: 0,
            op_flags: a.op_flags[0],
            msg_order: a.msg_order,
            comp_order: 0,
            inject_size: info::INJECT_SIZE,
            size: info::QUEUE_SIZE,
            iov_limit: info::IOV_LIMIT,
            rma_iov_limit: 0,
            tclass: 0,
        };
        i.rx_attr = calloc()?;
        *i.rx_attr = FiRxAttr {
            caps: a.caps,
            mode: 0,
            op_flags: a.op_flags[1],
            msg_order: a.msg_order,
            comp_order: 0,
            total_buffered_recv: 0,
            size: info::QUEUE_SIZE,
            iov_limit: info::IOV_LIMIT,
        };
        i.ep_attr = calloc()?;
        let ep = &mut *i.ep_attr;
        ep.type_ = a.ep_type;
        ep.max_msg_size = a.max_msg_size;
        ep.mem_tag_format = a.mem_tag_format;
        ep.tx_ctx_cnt = 1;
        ep.rx_ctx_cnt = 1;
        i.domain_attr = calloc()?;
        let d = &mut *i.domain_attr;
        d.name = strdup(match a.backend {
            Backend::Udp => c"udp",
            Backend::Shm => c"shm",
        })?;
        d.threading = FI_THREAD_SAFE;
        d.control_progress = a.progress;
        d.data_progress = a.progress;
        d.resource_mgmt = FI_RM_ENABLED;
        d.av_type = a.av_type;
        d.mr_mode = 0;
        d.mr_key_size = 8;
        d.cq_data_size = 8;
        d.cq_cnt = 1024;
        d.ep_cnt = 1024;
        d.tx_ctx_cnt = 1024;
        d.rx_ctx_cnt = 1024;
        d.max_ep_tx_ctx = 1;
        d.max_ep_rx_ctx = 1;
        d.cntr_cnt = 1024;
        d.mr_iov_limit = 1;
        d.caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
        d.mr_cnt = 1 << 16;
        i.fabric_attr = calloc()?;
        let f = &mut *i.fabric_attr;
        f.name = strdup(c"myri")?;
        // prov_name stays null: libfabric fills it in (and prefixes it to a name set here).
        f.prov_version = PROV_VERSION;
        f.api_version = API_VERSION;
        Ok(())
    })();
    match r {
        Ok(()) => Ok(info),
        Err(e) => {
            free_info(info);
            Err(e)
        }
    }
}

/// Frees an `fi_info` list built here (as `fi_freeinfo` would).
fn free_info(mut info: *mut FiInfo) {
    while !info.is_null() {
        // SAFETY: every pointer in an `fi_info` built here is null or from malloc.
        unsafe {
            let i = &*info;
            let next = i.next;
            if let Some(d) = i.domain_attr.as_ref() {
                libc::free(d.name.cast());
            }
            if let Some(f) = i.fabric_attr.as_ref() {
                libc::free(f.name.cast());
                libc::free(f.prov_name.cast());
            }
            for p in [
                i.src_addr,
                i.dest_addr,
                i.tx_attr.cast(),
                i.rx_attr.cast(),
                i.ep_attr.cast(),
                i.domain_attr.cast(),
                i.fabric_attr.cast(),
            ] {
                libc::free(p);
            }
            libc::free(info.cast());
            info = next;
        }
    }
}

unsafe extern "C" fn getinfo(
    _version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    out: *mut *mut FiInfo,
) -> c_int {
    guard_int(|| {
        if out.is_null() {
            return Err(-FI_EINVAL);
        }
        if refuses_layering(flags, env("layering")) {
            return Err(-FI_ENODATA);
        }
        let backend = backend()?;
        let h = c_ref(hints).map(read_hints);
        let answers = info::answer(h.as_ref(), backend);
        if answers.is_empty() {
            return Err(-FI_ENODATA);
        }
        let named = match (c_str(node), c_str(service)) {
            _ if backend == Backend::Shm => None,
            (None, None) => None,
            (n, s) => {
                let host = n.unwrap_or_else(|| "127.0.0.1".into());
                let port: u16 = s
                    .unwrap_or_else(|| "0".into())
                    .parse()
                    .map_err(|_| -FI_ENODATA)?;
                let url = format!("udp://{host}:{port}");
                let url = if sockaddr_of(&url).is_some() {
                    url
                } else {
                    use std::net::ToSocketAddrs;
                    let sa = (host.as_str(), port)
                        .to_socket_addrs()
                        .map_err(|_| -FI_ENODATA)?
                        .find(SocketAddr::is_ipv4)
                        .ok_or(-FI_ENODATA)?;
                    format!("udp://{sa}")
                };
                Some(url)
            }
        };
        let hint_src = c_ref(hints)
            .filter(|_| backend == Backend::Udp)
            .and_then(|h| {
                let fmt = if h.addr_format == FI_ADDR_STR {
                    FI_ADDR_STR
                } else {
                    FI_SOCKADDR_IN
                };
                read_addr(fmt, h.src_addr)
            });
        let (src, dest) = if flags & FI_SOURCE != 0 {
            (named.or(hint_src), None)
        } else {
            (hint_src, named)
        };
        let mut head: *mut FiInfo = std::ptr::null_mut();
        let mut tail: *mut FiInfo = std::ptr::null_mut();
        for a in &answers {
            let i = match build_info(a, src.as_deref(), dest.as_deref()) {
                Ok(i) => i,
                Err(e) => {
                    free_info(head);
                    return Err(e);
                }
            };
            if tail.is_null() {
                head = i;
            } else {
                // SAFETY: `tail` is the last `fi_info` built above.
                unsafe { (*tail).next = i };
            }
            tail = i;
        }
        put(out, head)?;
        Ok(0)
    })
}

pub(crate) mod cma;
mod ep;
mod objects;

use objects::fabric_open;

#[cfg(test)]
mod tests {
    use super::{OFI_CORE_PROV_ONLY, auto_shm_wanted, rank_ports, refuses_layering};

    #[test]
    fn utility_providers_layer_over_it_only_when_allowed() {
        let one = Some("1".to_owned());
        assert!(refuses_layering(OFI_CORE_PROV_ONLY, None));
        assert!(refuses_layering(OFI_CORE_PROV_ONLY, Some("0".to_owned())));
        assert!(!refuses_layering(OFI_CORE_PROV_ONLY, one.clone()));
        // An application's own fi_getinfo (no internal flag) is always answered.
        assert!(!refuses_layering(0, None));
        assert!(!refuses_layering(1 << 3, one));
    }

    #[test]
    fn auto_shm_off_when_asked_or_behind_a_proxy() {
        let s = |v: &str| Some(v.to_owned());
        assert!(auto_shm_wanted(None, None, None));
        assert!(auto_shm_wanted(s("1"), None, None));
        assert!(!auto_shm_wanted(s("0"), None, None));
        assert!(!auto_shm_wanted(None, s("udp://a:1=udp://b:2"), None));
        assert!(!auto_shm_wanted(s("1"), None, s("20000,30000")));
        assert!(!auto_shm_wanted(None, s(""), None));
    }

    #[test]
    fn rank_ports_bind_and_advertise_by_rank() {
        let some = |b: &str, a: Option<&str>| Some((b.to_owned(), a.map(str::to_owned)));
        assert_eq!(
            rank_ports("127.0.0.1", "20000", 3),
            some("udp://127.0.0.1:20003", None)
        );
        assert_eq!(
            rank_ports("127.0.0.1", "20000,30000", 2),
            some("udp://127.0.0.1:20002", Some("udp://127.0.0.1:30002"))
        );
        assert_eq!(
            rank_ports("10.0.0.1", " 20000 , udp://10.0.0.9:30000", 1),
            some("udp://10.0.0.1:20001", Some("udp://10.0.0.9:30001"))
        );
        for bad in [
            "",
            "x",
            "20000,",
            "20000,y",
            "65535",
            "20000,udp://host:1",
            "1,udp://1.2.3.4",
        ] {
            assert_eq!(rank_ports("127.0.0.1", bad, 1), None, "{bad:?}");
        }
    }
}
