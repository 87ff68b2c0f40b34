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
use crate::spec::{KeySpec, PairRole, ProbeKind, ProbeSpec};
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
    /// second probe on it without the same one (`points::share_site_semaphores`); or
    /// the stray one another tool holds the site with, joined where that writes nothing
    /// into the target (`others::held_semaphore_to_join`).
    pub shared_semaphore: Option<u64>,
    /// Another tool's probe on this site, which this one only counts.
    pub other: Option<crate::attach::others::OtherSite>,
    /// probetop's own probe on a breakpoint another tool's probe is on too (one trap
    /// runs both programs): that tool, as [`Probe::owner_tag`] names it.
    pub shared_with: Option<String>,
    /// Those tools' probes, whose programs run on the same trap: priced with it.
    pub shared_sites: Vec<crate::attach::others::OtherSite>,
    /// One half of a `latency:` spec.
    pub pair: Option<PairRole>,
    /// The argument its row (or its pair's) is split by.
    pub key: Option<KeySpec>,
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
            shared_sites: Vec::new(),
            pair: spec.pair,
            key: spec.key,
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
            shared_sites: Vec::new(),
            pair: None,
            key: None,
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
    pub(super) fn label(&self, cost: &super::ProbeCost) -> ProbeLabel {
        let mut label = ProbeLabel::new(
            self.point.kind,
            &self.point.name,
            &self.point.object.display().to_string(),
        );
        label.resolved = self.point.resolved.clone();
        label.site = Some(self.point.file_offset);
        if let Some(owner) = self.owner_tag() {
            label.display = format!("{} <{owner}>", label.display);
            label.owner = Some(owner);
        }
        if let Some(other) = &self.shared_with {
            label.display = format!("{} [shared: {other}]", label.display);
            label.owner = Some(format!("own+{other}"));
        }
        if let Some(tag) = super::label_tag(cost) {
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
        if self.pair.is_some() {
            let mut config = latency_config(base);
            if self.pair == Some(PairRole::Start)
                && let Some(key) = &self.key
                && let Err(e) = attach::args::append_key(&mut config.args, &self.point, key)
            {
                say(format!(
                    "{}: calls of {} not keyed by {key}: {e}",
                    self.spec, self.point.name
                ));
            }
            return config;
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
        if let Some(key) = &self.key {
            // Every hit streamed, so that every one is counted under its key.
            config.mode = if base.mode == probe_common::mode::CLOSED {
                base.mode
            } else {
                crate::delivery::DeliveryMode::Ring.raw()
            };
            if let Err(e) = attach::args::append_key(&mut config.args, &self.point, key) {
                say(format!(
                    "{}: hits of {} not keyed by {key}: {e}",
                    self.spec, self.point.name
                ));
            }
        }
        config
    }

    /// A keyed probe's key and where its slots start in its records (after the
    /// `--args` values [`Probe::config`] captures); `None` when it cannot be keyed.
    pub(super) fn key_slot(&self, args: usize) -> Option<(KeySpec, usize)> {
        let key = self
            .key
            .filter(|_| self.pair.is_none() && self.other.is_none())?;
        let mut config = if args > 0 {
            attach::args::args_config(&self.point, args).unwrap_or_default()
        } else {
            Default::default()
        };
        let at = attach::args::append_key(&mut config, &self.point, &key).ok()?;
        Some((key, at))
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

/// Both halves of a latency pair stream every hit with the stack pointer: the records
/// of one thread then reach user space in the order it made them (a record with
/// arguments is written to the ring at once, not staged per CPU), and the pointer tells
/// a frame an exception or longjmp unwound from one still running
/// (`aggregate::latency`). Kept closed when `base` is.
fn latency_config(base: ProbeConfig) -> ProbeConfig {
    let mut config = ProbeConfig {
        mode: if base.mode == probe_common::mode::CLOSED {
            base.mode
        } else {
            crate::delivery::DeliveryMode::Ring.raw()
        },
        ..base
    };
    config.args = attach::args::stack_pointer();
    config
}

/// The latency pairs among `probes` (indexed by probe id): a function's entry with its
/// returns, per function a glob matched; a USDT pair's starts with its ends, per object.
pub(super) fn latency_pairs(probes: &[Probe]) -> Vec<crate::aggregate::PairSetup> {
    use crate::aggregate::{EndPath, PairSetup};
    let mut setups: Vec<PairSetup> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (id, probe) in probes.iter().enumerate() {
        let Some(role) = probe.pair else {
            continue;
        };
        let usdt = probe.point.kind == ProbeKind::Usdt;
        let name = if usdt {
            // The spec's `START,END`, without its key suffix.
            let spec = crate::spec::split_key(&probe.spec).0;
            spec.rsplit(':').next().unwrap_or(spec).to_string()
        } else {
            // The returns' row is named `FUNC+ret`; the pair is the function's.
            let name = &probe.point.name;
            name.strip_suffix("+ret").unwrap_or(name).to_string()
        };
        let key = (
            probe.spec.clone(),
            probe.point.attach_path.clone(),
            name.clone(),
        );
        let at = *index.entry(key).or_insert_with(|| {
            setups.push(PairSetup {
                spec: probe.spec.clone(),
                name,
                object: probe.point.object.display().to_string(),
                path: EndPath::Usdt,
                starts: Vec::new(),
                ends: Vec::new(),
                key: probe.key,
            });
            setups.len() - 1
        });
        let setup = &mut setups[at];
        match role {
            PairRole::Start => setup.starts.push(id as u32),
            PairRole::End => {
                setup.path = match probe.point.kind {
                    ProbeKind::Usdt => EndPath::Usdt,
                    ProbeKind::Uretprobe => EndPath::Uretprobe,
                    ProbeKind::Uprobe => EndPath::RetUprobes,
                };
                setup.ends.push(id as u32);
            }
        }
    }
    // A half without the other (a function without a ret the decode found) pairs nothing.
    setups.retain(|s| !s.starts.is_empty() && !s.ends.is_empty());
    setups
}

/// The end of a latency pair on a function: by uretprobe where that is safe, else
/// (an exception can unwind through the function, or a Go program) at its `ret`
/// instructions, which leave the stack alone. Returns the spec to resolve and a line
/// saying which path was taken.
pub(super) fn latency_end(
    resolver: &resolve::Resolver,
    spec: &ProbeSpec,
) -> anyhow::Result<(ProbeSpec, Option<String>)> {
    if spec.pair != Some(PairRole::End) || spec.kind != ProbeKind::Uretprobe {
        return Ok((spec.clone(), None));
    }
    let mut unwind = resolve::unwind::UnwindCheck::default();
    let mut why = None;
    for point in resolver.resolve(spec)? {
        if resolve::elf::is_go_binary(&point.attach_path) {
            why = Some(format!("{} is a Go program", point.object.display()));
        } else if let Some(marker) = unwind.unwinds_through(&point) {
            why = Some(format!(
                "an exception can unwind through {} ({} uses {marker})",
                point.name,
                point.object.display()
            ));
        }
        if why.is_some() {
            break;
        }
    }
    Ok(match why {
        Some(why) => {
            let mut at_returns = spec.clone();
            at_returns.kind = ProbeKind::Uprobe;
            at_returns.at_returns = true;
            let line = format!(
                "{spec}: returns measured by uprobes on the ret instructions ({why}; a uretprobe would kill the target); a call an exception or longjmp unwinds counts as unwound"
            );
            (at_returns, Some(line))
        }
        None => (
            spec.clone(),
            Some(format!("{spec}: returns measured by uretprobe")),
        ),
    })
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
