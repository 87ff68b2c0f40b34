//! Probes other tools put on the target: where each one sits (file, offset, entry or
//! return, its USDT semaphore), who owns it, and whether its breakpoint is armed in the
//! target, so probetop can count its hits with a probe of its own on the same site.
//!
//! Found three ways: BPF programs on uprobe perf events and uprobe links
//! ([`super::bpf_stats::find`]: bpftrace, BCC, libbpf tools, other probetops), and
//! tracefs `uprobe_events` (`perf probe`, a line written by hand: no BPF at all).
//!
//! A probe found this way may not fire in the target: a perf event's process filter is
//! not visible from outside (bpftrace `-p` another process). What is visible is the
//! breakpoint itself: the kernel writes it into the process's copy of the page, so the
//! target's byte at the site differs from the file's exactly when some probe is armed
//! there for this process ([`armed_in`]). probetop counts only armed sites, so its
//! counting probe never adds a trap the target did not already take.

use std::{
    fs,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::bpf_stats;
use crate::sys::{
    maps::{FileId, MapEntry, read_maps},
    procfs, tracefs,
};

/// Who put a probe there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Owner {
    /// The process holding it (`None` for a tracefs event, which no process holds).
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// `bpftrace`, `bcc`, `python`, `perf`, `probetop`, `tracefs`, or the holder's
    /// comm when the tool cannot be told.
    pub tool: String,
}

/// One probe of another tool on one site of a file the target maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherSite {
    pub owner: Owner,
    /// A return probe (its breakpoint is at the function's entry).
    pub returns: bool,
    /// The probed file, as probetop can open it.
    pub file: PathBuf,
    pub offset: u64,
    /// The USDT semaphore's file offset the owner registered (0: none or not told).
    pub ref_ctr_offset: u64,
    /// The BPF program run on each hit; `None` for a tracefs event.
    pub prog_id: Option<u32>,
    /// A tracefs event's `group/name`.
    pub event: Option<String>,
    /// A tracefs event's fetched arguments and the trace instances it is enabled in:
    /// what ftrace does on each hit beyond the bare record.
    pub shape: Option<EventShape>,
    /// probetop counts its hits (false: the kernel refused a counter on the site, so
    /// the row's hits are not counted).
    pub counted: bool,
}

/// What a tracefs uprobe event makes ftrace do on each hit, beyond a bare record in
/// one buffer: its fetched arguments, by what fetching each reads, and the trace
/// instances whose buffers each get the record (the arguments are fetched once a hit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventShape {
    /// Its fetched arguments.
    pub args: u32,
    /// Values read from registers or the kernel (`%di`, `$retval`, `\IMM`, `$comm`).
    pub registers: u32,
    /// Reads of the process's memory for non-string values (`+8(%sp)`, `@0x1000`,
    /// `$stack2`, each dereference of a nested `+0(+8(%di))`; an array's every element).
    pub memory_reads: u32,
    /// Strings read from the process's memory (`+0(%si):string`, `:ustring`).
    pub strings: u32,
    /// The trace instances it is enabled in (the top one counts), at least 1.
    pub instances: u32,
}

/// What the reports (a `--pid` run's probe rows, `--all`'s sites) carry of a tracefs
/// event's [`EventShape`], beside its owner: what ftrace's record was priced by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedShape {
    pub fetch_args: u32,
    pub instances: u32,
}

impl From<EventShape> for ReportedShape {
    fn from(shape: EventShape) -> Self {
        Self {
            fetch_args: shape.args,
            instances: shape.instances,
        }
    }
}

impl OtherSite {
    /// How it was put there, for reports.
    pub fn via(&self) -> &'static str {
        if self.prog_id.is_some() {
            "bpf"
        } else {
            "tracefs"
        }
    }
}

