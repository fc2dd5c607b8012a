//! What one line transfer puts on the links: the coherence protocol's messages, per link
//! direction (docs/model.md, "Links and coherence traffic").
//!
//! Five protocols:
//!
//! - [`Coherence::Flat`]: the line's payload crosses the route with `link_coherence_overhead`
//!   more bytes (snoops, requests, completions folded into one factor). Machines read from
//!   hwloc, which does not say how their sockets keep coherence.
//! - [`Coherence::HtBroadcast`]: HyperTransport without a probe filter (K8, Barcelona). The
//!   home node of a line broadcasts a probe to every other node for every read, local reads
//!   included, and every node other than the requester answers the requester (AMD,
//!   "Performance Guidelines for AMD Athlon 64 and AMD Opteron ccNUMA Multiprocessor
//!   Systems", pub. 40555 rev. 3.00, 2006, §A.2.1; Keltcher et al., "The AMD Opteron
//!   Processor for Multiprocessor Servers", IEEE Micro 23(2), 2003).
//! - [`Coherence::HtProbeFilter`]: HT Assist (Istanbul and later: Magny-Cours, Interlagos).
//!   The home node's probe filter, kept in 1 MB of each die's L3, knows which lines other
//!   nodes cache and sends probes only to them, so a line no other node holds needs no probe
//!   at all: a request, the data and a completion ("2 to 3 messages" where broadcast takes
//!   "10 or more" on 4 sockets: HP, "The AMD processor roadmap for industry-standard
//!   servers", 6th ed., "HT Assist"). The model keeps no record of which caches hold a
//!   line, so it sends no directed probe: lines shared between nodes are the approximation
//!   (docs/model.md, "Not modelled").
//!
//! - [`Coherence::QpiSnoop`]: Intel QuickPath (and UltraPath, which keeps its message classes)
//!   without a directory: source snoop (Nehalem-EP, Westmere-EP), early snoop (Haswell-EP's
//!   default). The requester snoops every other socket for every read, local reads included,
//!   and each snooped socket answers the line's home.
//! - [`Coherence::QpiDirectory`]: the memory directory (Broadwell-EP's home snoop with
//!   directory, Skylake-SP and later in every mode): the home snoops only sockets its
//!   directory says may hold the line, so a line no other socket holds needs a request and
//!   the data. As with HT Assist, the model keeps no sharers and sends no snoop.
//!
//! HyperTransport messages, with their sizes in bytes (HyperTransport I/O Link Specification
//! rev. 3.10, §4: control packets are 4 or 8 bytes, an address-carrying request 8, a response
//! or completion 4; a data packet follows its command with up to 64 bytes):
//!
//! | message | bytes | route |
//! |---|---|---|
//! | read request (RdBlk, RdBlkMod) | 8 | requester → home |
//! | probe (broadcast only) | 8 | home → every other node |
//! | probe response (broadcast only) | 4 | every node but the requester → requester |
//! | read response with the line | 4 + 64 | home → requester |
//! | source done | 4 | requester → home |
//! | victim write-back (VicBlk) with the line | 8 + 64 | writer → home |
//! | target done | 4 | home → writer |
//!
//! HyperTransport's flow control is credit based: the receiver of every packet returns its
//! buffer with a buffer-release NOP (4 bytes) on the opposite direction of the link (spec
//! §4.5). Counted one NOP per packet per link crossed, a remote read by node 0 of node 1 on
//! the 4-socket square loads the outgoing link with 32 bytes a line and the incoming one
//! with 100 (the probe to node 2 and node 3's answer are routed through the pair), 0.32;
//! AMD measured 752 MB/s out against 2.2 GB/s in, 0.34, on a 4-socket K8 square (pub.
//! 40555, §A.2.1), the check `tests/coherence.rs` makes. Without the NOPs it would be 0.14.
//!
//! QPI and UPI messages are counted in flits of 8 payload bytes: the raw rate Intel quotes
//! (2 bytes a transfer per direction, 12.8 GB/s at 6.4 GT/s) is what the 80-bit flits carry
//! besides their CRC and link-layer bits, and credits return inside those bits, not as
//! messages of their own. Requests (the HOME class), snoops (SNOOP) and responses without data
//! (NDR) are one flit; a data response (DRS) is a header flit and 8 data flits (Intel SDM
//! vol. 3B, Nehalem uncore events 40H "single flit" HOME / SNOOP / NDR and 41H "multi flit" DRS
//! / NCB / NCS; the uncore guides for Xeon E5 v2 and Xeon Scalable, 327043 and 329468, count
//! a line's data as 9 flits).
//!
//! | message | flits | bytes | route |
//! |---|---|---|---|
//! | read request (RdData, RdInvOwn) | 1 | 8 | requester → home (remote reads) |
//! | snoop (SnpData, SnpInvOwn; `qpi-snoop` only) | 1 | 8 | requester → every other socket |
//! | snoop response (RspI, RspS; `qpi-snoop` only) | 1 | 8 | snooped socket → home |
//! | data with completion (DataC_E_Cmp) | 9 | 72 | home → requester |
//! | write-back (WbMtoI and WbIData) | 1 + 9 | 80 | writer → home |
//! | completion (Cmp) | 1 | 8 | home → writer |
//!
//! So a remote read on two sockets puts 16 bytes a line on the request direction and 72 on the
//! data direction with `qpi-snoop`, 8 and 72 with `qpi-directory`; a local read puts 8 on each
//! direction with `qpi-snoop` and nothing with `qpi-directory`. UPI's flits are 192 bits with
//! slots for several messages (Intel PCM: 172 usable bits), but its counters still count a
//! line's data as 9 units; the model keeps QPI's units for it (docs/model.md). A directory's
//! snoops for lines in state A (another socket may hold them), local reads included, are not
//! sent: the model keeps no sharers.

