//! libfabric 1.17's C structures and constants, the subset this provider uses, written by
//! hand from `<rdma/fabric.h>` and its siblings. `tests/abi_layout.rs` compiles a C
//! program against the installed headers and checks every size and field offset here.
//!
//! Function-pointer fields are `Option<unsafe extern "C" fn(..)>` with the C signatures;
//! tables of operations this provider does not offer (RMA, atomics, collectives,
//! connection management) are [`NoSysOps`]: the right number of entries, each returning
//! `-FI_ENOSYS`.

#![allow(missing_docs)] // Field names are libfabric's; fi_*(3) documents them.

use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};

pub type FiAddr = u64;

// ---- Versions, capabilities, flags ------------------------------------------------

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_MORE: u64 = 1 << 18;
pub const FI_PEEK: u64 = 1 << 19;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;
pub const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
pub const FI_LOCAL_COMM: u64 = 1 << 51;
pub const FI_REMOTE_COMM: u64 = 1 << 52;
pub const FI_SOURCE: u64 = 1 << 57;
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
pub const FI_CLAIM: u64 = 1 << 59;
pub const FI_DISCARD: u64 = 1 << 58;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_CONTEXT2: u64 = 1 << 50;

pub const FI_ADDR_UNSPEC: FiAddr = u64::MAX;
pub const FI_ADDR_NOTAVAIL: FiAddr = u64::MAX;

// Address formats.
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_SOCKADDR: u32 = 1;
pub const FI_SOCKADDR_IN: u32 = 2;
pub const FI_ADDR_STR: u32 = 9;

// Endpoint types.
pub const FI_EP_UNSPEC: c_int = 0;
pub const FI_EP_DGRAM: c_int = 2;
pub const FI_EP_RDM: c_int = 3;

// AV types, progress, threading, resource management.
pub const FI_AV_UNSPEC: c_int = 0;
pub const FI_AV_MAP: c_int = 1;
pub const FI_AV_TABLE: c_int = 2;
pub const FI_PROGRESS_UNSPEC: c_int = 0;
pub const FI_PROGRESS_AUTO: c_int = 1;
pub const FI_PROGRESS_MANUAL: c_int = 2;
pub const FI_THREAD_UNSPEC: c_int = 0;
pub const FI_THREAD_SAFE: c_int = 1;
pub const FI_RM_ENABLED: c_int = 2;
pub const FI_ORDER_SAS: u64 = 1 << 8;

// Memory registration modes.
pub const FI_MR_LOCAL: c_int = 1 << 2;

// CQ formats, wait objects, conditions.
pub const FI_CQ_FORMAT_UNSPEC: c_int = 0;
pub const FI_CQ_FORMAT_CONTEXT: c_int = 1;
pub const FI_CQ_FORMAT_MSG: c_int = 2;
pub const FI_CQ_FORMAT_DATA: c_int = 3;
pub const FI_CQ_FORMAT_TAGGED: c_int = 4;
pub const FI_WAIT_NONE: c_int = 0;
pub const FI_WAIT_UNSPEC: c_int = 1;
pub const FI_WAIT_YIELD: c_int = 5;

// Classes.
pub const FI_CLASS_FABRIC: usize = 1;
pub const FI_CLASS_DOMAIN: usize = 2;
pub const FI_CLASS_EP: usize = 3;
pub const FI_CLASS_AV: usize = 11;
pub const FI_CLASS_MR: usize = 12;
pub const FI_CLASS_EQ: usize = 13;
pub const FI_CLASS_CQ: usize = 14;
pub const FI_CLASS_CNTR: usize = 15;

// fi_control commands.
pub const FI_GETFIDFLAG: c_int = 0;
pub const FI_SETFIDFLAG: c_int = 1;
pub const FI_GETOPSFLAG: c_int = 2;
pub const FI_SETOPSFLAG: c_int = 3;
pub const FI_ENABLE: c_int = 6;

// fi_param_type.
pub const FI_PARAM_STRING: c_int = 0;
pub const FI_PARAM_INT: c_int = 1;

