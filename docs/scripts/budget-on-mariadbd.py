# Whether `--budget` holds on mariadbd (docs/mysqld.md, "--budget 1% on mariadbd"): a private
# mariadbd under sysbench's open-loop oltp_point_select at RATE statements/s; probetop with
# the mysql preset and GLOBS (about a thousand probes) under `--budget BUDGET
# --budget-window WINDOW`.
#
# From outside, mariadbd's CPU over WINDOW-second windows that alternate: unprobed, probed,
# unprobed, ... (ROUNDS probed windows, each between two unprobed ones; each probed window
# is a fresh probetop, the window starting when it says `attached` and ending at its
# SIGINT, so it is probetop's first budget window). Under an open-loop load the work is
# the same in every window, so a probed window's CPU over the mean of its two unprobed
# neighbours, less 1, is what the probes cost it; the unprobed windows' own spread (the
# largest over the smallest, less 1) is the method's resolution, printed beside it.
#
# Two measures of each window:
# - process: mariadbd's process CPU clock (every thread);
# - connections: the CPU (schedstat, ns) of the CLIENTS threads that ran the most in the
#   first unprobed window: with one thread per connection and CLIENTS clients these are
#   the connection threads, where the statements and the probes' hits run, without
#   InnoDB's background threads, whose work comes and goes on its own.
#
# Prints a line per window, then per probed window its cost by both measures and
# probetop's own account (its JSON budget), and the resolution. Run as root from a built
# worktree:
#   python3 docs/scripts/budget-on-mariadbd.py [RATE] [WINDOW] [ROUNDS] [BUDGET]
# GLOBS (space-separated specs) overrides the glob set.
import json, os, subprocess, sys, threading, time

from private_mariadbd import PROBETOP, cpu_s, start_server

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
WINDOW = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
BUDGET = sys.argv[4] if len(sys.argv) > 4 else "1%"
CLIENTS = 4
GLOBS = os.environ.get("GLOBS", "uprobe:/usr/sbin/mariadbd:THD::* "
                       "uprobe:/usr/sbin/mariadbd:handler::* "
                       "uprobe:/usr/sbin/mariadbd:my_* "
                       "uprobe:/usr/sbin/mariadbd:JOIN::*").split()


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


class Meter:
    def __init__(self, pid):
        self.pid = pid
        self.connections = None

    def read(self):
        return time.monotonic(), cpu_s(self.pid), threads_ns(self.pid)

    def window(self, start, end, first=False):
        (t0, c0, th0), (t1, c1, th1) = start, end
        seconds = t1 - t0
        if first:
            ran = {tid: th1[tid] - th0[tid] for tid in th1 if tid in th0}
            self.connections = sorted(ran, key=ran.get, reverse=True)[:CLIENTS]
        missing = [t for t in self.connections if t not in th0 or t not in th1]
        if missing:
            raise RuntimeError(f"connection threads {missing} ended: the measure is lost")
        conn = sum(th1[t] - th0[t] for t in self.connections) / 1e9
        return (c1 - c0) / seconds, conn / seconds


def open_loop(common, rate, seconds):
    """sysbench's oltp_point_select at a fixed `rate` from CLIENTS client threads."""
    return subprocess.Popen(["sysbench", "oltp_point_select", *common,
                             f"--threads={CLIENTS}", f"--rate={rate}", f"--time={seconds}",
                             "run"], stdout=subprocess.DEVNULL)


def probed(meter, out):
    cmd = [PROBETOP, "--pid", str(meter.pid), "--no-tui", "--preset", "mysql",
           "--budget", BUDGET, "--budget-window", str(WINDOW), "--export", out]
    for spec in GLOBS:
        cmd += ["-e", spec]
    tool = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in tool.stderr:
        lines.append(line.rstrip())
        if "attached" in line:
            break
    reader = threading.Thread(target=lambda: lines.extend(l.rstrip() for l in tool.stderr))
    reader.start()
    start = meter.read()
    time.sleep(WINDOW)
    end = meter.read()
    tool.send_signal(2)
    tool.wait()
    reader.join()
    with open(out) as f:
        report = json.load(f)
    os.remove(out)
    return meter.window(start, end), report, lines


def pct(value):
    return "-" if value is None else f"{value * 100:.2f}%"


def spread(values):
    return max(values) / min(values) - 1


def main():
    order = "U" + "BU" * ROUNDS
    server, common = start_server("budget-")
    load = open_loop(common, RATE, int(WINDOW * len(order) + 30 * ROUNDS + 60))
    meter = Meter(server.pid)
    out = f"/tmp/budget-on-mariadbd-{os.getpid()}.json"
    windows, loads = [], []
    try:
        time.sleep(10)  # the load settles
        for k, state in enumerate(order):
            loads.append(load_avg())
            if state == "U":
                start = meter.read()
                time.sleep(WINDOW)
                cpu = meter.window(start, meter.read(), first=(k == 0))
                windows.append((state, cpu, None, None))
                print(f"U  process {cpu[0] * 100:.3f}%  connections {cpu[1] * 100:.3f}% "
                      f"of a CPU  (load {loads[-1]:.1f})", flush=True)
            else:
                cpu, report, lines = probed(meter, out)
                windows.append((state, cpu, report, lines))
                print(f"B  process {cpu[0] * 100:.3f}%  connections {cpu[1] * 100:.3f}% "
                      f"of a CPU  (load {loads[-1]:.1f})", flush=True)
                time.sleep(2)  # the detach settles
    finally:
        load.kill()
        server.terminate()
        server.wait()
    unprobed = [w[1] for w in windows if w[0] == "U"]
    res = [spread([u[m] for u in unprobed]) for m in (0, 1)]
    print(f"mariadbd at {RATE} statements/s, --budget {BUDGET} --budget-window {WINDOW:.0f}, "
          f"{ROUNDS} probed windows of {WINDOW:.0f} s between unprobed ones, host load "
          f"{min(loads):.1f}-{max(loads):.1f}")
    print(f"  resolution (the unprobed windows' spread): process {res[0] * 100:.1f}%, "
          f"connections {res[1] * 100:.1f}% of mariadbd's CPU")
    for i, (state, cpu, report, lines) in enumerate(windows):
        if state != "B":
            continue
        base = [(windows[i - 1][1][m] + windows[i + 1][1][m]) / 2 for m in (0, 1)]
        cost = [cpu[m] / base[m] - 1 for m in (0, 1)]
        budget = report.get("budget") or {}
        used = budget.get("used") or {}
        print(f"  probed window {i // 2 + 1}: process {cost[0] * 100:+.2f}% "
              f"(resolution {res[0] * 100:.1f}%), connections {cost[1] * 100:+.2f}% "
              f"(resolution {res[1] * 100:.1f}%); probetop's own account: used "
              f"{used.get('mean', 0) * 100:.2f}% ({used.get('low', 0) * 100:.2f}-"
              f"{used.get('high', 0) * 100:.2f}%) over the run, its dearest window "
              f"{pct(budget.get('worst_window'))}, duty "
              f"{budget.get('duty', 0) * 100:.2f}%, {budget.get('feedback')}, "
              f"{len(report['probes'])} probes")
    last = windows[-2]
    print("  the last probed window's budget: " + json.dumps(last[2].get("budget"), sort_keys=True))
    for line in last[3]:
        if "budget" in line or "attached" in line:
            print("  " + line)


main()
