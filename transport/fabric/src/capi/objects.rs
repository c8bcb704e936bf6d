//! Fabric, domain, address vector, completion queue, counter, memory region and event
//! queue: their C structs and operation tables.

use super::*;
use crate::endpoint::ExternalBytes;
use std::ops::Range;
use std::sync::atomic::AtomicBool;

// ---- Shared fid operations -------------------------------------------------------------

unsafe extern "C" fn no_sys() -> ssize_t {
    -(FI_ENOSYS as ssize_t)
}

unsafe extern "C" fn fid_close(fid: *mut Fid) -> c_int {
    guard_int(|| {
        let class = class_of(fid.cast()).ok_or(-FI_EINVAL)?;
        match class {
            FI_CLASS_FABRIC => unregister(fid.cast::<FabricObj>(), class),
            FI_CLASS_DOMAIN => unregister(fid.cast::<DomainObj>(), class),
            FI_CLASS_AV => unregister(fid.cast::<AvObj>(), class),
            FI_CLASS_CQ => unregister(fid.cast::<CqObj>(), class),
            FI_CLASS_CNTR => unregister(fid.cast::<CntrObj>(), class),
            FI_CLASS_MR => unregister(fid.cast::<MrObj>(), class),
            FI_CLASS_EQ => unregister(fid.cast::<EqObj>(), class),
            FI_CLASS_EP => unregister(fid.cast::<ep::EpObj>(), class),
            _ => Err(-FI_EINVAL),
        }?;
        Ok(0)
    })
}

unsafe extern "C" fn fid_bind_none(_: *mut Fid, _: *mut Fid, _: u64) -> c_int {
    -FI_ENOSYS
}

unsafe extern "C" fn fid_control_none(fid: *mut Fid, command: c_int, _: *mut c_void) -> c_int {
    guard_int(|| {
        class_of(fid.cast()).ok_or(-FI_EINVAL)?;
        match command {
            FI_ENABLE => Ok(0),
            _ => Err(-FI_ENOSYS),
        }
    })
}

unsafe extern "C" fn fid_ops_open(
    _: *mut Fid,
    _: *const c_char,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

unsafe extern "C" fn fid_tostr(_: *const Fid, _: *mut c_char, _: size_t) -> c_int {
    -FI_ENOSYS
}

unsafe extern "C" fn fid_ops_set(
    _: *mut Fid,
    _: *const c_char,
    _: u64,
    _: *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

pub(super) static BASIC_FID_OPS: FiOps = FiOps {
    size: size_of::<FiOps>(),
    close: Some(fid_close),
    bind: Some(fid_bind_none),
    control: Some(fid_control_none),
    ops_open: Some(fid_ops_open),
    tostr: Some(fid_tostr),
    ops_set: Some(fid_ops_set),
};

pub(super) fn fid(class: usize, context: *mut c_void, ops: &'static FiOps) -> Fid {
    Fid {
        fclass: class,
        context,
        ops,
    }
}

// ---- Fabric ----------------------------------------------------------------------------

#[repr(C)]
pub(super) struct FabricObj {
    c: FidFabric,
}

static FABRIC_OPS: FiOpsFabric = FiOpsFabric {
    size: size_of::<FiOpsFabric>(),
    domain: Some(domain_open),
    passive_ep: Some(no_sys),
    eq_open: Some(eq_open),
    wait_open: Some(no_sys),
    trywait: Some(trywait),
    domain2: Some(domain_open2),
};

pub(super) unsafe extern "C" fn fabric_open(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let attr = c_ref(attr).ok_or(-FI_EINVAL)?;
        if c_str(attr.name).is_some_and(|n| n != "myri") {
            return Err(-FI_EINVAL);
        }
        if fabric.is_null() {
            return Err(-FI_EINVAL);
        }
        let obj = Box::new(FabricObj {
            c: FidFabric {
                fid: fid(FI_CLASS_FABRIC, context, &BASIC_FID_OPS),
                ops: &FABRIC_OPS,
                api_version: attr.api_version,
            },
        });
        put(fabric, register(obj, FI_CLASS_FABRIC).cast())?;
        Ok(0)
    })
}

