# Whether `--budget` holds on mariadbd (docs/mysqld.md, "--budget 1% on mariadbd"), measured
# from outside against a twin.
#
# Two private mariadbd servers run at once, each from its own copy of /usr/sbin/mariadbd
# (a uprobe is armed in every process that maps the probed file: the copies keep the
# probes on one server out of the other, and other tools' probes on /usr/sbin/mariadbd
# out of both), each under its own sysbench `oltp_point_select` at RATE statements/s
# (open loop: `--rate`, 4 client threads, the same tables and seed, so the same
# statements at the same times). One is probed, the other is the control. Both servers
# and both sysbench runs are pinned to the same CPU (CPUS): whatever the host does to
# that CPU (other load, its frequency, cache pressure, the hypervisor) then moves both
# servers' CPU together, and the probed server's CPU over the control's, window by
# window, is steadier than either alone.
#
# The run: UNPROBED windows of WINDOW s with neither probed, then one probetop on the
# probed server, `--preset mysql --budget BUDGET --budget-window WINDOW` with GLOBS (about
# a thousand probes), for ROUNDS consecutive windows of WINDOW s counted from its
# `attached` line (its launch up to that line, the attach, is measured and shown apart),
# then UNPROBED windows again. A probed window's cost is its ratio over the unprobed
# ratios' mean, less 1, as a share of mariadbd's CPU; the method's resolution is the
# largest distance of an unprobed window's ratio from that mean.
#
# Three measures of each window, each as the probed server's over the control's:
# - process (the verdict's): the servers' process CPU clocks, every thread;
# - per statement: the same over each server's statements in the window (`Questions`);
#   a window whose statement counts differ by over 1% had a load fall behind (the open
#   loop did not hold), and is not judged;
# - connections: the CPU (schedstat) of the 4 threads of each server that ran the most in
#   the first window (the connection threads, where the statements and probes run).
# Per probed window: `held` when the cost plus the resolution is within BUDGET, `NOT HELD`
# when the cost less the resolution is over it, else `not resolvable`.
#
# Run as root from a built worktree (about 10 min with the defaults):
#   python3 docs/scripts/budget-on-mariadbd.py [RATE] [WINDOW] [ROUNDS] [BUDGET]
# Defaults: 2000 60 3 1%. Environment: UNPROBED (unprobed windows before and after the
# probed ones, 3), GLOBS (space-separated specs; /usr/sbin/mariadbd in them is replaced
# by the probed server's copy), CPUS (the taskset CPU list; the last CPU by default,
# `all` for no pinning). ROUNDS 0 measures unprobed windows only (2 x UNPROBED of them).
import json, os, shutil, statistics, subprocess, sys, tempfile, threading, time

from private_mariadbd import PROBETOP, cpu_s, start_server

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
WINDOW = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
BUDGET = sys.argv[4] if len(sys.argv) > 4 else "1%"
UNPROBED = int(os.environ.get("UNPROBED", "3"))
CPUS = os.environ.get("CPUS", str(os.cpu_count() - 1))
CPUS = None if CPUS == "all" else CPUS
CLIENTS = 4
SEED = 1
HEAD = 5  # seconds of a probed window shown apart (the survey's and shedding's)
LAG = 0.01  # statements probed/control beyond which a window's load was not open
GLOBS = os.environ.get("GLOBS", "uprobe:/usr/sbin/mariadbd:THD::* "
                       "uprobe:/usr/sbin/mariadbd:handler::* "
                       "uprobe:/usr/sbin/mariadbd:my_* "
                       "uprobe:/usr/sbin/mariadbd:JOIN::*").split()


def budget_share():
    if not BUDGET.endswith("%"):
        sys.exit("budget-on-mariadbd.py: give the budget as a share, e.g. 1%")
    return float(BUDGET[:-1]) / 100


def threads_ns(pid):
    """Each thread's CPU so far, ns (schedstat's first field)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def load_avg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def steal_s():
    """The host's stolen time so far, s (/proc/stat's eighth field, in USER_HZ)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


