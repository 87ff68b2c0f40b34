//! tracefs, where the kernel names its tracepoints: probetop reads two of them to keep
//! a process set current (`--follow-forks`, `--cgroup`, several `--pid`). A machine
//! booted without systemd (a VM's init, a container) may not have it mounted; then
//! probetop, as root, mounts it where the kernel expects it, as perf does, and leaves it
//! mounted: another tool may be using it by the time probetop exits.

use std::{io, path::Path};

/// Where tracefs is looked for, the usual place first.
pub(crate) const ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Where tracefs was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tracefs {
    /// Mounted before probetop looked.
    Found(&'static str),
    /// Mounted by probetop just now.
    MountedNow(&'static str),
}

/// Finds tracefs, mounting it at `/sys/kernel/tracing` when it is nowhere.
pub(crate) fn find_or_mount() -> io::Result<Tracefs> {
    if let Some(root) = ROOTS
        .iter()
        .find(|root| Path::new(root).join("events").is_dir())
    {
        return Ok(Tracefs::Found(root));
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: every pointer is a NUL-terminated literal that outlives the call, and
    // tracefs takes no data argument (null is allowed).
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Tracefs::MountedNow(ROOTS[0]))
}

/// The uprobe events defined through tracefs (`uprobe_events`: `perf probe`, a line
/// written by hand, BCC's older attach path), one definition a line.
pub(crate) fn uprobe_events(root: &str) -> io::Result<String> {
    std::fs::read_to_string(Path::new(root).join("uprobe_events"))
}

/// How many trace instances have the event `group/name` enabled for ftrace: the top
/// one (`events/GROUP/NAME/enable` reads 1) and each of `instances/*/`. ftrace writes a
/// hit's record into the buffer of each.
pub(crate) fn enabled_instances(root: &str, group: &str, name: &str) -> u32 {
    let enabled = |dir: &Path| {
        std::fs::read_to_string(dir.join("events").join(group).join(name).join("enable"))
            .is_ok_and(|text| text.trim() != "0")
    };
    let top = u32::from(enabled(Path::new(root)));
    let others = std::fs::read_dir(Path::new(root).join("instances"))
        .map(|dir| dir.flatten().filter(|entry| enabled(&entry.path())).count() as u32)
        .unwrap_or(0);
    top + others
}

/// A uprobe event of probetop's own in `uprobe_events`, enabled in tracefs instances of
/// its own (so ftrace writes its hits into their buffers, never into the machine's
/// main trace a user may be reading); disabled and removed, with the instances, when
/// dropped. The calibration prices other tools' tracefs events with it.
pub(crate) struct OwnUprobeEvent {
    root: &'static str,
    group: String,
}

/// The event's one name inside its group.
const OWN_EVENT: &str = "hit";
/// Groups (and instances) of probetop's own events: the prefix, then the pid.
const OWN_GROUP_PREFIX: &str = "probetop_cal_";

impl OwnUprobeEvent {
    /// Defines `p:probetop_cal_PID/hit PATH:0xOFFSET ARGS` (`args` empty: the cheapest
    /// record ftrace writes) and enables it in `instances` instances of its own,
    /// `probetop_cal_PID` and `probetop_cal_PID_N`. Events of probetop processes that no
    /// longer run (a calibration killed mid-way) go first.
    pub(crate) fn add(
        path: &Path,
        file_offset: u64,
        args: &str,
        instances: usize,
    ) -> io::Result<Self> {
        let root = match find_or_mount()? {
            Tracefs::Found(root) | Tracefs::MountedNow(root) => root,
        };
        remove_stale_own_events(root);
        let group = format!("{OWN_GROUP_PREFIX}{}", std::process::id());
        let event = Self { root, group };
        append(
            &Path::new(root).join("uprobe_events"),
            &format!(
                "p:{}/{OWN_EVENT} {}:{file_offset:#x} {args}\n",
                event.group,
                path.display()
            ),
        )?;
        for n in 1..=instances {
            let instance = own_instance(root, &event.group, n);
            std::fs::create_dir(&instance)?;
            std::fs::write(enable_file(&instance, &event.group), "1")?;
        }
        Ok(event)
    }
}

impl Drop for OwnUprobeEvent {
    fn drop(&mut self) {
        remove_own_event(self.root, &self.group);
    }
}

/// The `n`th instance (from 1) of probetop's own group `group`.
fn own_instance(root: &str, group: &str, n: usize) -> std::path::PathBuf {
    let name = if n == 1 {
        group.to_string()
    } else {
        format!("{group}_{n}")
    };
    Path::new(root).join("instances").join(name)
}

fn enable_file(instance: &Path, group: &str) -> std::path::PathBuf {
    instance
        .join("events")
        .join(group)
        .join(OWN_EVENT)
        .join("enable")
}

/// Disables and removes the event `group/hit` and its instances (each step may find
/// nothing left to do; the kernel keeps an event enabled anywhere).
fn remove_own_event(root: &str, group: &str) {
    let extra = format!("{group}_");
    let instances: Vec<std::path::PathBuf> = std::fs::read_dir(Path::new(root).join("instances"))
        .map(|dir| {
            dir.flatten()
                .filter(|entry| {
                    let name = entry.file_name();
                    let name = name.to_string_lossy();
                    name == group
                        || name
                            .strip_prefix(&extra)
                            .is_some_and(|n| n.parse::<usize>().is_ok())
                })
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default();
    for instance in &instances {
        let _ = std::fs::write(enable_file(instance, group), "0");
        let _ = std::fs::remove_dir(instance);
    }
    let _ = append(
        &Path::new(root).join("uprobe_events"),
        &format!("-:{group}/{OWN_EVENT}\n"),
    );
}

/// Removes probetop's own events whose process is gone.
fn remove_stale_own_events(root: &str) {
    let Ok(events) = uprobe_events(root) else {
        return;
    };
    for line in events.lines() {
        let Some(group) = line
            .split_whitespace()
            .next()
            .and_then(|head| head.split_once(':'))
            .and_then(|(_, name)| name.split_once('/'))
            .map(|(group, _)| group)
        else {
            continue;
        };
        let Some(pid) = group
            .strip_prefix(OWN_GROUP_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_own_event(root, group);
        }
    }
}

/// Appends one line to a tracefs control file (a truncating write would clear every
/// other tool's definitions).
fn append(path: &Path, line: &str) -> io::Result<()> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}
