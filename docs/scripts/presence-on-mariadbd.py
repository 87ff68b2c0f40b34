# Why probetop with a probe that never fires lowers mariadbd's CPU at 2,000 statements/s
# (docs/mysqld.md, "presence"): a private mariadbd under sysbench's open-loop
# oltp_point_select, its CPU (its process CPU clock) over BLOCK-second blocks
# with nothing else running (detached), probetop attached to uprobe:kill_mysql in kernel
# mode (presence), and a process of about probetop's own CPU that wakes 1,000 times a
# second and does nothing else (sleeper). Each kind's block sits between two detached
# blocks; added share = the block minus the mean of its neighbours. Median and IQR over
# ROUNDS. HALT_POLL_NS, if given, sets the guest's halt polling (cpuidle-haltpoll's
# guest_halt_poll_ns: how long an idle vCPU spins before it halts; this VM boots with 0,
# the upstream default is 200000) for the run and restores it after. Run as root from a
# built worktree, on an idle machine:
#   python3 docs/scripts/presence-on-mariadbd.py [RATE] [ROUNDS] [BLOCK] [HALT_POLL_NS]
import os, signal, statistics, subprocess, sys, time

from private_mariadbd import PROBETOP, cpu_s, iqr, open_loop, start_server

RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
BLOCK = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
HALT_POLL_NS = sys.argv[4] if len(sys.argv) > 4 else None
HALT_POLL = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"


def share(pid, seconds):
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def main():
    server, common = start_server("presence-")
    load = open_loop(common, RATE, int(ROUNDS * 4 * (BLOCK + 1.5) + 60))
    pid = server.pid
    time.sleep(10)  # the load settles
    added = {"presence": [], "sleeper": []}
    own, detached = [], []
    try:
        previous = None
        for _ in range(ROUNDS):
            for kind in ("presence", "sleeper"):
                time.sleep(1)
                before = previous if previous is not None else share(pid, BLOCK)
                if kind == "presence":
                    tool = subprocess.Popen([PROBETOP, "--pid", str(pid), "--no-tui", "--mode",
                                             "kernel", "--clock-seconds", "0", "-e",
                                             "uprobe:kill_mysql"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                            text=True)
                    for line in tool.stderr:
                        if "probetop: attached" in line:
                            break
                else:
                    tool = subprocess.Popen([sys.executable, "-c",
                                             "import time\nwhile True: time.sleep(0.001)"])
                    time.sleep(1)
                t0 = cpu_s(tool.pid)
                during = share(pid, BLOCK)
                own.append((kind, cpu_s(tool.pid) - t0))
                tool.send_signal(signal.SIGINT if kind == "presence" else signal.SIGTERM)
                tool.wait()
                time.sleep(1)
                after = share(pid, BLOCK)
                added[kind].append(during - (before + after) / 2)
                detached.append(after)
                previous = after
    finally:
        load.kill()
        server.terminate()
        server.wait()
    print(f"detached: mariadbd {statistics.median(detached) * 100:.2f}% of a CPU "
          f"(halt polling {open(HALT_POLL).read().strip()} ns)")
    for kind, values in added.items():
        q = iqr(values)
        tool_cpu = statistics.median(s for k, s in own if k == kind) / BLOCK
        print(f"{kind}: mariadbd {statistics.median(values) * 100:+.2f}% of a CPU "
              f"(IQR {q[0] * 100:+.2f}..{q[1] * 100:+.2f}, n={len(values)}); "
              f"the tool itself {tool_cpu * 100:.2f}%")


if HALT_POLL_NS is None:
    main()
else:
    with open(HALT_POLL) as f:
        saved = f.read().strip()
    with open(HALT_POLL, "w") as f:
        f.write(HALT_POLL_NS)
    try:
        main()
    finally:
        with open(HALT_POLL, "w") as f:
            f.write(saved)