/// Every other tool's probe on an object `pid` maps, whether armed or not (see
/// [`armed_in`]); probetop's own programs excluded.
pub(crate) fn discover(pid: u32) -> Vec<OtherSite> {
    let me = std::process::id();
    let programs = bpf_stats::find(pid, &[me], &bpf_stats::programs_held_by(me));
    let maps = read_maps(pid).unwrap_or_default();
    let events = tracefs_events()
        .into_iter()
        .filter(|event| maps_file(&maps, &event.file))
        .collect();
    sites_of(&programs, events)
        .into_iter()
        .map(|(site, _)| site)
        .collect()
}

/// Every other tool's probe on the host, armed anywhere or not (`probetop --all`), each
/// with the one process a uprobe_multi link's filter limits it to.
pub(crate) fn discover_host() -> Vec<(OtherSite, Option<u32>)> {
    let me = std::process::id();
    let programs = bpf_stats::find_all(&[me], &bpf_stats::programs_held_by(me));
    sites_of(&programs, tracefs_events())
}

/// The sites of `programs` and tracefs `events`, with a link's process filter.
fn sites_of(
    programs: &[bpf_stats::OtherProgram],
    events: Vec<TracefsEvent>,
) -> Vec<(OtherSite, Option<u32>)> {
    let mut sites = Vec::new();
    let mut only = Vec::new();
    for program in programs {
        let owner = match program.holder_pid {
            Some(holder) => owner_of(holder),
            // A link no process holds open: a probetop's by its program's name (its
            // counters, as `probetop --all` makes them), else not known.
            None => Owner {
                pid: None,
                comm: None,
                tool: if is_probetops(&program.name) {
                    "probetop".into()
                } else {
                    "unknown".into()
                },
            },
        };
        for &(offset, ref_ctr_offset) in &program.sites {
            let site = OtherSite {
                owner: owner.clone(),
                returns: program.returns,
                file: PathBuf::from(&program.file),
                offset,
                ref_ctr_offset,
                prog_id: Some(program.prog_id),
                event: None,
                shape: None,
                counted: true,
            };
            if !sites.contains(&site) {
                sites.push(site);
                only.push(program.only_pid.filter(|&p| p != 0));
            }
        }
    }
    for event in events {
        // BCC's older path defines a tracefs event and attaches its program to it: the
        // BPF side is its owner unless ftrace is on too.
        let backs_bpf = sites.iter().any(|s| {
            s.prog_id.is_some()
                && s.offset == event.offset
                && s.returns == event.returns
                && same_file(&s.file, &event.file)
        });
        if backs_bpf && event.shape.instances == 0 {
            continue;
        }
        let tool = if event.group.starts_with("probe_") {
            "perf"
        } else {
            "tracefs"
        };
        sites.push(OtherSite {
            owner: Owner {
                pid: None,
                comm: None,
                tool: tool.into(),
            },
            returns: event.returns,
            file: event.file,
            offset: event.offset,
            ref_ctr_offset: event.ref_ctr_offset,
            prog_id: None,
            event: Some(format!("{}/{}", event.group, event.name)),
            shape: Some(EventShape {
                instances: event.shape.instances.max(1),
                ..event.shape
            }),
            counted: true,
        });
        only.push(None);
    }
    // Another probetop's probe on a site another tool probes too is most likely its
    // counter of that tool's probe: counting it would count the same hits twice.
    let counted_elsewhere = |site: &OtherSite, all: &[OtherSite]| {
        site.owner.tool == "probetop"
            && all.iter().any(|o| {
                o.owner.tool != "probetop"
                    && o.offset == site.offset
                    && same_file(&o.file, &site.file)
            })
    };
    let all = sites.clone();
    sites
        .into_iter()
        .zip(only)
        .filter(|(site, _)| !counted_elsewhere(site, &all))
        .collect()
}

/// Whether a BPF program's name is one of probetop's measuring programs (as loaded:
/// `probetop_uprobe`, or its uprobe_multi copies `ptm_*`).
fn is_probetops(name: &str) -> bool {
    name.starts_with("probetop_") || name.starts_with("ptm_")
}

