//! Endpoints: `fi_endpoint`, binding, enabling, names, and the message and tagged
//! operation tables.

use super::objects::{AvObj, BASIC_FID_OPS, CntrObj, CqObj, DomainObj, EqObj, MrObj, fid};
use super::*;
use crate::objects::Drivers;
use std::sync::atomic::AtomicBool;

const FI_EOPBADSTATE: i32 = 258;
const FI_TRANSMIT_FLAG: u64 = FI_TRANSMIT;

#[repr(C)]
pub(super) struct EpObj {
    c: FidEp,
    ep: Arc<Mutex<FabricEndpoint>>,
    /// The domain it was opened in (the regions its sends may use are that domain's).
    domain: usize,
    format: u32,
    tx_op_flags: AtomicU64,
    rx_op_flags: AtomicU64,
    enabled: AtomicBool,
    /// The queues, counters and progress thread whose reads drive it (it leaves them
    /// when closed: they hold it, see [`Drivers`]).
    joined: Mutex<Vec<Joined>>,
}

/// A list of drivers an endpoint joined.
enum Joined {
    Cq(Cq),
    Cntr(Cntr),
    /// The domain's progress thread (the domain's address: the thread goes with it).
    Auto(usize),
}

impl EpObj {
    /// The endpoint as its drivers hold it.
    fn driver(&self) -> Arc<Mutex<dyn Progress>> {
        self.ep.clone()
    }

    /// Joins `drivers` (which `j` names, so that closing leaves it). Not with the
    /// endpoint's lock held (a list is locked before an endpoint).
    fn join(&self, drivers: &Drivers, j: Joined) {
        drivers.add(self.driver());
        lock(&self.joined).push(j);
    }
}

impl Drop for EpObj {
    /// Closing: the endpoint leaves every list of drivers it joined, which held it.
    fn drop(&mut self) {
        let me = self.driver();
        for j in lock(&self.joined).drain(..) {
            match j {
                Joined::Cq(cq) => cq.drivers.remove(&me),
                Joined::Cntr(c) => c.drivers.remove(&me),
                Joined::Auto(domain) => {
                    // Closed before its endpoints (a misuse) the domain took its thread,
                    // and the thread's list, with it.
                    if let Ok(d) = obj::<DomainObj>(domain as *const c_void, FI_CLASS_DOMAIN)
                        && let Some(auto) = &d.auto
                    {
                        auto.drivers().remove(&me);
                    }
                }
            }
        }
    }
}

static EP_FID_OPS: FiOps = FiOps {
    size: size_of::<FiOps>(),
    close: BASIC_FID_OPS.close,
    bind: Some(ep_bind),
    control: Some(ep_control),
    ops_open: BASIC_FID_OPS.ops_open,
    tostr: BASIC_FID_OPS.tostr,
    ops_set: BASIC_FID_OPS.ops_set,
};

unsafe extern "C" fn no_sys() -> ssize_t {
    -(FI_ENOSYS as ssize_t)
}

static EP_OPS: FiOpsEp = FiOpsEp {
    size: size_of::<FiOpsEp>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(no_sys),
    rx_ctx: Some(no_sys),
    rx_size_left: Some(size_left),
    tx_size_left: Some(size_left),
};

static CM_OPS: FiOpsCm = FiOpsCm {
    size: size_of::<FiOpsCm>(),
    setname: Some(ep_setname),
    getname: Some(ep_getname),
    getpeer: Some(no_sys),
    connect: Some(no_sys),
    listen: Some(no_sys),
    accept: Some(no_sys),
    reject: Some(no_sys),
    shutdown: Some(no_sys),
    join: Some(no_sys),
};

static RMA_OPS: NoSysOps<9> = NoSysOps {
    size: size_of::<NoSysOps<9>>(),
    ops: [no_sys; 9],
};
static ATOMIC_OPS: NoSysOps<13> = NoSysOps {
    size: size_of::<NoSysOps<13>>(),
    ops: [no_sys; 13],
};
static COLLECTIVE_OPS: NoSysOps<11> = NoSysOps {
    size: size_of::<NoSysOps<11>>(),
    ops: [no_sys; 11],
};

