//! `omnetpp-like`: the discrete-event kernel of 471.omnetpp / 520.omnetpp_r,
//! reference/workloads.md §5.
//!
//! A network of `modules` module objects ([`MODULE_BYTES`] each: header, state, gates), each
//! with [`GATES`] output gates wired to neighbours (a ring plus random links, standing for the
//! switched Ethernet of the benchmark); a pool of message objects ([`MSG_BYTES`]) with a LIFO
//! free list, as a malloc fast path has; and the future-event set, a binary heap of message
//! pointers ordered by arrival time (`cMessageHeap`) holding `queue` events.
//!
//! One event: pop the heap's minimum (sift-down reading each compared message's arrival time
//! through its pointer: dependent loads, the two children of a level loaded together as
//! siblings, and a level whose direction the core guessed loaded with the level above),
//! deliver it to its module (the module header, its state, the chosen output gate and the
//! neighbour module behind it: pointer chasing over the module graph), then either forward
//! the same message or delete it and allocate a new one (free-list pop, constructor writes),
//! and schedule it at the neighbour (heap push, sift-up).
//! The heap and the recently freed messages are the hot set, largely LLC-resident (§5).

use crate::emit::SplitMix64;
use crate::kernel::{
    compute, scale, scale_suffix, scaled, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "omnetpp-like";
pub const KEYS: &[&str] = &["modules", "queue", "events", "seed", "scale"];
pub const DESCRIPTION: &str = "471.omnetpp-like discrete-event simulation: binary-heap event queue of message pointers, message pool with a free list, module-graph pointer chasing, one copy per thread (§5). \
keys: modules=50000 (2 KiB each), queue=events in flight (50000), events=events simulated (20000000), seed=1, scale=factor in (0,1] on modules and queue (1)";

pub const PHASES: &[&str] = &["init", "events"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_EVENTS: u16 = 1;

/// Module object: header, statistics, queues and gate objects (E).
pub const MODULE_BYTES: u64 = 2048;
/// Output gates per module.
pub const GATES: usize = 4;
/// Message object: 100-500 B in §5; 256 B here (a cPacket with an Ethernet frame, E).
pub const MSG_BYTES: u64 = 256;
/// Heap entries are message pointers.
pub const HEAP_ENTRY_BYTES: u64 = 8;
/// Compute per event: handler code, RNG calls, statistics (E; omnetpp's MPKI is low to moderate).
pub const CYCLES_PER_EVENT: u64 = 400;
pub const INSTRUCTIONS_PER_EVENT: u64 = 800;
/// Share of events whose message is deleted and replaced by a new one (the rest forward it).
pub const NEW_MESSAGE_SHARE: f64 = 0.5;

#[derive(Clone, Debug, PartialEq)]
pub struct Omnetpp {
    pub modules: u64,
    pub queue: u64,
    pub modules_full: u64,
    pub queue_full: u64,
    pub events: u64,
    pub seed: u64,
    pub scale: f64,
}

impl Omnetpp {
    pub fn from_params(p: &Params) -> Result<Omnetpp, WorkloadError> {
        let modules_full = p.uint_in("modules", 50_000, 2, u32::MAX as u64 / 2)?;
        let queue_full = p.uint_in("queue", 50_000, 1, u32::MAX as u64 / 2)?;
        let events = p.uint("events", 20_000_000)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        Ok(Omnetpp {
            modules: scaled(modules_full, scale, 2),
            queue: scaled(queue_full, scale, 1),
            modules_full,
            queue_full,
            events,
            seed,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Omnetpp>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    /// Messages in the pool: the events in flight plus one being handled.
    pub fn pool(&self) -> u64 {
        self.queue + 1
    }
}

impl SingleKernel for Omnetpp {
    fn spec(&self) -> String {
        format!(
            "{NAME}:modules={},queue={},events={},seed={}{}",
            self.modules_full,
            self.queue_full,
            self.events,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let modules = mem.mmap(
            task,
            "omnetpp.modules",
            self.modules * MODULE_BYTES,
            MapOptions::default(),
        );
        let msgs = mem.mmap(
            task,
            "omnetpp.messages",
            self.pool() * MSG_BYTES,
            MapOptions::default(),
        );
        let heap = mem.mmap(
            task,
            "omnetpp.fes",
            self.queue * HEAP_ENTRY_BYTES,
            MapOptions::default(),
        );
        let mut r = SplitMix64::new(self.seed ^ 0x6f6d_6e65);
        let m = self.modules;
        let gates = (0..m)
            .map(|i| {
                [
                    ((i + 1) % m) as u32,
                    ((i + m - 1) % m) as u32,
                    r.below(m) as u32,
                    r.below(m) as u32,
                ]
            })
            .collect();
        let pool = self.pool() as usize;
        let mut time = vec![0.0; pool];
        let mut dest = vec![0u32; pool];
        for i in 0..self.queue as usize {
            time[i] = r.below(1 << 20) as f64;
            dest[i] = r.below(m) as u32;
        }
        let mut fes = Fes {
            heap: (0..self.queue as u32).collect(),
            time,
            heap_base: heap,
            msg_base: msgs,
        };
        let mut ignore = Vec::new();
        for i in (0..fes.heap.len() / 2).rev() {
            fes.sift_down(i, &mut ignore);
        }
        Box::new(UnitProgram::new(
            OmnetRun {
                k: self.clone(),
                modules,
                gates,
                dest,
                fes,
                free: vec![self.queue as u32],
                rng: r,
                now: 0.0,
                done: 0,
                init_done: false,
            },
            PHASES,
        ))
    }
}

/// The future-event set: a binary heap of message indices keyed by arrival time.
pub struct Fes {
    pub heap: Vec<u32>,
    pub time: Vec<f64>,
    heap_base: u64,
    msg_base: u64,
}

impl Fes {
    fn msg(&self, m: u32) -> u64 {
        self.msg_base + m as u64 * MSG_BYTES
    }

    fn entry(&self, i: usize) -> u64 {
        self.heap_base + i as u64 * HEAP_ENTRY_BYTES
    }

    /// Read heap slot `i` and the arrival time of the message it points to, a load of
    /// `kind`: dependent on the slot's pointer, or the sibling of the message load before
    /// it where both pointers were read together.
    fn look(&self, i: usize, kind: AccessKind, out: &mut Vec<Op>) -> f64 {
        out.push(Op::Access {
            addr: self.entry(i),
            kind: AccessKind::Read,
        });
        out.push(Op::Access {
            addr: self.msg(self.heap[i]),
            kind,
        });
        self.time[self.heap[i] as usize]
    }

    fn put(&mut self, i: usize, m: u32, out: &mut Vec<Op>) {
        self.heap[i] = m;
        out.push(Op::Access {
            addr: self.entry(i),
            kind: AccessKind::Write,
        });
    }

    fn sift_down(&mut self, mut i: usize, out: &mut Vec<Op>) {
        let n = self.heap.len();
        let m = self.heap[i];
        let t = self.time[m as usize];
        // the core predicts each level's compare and runs ahead down the predicted child
        // (a one-bit predictor: the direction the last level took); where it guessed right,
        // the next level's loads were issued with this level's
        let (mut went_right, mut predicted) = (false, false);
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            // the two children's slots share a line and their messages are loaded at once
            // (a core issues both loads before the compare): the right one is the left's
            // sibling; after a wrong guess the level waits for the compare before it
            let first = if predicted {
                AccessKind::SiblingRead
            } else {
                AccessKind::DependentRead
            };
            let mut c = l;
            let mut tc = self.look(l, first, out);
            if l + 1 < n {
                let tr = self.look(l + 1, AccessKind::SiblingRead, out);
                if tr < tc {
                    c = l + 1;
                    tc = tr;
                }
            }
            if tc >= t {
                break;
            }
            predicted = (c == l + 1) == went_right;
            went_right = c == l + 1;
            let cm = self.heap[c];
            self.put(i, cm, out);
            i = c;
        }
        self.put(i, m, out);
    }

    /// Remove and return the earliest message.
    pub fn pop(&mut self, out: &mut Vec<Op>) -> u32 {
        self.look(0, AccessKind::DependentRead, out);
        let top = self.heap[0];
        let last = self.heap.pop().expect("the queue is never empty");
        if !self.heap.is_empty() {
            self.heap[0] = last;
            self.sift_down(0, out);
        }
        top
    }

    pub fn push(&mut self, m: u32, out: &mut Vec<Op>) {
        let t = self.time[m as usize];
        self.heap.push(m);
        let mut i = self.heap.len() - 1;
        while i > 0 {
            let p = (i - 1) / 2;
            if self.look(p, AccessKind::DependentRead, out) <= t {
                break;
            }
            let pm = self.heap[p];
            self.put(i, pm, out);
            i = p;
        }
        self.put(i, m, out);
    }
}

struct OmnetRun {
    k: Omnetpp,
    modules: u64,
    gates: Vec<[u32; GATES]>,
    dest: Vec<u32>,
    fes: Fes,
    /// Free messages, last freed on top.
    free: Vec<u32>,
    rng: SplitMix64,
    now: f64,
    done: u64,
    init_done: bool,
}

impl OmnetRun {
    fn module_line(&self, m: u32, line: u64) -> u64 {
        self.modules + m as u64 * MODULE_BYTES + line * 64
    }
}

impl Unit for OmnetRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.init_done {
            // network set-up: modules and the initial messages built, the heap filled
            out.push(Op::Phase { id: PHASE_INIT });
            for (base, bytes) in [
                (self.modules, self.k.modules * MODULE_BYTES),
                (self.fes.msg_base, self.k.pool() * MSG_BYTES),
                (self.fes.heap_base, self.k.queue * HEAP_ENTRY_BYTES),
            ] {
                let lines = bytes.div_ceil(64);
                let mut done = 0;
                while done < lines {
                    let l = (lines - done).min(1 << 20);
                    out.push(Op::Run {
                        base: base + done * 64,
                        lines: l as u32,
                        stride_bytes: 64,
                        kind: AccessKind::Write,
                    });
                    done += l;
                }
            }
            out.push(compute(
                self.k.modules * 200 + self.k.queue * 100,
                self.k.modules * 300 + self.k.queue * 150,
            ));
            out.push(Op::Phase { id: PHASE_EVENTS });
            self.init_done = true;
            return self.k.events > 0;
        }
        let msg = self.fes.pop(out);
        self.now = self.fes.time[msg as usize];
        // handleMessage: module header, its state (statistics updated), an output gate, and
        // the module on the other side of the link
        let m = self.dest[msg as usize];
        out.push(Op::Access {
            addr: self.module_line(m, 0),
            kind: AccessKind::DependentRead,
        });
        out.push(Op::Access {
            addr: self.module_line(m, 1),
            kind: AccessKind::ReadModifyWrite,
        });
        let g = self.rng.below(GATES as u64) as usize;
        out.push(Op::Access {
            addr: self.module_line(m, 2 + g as u64),
            kind: AccessKind::DependentRead,
        });
        let to = self.gates[m as usize][g];
        out.push(Op::Access {
            addr: self.module_line(to, 0),
            kind: AccessKind::DependentRead,
        });
        let next = if (self.rng.below(1 << 20) as f64) < NEW_MESSAGE_SHARE * (1 << 20) as f64 {
            // new: pop the most recently freed message and construct it; then delete msg at
            // the end of the handler (its first line links it into the free list)
            let n = self.free.pop().expect("the pool has one spare message");
            out.push(Op::Access {
                addr: self.fes.msg(n),
                kind: AccessKind::DependentRead,
            });
            out.push(Op::Run {
                base: self.fes.msg(n),
                lines: (MSG_BYTES / 64) as u32,
                stride_bytes: 64,
                kind: AccessKind::Write,
            });
            out.push(Op::Access {
                addr: self.fes.msg(msg),
                kind: AccessKind::Write,
            });
            self.free.push(msg);
            n
        } else {
            // forward: update the header (hop count, arrival gate)
            out.push(Op::Access {
                addr: self.fes.msg(msg),
                kind: AccessKind::ReadModifyWrite,
            });
            msg
        };
        self.dest[next as usize] = to;
        self.fes.time[next as usize] = self.now + 1.0 + self.rng.below(1 << 16) as f64;
        self.fes.push(next, out);
        out.push(compute(CYCLES_PER_EVENT, INSTRUCTIONS_PER_EVENT));
        self.done += 1;
        self.done < self.k.events
    }
}
