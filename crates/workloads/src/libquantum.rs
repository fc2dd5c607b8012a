//! `libquantum-like`: the gate loop of 462.libquantum, reference/workloads.md §5.
//!
//! A quantum register of `states` basis states, 16 B each (a complex-float amplitude and the
//! basis state, libquantum's `quantum_reg_node`), built by the copy itself as the uniform
//! superposition (state i = i). Each gate is one sequential pass over the register: Toffoli and
//! CNOT test their control bits and flip the target bit in place, σx flips it everywhere, and a
//! conditional phase scales the amplitudes whose control bit is set. The basis states are
//! really kept and updated, so a line is written exactly when one of its four states changed:
//! the pass reads every line and read-modify-writes the changed ones, coalesced into runs (the
//! prefetch-friendly streaming of §5, ≈ 1 : 1 read / write).

use crate::emit::SplitMix64;
use crate::kernel::{compute, scale, scale_suffix, Copies, SingleKernel, Unit, UnitProgram};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;

pub const NAME: &str = "libquantum-like";
pub const KEYS: &[&str] = &["log2_states", "gates", "seed", "scale"];
pub const DESCRIPTION: &str = "462.libquantum-like gate passes (Toffoli, CNOT, sigma-x, conditional phase) over a register of 16-byte basis states, one copy per thread (§5). \
keys: log2_states=22 (64 MiB), gates=20000, seed=1, scale=factor in (0,1] on the state count (1)";

pub const PHASES: &[&str] = &["init", "gates"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_GATES: u16 = 1;

/// Bytes per register node: complex float amplitude (8) + 64-bit basis state (8).
pub const NODE_BYTES: u64 = 16;
pub const STATES_PER_LINE: u64 = 64 / NODE_BYTES;
/// Compute per state and gate (load, two bit tests, conditional xor), E, giving §5's MPKI of
/// ≈ 25-35 with one line per 4 states.
pub const CYCLES_PER_STATE: u64 = 5;
pub const INSTRUCTIONS_PER_STATE: u64 = 9;
/// Extra (ancilla) qubits above the ones indexing the register, initially 0.
pub const ANCILLAS: u32 = 1;
/// States per unit of emission (2048 lines: at most 2048 runs per unit).
const STATES_PER_UNIT: u64 = 8192;

/// A gate of the circuit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Toffoli {
        c1: u32,
        c2: u32,
        target: u32,
    },
    Cnot {
        control: u32,
        target: u32,
    },
    SigmaX {
        target: u32,
    },
    /// Scales the amplitude of states whose control bit is set (state unchanged).
    CondPhase {
        control: u32,
    },
}

impl Gate {
    /// Apply to one basis state: (new state, whether the node changed).
    #[inline]
    pub fn apply(self, s: u32) -> (u32, bool) {
        let bit = |b: u32| s >> b & 1 != 0;
        match self {
            Gate::Toffoli { c1, c2, target } if bit(c1) && bit(c2) => (s ^ 1 << target, true),
            Gate::Cnot { control, target } if bit(control) => (s ^ 1 << target, true),
            Gate::SigmaX { target } => (s ^ 1 << target, true),
            Gate::CondPhase { control } => (s, bit(control)),
            _ => (s, false),
        }
    }

