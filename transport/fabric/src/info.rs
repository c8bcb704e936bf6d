//! What `fi_getinfo` answers, decided in safe Rust: the endpoint types, capabilities,
//! address formats and attributes this provider really has, checked against the
//! application's hints. The C surface copies hints in and answers out.

use crate::abi::*;
use crate::wire::HEADER_LEN;

/// The capabilities the provider has: two-sided messages, tagged or not, with sources
/// and directed receives.
pub const CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_SEND
    | FI_RECV
    | FI_SOURCE
    | FI_DIRECTED_RECV
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM;
/// Operation flags an application may set on a transmit or receive context.
pub const OP_FLAGS: u64 = FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE;
/// Largest message of an RDM endpoint: 64 MiB (the transport's, less the header).
pub const RDM_MAX_MSG: usize = 64 << 20;
/// Largest message of an RDM endpoint over `shm://`: as over `udp://`. The transport
/// carries at most one slot without copying it twice; the provider sends a longer
/// one in pieces of [`SHM_PIECE`] bytes (see [`crate::wire`]).
pub const SHM_RDM_MAX_MSG: usize = RDM_MAX_MSG;
/// Payload of one piece of a long message over `shm://`: what one slot holds after the
/// header, so that each piece is built in a slot straight from the application's buffer
/// and reaches the receiver as a view of that slot, which the provider copies straight
/// into the posted receive: one copy each way. (Pieces of half the transport's largest
/// message, reassembled by the transport, cost four copies.)
pub const SHM_PIECE: usize = myri_transport::SHM_SLOT_LEN - crate::wire::HEADER_LEN;

/// Largest message of a DGRAM endpoint: one unfragmented UDP datagram on Ethernet.
pub const DGRAM_MAX_MSG: usize = 1472 - HEADER_LEN;
/// Largest message of a DGRAM endpoint over `shm://`: one slot of the region, less the
/// header (a datagram is never cut in pieces).
pub const SHM_DGRAM_MAX_MSG: usize = SHM_PIECE;
/// Largest message `fi_inject` takes (sends copy the caller's bytes in any case).
pub const INJECT_SIZE: usize = 1024;
/// Depth of the transmit and receive queues told to the application.
pub const QUEUE_SIZE: usize = 4096;
/// Buffers in one vectored operation.
pub const IOV_LIMIT: usize = 16;
/// The tag format told to the application: all 64 bits match.
pub const TAG_FORMAT: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// The hints, as far as this provider looks at them (0 or `None`: not given).
#[derive(Debug, Clone, Default)]
pub struct Hints {
    /// `caps`.
    pub caps: u64,
    /// `mode`: what the application supports.
    pub mode: u64,
    /// `addr_format`.
    pub addr_format: u32,
    /// `ep_attr->type`.
    pub ep_type: i32,
    /// `tx_attr->caps | rx_attr->caps`.
    pub ctx_caps: u64,
    /// `tx_attr->op_flags`, `rx_attr->op_flags`.
    pub tx_op_flags: u64,
    /// Same, receive side.
    pub rx_op_flags: u64,
    /// `tx_attr->msg_order | rx_attr->msg_order`.
    pub msg_order: u64,
    /// `ep_attr->max_msg_size`.
    pub max_msg_size: usize,
    /// `ep_attr->mem_tag_format`.
    pub mem_tag_format: u64,
    /// `domain_attr->data_progress` and `control_progress`.
    pub progress: [i32; 2],
    /// `domain_attr->av_type`.
    pub av_type: i32,
    /// `domain_attr->name`.
    pub domain_name: Option<String>,
    /// `fabric_attr->name`.
    pub fabric_name: Option<String>,
}

/// Which transport the provider runs on (`FI_MYRI_TRANSPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `udp://`.
    Udp,
    /// `shm://`: processes of one host.
    Shm,
}

impl Backend {
    /// The domain's name.
    pub fn domain_name(self) -> &'static str {
        match self {
            Backend::Udp => "udp",
            Backend::Shm => "shm",
        }
    }

    /// The backend of a domain name.
    pub fn from_domain_name(name: &str) -> Option<Backend> {
        match name {
            "udp" => Some(Backend::Udp),
            "shm" => Some(Backend::Shm),
            _ => None,
        }
    }
}

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `FI_EP_RDM` or `FI_EP_DGRAM`.
    pub ep_type: i32,
    /// Capabilities.
    pub caps: u64,
    /// Address format.
    pub addr_format: u32,
    /// Largest message.
    pub max_msg_size: usize,
    /// Message order kept.
    pub msg_order: u64,
    /// Transmit and receive operation flags.
    pub op_flags: [u64; 2],
    /// Tag format.
    pub mem_tag_format: u64,
    /// Address vector type.
    pub av_type: i32,
    /// Which backend (the domain).
    pub backend: Backend,
    /// `FI_PROGRESS_AUTO` (a progress thread, when the hints ask for it) or
    /// `FI_PROGRESS_MANUAL` (the application's calls drive everything), for both data and
    /// control.
    pub progress: i32,
}

