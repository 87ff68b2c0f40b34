"""probetop's latency pairs beside BCC's funclatency on the same function, the same run:
dispatch_command on a private mariadbd under sysbench (`--preset mysql`, keyed by
command), and on a private PostgreSQL cluster under pgbench the preset's USDT pair
query__start,query__done beside `latency:PortalRun`, which funclatency also times (it
cannot pair two USDT probes). Both tools run at once, so each one's latency includes
the other's probes on the same function (both enter through the same trap).

Usage: python3 docs/scripts/latency-beside-funclatency.py mysql|postgres [SECONDS]
Prints a markdown section: the commands, the date, the commit, the load, probetop's rows
and funclatency's output as printed. Needs root, target/release/probetop, bpfcc-tools,
mariadb-server and sysbench, postgresql-15 (`cargo xtask setup`)."""
import datetime, json, os, pwd, shlex, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from private_mariadbd import PROBETOP, ROOT, start_server  # noqa: E402

FUNCLATENCY = "/usr/sbin/funclatency-bpfcc"
MARIADBD = "/usr/sbin/mariadbd"
DISPATCH = "_Z16dispatch_command19enum_server_commandP3THDPcjb"
PG_BIN = "/usr/lib/postgresql/15/bin"


def header(title, commands):
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = open("/proc/loadavg").read().split()[:3]
    print(f"### {title}\n")
    print(f"{now}, commit {commit}, load average {' '.join(load)} (1/5/15 min) at the start, "
          f"{os.cpu_count()} CPUs.\n")
    print("```sh")
    for c in commands:
        print(" ".join(shlex.quote(a) for a in c))
    print("```\n")


def rows(path):
    """probetop's latency rows of a JSON export, as a markdown table."""
    report = json.load(open(path))
    out = ["| pair | calls | p50 | p90 | p99 | max | corrected p50 | cost/call | overhead | returns |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    us = lambda ns: f"{ns / 1000:.1f} us"
    for p in report["probes"]:
        if p.get("kind") != "latency":
            continue
        name = p["name"] + (f"[{p['key']}]" if p.get("key") else "")
        m, c = p["latency_ns"], p["latency_corrected_ns"]
        cost = p.get("whole_cost_ns")
        share = p.get("overhead_share")
        out.append(f"| {name} | {p['calls']} | {us(m['p50'])} | {us(m['p90'])} | {us(m['p99'])} "
                   f"| {us(m['max'])} | {us(c['p50'])} | "
                   f"{'-' if cost is None else f'{cost:.0f} ns'} | "
                   f"{'-' if share is None else f'{100 * share:.2f}%'} | {p['end_path']} |")
    return "\n".join(out)


def side_by_side(probetop_cmd, bcc_cmd, seconds, load):
    """Starts both tools, then the load; returns funclatency's output."""
    tool = subprocess.Popen(probetop_cmd, stderr=subprocess.PIPE, text=True)
    for line in tool.stderr:
        if "attached" in line:
            break
    # BCC compiles against kernel headers; this kernel ships none: Debian's 6.1 ones,
    # the arch tree merged over the common one as symlinks (as the lab's others-report).
    headers = tempfile.mkdtemp(prefix="probetop-bcc-headers-")
    subprocess.run(["sh", "-c", f"cp -rs /usr/src/linux-headers-*-common/. {headers}/ && "
                    f"cp -rsf --remove-destination /usr/src/linux-headers-*-amd64/. {headers}/"],
                   check=True)
    bcc = subprocess.Popen(bcc_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "BCC_KERNEL_SOURCE": headers})
    said = []
    for line in bcc.stdout:  # compiled and attached once it says so
        said.append(line)
        if line.startswith("Tracing"):
            break
    driver = load()
    bcc_out = "".join(said) + bcc.communicate()[0]
    driver.wait()
    # Both measured the whole load: probetop ends (and exports) once it is over.
    tool.send_signal(signal.SIGINT)
    tool.wait()
    return bcc_out


def mysql(seconds):
    server, common = start_server("probetop-funclatency-")
    try:
        pid = server.pid
        out = tempfile.mktemp(prefix="probetop-mysql-", suffix=".json")
        probetop = [PROBETOP, "--pid", str(pid), "--preset", "mysql", "--no-tui",
                    "--export", out]
        bcc = [FUNCLATENCY, "-p", str(pid), "-d", str(seconds), f"{MARIADBD}:{DISPATCH}"]
        bench = ["sysbench", "oltp_read_only", *common, "--threads=4", "--rate=400",
                 f"--time={seconds}", "run"]
        header("dispatch_command: probetop --preset mysql beside funclatency", [probetop, bcc, bench])
        bcc_out = side_by_side(probetop, bcc, seconds,
                               lambda: subprocess.Popen(bench, stdout=subprocess.DEVNULL))
        print(rows(out) + "\n")
        print("funclatency-bpfcc (ns):\n\n```\n" + bcc_out.strip() + "\n```\n")
    finally:
        server.terminate()
        server.wait()


def postgres(seconds):
    tmp = tempfile.mkdtemp(prefix="probetop-funclatency-pg-")
    pg = pwd.getpwnam("postgres")
    os.chown(tmp, pg.pw_uid, pg.pw_gid)
    data = os.path.join(tmp, "data")
    as_pg = lambda: (os.setgid(pg.pw_gid), os.setuid(pg.pw_uid))
    subprocess.run([f"{PG_BIN}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                   preexec_fn=as_pg, check=True, stdout=subprocess.DEVNULL)
    server = subprocess.Popen([f"{PG_BIN}/postgres", "-D", data, "-c", "listen_addresses=",
                               "-c", f"unix_socket_directories={tmp}", "-c", "autovacuum=off",
                               "-c", "fsync=off", "-c", "synchronous_commit=off"],
                              preexec_fn=as_pg, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        client = ["-h", tmp, "-U", "postgres", "postgres"]
        for _ in range(100):
            if subprocess.run([f"{PG_BIN}/pg_isready", "-h", tmp],
                              stdout=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.2)
        subprocess.run([f"{PG_BIN}/pgbench", "-i", "-s", "1", *client], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = server.pid
        out = tempfile.mktemp(prefix="probetop-pg-", suffix=".json")
        probetop = [PROBETOP, "--pid", str(pid), "-F", "--preset", "postgres",
                    "-e", "latency:PortalRun", "--no-tui", "--export", out]
        # Without -p: the backends are forked after it starts (-p takes one pid). Every
        # process of this binary on the host counts: the lines below say which ran.
        bcc = [FUNCLATENCY, "-d", str(seconds), f"{PG_BIN}/postgres:PortalRun"]
        bench = [f"{PG_BIN}/pgbench", "-S", "-c", "4", "-j", "1", "-R", "400",
                 "-T", str(seconds), *client]
        header("PortalRun and query__start,query__done: probetop --preset postgres beside "
               "funclatency", [probetop, bcc, bench])
        bcc_out = side_by_side(probetop, bcc, seconds,
                               lambda: subprocess.Popen(bench, stdout=subprocess.DEVNULL,
                                                        stderr=subprocess.DEVNULL))
        others = subprocess.run(["pgrep", "-c", "-f", f"{PG_BIN}/postgres"],
                                capture_output=True, text=True).stdout.strip()
        print(rows(out) + "\n")
        print("funclatency-bpfcc (ns):\n\n```\n" + bcc_out.strip() + "\n```\n")
        print(f"Processes running this binary on the host at the end: {others} "
              "(funclatency counts every one of them).\n")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "mysql"
    secs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    {"mysql": mysql, "postgres": postgres}[which](secs)