static MSG_OPS: FiOpsMsg = FiOpsMsg {
    size: size_of::<FiOpsMsg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

static TAGGED_OPS: FiOpsTagged = FiOpsTagged {
    size: size_of::<FiOpsTagged>(),
    recv: Some(tagged_recv),
    recvv: Some(tagged_recvv),
    recvmsg: Some(tagged_recvmsg),
    send: Some(tagged_send),
    sendv: Some(tagged_sendv),
    sendmsg: Some(tagged_sendmsg),
    inject: Some(tagged_inject),
    senddata: Some(tagged_senddata),
    injectdata: Some(tagged_injectdata),
};

fn open_transport(ep_type: EpType, url: &str) -> Result<myri_transport::Endpoint, i32> {
    // `FI_MYRI_MTU` sizes the endpoint's own datagrams; the regions auto-shm opens have
    // none to size.
    let mtu = crate::endpoint::mtu_param(std::env::var("FI_MYRI_MTU").ok().as_deref())?;
    myri_transport::Endpoint::open_with(url, transport_options(ep_type).with_mtu(mtu))
        .map_err(|e| crate::endpoint::open_errno(&e))
}

static SHM_TOKENS: AtomicU64 = AtomicU64::new(0);

fn max_msg(ep_type: EpType, t: &myri_transport::Endpoint) -> usize {
    match ep_type {
        EpType::Rdm => info::RDM_MAX_MSG,
        EpType::Dgram => {
            info::DGRAM_MAX_MSG.min(t.capabilities().max_message_size.saturating_sub(HEADER_LEN))
        }
    }
}

pub(super) unsafe extern "C" fn endpoint_open(
    domain: *mut FidDomain,
    info: *mut FiInfo,
    ep: *mut *mut FidEp,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwards the caller's arguments unchanged.
    unsafe { endpoint_open2(domain, info, ep, 0, context) }
}

pub(super) unsafe extern "C" fn endpoint_open2(
    domain: *mut FidDomain,
    info: *mut FiInfo,
    ep: *mut *mut FidEp,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let d = obj::<DomainObj>(domain.cast(), FI_CLASS_DOMAIN)?;
        let info = c_ref(info).ok_or(-FI_EINVAL)?;
        if ep.is_null() {
            return Err(-FI_EINVAL);
        }
        let ep_type = match c_ref(info.ep_attr).map_or(FI_EP_RDM, |a| a.type_) {
            FI_EP_RDM => EpType::Rdm,
            FI_EP_DGRAM => EpType::Dgram,
            _ => return Err(-FI_EINVAL),
        };
        if info.caps & !info::CAPS != 0 {
            return Err(-FI_EINVAL);
        }
        let mut core = if d.backend == Backend::Shm {
            let token = format!(
                "{:x}x{}",
                std::process::id(),
                SHM_TOKENS.fetch_add(1, Ordering::Relaxed)
            );
            let max = match ep_type {
                EpType::Rdm => info::SHM_RDM_MAX_MSG,
                EpType::Dgram => info::SHM_DGRAM_MAX_MSG,
            };
            FabricEndpoint::new_shm(ep_type, &token, max)
        } else {
            let (url, advertised) = match read_addr(d.addr_format, info.src_addr) {
                Some(url) => (url, None),
                None => default_bind()?,
            };
            let transport = open_transport(ep_type, &url)?;
            let max = max_msg(ep_type, &transport);
            let mut ep = FabricEndpoint::new(ep_type, transport, max);
            ep.via = via();
            // Auto-shm never bypasses a proxy the user put in front of peers.
            let proxied = advertised.is_some() || !ep.via.is_empty();
            if let Some(name) = advertised {
                ep.advertise(name);
            }
            if ep_type == EpType::Rdm && auto_shm() && !proxied {
                ep.enable_auto_shm();
            }
            ep
        };
        core.report = env("stats").as_deref() == Some("1");
        core.cma = env("cma").as_deref() != Some("0");
        core.directed_recv = info.caps & FI_DIRECTED_RECV != 0;
        let obj = Box::new(EpObj {
            c: FidEp {
                fid: fid(FI_CLASS_EP, context, &EP_FID_OPS),
                ops: &EP_OPS,
                cm: &CM_OPS,
                msg: &MSG_OPS,
                rma: &RMA_OPS,
                tagged: &TAGGED_OPS,
                atomic: &ATOMIC_OPS,
                collective: &COLLECTIVE_OPS,
            },
            ep: Arc::new(Mutex::new(core)),
            domain: domain as usize,
            format: d.addr_format,
            tx_op_flags: AtomicU64::new(c_ref(info.tx_attr).map_or(0, |t| t.op_flags)),
            rx_op_flags: AtomicU64::new(c_ref(info.rx_attr).map_or(0, |r| r.op_flags)),
            enabled: AtomicBool::new(false),
            joined: Mutex::new(Vec::new()),
        });
        put(ep, register(obj, FI_CLASS_EP).cast())?;
        Ok(0)
    })
}