unsafe extern "C" fn trywait(_: *mut FidFabric, _: *mut *mut Fid, _: c_int) -> c_int {
    // Waiting is polling here: the caller may always go on to wait.
    0
}

// ---- Domain ----------------------------------------------------------------------------

#[repr(C)]
pub(super) struct DomainObj {
    c: FidDomain,
    pub(super) backend: Backend,
    pub(super) addr_format: u32,
    next_key: AtomicU64,
    /// The progress thread, when the domain was opened with `FI_PROGRESS_AUTO`: each
    /// endpoint joins it when enabled; closing the domain stops it.
    pub(super) auto: Option<AutoProgress>,
}

static DOMAIN_OPS: FiOpsDomain = FiOpsDomain {
    size: size_of::<FiOpsDomain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(ep::endpoint_open),
    scalable_ep: Some(no_sys),
    cntr_open: Some(cntr_open),
    poll_open: Some(no_sys),
    stx_ctx: Some(no_sys),
    srx_ctx: Some(no_sys),
    query_atomic: Some(no_sys),
    query_collective: Some(no_sys),
    endpoint2: Some(ep::endpoint_open2),
};

static MR_OPS: FiOpsMr = FiOpsMr {
    size: size_of::<FiOpsMr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
};

unsafe extern "C" fn domain_open(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    domain: *mut *mut FidDomain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: forwards the caller's arguments unchanged.
    unsafe { domain_open2(fabric, info, domain, 0, context) }
}

unsafe extern "C" fn domain_open2(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    domain: *mut *mut FidDomain,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        obj::<FabricObj>(fabric.cast(), FI_CLASS_FABRIC)?;
        let info = c_ref(info).ok_or(-FI_EINVAL)?;
        let backend = match c_ref(info.domain_attr).and_then(|d| c_str(d.name)) {
            Some(name) => Backend::from_domain_name(&name).ok_or(-FI_EINVAL)?,
            None => backend()?,
        };
        // Automatic progress where the application asked for it (either kind: this
        // provider's control and data progress are one).
        let auto = c_ref(info.domain_attr).is_some_and(|d| {
            d.data_progress == FI_PROGRESS_AUTO || d.control_progress == FI_PROGRESS_AUTO
        });
        let auto = match auto {
            true => Some(AutoProgress::start().map_err(|_| -FI_ENOMEM)?),
            false => None,
        };
        let obj = Box::new(DomainObj {
            c: FidDomain {
                fid: fid(FI_CLASS_DOMAIN, context, &BASIC_FID_OPS),
                ops: &DOMAIN_OPS,
                mr: &MR_OPS,
            },
            backend,
            addr_format: match (backend, info.addr_format) {
                (_, FI_ADDR_STR) => FI_ADDR_STR,
                (Backend::Udp, _) => FI_SOCKADDR_IN,
                (Backend::Shm, _) => FI_FORMAT_UNSPEC,
            },
            next_key: AtomicU64::new(1),
            auto,
        });
        put(domain, register(obj, FI_CLASS_DOMAIN).cast())?;
        Ok(0)
    })
}

// ---- Memory regions --------------------------------------------------------------------

/// A registered region: a key, a descriptor (`fi_mr_desc` gives the address of this
/// object, which a send looks up in the registry of live objects before it believes it),
/// and, for a region of one buffer, that buffer as [`AppMemory`]. A send of at least
/// [`crate::endpoint::COPY_FREE_MIN`] bytes over `udp://` (RDM) whose buffer lies inside
/// the region named by its `desc` is sent from it without a copy and completes once
/// acknowledged (see [`crate::endpoint`]); other sends copy as without a region. Nothing
/// is pinned: the memory is the application's, read by the kernel's `sendmsg`.
#[repr(C)]
pub(super) struct MrObj {
    c: FidMr,
    /// The domain it was registered with (a send checks its endpoint's is the same).
    pub(super) domain: usize,
    /// The registered buffer (`None`: several buffers, or none).
    pub(super) mem: Option<Arc<AppMemory>>,
}