class Server:
    """One private mariadbd from its own copy of the binary, and its open-loop load."""

    def __init__(self, name, tmp):
        self.binary = os.path.join(tmp, f"mariadbd-{name}")
        shutil.copy2("/usr/sbin/mariadbd", self.binary)
        self.process, self.common = start_server(f"budget-{name}-", self.binary, SEED)
        self.pid = self.process.pid
        self.socket = next(a.split("=", 1)[1] for a in self.common if "socket" in a)
        self.connections = None
        self.load = None

    def start_load(self, seconds):
        cmd = ["sysbench", "oltp_point_select", *self.common, f"--threads={CLIENTS}",
               f"--rate={RATE}", f"--time={int(seconds)}", f"--rand-seed={SEED}", "run"]
        if CPUS:
            cmd = ["taskset", "-c", CPUS, *cmd]
        self.load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)

    def statements(self):
        out = subprocess.run(["mariadb", f"--socket={self.socket}", "-uroot", "-N", "-B", "-e",
                              "SHOW GLOBAL STATUS LIKE 'Questions'"],
                             check=True, capture_output=True, text=True).stdout
        return int(out.split()[1])

    def window(self, start, end):
        """CPU s, connection threads' CPU s, statements between two readings."""
        (c0, th0, q0), (c1, th1, q1) = start, end
        if self.connections is None:
            ran = {tid: th1[tid] - th0[tid] for tid in th1 if tid in th0}
            self.connections = sorted(ran, key=ran.get, reverse=True)[:CLIENTS]
        missing = [t for t in self.connections if t not in th0 or t not in th1]
        if missing:
            raise RuntimeError(f"connection threads {missing} ended: the measure is lost")
        conn = sum(th1[t] - th0[t] for t in self.connections) / 1e9
        return c1 - c0, conn, q1 - q0

    def stop(self):
        if self.load:
            self.load.kill()
            self.load.wait()
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(os.path.dirname(self.socket), ignore_errors=True)  # its datadir


class Twin:
    def __init__(self, probed, control):
        self.probed, self.control = probed, control

    def read(self):
        # Both CPU clocks first, back to back: the statement counts take a client
        # connection each (tens of ms), and a burst of the probed server's (the attach)
        # must fall on the same side of a window's edge for both.
        a, b = self.clocks()
        t, steal = time.monotonic(), steal_s()
        ta, tb = threads_ns(self.probed.pid), threads_ns(self.control.pid)
        return t, steal, (a, ta, self.probed.statements()), (b, tb, self.control.statements())

    def clocks(self):
        return cpu_s(self.probed.pid), cpu_s(self.control.pid)

    def window(self, kind, start, end):
        (t0, s0, p0, c0), (t1, s1, p1, c1) = start, end
        p, c = self.probed.window(p0, p1), self.control.window(c0, c1)
        w = {"kind": kind, "seconds": t1 - t0, "steal": (s1 - s0) / (t1 - t0),
             "load": load_avg(), "probed": p, "control": c,
             "process": p[0] / c[0], "per_statement": (p[0] / p[2]) / (c[0] / c[2]),
             "connections": p[1] / c[1]}
        print(f"{kind:6} {w['seconds']:5.1f} s  probed {p[0] / w['seconds'] * 100:6.3f}% "
              f"control {c[0] / w['seconds'] * 100:6.3f}% of a CPU  statements "
              f"{p[2]} / {c[2]}  ratio: process {w['process']:.4f} per statement "
              f"{w['per_statement']:.4f} connections {w['connections']:.4f}  "
              f"(load {w['load']:.1f}, steal {w['steal'] * 100:.2f}%)", flush=True)
        return w


