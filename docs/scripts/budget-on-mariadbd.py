# Whether `--budget` holds on mariadbd (docs/mysqld.md, "--budget on mariadbd"): a private
# mariadbd under sysbench's open-loop oltp_point_select at RATE statements/s; probetop with
# the mysql preset and GLOBS (about a thousand probes) under `--budget BUDGET
# --budget-window WINDOW`. From outside, mariadbd's CPU (its process CPU clock) over
# WINDOW-second windows: one before probetop starts, WINDOWS while it runs (aligned on its
# budget windows: the first starts when it says `attached`), one after it stopped. Under an
# open-loop load the work is the same in every window, so a window's CPU beyond the mean
# of the unprobed ones, over that mean, is what the probes cost it (the unprobed windows'
# difference says how far the host alone moves it). Prints a line per window, probetop's
# own account (its budget summary) and its actions. Run as root from a built worktree:
#   python3 docs/scripts/budget-on-mariadbd.py [RATE] [WINDOW] [WINDOWS] [BUDGET]
# GLOBS (space-separated specs) overrides the glob set.
import json, os, subprocess, sys, threading, time

from private_mariadbd import PROBETOP, cpu_s, open_loop, start_server

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
WINDOW = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
WINDOWS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
BUDGET = sys.argv[4] if len(sys.argv) > 4 else "1%"
GLOBS = os.environ.get("GLOBS", "uprobe:/usr/sbin/mariadbd:THD::* "
                       "uprobe:/usr/sbin/mariadbd:handler::* "
                       "uprobe:/usr/sbin/mariadbd:my_* "
                       "uprobe:/usr/sbin/mariadbd:JOIN::*").split()


def window(pid, seconds):
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_s(pid), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def main():
    server, common = start_server("budget-")
    load = open_loop(common, RATE, int(WINDOW * (WINDOWS + 2) + 120))
    pid = server.pid
    out = f"/tmp/budget-on-mariadbd-{os.getpid()}.json"
    lines = []
    try:
        time.sleep(10)  # the load settles
        before = window(pid, WINDOW)
        cmd = [PROBETOP, "--pid", str(pid), "--no-tui", "--preset", "mysql",
               "--budget", BUDGET, "--budget-window", str(WINDOW), "--export", out]
        for spec in GLOBS:
            cmd += ["-e", spec]
        tool = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        for line in tool.stderr:
            lines.append(line.rstrip())
            if "attached" in line:
                break
        reader = threading.Thread(target=lambda: lines.extend(l.rstrip() for l in tool.stderr))
        reader.start()
        on = [window(pid, WINDOW) for _ in range(WINDOWS)]
        tool.send_signal(2)
        tool.wait()
        reader.join()
        time.sleep(2)
        after = window(pid, WINDOW)
    finally:
        load.kill()
        server.terminate()
        server.wait()
    base = (before + after) / 2
    print(f"mariadbd at {RATE} statements/s, --budget {BUDGET} --budget-window {WINDOW:.0f}: "
          f"unprobed {before * 100:.2f}% and {after * 100:.2f}% of a CPU "
          f"({(after / before - 1) * 100:+.2f}% apart)")
    for i, cpu in enumerate(on):
        print(f"  window {i + 1}: {cpu * 100:.2f}% of a CPU, {(cpu / base - 1) * 100:+.2f}% "
              f"over the unprobed mean")
    with open(out) as f:
        report = json.load(f)
    os.remove(out)
    print(f"  probes: {len(report['probes'])}")
    print("  probetop's account: " + json.dumps(report.get("budget"), sort_keys=True))
    for line in lines:
        if "budget" in line or "attached" in line:
            print("  " + line)


main()
