//! Readers of /proc: one parser of each per-process format, where each user had its
//! own, and the one place that names /proc's per-process files, the kernel's sysctls
//! and its symbol table.

use std::{
    fs, io,
    os::{
        fd::{AsRawFd as _, BorrowedFd},
        unix::fs::{FileExt as _, MetadataExt as _},
    },
    path::PathBuf,
};

/// The fields of /proc/PID/stat probetop reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// `R`, `S`, `Z`, ...
    pub state: char,
    pub ppid: u32,
    /// User and system CPU time, clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Start time in clock ticks since boot: with the pid, names one process.
    pub start_ticks: u64,
}

impl Stat {
    /// Parses a /proc/PID/stat line. The command name may hold spaces and parentheses,
    /// so fields are counted from the last `)`.
    pub(crate) fn parse(stat: &str) -> Option<Self> {
        let after_comm = &stat[stat.rfind(')')? + 1..];
        // Fields 3.. of proc(5): state, ppid, ..., utime (14), stime (15), starttime (22).
        let fields: Vec<&str> = after_comm.split_whitespace().take(20).collect();
        Some(Self {
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            utime: fields.get(11)?.parse().ok()?,
            stime: fields.get(12)?.parse().ok()?,
            start_ticks: fields.get(19)?.parse().ok()?,
        })
    }

    /// `pid`'s stat; `Err` when it cannot be read, `Ok(None)` when it does not parse.
    pub(crate) fn read(pid: u32) -> io::Result<Option<Self>> {
        Ok(Self::parse(&fs::read_to_string(format!(
            "/proc/{pid}/stat"
        ))?))
    }

    /// `pid`'s stat, if it can be read and parsed.
    pub(crate) fn of(pid: u32) -> Option<Self> {
        Self::read(pid).ok().flatten()
    }

    /// This process's stat.
    pub(crate) fn own() -> Option<Self> {
        fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| Self::parse(&stat))
    }

    /// utime + stime, clock ticks.
    pub(crate) fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime
    }
}

/// The value of `key` (`"Tgid:"`, `"CapEff:"`) in the text of a /proc/PID/status file,
/// trimmed.
pub(crate) fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|line| Some(line.strip_prefix(key)?.trim()))
}

/// This process's resident pages (the second field of /proc/self/statm).
pub(crate) fn own_resident_pages() -> Option<u64> {
    let statm = fs::read_to_string("/proc/self/statm").ok()?;
    resident_pages_of_statm(&statm)
}

fn resident_pages_of_statm(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// `/proc/PID/NAME`.
pub(crate) fn file(pid: u32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// `/proc/PID/exe`: a path the kernel resolves to the file the process runs, even when
/// that was deleted or replaced on disk.
pub(crate) fn exe(pid: u32) -> PathBuf {
    file(pid, "exe")
}

/// What `/proc/PID/exe` links to (the executable as the kernel names it). Kernel threads
/// have none: `NotFound`.
pub(crate) fn exe_target(pid: u32) -> io::Result<PathBuf> {
    fs::read_link(exe(pid))
}

/// (device, inode) of the file `/proc/PID/exe` resolves to.
pub(crate) fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    let meta = fs::metadata(exe(pid)).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// `/proc/PID/status`, the text.
pub(crate) fn status(pid: u32) -> io::Result<String> {
    fs::read_to_string(file(pid, "status"))
}

/// This process's /proc/self/status, the text.
pub(crate) fn own_status() -> io::Result<String> {
    fs::read_to_string("/proc/self/status")
}

/// The process of thread `tid` (its `Tgid:`); a process's own pid names itself.
pub(crate) fn tgid(tid: u32) -> Option<u32> {
    status_field(&status(tid).ok()?, "Tgid:")?.parse().ok()
}

/// `/proc/PID/comm` as read (with its newline).
pub(crate) fn comm(pid: u32) -> io::Result<String> {
    fs::read_to_string(file(pid, "comm"))
}

/// `/proc/PID/cmdline`'s arguments, empty ones left out.
pub(crate) fn cmdline(pid: u32) -> io::Result<Vec<String>> {
    let raw = fs::read(file(pid, "cmdline"))?;
    Ok(raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect())
}

/// `/proc/PID/io`, the text.
pub(crate) fn io_counters(pid: u32) -> io::Result<String> {
    fs::read_to_string(file(pid, "io"))
}

/// The thread ids of process `pid` (`/proc/PID/task`), in the directory's order.
pub(crate) fn threads(pid: u32) -> io::Result<Vec<u32>> {
    Ok(numeric_entries(fs::read_dir(file(pid, "task"))?))
}

/// `/proc/PID/task/TID/NAME`, the text.
pub(crate) fn thread_file(pid: u32, tid: u32, name: &str) -> io::Result<String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/{name}"))
}

/// The pid of every process now (the numeric entries of /proc); none if /proc cannot be
/// read.
pub(crate) fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc").map_or_else(|_| Vec::new(), numeric_entries)
}

