//! JSON export. The fields below are a stable interface for scripts: add, never rename.
//! The same types read an export back (the lab, xtask/lab, reads runs through them):
//! every field but a probe's `kind` may be absent, as in an export from an older probetop.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{ExportError, Report};
use crate::aggregate::HandlerSummary;
use crate::attach::others::ReportedShape;
use crate::spec::ProbeKind;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonTarget<'a> {
    pub pid: u32,
    pub exe: Cow<'a, std::path::Path>,
    pub comm: Cow<'a, str>,
    pub cmdline: Cow<'a, str>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JsonProbe<'a> {
    #[serde(default)]
    pub id: u32,
    #[serde(default)]
    pub spec: Cow<'a, str>,
    pub kind: ProbeKind,
    #[serde(default)]
    pub name: Cow<'a, str>,
    /// A keyed probe's row of one key (` key=argN`): its hits, handler times and share
    /// of the CPU are that key's; `other` holds every key past `--max-keys`. The
    /// probe's own row (without `key`) counts every hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Cow<'a, str>>,
    /// What `name` resolved to when that is another name: the preferred alias
    /// (`__libc_calloc` for `calloc`) or an IFUNC's implementation (`__strlen_avx2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Cow<'a, str>>,
    #[serde(default)]
    pub object: Cow<'a, str>,
    #[serde(default)]
    pub address: u64,
    #[serde(default)]
    pub file_offset: u64,
    /// Execs of the target followed before the probe was attached (`--follow-exec`;
    /// 0: the program probetop started on).
    #[serde(default)]
    pub generation: u32,
    /// The program the target ran when the probe was attached.
    #[serde(default)]
    pub exe: Cow<'a, str>,
    /// `ring`, `sample` or `kernel`: how hits reached probetop at the end.
    #[serde(default)]
    pub mode: Cow<'static, str>,
    /// probetop's own probe (true), or another tool's it counted (false).
    #[serde(default = "own_by_default")]
    pub own: bool,
    /// Another tool's probe: who put it there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<JsonOwner<'a>>,
    #[serde(default)]
    pub hits: u64,
    /// With `--budget`: `hits` is scaled to the whole run from the hits counted while
    /// attached; its 95% interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_interval: Option<JsonHitsInterval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_counted: Option<u64>,
    #[serde(default)]
    pub dropped: u64,
    #[serde(default)]
    pub handler_ns: HandlerSummary,
    /// The handler times whole: an HdrHistogram in its V2 + DEFLATE encoding, base64
    /// (as a `.hlog` line carries it), which `probetop diff` tests distributions on;
    /// absent in exports from before it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_ns_hdr: Option<String>,
    /// Argument values of the last hit that captured any (`--args`); null where a read
    /// faulted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_args: Option<Cow<'a, [Option<u64>]>>,
    /// Records received per thread: `{"tid": count}`.
    #[serde(default)]
    pub threads: std::collections::BTreeMap<String, u64>,
    /// Records received per process (`--follow-forks`, `--cgroup`, several `--pid`):
    /// `{"pid": count}`; absent when one process is probed.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[serde(default)]
    pub pids: std::collections::BTreeMap<String, u64>,
    /// Hits dropped per thread (a full ring buffer), counted in the kernel:
    /// `{"tid": count}`; absent when none was dropped.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[serde(default)]
    pub threads_dropped: std::collections::BTreeMap<String, u64>,
    /// Which hits `threads` and `threads_dropped` count: `every-hit` (together, every
    /// hit), `not-dropped` (some drops' threads are unknown: more threads dropped than
    /// the kernel's table holds), `sampled` (one hit in --sample-every), `before-kernel-mode`
    /// (auto mode's switch to the in-kernel histogram) or `none-in-kernel-mode`.
    #[serde(default)]
    pub threads_cover: Cow<'static, str>,
    /// The sum of `threads`, to set beside `hits`.
    #[serde(default)]
    pub threads_hits: u64,
    /// What the kernel does with the probed instruction on every hit (`emulated-push`,
    /// `emulated-nop`, `emulated-branch`, `optimized`, `single-stepped`, `refused`,
    /// `unknown`); null if not looked at.
    pub cost_class: Option<Cow<'static, str>>,
    /// The probed instruction, AT&T syntax.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probed_instruction: Option<Cow<'a, str>>,
    /// Estimated whole cost of one hit to the traced thread (trap, kernel dispatch,
    /// handler, way back), ns; null without a calibration for this machine.
    pub whole_cost_ns: Option<f64>,
    /// How `whole_cost_ns` was estimated: `dispatch-and-calibration` or `calibration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_cost_method: Option<Cow<'static, str>>,
    /// The calibration loop that priced `whole_cost_ns`: `hot` (caches warm between
    /// hits), `cold` (a server's footprint between hits) or `clock` (each hit by its
    /// handler's clock, or by the idle time before it, `gaps`, where dearer); see
    /// `cost.assumption`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_cost_assumes: Option<Cow<'static, str>>,
    /// With `clock`: what placed its hits on the calibration's curves: `gap` (the idle
    /// time before each) or `handler-clock` (how
    /// slow the ring handler ran on each) or `streamed-clock` (in-kernel: how slow the
    /// ring handler ran on the hits streamed first, `streamed_clock_ns`; docs/cost.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_cost_reading: Option<Cow<'static, str>>,
    /// Share of one CPU the probe took from the target over the run (whole cost x
    /// hits / duration; 0.01 is 1% of a CPU).
    pub cpu_share: Option<f64>,
    /// Kernel dispatch time, measured with fentry/fexit, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_ns: Option<JsonDispatch>,
    /// probetop's own probe on a breakpoint other tools' probes are on too (one trap
    /// runs every program there): the site's total and each owner's part;
    /// `whole_cost_ns` is this probe's `share_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_site: Option<JsonSharedSite<'a>>,
    /// The time before each hit since the previous probetop hit on the same CPU: how
    /// cold the kernel's uprobe path and the program were (`whole_cost_assumes: clock`
    /// prices each hit by it where dearer than its clock). (`busy_gaps`, the code run in
    /// these gaps, was written until `--assume gap` retired; it is no longer.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gaps: Option<crate::calibrate::gap::GapSummary>,
    /// In-kernel mode: probetop's ring handler's own time over the hits streamed in the
    /// first `--clock-seconds` (before the probe went to the kernel), ns: how cold the
    /// target runs each hit, which `streamed-clock` pricing reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streamed_clock_ns: Option<HandlerSummary>,
    /// `--mode auto` moved it from the ring buffer into the kernel while the run measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_in_kernel: Option<JsonMove>,
}

