//! Kernel dispatch time, measured: fentry/fexit programs (BPF trampolines) around the
//! kernel's uprobe handling, filtered to the target and joined to the probe that fired
//! by the probed address (see probe-ebpf/src/dispatch.rs).
//!
//! The kernel may refuse them (no BTF, no BPF trampolines, a function it does not let
//! be traced); then [`Dispatch::start`] says why, once, and the whole-cost estimate
//! falls back to calibration alone.

use std::collections::HashSet;

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, MapError, PerCpuArray},
    programs::{FEntry, FExit, ProgramError},
};
use probe_common::{DispatchOffsets, DispatchTotal, dispatch, khist};

use crate::attach::dispatch_time::{
    ENTRIES_BOTH, ENTRIES_NOTIFY, Hooks, ProbeSite, RETURNS_NOTIFY, RETURNS_TRAMPOLINE, SlotTotal,
};
use crate::spec::ProbeKind;

/// The function every breakpoint hit goes through; without it nothing is measured.
pub(crate) const NOTIFY_FN: &str = "uprobe_notify_resume";
/// A hit of an optimized probe (Linux 6.18+).
pub(crate) const SYSCALL_FN: &str = "handle_syscall_uprobe";
/// Every return through the uretprobe trampoline, int3 or syscall (Linux 6.11+).
pub(crate) const RETURN_FN: &str = "uprobe_handle_trampoline";

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("cannot read the kernel's BTF (/sys/kernel/btf/vmlinux): {0}")]
    Btf(#[from] aya::BtfError),
    #[error("the eBPF object lacks {0}")]
    MissingProgram(&'static str),
    #[error("the eBPF object lacks the map {0}")]
    MissingMap(&'static str),
    #[error("{kind} on {function} refused: {}", describe(source))]
    Refused {
        kind: &'static str,
        function: &'static str,
        source: ProgramError,
    },
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        source: MapError,
    },
}

/// A program error in one line: the syscall's error, and the verifier's log if it
/// has one (an empty log means the kernel refused before verifying).
fn describe(error: &ProgramError) -> String {
    match error {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            let log = log.trim();
            if log.is_empty() {
                format!(
                    "BPF_PROG_LOAD failed with {io_error}, before the verifier ran (empty verifier log)"
                )
            } else {
                format!("BPF_PROG_LOAD failed with {io_error}; verifier: {log}")
            }
        }
        other => other.to_string(),
    }
}

/// Most probes measured for dispatch: its maps hold a histogram per probe per CPU
/// (~10 KiB each), so very wide runs go without.
pub(crate) const MAX_DISPATCH_PROBES: u32 = 512;

/// Load-time sizes of the dispatch maps, and the target's pid.
pub(crate) struct MapSizes {
    offsets: DispatchOffsets,
    tgid: u32,
    other_slot: u32,
    slots: u32,
    hist: u32,
    addrs: u32,
    /// Threads whose dispatch in flight is kept: none without a target.
    threads: u32,
}

impl MapSizes {
    /// Sizes for `probe_count` probes in process `tgid`; minimal when `tgid` is None.
    pub(crate) fn new(tgid: Option<u32>, probe_count: u32) -> Self {
        match tgid {
            Some(tgid) => {
                let other_slot = probe_count * dispatch::SLOTS_PER_PROBE;
                let slots = other_slot + 1;
                Self {
                    // Invalid (all 0) when the BTF lacks them: Dispatch::start says so.
                    offsets: offsets().unwrap_or_default(),
                    tgid,
                    other_slot,
                    slots,
                    hist: slots * khist::BUCKETS,
                    addrs: probe_count.max(1),
                    threads: dispatch::MAX_THREADS,
                }
            }
            None => Self {
                offsets: DispatchOffsets::default(),
                tgid: 0,
                other_slot: 0,
                slots: 1,
                hist: 1,
                addrs: 1,
                threads: 1,
            },
        }
    }

    /// Applies the sizes and the pid to the loader.
    pub(crate) fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .map_max_entries("DISPATCH_TOTAL", self.slots)
            .map_max_entries("DISPATCH_HIST", self.hist)
            .map_max_entries("ENTRY_SLOT", self.addrs)
            .map_max_entries("RETURN_SLOT", self.addrs)
            .map_max_entries("DISPATCH_STATE", self.threads)
            .override_global("DISPATCH_TGID", &self.tgid, true)
            .override_global("DISPATCH_OTHER_SLOT", &self.other_slot, true)
            .override_global("DISPATCH_OFFSETS", &self.offsets, true);
    }
}

