//! The host communications block (seed 000, Host Communications Block) and the SRAM map.
//!
//! The HCB is the only thing the host and the control program share: a structure in SRAM
//! whose address the MCP publishes at the fixed location [`HCB_PTR`] (word 3 of the image,
//! where seed 000's `crts0.s` keeps `_hcb_ptr`). Every field is a big-endian 32-bit word.
//!
//! ```text
//! +0      SIG_START  'HCB<'                 signature, start
//! +4      MCP_STATE                         handshake state (see [`state`])
//! +8      HANDSHAKE                         nonce written by the host, echoed by the MCP
//! +12     VERSION
//! +16     geometry: channels, send slots, recv slots, routes, pio max, max payload
//! +64     counters: MCP_COUNTERS words, written by the MCP
//! SEND    send channel: TAIL (host), HEAD (MCP), SENT (MCP), then SEND_SLOTS slots of
//!         SLOT_LEN bytes: FLAGS, LEN, CHAN, ROUTE, HOST_HI, HOST_LO, INLINE_LEN, SEQ
//! PIO     SEND_SLOTS PIO buffers of PIO_BUF bytes: route area, frame header, payload
//! MID     SIG_MIDDLE 'HCB|'
//! RECV    NUM_CHANNELS channels: STATE, POLL_HI, POLL_LO, POSTED (host), DONE (MCP),
//!         then RECV_SLOTS descriptors of HOST_HI, HOST_LO, CAPACITY, pad
//! ROUTES  NUM_ROUTES entries of ROUTE_ENTRY bytes: VALID, LEN, 32 route bytes
//! END     SIG_END 'HCB>'
//! ```
//!
//! Queue indices are free-running `u32` counters (wrapping), so full and empty differ:
//! `tail - head == slots` is full, `tail == head` is empty. Sizes are powers of two or sums
//! of two, as seed 000 recommends (the LANai has no multiply).

use myri_device::sram::{Sram, SramError};

/// SRAM address of the word holding the HCB's address (`_hcb_ptr` in `crts0.s`).
pub const HCB_PTR: u32 = 0xC;
/// Where the MCP puts the HCB.
pub const HCB_BASE: u32 = 0x1000;

/// The first word of an MCP image: 'MCP0'.
pub const IMAGE_MAGIC: u32 = 0x4D43_5030;

/// Signature at the start of the HCB.
pub const SIG_START: u32 = 0x4843_423C;
/// Signature in the middle of the HCB.
pub const SIG_MIDDLE: u32 = 0x4843_427C;
/// Signature at the end of the HCB.
pub const SIG_END: u32 = 0x4843_423E;
/// Layout version (2: data frames carry a sender checksum, completion records are 32
/// bytes and carry checksums).
pub const VERSION: u32 = 2;

/// Number of receive channels (`MYRI_API0_NUM_CHANNELS`).
pub const NUM_CHANNELS: usize = 8;
/// Slots in the send channel.
pub const SEND_SLOTS: u32 = 16;
/// Buffer descriptors per receive channel.
pub const RECV_SLOTS: u32 = 64;
/// Entries in the route table.
pub const NUM_ROUTES: u32 = 64;
/// Longest route a table entry holds.
pub const MAX_ROUTE: usize = 32;
/// Largest application payload of one packet: 12 KiB, so that an 8 KiB message and the
/// header of a client protocol (RPP's is at most 140 bytes) fit in one packet, as seed 000
/// (Buffers) asks of this constant, and a host DMA buffer fills three whole pages.
pub const MAX_PAYLOAD: usize = 12 << 10;
/// Room before the frame header in every SRAM packet buffer: routes are laid out so they
/// end exactly here, and the send alignment skips what precedes them (seed 000, Sending).
pub const ROUTE_AREA: u32 = MAX_ROUTE as u32;
/// Largest payload sent by programmed I/O through a PIO buffer.
pub const PIO_MAX: usize = 512;
/// Size of a PIO buffer: route area, frame header, payload.
pub const PIO_BUF: u32 = 1024;
/// Size of a buffer in the tx and rx pools: route area, frame header, payload, slack.
pub const POOL_BUF: u32 = (12 << 10) + 512;

