//! Other BPF programs already on the target's code (another agent's uprobes, a running
//! bpftrace): which, where, and what they cost per run.
//!
//! They are found two ways, because tools attach two ways:
//! - every process's perf event file descriptors, asked with `BPF_TASK_FD_QUERY`
//!   (what `bpftool perf` does): uprobes bound with `PERF_EVENT_IOC_SET_BPF` (older
//!   bpftrace) or with a BPF link, with the file and offset;
//! - every BPF link: `perf_event` links of uprobe type carry the file name and offset
//!   on 6.x kernels, `uprobe_multi` links the path and pid.
//!
//! A probe counts as on the target when its file is one the target maps. Per-process
//! filters of perf-event uprobes are not visible from outside, so such a probe may fire
//! only in other processes: it is listed as on the target's objects, not as firing.
//!
//! Run counts and run time come from the kernel's BPF statistics, which cost every BPF
//! program on the host ~20-40 ns per run while on: off unless `--bpf-stats`, which turns
//! them on with `BPF_ENABLE_STATS` (they go off by themselves when the returned file
//! descriptor closes, whichever way probetop exits).

use std::{
    collections::{HashMap, HashSet},
    ffi::CStr,
    fs,
    os::fd::{AsRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::sys::maps::{FileId, MapEntry, read_maps};
use crate::sys::{self, procfs};

/// One BPF program on one probe point of an object the target maps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtherProgram {
    pub prog_id: u32,
    /// The program's name as loaded (up to 15 characters).
    pub name: String,
    /// `uprobe`, `uretprobe` or `uprobe_multi`.
    pub kind: &'static str,
    /// The probed file as the attaching tool named it.
    pub file: String,
    /// File offsets of its probes in that file (of a uprobe_multi link, the first).
    pub offsets: Vec<u64>,
    /// How many offsets a uprobe_multi link has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// The process a uprobe_multi link is limited to (0: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_pid: Option<u32>,
    /// A process holding it, and its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_comm: Option<String>,
    /// Runs and run time over the measurement window (BPF stats on), or since the
    /// stats were turned on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_time_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_run_ns: Option<f64>,
    /// Every probed site: file offset and the USDT semaphore's (`ref_ctr_offset`, 0
    /// none, and 0 where the kernel does not tell: a perf event asked with
    /// `BPF_TASK_FD_QUERY`).
    #[serde(skip)]
    pub sites: Vec<(u64, u64)>,
    /// Return probes (a uretprobe, or a uprobe_multi link with the return flag).
    #[serde(skip)]
    pub returns: bool,
    /// Statistics were on, but the program was unloaded before the end (its tool
    /// exited): its runs are not known.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unloaded: bool,
}

/// Turns the kernel's BPF run statistics on for as long as the value lives.
pub(crate) struct StatsGuard {
    _fd: OwnedFd,
}

impl StatsGuard {
    /// `BPF_ENABLE_STATS(BPF_STATS_RUN_TIME)`.
    pub(crate) fn enable() -> Result<Self, aya::sys::SyscallError> {
        Ok(Self {
            _fd: aya::sys::enable_stats(aya::sys::Stats::RunTime)?,
        })
    }
}

/// Whether the kernel keeps BPF run statistics now (sysctl or an enable fd).
pub(crate) fn stats_enabled() -> bool {
    procfs::kernel_sysctl("bpf_stats_enabled").is_ok_and(|v| v != "0")
}

/// Finds the BPF programs on uprobes of objects `pid` maps, other than those of the
/// processes in `exclude_pids` and the programs in `exclude_progs`.
pub(crate) fn find(pid: u32, exclude_pids: &[u32], exclude_progs: &[u32]) -> Vec<OtherProgram> {
    let Ok(maps) = read_maps(pid) else {
        return Vec::new();
    };
    let mapped: Vec<&MapEntry> = maps.iter().filter(|m| m.is_file()).collect();
    // `file` as its attaching process named it, resolved there (`holder`).
    let on_target = |file: &str, holder: Option<u32>| -> bool {
        let Some(file) = in_process(file, holder) else {
            return false;
        };
        match FileId::of(&file) {
            Ok(id) => mapped.iter().any(|m| id.matches(m)),
            Err(_) => mapped
                .iter()
                .any(|m| m.path.as_deref().map(Path::new) == Some(file.as_path())),
        }
    };
    find_where(on_target, Some(pid), exclude_pids, exclude_progs)
}

/// [`find`] for every process of the host (`probetop --all`): every BPF program on a
/// uprobe, whatever maps its file; a uprobe_multi link's pid filter is in `only_pid`.
pub(crate) fn find_all(exclude_pids: &[u32], exclude_progs: &[u32]) -> Vec<OtherProgram> {
    let readable_anywhere = |file: &str, holder: Option<u32>| in_process(file, holder).is_some();
    find_where(readable_anywhere, None, exclude_pids, exclude_progs)
}

/// The programs on files `on_target` accepts (a file as its holder named it), and of
/// uprobe_multi links filtered to `pid` or to none when `pid` is given.
fn find_where(
    on_target: impl Fn(&str, Option<u32>) -> bool,
    pid: Option<u32>,
    exclude_pids: &[u32],
    exclude_progs: &[u32],
) -> Vec<OtherProgram> {
    // One entry per program, file and holder: run statistics are per program anyway.
    let mut found: Vec<OtherProgram> = Vec::new();
    let mut add = |program: OtherProgram| {
        let same = found.iter_mut().find(|p| {
            p.prog_id == program.prog_id
                && p.kind == program.kind
                && p.file == program.file
                && p.holder_pid == program.holder_pid
        });
        match same {
            Some(p) => {
                for offset in program.offsets {
                    if !p.offsets.contains(&offset) {
                        p.offsets.push(offset);
                    }
                }
                for site in program.sites {
                    if !p.sites.iter().any(|s| s.0 == site.0) {
                        p.sites.push(site);
                    }
                }
            }
            None => found.push(program),
        }
    };
    let mut seen = HashSet::new();
    for query in perf_event_queries(exclude_pids) {
        if exclude_progs.contains(&query.prog_id) || !on_target(&query.file, Some(query.pid)) {
            continue;
        }
        seen.insert((query.prog_id, query.file.clone(), query.offset));
        add(OtherProgram {
            prog_id: query.prog_id,
            name: String::new(),
            kind: query.kind,
            file: readable(&query.file, Some(query.pid)),
            offsets: vec![query.offset],
            count: None,
            only_pid: None,
            holder_pid: Some(query.pid),
            holder_comm: comm(query.pid),
            run_count: None,
            run_time_ns: None,
            avg_run_ns: None,
            sites: vec![(query.offset, 0)],
            returns: query.kind == "uretprobe",
            unloaded: false,
        });
    }
    let links = uprobe_links();
    // A walk of every process's fdinfo: only for paths relative to a process, or for
    // links on the target, whose owner it names (else another probetop attaching by an
    // absolute path was owned by "unknown"). Host-wide every process is walked anyway,
    // and a link's holder is its owner.
    let holders = if pid.is_none()
        || links
            .iter()
            .any(|l| relative_to_process(&l.file).is_some() || on_target(&l.file, None))
    {
        link_holders()
    } else {
        HashMap::new()
    };
    for mut link in links {
        let holder = holders.get(&link.link_id).copied();
        if exclude_progs.contains(&link.prog_id) || !on_target(&link.file, holder) {
            continue;
        }
        if let Some(pid) = pid
            && link.only_pid.is_some_and(|p| p != 0 && p != pid)
        {
            continue;
        }
        // A perf link's event is usually also held open by its tool: seen above.
        if seen.contains(&(link.prog_id, link.file.clone(), link.offset.unwrap_or(0))) {
            continue;
        }
        link.file = readable(&link.file, holder);
        add(OtherProgram {
            prog_id: link.prog_id,
            name: String::new(),
            kind: link.kind,
            file: link.file,
            offsets: link.offset.into_iter().collect(),
            count: link.count,
            only_pid: link.only_pid,
            holder_pid: holder,
            holder_comm: holder.and_then(comm),
            run_count: None,
            run_time_ns: None,
            avg_run_ns: None,
            sites: link.sites,
            returns: link.returns,
            unloaded: false,
        });
    }
    let names = program_stats();
    for program in &mut found {
        if let Some(stats) = names.iter().find(|s| s.id == program.prog_id) {
            program.name = stats.name.clone();
        }
    }
    found
}

/// Another tool's BPF program on one probed site.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SiteHolder {
    pub prog_id: u32,
    /// The program's name as loaded.
    pub name: String,
    /// `uprobe`, `uretprobe` or `uprobe_multi`.
    pub kind: &'static str,
    /// The semaphore offset it holds the site with, where the kernel says (uprobe_multi
    /// links): `Some(0)` for none.
    pub ref_ctr_offset: Option<u64>,
    pub holder_pid: Option<u32>,
    pub holder_comm: Option<String>,
}