/// When and why `--mode auto` moved a probe into the kernel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonMove {
    /// Seconds after the window opened (0 when a reset came after the move).
    pub after_s: f64,
    /// `records-dropped` (the ring buffer dropped records) or `above-auto-above` (the
    /// run streamed more hits a second in all than `--auto-above`).
    pub reason: Cow<'static, str>,
    /// The probe's hits per second then.
    pub hits_per_second: f64,
    /// Hits per second of every probe streaming then, this one included.
    pub run_hits_per_second: f64,
    /// Records every probe had dropped when it moved (its staged records flushed
    /// first): the run's `dropped` less this came after the move.
    pub run_dropped: u64,
}

/// Exports from before other tools' probes were counted hold only probetop's own.
fn own_by_default() -> bool {
    true
}

/// The owner of another tool's probe, and what its program costs per run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonOwner<'a> {
    pub pid: Option<u32>,
    pub comm: Option<Cow<'a, str>>,
    /// `bpftrace`, `bcc`, `python`, `perf`, `probetop`, `tracefs`, or the holder's comm.
    pub tool: Cow<'a, str>,
    /// `bpf` (a BPF program on a perf event or link) or `tracefs` (`uprobe_events`).
    pub via: Cow<'static, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prog_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<Cow<'a, str>>,
    /// A tracefs event's fetched arguments, and the trace instances it is enabled in
    /// (`fetch_args`, `instances`): ftrace fetches the arguments once a hit and writes a
    /// record into each instance's buffer, and `program_ns` prices both.
    #[serde(flatten)]
    pub shape: Option<ReportedShape>,
    /// The owner's program per run, ns, in `whole_cost_ns`; null when not priced.
    pub program_ns: Option<f64>,
    /// `bpf-stats` (the kernel's run statistics over the window, `--bpf-stats`),
    /// `assumed-counting-program` (as dear as probetop's counting program, from the
    /// calibration), `calibrated-tracefs-event` (a tracefs event: ftrace's record per
    /// hit, as the calibration's own event measured it) or `not-priced` (a tracefs event
    /// and a calibration without that row).
    pub program_method: Option<Cow<'static, str>>,
    /// How probetop counted its hits: `counting-probe-on-the-same-site` (a probe of
    /// its own on the same site, filtered to the target, whose program only counts;
    /// what that adds per hit, ns (calibration), is not in `whole_cost_ns`), or
    /// `not-counted-counter-refused` (the kernel refused that probe: `hits` is 0, not
    /// the probe's hits).
    pub hits_method: Cow<'static, str>,
    pub counting_ns: Option<f64>,
}

/// A breakpoint shared by several owners' probes, ns per hit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonSharedSite<'a> {
    /// The trap, every owner's program and the way back: what one hit costs the target.
    pub total_ns: f64,
    /// The hit with an empty program (calibrated), split between the owners.
    pub trap_ns: f64,
    /// `trap-split-evenly`: each owner's share is its marginal cost plus the trap over
    /// the number of owners; the shares add up to `total_ns`.
    pub split: Cow<'static, str>,
    /// probetop's own probe first, then each other owner's.
    pub owners: Vec<JsonSharedPart<'a>>,
}

