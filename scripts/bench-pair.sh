#!/usr/bin/env bash
# Time two numalab builds against each other, both at once (one per host core), several times.
# On a shared VM the host's speed drifts by 10-30 % within an hour, which hides a change of a
# few percent between runs taken one after the other; two runs taken at the same time see the
# same drift, so their ratio is steadier (docs/PERFORMANCE.md, eighth round). Both compete for
# the host's L3 and memory, so absolute times are a little slower than a lone run: compare the
# two columns, not these times with a lone run's.
#
#   scripts/bench-pair.sh OLD_NUMALAB NEW_NUMALAB [PAIRS] [-- NUMALAB_ARGS...]
#
# NUMALAB_ARGS default to `bench sim --workload npb-cg:class=B,niter=1,scale=0.3`. Every
# other pair starts NEW first, so that neither build always gets the head start. Prints the
# user CPU seconds of each pair, then the means and how many pairs NEW won.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 OLD_NUMALAB NEW_NUMALAB [PAIRS] [-- NUMALAB_ARGS...]" >&2
    exit 2
fi
old=$1 new=$2
shift 2
pairs=5
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    pairs=$1
    shift
fi
case $pairs in
    '' | *[!0-9]* | 0) echo "$0: PAIRS must be a positive whole number, not '$pairs'" >&2; exit 2 ;;
esac
[ $# -gt 0 ] && [ "$1" = -- ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(bench sim --workload npb-cg:class=B,niter=1,scale=0.3)
for b in "$old" "$new"; do
    [ -x "$b" ] || { echo "$0: $b is not an executable numalab build" >&2; exit 2; }
done
if [ "$(nproc)" -lt 2 ]; then
    echo "$0: needs two host cores (this machine has $(nproc)); the runs would share one" >&2
    exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# user CPU seconds of one run, into file $2 (bash's own `time`: no GNU time needed)
timed() {
    local out=$1
    shift
    { TIMEFORMAT=%U; time "$@" >/dev/null 2>"$out.err"; } 2>"$out"
}

sum_old=0 sum_new=0 wins=0
for i in $(seq "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then
        timed "$tmp/old" "$old" "${args[@]}" & p1=$!
        timed "$tmp/new" "$new" "${args[@]}" & p2=$!
    else
        timed "$tmp/new" "$new" "${args[@]}" & p1=$!
        timed "$tmp/old" "$old" "${args[@]}" & p2=$!
    fi
    status=0
    wait $p1 || status=1
    wait $p2 || status=1
    if [ $status -ne 0 ]; then
        echo "$0: a run failed:" >&2
        cat "$tmp/old.err" "$tmp/new.err" >&2
        exit 1
    fi
    t_old=$(tail -1 "$tmp/old") t_new=$(tail -1 "$tmp/new")
    awk -v i="$i" -v o="$t_old" -v n="$t_new" \
        'BEGIN { printf "pair %2d  old %7.2f s  new %7.2f s  new/old %.3f\n", i, o, n, n / o }'
    sum_old=$(awk -v s="$sum_old" -v t="$t_old" 'BEGIN { print s + t }')
    sum_new=$(awk -v s="$sum_new" -v t="$t_new" 'BEGIN { print s + t }')
    wins=$(awk -v w="$wins" -v o="$t_old" -v n="$t_new" 'BEGIN { print w + (n < o) }')
done
awk -v o="$sum_old" -v n="$sum_new" -v w="$wins" -v p="$pairs" 'BEGIN {
    printf "mean     old %7.2f s  new %7.2f s  new/old %.3f  (new faster in %d of %d pairs)\n",
        o / p, n / p, n / o, w, p }'
