# shellcheck shell=bash
# Booting the VM and reading its results.

# QEMU command line for one kernel. TCG only (no KVM on the build machines): -cpu max gives the
# guest every feature TCG emulates. -accel tcg,thread=single runs all vCPUs in one host thread:
# with thread=multi a 6.12 guest once died of an int3 Oops in __schedule while the tests
# switched perf events on (a static key being patched with text_poke_bp on one vCPU while
# another ran the old code: a race multi-threaded TCG does not order); single-threaded TCG
# cannot race, and on the 2-core build machines the suite takes as long (45 s per kernel). The -machine, memory and NUMA arguments come from topology.sh. -nodefaults drops the VGA card and NIC the tests do not need (less to probe at boot);
# -no-reboot turns the reboot that panic=-1 asks for into a QEMU exit.
vm_qemu_cmd() {
  local kernel=$1 append=$2 numa=()
  mapfile -t numa < <(vm_numa_args)
  VM_QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -accel tcg,thread=single
           -cpu max "${numa[@]}" -kernel "$kernel" -initrd "$VM_INITRD" -append "$append"
           -display none -no-reboot)
}

vm_append() {
  local a="console=ttyS0 panic=-1 numalab.mode=$1"
  # quiet: under TCG every console byte costs; panics and oopses print anyway.
  [ "$VM_VERBOSE" = 1 ] || a+=" quiet"
  [ -n "$VM_FILTER" ] && a+=" numalab.filter=$VM_FILTER"
  [ -n "$VM_ONLY_BIN" ] && a+=" numalab.bin=$VM_ONLY_BIN"
  [ "${VM_NUMADEMO:-0}" = 1 ] && a+=" numalab.numademo=1"
  [ -n "$VM_APPEND" ] && a+=" $VM_APPEND"
  echo "$a"
}

# Interactive: the serial console and QEMU's monitor share the terminal (Ctrl-A X quits).
vm_shell() {
  local series=$1
  kernel_fetch "$series"
  vm_qemu_cmd "$KERNEL_IMAGE" "$(vm_append shell)"
  log "booting $KERNEL_PKG with a shell (Ctrl-A X quits QEMU)"
  exec "${VM_QEMU[@]}" -serial mon:stdio
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# Boots one kernel, streams the console to the terminal and to a log, then judges the run.
# Appends a VMTEST-RESULT line to VM_RESULTS; returns 0 when the kernel passed.
vm_run_tests() {
  local series=$1 logf t0 t_boot= t_end line rc=
  logf="$VM_CACHE/logs/vm-$series.log"
  kernel_fetch "$series"
  vm_qemu_cmd "$KERNEL_IMAGE" "$(vm_append test)"
  mkdir -p "${logf%/*}"; : >"$logf"
  log "booting $KERNEL_PKG (TCG, 4 CPUs, 5 NUMA nodes; timeout ${VM_TIMEOUT}s; log $logf)"
  t0=$(now)
  # QEMU's exit status travels as a last line, so the loop runs in this shell (no subshell
  # variables lost) and still learns about a timeout (124) or a crash of QEMU.
  while IFS= read -r line; do
    line=${line%$'\r'}
    case "$line" in
      *VMTEST-HOST-QEMU-EXIT*) rc=${line##* }; line=${line%%VMTEST-HOST-QEMU-EXIT*}; [ -n "$line" ] || continue ;;
      *VMTEST-BOOTED*) t_boot=$(now) ;;
    esac
    printf '%s\n' "$line" >>"$logf"
    printf '[%s] %s\n' "$series" "$line"
  # (`|| qrc=$?`: the subshell inherits set -e, which would skip the printf on a timeout.)
  done < <(qrc=0; timeout -k 10 "$VM_TIMEOUT" "${VM_QEMU[@]}" -serial stdio -monitor none </dev/null 2>&1 || qrc=$?
           printf '\nVMTEST-HOST-QEMU-EXIT %s\n' "$qrc")
  t_end=$(now)
  vm_judge "$series" "$logf" "${rc:-255}" "$(secs "$t0" "${t_boot:-$t_end}")" "$(secs "$t0" "$t_end")" "${t_boot:+1}"
}

# Boots up to $1 kernels at once, one QEMU each (single-threaded TCG keeps each on one core, so
# on a 2-core machine the two kernels take the time of the slower one instead of the sum). The
# console lines stream as they come, each prefixed with its kernel; each kernel's verdict is
# kept in a file and printed in kernel order once all have finished, and its counts are added
# here as the serial loop adds them. Kernels are fetched first, one after the other (apt).
vm_run_kernels_parallel() {
  local jobs=$1 k st=0 pids=() dir
  shift
  for k in "$@"; do kernel_fetch "$k"; done
  dir="$VM_CACHE/logs/parallel"
  rm -rf "$dir"; mkdir -p "$dir"
  for k in "$@"; do
    # at most $jobs at once: wait for the oldest before starting one more
    if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}" || true; pids=("${pids[@]:1}"); fi
    (
      {
        VM_RESULTS=() VM_PASSED=0 VM_FAILED=0
        vm_run_tests "$k" && kst=0 || kst=1
        { echo "KST=$kst"; echo "KPASSED=$VM_PASSED"; echo "KFAILED=$VM_FAILED"
          echo "KRESULT='${VM_RESULTS[0]:-VMTEST-RESULT kernel=$k status=FAIL reason=no-result}'"; } >"$dir/$k.state"
      } | tee "$dir/$k.out" | grep --line-buffered "^\[$k\] " || true
    ) &
    pids+=($!)
  done
  wait || true
  for k in "$@"; do
    if [ ! -s "$dir/$k.state" ]; then
      echo; echo "== kernel $k: the run left no verdict (see $dir)"
      VM_RESULTS+=("VMTEST-RESULT kernel=$k status=FAIL reason=no-verdict")
      VM_FAILED=$(( ${VM_FAILED:-0} + 1 )); st=1; continue
    fi
    # the console lines were streamed already: print the rest, the verdict
    grep -v "^\[$k\] " "$dir/$k.out" || true
    local KST KPASSED KFAILED KRESULT
    . "$dir/$k.state"
    VM_RESULTS+=("$KRESULT")
    VM_PASSED=$(( ${VM_PASSED:-0} + KPASSED )); VM_FAILED=$(( ${VM_FAILED:-0} + KFAILED ))
    [ "$KST" = 0 ] || st=1
  done
  return $st
}

