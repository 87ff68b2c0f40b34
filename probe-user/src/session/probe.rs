//! A probe as the session knows it: the point resolved, the spec that asked for it and
//! the program it was found in; how it is named, configured and attached. Shared by the
//! start of a run and by [`super::follow`], which resolves the same specs again after
//! an exec.

use std::path::PathBuf;

use anyhow::bail;

use crate::UsageError;
use crate::attach::{self, AttachRequest};
use crate::present::ProbeLabel;
use crate::resolve::{self, ProbePoint};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::target::{PinnedExe, Target};
use probe_common::ProbeConfig;

/// A resolved probe with the spec that asked for it, and the program it was resolved
/// in.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    pub spec: String,
    pub point: ProbePoint,
    /// Execs of the target followed before it was attached (`--follow-exec`).
    pub generation: u32,
    /// The program the target ran then.
    pub exe: PathBuf,
    /// The semaphore of a USDT probe of this run on the same site, carried by a
    /// uprobe there: the kernel keeps one semaphore offset per site and refuses a
    /// second probe on it without the same one (`points::share_site_semaphores`).
    pub shared_semaphore: Option<u64>,
    /// Another tool's probe on this site, which this one only counts.
    pub other: Option<crate::attach::others::OtherSite>,
    /// probetop's own probe on a breakpoint another tool's probe is on too (one trap
    /// runs both programs): that tool, as [`Probe::owner_tag`] names it.
    pub shared_with: Option<String>,
}

impl Probe {
    /// A point resolved in `target`'s executable is attached through `pin`, the file
    /// that was read, rather than `/proc/PID/exe`, which names whatever runs now.
    pub(super) fn new(
        spec: &ProbeSpec,
        mut point: ProbePoint,
        generation: u32,
        target: &Target,
        pin: &PinnedExe,
    ) -> Self {
        if point.attach_path == target.exe_link() {
            point.attach_path = pin.path();
        }
        Self {
            spec: spec.text.clone(),
            point,
            generation,
            exe: target.exe.clone(),
            shared_semaphore: None,
            other: None,
            shared_with: None,
        }
    }

    /// The counting probe on another tool's probe `site`, at `point`.
    pub(super) fn of_other(
        mut point: ProbePoint,
        site: crate::attach::others::OtherSite,
        target: &Target,
        pin: &std::path::Path,
    ) -> Self {
        if point.attach_path == target.exe_link() {
            point.attach_path = pin.to_path_buf();
        }
        let object = point.object.display();
        Self {
            spec: format!("{}:{object}:{}", point.kind, point.name),
            point,
            generation: 0,
            exe: target.exe.clone(),
            shared_semaphore: None,
            other: Some(site),
            shared_with: None,
        }
    }

    /// How the owner of another tool's probe is named on screen: `bpftrace 1234`.
    pub(super) fn owner_tag(&self) -> Option<String> {
        let owner = &self.other.as_ref()?.owner;
        Some(match owner.pid {
            Some(pid) => format!("{} {pid}", owner.tool),
            None => owner.tool.clone(),
        })
    }

    /// How the probe is named on screen; single-stepped and refused sites are marked.
    pub(super) fn label(&self, cost: &crate::price::ProbeCost) -> ProbeLabel {
        let mut label = ProbeLabel::new(
            self.point.kind,
            &self.point.name,
            &self.point.object.display().to_string(),
        );
        label.resolved = self.point.resolved.clone();
        label.site = Some(self.point.file_offset);
        if let Some(owner) = self.owner_tag() {
            label.display = format!("{} <{owner}>", label.display);
        }
        if let Some(other) = &self.shared_with {
            label.display = format!("{} [shared: {other}]", label.display);
        }
        if let Some(tag) = crate::price::label_tag(cost) {
            label.display = format!("{} {tag}", label.display);
        }
        label
    }

