//! The set of processes whose hits count when probes are attached without the kernel's
//! pid filter (`--follow-forks`, `--cgroup`, several `--pid`), and the tracepoints that
//! keep it current (see `probe-ebpf/src/processes.rs`).
use std::fs;

use aya::{
    EbpfLoader,
    maps::{HashMap, MapData},
    programs::TracePoint,
};

use super::{AttachError, Attachment};
use crate::sys::tracefs::{self, Tracefs};

const PROG_NEWTASK: &str = "probetop_newtask";
const PROG_FREE: &str = "probetop_free";
const MAP: &str = "PROCESSES";

/// Where the tracepoints' fields are on this kernel.
#[derive(Debug, Clone, Copy)]
pub(super) struct FieldOffsets {
    newtask_pid: u32,
    newtask_flags: u32,
    free_pid: u32,
}

impl FieldOffsets {
    /// Read from the tracepoints' `format` files (tracefs mounted first if need be).
    pub(super) fn read() -> Result<Self, AttachError> {
        let root = match tracefs::find_or_mount() {
            Ok(Tracefs::Found(root)) => root,
            Ok(Tracefs::MountedNow(root)) => {
                crate::sys::say(&format!(
                    "probetop: mounted tracefs at {root} to follow processes (left mounted)"
                ));
                root
            }
            Err(e) => {
                return Err(AttachError::Unsupported(format!(
                    "tracefs is not mounted and mounting it failed ({e}): run `mount -t tracefs tracefs /sys/kernel/tracing` to follow processes"
                )));
            }
        };
        let newtask = read_format(root, "task/task_newtask")?;
        let free = read_format(root, "sched/sched_process_free")?;
        let field = |format: &str, event: &str, name: &str| {
            field_offset(format, name).ok_or_else(|| {
                AttachError::Unsupported(format!(
                    "the kernel's {event} tracepoint has no field {name}: cannot follow processes on this kernel"
                ))
            })
        };
        Ok(Self {
            newtask_pid: field(&newtask, "task_newtask", "pid")?,
            newtask_flags: field(&newtask, "task_newtask", "clone_flags")?,
            free_pid: field(&free, "sched_process_free", "pid")?,
        })
    }

    /// Turns the programs' process filter on, with these offsets.
    pub(super) fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        static ON: u32 = 1;
        loader
            .override_global("FILTER_PROCESSES", &ON, true)
            .override_global("NEWTASK_PID_AT", &self.newtask_pid, true)
            .override_global("NEWTASK_FLAGS_AT", &self.newtask_flags, true)
            .override_global("FREE_PID_AT", &self.free_pid, true);
    }
}

fn read_format(root: &str, event: &str) -> Result<String, AttachError> {
    fs::read_to_string(format!("{root}/events/{event}/format")).map_err(|e| {
        AttachError::Unsupported(format!(
            "cannot read the {event} tracepoint's format under {root} ({e}): this kernel cannot follow processes"
        ))
    })
}

/// The offset of field `name` in a tracepoint `format` file
/// (`field:pid_t pid;\toffset:8;\tsize:4;...`).
fn field_offset(format: &str, name: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let (decl, rest) = line.trim().strip_prefix("field:")?.split_once(';')?;
        let declared = decl.rsplit([' ', '*']).next()?;
        let declared = declared.split('[').next()?;
        if declared != name {
            return None;
        }
        let offset = rest.trim().strip_prefix("offset:")?.split(';').next()?;
        offset.parse().ok()
    })
}

/// The processes whose hits count, shared with the eBPF programs.
pub struct ProcessSet {
    map: HashMap<MapData, u32, u8>,
}

impl ProcessSet {
    /// Adds a process (tgid); true if it was not there.
    pub fn add(&mut self, tgid: u32) -> Result<bool, AttachError> {
        if self.contains(tgid) {
            return Ok(false);
        }
        self.map
            .insert(tgid, 1, 0)
            .map_err(|source| AttachError::Map { name: MAP, source })?;
        Ok(true)
    }

    /// Takes a process out (it left the cgroup); true if it was there.
    pub fn remove(&mut self, tgid: u32) -> Result<bool, AttachError> {
        if !self.contains(tgid) {
            return Ok(false);
        }
        match self.map.remove(&tgid) {
            Ok(()) => Ok(true),
            // Freed meanwhile (the kernel's sched_process_free took it out).
            Err(_) if !self.contains(tgid) => Ok(false),
            Err(source) => Err(AttachError::Map { name: MAP, source }),
        }
    }

    pub fn contains(&self, tgid: u32) -> bool {
        self.map.get(&tgid, 0).is_ok()
    }

    /// Every member now, in no order.
    pub fn members(&self) -> Vec<u32> {
        self.map.keys().filter_map(Result::ok).collect()
    }
}

impl Attachment {
    /// Keeps the set current from now on: processes forked by a member join it (with
    /// `follow_forks`) and freed ones leave it.
    pub fn track_processes(&mut self, follow_forks: bool) -> Result<(), AttachError> {
        let mut programs = vec![(PROG_FREE, "sched", "sched_process_free")];
        if follow_forks {
            programs.push((PROG_NEWTASK, "task", "task_newtask"));
        }
        for (name, category, event) in programs {
            let program: &mut TracePoint = self
                .ebpf
                .program_mut(name)
                .ok_or(AttachError::MissingProgram(name))?
                .try_into()
                .map_err(|source| AttachError::Program { name, source })?;
            program
                .load()
                .map_err(|source| AttachError::Program { name, source })?;
            // The link lives as long as the programs (dropped with them at exit).
            program
                .attach(category, event)
                .map_err(|source| AttachError::Program { name, source })?;
        }
        Ok(())
    }

    /// The set, for user space to fill.
    pub fn take_process_set(&mut self) -> Result<ProcessSet, AttachError> {
        let map = self
            .ebpf
            .take_map(MAP)
            .ok_or(AttachError::MissingMap(MAP))?;
        let map =
            HashMap::try_from(map).map_err(|source| AttachError::Map { name: MAP, source })?;
        Ok(ProcessSet { map })
    }
}

#[cfg(test)]
mod tests {
    use super::field_offset;

    #[test]
    fn offsets_from_format_files() {
        let newtask = "format:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n";
        assert_eq!(field_offset(newtask, "pid"), Some(8));
        assert_eq!(field_offset(newtask, "clone_flags"), Some(32));
        assert_eq!(field_offset(newtask, "comm"), Some(12));
        assert_eq!(field_offset(newtask, "common_pid"), None);
        let free = "\tfield:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n";
        assert_eq!(field_offset(free, "pid"), Some(12));
    }
}
