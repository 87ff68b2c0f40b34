#!/usr/bin/env python3
"""--preset mysql on a private mariadbd under sysbench run flat out (no --rate), once per
mode given: what each mode counts, drops and moves (docs/user-guide.md, "Why `auto` is
the default mode").

    sudo python3 docs/scripts/modes-on-mariadbd-flat-out.py [SECONDS] [MODE ...]

MODE is ring, auto, kernel, sample, or `default` (no --mode). SECONDS (20) is each run's
sysbench time. EXTRA="--ring-kib 16" adds probetop options. The server runs a private copy of /usr/sbin/mariadbd, so that no other
tool's probe on the packaged file lands on it (a uprobe is armed in every process
mapping the file)."""
import json, os, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import private_mariadbd  # noqa: E402
from private_mariadbd import PROBETOP  # noqa: E402

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
MODES = sys.argv[2:] or ["ring", "auto"]


def start_server():
    """A private mariadbd from its own copy of the binary (so no other tool's probe on
    /usr/sbin/mariadbd arms in it), its own datadir and socket, sysbench's 4 tables; the
    copy's directory also takes the exports."""
    tmp = tempfile.mkdtemp(prefix="modes-flat-")
    binary = os.path.join(tmp, "mariadbd")
    shutil.copy2("/usr/sbin/mariadbd", binary)
    server, common = private_mariadbd.start_server("modes-flat-data-", binary=binary)
    return server, common, tmp


def run(mode, server, common, tmp):
    export = os.path.join(tmp, f"{mode}.json")
    cmd = [PROBETOP, "--pid", str(server.pid), "--preset", "mysql", "--no-tui",
           "--export", export]
    if mode != "default":
        cmd += ["--mode", mode]
    cmd += os.environ.get("EXTRA", "").split()
    err_path = os.path.join(tmp, f"{mode}.err")
    with open(err_path, "w") as err:
        tool = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        for _ in range(600):
            if "attached" in open(err_path).read():
                break
            time.sleep(0.1)
        load = os.getloadavg()[0]
        bench = subprocess.run(["sysbench", "oltp_read_only", *common, "--threads=4",
                                f"--time={SECONDS}", "run"],
                               capture_output=True, text=True, check=True)
        tool.send_signal(signal.SIGINT)
        tool.wait(timeout=60)
    queries = next(int(l.split()[1]) for l in bench.stdout.splitlines()
                   if l.strip().startswith("queries:"))
    report = json.load(open(export))
    said = [l.rstrip() for l in open(err_path)
            if "kernel" in l or "drop" in l or "move" in l]
    print(f"== {mode} {os.environ.get('EXTRA', '')}: sysbench {queries} queries in {SECONDS} s "
          f"({queries / SECONDS:.0f}/s), load {load:.1f} at the start")
    for p in report["probes"]:
        if p.get("kind") == "latency":
            continue
        moved = p.get("moved_in_kernel")
        key = " key" if p.get("key") else ""
        print(f"  {p['spec']}{key}: mode {p['mode']}, hits {p['hits']}, dropped "
              f"{p['dropped']}, timed {p['handler_ns']['count']}, threads "
              f"{p.get('threads_cover')}"
              + (f", moved after {moved['after_s']:.1f} s ({moved['reason']},"
                 f" {moved['hits_per_second']:.0f}/s)" if moved else ""))
    for p in report["probes"]:
        if p.get("kind") == "latency" and not p.get("key"):
            keys = sum(1 for q in report["probes"]
                       if q.get("kind") == "latency" and q.get("key") and q["spec"] == p["spec"])
            print(f"  {p['spec']}: calls {p['calls']}, open {p['open']}, unmatched "
                  f"{p['unmatched']}, {keys} key rows")
    for line in said:
        print(f"  said: {line}")


def main():
    server, common, tmp = start_server()
    try:
        print(f"probetop {subprocess.run([PROBETOP, '--version'], capture_output=True, text=True).stdout.strip()}, "
              f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        for mode in MODES:
            run(mode, server, common, tmp)
    finally:
        server.terminate()
        server.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
        socket = next(a for a in common if a.startswith("--mysql-socket="))
        shutil.rmtree(os.path.dirname(socket.split("=", 1)[1]), ignore_errors=True)  # datadir


if __name__ == "__main__":
    main()
