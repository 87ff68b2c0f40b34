# What a probe on uprobe:work_unit costs a process (docs/user-guide.md#several-processes):
# the forker fixture's parent calls work_unit CALLS times, timed from SIGUSR1 to "done",
# with no probetop (none), probetop on it (self), on it with -F (self-set), -F on
# another process of the same program (other-set: hits ignored by the set filter), and
# plain --pid on another (other-pidfilter: the kernel's pid filter). Conditions are
# interleaved, ROUNDS rounds; medians. Run as root from a built worktree:
#   python3 docs/scripts/set-filter-cost.py [CALLS] [ROUNDS]
# EXTRA="--mode kernel" adds probetop options; PROBETOP_ATTACH_PATH picks the path.
import subprocess, time, statistics, sys, os, signal
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F = os.path.join(ROOT, "fixtures/build/c/forker"); P = os.path.join(ROOT, "target/release/probetop")
CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 500000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
def start(calls, hold=True):
    args = [F, "--early", "0", "--late", "0", "--grand", "0", "--calls", str(calls)] + (["--hold"] if hold else [])
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline(); assert line.startswith("ready"), line
    return p
def run(cond):
    x = start(CALLS)
    y = start(0)  # an unrelated process of the same program
    pt = None
    if cond != "none":
        pid = {"self": x.pid, "self-set": x.pid, "other-pidfilter": y.pid, "other-set": y.pid}[cond]
        args = [P, "--pid", str(pid), "--no-tui", "-e", "uprobe:work_unit"] + os.environ.get("EXTRA", "").split() + (["-F"] if cond in ("other-set", "self-set") else [])
        pt = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        for line in pt.stderr:
            if "probetop: attached" in line: break
    t0 = time.perf_counter(); x.send_signal(signal.SIGUSR1)
    assert x.stdout.readline().startswith("done")
    t = time.perf_counter() - t0
    if pt: pt.send_signal(signal.SIGINT); pt.wait()
    for p in (x, y): p.terminate(); p.wait()
    return t
conds = ["none", "self", "self-set", "other-set", "other-pidfilter"]
res = {c: [] for c in conds}
for r in range(ROUNDS):
    for c in conds: res[c].append(run(c))
base = statistics.median(res["none"])
for c in conds:
    v = res[c]; m = statistics.median(v)
    print(f"{c:16} median {m:.3f}s  min {min(v):.3f} max {max(v):.3f}  per call beyond none: {(m-base)/CALLS*1e9:.0f} ns")