/// One owner's part of a shared breakpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonSharedPart<'a> {
    pub own: bool,
    /// `probetop`, or the other tool as `owner.tool` names it.
    pub tool: Cow<'a, str>,
    pub pid: Option<u32>,
    /// What this owner's probe adds to each hit, the others staying: its program
    /// (probetop's: its handler beyond the empty-program hit).
    pub marginal_ns: f64,
    /// `calibration` for probetop's own; the other's `program_method`.
    pub marginal_method: Cow<'static, str>,
    /// Its marginal cost plus its part of the trap.
    pub share_ns: f64,
}

/// Kernel dispatch time of one probe: entry breakpoint hits and uretprobe returns.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonDispatch {
    /// Mean dispatch per hit of the probe (entry mean plus return mean).
    pub per_hit_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<HandlerSummary>,
    #[serde(rename = "return", skip_serializing_if = "Option::is_none")]
    pub ret: Option<HandlerSummary>,
}

/// Run-wide cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonCost<'a> {
    /// Share of one CPU all estimated probes took from the target.
    pub cpu_share: Option<f64>,
    /// Kernel dispatches in the target that matched none of the probes (another
    /// tool's uprobes), when dispatch was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_uprobe_dispatch: Option<JsonOtherDispatch>,
    /// Kernel dispatches in the target the dispatch clock saw end but not begin (begun
    /// before it attached), so timed nowhere; 0 in a run that starts before the
    /// target's hits, when dispatch was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_unmeasured: Option<u64>,
    /// The kernel functions that timed dispatches on this kernel, when they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_hooks: Option<JsonDispatchHooks>,
    /// Other BPF programs on probes of objects the target maps.
    /// Not read back (empty when deserialized): their kinds are static names.
    #[serde(skip_deserializing)]
    pub other_bpf_programs: Cow<'a, [crate::attach::bpf_stats::OtherProgram]>,
    /// How `cpu_share` was found: `in-situ` (measured on the target) or `estimate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_cost_method: Option<Cow<'static, str>>,
    /// The whole cost per hit over every probe (weighted by hits) as estimated, beside
    /// the in-situ measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_per_hit_ns: Option<f64>,
    /// The in-situ measurement (`--in-situ`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_situ: Option<JsonInSitu>,
    /// Hot or cold caches between hits, as `--assume` decided over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assumption: Option<JsonAssumption>,
    /// The estimate per hit over every probe under each assumption the calibration
    /// can price (`hot`, `cold`, `clock`): the range `assumption` chose in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimates_per_hit_ns: Option<JsonBracket>,
}

/// The estimate per hit under each assumption.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonBracket {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<f64>,
}

/// The hot-or-cold decision of a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonAssumption {
    /// `hot` or `cold`: the calibration loop that prices the hits.
    pub assumes: Cow<'static, str>,
    /// Why: `--assume hot|cold`, or what auto saw.
    pub why: String,
}

/// A mean and its 95% bootstrap confidence interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonInterval {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

impl From<crate::insitu::Interval> for JsonInterval {
    fn from(i: crate::insitu::Interval) -> Self {
        Self {
            mean: i.mean,
            low: i.low,
            high: i.high,
        }
    }
}

/// What the probes cost the target, measured on it by alternating windows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonInSitu {
    /// `measured`, `measuring` (too few windows) or `not enough signal: run longer`.
    pub verdict: Cow<'static, str>,
    /// The unit of work CPU is compared per: `syscalls`, `wakeups` or `none` (per
    /// second).
    pub work: Cow<'static, str>,
    pub windows_on: usize,
    pub windows_off: usize,
    pub pairs: usize,
    /// Pairs left out because a process of the set exited in them, its last CPU
    /// unmeasured.
    pub dropped_pairs: usize,
    /// The most and the fewest processes a window covered (1 for one --pid).
    pub processes: u32,
    pub processes_min: u32,
    pub seconds_on: f64,
    pub seconds_off: f64,
    /// Added CPU while attached, as a share of one CPU.
    pub cpu_share: Option<JsonInterval>,
    pub per_hit_ns: Option<JsonInterval>,
    /// With a work meter: the work rate while attached against detached, relative
    /// (-0.02: 2% less work done while attached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_moved: Option<JsonInterval>,
    /// With a work meter: the added CPU per hit by CPU per second alone (`--work none`'s
    /// arithmetic on the same windows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_hit_cpu_alone_ns: Option<JsonInterval>,
    pub hits_per_second: f64,
    /// The target's own CPU share in the detached windows.
    pub base_cpu_share: Option<f64>,
    pub detach_ms: Option<f64>,
    pub attach_ms: Option<f64>,
    /// The target's CPU during the changes beyond its detached rate, per on/off cycle.
    pub churn_cpu_ms: Option<f64>,
}