/// (pid, parent pid) of every process now; one that exits meanwhile is left out.
pub(crate) fn parents() -> Vec<(u32, u32)> {
    all_pids()
        .into_iter()
        .filter_map(|pid| Some((pid, Stat::of(pid)?.ppid)))
        .collect()
}

fn numeric_entries(dir: fs::ReadDir) -> Vec<u32> {
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The open descriptors of `pid` and what each links to (`None` when the link cannot be
/// read), from /proc/PID/fd.
pub(crate) fn fds(pid: u32) -> io::Result<Vec<(u32, Option<PathBuf>)>> {
    let dir = fs::read_dir(file(pid, "fd"))?;
    Ok(dir
        .flatten()
        .filter_map(|entry| {
            let fd = entry.file_name().to_str()?.parse().ok()?;
            Some((fd, fs::read_link(entry.path()).ok()))
        })
        .collect())
}

/// The text of each readable /proc/PID/fdinfo entry.
pub(crate) fn fdinfos(pid: u32) -> io::Result<Vec<String>> {
    let dir = fs::read_dir(file(pid, "fdinfo"))?;
    Ok(dir
        .flatten()
        .filter_map(|entry| fs::read_to_string(entry.path()).ok())
        .collect())
}

/// A path naming the file `fd` holds open, for as long as it stays open
/// (`/proc/self/fd/N`): for handing that exact file to the kernel.
pub(crate) fn own_fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The value of entry `key` of process `pid`'s auxiliary vector (/proc/PID/auxv).
pub(crate) fn auxv_value(pid: u32, key: u64) -> Option<u64> {
    let auxv = fs::read(file(pid, "auxv")).ok()?;
    auxv_lookup(&auxv, key)
}

fn auxv_lookup(auxv: &[u8], key: u64) -> Option<u64> {
    auxv.chunks_exact(16)
        .map(|pair| {
            let word = |at: usize| {
                pair.get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_ne_bytes)
            };
            (word(0), word(8))
        })
        .find(|(k, _)| *k == key)
        .map(|(_, value)| value)
}

/// Fills `buf` from process `pid`'s memory at `address` (/proc/PID/mem).
pub(crate) fn read_memory(pid: u32, address: u64, buf: &mut [u8]) -> io::Result<()> {
    fs::File::open(file(pid, "mem"))?.read_exact_at(buf, address)
}

/// `/proc/sys/kernel/NAME`, trimmed.
pub(crate) fn kernel_sysctl(name: &str) -> io::Result<String> {
    Ok(fs::read_to_string(format!("/proc/sys/kernel/{name}"))?
        .trim()
        .to_owned())
}

/// The kernel's release (`uname -r`), from /proc/sys/kernel/osrelease, or from uname(2)
/// where /proc has no sys (mounted `subset=pid`).
pub(crate) fn kernel_release() -> io::Result<String> {
    kernel_sysctl("osrelease").or_else(|e| super::process::uname_release().ok_or(e))
}

/// The first `model name` of /proc/cpuinfo.
pub(crate) fn cpu_model() -> Option<String> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// Whether /proc/kallsyms names `symbol` (a function the kernel was built with); reads
/// until the first match.
pub(crate) fn kernel_has_symbol(symbol: &str) -> bool {
    use std::io::BufRead as _;
    let Ok(file) = fs::File::open("/proc/kallsyms") else {
        return false;
    };
    io::BufReader::with_capacity(1 << 16, file)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.split_whitespace().nth(2) == Some(symbol))
}

