//! Placing real processes: numactl-compatible node/CPU specs and launch plans, remote-
//! percentage placement and the page migration engine, over `numalab-linux`'s syscalls.

pub mod bench;
pub mod device_node;
pub mod exec;
pub mod launch;
pub mod machine_file;
pub mod memhog;
pub mod migrate;
pub mod migrate_plan;
pub mod nodespec;
pub mod numactl_shm;
pub mod numactl_show;
pub mod percent;
pub mod percent_thread;
pub mod vma;