// Errors (positive; entry points return them negated).
pub const FI_ENOENT: c_int = libc::ENOENT;
pub const FI_EBADF: c_int = libc::EBADF;
pub const FI_ENOMEM: c_int = libc::ENOMEM;
pub const FI_EBUSY: c_int = libc::EBUSY;
pub const FI_EINVAL: c_int = libc::EINVAL;
pub const FI_EAGAIN: c_int = libc::EAGAIN;
pub const FI_ENOSYS: c_int = libc::ENOSYS;
pub const FI_ENOMSG: c_int = libc::ENOMSG;
pub const FI_ENODATA: c_int = libc::ENODATA;
pub const FI_EMSGSIZE: c_int = libc::EMSGSIZE;
pub const FI_EOPNOTSUPP: c_int = libc::EOPNOTSUPP;
pub const FI_EADDRNOTAVAIL: c_int = libc::EADDRNOTAVAIL;
pub const FI_ECANCELED: c_int = libc::ECANCELED;
pub const FI_ETIMEDOUT: c_int = libc::ETIMEDOUT;
pub const FI_EIO: c_int = libc::EIO;
pub const FI_ENOSPC: c_int = libc::ENOSPC;
pub const FI_EOTHER: c_int = 256;
pub const FI_EAVAIL: c_int = 259;
pub const FI_EBADFLAGS: c_int = 260;
pub const FI_ETRUNC: c_int = 265;
pub const FI_ENOPEER: c_int = 268;