/// The answers to `hints` on `backend` (empty: `FI_ENODATA`).
pub fn answer(hints: Option<&Hints>, backend: Backend) -> Vec<Answer> {
    let h = hints.cloned().unwrap_or_default();
    if h.caps & !CAPS != 0 || h.ctx_caps & !CAPS != 0 {
        return Vec::new();
    }
    if (h.tx_op_flags | h.rx_op_flags) & !OP_FLAGS != 0 {
        return Vec::new();
    }
    if ![FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE].contains(&h.av_type) {
        return Vec::new();
    }
    if h.domain_name
        .as_deref()
        .is_some_and(|n| n != backend.domain_name())
        || h.fabric_name.as_deref().is_some_and(|n| n != "myri")
    {
        return Vec::new();
    }
    let addr_format = match (backend, h.addr_format) {
        (Backend::Udp, FI_FORMAT_UNSPEC | FI_SOCKADDR | FI_SOCKADDR_IN) => FI_SOCKADDR_IN,
        (Backend::Shm, FI_FORMAT_UNSPEC) => FI_FORMAT_UNSPEC,
        (_, FI_ADDR_STR) => FI_ADDR_STR,
        _ => return Vec::new(),
    };
    let mut caps = if h.caps == 0 { CAPS } else { h.caps };
    if caps & (FI_SEND | FI_RECV) == 0 {
        caps |= FI_SEND | FI_RECV;
    }
    let mut out = Vec::new();
    for ep_type in [FI_EP_RDM, FI_EP_DGRAM] {
        if h.ep_type != FI_EP_UNSPEC && h.ep_type != ep_type {
            continue;
        }
        let (max, order) = match (ep_type, backend) {
            (FI_EP_RDM, Backend::Udp) => (RDM_MAX_MSG, FI_ORDER_SAS),
            (FI_EP_RDM, Backend::Shm) => (SHM_RDM_MAX_MSG, FI_ORDER_SAS),
            // Raw datagrams over shm://: the region's raw mode, a slot each.
            (_, Backend::Shm) => (SHM_DGRAM_MAX_MSG, 0),
            _ => (DGRAM_MAX_MSG, 0),
        };
        if h.msg_order & !order != 0 || h.max_msg_size > max {
            continue;
        }
        out.push(Answer {
            ep_type,
            caps,
            addr_format,
            max_msg_size: max,
            msg_order: order,
            op_flags: [h.tx_op_flags, h.rx_op_flags],
            mem_tag_format: if h.mem_tag_format == 0 {
                TAG_FORMAT
            } else {
                h.mem_tag_format
            },
            av_type: h.av_type,
            backend,
            progress: if h.progress.contains(&FI_PROGRESS_AUTO) {
                FI_PROGRESS_AUTO
            } else {
                FI_PROGRESS_MANUAL
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_hints_give_rdm_and_dgram() {
        let a = answer(None, Backend::Udp);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].ep_type, FI_EP_RDM);
        assert_eq!(a[1].ep_type, FI_EP_DGRAM);
        assert_eq!(a[0].addr_format, FI_SOCKADDR_IN);
    }

    #[test]
    fn impossible_hints_give_nothing() {
        let rma = Hints {
            caps: FI_MSG | FI_RMA,
            ..Hints::default()
        };
        assert!(answer(Some(&rma), Backend::Udp).is_empty());
        let msg_ep = Hints {
            ep_type: 1,
            ..Hints::default()
        };
        assert!(answer(Some(&msg_ep), Backend::Udp).is_empty());
        let ib = Hints {
            addr_format: 4,
            ..Hints::default()
        };
        assert!(answer(Some(&ib), Backend::Udp).is_empty());
        let ordered_dgram = Hints {
            ep_type: FI_EP_DGRAM,
            msg_order: FI_ORDER_SAS,
            ..Hints::default()
        };
        assert!(answer(Some(&ordered_dgram), Backend::Udp).is_empty());
    }

    #[test]
    fn automatic_progress_is_given_when_asked_and_manual_otherwise() {
        assert!(
            answer(None, Backend::Udp)
                .iter()
                .all(|a| a.progress == FI_PROGRESS_MANUAL)
        );
        for progress in [[FI_PROGRESS_AUTO, 0], [0, FI_PROGRESS_AUTO]] {
            let auto = Hints {
                progress,
                ..Hints::default()
            };
            let a = answer(Some(&auto), Backend::Udp);
            assert_eq!(a.len(), 2);
            assert!(a.iter().all(|a| a.progress == FI_PROGRESS_AUTO));
        }
    }

    #[test]
    fn shm_has_its_own_address_format() {
        let a = answer(None, Backend::Shm);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].max_msg_size, 64 << 20);
        assert_eq!(a[0].addr_format, FI_FORMAT_UNSPEC);
        assert_eq!(a[1].ep_type, FI_EP_DGRAM);
        assert_eq!(a[1].max_msg_size, SHM_DGRAM_MAX_MSG);
        assert_eq!(a[1].msg_order, 0);
        let inet = Hints {
            addr_format: FI_SOCKADDR_IN,
            ..Hints::default()
        };
        assert!(answer(Some(&inet), Backend::Shm).is_empty());
    }

    #[test]
    fn tagged_rdm_answers_what_was_asked() {
        let h = Hints {
            caps: FI_TAGGED,
            ep_type: FI_EP_RDM,
            ..Hints::default()
        };
        let a = answer(Some(&h), Backend::Udp);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].caps, FI_TAGGED | FI_SEND | FI_RECV);
    }
}
