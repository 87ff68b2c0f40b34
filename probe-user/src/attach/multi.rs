//! uprobe_multi links (Linux 6.6+): one BPF link binds a program to many probe points
//! of one file, and one close detaches them all.
//!
//! Closing a link waits for the kernel's grace period (`synchronize_rcu_tasks_trace`,
//! ~150-220 ms here) whatever it holds, so a link per probe point made exiting with
//! ~500 probes take over a minute; a link per (file, program) makes it a few closes.
//!
//! A program can only be linked this way if it was loaded with `expected_attach_type
//! = BPF_TRACE_UPROBE_MULTI`, and a program loaded so cannot be bound to a perf event.
//! aya 0.14 loads uprobe programs without an expected attach type and has no section
//! name for multi programs (`uprobe.multi` does not parse), so the multi copies are
//! loaded here: the same eBPF object is parsed again with aya-obj (the crate aya loads
//! with), its map references are relocated to the maps aya created (so both copies
//! share every map), and the instructions are loaded with a raw `BPF_PROG_LOAD`. No
//! BTF goes with them: the kernel needs none for kprobe-type programs, and
//! `bpf_get_attach_cookie` works in them as in the perf-event copies.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    io,
    os::{
        fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use aya::{Ebpf, maps::Map};
use aya_obj::generated::{bpf_insn, bpf_prog_info};

use super::AttachError;
use crate::sys;

/// `BPF_PROG_TYPE_KPROBE`: uprobe programs are kprobe programs to the kernel.
const BPF_PROG_TYPE_KPROBE: u32 = 2;
/// `enum bpf_attach_type`'s `BPF_TRACE_UPROBE_MULTI`.
pub(super) const BPF_TRACE_UPROBE_MULTI: u32 = 48;
/// `uprobe_multi.flags`: the points are function returns.
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

/// `union bpf_attr`'s `link_create` for a uprobe_multi link.
#[repr(C)]
struct LinkCreateUprobeMulti {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    /// Must be 0; the link's own flags are `uprobe_flags`.
    flags: u32,
    /// NUL-terminated path of the probed file.
    path: u64,
    /// `cnt` file offsets.
    offsets: u64,
    /// `cnt` file offsets of USDT semaphores (0: none), or null.
    ref_ctr_offsets: u64,
    /// `cnt` cookies, read back with `bpf_get_attach_cookie`.
    cookies: u64,
    cnt: u32,
    uprobe_flags: u32,
    /// Fire only in this process (0: in every process).
    pid: u32,
    _pad: u32,
}

/// `union bpf_attr`'s `prog_load` up to `expected_attach_type`; the kernel zero-fills
/// the rest.
/// (also the kernel-feature probe's, in `kernel.rs`).
#[repr(C)]
pub(super) struct ProgLoad {
    pub(super) prog_type: u32,
    pub(super) insn_cnt: u32,
    pub(super) insns: u64,
    pub(super) license: u64,
    pub(super) log_level: u32,
    pub(super) log_size: u32,
    pub(super) log_buf: u64,
    pub(super) kern_version: u32,
    pub(super) prog_flags: u32,
    pub(super) prog_name: [u8; 16],
    pub(super) prog_ifindex: u32,
    pub(super) expected_attach_type: u32,
}

/// `union bpf_attr`'s `info`.
#[repr(C)]
struct ObjGetInfo {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The first kernel whose uprobe_multi pid filter holds for every thread of the
/// process (before, it matched the thread id, missing the other threads' hits).
const PID_FILTER_FIXED: (u8, u8) = (6, 10);

/// One program's instructions, relocated against the maps aya created.
struct Relocated {
    instructions: Vec<bpf_insn>,
    license: CString,
}

/// The copies of probetop's programs loaded for uprobe_multi links.
pub(super) struct Programs {
    relocated: HashMap<&'static str, Relocated>,
    loaded: HashMap<&'static str, OwnedFd>,
}

impl Programs {
    /// Relocates `names` from `object` against the maps of `ebpf` (which loaded the same
    /// object, and must still hold every map); nothing is loaded yet.
    pub(super) fn relocate(
        ebpf: &Ebpf,
        object: &[u8],
        names: &[&'static str],
    ) -> Result<Self, AttachError> {
        let relocation = |e: &dyn std::fmt::Display| AttachError::Relocation(e.to_string());
        let mut obj = aya_obj::Object::parse(object).map_err(|e| relocation(&e))?;
        if obj.has_btf_relocations() {
            let btf = aya::Btf::from_sys_fs().map_err(|e| relocation(&e))?;
            obj.relocate_btf(&btf).map_err(|e| relocation(&e))?;
        }
        let mut fds = HashMap::new();
        for (name, map) in ebpf.maps() {
            let fd = map_fd(map).ok_or_else(|| {
                AttachError::Relocation(format!("map {name} is of a type probetop does not use"))
            })?;
            fds.insert(name.to_string(), fd.as_raw_fd());
        }
        let maps = std::mem::take(&mut obj.maps);
        let mut missing = maps.keys().filter(|name| !fds.contains_key(*name));
        if let Some(name) = missing.next() {
            return Err(AttachError::Relocation(format!(
                "map {name} is no longer held by the loaded object"
            )));
        }
        let text_sections: HashSet<usize> =
            obj.functions.keys().map(|(section, _)| *section).collect();
        obj.relocate_maps(
            maps.iter()
                .filter_map(|(name, map)| Some((name.as_str(), *fds.get(name)?, map))),
            &text_sections,
        )
        .map_err(|e| relocation(&e))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| relocation(&e))?;
        obj.sanitize_functions(aya::features());
        let mut relocated = HashMap::new();
        for &name in names {
            let program = obj
                .programs
                .get(name)
                .ok_or(AttachError::MissingProgram(name))?;
            let function = obj
                .functions
                .get(&program.function_key())
                .ok_or(AttachError::MissingProgram(name))?;
            relocated.insert(
                name,
                Relocated {
                    instructions: function.instructions.clone(),
                    license: program.license.clone(),
                },
            );
        }
        Ok(Self {
            relocated,
            loaded: HashMap::new(),
        })
    }

    /// The multi copy of program `name`, loaded on first use.
    pub(super) fn program(&mut self, name: &'static str) -> Result<BorrowedFd<'_>, AttachError> {
        if !self.loaded.contains_key(name) {
            let relocated = self
                .relocated
                .get(name)
                .ok_or(AttachError::MissingProgram(name))?;
            let fd = load_program(name, relocated)?;
            self.loaded.insert(name, fd);
        }
        self.loaded
            .get(name)
            .map(|fd| fd.as_fd())
            .ok_or(AttachError::MissingProgram(name))
    }

    /// The multi copy of `name` if it is loaded.
    pub(super) fn loaded(&self, name: &str) -> Option<BorrowedFd<'_>> {
        self.loaded.get(name).map(|fd| fd.as_fd())
    }
}

/// The file descriptor of a map of the kinds probetop's object has.
fn map_fd(map: &Map) -> Option<BorrowedFd<'_>> {
    match map {
        Map::Array(data)
        | Map::PerCpuArray(data)
        | Map::RingBuf(data)
        | Map::HashMap(data)
        | Map::PerCpuHashMap(data)
        | Map::LruHashMap(data)
        | Map::PerCpuLruHashMap(data) => Some(data.fd().as_fd()),
        _ => None,
    }
}

/// The kernel's name of a multi copy: the original's (as far as 16 bytes go) would
/// not tell the two apart in `bpftool prog`.
fn kernel_name(name: &str) -> [u8; 16] {
    let short = name.strip_prefix("probetop_").unwrap_or(name);
    let mut out = [0u8; 16];
    for (slot, byte) in out.iter_mut().zip(format!("ptm_{short}").bytes().take(15)) {
        *slot = byte;
    }
    out
}

/// Loads one relocated program for uprobe_multi links; a refusal carries the
/// verifier's log.
fn load_program(name: &'static str, relocated: &Relocated) -> Result<OwnedFd, AttachError> {
    let attempt = |log: &mut [u8]| -> io::Result<OwnedFd> {
        let attr = ProgLoad {
            prog_type: BPF_PROG_TYPE_KPROBE,
            insn_cnt: relocated.instructions.len() as u32,
            insns: relocated.instructions.as_ptr() as u64,
            license: relocated.license.as_ptr() as u64,
            log_level: u32::from(!log.is_empty()),
            log_size: log.len() as u32,
            log_buf: if log.is_empty() {
                0
            } else {
                log.as_mut_ptr() as u64
            },
            kern_version: 0,
            prog_flags: 0,
            prog_name: kernel_name(name),
            prog_ifindex: 0,
            expected_attach_type: BPF_TRACE_UPROBE_MULTI,
        };
        // SAFETY: attr is prog_load's prefix of union bpf_attr; the instructions, license
        // and log buffer it points to outlive the call, and the log's size is its own.
        unsafe { sys::bpf::call_fd(sys::bpf::PROG_LOAD, &attr) }
    };
    attempt(&mut []).or_else(|_| {
        // Again with the verifier's log, for the error.
        let mut log = vec![0u8; 1 << 20];
        attempt(&mut log).map_err(|source| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            AttachError::MultiProgram {
                name,
                source,
                log: tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
            }
        })
    })
}

