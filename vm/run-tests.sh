#!/usr/bin/env bash
# numalab's multi-node VM test harness: runs the vm_* integration tests inside QEMU on stock
# Debian kernels, because the development and CI machines have a single NUMA node.
# See docs/testing.md. Usage: bash vm/run-tests.sh --help
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_REPO=$(cd "$VM_DIR/.." && pwd)
VM_CACHE=${NUMALAB_VM_CACHE:-$VM_DIR/.cache}   # git-ignored: kernels, initramfs, logs
VM_INITRD="$VM_CACHE/initramfs.cpio.gz"

usage() {
  cat <<'USAGE'
Usage: bash vm/run-tests.sh [options]

Builds the vm_* test binaries and the numalab CLI (the host's release build), packs them with
their shared libraries into an initramfs and runs them in a QEMU VM with 5 NUMA nodes (4 CPU
nodes on a ring + 1 CPU-less memory node).

  --kernel 6.12|6.1|all  kernel(s) to boot (default: all = 6.12 and 6.1)
  --filter NAME          libtest filter passed to every test binary (substring of test names)
  --bin NAME             run only the test binary NAME (e.g. vm_mempolicy)
  --shell                boot one kernel (6.12 unless --kernel 6.1) into an interactive shell
  --extra-bin PATH       also run this test executable in the VM, with its libraries (repeatable)
  --require-tests        fail when the workspace has no vm_* test binary (CI)
  --timeout SECONDS      per-kernel limit for one VM run (default 1800)
  --jobs N               kernels booted at once (default: as many as the host has cores, at
                         most one per kernel); each QEMU runs single-threaded TCG on one core
  --no-build             reuse the binaries of the last build (no cargo; vm/init is refreshed)
  --no-cli               do not build the numalab CLI (/bin/numalab is then missing)
  --with-perf            also put the host's perf (and its shared libraries) into the VM
  --update               run apt-get update even if nothing is missing
  --target-dir DIR       cargo target dir (default: $NUMALAB_VM_TARGET_DIR, $CARGO_TARGET_DIR,
                         else this checkout's target/)
  --with-numademo        also run numademo, libnuma's bandwidth demo (part of numactl's make
                         check; ~5 minutes a kernel under TCG; it runs neither numactl nor numalab)
  --no-hmat              no ACPI HMAT (node 4 then shares the DRAM memory tier; see vm/lib/topology.sh)
  --append 'ARGS'        extra kernel command-line arguments (e.g. transparent_hugepage=madvise)
  --verbose              show the kernel's boot messages
  -h, --help             this text

Exit status: 0 all kernels passed, 1 a test failed/crashed, nothing ran, panic or timeout,
2 bad usage or setup error. The last lines are machine-readable:
  VMTEST-RESULT kernel=6.12 release=... status=PASS|FAIL binaries=N passed=P failed=F crashed=C boot_s=B total_s=T
  VMTEST-OVERALL status=PASS|FAIL
USAGE
}

log() { printf '[vm] %s\n' "$*" >&2; }
warn() { printf '[vm] warning: %s\n' "$*" >&2; }
die() { printf '[vm] error: %s\n' "$*" >&2; exit 2; }

# --- options ----------------------------------------------------------------------------------
VM_KERNEL_OPT=all VM_FILTER= VM_ONLY_BIN= VM_SHELL=0 VM_EXTRA_BINS=() VM_REQUIRE_TESTS=0
VM_TIMEOUT=1800 VM_JOBS= VM_BUILD=1 VM_CLI=1 VM_WITH_PERF=0 VM_UPDATE=0 VM_VERBOSE=0 VM_TARGET_DIR= VM_APPEND= VM_NUMADEMO=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) VM_KERNEL_OPT=${2:?--kernel needs 6.12, 6.1 or all}; shift ;;
    --filter) VM_FILTER=${2:?--filter needs a name}; shift ;;
    --bin) VM_ONLY_BIN=${2:?--bin needs a binary name}; shift ;;
    --shell) VM_SHELL=1 ;;
    --extra-bin) VM_EXTRA_BINS+=("$(realpath "${2:?--extra-bin needs a path}")"); shift ;;
    --require-tests) VM_REQUIRE_TESTS=1 ;;
    --timeout) VM_TIMEOUT=${2:?--timeout needs seconds}; shift ;;
    --jobs) VM_JOBS=${2:?--jobs needs a number}; shift ;;
    --no-build) VM_BUILD=0 ;;
    --no-cli) VM_CLI=0 ;;
    --with-perf) VM_WITH_PERF=1 ;;
    --update) VM_UPDATE=1 ;;
    --target-dir) VM_TARGET_DIR=${2:?--target-dir needs a directory}; shift ;;
    --with-numademo) VM_NUMADEMO=1 ;;
    --no-hmat) NUMALAB_VM_HMAT=0 ;;
    --append) VM_APPEND=${2:?--append needs kernel arguments}; shift ;;
    --verbose) VM_VERBOSE=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
  shift