def seconds(twin, start):
    """Wait out a window from the reading `start`, reading both servers' CPU each second
    (where in the window a cost lies); the seconds add up to the window."""
    trace, t0 = [], start[0]
    last = (start[2][0], start[3][0])
    for k in range(1, int(WINDOW)):
        time.sleep(max(0.0, t0 + k - time.monotonic()))
        now = twin.clocks()
        trace.append((now[0] - last[0], now[1] - last[1]))
        last = now
    time.sleep(max(0.0, t0 + WINDOW - time.monotonic()))
    end = twin.read()
    trace.append((end[2][0] - last[0], end[3][0] - last[1]))
    return trace, end


def unprobed(twin, n, windows):
    start = twin.read()
    for _ in range(n):
        trace, end = seconds(twin, start)
        windows.append(twin.window("U", start, end))
        windows[-1]["trace"] = trace
        start = end


def probed(twin, windows, out):
    spec_path = twin.probed.binary
    cmd = [PROBETOP, "--pid", str(twin.probed.pid), "--no-tui", "--preset", "mysql",
           "--budget", BUDGET, "--budget-window", f"{WINDOW:g}", "--export", out]
    for spec in GLOBS:
        cmd += ["-e", spec.replace("/usr/sbin/mariadbd", spec_path)]
    launch = twin.read()
    tool = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in tool.stderr:
        lines.append(line.rstrip())
        if "attached" in line:
            break
    else:
        raise RuntimeError("probetop ended before attaching:\n" + "\n".join(lines))
    start = twin.read()
    windows.append(twin.window("attach", launch, start))
    reader = threading.Thread(target=lambda: lines.extend(l.rstrip() for l in tool.stderr))
    reader.start()
    for k in range(ROUNDS):
        trace, end = seconds(twin, start)
        windows.append(twin.window(f"B{k + 1}", start, end))
        windows[-1]["trace"] = trace
        start = end
    tool.send_signal(2)
    tool.wait()
    reader.join()
    with open(out) as f:
        report = json.load(f)
    os.remove(out)
    return report, lines


def pct(value):
    return "-" if value is None else f"{value * 100:.2f}%"


def verdict(cost, resolution, budget):
    """Held or not only where an unprobed window's own swing cannot turn the answer."""
    if cost + resolution <= budget:
        return f"held (budget {budget * 100:g}%)"
    if cost - resolution > budget:
        return f"NOT HELD (budget {budget * 100:g}%)"
    return f"not resolvable (within the resolution of the budget, {budget * 100:g}%)"


def main():
    budget = budget_share()
    tmp = tempfile.mkdtemp(prefix="budget-twin-")
    servers = []
    windows, report, lines = [], None, []
    began = time.time()
    try:
        servers.append(Server("probed", tmp))
        servers.append(Server("control", tmp))
        if CPUS:
            for s in servers:
                subprocess.run(["taskset", "-a", "-p", "-c", CPUS, str(s.pid)], check=True,
                               stdout=subprocess.DEVNULL)
        total = WINDOW * (2 * UNPROBED + ROUNDS) + 120
        for s in servers:
            s.start_load(total)
        time.sleep(15)  # the load settles
        twin = Twin(*servers)
        unprobed(twin, UNPROBED, windows)
        if ROUNDS:
            report, lines = probed(twin, windows, os.path.join(tmp, "probetop.json"))
            time.sleep(2)  # the detach settles
        unprobed(twin, UNPROBED, windows)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summarise(windows, report, lines, budget, began)


