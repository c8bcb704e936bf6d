//! The hand-written bindings in `myri_fabric::abi` match the installed libfabric
//! headers: a C program compiled against `<rdma/fabric.h>` prints the size of every
//! struct used and the offset of every field, and each must equal Rust's.

mod common;

use myri_fabric::abi::*;
use std::mem::{offset_of, size_of};
use std::process::Command;

/// (C struct, Rust size, [(field, Rust offset)]).
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

macro_rules! layout {
    ($rust:ty, $c:literal, $($field:ident),* $(,)?) => {
        (
            $c,
            size_of::<$rust>(),
            vec![$((stringify!($field).trim_end_matches('_'), offset_of!($rust, $field))),*],
        )
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(
            FiTxAttr,
            "struct fi_tx_attr",
            caps,
            mode,
            op_flags,
            msg_order,
            comp_order,
            inject_size,
            size,
            iov_limit,
            rma_iov_limit,
            tclass
        ),
        layout!(
            FiRxAttr,
            "struct fi_rx_attr",
            caps,
            mode,
            op_flags,
            msg_order,
            comp_order,
            total_buffered_recv,
            size,
            iov_limit
        ),
        layout!(
            FiEpAttr,
            "struct fi_ep_attr",
            type_,
            protocol,
            protocol_version,
            max_msg_size,
            msg_prefix_size,
            max_order_raw_size,
            max_order_war_size,
            max_order_waw_size,
            mem_tag_format,
            tx_ctx_cnt,
            rx_ctx_cnt,
            auth_key_size,
            auth_key
        ),
        layout!(
            FiDomainAttr,
            "struct fi_domain_attr",
            domain,
            name,
            threading,
            control_progress,
            data_progress,
            resource_mgmt,
            av_type,
            mr_mode,
            mr_key_size,
            cq_data_size,
            cq_cnt,
            ep_cnt,
            tx_ctx_cnt,
            rx_ctx_cnt,
            max_ep_tx_ctx,
            max_ep_rx_ctx,
            max_ep_stx_ctx,
            max_ep_srx_ctx,
            cntr_cnt,
            mr_iov_limit,
            caps,
            mode,
            auth_key,
            auth_key_size,
            max_err_data,
            mr_cnt,
            tclass
        ),
        layout!(
            FiFabricAttr,
            "struct fi_fabric_attr",
            fabric,
            name,
            prov_name,
            prov_version,
            api_version
        ),
        layout!(
            FiInfo,
            "struct fi_info",
            next,
            caps,
            mode,
            addr_format,
            src_addrlen,
            dest_addrlen,
            src_addr,
            dest_addr,
            handle,
            tx_attr,
            rx_attr,
            ep_attr,
            domain_attr,
            fabric_attr,
            nic
        ),
        layout!(
            FiOps,
            "struct fi_ops",
            size,
            close,
            bind,
            control,
            ops_open,
            tostr,
            ops_set
        ),
        layout!(Fid, "struct fid", fclass, context, ops),
        layout!(FiContext, "struct fi_context", internal),
        layout!(
            FiProvider,
            "struct fi_provider",
            version,
            fi_version,
            context,
            name,
            getinfo,
            fabric,
            cleanup
        ),
        layout!(
            FiOpsFabric,
            "struct fi_ops_fabric",
            size,
            domain,
            passive_ep,
            eq_open,
            wait_open,
            trywait,
            domain2
        ),
        layout!(FidFabric, "struct fid_fabric", fid, ops, api_version),
        layout!(
            FiOpsDomain,
            "struct fi_ops_domain",
            size,
            av_open,
            cq_open,
            endpoint,
            scalable_ep,
            cntr_open,
            poll_open,
            stx_ctx,
            srx_ctx,
            query_atomic,
            query_collective,
            endpoint2
        ),
        layout!(FiOpsMr, "struct fi_ops_mr", size, reg, regv, regattr),
        layout!(FidDomain, "struct fid_domain", fid, ops, mr),
        layout!(FidMr, "struct fid_mr", fid, mem_desc, key),
        layout!(
            FiMrAttr,
            "struct fi_mr_attr",
            mr_iov,
            iov_count,
            access,
            offset,
            requested_key,
            context,
            auth_key_size,
            auth_key,
            iface,
            device
        ),
        layout!(
            FiAvAttr,
            "struct fi_av_attr",
            type_,
            rx_ctx_bits,
            count,
            ep_per_node,
            name,
            map_addr,
            flags
        ),
        layout!(
            FiOpsAv,
            "struct fi_ops_av",
            size,
            insert,
            insertsvc,
            insertsym,
            remove,
            lookup,
            straddr,
            av_set
        ),
        layout!(FidAv, "struct fid_av", fid, ops),
        layout!(
            FiEqAttr,
            "struct fi_eq_attr",
            size,
            flags,
            wait_obj,
            signaling_vector,
            wait_set
        ),
        layout!(
            FiEqErrEntry,
            "struct fi_eq_err_entry",
            fid,
            context,
            data,
            err,
            prov_errno,
            err_data,
            err_data_size
        ),
        layout!(
            FiOpsEq,
            "struct fi_ops_eq",
            size,
            read,
            readerr,
            write,
            sread,
            strerror
        ),
        layout!(FidEq, "struct fid_eq", fid, ops),
        layout!(
            FiCqAttr,
            "struct fi_cq_attr",
            size,
            flags,
            format,
            wait_obj,
            signaling_vector,
            wait_cond,
            wait_set
        ),
        layout!(
            FiCqTaggedEntry,
            "struct fi_cq_tagged_entry",
            op_context,
            flags,
            len,
            buf,
            data,
            tag
        ),
        layout!(
            FiCqErrEntry,
            "struct fi_cq_err_entry",
            op_context,
            flags,
            len,
            buf,
            data,
            tag,
            olen,
            err,
            prov_errno,
            err_data,
            err_data_size
        ),
        layout!(
            FiOpsCq,
            "struct fi_ops_cq",
            size,
            read,
            readfrom,
            readerr,
            sread,
            sreadfrom,
            signal,
            strerror
        ),
        layout!(FidCq, "struct fid_cq", fid, ops),
        layout!(
            FiCntrAttr,
            "struct fi_cntr_attr",
            events,
            wait_obj,
            wait_set,
            flags
        ),
        layout!(
            FiOpsCntr,
            "struct fi_ops_cntr",
            size,
            read,
            readerr,
            add,
            set,
            wait,
            adderr,
            seterr
        ),
        layout!(FidCntr, "struct fid_cntr", fid, ops),
        layout!(
            FiMsg,
            "struct fi_msg",
            msg_iov,
            desc,
            iov_count,
            addr,
            context,
            data
        ),
        layout!(
            FiMsgTagged,
            "struct fi_msg_tagged",
            msg_iov,
            desc,
            iov_count,
            addr,
            tag,
            ignore,
            context,
            data
        ),
        layout!(
            FiOpsEp,
            "struct fi_ops_ep",
            size,
            cancel,
            getopt,
            setopt,
            tx_ctx,
            rx_ctx,
            rx_size_left,
            tx_size_left
        ),
        layout!(
            FiOpsCm,
            "struct fi_ops_cm",
            size,
            setname,
            getname,
            getpeer,
            connect,
            listen,
            accept,
            reject,
            shutdown,
            join
        ),
        layout!(
            FiOpsMsg,
            "struct fi_ops_msg",
            size,
            recv,
            recvv,
            recvmsg,
            send,
            sendv,
            sendmsg,
            inject,
            senddata,
            injectdata
        ),
        layout!(
            FiOpsTagged,
            "struct fi_ops_tagged",
            size,
            recv,
            recvv,
            recvmsg,
            send,
            sendv,
            sendmsg,
            inject,
            senddata,
            injectdata
        ),
        layout!(
            FidEp,
            "struct fid_ep",
            fid,
            ops,
            cm,
            msg,
            rma,
            tagged,
            atomic,
            collective
        ),
        ("struct fi_ops_rma", size_of::<NoSysOps<9>>(), vec![]),
        ("struct fi_ops_atomic", size_of::<NoSysOps<13>>(), vec![]),
        (
            "struct fi_ops_collective",
            size_of::<NoSysOps<11>>(),
            vec![],
        ),
    ]
}