impl std::fmt::Display for SiteHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} program {} (id {})",
            self.kind, self.name, self.prog_id
        )?;
        match self.ref_ctr_offset {
            Some(0) => write!(f, " without a semaphore")?,
            Some(offset) => write!(f, " with the semaphore at file offset {offset:#x}")?,
            None => {}
        }
        match (self.holder_pid, &self.holder_comm) {
            (Some(pid), Some(comm)) => write!(f, " of pid {pid} ({comm})"),
            (Some(pid), None) => write!(f, " of pid {pid}"),
            (None, _) => Ok(()),
        }
    }
}

/// The BPF programs of processes other than `exclude_pids` on the site `offset` of the
/// file at `file` (any path to it): who holds a site the kernel refused a probe on.
/// Walks every process's file descriptors and every BPF link, so it is for the rare
/// refusal, not for every probe.
pub(crate) fn holders_at(file: &Path, offset: u64, exclude_pids: &[u32]) -> Vec<SiteHolder> {
    let Ok(wanted) = FileId::of(file) else {
        return Vec::new();
    };
    let same_file = |file: &str, holder: Option<u32>| {
        in_process(file, holder)
            .and_then(|path| FileId::of(&path).ok())
            .is_some_and(|id| id == wanted)
    };
    let mut out = Vec::new();
    for query in perf_event_queries(exclude_pids) {
        if query.offset == offset && same_file(&query.file, Some(query.pid)) {
            out.push(SiteHolder {
                prog_id: query.prog_id,
                name: String::new(),
                kind: query.kind,
                ref_ctr_offset: None,
                holder_pid: Some(query.pid),
                holder_comm: comm(query.pid),
            });
        }
    }
    let links = uprobe_links();
    let holders = link_holders();
    for link in links {
        let holder = holders.get(&link.link_id).copied();
        if holder.is_some_and(|pid| exclude_pids.contains(&pid)) {
            continue;
        }
        // A perf link's semaphore reads 0 where the kernel does not report it.
        let (on_site, ref_ctr_offset) = match link.sites.iter().find(|s| s.0 == offset) {
            Some(&(_, ref_ctr)) if link.count.is_some() || ref_ctr != 0 => (true, Some(ref_ctr)),
            Some(_) => (true, None),
            None => (link.offset == Some(offset), None),
        };
        if !on_site || !same_file(&link.file, holder) {
            continue;
        }
        // A perf link's event is usually also held open by its tool: seen above.
        if out.iter().any(|h: &SiteHolder| h.prog_id == link.prog_id) {
            continue;
        }
        out.push(SiteHolder {
            prog_id: link.prog_id,
            name: String::new(),
            kind: link.kind,
            ref_ctr_offset,
            holder_pid: holder,
            holder_comm: holder.and_then(comm),
        });
    }
    if !out.is_empty() {
        let names = program_stats();
        for holder in &mut out {
            if let Some(stats) = names.iter().find(|s| s.id == holder.prog_id) {
                holder.name = stats.name.clone();
            }
        }
    }
    out
}