impl From<&crate::insitu::InSituSummary> for JsonInSitu {
    fn from(s: &crate::insitu::InSituSummary) -> Self {
        Self {
            verdict: s.verdict.as_str().into(),
            work: s.work.as_str().into(),
            windows_on: s.windows_on,
            windows_off: s.windows_off,
            pairs: s.pairs,
            dropped_pairs: s.dropped_pairs,
            processes: s.processes.1,
            processes_min: s.processes.0,
            seconds_on: s.seconds_on,
            seconds_off: s.seconds_off,
            cpu_share: s.added_share.map(Into::into),
            per_hit_ns: s.per_hit_ns.map(Into::into),
            work_moved: s.work_moved.map(Into::into),
            per_hit_cpu_alone_ns: s.per_hit_cpu_alone_ns.map(Into::into),
            hits_per_second: s.hits_per_second,
            base_cpu_share: s.base_share,
            detach_ms: s.detach_ms,
            attach_ms: s.attach_ms,
            churn_cpu_ms: s.churn_cpu_ms,
        }
    }
}

/// What timed the dispatches: entries always; returns where the kernel allows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonDispatchHooks {
    pub entries: Cow<'static, str>,
    pub returns: Option<Cow<'static, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub returns_missing: Option<Cow<'static, str>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonOtherDispatch {
    pub count: u64,
    pub mean_ns: Option<f64>,
}

/// An exec of the target probetop followed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonExec<'a> {
    /// Probes attached after it carry this generation.
    pub generation: u32,
    pub exe: Cow<'a, str>,
    pub at_unix_ms: u64,
    /// Probes attached to the new program (0: no spec matched it).
    pub probes_attached: usize,
}

/// The run's headline: what every probe together cost the target.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonHeadline {
    /// In words, as the stdout summary and the TUI's status line say it.
    pub text: String,
    /// Share of one CPU all probes cost the target (0.032: 3.2% of one CPU).
    pub cpu_share: Option<f64>,
    /// The target's own CPU, the probes' cost taken out, share of one CPU.
    pub target_own_cpu_share: Option<f64>,
    /// `cpu_share` over `target_own_cpu_share` (0.18: +18% on the target's own CPU).
    pub on_target: Option<f64>,
    /// Where the target's own CPU is too small or too uncertain to divide by: the
    /// probes' share of its whole CPU (0.9: the probes are 90% of what it ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_target_cpu: Option<f64>,
    /// The target's whole CPU as measured (summed over the process set with several),
    /// probes included, share of one CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_cpu_share: Option<f64>,
    /// Whole cost of a hit, every probe's weighted by its hits, ns.
    pub per_hit_ns: Option<f64>,
    /// `estimate` (calibration), `in-situ` (measured on the target) or `none`.
    pub method: Cow<'static, str>,
    /// In situ: the 95% interval of `cpu_share`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_share_low: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_share_high: Option<f64>,
    /// With `--in-situ`: the reconciled answer, which number it uses and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<JsonAnswer>,
}

/// The reconciled answer of an `--in-situ` run, as the end of the run says it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonAnswer {
    /// `in-situ`, `estimate` or `none`: the number the headline uses.
    pub uses: Cow<'static, str>,
    /// Why: `in-situ-agrees-with-estimate`, `in-situ-disagrees-with-estimate` (in situ
    /// trusted: the target's own CPU), `in-situ-without-estimate`,
    /// `in-situ-without-signal` (the estimate) or `no-number`.
    pub why: Cow<'static, str>,
    /// The answer in words: the number, its interval and why.
    pub text: String,
    /// The other number, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other: Option<String>,
    /// What the target's work rate did while probed, and what it means for the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<String>,
}

impl From<&Report> for JsonHeadline {
    fn from(report: &Report) -> Self {
        use crate::present::headline::{Headline, Method};
        let h = Headline::of_report(report);
        let (low, high) = match h.method {
            Method::InSitu { low, high } => (Some(low), Some(high)),
            _ => (None, None),
        };
        Self {
            text: h.sentence(),
            cpu_share: h.cpu_share,
            target_own_cpu_share: h.target_own,
            on_target: h.on_target(),
            of_target_cpu: h.of_target,
            target_cpu_share: h.target_cpu,
            per_hit_ns: h.per_hit_ns,
            method: Cow::Borrowed(h.method.as_str()),
            cpu_share_low: low,
            cpu_share_high: high,
            answer: crate::present::answer::Answer::of(report).map(|a| JsonAnswer {
                uses: a.why.uses().into(),
                why: a.why.as_str().into(),
                text: a.text,
                other: a.other,
                work: a.work,
            }),
        }
    }
}

