#!/bin/sh
# Record the NUMA-related /sys and /proc files of this machine into a fixture tree that
# numalab-linux's readers can read through SysRoot::new(<dir>). Relative paths are kept
# (sys/devices/system/node/online -> <dir>/sys/devices/system/node/online).
#
# usage: record.sh [OUTPUT_DIR]   (default: host-<kernel major.minor>-<N>node next to this script)
#
# Symlinks (accessN/initiators/nodeM) are recorded as empty files of the same name: the readers
# only look at the names. /proc/self/{numa_maps,smaps} come from a helper process that maps
# 8 MiB with MADV_HUGEPAGE and touches it (python3), or from this shell when python3 is missing.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
rel=$(uname -r | cut -d. -f1-2)
out=${1:-"$here/host-$rel-${nodes}node"}
mkdir -p "$out"

copy() { # copy FILE... keeping paths, skipping what is absent or unreadable
    for f in "$@"; do
        [ -f "$f" ] || continue
        mkdir -p "$out$(dirname "$f")"
        cat "$f" > "$out$f" 2>/dev/null || rm -f "$out$f"
    done
}

n=/sys/devices/system/node
copy $n/possible $n/online $n/has_cpu $n/has_memory $n/has_normal_memory $n/has_generic_initiator
for d in $n/node[0-9]*; do
    copy "$d/cpulist" "$d/distance" "$d/meminfo" "$d/numastat"
    for a in "$d"/access[0-9]*; do
        [ -d "$a/initiators" ] || continue
        mkdir -p "$out$a/initiators"
        for e in "$a"/initiators/*; do
            if [ -L "$e" ]; then : > "$out$e"; else copy "$e"; fi
        done
    done
done
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do
    [ -d "$t" ] && copy "$t/nodelist"
done
for w in /sys/kernel/mm/mempolicy/weighted_interleave/*; do
    copy "$w"
done
t=/sys/kernel/mm/transparent_hugepage
copy $t/enabled $t/defrag $t/shmem_enabled $t/use_zero_page $t/hpage_pmd_size $t/khugepaged/*
for h in $t/hugepages-*; do
    [ -d "$h" ] && copy "$h/enabled"
done
copy /proc/sys/kernel/numa_balancing /proc/vmstat

mkdir -p "$out/proc/self"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$out/proc/self" <<'PY'
import mmap, sys
size = 8 << 20
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if hasattr(m, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
    m.madvise(mmap.MADV_HUGEPAGE)
for off in range(0, size // 2, 4096):  # touch half: present and absent pages
    m[off] = 1
for name in ("numa_maps", "smaps"):
    with open("/proc/self/" + name) as src, open(sys.argv[1] + "/" + name, "w") as dst:
        dst.write(src.read())
PY
else
    cat /proc/$$/numa_maps > "$out/proc/self/numa_maps"
    cat /proc/$$/smaps > "$out/proc/self/smaps"
fi
echo "recorded into $out"
