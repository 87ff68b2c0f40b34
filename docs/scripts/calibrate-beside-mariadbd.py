"""What `probetop calibrate` does to a database beside it: a private mariadbd under an
open-loop oltp_point_select (RATE statements/s, 4 client threads), sysbench's p95 latency
every second, before, during and after one `probetop calibrate ARGS...` (its result not
saved). Prints the p95 seconds of each part (median and max) and the load average.

    python3 docs/scripts/calibrate-beside-mariadbd.py RATE BEFORE_S AFTER_S [ARGS...]
"""
import os, re, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from private_mariadbd import PROBETOP, start_server  # noqa: E402

LINE = re.compile(r"^\[ *(\d+)s \].*lat \(ms,95%\): ([0-9.]+)")


def main():
    rate, before, after = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    extra = sys.argv[4:]
    server, common = start_server("probetop-calibrate-beside-")
    cache = tempfile.mkdtemp(prefix="probetop-calibrate-cache-")
    try:
        # Long enough for the calibration whatever it takes; stopped once it is over.
        load = subprocess.Popen(
            ["sysbench", "oltp_point_select", *common, "--threads=4", f"--rate={rate}",
             "--time=900", "--report-interval=1", "--percentile=95", "run"],
            stdout=subprocess.PIPE, text=True)
        started = time.monotonic()
        time.sleep(before)
        load_avg = os.getloadavg()[0]
        cal_start = time.monotonic() - started
        cal = subprocess.run([PROBETOP, "calibrate", "--no-save", *extra],
                             env={**os.environ, "XDG_CACHE_HOME": cache},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cal_end = time.monotonic() - started
        time.sleep(after)
        load.terminate()
        out, _ = load.communicate()
        per_second = [(int(m.group(1)), float(m.group(2)))
                      for m in map(LINE.match, out.splitlines()) if m]
        parts = {
            "before": [p for s, p in per_second if s <= cal_start],
            "during": [p for s, p in per_second if cal_start + 1 < s <= cal_end],
            "after": [p for s, p in per_second if s > cal_end + 1],
        }
        print(f"rate {rate}/s, calibrate {' '.join(extra) or '(default)'}: "
              f"{cal_end - cal_start:.0f} s (exit {cal.returncode}), load {load_avg:.1f} "
              f"on {os.cpu_count()} CPUs when it started")
        for name, values in parts.items():
            if values:
                print(f"  {name:6} p95 per second: median {statistics.median(values):.2f} ms, "
                      f"max {max(values):.2f} ms ({len(values)} s)")
        print(cal.stdout, end="")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