/// One probe point of a link.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub offset: u64,
    /// File offset of the USDT semaphore the kernel counts, 0 for none.
    pub ref_ctr_offset: u64,
    pub cookie: u64,
}

/// Binds `program` (a multi copy) to every point of `path` with one link, firing in
/// process `pid` only (0: in all). The kernel refuses the whole link if it refuses one
/// point.
pub(super) fn create_link(
    program: BorrowedFd<'_>,
    path: &Path,
    points: &[Point],
    retprobe: bool,
    pid: u32,
) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_bytes())?;
    let offsets: Vec<u64> = points.iter().map(|p| p.offset).collect();
    let ref_ctrs: Vec<u64> = points.iter().map(|p| p.ref_ctr_offset).collect();
    let cookies: Vec<u64> = points.iter().map(|p| p.cookie).collect();
    let attr = LinkCreateUprobeMulti {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: BPF_TRACE_UPROBE_MULTI,
        flags: 0,
        path: path.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        ref_ctr_offsets: if ref_ctrs.iter().all(|&r| r == 0) {
            0
        } else {
            ref_ctrs.as_ptr() as u64
        },
        cookies: cookies.as_ptr() as u64,
        cnt: points.len() as u32,
        uprobe_flags: if retprobe {
            BPF_F_UPROBE_MULTI_RETURN
        } else {
            0
        },
        pid,
        _pad: 0,
    };
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_LINK_CREATE, of the
    // size passed; the path and the three arrays of `cnt` u64 it points to outlive the
    // call, and the kernel copies them before returning.
    unsafe { sys::bpf::call_fd(sys::bpf::LINK_CREATE, &attr) }
}