/// Handshake states in `MCP_STATE`.
pub mod state {
    /// The HCB is not initialized.
    pub const BOOTING: u32 = 0;
    /// The MCP has initialized the HCB and waits for a host.
    pub const READY: u32 = 1;
    /// A host wrote a nonce and asks the MCP to answer.
    pub const HELLO: u32 = 2;
    /// The MCP echoed the nonce: running.
    pub const RUNNING: u32 = 3;
}

/// Word offsets of the header fields.
pub mod off {
    /// Start signature.
    pub const SIG_START: u32 = 0;
    /// Handshake state.
    pub const MCP_STATE: u32 = 4;
    /// Handshake nonce.
    pub const HANDSHAKE: u32 = 8;
    /// Layout version.
    pub const VERSION: u32 = 12;
    /// Number of receive channels.
    pub const NUM_CHANNELS: u32 = 16;
    /// Send slots.
    pub const SEND_SLOTS: u32 = 20;
    /// Receive slots per channel.
    pub const RECV_SLOTS: u32 = 24;
    /// Route table entries.
    pub const NUM_ROUTES: u32 = 28;
    /// Largest PIO payload.
    pub const PIO_MAX: u32 = 32;
    /// Largest payload.
    pub const MAX_PAYLOAD: u32 = 36;
    /// First counter word.
    pub const COUNTERS: u32 = 64;
}

/// Send-slot flags.
pub mod slot_flags {
    /// The payload is in the slot's PIO buffer.
    pub const PIO: u32 = 1;
    /// The payload is in the SRAM workspace at the slot's address (seed 001,
    /// `gm_opiom_send`): the MCP copies it with the LANai instead of a host DMA.
    pub const SRAM: u32 = 2;
    /// The frame subtype sits in bits 8..16 (0 means [`crate::frame::SUBTYPE_DATA`]).
    pub const SUBTYPE_SHIFT: u32 = 8;
    /// Mask of the subtype bits.
    pub const SUBTYPE_MASK: u32 = 0xFF << SUBTYPE_SHIFT;
}

/// Word offsets within a send slot.
pub mod send_slot {
    /// Flags.
    pub const FLAGS: u32 = 0;
    /// Payload length.
    pub const LEN: u32 = 4;
    /// Destination channel.
    pub const CHAN: u32 = 8;
    /// Route id.
    pub const ROUTE: u32 = 12;
    /// High 32 bits of the payload's bus address.
    pub const HOST_HI: u32 = 16;
    /// Low 32 bits.
    pub const HOST_LO: u32 = 20;
    /// Bytes of inline header in the PIO buffer before a DMA'd payload.
    pub const INLINE_LEN: u32 = 24;
    /// Host's sequence number of the send (diagnostics).
    pub const SEQ: u32 = 28;
    /// Size of a slot.
    pub const LEN_OF_SLOT: u32 = 32;
}

/// A send slot as one value: what the host writes and the MCP reads (seed 000, Send
/// Channel). The fields are the big-endian words of [`send_slot`], in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendSlotRepr {
    /// [`slot_flags`].
    pub flags: u32,
    /// Payload length (with the inline header for a PIO slot).
    pub len: u32,
    /// Destination channel (a word: the MCP refuses values above 255).
    pub chan: u32,
    /// Route id.
    pub route: u32,
    /// Bus address of the payload.
    pub host: u64,
    /// Bytes of inline header in the PIO buffer before a DMA'd payload.
    pub inline_len: u32,
    /// The host's sequence number of the send.
    pub seq: u32,
}

/// Bytes too few for an HCB entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{len} bytes cannot hold a {need}-byte hcb entry")]
pub struct EntryTruncated {
    /// Bytes given.
    pub len: usize,
    /// Bytes the entry needs.
    pub need: usize,
}