/// Time since boot in clock ticks (/proc/uptime, the clock a process's start time is
/// on); `None` if unknown.
pub(crate) fn boot_ticks() -> Option<u64> {
    let ticks = super::clock::clock_ticks_per_second()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // Rounded down: a process started in the tick of the reading counts from birth.
    Some((seconds * ticks as f64) as u64)
}

/// The load average over the last minute (/proc/loadavg's first field).
pub(crate) fn load_average() -> Option<f64> {
    parse_load_average(&fs::read_to_string("/proc/loadavg").ok()?)
}

fn parse_load_average(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Every CPU's time together since boot, in clock ticks: (busy, total), busy being all
/// but idle and iowait (/proc/stat's `cpu` line).
pub(crate) fn cpu_ticks() -> Option<(u64, u64)> {
    parse_cpu_ticks(&fs::read_to_string("/proc/stat").ok()?)
}

fn parse_cpu_ticks(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_name() {
        let stat =
            "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        assert_eq!(
            Stat::parse(stat),
            Some(Stat {
                state: 'S',
                ppid: 1,
                utime: 1,
                stime: 2,
                start_ticks: 987654,
            })
        );
        assert_eq!(Stat::parse("1 (x) S 1"), None);
        let status = "Name:\tsh\nTgid:\t42\nCapEff:\t000001ffffffffff\n";
        assert_eq!(status_field(status, "Tgid:"), Some("42"));
        assert_eq!(status_field(status, "CapEff:"), Some("000001ffffffffff"));
        assert_eq!(status_field(status, "Pid:"), None);
    }

    #[test]
    fn load_and_cpu_lines() {
        assert_eq!(
            parse_load_average("3.41 1.20 0.80 2/300 4242\n"),
            Some(3.41)
        );
        assert_eq!(parse_load_average(""), None);
        let stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n";
        assert_eq!(parse_cpu_ticks(stat), Some((170, 990)));
        assert_eq!(parse_cpu_ticks("intr 1\n"), None);
    }

    #[test]
    fn own_files_read() {
        let own = Stat::own().expect("own stat");
        // The process's state is its main thread's, which waits for the test threads.
        assert!(matches!(own.state, 'R' | 'S'), "{own:?}");
        assert!(own.start_ticks > 0);
        assert_eq!(
            Stat::of(std::process::id()).map(|s| s.start_ticks),
            Some(own.start_ticks)
        );
        assert!(own_resident_pages().is_some_and(|p| p > 0));
        assert_eq!(resident_pages_of_statm("100 25 3 1 0 20 0"), Some(25));
    }

    #[test]
    fn own_process_files() {
        let me = std::process::id();
        assert_eq!(tgid(me), Some(me));
        let exe = exe_target(me).expect("own exe");
        assert!(exe.is_absolute());
        assert!(exe_identity(me).is_some());
        assert!(threads(me).expect("own threads").contains(&me));
        assert!(all_pids().contains(&me));
        assert!(!comm(me).expect("own comm").trim().is_empty());
        assert!(!cmdline(me).expect("own cmdline").is_empty());
        assert!(io_counters(me).is_ok_and(|t| t.contains("syscr:")));
        assert!(thread_file(me, me, "stat").is_ok_and(|s| Stat::parse(&s).is_some()));
        assert!(fds(me).expect("own fds").iter().any(|(fd, _)| *fd == 0));
        // AT_PAGESZ (6) is this machine's page size.
        assert_eq!(auxv_value(me, 6), Some(4096));
        assert!(!kernel_release().expect("osrelease").is_empty());
    }

    #[test]
    fn memory_reads_as_the_process_sees_it() {
        let value = 0x1122_3344_5566_7788u64;
        let mut read = [0u8; 8];
        read_memory(std::process::id(), &value as *const u64 as u64, &mut read)
            .expect("own memory");
        assert_eq!(u64::from_ne_bytes(read), value);
        let auxv = [7u64, 1, 25, 0xabc, 0, 0]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect::<Vec<u8>>();
        assert_eq!(auxv_lookup(&auxv, 25), Some(0xabc));
        assert_eq!(auxv_lookup(&auxv, 9), None);
    }
}