/// A buffer the application registered: its address and length. It outlives the region
/// in the buffers of sends from it (an `Arc` each), so closing the region with sends
/// outstanding frees nothing they read; the memory itself is the application's, which
/// libfabric's contract has it keep valid and unchanged while a send from it is
/// outstanding.
pub(super) struct AppMemory {
    /// First byte.
    pub(super) addr: usize,
    /// Bytes.
    pub(super) len: usize,
}

impl AppMemory {
    /// The buffer `addr`, `len` of a registration; `None` for an empty or impossible one.
    fn new(addr: *const c_void, len: usize) -> Option<Arc<AppMemory>> {
        let addr = addr as usize;
        let fits = len > 0 && len <= isize::MAX as usize && addr.checked_add(len).is_some();
        (addr != 0 && fits).then(|| Arc::new(AppMemory { addr, len }))
    }
}

impl ExternalBytes for AppMemory {
    fn size(&self) -> usize {
        self.len
    }

    fn bytes(&self, range: Range<usize>) -> &[u8] {
        // Never past the registered buffer, whatever the caller passes.
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        // SAFETY: `addr` and `len` are a buffer the application registered (non-null,
        // `len` within `isize::MAX`, checked in `AppMemory::new`) and `start..end` lies
        // inside it. libfabric's contract has the application keep it valid, and the
        // bytes of an outstanding send unchanged, while the region is open and while a
        // send from it is outstanding; only the bytes a send reads are borrowed (the
        // transport's RPP until the acknowledgement, which completes the send), so the
        // rest of the buffer may change meanwhile.
        unsafe { std::slice::from_raw_parts((self.addr + start) as *const u8, end - start) }
    }
}

fn mr_new(
    domain: *mut Fid,
    requested_key: u64,
    context: *mut c_void,
    mem: Option<Arc<AppMemory>>,
) -> Result<*mut FidMr, i32> {
    let d = obj::<DomainObj>(domain.cast(), FI_CLASS_DOMAIN)?;
    let key = d.next_key.fetch_add(1, Ordering::Relaxed);
    let mut obj = Box::new(MrObj {
        domain: domain as usize,
        mem,
        c: FidMr {
            fid: fid(FI_CLASS_MR, context, &BASIC_FID_OPS),
            mem_desc: std::ptr::null_mut(),
            key: if requested_key == 0 {
                key
            } else {
                requested_key
            },
        },
    });
    obj.c.mem_desc = (&raw mut obj.c).cast();
    Ok(register(obj, FI_CLASS_MR).cast())
}

unsafe extern "C" fn mr_reg(
    domain: *mut Fid,
    buf: *const c_void,
    len: size_t,
    _access: u64,
    _offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        if buf.is_null() && len > 0 {
            return Err(-FI_EINVAL);
        }
        if mr.is_null() {
            return Err(-FI_EINVAL);
        }
        put(
            mr,
            mr_new(domain, requested_key, context, AppMemory::new(buf, len))?,
        )?;
        Ok(0)
    })
}

/// The one buffer of a vector registration (`None` for several).
fn one_buffer(iov: *const iovec, count: usize) -> Option<Arc<AppMemory>> {
    if count != 1 || iov.is_null() {
        return None;
    }
    // SAFETY: non-null, and the caller's contract is that it points at `count` iovecs.
    let i = unsafe { &*iov };
    AppMemory::new(i.iov_base, i.iov_len)
}

unsafe extern "C" fn mr_regv(
    domain: *mut Fid,
    iov: *const iovec,
    count: size_t,
    _access: u64,
    _offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        if (iov.is_null() && count > 0) || mr.is_null() {
            return Err(-FI_EINVAL);
        }
        let mem = one_buffer(iov, count);
        put(mr, mr_new(domain, requested_key, context, mem)?)?;
        Ok(0)
    })
}