/// Running dispatch measurement: its maps (the programs stay attached as long as the
/// attachment that owns them).
pub struct Dispatch {
    totals: PerCpuArray<MapData, DispatchTotal>,
    hist: PerCpuArray<MapData, u64>,
    lost: PerCpuArray<MapData, u64>,
    probe_count: u32,
    /// The unattributed slot's totals when the window opened.
    other_base: std::cell::Cell<SlotTotal>,
    /// Unmeasured dispatches when the window opened.
    lost_base: std::cell::Cell<u64>,
    /// Which optional hooks are missing, for the user.
    pub notes: Vec<String>,
    /// What timed what on this kernel.
    pub hooks: Hooks,
}

impl Dispatch {
    /// Fills the address maps from `sites` (indexed by probe id), then loads and
    /// attaches the fentry/fexit programs. The attachment must have been loaded with
    /// `dispatch_tgid` set to the target's pid.
    pub fn start(ebpf: &mut Ebpf, sites: &[ProbeSite]) -> Result<Self, DispatchError> {
        fill_slots(ebpf, sites)?;
        let btf = Btf::from_sys_fs()?;
        let required = attach_fentry(ebpf, &btf, "probetop_notify_enter", NOTIFY_FN)
            .and_then(|()| attach_fexit(ebpf, &btf, "probetop_notify_exit", NOTIFY_FN));
        if let Err(e) = required {
            unload(ebpf, &["probetop_notify_enter", "probetop_notify_exit"]);
            return Err(e);
        }
        let mut notes = Vec::new();
        // Optional: kernels without optimized probes lack the function; a failure
        // here only leaves those hits unmeasured.
        let syscall = attach_fentry(ebpf, &btf, "probetop_syscall_enter", SYSCALL_FN)
            .and_then(|()| attach_fexit(ebpf, &btf, "probetop_syscall_exit", SYSCALL_FN));
        let entries = match syscall {
            Ok(()) => ENTRIES_BOTH,
            Err(e) => {
                unload(ebpf, &["probetop_syscall_enter", "probetop_syscall_exit"]);
                if btf_has_function(&btf, SYSCALL_FN) {
                    notes.push(format!("optimized-probe hits not measured: {e}"));
                }
                ENTRIES_NOTIFY
            }
        };
        let (returns, returns_missing) = match offsets() {
            // Without the offsets a return cannot be named, nor told from a hit.
            Err(e) => {
                notes.push(format!(
                    "uretprobe returns not measured, and counted with other uprobes: {e}"
                ));
                (None, Some("no offsets in the kernel's BTF"))
            }
            Ok(_) if !btf_has_function(&btf, RETURN_FN) => (Some(RETURNS_NOTIFY), None),
            Ok(_) => {
                let hooked = attach_fentry(ebpf, &btf, "probetop_return_enter", RETURN_FN)
                    .and_then(|()| attach_fexit(ebpf, &btf, "probetop_return_exit", RETURN_FN));
                match hooked {
                    Ok(()) => (Some(RETURNS_TRAMPOLINE), None),
                    Err(e) => {
                        unload(ebpf, &["probetop_return_enter", "probetop_return_exit"]);
                        // Returns through the syscall trampoline go unseen; those
                        // through the int3 one are still timed in uprobe_notify_resume.
                        notes.push(format!("uretprobe returns not measured: {e}"));
                        (None, Some("uprobe_handle_trampoline refused"))
                    }
                }
            }
        };
        let hooks = Hooks {
            entries,
            returns,
            returns_missing,
        };
        fn take<T>(
            ebpf: &mut Ebpf,
            name: &'static str,
            convert: impl FnOnce(aya::maps::Map) -> Result<T, MapError>,
        ) -> Result<T, DispatchError> {
            let map = ebpf.take_map(name).ok_or(DispatchError::MissingMap(name))?;
            convert(map).map_err(|source| DispatchError::Map { name, source })
        }
        Ok(Self {
            totals: take(ebpf, "DISPATCH_TOTAL", PerCpuArray::try_from)?,
            hist: take(ebpf, "DISPATCH_HIST", PerCpuArray::try_from)?,
            lost: take(ebpf, "DISPATCH_LOST", PerCpuArray::try_from)?,
            probe_count: sites.len() as u32,
            other_base: Default::default(),
            lost_base: Default::default(),
            notes,
            hooks,
        })
    }

    /// Totals of `probe_id`'s entry (`dispatch::ENTRY`) or return slot.
    pub fn total(&self, probe_id: u32, which: u32) -> Result<SlotTotal, MapError> {
        self.slot_total(probe_id * dispatch::SLOTS_PER_PROBE + which)
    }

    /// Dispatches in the target that matched none of the probes.
    pub fn other(&self) -> Result<SlotTotal, MapError> {
        self.slot_total(self.probe_count * dispatch::SLOTS_PER_PROBE)
    }

