#!/usr/bin/env python3
"""Another tool's probe on the fixture: what it costs the target, measured from outside,
against what probetop reports for it; and what probetop's counting probe adds per hit.

Usage (root, from the repository, after `cargo build --release` and the fixtures):
    python3 docs/scripts/others-truth.py [--rounds 5] [--seconds 3]

The target is a private copy of fixtures/build/c/workload (uprobes are per inode, and
bpftrace 0.17 does not scope uprobes to -p), run with --forever: each batch prints the
thread CPU time per call (CLOCK_THREAD_CPUTIME_ID, which includes the kernel's uprobe
handling). Three measurements, each alternating within one run (this VM's speed drifts):

1. truth: bpftrace `uprobe:COPY:work_unit { @ = count(); }` attached vs detached;
   the difference of the medians of the batches is its whole cost per hit;
2. probetop's number: `probetop --pid P --no-tui --export J` (no spec) while bpftrace is
   attached, with and without --bpf-stats: the row's whole_cost_ns;
3. counting: with bpftrace attached, probetop (no spec, counting bpftrace's probe)
   running vs not; the difference is what probetop's counting probe adds per hit.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBETOP = os.path.join(ROOT, "target/release/probetop")


class Target:
    """The private workload copy, its batches read on a thread."""

    def __init__(self, path):
        self.proc = subprocess.Popen(
            [path, "--forever", "--batch", "100000"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.batches = []  # (time, ns_per_call)
        first = self.proc.stdout.readline()
        assert first.startswith("ready pid="), first
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("batch "):
                fields = dict(w.split("=") for w in line.split()[1:])
                self.batches.append((time.monotonic(), float(fields["ns_per_call"])))

    def window(self, seconds):
        """The median ns per call over the batches ending in the next `seconds`."""
        start = time.monotonic() + 0.3  # the first batch may straddle the change
        time.sleep(seconds)
        end = time.monotonic()
        values = [v for t, v in self.batches if start <= t <= end]
        return statistics.median(values) if values else float("nan")


def bpftrace(path, pid):
    proc = subprocess.Popen(
        ["bpftrace", "-p", str(pid), "-e", f"uprobe:{path}:work_unit {{ @ = count(); }}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("Attaching"):
            break
    time.sleep(0.5)  # attached once it said so and the first batch went by
    return proc


def stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def probetop_row(pid, seconds, extra):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run(
            [PROBETOP, "--pid", str(pid), "--no-tui", "--duration", str(seconds), "--export", out]
            + extra,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with open(out) as f:
            report = json.load(f)
    rows = [p for p in report["probes"] if not p["own"]]
    assert len(rows) == 1, rows
    return rows[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="probetop-others-")
    copy = os.path.join(tmp, "workload")
    shutil.copy(os.path.join(ROOT, "fixtures/build/c/workload"), copy)
    target = Target(copy)
    pid = target.proc.pid
    truth, counting, estimates, stats = [], [], [], []
    try:
        for _ in range(args.rounds):
            off = target.window(args.seconds)
            tool = bpftrace(copy, pid)
            on = target.window(args.seconds)
            truth.append(on - off)
            # probetop counting bpftrace's probe, against bpftrace alone.
            counter = subprocess.Popen(
                [PROBETOP, "--pid", str(pid), "--no-tui"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(2.0)  # loaded and attached
            with_counter = target.window(args.seconds)
            counter.send_signal(signal.SIGINT)
            counter.wait(timeout=60)
            alone = target.window(args.seconds)
            counting.append(with_counter - alone)
            estimates.append(probetop_row(pid, args.seconds, [])["whole_cost_ns"])
            stats.append(probetop_row(pid, args.seconds, ["--bpf-stats"])["whole_cost_ns"])
            stop(tool)
    finally:
        target.proc.kill()
        target.proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    def show(name, values):
        values = [v for v in values if v is not None]
        if not values:
            print(f"| {name} | - | - |")
            return None
        median = statistics.median(values)
        print(f"| {name} | {median:.0f} | {', '.join(f'{v:.0f}' for v in values)} |")
        return median

    print(f"| ns per hit of bpftrace count() on work_unit | median | rounds |")
    print("|---|---|---|")
    t = show("truth: target CPU per call, bpftrace attached minus detached", truth)
    e = show("probetop whole_cost_ns (program assumed)", estimates)
    s = show("probetop whole_cost_ns (--bpf-stats)", stats)
    show("probetop's counting probe adds (with minus without, bpftrace attached)", counting)
    for name, value in (("assumed", e), ("--bpf-stats", s)):
        if t and value:
            print(f"probetop ({name}) / truth = {value / t:.2f}")


if __name__ == "__main__":
    sys.exit(main())