unsafe extern "C" fn mr_regattr(
    domain: *mut Fid,
    attr: *const FiMrAttr,
    _flags: u64,
    mr: *mut *mut FidMr,
) -> c_int {
    guard_int(|| {
        let attr = c_ref(attr).ok_or(-FI_EINVAL)?;
        if mr.is_null() {
            return Err(-FI_EINVAL);
        }
        let mem = one_buffer(attr.mr_iov, attr.iov_count);
        put(mr, mr_new(domain, attr.requested_key, attr.context, mem)?)?;
        Ok(0)
    })
}

// ---- Address vector --------------------------------------------------------------------

#[repr(C)]
pub(super) struct AvObj {
    c: FidAv,
    pub(super) av: Av,
    format: u32,
}

static AV_OPS: FiOpsAv = FiOpsAv {
    size: size_of::<FiOpsAv>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(no_sys),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(no_sys),
};

unsafe extern "C" fn av_open(
    domain: *mut FidDomain,
    attr: *mut FiAvAttr,
    av: *mut *mut FidAv,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let d = obj::<DomainObj>(domain.cast(), FI_CLASS_DOMAIN)?;
        let attr = c_ref(attr).ok_or(-FI_EINVAL)?;
        if ![FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE].contains(&attr.type_) {
            return Err(-FI_EINVAL);
        }
        if !attr.name.is_null() || attr.rx_ctx_bits != 0 {
            return Err(-FI_ENOSYS);
        }
        let obj = Box::new(AvObj {
            c: FidAv {
                fid: fid(FI_CLASS_AV, context, &BASIC_FID_OPS),
                ops: &AV_OPS,
            },
            av: Arc::new(Mutex::new(AddressVector::default())),
            format: d.addr_format,
        });
        put(av, register(obj, FI_CLASS_AV).cast())?;
        Ok(0)
    })
}

unsafe extern "C" fn av_insert(
    av: *mut FidAv,
    addr: *const c_void,
    count: size_t,
    fi_addr: *mut FiAddr,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let a = obj::<AvObj>(av.cast(), FI_CLASS_AV)?;
        if flags != 0 {
            return Err(-FI_EBADFLAGS);
        }
        if addr.is_null() && count > 0 {
            return Err(-FI_EINVAL);
        }
        let mut inserted = 0;
        for i in 0..count {
            let p = if a.format == FI_ADDR_STR {
                // SAFETY: for FI_ADDR_STR, `addr` is an array of `count` C-string
                // pointers.
                unsafe { *(addr as *const *const c_char).add(i) }.cast::<c_void>()
            } else if a.format == FI_FORMAT_UNSPEC {
                // SAFETY: `addr` holds `count` packed shm addresses.
                unsafe { (addr as *const u8).add(i * SHM_ADDR_LEN) }.cast::<c_void>()
            } else {
                // SAFETY: `addr` holds `count` packed `sockaddr_in`s.
                unsafe { (addr as *const u8).add(i * SOCKADDR_IN_LEN) }.cast::<c_void>()
            };
            let got = read_addr(a.format, p).map(|url| lock(&a.av).insert(url));
            inserted += usize::from(got.is_some());
            if !fi_addr.is_null() {
                // SAFETY: `fi_addr`, when not null, has room for `count` addresses.
                unsafe { *fi_addr.add(i) = got.unwrap_or(FI_ADDR_NOTAVAIL) };
            }
        }
        Ok(inserted as isize)
    })
}

unsafe extern "C" fn av_insertsvc(
    av: *mut FidAv,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut FiAddr,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard_int(|| {
        let a = obj::<AvObj>(av.cast(), FI_CLASS_AV)?;
        if flags != 0 {
            return Err(-FI_EBADFLAGS);
        }
        let (node, service) = (
            c_str(node).ok_or(-FI_EINVAL)?,
            c_str(service).ok_or(-FI_EINVAL)?,
        );
        let url = format!("udp://{node}:{service}");
        sockaddr_of(&url).ok_or(-FI_EINVAL)?;
        let got = lock(&a.av).insert(url);
        if !fi_addr.is_null() {
            put(fi_addr, got)?;
        }
        Ok(1)
    })
}