fn ep_obj<'a>(p: *const c_void) -> Result<&'a EpObj, i32> {
    obj::<EpObj>(p, FI_CLASS_EP)
}

unsafe extern "C" fn ep_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    guard_int(|| {
        let e = ep_obj(fid.cast())?;
        // Joined after the endpoint's lock is dropped (a list is locked before an
        // endpoint).
        let joins = {
            let mut ep = lock(&e.ep);
            match class_of(bfid.cast()).ok_or(-FI_EINVAL)? {
                FI_CLASS_AV => {
                    ep.bind.av = Some(obj::<AvObj>(bfid.cast(), FI_CLASS_AV)?.av.clone());
                    None
                }
                FI_CLASS_CQ => {
                    let cq: Cq = obj::<CqObj>(bfid.cast(), FI_CLASS_CQ)?.cq.clone();
                    if flags & !(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) != 0 {
                        return Err(-FI_EBADFLAGS);
                    }
                    let selective = flags & FI_SELECTIVE_COMPLETION != 0;
                    if flags & FI_TRANSMIT != 0 {
                        ep.bind.tx_cq = Some((cq.clone(), selective));
                    }
                    if flags & FI_RECV != 0 {
                        ep.bind.rx_cq = Some((cq.clone(), selective));
                    }
                    Some(Joined::Cq(cq))
                }
                FI_CLASS_CNTR => {
                    let c: Cntr = obj::<CntrObj>(bfid.cast(), FI_CLASS_CNTR)?.cntr.clone();
                    if flags & !(FI_SEND | FI_RECV) != 0 {
                        return Err(-FI_EBADFLAGS);
                    }
                    if flags & FI_SEND != 0 {
                        ep.bind.send_cntr = Some(c.clone());
                    }
                    if flags & FI_RECV != 0 {
                        ep.bind.recv_cntr = Some(c.clone());
                    }
                    Some(Joined::Cntr(c))
                }
                FI_CLASS_EQ => {
                    obj::<EqObj>(bfid.cast(), FI_CLASS_EQ)?;
                    None
                }
                _ => return Err(-FI_EINVAL),
            }
        };
        match joins {
            Some(Joined::Cq(cq)) => e.join(&cq.drivers, Joined::Cq(cq.clone())),
            Some(Joined::Cntr(c)) => e.join(&c.drivers, Joined::Cntr(c.clone())),
            _ => {}
        }
        Ok(0)
    })
}

unsafe extern "C" fn ep_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    guard_int(|| {
        let e = ep_obj(fid.cast())?;
        match command {
            FI_ENABLE => {
                {
                    let ep = lock(&e.ep);
                    if ep.bind.tx_cq.is_none() && ep.bind.rx_cq.is_none() {
                        return Err(-FI_ENOCQ);
                    }
                    if ep.bind.av.is_none() {
                        return Err(-FI_ENOAV);
                    }
                }
                if !e.enabled.swap(true, Ordering::AcqRel)
                    && let Ok(d) = obj::<DomainObj>(e.domain as *const c_void, FI_CLASS_DOMAIN)
                    && let Some(auto) = &d.auto
                {
                    // The domain's progress thread drives it from now on (the endpoint's
                    // lock is not held: the thread takes it).
                    e.join(auto.drivers(), Joined::Auto(e.domain));
                }
                Ok(0)
            }
            FI_GETOPSFLAG | FI_SETOPSFLAG => {
                let flags = arg.cast::<u64>();
                if flags.is_null() {
                    return Err(-FI_EINVAL);
                }
                // SAFETY: for these commands `arg` is a `uint64_t *`.
                let which = unsafe { *flags };
                let field = if which & FI_TRANSMIT_FLAG != 0 {
                    &e.tx_op_flags
                } else if which & FI_RECV != 0 {
                    &e.rx_op_flags
                } else {
                    return Err(-FI_EINVAL);
                };
                if command == FI_GETOPSFLAG {
                    put(flags, field.load(Ordering::Acquire))?;
                } else {
                    let set = which & !(FI_TRANSMIT_FLAG | FI_RECV);
                    if set & !info::OP_FLAGS != 0 {
                        return Err(-FI_EBADFLAGS);
                    }
                    field.store(set, Ordering::Release);
                }
                Ok(0)
            }
            FI_GETFIDFLAG => {
                put(arg.cast::<u64>(), e.tx_op_flags.load(Ordering::Acquire))?;
                Ok(0)
            }
            _ => Err(-FI_ENOSYS),
        }
    })
}