// ---- Attributes and fi_info -------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FiTxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: size_t,
    pub size: size_t,
    pub iov_limit: size_t,
    pub rma_iov_limit: size_t,
    pub tclass: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FiRxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: size_t,
    pub size: size_t,
    pub iov_limit: size_t,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiEpAttr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: size_t,
    pub msg_prefix_size: size_t,
    pub max_order_raw_size: size_t,
    pub max_order_war_size: size_t,
    pub max_order_waw_size: size_t,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: size_t,
    pub rx_ctx_cnt: size_t,
    pub auth_key_size: size_t,
    pub auth_key: *mut u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiDomainAttr {
    pub domain: *mut FidDomain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: size_t,
    pub cq_data_size: size_t,
    pub cq_cnt: size_t,
    pub ep_cnt: size_t,
    pub tx_ctx_cnt: size_t,
    pub rx_ctx_cnt: size_t,
    pub max_ep_tx_ctx: size_t,
    pub max_ep_rx_ctx: size_t,
    pub max_ep_stx_ctx: size_t,
    pub max_ep_srx_ctx: size_t,
    pub cntr_cnt: size_t,
    pub mr_iov_limit: size_t,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: size_t,
    pub max_err_data: size_t,
    pub mr_cnt: size_t,
    pub tclass: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiFabricAttr {
    pub fabric: *mut FidFabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiInfo {
    pub next: *mut FiInfo,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: size_t,
    pub dest_addrlen: size_t,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut Fid,
    pub tx_attr: *mut FiTxAttr,
    pub rx_attr: *mut FiRxAttr,
    pub ep_attr: *mut FiEpAttr,
    pub domain_attr: *mut FiDomainAttr,
    pub fabric_attr: *mut FiFabricAttr,
    pub nic: *mut c_void,
}

// ---- fid and the generic operations -----------------------------------------------

#[repr(C)]
pub struct FiOps {
    pub size: size_t,
    pub close: Option<unsafe extern "C" fn(*mut Fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int>,
    pub control: Option<unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int>,
    pub ops_open: Option<
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub tostr: Option<unsafe extern "C" fn(*const Fid, *mut c_char, size_t) -> c_int>,
    pub ops_set: Option<
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int,
    >,
}

#[repr(C)]
pub struct Fid {
    pub fclass: size_t,
    pub context: *mut c_void,
    pub ops: *const FiOps,
}

/// A table of `N` operations this provider does not offer, each answering `-FI_ENOSYS`
/// (libfabric's inline wrappers call through these tables without checking).
#[repr(C)]
pub struct NoSysOps<const N: usize> {
    pub size: size_t,
    pub ops: [unsafe extern "C" fn() -> ssize_t; N],
}

#[repr(C)]
pub struct FiContext {
    pub internal: [*mut c_void; 4],
}

#[repr(C)]
pub struct FiProvider {
    pub version: u32,
    pub fi_version: u32,
    pub context: FiContext,
    pub name: *const c_char,
    pub getinfo: Option<
        unsafe extern "C" fn(
            u32,
            *const c_char,
            *const c_char,
            u64,
            *const FiInfo,
            *mut *mut FiInfo,
        ) -> c_int,
    >,
    pub fabric:
        Option<unsafe extern "C" fn(*mut FiFabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int>,
    pub cleanup: Option<unsafe extern "C" fn()>,
}

// ---- Fabric and domain --------------------------------------------------------------

#[repr(C)]
pub struct FiOpsFabric {
    pub size: size_t,
    pub domain: Option<
        unsafe extern "C" fn(
            *mut FidFabric,
            *mut FiInfo,
            *mut *mut FidDomain,
            *mut c_void,
        ) -> c_int,
    >,
    pub passive_ep: Option<unsafe extern "C" fn() -> ssize_t>,
    pub eq_open: Option<
        unsafe extern "C" fn(*mut FidFabric, *mut FiEqAttr, *mut *mut FidEq, *mut c_void) -> c_int,
    >,
    pub wait_open: Option<unsafe extern "C" fn() -> ssize_t>,
    pub trywait: Option<unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int>,
    pub domain2: Option<
        unsafe extern "C" fn(
            *mut FidFabric,
            *mut FiInfo,
            *mut *mut FidDomain,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct FidFabric {
    pub fid: Fid,
    pub ops: *const FiOpsFabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct FiOpsDomain {
    pub size: size_t,
    pub av_open: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut FiAvAttr, *mut *mut FidAv, *mut c_void) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut FiCqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    >,
    pub endpoint: Option<
        unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int,
    >,
    pub scalable_ep: Option<unsafe extern "C" fn() -> ssize_t>,
    pub cntr_open: Option<
        unsafe extern "C" fn(
            *mut FidDomain,
            *mut FiCntrAttr,
            *mut *mut FidCntr,
            *mut c_void,
        ) -> c_int,
    >,
    pub poll_open: Option<unsafe extern "C" fn() -> ssize_t>,
    pub stx_ctx: Option<unsafe extern "C" fn() -> ssize_t>,
    pub srx_ctx: Option<unsafe extern "C" fn() -> ssize_t>,
    pub query_atomic: Option<unsafe extern "C" fn() -> ssize_t>,
    pub query_collective: Option<unsafe extern "C" fn() -> ssize_t>,
    pub endpoint2: Option<
        unsafe extern "C" fn(
            *mut FidDomain,
            *mut FiInfo,
            *mut *mut FidEp,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct FiOpsMr {
    pub size: size_t,
    pub reg: Option<
        unsafe extern "C" fn(
            *mut Fid,
            *const c_void,
            size_t,
            u64,
            u64,
            u64,
            u64,
            *mut *mut FidMr,
            *mut c_void,
        ) -> c_int,
    >,
    pub regv: Option<
        unsafe extern "C" fn(
            *mut Fid,
            *const iovec,
            size_t,
            u64,
            u64,
            u64,
            u64,
            *mut *mut FidMr,
            *mut c_void,
        ) -> c_int,
    >,
    pub regattr:
        Option<unsafe extern "C" fn(*mut Fid, *const FiMrAttr, u64, *mut *mut FidMr) -> c_int>,
}

#[repr(C)]
pub struct FidDomain {
    pub fid: Fid,
    pub ops: *const FiOpsDomain,
    pub mr: *const FiOpsMr,
}

#[repr(C)]
pub struct FidMr {
    pub fid: Fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct FiMrAttr {
    pub mr_iov: *const iovec,
    pub iov_count: size_t,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub context: *mut c_void,
    pub auth_key_size: size_t,
    pub auth_key: *mut u8,
    pub iface: c_int,
    pub device: u64,
}

// ---- Address vector -------------------------------------------------------------------

#[repr(C)]
pub struct FiAvAttr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: size_t,
    pub ep_per_node: size_t,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct FiOpsAv {
    pub size: size_t,
    pub insert: Option<
        unsafe extern "C" fn(
            *mut FidAv,
            *const c_void,
            size_t,
            *mut FiAddr,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub insertsvc: Option<
        unsafe extern "C" fn(
            *mut FidAv,
            *const c_char,
            *const c_char,
            *mut FiAddr,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub insertsym: Option<unsafe extern "C" fn() -> ssize_t>,
    pub remove: Option<unsafe extern "C" fn(*mut FidAv, *mut FiAddr, size_t, u64) -> c_int>,
    pub lookup: Option<unsafe extern "C" fn(*mut FidAv, FiAddr, *mut c_void, *mut size_t) -> c_int>,
    pub straddr: Option<
        unsafe extern "C" fn(*mut FidAv, *const c_void, *mut c_char, *mut size_t) -> *const c_char,
    >,
    pub av_set: Option<unsafe extern "C" fn() -> ssize_t>,
}

#[repr(C)]
pub struct FidAv {
    pub fid: Fid,
    pub ops: *const FiOpsAv,
}

// ---- Event queue, completion queue, counter -------------------------------------------

#[repr(C)]
pub struct FiEqAttr {
    pub size: size_t,
    pub flags: u64,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct FiEqErrEntry {
    pub fid: *mut Fid,
    pub context: *mut c_void,
    pub data: u64,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: size_t,
}

#[repr(C)]
pub struct FiOpsEq {
    pub size: size_t,
    pub read:
        Option<unsafe extern "C" fn(*mut FidEq, *mut u32, *mut c_void, size_t, u64) -> ssize_t>,
    pub readerr: Option<unsafe extern "C" fn(*mut FidEq, *mut FiEqErrEntry, u64) -> ssize_t>,
    pub write: Option<unsafe extern "C" fn(*mut FidEq, u32, *const c_void, size_t, u64) -> ssize_t>,
    pub sread: Option<
        unsafe extern "C" fn(*mut FidEq, *mut u32, *mut c_void, size_t, c_int, u64) -> ssize_t,
    >,
    pub strerror: Option<
        unsafe extern "C" fn(
            *mut FidEq,
            c_int,
            *const c_void,
            *mut c_char,
            size_t,
        ) -> *const c_char,
    >,
}

#[repr(C)]
pub struct FidEq {
    pub fid: Fid,
    pub ops: *const FiOpsEq,
}

#[repr(C)]
pub struct FiCqAttr {
    pub size: size_t,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiCqTaggedEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: size_t,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

#[repr(C)]
pub struct FiCqErrEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: size_t,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: size_t,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: size_t,
}

#[repr(C)]
pub struct FiOpsCq {
    pub size: size_t,
    pub read: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, size_t) -> ssize_t>,
    pub readfrom:
        Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, size_t, *mut FiAddr) -> ssize_t>,
    pub readerr: Option<unsafe extern "C" fn(*mut FidCq, *mut FiCqErrEntry, u64) -> ssize_t>,
    pub sread: Option<
        unsafe extern "C" fn(*mut FidCq, *mut c_void, size_t, *const c_void, c_int) -> ssize_t,
    >,
    pub sreadfrom: Option<
        unsafe extern "C" fn(
            *mut FidCq,
            *mut c_void,
            size_t,
            *mut FiAddr,
            *const c_void,
            c_int,
        ) -> ssize_t,
    >,
    pub signal: Option<unsafe extern "C" fn(*mut FidCq) -> c_int>,
    pub strerror: Option<
        unsafe extern "C" fn(
            *mut FidCq,
            c_int,
            *const c_void,
            *mut c_char,
            size_t,
        ) -> *const c_char,
    >,
}

#[repr(C)]
pub struct FidCq {
    pub fid: Fid,
    pub ops: *const FiOpsCq,
}

#[repr(C)]
pub struct FiCntrAttr {
    pub events: c_int,
    pub wait_obj: c_int,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct FiOpsCntr {
    pub size: size_t,
    pub read: Option<unsafe extern "C" fn(*mut FidCntr) -> u64>,
    pub readerr: Option<unsafe extern "C" fn(*mut FidCntr) -> u64>,
    pub add: Option<unsafe extern "C" fn(*mut FidCntr, u64) -> c_int>,
    pub set: Option<unsafe extern "C" fn(*mut FidCntr, u64) -> c_int>,
    pub wait: Option<unsafe extern "C" fn(*mut FidCntr, u64, c_int) -> c_int>,
    pub adderr: Option<unsafe extern "C" fn(*mut FidCntr, u64) -> c_int>,
    pub seterr: Option<unsafe extern "C" fn(*mut FidCntr, u64) -> c_int>,
}

#[repr(C)]
pub struct FidCntr {
    pub fid: Fid,
    pub ops: *const FiOpsCntr,
}

// ---- Endpoint --------------------------------------------------------------------------

#[repr(C)]
pub struct FiMsg {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: size_t,
    pub addr: FiAddr,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct FiMsgTagged {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: size_t,
    pub addr: FiAddr,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct FiOpsEp {
    pub size: size_t,
    pub cancel: Option<unsafe extern "C" fn(*mut Fid, *mut c_void) -> ssize_t>,
    pub getopt:
        Option<unsafe extern "C" fn(*mut Fid, c_int, c_int, *mut c_void, *mut size_t) -> c_int>,
    pub setopt:
        Option<unsafe extern "C" fn(*mut Fid, c_int, c_int, *const c_void, size_t) -> c_int>,
    pub tx_ctx: Option<unsafe extern "C" fn() -> ssize_t>,
    pub rx_ctx: Option<unsafe extern "C" fn() -> ssize_t>,
    pub rx_size_left: Option<unsafe extern "C" fn(*mut FidEp) -> ssize_t>,
    pub tx_size_left: Option<unsafe extern "C" fn(*mut FidEp) -> ssize_t>,
}

#[repr(C)]
pub struct FiOpsCm {
    pub size: size_t,
    pub setname: Option<unsafe extern "C" fn(*mut Fid, *mut c_void, size_t) -> c_int>,
    pub getname: Option<unsafe extern "C" fn(*mut Fid, *mut c_void, *mut size_t) -> c_int>,
    pub getpeer: Option<unsafe extern "C" fn() -> ssize_t>,
    pub connect: Option<unsafe extern "C" fn() -> ssize_t>,
    pub listen: Option<unsafe extern "C" fn() -> ssize_t>,
    pub accept: Option<unsafe extern "C" fn() -> ssize_t>,
    pub reject: Option<unsafe extern "C" fn() -> ssize_t>,
    pub shutdown: Option<unsafe extern "C" fn() -> ssize_t>,
    pub join: Option<unsafe extern "C" fn() -> ssize_t>,
}

#[repr(C)]
pub struct FiOpsMsg {
    pub size: size_t,
    pub recv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *mut c_void,
            size_t,
            *mut c_void,
            FiAddr,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const iovec,
            *mut *mut c_void,
            size_t,
            FiAddr,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(*mut FidEp, *const FiMsg, u64) -> ssize_t>,
    pub send: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const c_void,
            size_t,
            *mut c_void,
            FiAddr,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const iovec,
            *mut *mut c_void,
            size_t,
            FiAddr,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(*mut FidEp, *const FiMsg, u64) -> ssize_t>,
    pub inject: Option<unsafe extern "C" fn(*mut FidEp, *const c_void, size_t, FiAddr) -> ssize_t>,
    pub senddata: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const c_void,
            size_t,
            *mut c_void,
            u64,
            FiAddr,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata:
        Option<unsafe extern "C" fn(*mut FidEp, *const c_void, size_t, u64, FiAddr) -> ssize_t>,
}

#[repr(C)]
pub struct FiOpsTagged {
    pub size: size_t,
    pub recv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *mut c_void,
            size_t,
            *mut c_void,
            FiAddr,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const iovec,
            *mut *mut c_void,
            size_t,
            FiAddr,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(*mut FidEp, *const FiMsgTagged, u64) -> ssize_t>,
    pub send: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const c_void,
            size_t,
            *mut c_void,
            FiAddr,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendv: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const iovec,
            *mut *mut c_void,
            size_t,
            FiAddr,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(*mut FidEp, *const FiMsgTagged, u64) -> ssize_t>,
    pub inject:
        Option<unsafe extern "C" fn(*mut FidEp, *const c_void, size_t, FiAddr, u64) -> ssize_t>,
    pub senddata: Option<
        unsafe extern "C" fn(
            *mut FidEp,
            *const c_void,
            size_t,
            *mut c_void,
            u64,
            FiAddr,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata: Option<
        unsafe extern "C" fn(*mut FidEp, *const c_void, size_t, u64, FiAddr, u64) -> ssize_t,
    >,
}

#[repr(C)]
pub struct FidEp {
    pub fid: Fid,
    pub ops: *const FiOpsEp,
    pub cm: *const FiOpsCm,
    pub msg: *const FiOpsMsg,
    pub rma: *const NoSysOps<9>,
    pub tagged: *const FiOpsTagged,
    pub atomic: *const NoSysOps<13>,
    pub collective: *const NoSysOps<11>,
}