/// Whether a breakpoint is armed in process `pid` at `offset` of `file`: its byte in
/// the process differs from the file's (an `int3`, or the call an optimized probe
/// became). `None` when it cannot be told (the file is not mapped executable there, or
/// either read fails).
pub(crate) fn armed_in(pid: u32, file: &Path, offset: u64) -> Option<bool> {
    armed_in_maps(pid, &read_maps(pid).ok()?, file, offset)
}

/// [`armed_in`] with `pid`'s maps read already (`probetop --all` reads each process's
/// once per look).
pub(crate) fn armed_in_maps(pid: u32, maps: &[MapEntry], file: &Path, offset: u64) -> Option<bool> {
    let id = FileId::of(file).ok()?;
    let entry = maps.iter().find(|m| {
        m.executable()
            && id.matches(m)
            && m.offset <= offset
            && offset < m.offset + (m.end - m.start)
    })?;
    let address = entry.start + (offset - entry.offset);
    let mut in_process = [0u8; 1];
    procfs::read_memory(pid, address, &mut in_process).ok()?;
    let mut on_disk = [0u8; 1];
    fs::File::open(file)
        .ok()?
        .read_exact_at(&mut on_disk, offset)
        .ok()?;
    Some(in_process != on_disk)
}

/// The USDT semaphore offset (`ref_ctr_offset`) the kernel holds for the site at
/// `offset` of `file`, as its log said when it last refused a probe there with another
/// (`ref_ctr_offset mismatch. inode: 0x.. offset: 0x.. ref_ctr_offset(old): 0x..`): the
/// kernel keeps one per site and tells it nowhere else (`BPF_TASK_FD_QUERY` does not).
/// `None` when the log holds no such line for the site.
pub(crate) fn held_semaphore(file: &Path, offset: u64) -> Option<u64> {
    let inode = fs::metadata(file).ok().map(|m| {
        use std::os::unix::fs::MetadataExt as _;
        m.ino()
    })?;
    held_in(&crate::sys::kmsg::messages().ok()?, inode, offset)
}

/// The last `ref_ctr_offset mismatch` line of `messages` about the site (`inode`,
/// `offset`): the semaphore offset the kernel holds there.
fn held_in(messages: &[String], inode: u64, offset: u64) -> Option<u64> {
    let site = format!("inode: {inode:#x} offset: {offset:#x} ");
    messages.iter().rev().find_map(|line| {
        let rest = line.strip_prefix("ref_ctr_offset mismatch. ")?;
        let held = rest.strip_prefix(site.as_str())?;
        let value = held
            .strip_prefix("ref_ctr_offset(old): 0x")?
            .split_whitespace()
            .next()?;
        u64::from_str_radix(value, 16).ok()
    })
}

/// Whether the kernel, counting a USDT semaphore at file offset `semaphore` of `file`,
/// would write nothing into process `pid`: it raises a semaphore only through a
/// private writable mapping of the file, and the offset is in none in `pid` nor in any
/// writable `PT_LOAD` segment of the file (that a later mapping could make one). What a
/// probe that joins another tool's site with that tool's stray offset must hold (Debian's
/// BCC 0.26 registers one at offset 6, in the ELF header). `false` when it cannot be told.
pub(crate) fn semaphore_writes_nothing(pid: u32, file: &Path, semaphore: u64) -> bool {
    let (Ok(id), Ok(maps)) = (FileId::of(file), read_maps(pid)) else {
        return false;
    };
    let mapped_writable = maps.iter().any(|m| {
        id.matches(m)
            && m.perms.as_bytes().get(1) == Some(&b'w')
            && m.offset <= semaphore
            && semaphore < m.offset + (m.end - m.start)
    });
    !mapped_writable && in_writable_segment(file, semaphore) == Some(false)
}