const FI_ENOCQ: i32 = 263;
const FI_ENOAV: i32 = 267;

unsafe extern "C" fn ep_cancel(fid: *mut Fid, context: *mut c_void) -> ssize_t {
    guard(|| {
        let e = ep_obj(fid.cast())?;
        if lock(&e.ep).cancel(context as usize) {
            Ok(0)
        } else {
            Err(-FI_ENOENT)
        }
    })
}

unsafe extern "C" fn ep_getopt(
    fid: *mut Fid,
    _: c_int,
    _: c_int,
    _: *mut c_void,
    _: *mut size_t,
) -> c_int {
    guard_int(|| ep_obj(fid.cast()).and(Err(-libc::ENOPROTOOPT)))
}

unsafe extern "C" fn ep_setopt(
    fid: *mut Fid,
    _: c_int,
    _: c_int,
    _: *const c_void,
    _: size_t,
) -> c_int {
    guard_int(|| ep_obj(fid.cast()).and(Err(-libc::ENOPROTOOPT)))
}

unsafe extern "C" fn size_left(ep: *mut FidEp) -> ssize_t {
    guard(|| ep_obj(ep.cast()).map(|_| info::QUEUE_SIZE as isize))
}

unsafe extern "C" fn ep_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut size_t) -> c_int {
    guard_int(|| {
        let e = ep_obj(fid.cast())?;
        let url = lock(&e.ep).local_url().to_owned();
        write_addr(e.format, &url, addr, addrlen)?;
        Ok(0)
    })
}

unsafe extern "C" fn ep_setname(fid: *mut Fid, addr: *mut c_void, addrlen: size_t) -> c_int {
    guard_int(|| {
        let e = ep_obj(fid.cast())?;
        if e.enabled.load(Ordering::Acquire) {
            return Err(-FI_EOPBADSTATE);
        }
        if e.format == FI_FORMAT_UNSPEC {
            return Err(-FI_ENOSYS);
        }
        if e.format != FI_ADDR_STR && addrlen < SOCKADDR_IN_LEN {
            return Err(-FI_EINVAL);
        }
        let url = read_addr(e.format, addr).ok_or(-FI_EINVAL)?;
        let mut ep = lock(&e.ep);
        let transport = open_transport(ep.ep_type, &url)?;
        ep.rebind(transport);
        Ok(0)
    })
}

// ---- Buffers -----------------------------------------------------------------------------

/// Copies `data` into the application's receive buffers `iov` (address, length) from
/// byte `offset` of them on: a posted receive's [`Target`] writes through it.
fn copy_to_iov(iov: &[(usize, usize)], mut offset: usize, mut data: &[u8]) {
    for &(base, len) in iov {
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = (len - offset).min(data.len());
        // SAFETY: each (base, len) is a buffer the application posted and keeps valid
        // until the receive completes (only `recv_common` makes such targets, from the
        // iovecs of the call); `offset + n <= len` bytes are written, so nothing lands
        // past it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (base as *mut u8).add(offset), n) };
        offset = 0;
        data = &data[n..];
        if data.is_empty() {
            break;
        }
    }
}

