//! The kernel's memory-policy ABI (`include/uapi/linux/mempolicy.h`): modes, mode flags, mbind
//! flags, the nodemask buffer, and the mapping from numalab's [`MemPolicy`].

use crate::error::Error;
use numalab_core::nodemask::MAX_NODES;
use numalab_core::{MemPolicy, NodeId, NodeMask};
use std::fmt;
use std::ops::BitOr;

/// A kernel policy mode (`enum` in `include/uapi/linux/mempolicy.h`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(i32)]
pub enum KernelMode {
    /// MPOL_DEFAULT
    Default = 0,
    /// MPOL_PREFERRED
    Preferred = 1,
    /// MPOL_BIND
    Bind = 2,
    /// MPOL_INTERLEAVE
    Interleave = 3,
    /// MPOL_LOCAL (3.8)
    Local = 4,
    /// MPOL_PREFERRED_MANY (5.15)
    PreferredMany = 5,
    /// MPOL_WEIGHTED_INTERLEAVE (6.9)
    WeightedInterleave = 6,
}

impl KernelMode {
    /// The mode for a raw value with the mode flags already masked off.
    pub fn from_raw(v: i32) -> Option<KernelMode> {
        Some(match v {
            0 => KernelMode::Default,
            1 => KernelMode::Preferred,
            2 => KernelMode::Bind,
            3 => KernelMode::Interleave,
            4 => KernelMode::Local,
            5 => KernelMode::PreferredMany,
            6 => KernelMode::WeightedInterleave,
            _ => return None,
        })
    }

    /// The kernel's constant name, for messages.
    pub fn mpol_name(self) -> &'static str {
        match self {
            KernelMode::Default => "MPOL_DEFAULT",
            KernelMode::Preferred => "MPOL_PREFERRED",
            KernelMode::Bind => "MPOL_BIND",
            KernelMode::Interleave => "MPOL_INTERLEAVE",
            KernelMode::Local => "MPOL_LOCAL",
            KernelMode::PreferredMany => "MPOL_PREFERRED_MANY",
            KernelMode::WeightedInterleave => "MPOL_WEIGHTED_INTERLEAVE",
        }
    }

    /// The first kernel release with this mode, for "needs Linux X" advice.
    pub fn since_linux(self) -> &'static str {
        match self {
            KernelMode::Default
            | KernelMode::Preferred
            | KernelMode::Bind
            | KernelMode::Interleave => "2.6.7",
            KernelMode::Local => "3.8",
            KernelMode::PreferredMany => "5.15",
            KernelMode::WeightedInterleave => "6.9",
        }
    }
}

impl fmt::Display for KernelMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mpol_name())
    }
}

macro_rules! flag_set {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $flag:ident = $val:expr, $kname:literal;)* }) => {
        $(#[$m])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($val);)*

            /// No flag.
            pub const fn empty() -> Self { $name(0) }
            /// The raw bits passed to the kernel.
            pub const fn bits(self) -> u32 { self.0 }
            /// Whether every flag of `other` is set.
            pub const fn contains(self, other: $name) -> bool { self.0 & other.0 == other.0 }
            /// Whether no flag is set.
            pub const fn is_empty(self) -> bool { self.0 == 0 }
            /// The flags of raw `bits` this type knows; unknown bits are dropped.
            pub const fn from_bits_truncate(bits: u32) -> Self { $name(bits & (0 $(| $val)*)) }
        }

        impl BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name { $name(self.0 | rhs.0) }
        }

        impl serde::Serialize for $name {
            /// As the kernel names them, `|`-separated (`0` when empty).
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&format!("{self:?}"))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let names: Vec<&str> = [$(($name::$flag, $kname)),*]
                    .iter()
                    .filter(|(fl, _)| self.contains(*fl))
                    .map(|(_, n)| *n)
                    .collect();
                if names.is_empty() { f.write_str("0") } else { f.write_str(&names.join("|")) }
            }
        }
    };
}

flag_set!(
    /// Mode flags OR-ed into the mode argument of `set_mempolicy`/`mbind`.
    ModeFlags {
        /// MPOL_F_NUMA_BALANCING (5.12): with MPOL_BIND (or MPOL_PREFERRED_MANY on newer
        /// kernels), let automatic NUMA balancing move pages within the mask.
        NUMA_BALANCING = 1 << 13, "MPOL_F_NUMA_BALANCING";
        /// MPOL_F_RELATIVE_NODES: the mask is relative to the task's allowed nodes.
        RELATIVE_NODES = 1 << 14, "MPOL_F_RELATIVE_NODES";
        /// MPOL_F_STATIC_NODES: the mask is absolute, not remapped when the cpuset changes.
        STATIC_NODES = 1 << 15, "MPOL_F_STATIC_NODES";
    }
);