def summarise(windows, report, lines, budget, began):
    base = [w for w in windows if w["kind"] == "U"]
    loads = [w["load"] for w in windows]
    print(f"\nmariadbd twins at {RATE} statements/s each, --budget {BUDGET} --budget-window "
          f"{WINDOW:g}, {len(base)} unprobed windows of {WINDOW:g} s around {ROUNDS} probed "
          f"ones, host load {min(loads):.1f}-{max(loads):.1f}, {time.time() - began:.0f} s "
          f"in all{', CPUs ' + CPUS if CPUS else ''}")
    res = {}
    for m in ("process", "per_statement", "connections"):
        ratios = [w[m] for w in base]
        mean = statistics.mean(ratios)
        res[m] = (mean, max(abs(r / mean - 1) for r in ratios),
                  statistics.stdev(ratios) / mean if len(ratios) > 1 else float("nan"))
        half = len(ratios) // 2
        drift = (statistics.mean(ratios[half:]) / statistics.mean(ratios[:half]) - 1
                 if half else 0.0)
        print(f"  {m:13} unprobed ratio {mean:.4f}: resolution +-{res[m][1] * 100:.2f}% "
              f"(the largest distance from the mean; sd {res[m][2] * 100:.2f}%), after over "
              f"before {drift * 100:+.2f}%")
    mean, r = res["process"][0], res["process"][1]
    verdicts = []
    for k, w in enumerate(windows):
        if w["kind"] == "U":
            continue
        if w["kind"] == "attach":
            # Too short for a ratio to mean much: the CPU it took over what the control's
            # gives, against the budget of the window it starts.
            extra = w["probed"][0] - w["control"][0] * mean
            first = windows[k + 1]
            allowed = budget * first["control"][0] * mean
            print(f"  attach ({w['seconds']:.1f} s, from probetop's launch to its `attached`): "
                  f"{extra * 1e3:+.0f} ms of mariadbd's CPU over the control's, "
                  f"{extra / allowed * 100:.0f}% of window 1's budget ({allowed * 1e3:.0f} ms)")
            both = [w["probed"][0] + first["probed"][0], w["control"][0] + first["control"][0]]
            c = both[0] / both[1] / mean - 1
            print(f"  window 1 with the attach: {c * 100:+.2f}% +-{r * 100:.2f}%: "
                  f"{verdict(c, r, budget)}")
            continue
        cost = {m: w[m] / res[m][0] - 1 for m in res}
        c = cost["process"]
        lag = w["probed"][2] / w["control"][2] - 1
        v = (f"not resolvable (a load fell behind: statements {lag * 100:+.1f}%)"
             if abs(lag) > LAG else verdict(c, r, budget))
        verdicts.append(v.split(" (")[0])
        print(f"  window {w['kind'][1:]} ({w['seconds']:.1f} s): {c * 100:+.2f}% "
              f"+-{r * 100:.2f}% of mariadbd's CPU: {v}; per statement "
              f"{cost['per_statement'] * 100:+.2f}%, connections "
              f"{cost['connections'] * 100:+.2f}% (load {w['load']:.1f})")
        trace = w.get("trace") or []
        if len(trace) > HEAD:
            head = sum(p - c * mean for p, c in trace[:HEAD])
            rest = sum(p for p, _ in trace[HEAD:]) / sum(c for _, c in trace[HEAD:]) / mean - 1
            worst = max(range(len(trace)), key=lambda i: trace[i][0] - trace[i][1] * mean)
            print(f"    by the second: its first {HEAD} s {head * 1e3:+.0f} ms of CPU over the "
                  f"control's, the {len(trace) - HEAD} s after them {rest * 100:+.2f}%; the "
                  f"dearest second {worst}-{worst + 1} s, "
                  f"{(trace[worst][0] - trace[worst][1] * mean) * 1e3:+.0f} ms")
    if verdicts:
        print(f"  verdict: {verdicts.count('held')} of {len(verdicts)} windows held, "
              f"{verdicts.count('NOT HELD')} not held, {verdicts.count('not resolvable')} not "
              f"resolvable; the method resolves +-{r * 100:.2f}% of mariadbd's CPU here")
    if report:
        b = report.get("budget") or {}
        used = b.get("used") or {}
        print(f"  probetop's own account ({b.get('feedback')}): used "
              f"{pct(used.get('mean'))} ({pct(used.get('low'))}-{pct(used.get('high'))}) "
              f"over the run; first window {pct(b.get('first_window'))}, dearest "
              f"{pct(b.get('worst_window'))}, last {pct(b.get('last_window'))}; duty at the "
              f"end {pct(b.get('duty'))}; {len(report['probes'])} probes")
        for line in lines:
            if "budget" in line or "attached" in line:
                print("  " + line)


main()