/// Constants whose values the provider relies on, as C sees them.
fn constants() -> Vec<(&'static str, i128)> {
    vec![
        ("FI_MSG", FI_MSG.into()),
        ("FI_TAGGED", FI_TAGGED.into()),
        ("FI_RECV", FI_RECV.into()),
        ("FI_SEND", FI_SEND.into()),
        ("FI_REMOTE_CQ_DATA", FI_REMOTE_CQ_DATA.into()),
        ("FI_PEEK", FI_PEEK.into()),
        ("FI_CLAIM", FI_CLAIM.into()),
        ("FI_DISCARD", FI_DISCARD.into()),
        ("FI_COMPLETION", FI_COMPLETION.into()),
        ("FI_INJECT", FI_INJECT.into()),
        ("FI_SOURCE", FI_SOURCE.into()),
        ("FI_DIRECTED_RECV", FI_DIRECTED_RECV.into()),
        ("FI_SELECTIVE_COMPLETION", FI_SELECTIVE_COMPLETION.into()),
        ("FI_SOCKADDR_IN", FI_SOCKADDR_IN.into()),
        ("FI_ADDR_STR", FI_ADDR_STR.into()),
        ("FI_EP_RDM", FI_EP_RDM.into()),
        ("FI_EP_DGRAM", FI_EP_DGRAM.into()),
        ("FI_CLASS_EP", FI_CLASS_EP as i128),
        ("FI_CLASS_AV", FI_CLASS_AV as i128),
        ("FI_CLASS_CQ", FI_CLASS_CQ as i128),
        ("FI_CLASS_CNTR", FI_CLASS_CNTR as i128),
        ("FI_CLASS_EQ", FI_CLASS_EQ as i128),
        ("FI_CLASS_MR", FI_CLASS_MR as i128),
        ("FI_CQ_FORMAT_TAGGED", FI_CQ_FORMAT_TAGGED.into()),
        ("FI_WAIT_YIELD", FI_WAIT_YIELD.into()),
        ("FI_ENABLE", FI_ENABLE.into()),
        ("FI_GETOPSFLAG", FI_GETOPSFLAG.into()),
        ("FI_SETOPSFLAG", FI_SETOPSFLAG.into()),
        ("FI_EAVAIL", FI_EAVAIL.into()),
        ("FI_ETRUNC", FI_ETRUNC.into()),
        ("FI_EBADFLAGS", FI_EBADFLAGS.into()),
        ("FI_ENOMSG", FI_ENOMSG.into()),
        ("FI_ECANCELED", FI_ECANCELED.into()),
        ("FI_PROGRESS_MANUAL", FI_PROGRESS_MANUAL.into()),
        ("FI_THREAD_SAFE", FI_THREAD_SAFE.into()),
        ("FI_AV_TABLE", FI_AV_TABLE.into()),
    ]
}

