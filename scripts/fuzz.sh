#!/usr/bin/env bash
# Fuzz numalab's parsers of outside input with cargo-fuzz (libFuzzer, AddressSanitizer).
#
#   scripts/fuzz.sh --smoke [SECONDS]    every target for SECONDS each (default 30): CI's run
#   scripts/fuzz.sh --runs N [TARGET..]  the named targets (default all) for N executions each
#   scripts/fuzz.sh --list               the targets
#   --timeout SECONDS                    an input slower than this is a hang (default 10); raise
#                                        it for long runs on a busy machine, as libFuzzer's
#                                        clock is wall-clock time
#   --jobs N                             targets fuzzed at once (default: the host's cores; each
#                                        libFuzzer run uses one core, so a smoke run of 16
#                                        targets takes 16 × SECONDS / N)
#   --sanitizer none                     build without AddressSanitizer (cargo fuzz -s none):
#                                        for targets whose code path is safe Rust only, where
#                                        ASan has nothing to check and makes each input some
#                                        15 times slower; panics, overflows (debug assertions
#                                        stay on), stack overflows and hangs are still caught
#
# Targets: fuzz/ (hwloc XML, machine TOML, perf.data, Arrow samples, workload and policy specs,
# node and CPU specs) and crates/linux/fuzz (/proc and /sys readers). Each run starts from the
# target's seed corpus (fuzz/corpus/TARGET, committed), copied into target/fuzz-corpus/TARGET
# so that what libFuzzer adds stays out of the repo. A crash leaves its input in the fuzz
# crate's artifacts/TARGET/ and fails the script. The summary gives executions and seconds per
# target (docs/testing.md records the long runs).
#
# Needs a nightly toolchain and cargo-fuzz (sanitizer flags are nightly-only): with --install,
# missing ones are installed (`rustup toolchain install nightly`, `cargo install cargo-fuzz`),
# and where that is impossible the run is skipped with a SKIPPED line (exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