    /// The seeded circuit's gate mix: 35 % Toffoli, 30 % CNOT, 25 % σx, 10 % phase (E: Shor's
    /// modular exponentiation in libquantum is built from Toffoli, CNOT and σx gates).
    pub fn random(r: &mut SplitMix64, qubits: u32) -> Gate {
        let q = |r: &mut SplitMix64| r.below(qubits as u64) as u32;
        let distinct = |r: &mut SplitMix64, avoid: &[u32]| loop {
            let x = q(r);
            if !avoid.contains(&x) {
                return x;
            }
        };
        match r.below(20) {
            0..=6 => {
                let c1 = q(r);
                let c2 = distinct(r, &[c1]);
                let target = distinct(r, &[c1, c2]);
                Gate::Toffoli { c1, c2, target }
            }
            7..=12 => {
                let control = q(r);
                let target = distinct(r, &[control]);
                Gate::Cnot { control, target }
            }
            13..=17 => Gate::SigmaX { target: q(r) },
            _ => Gate::CondPhase { control: q(r) },
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Libquantum {
    pub log2_states: u32,
    pub states: u64,
    pub gates: u64,
    pub seed: u64,
    pub scale: f64,
}

impl Libquantum {
    pub fn from_params(p: &Params) -> Result<Libquantum, WorkloadError> {
        let log2_states = p.uint_in("log2_states", 22, 3, 28)? as u32;
        let gates = p.uint("gates", 20_000)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        let states = (((1u64 << log2_states) as f64 * scale).round() as u64).max(STATES_PER_LINE);
        Ok(Libquantum {
            log2_states,
            states,
            gates,
            seed,
            scale,
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Libquantum>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    /// Qubits of the register: enough to index every state, plus the ancillas.
    pub fn qubits(&self) -> u32 {
        64 - (self.states - 1).leading_zeros() + ANCILLAS
    }

    /// The circuit, gate by gate (seeded).
    pub fn circuit(&self) -> impl Iterator<Item = Gate> {
        let mut r = SplitMix64::new(self.seed ^ 0x7175_616e);
        let q = self.qubits();
        (0..self.gates).map(move |_| Gate::random(&mut r, q))
    }
}

impl SingleKernel for Libquantum {
    fn spec(&self) -> String {
        format!(
            "{NAME}:log2_states={},gates={},seed={}{}",
            self.log2_states,
            self.gates,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let base = mem.mmap(
            task,
            "libquantum.reg",
            self.states * NODE_BYTES,
            MapOptions::default(),
        );
        let mut rng = SplitMix64::new(self.seed ^ 0x7175_616e);
        let qubits = self.qubits();
        let gate = Gate::random(&mut rng, qubits);
        Box::new(UnitProgram::new(
            QuantumRun {
                base,
                reg: Vec::new(),
                states: self.states,
                gates_left: self.gates,
                gate,
                rng,
                qubits,
                pos: 0,
                init_done: false,
            },
            PHASES,
        ))
    }
}

struct QuantumRun {
    base: u64,
    /// Basis states, allocated when the copy starts (not at build time).
    reg: Vec<u32>,
    states: u64,
    gates_left: u64,
    gate: Gate,
    rng: SplitMix64,
    qubits: u32,
    /// Next state of the current pass.
    pos: u64,
    init_done: bool,
}

impl Unit for QuantumRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.init_done {
            // quantum_new_qureg + Hadamards: the register written once, state i = i
            out.push(Op::Phase { id: PHASE_INIT });
            self.reg = (0..self.states as u32).collect();
            out.push(Op::Run {
                base: self.base,
                lines: (self.states * NODE_BYTES).div_ceil(64) as u32,
                stride_bytes: 64,
                kind: AccessKind::Write,
            });
            out.push(compute(self.states * 2, self.states * 3));
            out.push(Op::Phase { id: PHASE_GATES });
            self.init_done = true;
            return self.gates_left > 0;
        }
        let lo = self.pos;
        let hi = (lo + STATES_PER_UNIT).min(self.states);
        // one line = 4 nodes: written iff one of them changed; runs of equal kind coalesced
        let mut run: Option<(u64, u32, AccessKind)> = None;
        let mut line = lo / STATES_PER_LINE;
        while line * STATES_PER_LINE < hi {
            let mut changed = false;
            let first = line * STATES_PER_LINE;
            for i in first..(first + STATES_PER_LINE).min(self.states) {
                let (s, c) = self.gate.apply(self.reg[i as usize]);
                self.reg[i as usize] = s;
                changed |= c;
            }
            let kind = if changed {
                AccessKind::ReadModifyWrite
            } else {
                AccessKind::Read
            };
            run = match run {
                Some((b, n, k)) if k == kind => Some((b, n + 1, k)),
                Some((b, n, k)) => {
                    out.push(Op::Run {
                        base: b,
                        lines: n,
                        stride_bytes: 64,
                        kind: k,
                    });
                    Some((self.base + line * 64, 1, kind))
                }
                None => Some((self.base + line * 64, 1, kind)),
            };
            line += 1;
        }
        if let Some((b, n, k)) = run {
            out.push(Op::Run {
                base: b,
                lines: n,
                stride_bytes: 64,
                kind: k,
            });
        }
        out.push(compute(
            (hi - lo) * CYCLES_PER_STATE,
            (hi - lo) * INSTRUCTIONS_PER_STATE,
        ));
        self.pos = hi;
        if self.pos == self.states {
            self.pos = 0;
            self.gates_left -= 1;
            self.gate = Gate::random(&mut self.rng, self.qubits);
        }
        self.gates_left > 0
    }
}