fn word_at(b: &[u8], at: u32) -> u32 {
    let at = at as usize;
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put_word(b: &mut [u8], at: u32, v: u32) {
    b[at as usize..at as usize + 4].copy_from_slice(&v.to_be_bytes());
}

fn checked_len(b: &[u8], need: u32) -> Result<(), EntryTruncated> {
    if b.len() < need as usize {
        return Err(EntryTruncated {
            len: b.len(),
            need: need as usize,
        });
    }
    Ok(())
}

impl SendSlotRepr {
    /// Bytes of a slot.
    pub const LEN: usize = send_slot::LEN_OF_SLOT as usize;

    /// Reads a slot from its bytes. Every value is taken as it is: the MCP checks them
    /// against its limits (a hostile host may write anything).
    pub fn parse(b: &[u8]) -> Result<SendSlotRepr, EntryTruncated> {
        checked_len(b, send_slot::LEN_OF_SLOT)?;
        Ok(SendSlotRepr {
            flags: word_at(b, send_slot::FLAGS),
            len: word_at(b, send_slot::LEN),
            chan: word_at(b, send_slot::CHAN),
            route: word_at(b, send_slot::ROUTE),
            host: (u64::from(word_at(b, send_slot::HOST_HI)) << 32)
                | u64::from(word_at(b, send_slot::HOST_LO)),
            inline_len: word_at(b, send_slot::INLINE_LEN),
            seq: word_at(b, send_slot::SEQ),
        })
    }

    /// Writes the slot into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), EntryTruncated> {
        checked_len(b, send_slot::LEN_OF_SLOT)?;
        put_word(b, send_slot::FLAGS, self.flags);
        put_word(b, send_slot::LEN, self.len);
        put_word(b, send_slot::CHAN, self.chan);
        put_word(b, send_slot::ROUTE, self.route);
        put_word(b, send_slot::HOST_HI, (self.host >> 32) as u32);
        put_word(b, send_slot::HOST_LO, self.host as u32);
        put_word(b, send_slot::INLINE_LEN, self.inline_len);
        put_word(b, send_slot::SEQ, self.seq);
        Ok(())
    }

    /// The slot as bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let _ = self.emit(&mut b);
        b
    }
}

/// A receive-buffer descriptor (seed 000, Recv Channel): where the host's next buffer of
/// a channel is and how much it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvDescRepr {
    /// Bus address of the buffer.
    pub host: u64,
    /// Its size in bytes.
    pub capacity: u32,
}

impl RecvDescRepr {
    /// Bytes of a descriptor as the host writes it (the pad word is not written).
    pub const LEN: usize = 12;

    /// Reads a descriptor from its bytes.
    pub fn parse(b: &[u8]) -> Result<RecvDescRepr, EntryTruncated> {
        checked_len(b, Self::LEN as u32)?;
        Ok(RecvDescRepr {
            host: (u64::from(word_at(b, 0)) << 32) | u64::from(word_at(b, 4)),
            capacity: word_at(b, 8),
        })
    }

    /// Writes the descriptor into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), EntryTruncated> {
        checked_len(b, Self::LEN as u32)?;
        put_word(b, 0, (self.host >> 32) as u32);
        put_word(b, 4, self.host as u32);
        put_word(b, 8, self.capacity);
        Ok(())
    }

    /// The descriptor as bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let _ = self.emit(&mut b);
        b
    }
}