/// Reads `n` bytes of the sender's buffer `from` straight into the application's
/// receive buffers `iov` (the single-copy path, [`crate::cma`]).
fn read_to_iov(
    from: &crate::cma::RemoteRead,
    iov: &[(usize, usize)],
    n: usize,
) -> Result<(), crate::cma::CmaError> {
    // SAFETY: each (base, len) is a buffer the application posted and keeps valid until
    // the receive completes (only `recv_common` makes such targets); `read_into_iov`
    // names at most `n` bytes of them, `n` at most their total (the caller's contract,
    // as for `copy_to_iov`).
    unsafe { super::cma::read_into_iov(from, iov, n) }
}

/// How a posted receive's [`Target`] reaches the application's buffers.
static APP_IO: AppIo = AppIo {
    copy: copy_to_iov,
    read: read_to_iov,
};

fn iovs<'a>(iov: *const iovec, count: usize) -> Result<&'a [iovec], i32> {
    if count > info::IOV_LIMIT {
        return Err(-FI_EINVAL);
    }
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(-FI_EINVAL);
    }
    // SAFETY: `iov` points at `count` iovecs (the caller's contract).
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    if v.iter().any(|i| i.iov_base.is_null() && i.iov_len > 0) {
        return Err(-FI_EINVAL);
    }
    Ok(v)
}

fn one(buf: *const c_void, len: usize) -> iovec {
    iovec {
        iov_base: buf.cast_mut(),
        iov_len: len,
    }
}

// ---- Sends -------------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn send_common(
    ep: *mut FidEp,
    iov: &[iovec],
    desc: *mut c_void,
    dest: FiAddr,
    tagged: bool,
    tag: u64,
    data: Option<u64>,
    context: *mut c_void,
    flags: Option<u64>,
) -> Result<isize, i32> {
    let e = ep_obj(ep.cast())?;
    if !e.enabled.load(Ordering::Acquire) {
        return Err(-FI_EOPBADSTATE);
    }
    let flags = flags.unwrap_or_else(|| e.tx_op_flags.load(Ordering::Relaxed));
    if iov.iter().any(|i| i.iov_base.is_null() && i.iov_len > 0) {
        return Err(-FI_EINVAL);
    }
    let slice = |i: &iovec| {
        // SAFETY: each iovec is a buffer of the application's, valid for this call (a
        // copying send copies it before returning; a copy-free one reads it later through
        // its region's `AppMemory`, not through this slice).
        unsafe { std::slice::from_raw_parts(i.iov_base as *const u8, i.iov_len) }
    };
    // One buffer (MPI's case) needs no vector of parts.
    let one_part: [&[u8]; 1];
    let many: Vec<&[u8]>;
    let parts: &[&[u8]] = match iov {
        [i] => {
            one_part = [if i.iov_len > 0 { slice(i) } else { &[] }];
            &one_part
        }
        _ => {
            many = iov.iter().filter(|i| i.iov_len > 0).map(slice).collect();
            &many
        }
    };
    let inject = flags & FI_INJECT != 0;
    if inject && parts.iter().map(|p| p.len()).sum::<usize>() > info::INJECT_SIZE {
        return Err(-FI_EMSGSIZE);
    }
    // One buffer inside a region this domain registered: sent from it, no copy, where
    // the endpoint can (see `MrObj`). Any other `desc` (null, not a live region, another
    // domain's, a region the buffer is not inside) copies, as libfabric lets a provider
    // that does not ask for `FI_MR_LOCAL` ignore descriptors.
    let region = match iov {
        [i] if !inject && i.iov_len >= crate::endpoint::COPY_FREE_MIN => {
            registered(desc, e.domain, i)
        }
        _ => None,
    };
    let mut core = lock(&e.ep);
    let completion = !inject && (!core.tx_selective() || flags & FI_COMPLETION != 0);
    let header = Header { tagged, tag, data };
    match region {
        Some((mem, range)) => {
            core.send_registered(dest, header, &mem, range, context as usize, completion)?
        }
        // Every send but an inject leaves its buffers to the provider until it completes.
        None if inject => core.send(dest, header, parts, context as usize, completion)?,
        None => core.send_held(dest, header, parts, context as usize, completion)?,
    }
    Ok(0)
}

