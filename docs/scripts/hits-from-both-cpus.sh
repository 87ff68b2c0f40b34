#!/bin/bash
# Whether a uprobe hit costs more when the same probe is also hit on the other CPU
# (docs/cost.md, "Why a server pays more per hit than a tight loop"): a server's threads
# hit its probes on both vCPUs, so the uprobe, the BPF program and its maps are shared
# between them, where the calibration's loop hits from one thread on one CPU.
#
# A: the workload fixture pinned to CPU 0; its median ns per call (thread CPU time) over
# ~5 s of batches. B, on CPU 1, is nothing, a copy of the fixture at another path (it
# runs the same loop, unprobed: a separate file) or the fixture itself (it hits the same
# probe). The probe is bpftrace's `uprobe:FIXTURE:work_unit { @c = count(); }`, or none.
# Rounds interleave the five cases. Run as root from a worktree with the fixtures built
# (`cargo xtask fixtures`), on an idle machine:
#   bash docs/scripts/hits-from-both-cpus.sh [ROUNDS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIXTURE=$ROOT/fixtures/build/c/workload
ROUNDS=${1:-3}
COPY=$(mktemp /tmp/workload-copy.XXXXXX)
OUT=$(mktemp)
trap 'rm -f "$COPY" "$OUT"' EXIT
cp "$FIXTURE" "$COPY"
chmod +x "$COPY"

median_ns_per_call() {
    # The first two batches may straddle the probe's attach: left out.
    tail -n +3 "$OUT" | grep -o 'ns_per_call=[0-9.]*' | cut -d= -f2 | sort -n |
        awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# $1: B's binary, or none; $2: 1 to attach the probe.
one_case() {
    local b_pid="" probe_pid=""
    if [ "$1" != none ]; then
        taskset -c 1 "$1" --forever --batch 200000 >/dev/null &
        b_pid=$!
    fi
    if [ "$2" = 1 ]; then
        bpftrace -e "uprobe:$FIXTURE:work_unit { @c = count(); }" >/dev/null 2>&1 &
        probe_pid=$!
        sleep 3
    fi
    timeout 5 taskset -c 0 "$FIXTURE" --forever --batch 20000 >"$OUT" || true
    [ -n "$probe_pid" ] && { kill -INT "$probe_pid"; wait "$probe_pid" 2>/dev/null || true; }
    [ -n "$b_pid" ] && { kill "$b_pid"; wait "$b_pid" 2>/dev/null || true; }
    median_ns_per_call
}

for round in $(seq "$ROUNDS"); do
    echo "round $round: A alone, unprobed: $(one_case none 0) ns/call"
    echo "round $round: A alone, probed: $(one_case none 1)"
    echo "round $round: B unprobed copy, A unprobed: $(one_case "$COPY" 0)"
    echo "round $round: B unprobed copy, A probed: $(one_case "$COPY" 1)"
    echo "round $round: B hitting the same probe, A probed: $(one_case "$FIXTURE" 1)"
done