/// A completion record in a channel's poll structure in host memory: 32 bytes, big-endian
/// words, laid out as the DMA control block of the delivery's payload (seed 002, §3.1)
/// with the MCP's words in the padding after it, because that is what it is:
///
/// ```text
///  +0   (not written)
///  +4   head_len (16) | landed_tail (16)   the block's spare and csum halfwords
///  +8   tail_len                           the block's byte count
///  +12  lar, eah, eal                      the block's addresses (ignored)
///  +24  sender (16) | landed_head (16)     padding the MCP fills
///  +28  count                              the channel's completions, this one included
/// ```
///
/// The MCP fills the payload block's spare halfword and padding when it writes the block;
/// the engine writes the block's checksum when it has moved the payload; the next block
/// of the chain DMAs bytes 4..32 of the control block here, so the host sees the engine's
/// own sum of what it moved into host memory with one extra transfer and no extra block.
/// A delivery without a payload block (an empty payload, or an overlapped receive that
/// had copied everything) sends the same words from scratch SRAM.
///
/// * `head_len` and `landed_head`: payload bytes an overlapped receive DMA'd earlier, in
///   chunks, and the sum of their written-back checksums (0 and 0 otherwise);
/// * `tail_len` and `landed_tail`: the payload block's byte count and written-back sum;
/// * `sender`: the sender checksum from the data frame's trailer ([`crate::frame`]).
///
/// The payload is `head_len + tail_len` bytes ([`CompletionRepr::len`]); its landed
/// checksum is the ones-complement sum of the two ([`CompletionRepr::landed`]). The count
/// comes last, so a host that sees it (the poll word it watches) sees the rest (see
/// [`crate::firmware::host_dma::RECORD_LEN`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompletionRepr {
    /// Payload bytes delivered by earlier blocks (overlapped receive).
    pub head_len: u16,
    /// The engine's checksum of the delivery's payload block (0 without one).
    pub landed_tail: u16,
    /// Payload bytes the payload block delivered.
    pub tail_len: u32,
    /// The sender checksum from the frame's trailer.
    pub sender: u16,
    /// The checksum of the `head_len` bytes delivered earlier.
    pub landed_head: u16,
    /// Completions on the channel, this one included (free-running).
    pub count: u32,
}

impl CompletionRepr {
    /// Bytes of a record.
    pub const LEN: usize = 32;

    /// Payload bytes delivered.
    pub fn len(&self) -> u32 {
        u32::from(self.head_len).saturating_add(self.tail_len)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ones-complement sum of every payload byte that landed in host memory, as the
    /// DMA engine computed it. The head's bytes come first and are a whole number of
    /// 32-bit words, so the tail's sum adds without a byte swap.
    pub fn landed(&self) -> u16 {
        myri_device::dma::checksum::combine(self.landed_head, self.landed_tail)
    }

    /// Reads a record from its bytes.
    pub fn parse(b: &[u8]) -> Result<CompletionRepr, EntryTruncated> {
        checked_len(b, Self::LEN as u32)?;
        let (block, csums) = (word_at(b, 4), word_at(b, 24));
        Ok(CompletionRepr {
            head_len: (block >> 16) as u16,
            landed_tail: block as u16,
            tail_len: word_at(b, 8),
            sender: (csums >> 16) as u16,
            landed_head: csums as u16,
            count: word_at(b, 28),
        })
    }

    /// Writes the record into `b` (the address words zeroed).
    pub fn emit(&self, b: &mut [u8]) -> Result<(), EntryTruncated> {
        checked_len(b, Self::LEN as u32)?;
        b[..Self::LEN].fill(0);
        put_word(
            b,
            4,
            (u32::from(self.head_len) << 16) | u32::from(self.landed_tail),
        );
        put_word(b, 8, self.tail_len);
        put_word(
            b,
            24,
            (u32::from(self.sender) << 16) | u32::from(self.landed_head),
        );
        put_word(b, 28, self.count);
        Ok(())
    }

    /// The record as bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let _ = self.emit(&mut b);
        b
    }
}

