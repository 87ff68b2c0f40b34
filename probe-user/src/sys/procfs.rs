//! Readers of /proc's per-process files: one parser of each format, where each user
//! had its own.

use std::{fs, io};

/// The fields of /proc/PID/stat probetop reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
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
    pub fn parse(stat: &str) -> Option<Self> {
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
    pub fn read(pid: u32) -> io::Result<Option<Self>> {
        Ok(Self::parse(&fs::read_to_string(format!(
            "/proc/{pid}/stat"
        ))?))
    }

    /// `pid`'s stat, if it can be read and parsed.
    pub fn of(pid: u32) -> Option<Self> {
        Self::read(pid).ok().flatten()
    }

    /// This process's stat.
    pub fn own() -> Option<Self> {
        fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| Self::parse(&stat))
    }

    /// utime + stime, clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime
    }
}

/// The value of `key` (`"Tgid:"`, `"CapEff:"`) in the text of a /proc/PID/status file,
/// trimmed.
pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|line| Some(line.strip_prefix(key)?.trim()))
}

/// This process's resident pages (the second field of /proc/self/statm).
pub fn own_resident_pages() -> Option<u64> {
    let statm = fs::read_to_string("/proc/self/statm").ok()?;
    resident_pages_of_statm(&statm)
}

fn resident_pages_of_statm(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
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
}