/// The first descriptor of a vector of `count` (null when there is none).
fn first_desc(desc: *mut *mut c_void, count: usize) -> *mut c_void {
    if desc.is_null() || count == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: a non-null `desc` points at `count` descriptors (the caller's contract).
    unsafe { *desc }
}

/// The region `desc` names, when it is a live memory region of `domain` whose buffer
/// holds all of `buf`: its memory and `buf`'s range in it.
fn registered(
    desc: *mut c_void,
    domain: usize,
    buf: &iovec,
) -> Option<(
    Arc<dyn crate::endpoint::ExternalBytes>,
    std::ops::Range<usize>,
)> {
    if desc.is_null() {
        return None;
    }
    let mr = obj::<MrObj>(desc.cast_const(), FI_CLASS_MR).ok()?;
    let mem = mr.mem.as_ref().filter(|_| mr.domain == domain)?;
    let start = (buf.iov_base as usize).checked_sub(mem.addr)?;
    let end = start.checked_add(buf.iov_len)?;
    (end <= mem.len).then(|| {
        (
            mem.clone() as Arc<dyn crate::endpoint::ExternalBytes>,
            start..end,
        )
    })
}

unsafe extern "C" fn msg_send(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest: FiAddr,
    context: *mut c_void,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            &[one(buf, len)],
            desc,
            dest,
            false,
            0,
            None,
            context,
            None,
        )
    })
}

unsafe extern "C" fn msg_sendv(
    ep: *mut FidEp,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    dest: FiAddr,
    context: *mut c_void,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            iovs(iov, count)?,
            first_desc(desc, count),
            dest,
            false,
            0,
            None,
            context,
            None,
        )
    })
}

unsafe extern "C" fn msg_sendmsg(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> ssize_t {
    guard(|| {
        let m = c_ref(msg).ok_or(-FI_EINVAL)?;
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        let iov = iovs(m.msg_iov, m.iov_count)?;
        send_common(
            ep,
            iov,
            first_desc(m.desc, m.iov_count),
            m.addr,
            false,
            0,
            data,
            m.context,
            Some(flags),
        )
    })
}

unsafe extern "C" fn msg_inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    dest: FiAddr,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            &[one(buf, len)],
            std::ptr::null_mut(),
            dest,
            false,
            0,
            None,
            std::ptr::null_mut(),
            Some(FI_INJECT),
        )
    })
}

unsafe extern "C" fn msg_senddata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest: FiAddr,
    context: *mut c_void,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            &[one(buf, len)],
            desc,
            dest,
            false,
            0,
            Some(data),
            context,
            None,
        )
    })
}

unsafe extern "C" fn msg_injectdata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    data: u64,
    dest: FiAddr,
) -> ssize_t {
    guard(|| {
        let null = std::ptr::null_mut();
        send_common(
            ep,
            &[one(buf, len)],
            std::ptr::null_mut(),
            dest,
            false,
            0,
            Some(data),
            null,
            Some(FI_INJECT),
        )
    })
}

unsafe extern "C" fn tagged_send(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    dest: FiAddr,
    tag: u64,
    context: *mut c_void,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            &[one(buf, len)],
            desc,
            dest,
            true,
            tag,
            None,
            context,
            None,
        )
    })
}

unsafe extern "C" fn tagged_sendv(
    ep: *mut FidEp,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: size_t,
    dest: FiAddr,
    tag: u64,
    context: *mut c_void,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            iovs(iov, count)?,
            first_desc(desc, count),
            dest,
            true,
            tag,
            None,
            context,
            None,
        )
    })
}

unsafe extern "C" fn tagged_sendmsg(
    ep: *mut FidEp,
    msg: *const FiMsgTagged,
    flags: u64,
) -> ssize_t {
    guard(|| {
        let m = c_ref(msg).ok_or(-FI_EINVAL)?;
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        let iov = iovs(m.msg_iov, m.iov_count)?;
        send_common(
            ep,
            iov,
            first_desc(m.desc, m.iov_count),
            m.addr,
            true,
            m.tag,
            data,
            m.context,
            Some(flags),
        )
    })
}

unsafe extern "C" fn tagged_inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    dest: FiAddr,
    tag: u64,
) -> ssize_t {
    guard(|| {
        let null = std::ptr::null_mut();
        send_common(
            ep,
            &[one(buf, len)],
            std::ptr::null_mut(),
            dest,
            true,
            tag,
            None,
            null,
            Some(FI_INJECT),
        )
    })
}