/// Word offsets within a receive channel.
pub mod recv_chan {
    /// 1 when the host has initialized the channel.
    pub const STATE: u32 = 0;
    /// High 32 bits of the poll structure's bus address.
    pub const POLL_HI: u32 = 4;
    /// Low 32 bits.
    pub const POLL_LO: u32 = 8;
    /// Buffers posted by the host (free-running).
    pub const POSTED: u32 = 12;
    /// Buffers the MCP has filled (free-running).
    pub const DONE: u32 = 16;
    /// First buffer descriptor.
    pub const SLOTS: u32 = 32;
    /// Size of a descriptor: HOST_HI, HOST_LO, CAPACITY, pad.
    pub const SLOT_LEN: u32 = 16;
}

/// Counter indices in the HCB's counter block, written by the MCP.
pub mod counter {
    /// Packets sent to the network.
    pub const SENT: u32 = 0;
    /// Of those, sent by PIO.
    pub const PIO_SENDS: u32 = 1;
    /// Of those, sent with send-DMA overlapped with the host DMA.
    pub const OVERLAPPED_SENDS: u32 = 2;
    /// Packets delivered into host buffers.
    pub const DELIVERED: u32 = 3;
    /// Of those, delivered with host DMA overlapped with the receive.
    pub const OVERLAPPED_RECVS: u32 = 4;
    /// Received packets dropped because the rx pool was full.
    pub const DROP_RX_FULL: u32 = 5;
    /// Dropped: not CRL's packet type.
    pub const DROP_TYPE: u32 = 6;
    /// Dropped: unknown subtype.
    pub const DROP_SUBTYPE: u32 = 7;
    /// Dropped: channel out of range or not initialized.
    pub const DROP_CHANNEL: u32 = 8;
    /// Dropped: shorter than a frame header, or longer than a receive buffer.
    pub const DROP_LENGTH: u32 = 9;
    /// Dropped: cut short by the receive buffer (overrun).
    pub const DROP_OVERRUN: u32 = 10;
    /// Send slots refused: bad route id, bad length or channel, host DMA fault.
    pub const SEND_ERRORS: u32 = 11;
    /// Host DMA faults.
    pub const DMA_FAULTS: u32 = 12;
    /// Packets received off the network.
    pub const RECEIVED: u32 = 13;
    /// Directed packets placed into a window (seed 001, directed send).
    pub const DIRECTED_PLACED: u32 = 14;
    /// Directed packets dropped: the window id names no registered window.
    pub const DROP_WINDOW_UNKNOWN: u32 = 15;
    /// Directed packets dropped: the key does not match the window's.
    pub const DROP_WINDOW_KEY: u32 = 16;
    /// Directed packets dropped: the bytes would fall outside the window (or need more
    /// line pieces than one chain holds), or the header is malformed.
    pub const DROP_WINDOW_BOUNDS: u32 = 17;
    /// Packets whose payload the LANai copied from the SRAM workspace (seed 001, OPIOM).
    pub const SRAM_SENDS: u32 = 18;
    /// Trapeze messages sent from the endpoint's send ring (seed 003).
    pub const TPZ_SENT: u32 = 19;
    /// Trapeze messages delivered into the receive ring.
    pub const TPZ_RECEIVED: u32 = 20;
    /// Trapeze messages dropped: the receive ring was full, or no endpoint is set up.
    pub const TPZ_DROP_RING: u32 = 21;
    /// Trapeze payloads dropped (the control message still delivered): stale or forged
    /// token key.
    pub const TPZ_PAYLOAD_BAD_TOKEN: u32 = 22;
    /// Trapeze payloads dropped: larger than the buffer they were meant for.
    pub const TPZ_PAYLOAD_TOO_LONG: u32 = 23;
    /// Trapeze payloads dropped: no payload buffer attached to the ring entry.
    pub const TPZ_PAYLOAD_NO_BUFFER: u32 = 24;
    /// Trapeze messages dropped: malformed header (lengths that do not add up).
    pub const TPZ_DROP_MALFORMED: u32 = 25;
    /// Number of counters.
    pub const COUNT: u32 = 32;
}