/// The rest of a path that names a file through the process that uses it
/// (`/proc/self/fd/9`, as probetop itself attaches): it means nothing in another process.
fn relative_to_process(file: &str) -> Option<&str> {
    file.strip_prefix("/proc/self/")
        .or_else(|| file.strip_prefix("/proc/thread-self/"))
}

/// `file` as process `holder` sees it; `None` when it names a file only within a
/// process that is not known.
fn in_process(file: &str, holder: Option<u32>) -> Option<PathBuf> {
    match relative_to_process(file) {
        Some(rest) => holder.map(|pid| procfs::file(pid, rest)),
        None => Some(PathBuf::from(file)),
    }
}

/// `file` for a reader: a process-relative path replaced by the file it names there.
fn readable(file: &str, holder: Option<u32>) -> String {
    if relative_to_process(file).is_none() {
        return file.to_string();
    }
    in_process(file, holder)
        .and_then(|path| fs::read_link(path).ok())
        .map_or_else(|| file.to_string(), |p| p.display().to_string())
}

/// Which process holds each BPF link open (from /proc/PID/fdinfo's `link_id:`).
fn link_holders() -> HashMap<u32, u32> {
    let mut holders = HashMap::new();
    for pid in procfs::all_pids() {
        let Ok(infos) = procfs::fdinfos(pid) else {
            continue;
        };
        for info in infos {
            for id in info
                .lines()
                .filter_map(|l| l.strip_prefix("link_id:"))
                .filter_map(|id| id.trim().parse::<u32>().ok())
            {
                holders.entry(id).or_insert(pid);
            }
        }
    }
    holders
}