    /// Takes the unattributed and unmeasured counts as of now as the baselines
    /// [`Dispatch::other_since_base`] and [`Dispatch::lost_since_base`] subtract (a
    /// failed read counts from zero).
    pub fn rebase(&self) {
        self.other_base.set(self.other().unwrap_or_default());
        self.lost_base.set(self.lost().unwrap_or_default());
    }

    /// Unattributed dispatches since the baseline.
    pub fn other_since_base(&self) -> Result<SlotTotal, MapError> {
        Ok(self.other()?.since(self.other_base.get()))
    }

    /// Dispatches not measured (their start was not seen: begun before the programs
    /// attached, or the thread's state evicted).
    pub fn lost(&self) -> Result<u64, MapError> {
        Ok(self.lost.get(&0, 0)?.iter().sum())
    }

    /// Unmeasured dispatches since the baseline.
    pub fn lost_since_base(&self) -> Result<u64, MapError> {
        Ok(self.lost()?.saturating_sub(self.lost_base.get()))
    }

    fn slot_total(&self, slot: u32) -> Result<SlotTotal, MapError> {
        let per_cpu = self.totals.get(&slot, 0)?;
        Ok(per_cpu
            .iter()
            .fold(SlotTotal::default(), |acc, t| SlotTotal {
                count: acc.count + t.count,
                sum_ns: acc.sum_ns + t.sum_ns,
            }))
    }

    /// The histogram counts of one probe slot, over all CPUs (`khist` buckets).
    pub fn histogram(&self, probe_id: u32, which: u32) -> Result<Vec<u64>, MapError> {
        let slot = probe_id * dispatch::SLOTS_PER_PROBE + which;
        let first = slot * khist::BUCKETS;
        (first..first + khist::BUCKETS)
            .map(|index| Ok(self.hist.get(&index, 0)?.iter().sum()))
            .collect()
    }

    pub fn probe_count(&self) -> u32 {
        self.probe_count
    }
}

/// Every fentry/fexit program of the measurement.
const PROGRAMS: [&str; 6] = [
    "probetop_notify_enter",
    "probetop_notify_exit",
    "probetop_syscall_enter",
    "probetop_syscall_exit",
    "probetop_return_enter",
    "probetop_return_exit",
];

/// This kernel's offsets for the dispatch programs, read once from its BTF.
pub(crate) fn offsets() -> Result<DispatchOffsets, &'static super::kernel_btf::BtfError> {
    static OFFSETS: std::sync::OnceLock<Result<DispatchOffsets, super::kernel_btf::BtfError>> =
        std::sync::OnceLock::new();
    OFFSETS
        .get_or_init(super::kernel_btf::dispatch_offsets)
        .as_ref()
        .copied()
}

/// Whether the kernel's BTF has a function of that name: one it lacks is not refused,
/// just absent from this version.
fn btf_has_function(btf: &Btf, name: &str) -> bool {
    btf.id_by_type_name_kind(name, aya_obj::btf::BtfKind::Func)
        .is_ok()
}

/// Ends the measurement started by [`Dispatch::start`]: its programs detach and
/// unload; the totals in the maps stay readable.
pub(crate) fn stop(ebpf: &mut Ebpf) {
    unload(ebpf, &PROGRAMS);
}

/// Fills ENTRY_SLOT and RETURN_SLOT. A function with both a uprobe and a uretprobe has
/// one breakpoint: its entry dispatches go to the uprobe, whose handler runs there.
fn fill_slots(ebpf: &mut Ebpf, sites: &[ProbeSite]) -> Result<(), DispatchError> {
    let mut entry: Vec<(u64, u32)> = Vec::new();
    let mut taken_by_entry_probe = HashSet::new();
    let mut returns: Vec<(u64, u32)> = Vec::new();
    for (id, site) in sites.iter().enumerate() {
        let Some(vaddr) = site.vaddr else { continue };
        let id = id as u32;
        if site.kind == ProbeKind::Uretprobe {
            returns.push((vaddr, id * dispatch::SLOTS_PER_PROBE + dispatch::RETURN));
        } else if taken_by_entry_probe.insert(vaddr) {
            entry.push((vaddr, id * dispatch::SLOTS_PER_PROBE + dispatch::ENTRY));
        }
    }
    for (id, site) in sites.iter().enumerate() {
        if site.kind == ProbeKind::Uretprobe
            && let Some(vaddr) = site.vaddr
            && !taken_by_entry_probe.contains(&vaddr)
            && !entry.iter().any(|(a, _)| *a == vaddr)
        {
            entry.push((
                vaddr,
                id as u32 * dispatch::SLOTS_PER_PROBE + dispatch::ENTRY,
            ));
        }
    }
    let mut put = |name: &'static str, pairs: &[(u64, u32)]| -> Result<(), DispatchError> {
        let map = ebpf.map_mut(name).ok_or(DispatchError::MissingMap(name))?;
        let mut map: BpfHashMap<&mut MapData, u64, u32> =
            BpfHashMap::try_from(map).map_err(|source| DispatchError::Map { name, source })?;
        for (addr, slot) in pairs {
            map.insert(addr, slot, 0)
                .map_err(|source| DispatchError::Map { name, source })?;
        }
        Ok(())
    };
    put("ENTRY_SLOT", &entry)?;
    put("RETURN_SLOT", &returns)
}