/// Where everything is, computed once from the geometry constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The HCB.
    pub base: u32,
    /// The send channel header (TAIL, HEAD, SENT).
    pub send: u32,
    /// The first send slot.
    pub send_slots: u32,
    /// The first PIO buffer.
    pub pio: u32,
    /// The middle signature.
    pub middle: u32,
    /// The first receive channel.
    pub recv: u32,
    /// Size of one receive channel.
    pub recv_stride: u32,
    /// The route table.
    pub routes: u32,
    /// The end signature.
    pub end: u32,
    /// The DMA control-block ring (channel 0).
    pub dma_ring: u32,
    /// The tx pool buffers.
    pub tx_pool: u32,
    /// The rx pool buffers.
    pub rx_pool: u32,
    /// Scratch words the MCP DMAs from (lengths and counts for the host).
    pub scratch: u32,
    /// The GM and Trapeze area: the Trapeze endpoint pointer ([`gm_area`]) and the
    /// directed-send window table.
    pub gm: u32,
    /// The SRAM workspace: the free SRAM the host's page allocator manages (seed 001,
    /// §3.1.4), from here to [`Layout::workspace_end`].
    pub workspace: u32,
    /// One past the workspace's last byte (the doorbell limit counters follow).
    pub workspace_end: u32,
}

/// Word offsets in the GM area ([`Layout::gm`]).
pub mod gm_area {
    /// SRAM address of the Trapeze endpoint (0: none), written by the host.
    pub const TPZ_ENDPOINT: u32 = 0;
    /// The first directed-send window entry.
    pub const WINDOWS: u32 = 16;
    /// Windows in the table (seed 001, §4.3: "several different video properties").
    pub const NUM_WINDOWS: u32 = 8;
    /// Size of a window entry.
    pub const WINDOW_LEN: u32 = 32;
    /// Size of the area.
    pub const LEN: u32 = WINDOWS + NUM_WINDOWS * WINDOW_LEN;
}

/// Size of a route-table entry: VALID, LEN, 32 route bytes, pad.
pub const ROUTE_ENTRY: u32 = 48;
/// Blocks in the DMA control-block ring.
pub const DMA_RING: u32 = 64;
/// Buffers in the tx pool.
pub const TX_POOL: u32 = 8;
/// Buffers in the rx pool (one is always the receive engine's spare: seed 000, Receiving).
pub const RX_POOL: u32 = 32;

impl Layout {
    /// The layout for an SRAM of `sram_len` bytes, or `None` if it does not fit.
    pub const fn new(sram_len: u32) -> Option<Layout> {
        let base = HCB_BASE;
        let send = base + off::COUNTERS + counter::COUNT * 4;
        let send_slots = send + 16;
        let pio = send_slots + SEND_SLOTS * send_slot::LEN_OF_SLOT;
        let middle = pio + SEND_SLOTS * PIO_BUF;
        let recv = middle + 16;
        let recv_stride = recv_chan::SLOTS + RECV_SLOTS * recv_chan::SLOT_LEN;
        let routes = recv + NUM_CHANNELS as u32 * recv_stride;
        let end = routes + NUM_ROUTES * ROUTE_ENTRY;
        let dma_ring = (end + 4 + 63) & !63;
        let scratch = dma_ring + DMA_RING * 32;
        let tx_pool = (scratch + DMA_RING * 16 + 255) & !255;
        let rx_pool = tx_pool + TX_POOL * POOL_BUF;
        let gm = rx_pool + RX_POOL * POOL_BUF;
        let workspace = gm + gm_area::LEN;
        // The last 4 KB belong to the doorbell limit counters.
        if sram_len < 4096 || workspace > sram_len - 4096 {
            return None;
        }
        let workspace_end = sram_len - 4096;
        Some(Layout {
            base,
            send,
            send_slots,
            pio,
            middle,
            recv,
            recv_stride,
            routes,
            end,
            dma_ring,
            tx_pool,
            rx_pool,
            scratch,
            gm,
            workspace,
            workspace_end,
        })
    }