/// A `latency:` pair's row in `probes`, told by `"kind": "latency"`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonLatency<'a> {
    pub kind: Cow<'static, str>,
    pub spec: Cow<'a, str>,
    pub name: Cow<'a, str>,
    /// A keyed pair's row of one key (` key=argN`); `other` holds every key past
    /// `--max-keys`. The pair's own row (without `key`) counts every call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Cow<'a, str>>,
    pub object: Cow<'a, str>,
    /// How the returns were probed: `uretprobe`, `ret-uprobes` (uprobes on the
    /// function's `ret` instructions) or `usdt`.
    pub end_path: Cow<'static, str>,
    /// The ids of the probes of its two halves (rows of `probes` too).
    pub start_probes: Cow<'a, [u32]>,
    pub end_probes: Cow<'a, [u32]>,
    /// Calls paired: a start and its end.
    pub calls: u64,
    pub calls_per_second: f64,
    /// Calls open when the window closed; unwound by an exception or a longjmp (no
    /// return seen); ends without a start (begun before the window); too deep to track.
    pub open: u64,
    pub unwound: u64,
    pub unmatched: u64,
    pub overflowed: u64,
    /// From the start probe's clock read to the end probe's, per call.
    pub latency_ns: HandlerSummary,
    /// The measured latencies whole, encoded as `handler_ns_hdr` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ns_hdr: Option<String>,
    /// The same less the probes' cost inside the call: one whole hit of the start
    /// probe, and every probed hit nested in the call.
    pub latency_corrected_ns: HandlerSummary,
    /// Whether the probes were priced, so their cost taken off (else the corrected
    /// numbers are the measured ones).
    pub corrected: bool,
    /// Both probes' whole cost per call.
    pub whole_cost_ns: Option<f64>,
    /// `whole_cost_ns` / the corrected mean latency.
    pub overhead_share: Option<f64>,
}

/// An entry of `probes`: a probe, or a latency pair (read back by its `kind`: a probe's
/// is a probe kind, a pair's `latency`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonEntry<'a> {
    Probe(Box<JsonProbe<'a>>),
    Latency(Box<JsonLatency<'a>>),
}

impl<'a> JsonEntry<'a> {
    /// The probe, if this entry is one (not a latency pair).
    pub fn probe(&self) -> Option<&JsonProbe<'a>> {
        match self {
            Self::Probe(p) => Some(p),
            Self::Latency(_) => None,
        }
    }

    /// The probe, owned, if this entry is one.
    pub fn into_probe(self) -> Option<JsonProbe<'a>> {
        match self {
            Self::Probe(p) => Some(*p),
            Self::Latency(_) => None,
        }
    }
}

/// With `--budget`: the 95% interval of a probe's scaled hits.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JsonHitsInterval {
    pub low: u64,
    pub high: u64,
}

/// `--budget`: what was asked, what the probes used (in the same unit), the last duty.
#[derive(Debug, Clone, Serialize)]
pub struct JsonBudget<'a> {
    asked: f64,
    /// `share` (of the target's CPU) or `seconds_per_second`.
    unit: &'static str,
    #[serde(flatten)]
    summary: &'a crate::insitu::budget::BudgetSummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JsonReport<'a> {
    pub tool: Cow<'static, str>,
    pub version: Cow<'static, str>,
    pub target: JsonTarget<'a>,
    pub started_unix_ms: u64,
    pub duration_s: f64,
    /// What every probe together cost the target: read this first.
    pub headline: JsonHeadline,
    pub probes: Vec<JsonEntry<'a>>,
    pub cost: JsonCost<'a>,
    /// The execs followed (`--follow-exec`), oldest first; empty without.
    pub execs: Vec<JsonExec<'a>>,
    /// How the probes were attached: `uprobe_multi` (one link per binary) or
    /// `perf_event` (one event per probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attach_path: Option<Cow<'static, str>>,
    /// Points the specs matched that the kernel refuses to probe: not attached.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub skipped: Cow<'a, [super::SkippedPoint]>,
    /// Probed objects the target loaded again as another file (replaced on disk): their
    /// probes stayed on the old one and missed the new file's calls.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub replaced_objects: Cow<'a, [super::ReplacedObject]>,
    /// `--budget`: written, not read back (the lab does not read it).
    #[serde(skip_serializing_if = "Option::is_none", skip_deserializing)]
    pub budget: Option<JsonBudget<'a>>,
    /// `--otlp`: the endpoint, and the pushes it took (the final one included), failed
    /// or dropped, with the last failure's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp: Option<Cow<'a, super::OtlpPushes>>,
}

impl<'a> JsonReport<'a> {
    /// The probes of `probes`, without the latency pairs' rows and keyed rows.
    pub fn probe_rows(&self) -> impl Iterator<Item = &JsonProbe<'a>> {
        self.probes
            .iter()
            .filter_map(JsonEntry::probe)
            .filter(|p| p.key.is_none())
    }
}

/// probetop's own probe's part of a breakpoint it shares with other tools' probes.
fn shared_site(cost: &crate::present::ProbeCostReport) -> Option<JsonSharedSite<'_>> {
    let (split, owners) = cost.shared.as_ref()?;
    let own = JsonSharedPart {
        own: true,
        tool: "probetop".into(),
        pid: Some(std::process::id()),
        marginal_ns: split.own.marginal_ns,
        marginal_method: "calibration".into(),
        share_ns: split.own.share_ns,
    };
    let others = split
        .others
        .iter()
        .zip(owners)
        .map(|(part, o)| JsonSharedPart {
            own: false,
            tool: Cow::Borrowed(&o.owner.tool),
            pid: o.owner.pid,
            marginal_ns: part.marginal_ns,
            marginal_method: o.price.program_method.as_str().into(),
            share_ns: part.share_ns,
        });
    Some(JsonSharedSite {
        total_ns: split.total_ns,
        trap_ns: split.trap_ns,
        split: crate::present::SHARED_SPLIT.into(),
        owners: std::iter::once(own).chain(others).collect(),
    })
}