/// Whether this kernel makes uprobe_multi links for `program` (a multi copy): a link on
/// `/` gets as far as the path check (EBADF: not a regular file), where a kernel without
/// them refuses the attach type (EINVAL). Nothing is attached either way, so nothing
/// waits for a grace period.
pub(super) fn kernel_supports(program: BorrowedFd<'_>) -> io::Result<()> {
    let point = Point {
        offset: 0,
        ref_ctr_offset: 0,
        cookie: 0,
    };
    match create_link(program, Path::new("/"), &[point], false, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => Ok(()),
        Err(e) => Err(e),
        // Not expected; the link is closed at once.
        Ok(_) => Ok(()),
    }
}

/// The kernel's run count and run time (ns) of a program.
pub(super) fn run_stats(program: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    // SAFETY: bpf_prog_info is plain integers, for which all zeroes is a valid value.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = ObjGetInfo {
        bpf_fd: program.as_raw_fd() as u32,
        info_len: size_of::<bpf_prog_info>() as u32,
        info: &mut info as *mut bpf_prog_info as u64,
    };
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_OBJ_GET_INFO_BY_FD, of
    // the size passed; it points to a bpf_prog_info of the length it declares, which
    // the kernel fills (up to that length) before returning.
    unsafe { sys::bpf::call(sys::bpf::OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok((info.run_cnt, info.run_time_ns))
}

/// Why a uprobe_multi link was not made.
pub(super) enum Refusal {
    /// The kernel refused it.
    Kernel(io::Error),
    /// The program could not be had.
    Program(AttachError),
}

/// Whether the kernel refused a uprobe_multi link for what all its points share (the
/// process, the file, the rights) rather than for one of them.
pub(super) fn refuses_the_whole_link(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ESRCH | libc::ENOENT | libc::EBADF | libc::EACCES | libc::EPERM | libc::ENOTDIR)
    )
}

/// Whether this kernel's uprobe_multi links filter by process reliably (see
/// [`PID_FILTER_FIXED`]); an unreadable version counts as no.
pub(super) fn pid_filter_holds() -> bool {
    let (major, minor) = PID_FILTER_FIXED;
    aya::util::KernelVersion::current()
        .is_ok_and(|version| version >= aya::util::KernelVersion::new(major, minor, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_have_the_kernel_layout() {
        // include/uapi/linux/bpf.h: link_create.uprobe_multi after the 16-byte head.
        assert_eq!(std::mem::offset_of!(LinkCreateUprobeMulti, path), 16);
        assert_eq!(std::mem::offset_of!(LinkCreateUprobeMulti, cookies), 40);
        assert_eq!(std::mem::offset_of!(LinkCreateUprobeMulti, cnt), 48);
        assert_eq!(std::mem::offset_of!(LinkCreateUprobeMulti, pid), 56);
        assert_eq!(size_of::<LinkCreateUprobeMulti>(), 64);
        assert_eq!(std::mem::offset_of!(ProgLoad, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(size_of::<ObjGetInfo>(), 16);
        assert_eq!(size_of::<bpf_insn>(), 8);
    }

    #[test]
    fn multi_copies_have_their_own_kernel_names() {
        assert_eq!(&kernel_name("probetop_uprobe")[..11], b"ptm_uprobe\0");
        let long = kernel_name("probetop_uretprobe_and_more");
        assert_eq!(long[15], 0);
        assert_eq!(&long[..15], b"ptm_uretprobe_a");
    }
}