use crate::routes::{LinkDir, Routes};
use crate::Machine;
use numalab_core::NodeId;
use serde::{Deserialize, Serialize};

/// How a machine's links carry cache coherence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coherence {
    /// Payload plus `link_coherence_overhead` on the data's route.
    #[default]
    Flat,
    /// HyperTransport, probes broadcast by the home node for every read.
    HtBroadcast,
    /// HyperTransport with HT Assist: probes only to nodes that cache the line.
    HtProbeFilter,
    /// QPI / UPI, every read snooping every other socket (source or early snoop).
    QpiSnoop,
    /// QPI / UPI with the memory directory: no snoop for lines no other socket holds.
    QpiDirectory,
}

impl Coherence {
    pub const NAMES: &'static str =
        "\"flat\", \"ht-broadcast\", \"ht-probe-filter\", \"qpi-snoop\" or \"qpi-directory\"";

    pub fn name(self) -> &'static str {
        match self {
            Coherence::Flat => "flat",
            Coherence::HtBroadcast => "ht-broadcast",
            Coherence::HtProbeFilter => "ht-probe-filter",
            Coherence::QpiSnoop => "qpi-snoop",
            Coherence::QpiDirectory => "qpi-directory",
        }
    }

    pub fn parse(s: &str) -> Option<Coherence> {
        match s {
            "flat" => Some(Coherence::Flat),
            "ht-broadcast" => Some(Coherence::HtBroadcast),
            "ht-probe-filter" => Some(Coherence::HtProbeFilter),
            "qpi-snoop" => Some(Coherence::QpiSnoop),
            "qpi-directory" => Some(Coherence::QpiDirectory),
            _ => None,
        }
    }

    fn is_qpi(self) -> bool {
        matches!(self, Coherence::QpiSnoop | Coherence::QpiDirectory)
    }
}

const LINE_BYTES: f64 = 64.0;
/// An address-carrying HyperTransport control packet: a request or a probe (spec §4).
const HT_COMMAND_BYTES: f64 = 8.0;
/// A HyperTransport response or completion without data: probe response, source done,
/// target done, and the header of a read response (spec §4).
const HT_RESPONSE_BYTES: f64 = 4.0;
/// A buffer-release NOP, one per packet received (spec §4.5's credit-based flow control).
const HT_NOP_BYTES: f64 = 4.0;
/// A QPI / UPI flit's payload: 64 of its 80 bits (the module comment).
const QPI_FLIT_BYTES: f64 = 8.0;
/// A data response or a write-back's data: a header flit and 8 data flits.
const QPI_DATA_BYTES: f64 = 9.0 * QPI_FLIT_BYTES;

/// Bytes one transaction puts on each link direction: `(slot, bytes)` pairs, slots as
/// [`LinkDir::slot`], each slot once, in the order first crossed.
pub type Wire = Vec<(usize, f64)>;

impl Machine {
    /// The link traffic of one line read from memory node `d` by a CPU of node `s` (a load
    /// miss or a read for ownership).
    pub fn read_wire(&self, routes: &Routes, s: NodeId, d: NodeId) -> Wire {
        let mut w = Wire::new();
        if self.coherence == Coherence::Flat {
            if s != d {
                let bytes = LINE_BYTES * (1.0 + self.link_coherence_overhead);
                send(&mut w, routes.route(d, s), bytes, false);
            }
            return w;
        }
        if self.coherence.is_qpi() {
            self.qpi_read(&mut w, routes, s, d);
            return w;
        }
        if s != d {
            send(&mut w, routes.route(s, d), HT_COMMAND_BYTES, true);
        }
        if self.coherence == Coherence::HtBroadcast {
            let n = self.topology.num_nodes();
            for k in (0..n).map(|k| NodeId(k as u16)) {
                if k != d {
                    send(&mut w, routes.route(d, k), HT_COMMAND_BYTES, true);
                }
                if k != s {
                    send(&mut w, routes.route(k, s), HT_RESPONSE_BYTES, true);
                }
            }
        }
        if s != d {
            let data = HT_RESPONSE_BYTES + LINE_BYTES;
            send(&mut w, routes.route(d, s), data, true);
            send(&mut w, routes.route(s, d), HT_RESPONSE_BYTES, true);
        }
        w
    }