flag_set!(
    /// `mbind` flags (MPOL_MF_*).
    MbindFlags {
        /// MPOL_MF_STRICT: fail with EIO if existing pages do not follow the policy (with MOVE:
        /// if some could not be moved).
        STRICT = 1 << 0, "MPOL_MF_STRICT";
        /// MPOL_MF_MOVE: migrate existing pages mapped only by this process.
        MOVE = 1 << 1, "MPOL_MF_MOVE";
        /// MPOL_MF_MOVE_ALL: also pages shared with other processes; needs CAP_SYS_NICE.
        MOVE_ALL = 1 << 2, "MPOL_MF_MOVE_ALL";
    }
);

/// All mode-flag bits (MPOL_MODE_FLAGS), masked off a mode returned by `get_mempolicy`.
pub(crate) const MPOL_MODE_FLAGS: i32 = (1 << 13) | (1 << 14) | (1 << 15);

/// A nodemask in the layout the kernel copies from user space: an array of `unsigned long`.
///
/// Sizing quirk: the kernel's `get_nodes()` (mm/mempolicy.c) starts with `--maxnode`, i.e. it
/// reads `maxnode - 1` bits. So a buffer of N bits is passed with `maxnode = N + 1`; passing
/// `N` would silently drop the highest node (numactl's libnuma does the same `+ 1`). On the way
/// out, `get_mempolicy` needs `maxnode >= nr_node_ids`, which `MAX_NODES + 1` always satisfies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelNodemask {
    pub words: [libc::c_ulong; KernelNodemask::WORDS],
}

impl KernelNodemask {
    const BITS_PER_WORD: usize = libc::c_ulong::BITS as usize;
    pub const WORDS: usize = MAX_NODES.div_ceil(Self::BITS_PER_WORD);

    pub fn empty() -> Self {
        KernelNodemask {
            words: [0; Self::WORDS],
        }
    }

    pub fn from_mask(m: &NodeMask) -> Self {
        let mut k = Self::empty();
        for n in m.iter() {
            let i = n.index();
            k.words[i / Self::BITS_PER_WORD] |= 1 << (i % Self::BITS_PER_WORD);
        }
        k
    }

    pub fn to_mask(&self) -> NodeMask {
        let mut m = NodeMask::empty();
        for i in 0..MAX_NODES {
            if self.words[i / Self::BITS_PER_WORD] & (1 << (i % Self::BITS_PER_WORD)) != 0 {
                m.set(NodeId(i as u16));
            }
        }
        m
    }

    /// The `maxnode` argument for this buffer: bits + 1 (see the type's documentation).
    pub fn maxnode() -> libc::c_ulong {
        (Self::WORDS * Self::BITS_PER_WORD + 1) as libc::c_ulong
    }
}

/// A policy in kernel terms: mode, mode flags and nodemask, ready for `set_mempolicy`/`mbind`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelPolicy {
    /// The mode (MPOL_*).
    pub mode: KernelMode,
    /// Mode flags (MPOL_F_*).
    pub flags: ModeFlags,
    /// Empty for MPOL_DEFAULT and MPOL_LOCAL (the kernel then gets a NULL mask).
    pub nodes: NodeMask,
}