mode="" secs=30 runs=0 install=0 timeout=10 sanitizer=address jobs="" targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) mode=smoke; if [[ "${2:-}" =~ ^[0-9]+$ ]]; then secs=$2; shift; fi ;;
    --runs) mode=runs; runs=${2:?--runs needs a number}; shift ;;
    --install) install=1 ;;
    --timeout) timeout=${2:?--timeout needs a number of seconds}; shift
      [[ "$timeout" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --timeout takes whole seconds above 0, not '$timeout'" >&2; exit 2; } ;;
    --sanitizer) sanitizer=${2:?--sanitizer needs address or none}; shift
      [[ "$sanitizer" =~ ^(address|none)$ ]] || { echo "fuzz.sh: --sanitizer takes address or none, not '$sanitizer'" >&2; exit 2; } ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift
      [[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs takes a whole number above 0, not '$jobs'" >&2; exit 2; } ;;
    --list) mode=list ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
[ -n "$mode" ] || { echo "fuzz.sh: say --smoke [SECONDS], --runs N or --list (see --help)" >&2; exit 2; }

# crate directory of each target
declare -A crate
for f in fuzz/fuzz_targets/*.rs; do crate[$(basename "$f" .rs)]=fuzz; done
for f in crates/linux/fuzz/fuzz_targets/*.rs; do crate[$(basename "$f" .rs)]=crates/linux/fuzz; done
all=$(printf '%s\n' "${!crate[@]}" | sort)
if [ "$mode" = list ]; then echo "$all"; exit 0; fi
[ ${#targets[@]} -gt 0 ] || mapfile -t targets <<<"$all"
for t in "${targets[@]}"; do
  [ -n "${crate[$t]:-}" ] || { echo "fuzz.sh: no target '$t'; targets: $(echo $all)" >&2; exit 2; }
done

# With --install, a toolchain or tool that cannot be had (no network to rustup's server) skips
# the run, saying so, rather than failing the test command on the machine's account.
skip() {
  echo "fuzz.sh: SKIPPED, $1" >&2
  exit 0
}
if ! cargo +nightly --version >/dev/null 2>&1; then
  if [ $install = 1 ]; then
    command -v rustup >/dev/null && rustup toolchain install nightly --profile minimal ||
      skip "no nightly toolchain and rustup could not install one (cargo-fuzz needs nightly)"
  else
    echo "fuzz.sh: no nightly toolchain (cargo-fuzz needs one): rustup toolchain install nightly, or pass --install" >&2
    exit 3
  fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  if [ $install = 1 ]; then
    cargo install cargo-fuzz --locked || skip "cargo-fuzz could not be installed from crates.io"
  else
    echo "fuzz.sh: cargo-fuzz not installed: cargo install cargo-fuzz, or pass --install" >&2
    exit 3
  fi
fi

[ -n "$jobs" ] || jobs=$(nproc 2>/dev/null || echo 1)

# Build every target first, a crate at a time (cargo builds its binaries in parallel), so that
# the runs below start from an up-to-date build instead of queueing on cargo's lock.
for dir in $(printf '%s\n' "${targets[@]}" | while read -r t; do echo "${crate[$t]}"; done | sort -u); do
  echo "== building the targets of $dir (sanitizer $sanitizer)"
  (cd "$dir" && cargo +nightly fuzz build -s "$sanitizer") || { echo "fuzz.sh: building $dir's fuzz targets failed" >&2; exit 1; }
done

# One target: fuzz it, then write its summary line to target/fuzz-corpus/TARGET.summary and its
# status (0 ok, 1 failed) to TARGET.status.
fuzz_one() {
  local t=$1 dir work log limit status execs took
  dir=${crate[$t]}
  work="$root/target/fuzz-corpus/$t"
  mkdir -p "$work"
  if [ -d "fuzz/corpus/$t" ]; then cp -n fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true; fi
  # the smoke run's seed is fixed, so that CI explores the same inputs every time (a slower
  # machine only stops earlier along the same sequence); long runs draw theirs
  if [ "$mode" = smoke ]; then limit="-max_total_time=$secs -seed=1"; else limit="-runs=$runs"; fi
  log="$root/target/fuzz-corpus/$t.log"
  echo "== $t ($dir, $limit, sanitizer $sanitizer)"
  # -timeout: an input slower than $timeout s (default 10) is a hang, reported like a crash;
  # -rss_limit_mb: a parser that allocates gigabytes for a few bytes of input is a bug too
  # shellcheck disable=SC2086 # $limit is one or two options
  if (cd "$dir" && cargo +nightly fuzz run -s "$sanitizer" "$t" "$work" -- $limit -timeout="$timeout" \
        -rss_limit_mb=2048 -print_final_stats=1) >"$log" 2>&1; then
    status=ok
    echo 0 >"$root/target/fuzz-corpus/$t.status"
  else
    status="FAILED (see $log and $dir/artifacts/$t/)"
    echo 1 >"$root/target/fuzz-corpus/$t.status"
    echo "== $t FAILED; the end of its log:" >&2
    tail -30 "$log" >&2
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo "?")
  printf '%-16s %12s executions %6s s  %s\n' "$t" "$execs" "$took" "$status" >"$root/target/fuzz-corpus/$t.summary"
}

# Up to $jobs targets at once: each libFuzzer process uses one core.
mkdir -p "$root/target/fuzz-corpus"
running=0
for t in "${targets[@]}"; do
  rm -f "$root/target/fuzz-corpus/$t.status" "$root/target/fuzz-corpus/$t.summary"
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true

failed=0
echo
echo "fuzz summary ($(date -u +%F), $(nproc) cores, $jobs at a time):"
for t in "${targets[@]}"; do
  if [ -s "$root/target/fuzz-corpus/$t.summary" ]; then
    printf '  %s' "$(cat "$root/target/fuzz-corpus/$t.summary")"; echo
  else
    printf '  %-16s did not finish\n' "$t"
  fi
  [ "$(cat "$root/target/fuzz-corpus/$t.status" 2>/dev/null)" = 0 ] || failed=1
done
exit $failed