    /// Address of directed-send window entry `id` (taken modulo the table size).
    pub fn window(&self, id: u32) -> u32 {
        self.gm + gm_area::WINDOWS + (id % gm_area::NUM_WINDOWS) * gm_area::WINDOW_LEN
    }

    /// Address of send slot `i` (taken modulo the slot count).
    pub fn send_slot(&self, i: u32) -> u32 {
        self.send_slots + (i % SEND_SLOTS) * send_slot::LEN_OF_SLOT
    }

    /// Address of PIO buffer `i` (modulo the slot count).
    pub fn pio_buf(&self, i: u32) -> u32 {
        self.pio + (i % SEND_SLOTS) * PIO_BUF
    }

    /// Address of receive channel `c`.
    pub fn recv_chan(&self, c: u32) -> u32 {
        self.recv + c * self.recv_stride
    }

    /// Address of descriptor `i` (modulo the slot count) of receive channel `c`.
    pub fn recv_slot(&self, c: u32, i: u32) -> u32 {
        self.recv_chan(c) + recv_chan::SLOTS + (i % RECV_SLOTS) * recv_chan::SLOT_LEN
    }

    /// Address of route-table entry `id`.
    pub fn route(&self, id: u32) -> u32 {
        self.routes + id * ROUTE_ENTRY
    }

    /// Address of counter `c`.
    pub fn counter(&self, c: u32) -> u32 {
        self.base + off::COUNTERS + c * 4
    }
}

/// The three signature words and where they are, for checking.
pub fn signatures(l: &Layout) -> [(u32, u32); 3] {
    [
        (l.base + off::SIG_START, SIG_START),
        (l.middle, SIG_MIDDLE),
        (l.end, SIG_END),
    ]
}