    /// A QPI / UPI read by `s` of a line homed on `d` (the module comment's table).
    fn qpi_read(&self, w: &mut Wire, routes: &Routes, s: NodeId, d: NodeId) {
        if s != d {
            send(w, routes.route(s, d), QPI_FLIT_BYTES, false);
        }
        if self.coherence == Coherence::QpiSnoop {
            let n = self.topology.num_nodes();
            for k in (0..n).map(|k| NodeId(k as u16)).filter(|&k| k != s) {
                send(w, routes.route(s, k), QPI_FLIT_BYTES, false);
                if k != d {
                    send(w, routes.route(k, d), QPI_FLIT_BYTES, false);
                }
            }
        }
        if s != d {
            send(w, routes.route(d, s), QPI_DATA_BYTES, false);
        }
    }

    /// The link traffic of one dirty line written back from node `s`'s caches to memory
    /// node `d`. Write-backs are not probed or snooped in any protocol.
    pub fn write_back_wire(&self, routes: &Routes, s: NodeId, d: NodeId) -> Wire {
        let mut w = Wire::new();
        if s == d {
            return w;
        }
        if self.coherence == Coherence::Flat {
            let bytes = LINE_BYTES * (1.0 + self.link_coherence_overhead);
            send(&mut w, routes.route(s, d), bytes, false);
            return w;
        }
        // the line with its command, then the completion back; HyperTransport returns a NOP
        // for every packet, QPI's credits ride inside the flits
        let (line, done, nops) = if self.coherence.is_qpi() {
            (QPI_FLIT_BYTES + QPI_DATA_BYTES, QPI_FLIT_BYTES, false)
        } else {
            (HT_COMMAND_BYTES + LINE_BYTES, HT_RESPONSE_BYTES, true)
        };
        send(&mut w, routes.route(s, d), line, nops);
        send(&mut w, routes.route(d, s), done, nops);
        w
    }

    /// Link bytes per payload byte of a bulk transfer (a migration's copy, a huge page's
    /// zeroing), counted on its route only: the payload, with the flat overhead,
    /// HyperTransport's data-packet header (4 bytes a line) or QPI's header flit (8 bytes a
    /// line). The commands, completions, snoops and NOPs of a bulk copy on the other
    /// directions are left out (docs/model.md).
    pub fn bulk_wire_factor(&self) -> f64 {
        match self.coherence {
            Coherence::Flat => 1.0 + self.link_coherence_overhead,
            Coherence::HtBroadcast | Coherence::HtProbeFilter => {
                (HT_RESPONSE_BYTES + LINE_BYTES) / LINE_BYTES
            }
            Coherence::QpiSnoop | Coherence::QpiDirectory => QPI_DATA_BYTES / LINE_BYTES,
        }
    }

    /// Link bytes per payload byte, on the first link of the data's route, of a stream of
    /// reads by `s` of memory on `d` (what a measured remote bandwidth is on that link): 1 for
    /// a local pair.
    pub fn read_wire_factor(&self, routes: &Routes, s: NodeId, d: NodeId) -> f64 {
        let Some(first) = routes.route(d, s).first() else {
            return 1.0;
        };
        let w = self.read_wire(routes, s, d);
        let bytes = w
            .iter()
            .find(|&&(l, _)| l == first.slot())
            .map_or(0.0, |&(_, b)| b);
        bytes / LINE_BYTES
    }

    /// The payload rate, GB/s, at which a stream of reads by `s` of memory on `d` fills the
    /// first link direction it saturates (infinite where it crosses none).
    pub fn read_payload_gbps(&self, routes: &Routes, s: NodeId, d: NodeId) -> f64 {
        self.read_wire(routes, s, d)
            .iter()
            .map(|&(slot, bytes)| self.links[slot / 2].gbps_per_dir * LINE_BYTES / bytes)
            .fold(f64::INFINITY, f64::min)
    }
}

/// Add a packet of `bytes` crossing `route`, and, with `nops`, the buffer-release NOP each
/// link's receiver returns on its opposite direction.
fn send(w: &mut Wire, route: &[LinkDir], bytes: f64, nops: bool) {
    for &ld in route {
        add(w, ld.slot(), bytes);
        if nops {
            let back = LinkDir {
                link: ld.link,
                forward: !ld.forward,
            };
            add(w, back.slot(), HT_NOP_BYTES);
        }
    }
}

fn add(w: &mut Wire, slot: usize, bytes: f64) {
    match w.iter_mut().find(|(s, _)| *s == slot) {
        Some((_, b)) => *b += bytes,
        None => w.push((slot, bytes)),
    }
}