/// Whether file offset `offset` lies in a writable `PT_LOAD` segment of the ELF `file`;
/// `None` when its program headers cannot be read.
fn in_writable_segment(file: &Path, offset: u64) -> Option<bool> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    use std::io::Read as _;
    // The program headers sit near the start: the first MiB holds them in any ELF seen.
    let mut data = Vec::new();
    fs::File::open(file)
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut data)
        .ok()?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data.as_slice()).ok()?;
    let endian = header.endian().ok()?;
    let headers = header.program_headers(endian, data.as_slice()).ok()?;
    Some(headers.iter().any(|ph| {
        let start = ph.p_offset(endian);
        ph.p_type(endian) == object::elf::PT_LOAD
            && ph.p_flags(endian) & object::elf::PF_W != 0
            && start <= offset
            && offset < start.saturating_add(ph.p_filesz(endian))
    }))
}

/// Whether two paths name one file.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (FileId::of(a), FileId::of(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn maps_file(maps: &[MapEntry], file: &Path) -> bool {
    FileId::of(file).is_ok_and(|id| maps.iter().any(|m| id.matches(m)))
}

/// The owner of a probe held by process `pid`, the tool told from its name and
/// command line where it can be.
pub(crate) fn owner_of(pid: u32) -> Owner {
    let comm = procfs::comm(pid).ok().map(|c| c.trim().to_string());
    let cmdline = procfs::cmdline(pid).unwrap_or_default();
    Owner {
        pid: Some(pid),
        tool: tool_of(comm.as_deref().unwrap_or(""), &cmdline),
        comm,
    }
}

/// The tool a process is, from its comm and command line.
fn tool_of(comm: &str, cmdline: &[String]) -> String {
    let program = cmdline
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a))
        .unwrap_or("");
    if comm == "bpftrace" || program == "bpftrace" {
        return "bpftrace".into();
    }
    if comm.starts_with("probetop") || program == "probetop" {
        return "probetop".into();
    }
    if comm == "perf" || program == "perf" {
        return "perf".into();
    }
    // BCC's tools are Python scripts: `python3 /usr/sbin/funccount-bpfcc ...`.
    if cmdline
        .iter()
        .take(2)
        .any(|a| a.contains("bpfcc") || a.contains("/bcc/"))
    {
        return "bcc".into();
    }
    if program.starts_with("python") {
        return "python".into();
    }
    if comm.is_empty() {
        "unknown".into()
    } else {
        comm.into()
    }
}

/// One line of `uprobe_events`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TracefsEvent {
    group: String,
    name: String,
    returns: bool,
    file: PathBuf,
    offset: u64,
    ref_ctr_offset: u64,
    /// Its arguments as read from the definition; `instances` the trace instances it is
    /// enabled in (0: none, used by perf or BPF alone).
    shape: EventShape,
}

/// The uprobe events tracefs defines, with whether ftrace has each enabled.
fn tracefs_events() -> Vec<TracefsEvent> {
    let root = match tracefs::find_or_mount() {
        Ok(tracefs::Tracefs::Found(root) | tracefs::Tracefs::MountedNow(root)) => root,
        Err(_) => return Vec::new(),
    };
    let Ok(text) = tracefs::uprobe_events(root) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(parse_uprobe_event)
        .map(|mut event| {
            event.shape.instances = tracefs::enabled_instances(root, &event.group, &event.name);
            event
        })
        .collect()
}