/// Writes a fresh HCB: signatures, geometry, zeroed queues and counters, route 0 = direct.
pub fn initialize(sram: &mut Sram, l: &Layout) -> Result<(), SramError> {
    sram.fill(l.base, (l.end + 4 - l.base) as usize, 0)?;
    sram.fill(l.gm, gm_area::LEN as usize, 0)?;
    for (at, sig) in signatures(l) {
        sram.write_u32(at, sig)?;
    }
    sram.write_u32(l.base + off::VERSION, VERSION)?;
    sram.write_u32(l.base + off::NUM_CHANNELS, NUM_CHANNELS as u32)?;
    sram.write_u32(l.base + off::SEND_SLOTS, SEND_SLOTS)?;
    sram.write_u32(l.base + off::RECV_SLOTS, RECV_SLOTS)?;
    sram.write_u32(l.base + off::NUM_ROUTES, NUM_ROUTES)?;
    sram.write_u32(l.base + off::PIO_MAX, PIO_MAX as u32)?;
    sram.write_u32(l.base + off::MAX_PAYLOAD, MAX_PAYLOAD as u32)?;
    // Route 0 is the direct cable: valid, no bytes.
    sram.write_u32(l.route(0), 1)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use myri_device::sram::SramSize;

    #[test]
    fn the_layout_fits_the_smallest_board_and_is_aligned() {
        let l = Layout::new(SramSize::Mib2.bytes()).expect("fits 2 MiB");
        for a in [
            l.send,
            l.send_slots,
            l.pio,
            l.middle,
            l.recv,
            l.routes,
            l.end,
            l.dma_ring,
            l.tx_pool,
            l.rx_pool,
            l.scratch,
        ] {
            assert_eq!(a % 4, 0, "{a:#x}");
        }
        assert_eq!(l.dma_ring % 8, 0, "control blocks are 8-aligned");
        assert!(l.rx_pool + RX_POOL * POOL_BUF <= SramSize::Mib2.bytes() - 4096);
        assert!(l.base > HCB_PTR);
        assert_eq!(
            Layout::new(256 * 1024),
            None,
            "too small a memory is refused"
        );
    }

    #[test]
    fn initialize_writes_signatures_and_the_direct_route() {
        let mut sram = Sram::new(SramSize::Mib2);
        let l = Layout::new(sram.len()).unwrap();
        initialize(&mut sram, &l).unwrap();
        for (at, sig) in signatures(&l) {
            assert_eq!(sram.read_u32(at).unwrap(), sig);
        }
        assert_eq!(sram.read_u32(l.route(0)).unwrap(), 1);
        assert_eq!(sram.read_u32(l.route(1)).unwrap(), 0);
        assert_eq!(sram.read_u32(l.base + off::SEND_SLOTS).unwrap(), SEND_SLOTS);
    }

    /// A send slot as a host writes it: PIO flag, 8 bytes, channel 3, route 5, bus
    /// address 0x1_0000_1000, no inline header, sequence 7.
    const SLOT: [u8; 32] = [
        0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0,
        0, 0, 7,
    ];

    fn slot() -> SendSlotRepr {
        SendSlotRepr {
            flags: slot_flags::PIO,
            len: 8,
            chan: 3,
            route: 5,
            host: 0x1_0000_1000,
            inline_len: 0,
            seq: 7,
        }
    }

    #[test]
    fn send_slot_deconstruct_and_construct() {
        assert_eq!(SendSlotRepr::parse(&SLOT).unwrap(), slot());
        assert_eq!(slot().to_bytes(), SLOT);
        let mut longer = [0xEEu8; 40];
        slot().emit(&mut longer).unwrap();
        assert_eq!(&longer[..32], &SLOT);
        assert_eq!(longer[32..], [0xEE; 8], "emit writes the slot only");
    }

    #[test]
    fn receive_descriptor_and_completion_round_trip() {
        let d = RecvDescRepr {
            host: 0x2_0000_5000,
            capacity: 8192,
        };
        let bytes = d.to_bytes();
        assert_eq!(bytes, [0, 0, 0, 2, 0, 0, 0x50, 0, 0, 0, 0x20, 0]);
        assert_eq!(RecvDescRepr::parse(&bytes).unwrap(), d);
        let c = CompletionRepr {
            head_len: 0x0400,
            landed_tail: 0x1234,
            tail_len: 8,
            sender: 0xABCD,
            landed_head: 0x5678,
            count: 0xFFFF_FFFF,
        };
        let mut want = [0u8; 32];
        want[4..12].copy_from_slice(&[0x04, 0, 0x12, 0x34, 0, 0, 0, 8]);
        want[24..].copy_from_slice(&[0xAB, 0xCD, 0x56, 0x78, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert_eq!(c.to_bytes(), want);
        assert_eq!(CompletionRepr::parse(&c.to_bytes()).unwrap(), c);
        assert_eq!(c.len(), 0x0408);
        assert_eq!(c.landed(), 0x1234 + 0x5678);
        let ones = CompletionRepr {
            landed_tail: 0xFFFF,
            landed_head: 0x0001,
            ..c
        };
        assert_eq!(ones.landed(), 0x0001, "end-around carry");
    }

    #[test]
    fn hcb_entries_impossible_len() {
        for n in 0..SendSlotRepr::LEN {
            assert_eq!(
                SendSlotRepr::parse(&SLOT[..n]),
                Err(EntryTruncated { len: n, need: 32 })
            );
            assert!(slot().emit(&mut [0u8; 32][..n]).is_err());
        }
        for n in 0..RecvDescRepr::LEN {
            assert!(RecvDescRepr::parse(&[0u8; 12][..n]).is_err());
            assert!(RecvDescRepr::default().emit(&mut [0u8; 12][..n]).is_err());
        }
        for n in 0..CompletionRepr::LEN {
            assert!(CompletionRepr::parse(&[0u8; 32][..n]).is_err());
            assert!(CompletionRepr::default().emit(&mut [0u8; 32][..n]).is_err());
        }
    }
}