/// The other programs on the target's probes over one run.
pub(crate) struct Others {
    programs: Vec<OtherProgram>,
    before: Vec<ProgramStats>,
    stats_on: bool,
    _guard: Option<StatsGuard>,
}

impl Others {
    /// Finds them and, if stats are on (or `enable_stats` turns them on), takes the
    /// run counts as the window opens.
    pub(crate) fn start(pid: u32, enable_stats: bool) -> Self {
        let guard = if enable_stats {
            match StatsGuard::enable() {
                Ok(guard) => Some(guard),
                Err(e) => {
                    sys::say(&format!(
                        "probetop: cannot turn the kernel's BPF statistics on: {e}"
                    ));
                    None
                }
            }
        } else {
            None
        };
        // The sysctl does not show stats turned on through an enable fd.
        let stats_on = guard.is_some() || stats_enabled();
        let me = std::process::id();
        let programs = find(pid, &[me], &programs_held_by(me));
        Self {
            programs,
            before: if stats_on {
                program_stats()
            } else {
                Vec::new()
            },
            stats_on,
            _guard: guard,
        }
    }

    /// The programs with their runs over the window (stats on), turning stats off
    /// again if this turned them on.
    pub(crate) fn finish(mut self) -> Vec<OtherProgram> {
        if self.stats_on {
            apply_stats(&mut self.programs, &self.before, &program_stats());
        }
        self.programs
    }
}

/// Lines for stderr; empty when there are none.
pub(crate) fn render(programs: &[OtherProgram]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if programs.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "probetop: {} other BPF program{} on probes of objects the target maps:",
        programs.len(),
        if programs.len() == 1 { "" } else { "s" }
    );
    for p in programs.iter().take(MAX_LISTED) {
        let mut line = format!("  prog {} {:?} {}", p.prog_id, p.name, p.kind);
        let _ = write!(line, " {}", p.file);
        match p.offsets.as_slice() {
            [one] => {
                let _ = write!(line, "+{one:#x}");
            }
            many => {
                let _ = write!(
                    line,
                    " ({} offsets)",
                    p.count.map_or(many.len(), |c| c as usize)
                );
            }
        }
        if let Some(pid) = p.holder_pid {
            let _ = write!(line, " held by pid {pid}");
            if let Some(comm) = &p.holder_comm {
                let _ = write!(line, " ({comm})");
            }
        }
        match (p.run_count, p.avg_run_ns) {
            (Some(runs), Some(avg)) => {
                let _ = write!(
                    line,
                    ": {runs} runs, {avg:.0} ns per run (its program only)"
                );
            }
            (Some(runs), None) => {
                let _ = write!(line, ": {runs} runs");
            }
            _ if p.unloaded => {
                line.push_str(": unloaded before the end (its tool exited), runs not known")
            }
            _ => line.push_str(": run counts need --bpf-stats"),
        }
        let _ = writeln!(out, "{line}");
    }
    if programs.len() > MAX_LISTED {
        let _ = writeln!(
            out,
            "  and {} more (all of them in the JSON export's cost.other_bpf_programs)",
            programs.len() - MAX_LISTED
        );
    }
    out
}

/// Programs listed on stderr; the rest are counted (a host running bpftrace on a
/// whole library can have thousands).
const MAX_LISTED: usize = 20;

/// One program's cumulative statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProgramStats {
    pub id: u32,
    pub name: String,
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// Every loaded program's statistics (zero while stats are off).
pub(crate) fn program_stats() -> Vec<ProgramStats> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| ProgramStats {
            id: p.id(),
            name: p.name_as_str().unwrap_or_default().to_string(),
            run_count: p.run_count(),
            run_time_ns: u64::try_from(p.run_time().as_nanos()).unwrap_or(u64::MAX),
        })
        .collect()
}

