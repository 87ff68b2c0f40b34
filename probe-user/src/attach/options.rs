//! What loading the programs and attaching a probe take.

use std::path::Path;

use probe_common::ProbeConfig;

use super::AttachError;
#[cfg(doc)]
use super::{Attachment, ProcessSet};
use crate::spec::ProbeKind;

/// Load-time settings of the eBPF programs.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Ring buffer size in bytes (a power of two, a multiple of the page size).
    pub ring_bytes: u32,
    /// Queued bytes at which a handler wakes the consumer.
    pub wakeup_bytes: u64,
    /// How many probes will be attached: sizes the per-probe maps.
    pub probe_count: u32,
    /// Room for this many more probes in the per-probe maps (CONFIG and the in-kernel
    /// histograms), attached later under new ids (`--follow-exec`). Kernel dispatch is
    /// measured for the first `probe_count` only.
    pub spare_probes: u32,
    /// Room for this many more probes that only count (other tools' probes, which
    /// probetop counts in `SAMPLE` mode): in CONFIG, not in the in-kernel histograms.
    pub spare_counters: u32,
    /// Size the kernel dispatch maps for this process's probes (see `attach::dispatch`);
    /// `None` leaves them minimal.
    pub dispatch_tgid: Option<u32>,
    /// Size the in-kernel histograms for every probe. They take 592 counters per probe
    /// per CPU of kernel memory (1000 probes on 64 CPUs: 300 MiB), so runs that never
    /// aggregate in the kernel (ring and sample modes) leave them minimal.
    pub kernel_histograms: bool,
    /// Latency pairs the kernel can pair itself (`probe_common::pair`): sizes the pair
    /// maps, 0 leaving them minimal. Each takes two histograms of
    /// `probe_common::pair::BUCKETS` counters per CPU (480 KiB a CPU).
    pub pair_slots: u32,
    /// Time the handler of one hit in this many (at random, per CPU); 1 times every hit.
    /// Only for runs whose probes all aggregate in the kernel: streamed records of
    /// untimed hits would carry no handler time.
    pub time_every: u64,
    /// How probes are attached; `None`: as `PROBETOP_ATTACH_PATH` says if set, else
    /// uprobe_multi links where the kernel has them (and filters by process reliably).
    pub attach_path: Option<AttachPath>,
    /// Count hits only in the processes of a [`ProcessSet`]; probes are then attached
    /// for every process (request pid 0) and the programs filter.
    pub filter_processes: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ring_bytes: probe_common::DEFAULT_RING_BYTES,
            wakeup_bytes: probe_common::DEFAULT_WAKEUP_BYTES,
            probe_count: 1,
            spare_probes: 0,
            spare_counters: 0,
            dispatch_tgid: None,
            kernel_histograms: true,
            pair_slots: 0,
            time_every: 1,
            attach_path: None,
            filter_processes: false,
        }
    }
}

/// One probe to attach, as the kernel needs it.
#[derive(Debug, Clone)]
pub struct AttachRequest<'a> {
    /// Index in the probe table, carried as the BPF cookie.
    pub probe_id: u32,
    /// Entry (uprobe or USDT site) or return.
    pub kind: ProbeKind,
    /// The file the kernel resolves to an inode.
    pub path: &'a Path,
    pub file_offset: u64,
    /// More sites of the same probe (the other `ret` instructions of
    /// `uprobe:FUNC+ret`): attached and detached with it, their hits counted as its own.
    pub more_offsets: Vec<u64>,
    /// File offset of a USDT semaphore: the kernel counts it up while attached.
    pub semaphore_offset: Option<u64>,
    /// How hits reach user space, and which arguments to capture.
    pub config: ProbeConfig,
    /// Fire only in this process; 0: in every process mapping the file (the programs
    /// then count the hits of a [`ProcessSet`]'s members only).
    pub pid: u32,
}

/// How probes are bound to the kernel; one way per [`Attachment`], chosen at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachPath {
    /// A uprobe perf event and a BPF link per probe (any kernel probetop runs on).
    PerfEvent,
    /// One uprobe_multi link per (file, program, kind) (Linux 6.10+ here).
    UprobeMulti,
}

impl AttachPath {
    /// How it is named in `PROBETOP_ATTACH_PATH` and on screen.
    pub fn name(self) -> &'static str {
        match self {
            Self::PerfEvent => "perf_event",
            Self::UprobeMulti => "uprobe_multi",
        }
    }

    /// The path `PROBETOP_ATTACH_PATH` forces, if set (tests, and a way round a
    /// kernel whose multi links misbehave).
    pub(super) fn forced() -> Result<Option<Self>, AttachError> {
        let Some(value) = std::env::var_os(ATTACH_PATH_ENV) else {
            return Ok(None);
        };
        match value.to_str() {
            Some("") => Ok(None),
            Some("perf_event") => Ok(Some(Self::PerfEvent)),
            Some("uprobe_multi") => Ok(Some(Self::UprobeMulti)),
            _ => Err(AttachError::Unsupported(format!(
                "{ATTACH_PATH_ENV}={}: expected perf_event or uprobe_multi",
                value.to_string_lossy()
            ))),
        }
    }
}

/// Forces the attach path: `perf_event` or `uprobe_multi`.
pub(crate) const ATTACH_PATH_ENV: &str = "PROBETOP_ATTACH_PATH";