unsafe extern "C" fn tagged_senddata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    desc: *mut c_void,
    data: u64,
    dest: FiAddr,
    tag: u64,
    context: *mut c_void,
) -> ssize_t {
    guard(|| {
        send_common(
            ep,
            &[one(buf, len)],
            desc,
            dest,
            true,
            tag,
            Some(data),
            context,
            None,
        )
    })
}

unsafe extern "C" fn tagged_injectdata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: size_t,
    data: u64,
    dest: FiAddr,
    tag: u64,
) -> ssize_t {
    guard(|| {
        let null = std::ptr::null_mut();
        send_common(
            ep,
            &[one(buf, len)],
            std::ptr::null_mut(),
            dest,
            true,
            tag,
            Some(data),
            null,
            Some(FI_INJECT),
        )
    })
}

// ---- Receives ----------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
fn recv_common(
    ep: *mut FidEp,
    iov: &[iovec],
    src: FiAddr,
    tagged: bool,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: Option<u64>,
) -> Result<isize, i32> {
    let e = ep_obj(ep.cast())?;
    if !e.enabled.load(Ordering::Acquire) {
        return Err(-FI_EOPBADSTATE);
    }
    let flags = flags.unwrap_or_else(|| e.rx_op_flags.load(Ordering::Relaxed));
    let probe = match (
        flags & FI_PEEK != 0,
        flags & FI_CLAIM != 0,
        flags & FI_DISCARD != 0,
    ) {
        (false, false, false) => Probe::None,
        (true, false, false) => Probe::Peek,
        (true, true, false) => Probe::PeekClaim,
        (true, false, true) => Probe::PeekDiscard,
        (false, true, false) => Probe::Claim,
        (false, true, true) => Probe::ClaimDiscard,
        _ => return Err(-FI_EBADFLAGS),
    };
    if !tagged && probe != Probe::None {
        return Err(-FI_EBADFLAGS);
    }
    let target = Target::app(
        iov.iter()
            .map(|i| (i.iov_base as usize, i.iov_len))
            .collect(),
        &APP_IO,
    );
    let mut core = lock(&e.ep);
    let completion = !core.rx_selective() || flags & FI_COMPLETION != 0;
    let posted = Posted {
        context: context as usize,
        src,
        tag,
        ignore,
        target,
        completion,
    };
    core.post_recv(tagged, posted, probe)?;
    Ok(0)
}

unsafe extern "C" fn msg_recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: size_t,
    _desc: *mut c_void,
    src: FiAddr,
    context: *mut c_void,
) -> ssize_t {
    guard(|| recv_common(ep, &[one(buf, len)], src, false, 0, 0, context, None))
}

unsafe extern "C" fn msg_recvv(
    ep: *mut FidEp,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: size_t,
    src: FiAddr,
    context: *mut c_void,
) -> ssize_t {
    guard(|| recv_common(ep, iovs(iov, count)?, src, false, 0, 0, context, None))
}

unsafe extern "C" fn msg_recvmsg(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> ssize_t {
    guard(|| {
        let m = c_ref(msg).ok_or(-FI_EINVAL)?;
        let iov = iovs(m.msg_iov, m.iov_count)?;
        recv_common(ep, iov, m.addr, false, 0, 0, m.context, Some(flags))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: size_t,
    _desc: *mut c_void,
    src: FiAddr,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> ssize_t {
    guard(|| recv_common(ep, &[one(buf, len)], src, true, tag, ignore, context, None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_recvv(
    ep: *mut FidEp,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: size_t,
    src: FiAddr,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> ssize_t {
    guard(|| recv_common(ep, iovs(iov, count)?, src, true, tag, ignore, context, None))
}

unsafe extern "C" fn tagged_recvmsg(
    ep: *mut FidEp,
    msg: *const FiMsgTagged,
    flags: u64,
) -> ssize_t {
    guard(|| {
        let m = c_ref(msg).ok_or(-FI_EINVAL)?;
        let iov = iovs(m.msg_iov, m.iov_count)?;
        recv_common(
            ep,
            iov,
            m.addr,
            true,
            m.tag,
            m.ignore,
            m.context,
            Some(flags),
        )
    })
}