done
case "$VM_KERNEL_OPT" in
  all) VM_KERNELS=(6.12 6.1) ;;
  6.12|6.1) VM_KERNELS=("$VM_KERNEL_OPT") ;;
  *) die "--kernel must be 6.12, 6.1 or all, not '$VM_KERNEL_OPT'" ;;
esac
# Filter and binary name go on the kernel command line: keep them to characters that survive it.
[[ "$VM_FILTER" =~ ^[A-Za-z0-9_:.-]*$ ]] || die "--filter '$VM_FILTER': only letters, digits and _ : . - are allowed"
[[ "$VM_ONLY_BIN" =~ ^[A-Za-z0-9_.-]*$ ]] || die "--bin '$VM_ONLY_BIN': only letters, digits and _ . - are allowed"
[[ "$VM_TIMEOUT" =~ ^[0-9]+$ ]] || die "--timeout needs whole seconds"
[ -z "$VM_JOBS" ] || [[ "$VM_JOBS" =~ ^[1-9][0-9]*$ ]] || die "--jobs takes a whole number above 0, not '$VM_JOBS'"
# Each VM runs single-threaded TCG (vm/lib/qemu.sh), so one core per kernel is what it uses.
[ -n "$VM_JOBS" ] || VM_JOBS=$(nproc 2>/dev/null || echo 1)
# Target dir: this checkout's own unless told otherwise. Never a directory shared between
# checkouts by default: cargo's artifact hashes do not depend on the checkout's path, so two
# checkouts building into one target dir can leave one of them with the other's binaries.
if [ -z "$VM_TARGET_DIR" ]; then
  if [ -n "${NUMALAB_VM_TARGET_DIR:-}" ]; then VM_TARGET_DIR=$NUMALAB_VM_TARGET_DIR
  elif [ -n "${CARGO_TARGET_DIR:-}" ]; then VM_TARGET_DIR=$CARGO_TARGET_DIR
  else VM_TARGET_DIR="$VM_REPO/target"
  fi
fi

# shellcheck source=lib/deps.sh
. "$VM_DIR/lib/deps.sh"
# shellcheck source=lib/kernel.sh
. "$VM_DIR/lib/kernel.sh"
# shellcheck source=lib/topology.sh
. "$VM_DIR/lib/topology.sh"
# shellcheck source=lib/build.sh
. "$VM_DIR/lib/build.sh"
# shellcheck source=lib/qemu.sh
. "$VM_DIR/lib/qemu.sh"

if ! command -v cargo >/dev/null && [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi

# --- host setup and build ----------------------------------------------------------------------
T_START=$(date +%s)
mkdir -p "$VM_CACHE"
ensure_host_deps "$VM_UPDATE"
if [ "$VM_BUILD" = 1 ]; then command -v cargo >/dev/null || die "cargo not found"; fi
build_initramfs "$VM_BUILD"
# What is in the initramfs decides whether there is anything to run.
mapfile -t VM_TESTBINS < <(gzip -dc "$VM_INITRD" | cpio -it --quiet 2>/dev/null | sed -n 's|^tests/||p')
bin_known() { local b; for b in "${VM_TESTBINS[@]}"; do [ "$b" = "$1" ] && return 0; done; return 1; }
if [ -n "$VM_ONLY_BIN" ] && ! bin_known "$VM_ONLY_BIN"; then
  die "--bin $VM_ONLY_BIN: no such test binary in the VM (have: ${VM_TESTBINS[*]:-none})"
fi
if [ ${#VM_TESTBINS[@]} = 0 ]; then
  if [ "$VM_REQUIRE_TESTS" = 1 ]; then
    log "FAIL: no vm_ test binaries (crates/*/tests/vm_*.rs) and --require-tests was given"
    echo "VMTEST-OVERALL status=FAIL reason=no-vm-test-binaries"
    exit 1
  fi
  [ "$VM_SHELL" = 1 ] || log "no vm_ test binaries: the VM will only run its topology self-check"
fi

# --- run ----------------------------------------------------------------------------------------
if [ "$VM_SHELL" = 1 ]; then
  vm_shell "${VM_KERNELS[0]}"
fi
VM_RESULTS=()
overall=PASS
if [ "$VM_JOBS" -gt 1 ] && [ ${#VM_KERNELS[@]} -gt 1 ]; then
  vm_run_kernels_parallel "$VM_JOBS" "${VM_KERNELS[@]}" || overall=FAIL
else
  for k in "${VM_KERNELS[@]}"; do
    vm_run_tests "$k" || overall=FAIL
  done
fi
echo
printf '%s\n' "${VM_RESULTS[@]}"
echo "VMTEST-OVERALL status=$overall kernels=${#VM_KERNELS[@]} wall_s=$(( $(date +%s) - T_START ))"
# The plain closing line CI reads: tests passed and failed (crashes count as failed) over all kernels.
[ $overall = PASS ] || [ "${VM_FAILED:-0}" -gt 0 ] || VM_FAILED=1
echo "vm: ${VM_PASSED:-0} passed, ${VM_FAILED:-0} failed"
[ $overall = PASS ]