impl KernelPolicy {
    /// Map numalab's policy to the kernel's. `MemPolicy::Bind { numa_balancing: true }` sets
    /// MPOL_F_NUMA_BALANCING; `extra` adds MPOL_F_STATIC_NODES / MPOL_F_RELATIVE_NODES.
    ///
    /// MPOL_WEIGHTED_INTERLEAVE: the weights are not a syscall argument. They are system-wide
    /// sysfs settings (`/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`, see
    /// [`crate::weighted_interleave`]); the `weights` field is checked against them by
    /// [`crate::set_mempolicy`] and [`crate::mbind`], not passed.
    ///
    /// `MemPolicy::RemotePercent` is numalab's own mode and gives [`Error::NotAKernelPolicy`].
    pub fn from_mempolicy(
        p: &MemPolicy,
        extra: ModeFlags,
        syscall: &'static str,
    ) -> Result<KernelPolicy, Error> {
        let (mode, nodes, mut flags) = match p {
            MemPolicy::Default => (KernelMode::Default, NodeMask::empty(), ModeFlags::empty()),
            MemPolicy::Local => (KernelMode::Local, NodeMask::empty(), ModeFlags::empty()),
            MemPolicy::Preferred { node } => {
                if node.index() >= MAX_NODES {
                    return Err(Error::Argument {
                        syscall,
                        problem: format!(
                            "preferred node {} is beyond numalab's {MAX_NODES}-node nodemask",
                            node.0
                        ),
                        remedy: "name an online node".into(),
                    });
                }
                (
                    KernelMode::Preferred,
                    NodeMask::single(*node),
                    ModeFlags::empty(),
                )
            }
            MemPolicy::PreferredMany { nodes } => {
                (KernelMode::PreferredMany, *nodes, ModeFlags::empty())
            }
            MemPolicy::Bind {
                nodes,
                numa_balancing,
            } => (
                KernelMode::Bind,
                *nodes,
                if *numa_balancing {
                    ModeFlags::NUMA_BALANCING
                } else {
                    ModeFlags::empty()
                },
            ),
            MemPolicy::Interleave { nodes } => (KernelMode::Interleave, *nodes, ModeFlags::empty()),
            MemPolicy::WeightedInterleave { nodes, .. } => {
                (KernelMode::WeightedInterleave, *nodes, ModeFlags::empty())
            }
            MemPolicy::RemotePercent { .. } => {
                return Err(Error::NotAKernelPolicy {
                    syscall,
                    policy: p.to_string(),
                })
            }
        };
        flags = flags | extra;
        let k = KernelPolicy { mode, flags, nodes };
        k.check(syscall)?;
        Ok(k)
    }

    /// Reject combinations the kernel refuses with a bare EINVAL, so the message can say why.
    fn check(&self, syscall: &'static str) -> Result<(), Error> {
        let arg = |problem: String, remedy: &str| {
            Err(Error::Argument {
                syscall,
                problem,
                remedy: remedy.to_string(),
            })
        };
        if self.flags.contains(ModeFlags::STATIC_NODES)
            && self.flags.contains(ModeFlags::RELATIVE_NODES)
        {
            return arg(
                "MPOL_F_STATIC_NODES and MPOL_F_RELATIVE_NODES are both set".into(),
                "choose one of them",
            );
        }
        if self.flags.contains(ModeFlags::NUMA_BALANCING)
            && !matches!(self.mode, KernelMode::Bind | KernelMode::PreferredMany)
        {
            return arg(
                format!("MPOL_F_NUMA_BALANCING with {}", self.mode),
                "the kernel accepts MPOL_F_NUMA_BALANCING only with MPOL_BIND (5.12+) or MPOL_PREFERRED_MANY",
            );
        }
        match self.mode {
            KernelMode::Default | KernelMode::Local => {
                if !self.flags.is_empty() {
                    return arg(
                        format!("{} takes no mode flags, got {:?}", self.mode, self.flags),
                        "drop the flags",
                    );
                }
            }
            KernelMode::Preferred => {}
            _ => {
                if self.nodes.is_empty() {
                    return arg(
                        format!("{} with an empty nodemask", self.mode),
                        "name at least one node",
                    );
                }
            }
        }
        Ok(())
    }

    /// The `mode` argument: mode | flags.
    pub fn raw_mode(&self) -> i32 {
        self.mode as i32 | self.flags.bits() as i32
    }

    /// Back to numalab's vocabulary. Weighted interleave comes back with empty `weights` (the
    /// kernel does not report them; read [`crate::weighted_interleave::read_weights`]).
    /// An MPOL_PREFERRED with an empty mask is how kernels before MPOL_LOCAL reported local
    /// allocation, so it maps to `MemPolicy::Local`.
    pub fn to_mempolicy(&self) -> MemPolicy {
        match self.mode {
            KernelMode::Default => MemPolicy::Default,
            KernelMode::Local => MemPolicy::Local,
            KernelMode::Preferred => match self.nodes.first() {
                Some(node) => MemPolicy::Preferred { node },
                None => MemPolicy::Local,
            },
            KernelMode::PreferredMany => MemPolicy::PreferredMany { nodes: self.nodes },
            KernelMode::Bind => MemPolicy::Bind {
                nodes: self.nodes,
                numa_balancing: self.flags.contains(ModeFlags::NUMA_BALANCING),
            },
            KernelMode::Interleave => MemPolicy::Interleave { nodes: self.nodes },
            KernelMode::WeightedInterleave => MemPolicy::WeightedInterleave {
                nodes: self.nodes,
                weights: Vec::new(),
            },
        }
    }
}