/// A keyed probe's row of one key: the probe's entry with that key's hits, handler
/// times and CPU share (the same cost per hit); per-thread counts stay on the probe's.
fn keyed_row<'a>(whole: &JsonProbe<'a>, keyed: &'a crate::aggregate::KeyedHits) -> JsonProbe<'a> {
    let part = if whole.hits > 0 {
        keyed.hits as f64 / whole.hits as f64
    } else {
        0.0
    };
    JsonProbe {
        key: Some(Cow::Borrowed(keyed.key.as_str())),
        hits: keyed.hits,
        hits_interval: None,
        hits_counted: None,
        dropped: 0,
        handler_ns: keyed.handler_ns,
        last_args: None,
        threads: Default::default(),
        pids: Default::default(),
        threads_dropped: Default::default(),
        threads_hits: 0,
        cpu_share: whole.cpu_share.map(|s| s * part),
        ..whole.clone()
    }
}

pub fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let scaled = |id: u32| {
        report
            .budget
            .as_ref()
            .and_then(|b| b.scaled.get(id as usize).copied())
    };
    let doc = JsonReport {
        tool: "probetop".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        target: JsonTarget {
            pid: report.target.pid,
            exe: Cow::Borrowed(&report.target.exe),
            comm: Cow::Borrowed(&report.target.comm),
            cmdline: Cow::Borrowed(&report.target.cmdline),
        },
        started_unix_ms: report.started_unix_ms,
        duration_s: report.duration_s,
        headline: report.into(),
        probes: report
            .probes
            .iter()
            .flat_map(|p| {
                let whole = JsonProbe {
                    id: p.id,
                    spec: Cow::Borrowed(&p.spec),
                    kind: p.kind,
                    name: Cow::Borrowed(&p.name),
                    key: None,
                    resolved: p.resolved.as_deref().map(Cow::Borrowed),
                    object: Cow::Borrowed(&p.object),
                    address: p.address,
                    file_offset: p.file_offset,
                    generation: p.generation,
                    exe: Cow::Borrowed(&p.exe),
                    mode: p.mode.as_str().into(),
                    own: p.other.is_none(),
                    owner: p.other.as_ref().map(|site| JsonOwner {
                        pid: site.owner.pid,
                        comm: site.owner.comm.as_deref().map(Cow::Borrowed),
                        tool: Cow::Borrowed(&site.owner.tool),
                        via: site.via().into(),
                        prog_id: site.prog_id,
                        event: site.event.as_deref().map(Cow::Borrowed),
                        shape: site.shape.map(ReportedShape::from),
                        program_ns: p.cost.other.and_then(|o| o.program_ns),
                        program_method: p.cost.other.map(|o| o.program_method.as_str().into()),
                        hits_method: if site.counted {
                            "counting-probe-on-the-same-site".into()
                        } else {
                            "not-counted-counter-refused".into()
                        },
                        counting_ns: p.cost.counting_ns,
                    }),
                    hits: p.hits,
                    hits_interval: scaled(p.id).map(|s| JsonHitsInterval {
                        low: s.low.floor() as u64,
                        high: s.high.ceil() as u64,
                    }),
                    hits_counted: scaled(p.id).map(|s| s.counted),
                    dropped: p.dropped,
                    handler_ns: HandlerSummary::of(&p.handler_ns),
                    handler_ns_hdr: super::hdr::encode(&p.handler_ns),
                    last_args: p.last_args.as_deref().map(Cow::Borrowed),
                    threads: p
                        .threads
                        .iter()
                        .map(|(tid, n)| (tid.to_string(), *n))
                        .collect(),
                    pids: p
                        .processes
                        .iter()
                        .map(|(pid, n)| (pid.to_string(), *n))
                        .collect(),
                    threads_dropped: p
                        .threads_dropped
                        .iter()
                        .map(|(tid, n)| (tid.to_string(), *n))
                        .collect(),
                    threads_cover: p.threads_cover.as_str().into(),
                    threads_hits: p.threads.iter().map(|(_, n)| n).sum(),
                    cost_class: p.cost.site.as_ref().map(|s| s.class.as_str().into()),
                    probed_instruction: p
                        .cost
                        .site
                        .as_ref()
                        .map(|s| s.instruction.as_str())
                        .filter(|i| !i.is_empty())
                        .map(Cow::Borrowed),
                    whole_cost_ns: p.cost.whole_cost_ns,
                    whole_cost_method: p.cost.method.map(|m| m.as_str().into()),
                    whole_cost_assumes: p.cost.assumes.map(|a| a.as_str().into()),
                    whole_cost_reading: p.cost.reading.map(|r| r.as_str().into()),
                    cpu_share: p.cost.cpu_share,
                    dispatch_ns: p.cost.dispatch.as_ref().map(|d| JsonDispatch {
                        per_hit_mean: d.per_hit_ns(),
                        entry: (d.entry.count > 0).then(|| HandlerSummary::of(&d.entry_ns)),
                        ret: (d.ret.count > 0).then(|| HandlerSummary::of(&d.return_ns)),
                    }),
                    shared_site: shared_site(&p.cost),
                    gaps: p.cost.gaps,
                    streamed_clock_ns: p.cost.streamed_clock,
                    moved_in_kernel: p.moved.map(|m| JsonMove {
                        after_s: m.after.as_secs_f64(),
                        reason: m.reason.as_str().into(),
                        hits_per_second: m.per_second,
                        run_hits_per_second: m.run_per_second,
                        run_dropped: m.run_dropped,
                    }),
                };
                let keyed: Vec<JsonEntry> = report
                    .keyed
                    .iter()
                    .filter(|(id, _)| *id == p.id)
                    .map(|(_, k)| JsonEntry::Probe(Box::new(keyed_row(&whole, k))))
                    .collect();
                std::iter::once(JsonEntry::Probe(Box::new(whole))).chain(keyed)
            })
            .chain(report.latency.iter().map(|l| {
                JsonEntry::Latency(Box::new(JsonLatency {
                    kind: "latency".into(),
                    spec: Cow::Borrowed(&l.spec),
                    name: Cow::Borrowed(&l.name),
                    key: l.key.as_ref().map(|k| Cow::Borrowed(k.as_str())),
                    object: Cow::Borrowed(&l.object),
                    end_path: l.path.as_str().into(),
                    start_probes: Cow::Borrowed(&l.starts),
                    end_probes: Cow::Borrowed(&l.ends),
                    calls: l.calls,
                    calls_per_second: if l.calls_per_second > 0.0 {
                        l.calls_per_second
                    } else if report.duration_s > 0.0 {
                        l.calls as f64 / report.duration_s
                    } else {
                        0.0
                    },
                    open: l.open,
                    unwound: l.unwound,
                    unmatched: l.unmatched,
                    overflowed: l.overflowed,
                    latency_ns: l.latency_ns,
                    latency_ns_hdr: super::hdr::encode(&l.latency_hist),
                    latency_corrected_ns: l.latency_corrected_ns,
                    corrected: l.corrected_applied,
                    whole_cost_ns: l.whole_cost_ns,
                    overhead_share: l.overhead_share,
                }))
            }))
            .collect(),
        cost: JsonCost {
            cpu_share: report.cost.cpu_share,
            other_uprobe_dispatch: report.cost.other_dispatch.map(|o| JsonOtherDispatch {
                count: o.count,
                mean_ns: o.mean(),
            }),
            dispatch_unmeasured: report.cost.dispatch_unmeasured,
            dispatch_hooks: report.cost.dispatch_hooks.map(|h| JsonDispatchHooks {
                entries: h.entries.into(),
                returns: h.returns.map(Into::into),
                returns_missing: h.returns_missing.map(Into::into),
            }),
            other_bpf_programs: Cow::Borrowed(&report.cost.other_programs),
            whole_cost_method: report.cost.in_situ.as_ref().map(|s| {
                if s.verdict == crate::insitu::Verdict::Measured {
                    "in-situ".into()
                } else {
                    "estimate".into()
                }
            }),
            estimated_per_hit_ns: report.cost.estimated_per_hit_ns,
            in_situ: report.cost.in_situ.as_ref().map(Into::into),
            assumption: report.cost.assumption.as_ref().map(|d| JsonAssumption {
                assumes: d.assumes.as_str().into(),
                why: d.why.clone(),
            }),
            estimates_per_hit_ns: (!report.cost.bracket.is_empty()).then_some(JsonBracket {
                hot: report.cost.bracket.hot,
                cold: report.cost.bracket.cold,
                clock: report.cost.bracket.clock,
            }),
        },
        execs: report
            .execs
            .iter()
            .map(|e| JsonExec {
                generation: e.generation,
                exe: Cow::Borrowed(&e.exe),
                at_unix_ms: e.at_unix_ms,
                probes_attached: e.probes_attached,
            })
            .collect(),
        attach_path: report.attach_path.map(Into::into),
        skipped: Cow::Borrowed(&report.skipped),
        replaced_objects: Cow::Borrowed(&report.replaced),
        budget: report.budget.as_ref().map(|summary| JsonBudget {
            asked: summary.budget.asked(),
            unit: summary.budget.unit(),
            summary,
        }),
        otlp: report.otlp.as_ref().map(Cow::Borrowed),
    };
    let mut out = serde_json::to_vec_pretty(&doc).map_err(|e| ExportError::Encode {
        format: "json",
        reason: e.to_string(),
    })?;
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::sample_report;
    use super::*;

    /// `report` with its second probe another tool's (bpftrace's), as probetop counts it.
    fn with_other(mut report: Report) -> Report {
        use crate::present::{OtherPrice, ProgramMethod};
        report.probes[1].other = Some(crate::attach::others::OtherSite {
            owner: crate::attach::others::Owner {
                pid: Some(77),
                comm: Some("bpftrace".into()),
                tool: "bpftrace".into(),
            },
            returns: true,
            file: "/usr/bin/fixture".into(),
            offset: 0x113a,
            ref_ctr_offset: 0,
            prog_id: Some(9),
            event: None,
            shape: None,
            counted: true,
        });
        report.probes[1].cost.other = Some(OtherPrice {
            program_ns: Some(80.0),
            program_method: ProgramMethod::BpfStats,
        });
        report
    }

    #[test]
    fn own_and_other_tools_probes_are_told_apart() {
        let bytes = render(&with_other(sample_report())).expect("renders");
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        let (own, other) = (&v["probes"][0], &v["probes"][1]);
        assert_eq!(own["own"], true);
        assert!(own.get("owner").is_none(), "{own}");
        assert_eq!(other["own"], false);
        let owner = &other["owner"];
        assert_eq!(owner["pid"], 77);
        assert_eq!(owner["comm"], "bpftrace");
        assert_eq!(owner["tool"], "bpftrace");
        assert_eq!(owner["via"], "bpf");
        assert_eq!(owner["prog_id"], 9);
        assert_eq!(owner["program_ns"], 80.0);
        assert_eq!(owner["program_method"], "bpf-stats");
        assert_eq!(owner["hits_method"], "counting-probe-on-the-same-site");
        assert_eq!(other["hits"], 12);
    }

    #[test]
    fn schema_fields_and_values() {
        let bytes = render(&sample_report()).expect("renders");
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        assert_eq!(v["target"]["pid"], 4242);
        assert_eq!(v["duration_s"], 1.5);
        let probes = v["probes"].as_array().expect("probes array");
        assert_eq!(probes.len(), 2);
        let p = &probes[0];
        assert_eq!(p["spec"], "uprobe:work_unit");
        assert_eq!(p["kind"], "uprobe");
        assert_eq!(p["hits"], 5);
        assert_eq!(p["dropped"], 0);
        let h = &p["handler_ns"];
        for field in ["count", "min", "mean", "p50", "p90", "p99", "p999", "max"] {
            assert!(h.get(field).is_some(), "handler_ns.{field} missing");
        }
        assert_eq!(h["count"], 5);
        assert_eq!(h["min"], 100);
        assert_eq!(h["p50"], 300);
        assert_eq!(probes[1]["kind"], "uretprobe");
        assert_eq!(probes[1]["hits"], 12);
        assert_eq!(probes[1]["dropped"], 2);
        assert_eq!(p["generation"], 0);
        assert_eq!(p["exe"], "/usr/bin/fixture");
        assert_eq!(v["execs"], serde_json::json!([]));
    }

    #[test]
    fn probes_of_a_program_before_an_exec_are_told_apart() {
        let mut report = sample_report();
        report.probes[1].generation = 1;
        report.probes[1].exe = "/usr/bin/other".into();
        report.execs.push(super::super::ExecReport {
            generation: 1,
            exe: "/usr/bin/other".into(),
            at_unix_ms: 1_700_000_000_500,
            probes_attached: 1,
        });
        let v: serde_json::Value =
            serde_json::from_slice(&render(&report).expect("renders")).expect("valid JSON");
        assert_eq!(v["probes"][0]["generation"], 0);
        assert_eq!(v["probes"][1]["generation"], 1);
        assert_eq!(v["probes"][1]["exe"], "/usr/bin/other");
        assert_eq!(
            v["execs"],
            serde_json::json!([{"generation": 1, "exe": "/usr/bin/other",
                                "at_unix_ms": 1_700_000_000_500u64, "probes_attached": 1}])
        );
    }

    #[test]
    fn an_export_reads_back_through_the_same_types() {
        let bytes = render(&with_other(sample_report())).expect("renders");
        let back: JsonReport<'static> = serde_json::from_slice(&bytes).expect("reads back");
        assert_eq!(back.probes.len(), 2);
        assert_eq!(back.probe_rows().nth(1).map(|p| p.hits), Some(12));
        let written: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        let again = serde_json::to_value(&back).expect("encodes");
        assert_eq!(written, again);
    }

    #[test]
    fn an_older_export_without_newer_fields_reads() {
        let old =
            r#"{"duration_s": 2.0, "probes": [{"kind": "uprobe", "spec": "uprobe:f", "hits": 3}]}"#;
        let back: JsonReport<'static> = serde_json::from_str(old).expect("reads");
        assert_eq!(back.duration_s, 2.0);
        let p = back.probe_rows().next().expect("a probe");
        assert_eq!((p.spec.as_ref(), p.hits, p.own), ("uprobe:f", 3, true));
        assert!(p.whole_cost_ns.is_none() && back.cost.in_situ.is_none());
    }
}