unsafe extern "C" fn av_remove(
    av: *mut FidAv,
    fi_addr: *mut FiAddr,
    count: size_t,
    _: u64,
) -> c_int {
    guard_int(|| {
        let a = obj::<AvObj>(av.cast(), FI_CLASS_AV)?;
        if fi_addr.is_null() && count > 0 {
            return Err(-FI_EINVAL);
        }
        let mut av = lock(&a.av);
        for i in 0..count {
            // SAFETY: `fi_addr` holds `count` addresses.
            let addr = unsafe { *fi_addr.add(i) };
            if !av.remove(addr) {
                return Err(-FI_EINVAL);
            }
        }
        Ok(0)
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut FidAv,
    fi_addr: FiAddr,
    addr: *mut c_void,
    addrlen: *mut size_t,
) -> c_int {
    guard_int(|| {
        let a = obj::<AvObj>(av.cast(), FI_CLASS_AV)?;
        let url = lock(&a.av)
            .url(fi_addr)
            .map(str::to_owned)
            .ok_or(-FI_EINVAL)?;
        write_addr(a.format, &url, addr, addrlen)?;
        Ok(0)
    })
}

unsafe extern "C" fn av_straddr(
    av: *mut FidAv,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut size_t,
) -> *const c_char {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let a = obj::<AvObj>(av.cast(), FI_CLASS_AV).ok()?;
        let text = read_addr(a.format, addr)?;
        let mut n: size_t = text.len() + 1;
        write_addr(FI_ADDR_STR, &text, buf.cast(), &mut n).ok()?;
        put(len, n).ok()?;
        Some(buf.cast_const())
    }));
    r.ok().flatten().unwrap_or(std::ptr::null())
}

// ---- Completion queue ------------------------------------------------------------------

#[repr(C)]
pub(super) struct CqObj {
    c: FidCq,
    pub(super) cq: Cq,
    format: c_int,
    wait: bool,
    /// The last read returned entries: the next finds the queue as that one left it,
    /// without driving the endpoints (see `cq_read_into`).
    fresh: AtomicBool,
}

static CQ_OPS: FiOpsCq = FiOpsCq {
    size: size_of::<FiOpsCq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

unsafe extern "C" fn cq_open(
    domain: *mut FidDomain,
    attr: *mut FiCqAttr,
    cq: *mut *mut FidCq,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        obj::<DomainObj>(domain.cast(), FI_CLASS_DOMAIN)?;
        let attr = c_ref(attr).ok_or(-FI_EINVAL)?;
        let format = match attr.format {
            FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
            f @ FI_CQ_FORMAT_CONTEXT..=FI_CQ_FORMAT_TAGGED => f,
            _ => return Err(-FI_ENOSYS),
        };
        let wait = match attr.wait_obj {
            FI_WAIT_NONE => false,
            FI_WAIT_UNSPEC | FI_WAIT_YIELD => true,
            _ => return Err(-FI_ENOSYS),
        };
        let obj = Box::new(CqObj {
            c: FidCq {
                fid: fid(FI_CLASS_CQ, context, &BASIC_FID_OPS),
                ops: &CQ_OPS,
            },
            cq: Arc::new(CompletionQueue::default()),
            format,
            wait,
            fresh: AtomicBool::new(false),
        });
        put(cq, register(obj, FI_CLASS_CQ).cast())?;
        Ok(0)
    })
}

/// Whether a completion-queue read drives the endpoints bound to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drive {
    /// Every time (a blocking read: it waits for what driving brings).
    Always,
    /// Unless the last read returned entries (`fi_cq_read`, `fi_cq_readfrom`).
    UnlessFresh,
}

fn entry_size(format: c_int) -> usize {
    match format {
        FI_CQ_FORMAT_CONTEXT => 8,
        FI_CQ_FORMAT_MSG => 24,
        FI_CQ_FORMAT_DATA => 40,
        _ => size_of::<FiCqTaggedEntry>(),
    }
}

