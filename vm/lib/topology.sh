# shellcheck shell=bash
# The virtual machine's NUMA topology, as QEMU arguments.
#
# Five nodes: 0-3 each hold one CPU and sit on a ring; node 4 holds memory and no CPU
# (a far-memory / CXL-like expander). Distances (ACPI SLIT, 10 = local):
#
#          to: 0   1   2   3   4
#   from 0:   10  16  22  16  28
#   from 1:   16  10  16  22  28
#   from 2:   22  16  10  16  28
#   from 3:   16  22  16  10  28
#   from 4:   28  28  28  28  10
#
# Ring: node i to i+-1 (mod 4) is one hop (16), to i+2 is two hops (22). Node 4 is 28 from
# every CPU node: farther than any ring hop, so fallback (zonelist order) always tries every
# CPU node before it, as on machines with a slow memory expander.
# vm/init checks this very matrix inside the guest (keep the two in sync).
#
# HMAT (ACPI Heterogeneous Memory Attribute Table), on unless NUMALAB_VM_HMAT=0: the same
# picture as access latency and bandwidth, so that the kernel can rank node 4 as slower memory.
#   latency   = distance x 10 ns: 100 local, 160 neighbour, 220 opposite, 280 to node 4
#   bandwidth = 20 GB/s local, 12 neighbour, 10 opposite, 8 to node 4
# Linux 6.10+ (so the 6.12 kernel) puts a CPU-less node into a memory tier computed from these
# figures: node 4 lands in a lower tier than nodes 0-3 (memory_tier31 vs memory_tier4), so
# demotion and NUMA-balancing tiering mode have a target. 6.1 keeps every node in one tier.
# QEMU wants an initiator for a CPU-less node when HMAT is on: node 4 names node 0 (as a memory
# expander hangs off one socket); its distances and latencies stay equal from every CPU node.

VM_DISTANCES=(
  "10 16 22 16 28"
  "16 10 16 22 28"
  "22 16 10 16 28"
  "16 22 16 10 28"
  "28 28 28 28 10"
)
# Memory per node in MiB. Small keeps the guest cheap; TCG only touches what the guest uses.
# Override with NUMALAB_VM_NODE_MB / NUMALAB_VM_FAR_MB if a test needs more.
VM_NODE_MB=${NUMALAB_VM_NODE_MB:-384}   # nodes 0-3
VM_FAR_MB=${NUMALAB_VM_FAR_MB:-256}     # node 4 (CPU-less)
VM_HMAT=${NUMALAB_VM_HMAT:-1}

# HMAT figures derived from a distance (see above).
hmat_latency_ns() { echo $(($1 * 10)); }
hmat_bandwidth_gb() { case "$1" in 10) echo 20 ;; 16) echo 12 ;; 22) echo 10 ;; *) echo 8 ;; esac; }

# Prints the -machine/-m/-smp/-object/-numa arguments, one per line (read them with mapfile).
vm_numa_args() {
  local total=$((4 * VM_NODE_MB + VM_FAR_MB)) i j row initiator=
  if [ "$VM_HMAT" = 1 ]; then
    printf '%s\n' -machine pc,hmat=on
    initiator=,initiator=0
  else
    printf '%s\n' -machine pc
  fi
  printf '%s\n' -m "${total}M"
  # One socket per CPU so that the guest's scheduler domains follow the nodes.
  printf '%s\n' -smp 4,sockets=4,cores=1,threads=1
  for i in 0 1 2 3; do
    printf '%s\n' -object "memory-backend-ram,id=mem$i,size=${VM_NODE_MB}M"
    printf '%s\n' -numa "node,nodeid=$i,cpus=$i,memdev=mem$i"
  done
  printf '%s\n' -object "memory-backend-ram,id=mem4,size=${VM_FAR_MB}M"
  printf '%s\n' -numa "node,nodeid=4,memdev=mem4$initiator"
  # Every ordered pair explicitly, so nothing depends on QEMU's symmetry filling.
  for i in 0 1 2 3 4; do
    read -r -a row <<<"${VM_DISTANCES[$i]}"
    for j in 0 1 2 3 4; do
      [ "$i" = "$j" ] && continue
      printf '%s\n' -numa "dist,src=$i,dst=$j,val=${row[$j]}"
    done
  done
  [ "$VM_HMAT" = 1 ] || return 0
  # HMAT: every CPU node (initiator) to every memory node (target), latency and bandwidth.
  for i in 0 1 2 3; do
    read -r -a row <<<"${VM_DISTANCES[$i]}"
    for j in 0 1 2 3 4; do
      printf '%s\n' -numa "hmat-lb,initiator=$i,target=$j,hierarchy=memory,data-type=access-latency,latency=$(hmat_latency_ns "${row[$j]}")"
      printf '%s\n' -numa "hmat-lb,initiator=$i,target=$j,hierarchy=memory,data-type=access-bandwidth,bandwidth=$(hmat_bandwidth_gb "${row[$j]}")G"
    done
  done
}