    /// The kernel's view of the probe, under id `probe_id`.
    pub(super) fn request(
        &self,
        probe_id: u32,
        config: ProbeConfig,
        pid: u32,
    ) -> AttachRequest<'_> {
        AttachRequest {
            probe_id,
            kind: self.point.kind,
            path: &self.point.attach_path,
            file_offset: self.point.file_offset,
            more_offsets: self.point.more_file_offsets(),
            semaphore_offset: self.semaphore_offset(),
            config,
            pid,
        }
    }

    /// The semaphore the kernel counts while the probe is attached: for another tool's
    /// probe the one it registered, as the kernel refuses (EINVAL) a second probe on the
    /// site with another (where the kernel does not tell it, a perf event, the note's);
    /// else its own (USDT), or the one of its site it shares.
    pub(super) fn semaphore_offset(&self) -> Option<u64> {
        let own = self
            .point
            .usdt
            .as_ref()
            .and_then(|u| u.semaphore_offset)
            .or(self.shared_semaphore);
        match &self.other {
            Some(site) if site.ref_ctr_offset != 0 => Some(site.ref_ctr_offset),
            _ => own,
        }
    }

    /// The probe's config: the run's mode, and its argument recipes with `--args`
    /// (a probe whose arguments cannot be read still attaches; `say` says why).
    pub(super) fn config(
        &self,
        base: ProbeConfig,
        args: usize,
        say: &mut dyn FnMut(String),
    ) -> ProbeConfig {
        if self.other.is_some() {
            return counting_config(base);
        }
        let mut config = base;
        if args > 0 {
            match attach::args::args_config(&self.point, args) {
                Ok(captured) => {
                    // Fewer than asked (a USDT site with fewer arguments, a function
                    // entry's six registers): said, not silently cut.
                    if (captured.count as usize) < args {
                        say(format!(
                            "{}: --args {args} captures {} argument value{} of {}, all it has in registers or notes",
                            self.spec,
                            captured.count,
                            if captured.count == 1 { "" } else { "s" },
                            self.point.name
                        ));
                    }
                    config.args = captured;
                }
                Err(e) => say(format!(
                    "{}: no argument values for {}: {e}",
                    self.spec, self.point.name
                )),
            }
        }
        config
    }
}

/// Another tool's probe is only counted: every hit bumps the probe's per-CPU count in
/// the kernel, and no hit is ever streamed (one in `u32::MAX`). Kept closed when `base`
/// is: the window opens for every probe at once.
pub(super) fn counting_config(base: ProbeConfig) -> ProbeConfig {
    ProbeConfig {
        mode: if base.mode == probe_common::mode::CLOSED {
            base.mode
        } else {
            crate::delivery::DeliveryMode::Sample.raw()
        },
        sample_every: u32::MAX,
        ..Default::default()
    }
}

/// Return probes that can kill the target, refused unless `--force`:
///
/// - Go moves goroutine stacks, so the return address a uretprobe plants can be copied
///   to a stack the kernel does not track: the probe misfires or the target crashes.
/// - An exception unwinding through a uretprobe's frame meets the kernel's trampoline
///   where the return address was, and the runtime terminates the target
///   (`resolve::unwind` has the rule). `uprobe:FUNC+ret` counts the same returns at
///   the function's `ret` instructions without touching the stack.
pub(super) fn refuse_unsafe_return_probes(probes: &[Probe]) -> anyhow::Result<()> {
    let mut checked = std::collections::HashMap::new();
    let mut unwind = resolve::unwind::UnwindCheck::default();
    for probe in probes
        .iter()
        .filter(|p| p.point.kind == ProbeKind::Uretprobe)
    {
        let is_go = *checked
            .entry(probe.point.attach_path.clone())
            .or_insert_with(|| resolve::elf::is_go_binary(&probe.point.attach_path));
        if is_go {
            bail!(UsageError(format!(
                "{}: {} is a Go program, and uretprobes on Go functions break when Go moves a goroutine's stack (the target can crash); use uprobe instead, or --force to attach anyway",
                probe.spec,
                probe.point.object.display()
            )));
        }
        if let Some(marker) = unwind.unwinds_through(&probe.point) {
            bail!(UsageError(format!(
                "{}: an exception can unwind through {} ({} uses {marker}), and a uretprobe's return address makes the unwinder terminate the target; use `{}` to measure at its ret instructions instead, or --force to attach anyway",
                probe.spec,
                probe.point.name,
                probe.point.object.display(),
                ret_sites_spec(&probe.spec)
            )));
        }
    }
    Ok(())
}

/// `uretprobe:[OBJECT:]FUNC` written as `uprobe:[OBJECT:]FUNC+ret`.
fn ret_sites_spec(spec: &str) -> String {
    let target = spec.split_once(':').map_or(spec, |(_, rest)| rest);
    format!("uprobe:{target}+ret")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_uretprobe_spec_becomes_its_ret_sites_form() {
        assert_eq!(
            super::ret_sites_spec("uretprobe:middle"),
            "uprobe:middle+ret"
        );
        assert_eq!(
            super::ret_sites_spec("ur:/usr/sbin/mariadbd:dispatch_command"),
            "uprobe:/usr/sbin/mariadbd:dispatch_command+ret"
        );
    }
}