fn cq_read_into(
    c: &CqObj,
    buf: *mut c_void,
    count: usize,
    src: *mut FiAddr,
    drive: Drive,
) -> Result<isize, i32> {
    if buf.is_null() || count == 0 {
        return Err(-FI_EINVAL);
    }
    // Manual progress: a read drives the endpoints bound to the queue (a sender paced by
    // RPP, or waiting for acknowledgements, moves only when driven). Except the read
    // right after one that returned entries: applications read until the queue is empty
    // (Open MPI 4.1's mtl:ofi does, before it answers the message it just got), and
    // that read would run the pass a delivery leaves for later (acknowledgements, timers,
    // an empty receive call: some 400 ns) between the message and its answer. It takes
    // what the queue holds instead; the read after it drives as usual.
    if drive == Drive::UnlessFresh && c.fresh.load(Ordering::Relaxed) {
        c.fresh.store(false, Ordering::Relaxed);
    } else {
        c.cq.drivers.drive();
    }
    let size = entry_size(c.format);
    // Written under the queue's lock, straight from the queue (no list in between: this
    // runs once per completion of a ping-pong).
    let got = lock(&c.cq.queue)
        .take_with(count, |i, e| {
            let t = FiCqTaggedEntry {
                op_context: e.context as *mut c_void,
                flags: e.flags,
                len: e.len,
                buf: e.buf as *mut c_void,
                data: e.data,
                tag: e.tag,
            };
            // SAFETY: `buf` holds `count` entries of the queue's format (the caller's
            // contract) and `i < count`; each is a prefix of the tagged entry, written
            // bytewise.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&raw const t).cast::<u8>(),
                    buf.cast::<u8>().add(i * size),
                    size,
                );
                if !src.is_null() {
                    *src.add(i) = e.src;
                }
            }
        })
        .map_err(|_| -FI_EAVAIL)?;
    if got == 0 {
        return Err(-FI_EAGAIN);
    }
    c.fresh.store(true, Ordering::Relaxed);
    Ok(got as isize)
}

unsafe extern "C" fn cq_read(cq: *mut FidCq, buf: *mut c_void, count: size_t) -> ssize_t {
    guard(|| {
        cq_read_into(
            obj::<CqObj>(cq.cast(), FI_CLASS_CQ)?,
            buf,
            count,
            std::ptr::null_mut(),
            Drive::UnlessFresh,
        )
    })
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: size_t,
    src: *mut FiAddr,
) -> ssize_t {
    guard(|| {
        cq_read_into(
            obj::<CqObj>(cq.cast(), FI_CLASS_CQ)?,
            buf,
            count,
            src,
            Drive::UnlessFresh,
        )
    })
}

unsafe extern "C" fn cq_readerr(cq: *mut FidCq, buf: *mut FiCqErrEntry, _flags: u64) -> ssize_t {
    guard(|| {
        let c = obj::<CqObj>(cq.cast(), FI_CLASS_CQ)?;
        if buf.is_null() {
            return Err(-FI_EINVAL);
        }
        let e = lock(&c.cq.queue).take_err().ok_or(-FI_EAGAIN)?;
        // SAFETY: `buf` points at the caller's error entry; its `err_data` buffer is
        // left alone and `err_data_size` set to 0 (no provider error data).
        unsafe {
            let b = &mut *buf;
            b.op_context = e.entry.context as *mut c_void;
            b.flags = e.entry.flags;
            b.len = e.entry.len;
            b.buf = e.entry.buf as *mut c_void;
            b.data = e.entry.data;
            b.tag = e.entry.tag;
            b.olen = e.olen;
            b.err = e.err;
            b.prov_errno = e.err;
            b.err_data_size = 0;
        }
        Ok(1)
    })
}

/// `timeout` in milliseconds, negative: forever.
fn deadline(timeout: c_int) -> Option<Instant> {
    u64::try_from(timeout)
        .ok()
        .map(|ms| Instant::now() + Duration::from_millis(ms))
}