# Reads a console log and decides. Failure reasons: QEMU timeout or error, kernel panic,
# self-check failure, a failed test, a crashed binary, no summary (the VM died), no test run.
vm_judge() {
  local series=$1 logf=$2 qrc=$3 boot_s=$4 total_s=$5 booted=$6
  local reasons=() summary release selfcheck features end name st p f s n_begin n_end
  local passed=0 failed=0 crashed=0 bins=0
  release=$(sed -n 's/.*VMTEST-KERNEL release=\([^ ]*\).*/\1/p' "$logf" | head -n 1)
  selfcheck=$(sed -n 's/.*VMTEST-SELFCHECK \(.*\)/\1/p' "$logf" | head -n 1)
  features=$(sed -n 's/.*VMTEST-FEATURE \(.*\)/\1/p' "$logf" | tr '\n' ' ')
  summary=$(grep -o 'VMTEST-SUMMARY .*' "$logf" | tail -n 1 || true)

  [ "$qrc" = 124 ] || [ "$qrc" = 137 ] && reasons+=("timeout after ${VM_TIMEOUT}s")
  [ "$qrc" != 0 ] && [ "$qrc" != 124 ] && [ "$qrc" != 137 ] && reasons+=("qemu exited with $qrc")
  grep -q 'Kernel panic' "$logf" && reasons+=("kernel panic: $(grep -o 'Kernel panic.*' "$logf" | head -n 1)")
  [ -n "$booted" ] || reasons+=("the VM never reached /init")
  [ "$selfcheck" = ok ] || reasons+=("topology self-check: ${selfcheck:-did not run}")
  [ -n "$summary" ] || reasons+=("no VMTEST-SUMMARY line: the VM stopped before the end")

  echo
  echo "== kernel $series: ${release:-?}  [$KERNEL_PKG]"
  echo "   boot ${boot_s}s to /init, total ${total_s}s; self-check ${selfcheck:-missing}"
  echo "   features: ${features:-none reported}"
  n_begin=$(grep -c 'VMTEST-BEGIN ' "$logf" || true); n_end=$(grep -c 'VMTEST-END ' "$logf" || true)
  while IFS= read -r end; do
    [ -n "$end" ] || continue
    name=$(sed -n 's/.* name=\([^ ]*\).*/\1/p' <<<"$end"); st=$(sed -n 's/.* status=\([^ ]*\).*/\1/p' <<<"$end")
    p=$(sed -n 's/.* passed=\([0-9]*\).*/\1/p' <<<"$end"); f=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$end")
    s=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$end")
    printf '   %-40s %-8s %4s passed %4s failed  %6ss\n' "$name" "$st" "$p" "$f" "$s"
    bins=$((bins + 1)) passed=$((passed + p)) failed=$((failed + f))
    case "$st" in ok) ;; failed) reasons+=("$name: $f failed") ;; *) crashed=$((crashed + 1)); reasons+=("$name crashed ($(sed -n 's/.* exit=\([^ ]*\).*/\1/p' <<<"$end"))") ;; esac
  done < <(grep -o 'VMTEST-END .*' "$logf")
  if [ "$n_begin" != "$n_end" ]; then
    name=$(grep -o 'VMTEST-BEGIN .*' "$logf" | tail -n 1 | sed 's/.*name=//')
    printf '   %-40s %-8s\n' "$name" unfinished
    reasons+=("$name started but never ended")
    bins=$((bins + 1)) crashed=$((crashed + 1))
  fi
  local notests=0
  if grep -q 'VMTEST-NOTESTS' "$logf"; then
    notests=1
    echo "   no vm_ test binaries: only the topology self-check ran"
    [ "$VM_REQUIRE_TESTS" = 1 ] && reasons+=("no vm_ test binaries (--require-tests)")
  elif [ "$n_begin" = 0 ]; then
    reasons+=("no test binary started")
  elif [ $((passed + failed)) = 0 ] && [ "$crashed" = 0 ]; then
    reasons+=("no test ran${VM_FILTER:+ (filter '$VM_FILTER' matched nothing?)}")
  fi
  grep -q 'VMTEST-DMESG' "$logf" && echo "   warning: the kernel logged $(sed -n 's/.*VMTEST-DMESG warnings=\([0-9]*\).*/\1/p' "$logf") warning/BUG lines (see $logf)"

  local status=PASS
  if [ ${#reasons[@]} -gt 0 ]; then
    status=FAIL
    printf '   FAIL: %s\n' "${reasons[@]}"
  else
    if [ $notests = 1 ]; then echo "   PASS: self-check only"; else echo "   PASS: $passed passed in $bins binaries"; fi
  fi
  VM_PASSED=$(( ${VM_PASSED:-0} + ${passed:-0} )); VM_FAILED=$(( ${VM_FAILED:-0} + ${failed:-0} + ${crashed:-0} ))
  VM_RESULTS+=("VMTEST-RESULT kernel=$series release=${release:-unknown} status=$status binaries=$bins passed=$passed failed=$failed crashed=$crashed boot_s=$boot_s total_s=$total_s")
  [ $status = PASS ]
}