/// `p:GROUP/NAME PATH:0xOFFSET[(0xREF_CTR)] [ARGS...]`, `r:` for returns.
fn parse_uprobe_event(line: &str) -> Option<TracefsEvent> {
    let mut words = line.split_whitespace();
    let head = words.next()?;
    let location = words.next()?;
    let (kind, event) = head.split_once(':')?;
    let returns = match kind.chars().next()? {
        'p' => false,
        'r' => true,
        _ => return None,
    };
    let (group, name) = event.split_once('/')?;
    let (path, rest) = location.rsplit_once(':')?;
    let (offset, ref_ctr) = match rest.split_once('(') {
        Some((offset, ref_ctr)) => (offset, Some(ref_ctr.trim_end_matches(')'))),
        None => (rest, None),
    };
    let hex = |text: &str| u64::from_str_radix(text.trim_start_matches("0x"), 16).ok();
    Some(TracefsEvent {
        group: group.into(),
        name: name.into(),
        returns,
        file: PathBuf::from(path),
        offset: hex(offset)?,
        ref_ctr_offset: match ref_ctr {
            Some(text) => hex(text)?,
            None => 0,
        },
        shape: words.fold(EventShape::default(), |mut shape, arg| {
            add_fetch_arg(&mut shape, arg);
            shape
        }),
    })
}