fn cq_wait(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut FiAddr,
    timeout: c_int,
) -> Result<isize, i32> {
    let c = obj::<CqObj>(cq.cast(), FI_CLASS_CQ)?;
    if !c.wait {
        return Err(-FI_ENOSYS);
    }
    let until = deadline(timeout);
    loop {
        match cq_read_into(c, buf, count, src, Drive::Always) {
            Err(e) if e == -FI_EAGAIN => {}
            r => return r,
        }
        if until.is_some_and(|t| Instant::now() >= t) {
            return Err(-FI_EAGAIN);
        }
        std::thread::yield_now();
    }
}

unsafe extern "C" fn cq_sread(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: size_t,
    _cond: *const c_void,
    timeout: c_int,
) -> ssize_t {
    guard(|| cq_wait(cq, buf, count, std::ptr::null_mut(), timeout))
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: size_t,
    src: *mut FiAddr,
    _cond: *const c_void,
    timeout: c_int,
) -> ssize_t {
    guard(|| cq_wait(cq, buf, count, src, timeout))
}

unsafe extern "C" fn cq_signal(cq: *mut FidCq) -> c_int {
    guard_int(|| obj::<CqObj>(cq.cast(), FI_CLASS_CQ).map(|_| 0))
}

unsafe extern "C" fn cq_strerror(
    _: *mut FidCq,
    _prov_errno: c_int,
    _: *const c_void,
    buf: *mut c_char,
    len: size_t,
) -> *const c_char {
    let msg = c"myri provider error";
    if !buf.is_null() && len > 0 {
        let n = msg.count_bytes().min(len - 1);
        // SAFETY: `buf` holds `len` bytes; `n + 1 <= len` are written.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), buf, n);
            *buf.add(n) = 0;
        }
        return buf;
    }
    msg.as_ptr()
}

// ---- Counter ---------------------------------------------------------------------------

#[repr(C)]
pub(super) struct CntrObj {
    c: FidCntr,
    pub(super) cntr: Cntr,
}

static CNTR_OPS: FiOpsCntr = FiOpsCntr {
    size: size_of::<FiOpsCntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

unsafe extern "C" fn cntr_open(
    domain: *mut FidDomain,
    attr: *mut FiCntrAttr,
    cntr: *mut *mut FidCntr,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        obj::<DomainObj>(domain.cast(), FI_CLASS_DOMAIN)?;
        if let Some(a) = c_ref(attr)
            && a.events != 0
        {
            return Err(-FI_ENOSYS);
        }
        let obj = Box::new(CntrObj {
            c: FidCntr {
                fid: fid(FI_CLASS_CNTR, context, &BASIC_FID_OPS),
                ops: &CNTR_OPS,
            },
            cntr: Arc::new(Counter::default()),
        });
        put(cntr, register(obj, FI_CLASS_CNTR).cast())?;
        Ok(0)
    })
}

fn counter<'a>(c: *mut FidCntr) -> Option<&'a Counter> {
    obj::<CntrObj>(c.cast(), FI_CLASS_CNTR)
        .ok()
        .map(|o| &*o.cntr)
}

unsafe extern "C" fn cntr_read(c: *mut FidCntr) -> u64 {
    catch_unwind(|| {
        counter(c).map_or(0, |k| {
            k.drivers.drive();
            k.value.load(Ordering::Acquire)
        })
    })
    .unwrap_or(0)
}

unsafe extern "C" fn cntr_readerr(c: *mut FidCntr) -> u64 {
    catch_unwind(|| counter(c).map_or(0, |k| k.errors.load(Ordering::Acquire))).unwrap_or(0)
}

fn cntr_update(c: *mut FidCntr, f: impl FnOnce(&Counter)) -> c_int {
    guard_int(|| {
        f(counter(c).ok_or(-FI_EINVAL)?);
        Ok(0)
    })
}

unsafe extern "C" fn cntr_add(c: *mut FidCntr, v: u64) -> c_int {
    cntr_update(c, |k| {
        k.value.fetch_add(v, Ordering::AcqRel);
    })
}

unsafe extern "C" fn cntr_set(c: *mut FidCntr, v: u64) -> c_int {
    cntr_update(c, |k| k.value.store(v, Ordering::Release))
}