#[test]
fn rust_layouts_match_the_installed_headers() {
    if !common::require_libfabric() {
        return;
    }
    let layouts = layouts();
    let constants = constants();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/fabric.h>\n\
         #include <rdma/fi_domain.h>\n#include <rdma/fi_endpoint.h>\n#include <rdma/fi_cm.h>\n\
         #include <rdma/fi_eq.h>\n#include <rdma/fi_tagged.h>\n#include <rdma/fi_rma.h>\n\
         #include <rdma/fi_atomic.h>\n#include <rdma/fi_collective.h>\n\
         #include <rdma/fi_errno.h>\n#include <rdma/providers/fi_prov.h>\nint main(void) {\n",
    );
    for (name, _, fields) in &layouts {
        c += &format!("printf(\"%zu\\n\", sizeof({name}));\n");
        for (f, _) in fields {
            c += &format!("printf(\"%zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    for (name, _) in &constants {
        c += &format!("printf(\"%lld\\n\", (long long)({name}));\n");
    }
    c += "return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("myri-fabric-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, &c).unwrap();
    let cc = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut c_values = text.lines().map(|l| l.parse::<i128>().unwrap());
    let mut checked = 0;
    for (name, size, fields) in &layouts {
        assert_eq!(Some(*size as i128), c_values.next(), "sizeof({name})");
        for (f, off) in fields {
            assert_eq!(Some(*off as i128), c_values.next(), "offsetof({name}, {f})");
            checked += 1;
        }
    }
    for (name, v) in &constants {
        assert_eq!(Some(*v), c_values.next(), "{name}");
    }
    assert!(c_values.next().is_none());
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{} structs, {checked} fields, {} constants",
        layouts.len(),
        constants.len()
    );
}
