"""What the mariadbd experiment scripts share: a private mariadbd with sysbench's tables,
an open-loop load on it, and a process's CPU clock. Imported by the scripts beside it."""
import ctypes, os, statistics, subprocess, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBETOP = os.path.join(ROOT, "target/release/probetop")
LIBC = ctypes.CDLL(None, use_errno=True)


def iqr(values):
    """The lower and upper quartiles; a single value is its own spread (one round)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def cpu_s(pid):
    """The process CPU clock: every thread, in s (/proc's ticks are too coarse)."""
    clock = ctypes.c_int()
    if LIBC.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
        raise OSError(f"clock_getcpuclockid({pid}) failed")
    return time.clock_gettime(clock.value)


def start_server(prefix, binary="/usr/sbin/mariadbd", seed=0):
    """A private mariadbd (its own datadir, unix socket only) with sysbench's 4 tables of
    10,000 rows; returns the server process and sysbench's connection arguments. `binary`
    may be a private copy of mariadbd (a uprobe is armed in every process that maps the
    probed file, so a copy keeps other tools' probes out, and its probes out of others);
    `seed` other than 0 makes sysbench's tables the same from run to run."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    data, sock = os.path.join(tmp, "data"), os.path.join(tmp, "mysqld.sock")
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = subprocess.Popen([binary, "--no-defaults", "--basedir=/usr", f"--datadir={data}",
                               f"--socket={sock}", f"--tmpdir={tmp}", "--user=root",
                               "--skip-networking", "--innodb-buffer-pool-size=256M",
                               f"--log-error={tmp}/error.log"])
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.2)
    subprocess.run(["mariadb", f"--socket={sock}", "-uroot", "-e", "CREATE DATABASE sbtest"],
                   check=True)
    common = ["--db-driver=mysql", f"--mysql-socket={sock}", "--mysql-user=root",
              "--mysql-db=sbtest", "--tables=4", "--table-size=10000"]
    subprocess.run(["sysbench", "oltp_read_only", *common, f"--rand-seed={seed}", "prepare"],
                   check=True, stdout=subprocess.DEVNULL)
    return server, common


def open_loop(common, rate, seconds):
    """sysbench's oltp_point_select at a fixed `rate` from 4 client threads."""
    return subprocess.Popen(["sysbench", "oltp_point_select", *common, "--threads=4",
                             f"--rate={rate}", f"--time={seconds}", "run"],
                            stdout=subprocess.DEVNULL)