/// Detaches and unloads programs of a half-attached hook (the kernel may have taken
/// the first and refused the second); errors mean there was nothing to unload.
fn unload(ebpf: &mut Ebpf, names: &[&str]) {
    for name in names {
        match ebpf.program_mut(name) {
            Some(aya::programs::Program::FEntry(p)) => {
                let _ = p.unload();
            }
            Some(aya::programs::Program::FExit(p)) => {
                let _ = p.unload();
            }
            _ => {}
        }
    }
}

/// Loads `program` against the kernel function `function` and attaches it. One body for
/// both kinds: aya's FEntry and FExit share these calls but no trait.
macro_rules! attach_tracing {
    ($name:ident, $program_type:ty, $kind:literal) => {
        fn $name(
            ebpf: &mut Ebpf,
            btf: &Btf,
            program: &'static str,
            function: &'static str,
        ) -> Result<(), DispatchError> {
            let refused = |source| DispatchError::Refused {
                kind: $kind,
                function,
                source,
            };
            let prog: &mut $program_type = ebpf
                .program_mut(program)
                .ok_or(DispatchError::MissingProgram(program))?
                .try_into()
                .map_err(refused)?;
            prog.load(function, btf).map_err(refused)?;
            prog.attach().map_err(refused)?;
            Ok(())
        }
    };
}

attach_tracing!(attach_fentry, FEntry, "fentry");
attach_tracing!(attach_fexit, FExit, "fexit");

/// Starts dispatch measurement on a loaded attachment (loaded with `dispatch_tgid`);
/// `None` when the kernel refuses, after saying so in one line unless `told` (this
/// machine's calibration met the same refusal and said so then).
pub(crate) fn start_dispatch(
    attachment: &mut super::Attachment,
    sites: &[ProbeSite],
    told: bool,
) -> Option<Dispatch> {
    use crate::sys::say;
    let verbose = std::env::var("PROBETOP_VERBOSE").is_ok_and(|v| v == "1");
    match Dispatch::start(attachment.ebpf_mut(), sites) {
        Ok(d) => {
            for note in &d.notes {
                say(&format!("probetop: dispatch: {note}"));
            }
            if verbose {
                say(&format!("probetop: dispatch: {}", d.hooks.describe()));
            }
            Some(d)
        }
        Err(e) if verbose => {
            say(&format!(
                "probetop: kernel dispatch time not measured ({e}); whole cost per hit comes from calibration alone"
            ));
            None
        }
        Err(_) if told => None,
        // Not an error of the run: many kernels refuse fentry. What is missing and why,
        // in words; the kernel's answer with PROBETOP_VERBOSE=1.
        Err(e) => {
            say(&format!("probetop: {}", refusal_line(&e)));
            None
        }
    }
}

/// The one line a run says when dispatch measurement cannot start.
fn refusal_line(error: &DispatchError) -> String {
    let what = match error {
        DispatchError::Refused { kind, .. } => {
            format!("this kernel does not let BPF trampolines ({kind}) attach")
        }
        DispatchError::Btf(_) => "the kernel's BTF cannot be read".to_string(),
        _ => "the dispatch programs cannot start".to_string(),
    };
    format!(
        "{what}, so the kernel's own time per hit is not measured live; each hit's cost comes from the calibration (PROBETOP_VERBOSE=1 shows why)"
    )
}

/// Ends kernel dispatch measurement when the target execs: the kernel side joins
/// dispatches to probes by their addresses in the old program, which may be those of
/// unrelated code in the new one. The totals measured up to then stay.
pub(crate) fn stop_dispatch(attachment: &mut super::Attachment) {
    stop(attachment.ebpf_mut());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_sizes() {
        let on = MapSizes::new(Some(42), 3);
        assert_eq!(on.other_slot, 6);
        assert_eq!(on.slots, 7);
        assert_eq!(on.hist, 7 * khist::BUCKETS);
        let off = MapSizes::new(None, 3);
        assert_eq!((off.tgid, off.slots, off.hist), (0, 1, 1));
    }
}