/// Counts one fetch argument of a uprobe event's definition (`NAME=FETCH[:TYPE]`, as
/// tracefs lists it) into `shape`: a string type reads a string where its last
/// dereference points; each other dereference (`+OFF(...)`), absolute address (`@`) or
/// stack slot (`$stack`) reads the process's memory once per element; anything else
/// is a register or a value the kernel has at hand.
fn add_fetch_arg(shape: &mut EventShape, arg: &str) {
    let fetch = arg.split_once('=').map_or(arg, |(_, fetch)| fetch);
    // The type follows the last ':' outside the fetch's parentheses and brackets.
    let (value, kind) = match fetch.rfind(':') {
        Some(at) if !fetch[at..].contains(')') => (&fetch[..at], &fetch[at + 1..]),
        _ => (fetch, ""),
    };
    let elements = kind
        .split_once('[')
        .and_then(|(_, n)| n.trim_end_matches(']').parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let derefs = value.matches('(').count() as u32;
    let reads = derefs
        + u32::from(value.contains('@'))
        + u32::from(value.starts_with("$stack") && value.len() > "$stack".len());
    shape.args += 1;
    if (kind == "string" || kind == "ustring") && reads > 0 {
        shape.strings += 1;
        // The last dereference is the string's read itself.
        shape.memory_reads += reads.saturating_sub(1);
    } else if reads > 0 {
        shape.memory_reads += reads * elements;
    } else {
        shape.registers += elements;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_held_semaphore_is_the_last_mismatch_on_the_site() {
        // As the kernel logged them (2026-11-27, BCC 0.26's funccount holding the site).
        let lines: Vec<String> = [
            "ref_ctr_offset mismatch. inode: 0x5ea628 offset: 0x1b40 ref_ctr_offset(old): 0x4 ref_ctr_offset(new): 0x0",
            "ref_ctr_offset mismatch. inode: 0x5ea630 offset: 0x15ea ref_ctr_offset(old): 0x6 ref_ctr_offset(new): 0x30a2",
            "something else",
            "ref_ctr_offset mismatch. inode: 0x5ea628 offset: 0x1b40 ref_ctr_offset(old): 0x6 ref_ctr_offset(new): 0x0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(held_in(&lines, 0x5ea628, 0x1b40), Some(6));
        assert_eq!(held_in(&lines, 0x5ea630, 0x15ea), Some(6));
        // Another site of the file, or another file: not told.
        assert_eq!(held_in(&lines, 0x5ea628, 0x1b4), None);
        assert_eq!(held_in(&lines, 0x5ea62, 0x1b40), None);
    }

    #[test]
    fn a_semaphore_in_a_writable_segment_is_never_joined() {
        // This test binary: its ELF header is read-only, its .data writable.
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        assert_eq!(in_writable_segment(&exe, 6), Some(false));
        let pid = std::process::id();
        assert!(semaphore_writes_nothing(pid, &exe, 6));
        // The last file byte of the writable segment (.data, where semaphores live).
        let data = std::fs::read(&exe).expect("read own exe");
        let elf = crate::resolve::elf::ElfImage::parse(&data).expect("own ELF");
        let last = elf
            .segments
            .iter()
            .filter(|s| !s.executable && s.filesz > 0)
            .map(|s| s.offset + s.filesz - 1)
            .max()
            .expect("a data segment");
        assert_eq!(in_writable_segment(&exe, last), Some(true));
        assert!(!semaphore_writes_nothing(pid, &exe, last));
    }

    #[test]
    fn uprobe_events_lines_parse() {
        let event = parse_uprobe_event(
            "p:probe_workload/work_unit /work/fixtures/build/workload:0x0000000000001189",
        )
        .expect("entry");
        assert_eq!(event.group, "probe_workload");
        assert_eq!(event.name, "work_unit");
        assert!(!event.returns);
        assert_eq!(event.file, PathBuf::from("/work/fixtures/build/workload"));
        assert_eq!(event.offset, 0x1189);
        assert_eq!(event.ref_ctr_offset, 0);
        let event =
            parse_uprobe_event("r:uprobes/ret /usr/lib/x.so:0x00000000000004d0(0x4010) arg1=%ax")
                .expect("return with a semaphore");
        assert!(event.returns);
        assert_eq!(event.offset, 0x4d0);
        assert_eq!(event.ref_ctr_offset, 0x4010);
        assert_eq!(
            event.shape,
            EventShape {
                args: 1,
                registers: 1,
                ..Default::default()
            }
        );
        assert_eq!(parse_uprobe_event("x:bad/line /a:0x1"), None);
        assert_eq!(parse_uprobe_event(""), None);
    }

    #[test]
    fn fetched_arguments_are_counted_by_what_they_read() {
        // As tracefs lists them (the issue's example, and each fetch form of a uprobe).
        let shape = |args: &str| {
            parse_uprobe_event(&format!("p:g/e /bin/x:0x0000000000001189 {args}"))
                .expect("parses")
                .shape
        };
        let issue = shape("arg1=%di:u64 s=+0(%si):string");
        assert_eq!(
            (
                issue.args,
                issue.registers,
                issue.memory_reads,
                issue.strings
            ),
            (2, 1, 0, 1)
        );
        let forms = shape(
            "a=%ax:x32 b=+8(%sp):u64 c=+0(+16(%di)):s32 d=@0x4010:u8 e=$stack2 f=$stack g=$comm h=\\7 i=+0(%si):u8[4] j=+0(+8(%di)):ustring",
        );
        assert_eq!(forms.args, 10);
        // a, f, g, h
        assert_eq!(forms.registers, 4);
        // b 1, c 2, d 1, e 1, i 4 elements, j's pointer 1
        assert_eq!(forms.memory_reads, 10);
        assert_eq!(forms.strings, 1);
        assert_eq!(shape("").args, 0);
    }

    #[test]
    fn tools_are_told_from_their_command_lines() {
        let line = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert_eq!(
            tool_of("bpftrace", &line(&["bpftrace", "-e", "x"])),
            "bpftrace"
        );
        assert_eq!(
            tool_of(
                "funccount-bpfc",
                &line(&["/usr/bin/python3", "/usr/sbin/funccount-bpfcc", "f"])
            ),
            "bcc"
        );
        assert_eq!(tool_of("python3", &line(&["python3", "mine.py"])), "python");
        assert_eq!(tool_of("perf", &line(&["perf", "record"])), "perf");
        assert_eq!(tool_of("agent", &line(&["/opt/agent"])), "agent");
    }

    #[test]
    fn an_unprobed_site_is_not_armed() {
        // This test's own code is mapped executable and carries no breakpoint.
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let maps = read_maps(std::process::id()).expect("own maps");
        let id = FileId::of(&exe).expect("id");
        let text = maps
            .iter()
            .find(|m| m.executable() && id.matches(m))
            .expect("own text mapped");
        assert_eq!(
            armed_in(std::process::id(), &exe, text.offset + 16),
            Some(false)
        );
    }
}