unsafe extern "C" fn cntr_adderr(c: *mut FidCntr, v: u64) -> c_int {
    cntr_update(c, |k| {
        k.errors.fetch_add(v, Ordering::AcqRel);
    })
}

unsafe extern "C" fn cntr_seterr(c: *mut FidCntr, v: u64) -> c_int {
    cntr_update(c, |k| k.errors.store(v, Ordering::Release))
}

unsafe extern "C" fn cntr_wait(c: *mut FidCntr, threshold: u64, timeout: c_int) -> c_int {
    guard_int(|| {
        let k = counter(c).ok_or(-FI_EINVAL)?;
        let until = deadline(timeout);
        let errors = k.errors.load(Ordering::Acquire);
        loop {
            k.drivers.drive();
            if k.value.load(Ordering::Acquire) >= threshold {
                return Ok(0);
            }
            if k.errors.load(Ordering::Acquire) != errors {
                return Err(-FI_EAVAIL);
            }
            if until.is_some_and(|t| Instant::now() >= t) {
                return Err(-FI_ETIMEDOUT);
            }
            std::thread::yield_now();
        }
    })
}

// ---- Event queue -----------------------------------------------------------------------

/// An event queue: RDM and DGRAM endpoints report no connection events, so it stays
/// empty; endpoints may bind to it.
#[repr(C)]
pub(super) struct EqObj {
    c: FidEq,
}

static EQ_OPS: FiOpsEq = FiOpsEq {
    size: size_of::<FiOpsEq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

unsafe extern "C" fn eq_open(
    fabric: *mut FidFabric,
    attr: *mut FiEqAttr,
    eq: *mut *mut FidEq,
    context: *mut c_void,
) -> c_int {
    guard_int(|| {
        obj::<FabricObj>(fabric.cast(), FI_CLASS_FABRIC)?;
        c_ref(attr).ok_or(-FI_EINVAL)?;
        let obj = Box::new(EqObj {
            c: FidEq {
                fid: fid(FI_CLASS_EQ, context, &BASIC_FID_OPS),
                ops: &EQ_OPS,
            },
        });
        put(eq, register(obj, FI_CLASS_EQ).cast())?;
        Ok(0)
    })
}

unsafe extern "C" fn eq_read(
    eq: *mut FidEq,
    _: *mut u32,
    _: *mut c_void,
    _: size_t,
    _: u64,
) -> ssize_t {
    guard(|| obj::<EqObj>(eq.cast(), FI_CLASS_EQ).and(Err(-FI_EAGAIN)))
}

unsafe extern "C" fn eq_readerr(eq: *mut FidEq, _: *mut FiEqErrEntry, _: u64) -> ssize_t {
    guard(|| obj::<EqObj>(eq.cast(), FI_CLASS_EQ).and(Err(-FI_EAGAIN)))
}

unsafe extern "C" fn eq_write(
    eq: *mut FidEq,
    _: u32,
    _: *const c_void,
    _: size_t,
    _: u64,
) -> ssize_t {
    guard(|| obj::<EqObj>(eq.cast(), FI_CLASS_EQ).and(Err(-FI_ENOSYS)))
}

unsafe extern "C" fn eq_sread(
    eq: *mut FidEq,
    _: *mut u32,
    _: *mut c_void,
    _: size_t,
    timeout: c_int,
    _: u64,
) -> ssize_t {
    guard(|| {
        obj::<EqObj>(eq.cast(), FI_CLASS_EQ)?;
        // Nothing ever arrives: wait out the timeout (bounded by a second).
        let ms = u64::try_from(timeout).unwrap_or(1000).min(1000);
        std::thread::sleep(Duration::from_millis(ms));
        Err(-FI_EAGAIN)
    })
}

unsafe extern "C" fn eq_strerror(
    _: *mut FidEq,
    _: c_int,
    _: *const c_void,
    _: *mut c_char,
    _: size_t,
) -> *const c_char {
    c"myri provider error".as_ptr()
}