/// Sets each program's runs and run time to what happened since `before`.
pub(crate) fn apply_stats(
    programs: &mut [OtherProgram],
    before: &[ProgramStats],
    after: &[ProgramStats],
) {
    for program in programs {
        let Some(now) = after.iter().find(|s| s.id == program.prog_id) else {
            program.unloaded = true;
            continue;
        };
        let then = before.iter().find(|s| s.id == program.prog_id);
        let runs = now.run_count - then.map_or(0, |t| t.run_count.min(now.run_count));
        let time = now.run_time_ns - then.map_or(0, |t| t.run_time_ns.min(now.run_time_ns));
        program.run_count = Some(runs);
        program.run_time_ns = Some(time);
        program.avg_run_ns = (runs > 0).then(|| time as f64 / runs as f64);
    }
}

/// Ids of the BPF programs process `pid` holds open (from /proc/PID/fdinfo).
pub(crate) fn programs_held_by(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    let Ok(infos) = procfs::fdinfos(pid) else {
        return ids;
    };
    for info in infos {
        ids.extend(
            info.lines()
                .filter_map(|l| l.strip_prefix("prog_id:"))
                .filter_map(|id| id.trim().parse::<u32>().ok()),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn comm(pid: u32) -> Option<String> {
    procfs::comm(pid).ok().map(|c| c.trim().to_string())
}

/// A uprobe perf event with a BPF program, as `BPF_TASK_FD_QUERY` describes it.
struct FdQuery {
    pid: u32,
    prog_id: u32,
    kind: &'static str,
    file: String,
    offset: u64,
}

const BPF_FD_TYPE_UPROBE: u32 = 4;
const BPF_FD_TYPE_URETPROBE: u32 = 5;
const BPF_LINK_TYPE_PERF_EVENT: u32 = 7;
const BPF_LINK_TYPE_UPROBE_MULTI: u32 = 12;
const BPF_PERF_EVENT_UPROBE: u32 = 1;
const BPF_PERF_EVENT_URETPROBE: u32 = 2;
const PATH_MAX: usize = 4096;
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

/// `union bpf_attr` for `BPF_TASK_FD_QUERY`.
#[repr(C)]
#[derive(Default)]
struct TaskFdQueryAttr {
    pid: u32,
    fd: u32,
    flags: u32,
    buf_len: u32,
    buf: u64,
    prog_id: u32,
    fd_type: u32,
    probe_offset: u64,
    probe_addr: u64,
}

/// Every uprobe perf event with a BPF program held by a process not in `exclude`.
fn perf_event_queries(exclude: &[u32]) -> Vec<FdQuery> {
    let mut out = Vec::new();
    for pid in procfs::all_pids() {
        if exclude.contains(&pid) {
            continue;
        }
        let Ok(fds) = procfs::fds(pid) else {
            continue;
        };
        for (fd, link) in fds {
            if link.is_none_or(|l| l.as_os_str() != "anon_inode:[perf_event]") {
                continue;
            }
            let mut buf = vec![0u8; PATH_MAX];
            let mut attr = TaskFdQueryAttr {
                pid,
                fd,
                buf_len: buf.len() as u32,
                buf: buf.as_mut_ptr() as u64,
                ..Default::default()
            };
            // SAFETY: attr is task_fd_query's union bpf_attr; the buffer it points to
            // is `buf_len` bytes, alive for the call, and the kernel writes at most that.
            if unsafe { sys::bpf::call(sys::bpf::TASK_FD_QUERY, &mut attr) }.is_err() {
                // No program on it, or not a probe: nothing to report.
                continue;
            }
            let kind = match attr.fd_type {
                BPF_FD_TYPE_UPROBE => "uprobe",
                BPF_FD_TYPE_URETPROBE => "uretprobe",
                _ => continue,
            };
            out.push(FdQuery {
                pid,
                prog_id: attr.prog_id,
                kind,
                file: c_string(&buf),
                offset: attr.probe_offset,
            });
        }
    }
    out
}

fn c_string(buf: &[u8]) -> String {
    CStr::from_bytes_until_nul(buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A uprobe link.
struct UprobeLink {
    link_id: u32,
    prog_id: u32,
    kind: &'static str,
    file: String,
    offset: Option<u64>,
    count: Option<u32>,
    only_pid: Option<u32>,
    /// Every offset with its `ref_ctr_offset`.
    sites: Vec<(u64, u64)>,
    returns: bool,
}

/// `struct bpf_link_info` is at most this large on the kernels probetop supports; a
/// larger buffer is fine as long as its tail is zero.
const LINK_INFO_SIZE: usize = 256;

fn uprobe_links() -> Vec<UprobeLink> {
    let mut out = Vec::new();
    let mut id = 0u32;
    while let Ok(next) = sys::bpf::link_next_id(id) {
        id = next;
        let Ok(fd) = sys::bpf::link_fd_by_id(id) else {
            // Gone meanwhile, or not ours to open.
            continue;
        };
        if let Some(link) = describe_link(&fd) {
            out.push(link);
        }
    }
    out
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `info`; false on failure.
///
/// # Safety
/// Every pointer put into `info` (a path or offsets buffer) is alive for the call and at
/// least as long as the length put beside it.
unsafe fn link_info(fd: &OwnedFd, info: &mut [u8; LINK_INFO_SIZE]) -> bool {
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: LINK_INFO_SIZE as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: attr is obj_get_info_by_fd's union bpf_attr, pointing to `info`, of the
    // length it gives; the pointers in `info` are the caller's contract.
    unsafe { sys::bpf::call(sys::bpf::OBJ_GET_INFO_BY_FD, &mut attr) }.is_ok()
}

fn u32_at(info: &[u8], at: usize) -> u32 {
    info.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

fn u64_at(info: &[u8], at: usize) -> u64 {
    info.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

fn put_u64(info: &mut [u8], at: usize, value: u64) {
    info[at..at + 8].copy_from_slice(&value.to_ne_bytes());
}

fn put_u32(info: &mut [u8], at: usize, value: u32) {
    info[at..at + 4].copy_from_slice(&value.to_ne_bytes());
}

/// Reads a link's type, and for uprobe links where they sit. Offsets follow
/// `struct bpf_link_info` (include/uapi/linux/bpf.h): type, id, prog_id, then the
/// union at 16.
fn describe_link(fd: &OwnedFd) -> Option<UprobeLink> {
    let mut info = [0u8; LINK_INFO_SIZE];
    // SAFETY: `info` holds no pointer.
    if !unsafe { link_info(fd, &mut info) } {
        return None;
    }
    let link_type = u32_at(&info, 0);
    let link_id = u32_at(&info, 4);
    let prog_id = u32_at(&info, 8);
    let mut path = vec![0u8; PATH_MAX];
    match link_type {
        BPF_LINK_TYPE_PERF_EVENT => {
            // perf_event: { type @16, pad, uprobe { file_name @24, name_len @32,
            // offset @36, cookie @40, ref_ctr_offset @48 } }
            let mut info = [0u8; LINK_INFO_SIZE];
            put_u64(&mut info, 24, path.as_mut_ptr() as u64);
            put_u32(&mut info, 32, path.len() as u32);
            // SAFETY: `path` is alive across the call, of the length put beside it.
            if !unsafe { link_info(fd, &mut info) } {
                return None;
            }
            let kind = match u32_at(&info, 16) {
                BPF_PERF_EVENT_UPROBE => "uprobe",
                BPF_PERF_EVENT_URETPROBE => "uretprobe",
                _ => return None,
            };
            let offset = u64::from(u32_at(&info, 36));
            Some(UprobeLink {
                link_id,
                prog_id,
                kind,
                file: c_string(&path),
                offset: Some(offset),
                count: None,
                only_pid: None,
                sites: vec![(offset, u64_at(&info, 48))],
                returns: kind == "uretprobe",
            })
        }
        BPF_LINK_TYPE_UPROBE_MULTI => {
            // uprobe_multi: { path @16, offsets @24, ref_ctr_offsets @32, cookies @40,
            // path_size @48, count @52, flags @56, pid @60 }
            let mut info = [0u8; LINK_INFO_SIZE];
            put_u64(&mut info, 16, path.as_mut_ptr() as u64);
            put_u32(&mut info, 48, path.len() as u32);
            // SAFETY: `path` is alive across the call, of the length put beside it.
            if !unsafe { link_info(fd, &mut info) } {
                return None;
            }
            let count = u32_at(&info, 52);
            // Again for the offsets, now that the count is known.
            let mut offsets = vec![0u64; count as usize];
            let mut ref_ctrs = vec![0u64; count as usize];
            let mut with_offsets = [0u8; LINK_INFO_SIZE];
            put_u64(&mut with_offsets, 16, path.as_mut_ptr() as u64);
            put_u32(&mut with_offsets, 48, path.len() as u32);
            put_u64(&mut with_offsets, 24, offsets.as_mut_ptr() as u64);
            put_u64(&mut with_offsets, 32, ref_ctrs.as_mut_ptr() as u64);
            put_u32(&mut with_offsets, 52, count);
            // SAFETY: `path`, `offsets` and `ref_ctrs` are alive across the call, of the
            // lengths put beside them (`count` u64 values each).
            let read = count > 0 && unsafe { link_info(fd, &mut with_offsets) };
            let offset = read.then(|| offsets.first().copied()).flatten();
            let sites = if read {
                offsets.into_iter().zip(ref_ctrs).collect()
            } else {
                Vec::new()
            };
            Some(UprobeLink {
                link_id,
                prog_id,
                kind: "uprobe_multi",
                file: c_string(&path),
                offset,
                count: Some(count),
                only_pid: Some(u32_at(&info, 60)),
                sites,
                returns: u32_at(&with_offsets, 56) & BPF_F_UPROBE_MULTI_RETURN != 0,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Program `id`, a uprobe at /bin/x+0x10, nothing measured yet.
    fn program(id: u32) -> OtherProgram {
        OtherProgram {
            prog_id: id,
            name: "p".into(),
            kind: "uprobe",
            file: "/bin/x".into(),
            offsets: vec![0x10],
            count: None,
            only_pid: None,
            holder_pid: None,
            holder_comm: None,
            run_count: None,
            run_time_ns: None,
            avg_run_ns: None,
            sites: Vec::new(),
            returns: false,
            unloaded: false,
        }
    }

    #[test]
    fn stats_deltas() {
        let mut programs = vec![program(7)];
        let stat = |runs, time| ProgramStats {
            id: 7,
            name: "p".into(),
            run_count: runs,
            run_time_ns: time,
        };
        apply_stats(&mut programs, &[stat(10, 1000)], &[stat(110, 21_000)]);
        assert_eq!(programs[0].run_count, Some(100));
        assert_eq!(programs[0].avg_run_ns, Some(200.0));
        // Its tool exited before the end: not "run counts need --bpf-stats".
        let mut gone = programs.clone();
        gone[0].run_count = None;
        gone[0].avg_run_ns = None;
        apply_stats(&mut gone, &[stat(10, 1000)], &[]);
        assert!(gone[0].unloaded);
        let text = render(&gone);
        assert!(text.contains("unloaded before the end"), "{text}");
        assert!(!text.contains("need --bpf-stats"), "{text}");
    }

    #[test]
    fn a_long_list_is_capped() {
        let many: Vec<OtherProgram> = (0..200).map(program).collect();
        let text = render(&many);
        assert!(
            text.starts_with("probetop: 200 other BPF programs"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1 + MAX_LISTED + 1, "{text}");
        assert!(
            text.ends_with(
                "and 180 more (all of them in the JSON export's cost.other_bpf_programs)\n"
            ),
            "{text}"
        );
        assert_eq!(render(&many[..MAX_LISTED]).lines().count(), 1 + MAX_LISTED);
    }

    #[test]
    fn process_relative_paths_resolve_in_their_process() {
        assert_eq!(in_process("/proc/self/fd/9", None), None);
        assert_eq!(
            in_process("/proc/self/fd/9", Some(42)),
            Some(PathBuf::from("/proc/42/fd/9"))
        );
        assert_eq!(
            in_process("/usr/lib/libc.so.6", None),
            Some(PathBuf::from("/usr/lib/libc.so.6"))
        );
        let me = std::process::id();
        assert_eq!(
            readable("/proc/self/exe", Some(me)),
            std::fs::read_link("/proc/self/exe")
                .expect("own exe")
                .display()
                .to_string()
        );
    }

    #[test]
    fn task_fd_query_attr_layout() {
        // include/uapi/linux/bpf.h: buf at 16, prog_id at 24, probe_offset at 32.
        assert_eq!(std::mem::offset_of!(TaskFdQueryAttr, buf), 16);
        assert_eq!(std::mem::offset_of!(TaskFdQueryAttr, prog_id), 24);
        assert_eq!(std::mem::offset_of!(TaskFdQueryAttr, probe_offset), 32);
        assert_eq!(size_of::<TaskFdQueryAttr>(), 48);
    }
}
