#!/usr/bin/env bash
# Compare the simulated results of two numalab builds, field by field (host time excepted),
# on configurations that cover the simulator's hot paths: a speed change must leave every one
# of them bit-identical (docs/PERFORMANCE.md).
#
#   scripts/sim-equivalence.sh OLD_NUMALAB NEW_NUMALAB [OUT_DIR]
#
# Exit status 0 when all results are equal, 1 when one differs or a run fails.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 OLD_NUMALAB NEW_NUMALAB [OUT_DIR]" >&2
    exit 2
fi
old=$1 new=$2 out=${3:-$(mktemp -d)}
mkdir -p "$out/old" "$out/new"

configs=(
    "cgA|--machine opteron6272-8n --workload npb-cg:class=A,niter=1 --threads 16 --pin sockorder --thp never"
    "cgB03|--machine opteron6272-8n --workload npb-cg:class=B,niter=1,scale=0.3 --threads 16 --pin sockorder --thp never"
    "gups|--machine xeon-e5-2699v4-2n --workload gups:log2_words=23 --thp always"
    "stream|--machine xeon-gold6130-2n --workload stream:n=2000000,ntimes=2 --mempolicy interleave"
    "mlc|--machine opteron6164he-4n --workload mlc-loaded:bytes=64M,steps=200000,inject_bytes=32M"
    "cgW|--machine xeon-platinum8180-2n --workload npb-cg:class=W"
    "autonuma|--machine xeon-gold6130-4n --workload stream:n=1000000,ntimes=3 --policy autonuma:time_scale=0.01"
    "nexttouch|--machine opteron8347he-4n --workload lu-blocked:n=1024,b=128 --threads 16 --policy next-touch"
    "snoop|--machine xeon-x5650-2n --workload stream:n=1000000,ntimes=2 --mempolicy interleave"
)

# drop every field whose name mentions the host (host_seconds): the only one that may differ
strip() {
    python3 -c '
import json, sys
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if "host" not in k}
    if isinstance(o, list):
        return [strip(x) for x in o]
    return o
d = json.load(open(sys.argv[1]))
json.dump(strip(d), open(sys.argv[1], "w"), sort_keys=True, indent=0)
' "$1"
}

status=0
for c in "${configs[@]}"; do
    name=${c%%|*} args=${c#*|}
    for side in old new; do
        bin=$old
        [ "$side" = new ] && bin=$new
        # shellcheck disable=SC2086 # args is a list of options
        if ! "$bin" sim $args --json "$out/$side/$name.json" >/dev/null 2>"$out/$side/$name.err"; then
            echo "FAIL  $name ($side build): $(tail -1 "$out/$side/$name.err")"
            status=1
            continue 2
        fi
        strip "$out/$side/$name.json"
    done
    if cmp -s "$out/old/$name.json" "$out/new/$name.json"; then
        echo "same  $name"
    else
        echo "DIFF  $name (compare $out/old/$name.json and $out/new/$name.json)"
        status=1
    fi
done
exit $status
