# Which work meter an in-situ run on mariadbd can trust (docs/cost.md, "In situ: the work
# meter"): a private mariadbd under sysbench's open-loop oltp_point_select at RATE
# statements/s, BLOCK-second blocks with probetop attached (MODE, the four probes of
# `cargo xtask insitu-check`) and detached, each attached block between two detached
# ones. Per block: mariadbd's CPU share (its process CPU clock) and, summed over its
# threads as increments, the scheduler's timeslices (schedstat's third field: what
# `--work wakeups` counts), voluntary and involuntary context switches (status). Under an
# open-loop load the work does not change with the probes, so a meter fit to divide by
# moves by nothing between attached and detached blocks; what it moves by, times the
# base CPU, is what it wrongly takes off the probes' cost. Prints, per meter, the median
# change of its rate in attached blocks against their neighbours, and the per-hit cost
# in-situ's arithmetic gives with it (CPU per unit of work, scaled to the attached
# block's work) against the raw CPU difference (`--work none`). Run as root from a built
# worktree, on an idle machine:
#   python3 docs/scripts/work-meters-on-mariadbd.py [RATE] [PAIRS] [BLOCK] [MODE]
import json, os, statistics, subprocess, sys, time

from private_mariadbd import PROBETOP, cpu_s, iqr, open_loop, start_server

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
PAIRS = int(sys.argv[2]) if len(sys.argv) > 2 else 16
BLOCK = float(sys.argv[3]) if len(sys.argv) > 3 else 4.0
MODE = sys.argv[4] if len(sys.argv) > 4 else "kernel"
PROBES = ["uprobe:do_command", "uprobe:dispatch_command", "uretprobe:dispatch_command",
          "uprobe:mysql_execute_command"]
METERS = ["timeslices", "voluntary", "involuntary"]


class Counts:
    """Per-thread counters, summed as increments so a thread that exits keeps its count."""

    def __init__(self, pid):
        self.pid, self.last, self.total = pid, {}, {m: 0 for m in METERS}

    def read(self):
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                    slices = int(f.read().split()[2])
                with open(f"/proc/{self.pid}/task/{tid}/status") as f:
                    fields = dict(l.split(":", 1) for l in f if ":" in l)
            except (FileNotFoundError, ProcessLookupError):
                continue
            now = {"timeslices": slices,
                   "voluntary": int(fields["voluntary_ctxt_switches"]),
                   "involuntary": int(fields["nonvoluntary_ctxt_switches"])}
            before = self.last.get(tid, now)
            for m in METERS:
                self.total[m] += now[m] - before[m]
            self.last[tid] = now
        return dict(self.total)


def block(pid, counts, seconds):
    w0, c0, t0 = counts.read(), cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    w1, c1, t1 = counts.read(), cpu_s(pid), time.monotonic()
    dt = t1 - t0
    return {"cpu": (c1 - c0) / dt, **{m: (w1[m] - w0[m]) / dt for m in METERS}}


def main():
    server, common = start_server("meters-")
    load = open_loop(common, RATE, int(PAIRS * 2 * (BLOCK + 2.5) + 60))
    pid = server.pid
    counts = Counts(pid)
    time.sleep(10)  # the load settles
    blocks = []
    try:
        for i in range(2 * PAIRS + 1):
            attached = i % 2 == 1
            if not attached:
                time.sleep(1)
                blocks.append({"on": False, "hits": 0.0, **block(pid, counts, BLOCK)})
                continue
            out = f"/tmp/work-meters-block-{os.getpid()}-{i}.json"
            cmd = [PROBETOP, "--pid", str(pid), "--no-tui", "--mode", MODE,
                   "--clock-seconds", "0", "-o", out]
            for spec in PROBES:
                cmd += ["-e", spec]
            tool = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            while "attached" not in tool.stderr.readline():
                pass
            b = block(pid, counts, BLOCK)
            tool.send_signal(2)
            tool.communicate()
            with open(out) as f:
                report = json.load(f)
            os.remove(out)
            hits = sum(p["hits"] for p in report["probes"]) / report["duration_s"]
            blocks.append({"on": True, "hits": hits, **b})
    finally:
        load.kill()
        server.terminate()
        server.wait()
    rows = {m: [] for m in METERS}
    none = []
    for i in range(1, len(blocks) - 1, 2):
        on, off = blocks[i], [blocks[i - 1], blocks[i + 1]]
        base = {k: statistics.mean(b[k] for b in off) for k in ["cpu", *METERS]}
        none.append((on["cpu"] - base["cpu"]) / on["hits"] * 1e9)
        for m in METERS:
            moved = on[m] / base[m] - 1 if base[m] else float("nan")
            # In situ's arithmetic: the detached CPU per unit of work at the attached
            # block's work rate.
            added = on["cpu"] - base["cpu"] / base[m] * on[m] if base[m] else float("nan")
            rows[m].append((moved, added / on["hits"] * 1e9))
    base_cpu = statistics.median(b["cpu"] for b in blocks if not b["on"])
    print(f"mariadbd at {RATE} statements/s, --mode {MODE}, {PAIRS} attached blocks of "
          f"{BLOCK:.0f} s: base CPU {base_cpu * 100:.1f}% of a CPU, "
          f"{statistics.median(b['hits'] for b in blocks if b['on']):.0f} hits/s")
    print(f"  none: per hit {statistics.median(none):.0f} ns (IQR {iqr(none)[0]:.0f}..{iqr(none)[1]:.0f})")
    for m in METERS:
        moved = [r[0] * 100 for r in rows[m]]
        per_hit = [r[1] for r in rows[m]]
        rate = statistics.median(b[m] for b in blocks if not b["on"])
        print(f"  {m}: {rate:.0f}/s detached, moved {statistics.median(moved):+.2f}% "
              f"(IQR {iqr(moved)[0]:+.2f}..{iqr(moved)[1]:+.2f}) attached; per hit "
              f"{statistics.median(per_hit):.0f} ns (IQR {iqr(per_hit)[0]:.0f}..{iqr(per_hit)[1]:.0f})")


if __name__ == "__main__":
    main()
