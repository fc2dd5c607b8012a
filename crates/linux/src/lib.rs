//! numalab's Linux runtime: typed NUMA syscalls and readers for the kernel's NUMA state.