impl fmt::Display for KernelPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.mode)?;
        if !self.flags.is_empty() {
            write!(f, "|{:?}", self.flags)?;
        }
        if !self.nodes.is_empty() {
            write!(f, " nodes {}", self.nodes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_numbers() {
        assert_eq!(KernelMode::WeightedInterleave as i32, 6);
        assert_eq!(KernelMode::PreferredMany as i32, 5);
        assert_eq!(ModeFlags::NUMA_BALANCING.bits(), 8192);
        assert_eq!(ModeFlags::STATIC_NODES.bits(), 1 << 15);
        assert_eq!(MbindFlags::MOVE_ALL.bits(), 4);
        assert_eq!(
            format!("{:?}", MbindFlags::STRICT | MbindFlags::MOVE),
            "MPOL_MF_STRICT|MPOL_MF_MOVE"
        );
        assert_eq!(MPOL_MODE_FLAGS, 0xe000);
    }

    #[test]
    fn nodemask_layout_and_maxnode() {
        let m = NodeMask::from_nodes([NodeId(0), NodeId(3), NodeId(64), NodeId(255)]);
        let k = KernelNodemask::from_mask(&m);
        assert_eq!(k.words[0], 0b1001);
        assert_eq!(k.words[1], 1);
        assert_eq!(k.words[3], 1 << 63);
        assert_eq!(k.to_mask(), m);
        assert_eq!(KernelNodemask::maxnode(), 257);
    }

    #[test]
    fn maps_every_mode() {
        let two = NodeMask::first_n(2);
        let cases = [
            (MemPolicy::Default, KernelMode::Default),
            (MemPolicy::Local, KernelMode::Local),
            (
                MemPolicy::Preferred { node: NodeId(1) },
                KernelMode::Preferred,
            ),
            (
                MemPolicy::PreferredMany { nodes: two },
                KernelMode::PreferredMany,
            ),
            (
                MemPolicy::Bind {
                    nodes: two,
                    numa_balancing: true,
                },
                KernelMode::Bind,
            ),
            (MemPolicy::Interleave { nodes: two }, KernelMode::Interleave),
            (
                MemPolicy::WeightedInterleave {
                    nodes: two,
                    weights: vec![],
                },
                KernelMode::WeightedInterleave,
            ),
        ];
        for (p, mode) in cases {
            let k = KernelPolicy::from_mempolicy(&p, ModeFlags::empty(), "set_mempolicy").unwrap();
            assert_eq!(k.mode, mode);
            assert_eq!(k.to_mempolicy(), p);
        }
        let k = KernelPolicy::from_mempolicy(
            &MemPolicy::Bind {
                nodes: two,
                numa_balancing: true,
            },
            ModeFlags::STATIC_NODES,
            "mbind",
        )
        .unwrap();
        assert_eq!(k.raw_mode(), 2 | (1 << 13) | (1 << 15));
    }

    #[test]
    fn remote_percent_is_not_a_kernel_mode() {
        let p = MemPolicy::RemotePercent {
            percent: 30,
            remote: NodeMask::empty(),
        };
        let e = KernelPolicy::from_mempolicy(&p, ModeFlags::empty(), "set_mempolicy").unwrap_err();
        assert!(matches!(e, Error::NotAKernelPolicy { .. }));
        assert!(e.to_string().contains("numalab's placement runtime"), "{e}");
    }

    #[test]
    fn rejects_bad_flag_combinations() {
        let two = NodeMask::first_n(2);
        let p = MemPolicy::Interleave { nodes: two };
        let e = KernelPolicy::from_mempolicy(
            &p,
            ModeFlags::STATIC_NODES | ModeFlags::RELATIVE_NODES,
            "mbind",
        )
        .unwrap_err();
        assert!(e.to_string().contains("choose one"), "{e}");
        let e = KernelPolicy::from_mempolicy(&p, ModeFlags::NUMA_BALANCING, "mbind").unwrap_err();
        assert!(e.to_string().contains("MPOL_F_NUMA_BALANCING"), "{e}");
        let e = KernelPolicy::from_mempolicy(
            &MemPolicy::Bind {
                nodes: NodeMask::empty(),
                numa_balancing: false,
            },
            ModeFlags::empty(),
            "mbind",
        )
        .unwrap_err();
        assert!(e.to_string().contains("empty nodemask"), "{e}");
    }
}
