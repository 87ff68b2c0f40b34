//! Attachment: loads probetop's eBPF programs and attaches them to probe points, one
//! of two ways, chosen per kernel when the programs are loaded ([`AttachPath`]):
//!
//! - uprobe_multi links (Linux 6.6+, used from 6.10, whose pid filter holds for every
//!   thread): one BPF link per (file, program, kind) binds the program to all its
//!   points, with the probe ids as cookies and the USDT semaphores (`ref_ctr_offset`)
//!   for the kernel to count (see `multi.rs`). Closing a link waits for the kernel's
//!   grace period once however many probes it holds, so detaching hundreds of probes
//!   takes a few closes instead of one each (~0.2 s apiece here).
//! - perf events, elsewhere: each probe is its own uprobe perf event, opened here with
//!   `perf_event_open(2)` on the kernel's `uprobe` PMU rather than through aya, because
//!   aya cannot pass `ref_ctr_offset`. The program is bound to the event by a BPF link
//!   carrying the probe id as its cookie.
//!
//! `PROBETOP_ATTACH_PATH=perf_event|uprobe_multi` forces one. Either way a probe is
//! detached by closing file descriptors, which the kernel also does if probetop dies,
//! so no exit path leaves a probe behind.

pub(crate) mod args;
pub(crate) mod bpf_stats;
mod counters;
pub(crate) mod dispatch;
pub(crate) mod dispatch_time;
mod error;
pub(crate) mod fds;
mod flush;
mod kernel;
pub(crate) mod kernel_btf;
mod links;
mod multi;
pub(crate) mod options;
pub(crate) mod others;
mod perf;
mod processes;

pub(crate) use counters::KernelCounters;
pub(crate) use error::AttachError;
pub(crate) use flush::StagedFlush;
pub(crate) use links::{ProbeLink, ProbeMove};
pub(crate) use options::{AttachPath, AttachRequest, LoadOptions};
pub(crate) use processes::ProcessSet;

use std::{collections::HashMap, io, os::fd::AsFd as _};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData},
    programs::UProbe,
};
use probe_common::ProbeConfig;

use links::{Attached, MultiLink, StoredRequest};
use perf::{UprobePmu, open_uprobe_event};

use crate::spec::ProbeKind;
use crate::sys;

/// The eBPF object built by build.rs from probe-ebpf; empty in builds made with
/// `AYA_BUILD_SKIP=1` (see build.rs).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probetop-ebpf"));

const PROG_UPROBE: &str = "probetop_uprobe";
const PROG_URETPROBE: &str = "probetop_uretprobe";

/// probetop's measuring program for a probe of `kind`.
fn measuring_program(kind: ProbeKind) -> &'static str {
    if kind == ProbeKind::Uretprobe {
        PROG_URETPROBE
    } else {
        PROG_UPROBE
    }
}
/// A program that does nothing (calibration's baseline).
const PROG_EMPTY: &str = "probetop_empty";

/// The loaded programs, their maps, and every attached probe.
pub struct Attachment {
    ebpf: Ebpf,
    path: AttachPath,
    /// The uprobe PMU, on the perf-event path.
    pmu: Option<UprobePmu>,
    /// The programs' copies for uprobe_multi links, on that path.
    multi: Option<multi::Programs>,
    /// Probe ids below this fit the per-probe maps.
    capacity: u32,
    links: Vec<Option<Attached>>,
    /// Indexed by probe id, like `links`.
    requests: Vec<Option<StoredRequest>>,
    multi_links: HashMap<u64, MultiLink>,
    next_multi_link: u64,
}

impl Attachment {
    /// Loads and verifies the programs, and chooses how probes will be attached
    /// (uprobe_multi links where the kernel has them, unless `PROBETOP_ATTACH_PATH`
    /// says otherwise); nothing is attached yet.
    pub fn load(options: LoadOptions) -> Result<Self, AttachError> {
        if EBPF_OBJECT.is_empty() {
            return Err(AttachError::NoEbpfObject);
        }
        kernel::require_features().map_err(AttachError::Unsupported)?;
        let forced = match options.attach_path {
            Some(path) => Some(path),
            None => AttachPath::forced()?,
        };
        let dispatch = dispatch::MapSizes::new(options.dispatch_tgid, options.probe_count);
        let histograms = options
            .probe_count
            .saturating_add(options.spare_probes)
            .clamp(1, probe_common::MAX_PROBES);
        let capacity = histograms
            .saturating_add(options.spare_counters)
            .clamp(1, probe_common::MAX_PROBES);
        // Every online CPU may produce: the wakeup threshold is split among them.
        let cpus = aya::util::online_cpus().map_or(1, |cpus| cpus.len() as u64);
        let wakeup_records = probe_common::wakeup_records(options.wakeup_bytes, cpus);
        let mut loader = EbpfLoader::new();
        loader
            .map_max_entries("EVENTS", options.ring_bytes)
            .map_max_entries("CONFIG", capacity)
            .map_max_entries("DROPS", capacity)
            .map_max_entries("HITS", capacity)
            .map_max_entries(
                "KERNEL_HISTOGRAM",
                if options.kernel_histograms {
                    histograms
                } else {
                    1
                },
            )
            .map_max_entries("GAPS", gap_capacity(capacity, cpus))
            .map_max_entries("PAIR_COUNTS", options.pair_slots.max(1))
            .map_max_entries(
                "PAIR_HIST",
                options.pair_slots.max(1)
                    * probe_common::pair::HISTOGRAMS
                    * probe_common::pair::CHUNKS,
            )
            .map_max_entries(
                "PAIR_STACKS",
                if options.pair_slots > 0 {
                    probe_common::pair::STACK_ENTRIES
                } else {
                    1
                },
            )
            .override_global("WAKEUP_RECORDS", &wakeup_records, true);
        dispatch.apply(&mut loader);
        let offsets = match options.filter_processes {
            true => Some(processes::FieldOffsets::read()?),
            false => None,
        };
        match &offsets {
            Some(offsets) => offsets.apply(&mut loader),
            // A hash map is allocated whole at creation (5 MiB at full size): left at
            // one entry when no set is used.
            None => {
                loader.map_max_entries("PROCESSES", 1);
            }
        }
        let mut ebpf = loader.load(EBPF_OBJECT)?;
        let multi = match forced {
            Some(AttachPath::PerfEvent) => None,
            Some(AttachPath::UprobeMulti) => Some(multi_programs(&ebpf)?),
            None if multi::pid_filter_holds() => multi_programs(&ebpf).ok(),
            None => None,
        };
        let (path, pmu) = match multi {
            Some(_) => (AttachPath::UprobeMulti, None),
            None => (
                AttachPath::PerfEvent,
                Some(UprobePmu::read().map_err(AttachError::NoUprobePmu)?),
            ),
        };
        // Loaded for perf-event links only: on the other path they would never run.
        let perf_programs: &[&'static str] = match path {
            AttachPath::PerfEvent => &[PROG_UPROBE, PROG_URETPROBE],
            AttachPath::UprobeMulti => &[],
        };
        for &name in perf_programs {
            let program: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or(AttachError::MissingProgram(name))?
                .try_into()
                .map_err(|source| AttachError::Program { name, source })?;
            program
                .load()
                .map_err(|source| AttachError::Program { name, source })?;
        }
        let mut attachment = Self {
            ebpf,
            path,
            pmu,
            multi,
            capacity,
            links: Vec::new(),
            requests: Vec::new(),
            multi_links: HashMap::new(),
            next_multi_link: 0,
        };
        attachment.set_time_every(options.time_every)?;
        Ok(attachment)
    }

    /// How probes are attached: `"uprobe_multi"` or `"perf_event"`.
    pub fn attach_path(&self) -> &'static str {
        self.path.name()
    }

    /// Times the handler of one hit in `every` from now on (1: every hit).
    pub fn set_time_every(&mut self, every: u64) -> Result<(), AttachError> {
        let name = "TIMING";
        let map = self
            .ebpf
            .map_mut(name)
            .ok_or(AttachError::MissingMap(name))?;
        let mut timing: Array<&mut MapData, u64> =
            Array::try_from(map).map_err(|source| AttachError::Map { name, source })?;
        timing
            .set(0, probe_common::untimed_below(every), 0)
            .map_err(|source| AttachError::Map { name, source })
    }

    /// Attaches one probe.
    pub fn attach(&mut self, request: &AttachRequest) -> Result<(), AttachError> {
        self.attach_all(std::slice::from_ref(request))
    }

    /// Attaches many probes at once: on the uprobe_multi path, one link per (file,
    /// program, kind) for all of them. Every probe the kernel accepts is attached; the
    /// first refused one, in `requests` order, is the error.
    pub fn attach_all(&mut self, requests: &[AttachRequest]) -> Result<(), AttachError> {
        // The configs must be in place before the first hit can fire.
        for request in requests {
            self.write_config(request)?;
        }
        let outcome = self.link_requests(requests, |r| measuring_program(r.kind));
        outcome
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// [`Self::attach_all`], with the outcome of each request, in order: the caller can
    /// go on without the points the kernel refused ([`AttachError::point_refused`]).
    pub fn attach_each(&mut self, requests: &[AttachRequest]) -> Vec<Result<(), AttachError>> {
        for request in requests {
            if let Err(error) = self.write_config(request) {
                let message = error.to_string();
                return requests
                    .iter()
                    .map(|_| Err(AttachError::Unsupported(message.clone())))
                    .collect();
            }
        }
        self.link_requests(requests, |r| measuring_program(r.kind))
    }

    /// Attaches one probe running a program that does nothing (`probetop calibrate`'s
    /// baseline), loading that program first if needed.
    pub fn attach_empty(&mut self, request: &AttachRequest) -> Result<(), AttachError> {
        let name = PROG_EMPTY;
        // Its uprobe_multi copy is loaded on first link.
        if self.path == AttachPath::PerfEvent {
            let program: &mut UProbe = self
                .ebpf
                .program_mut(name)
                .ok_or(AttachError::MissingProgram(name))?
                .try_into()
                .map_err(|source| AttachError::Program { name, source })?;
            if program.fd().is_err() {
                program
                    .load()
                    .map_err(|source| AttachError::Program { name, source })?;
            }
        }
        self.write_config(request)?;
        let outcome = self.link_requests(std::slice::from_ref(request), |_| name);
        outcome
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// The kernel's run count and run time (ns) of probetop's measuring program for
    /// probes of `kind`, or of the empty program with `empty` (the copy that runs on
    /// this attachment's path); both zero while BPF statistics are off.
    pub fn run_stats(&self, kind: ProbeKind, empty: bool) -> Result<(u64, u64), AttachError> {
        let name = if empty {
            PROG_EMPTY
        } else {
            measuring_program(kind)
        };
        if let Some(multi) = &self.multi {
            let program = multi
                .loaded(name)
                .ok_or(AttachError::MissingProgram(name))?;
            return multi::run_stats(program)
                .map_err(|source| AttachError::ProgramInfo { name, source });
        }
        let info = self
            .ebpf
            .program(name)
            .ok_or(AttachError::MissingProgram(name))?
            .info()
            .map_err(|source| AttachError::Program { name, source })?;
        let run_time_ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
        Ok((info.run_count(), run_time_ns))
    }

    /// The loaded object, for `attach::dispatch` to load and attach its programs and
    /// take its maps.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Attaches one more probe once the kernel counters were taken
    /// ([`Self::take_counters`]): CONFIG is theirs then, and the caller must have
    /// written `request.config` through [`KernelCounters::set_config`] first.
    pub fn attach_configured(&mut self, request: &AttachRequest) -> Result<(), AttachError> {
        let outcome =
            self.link_requests(std::slice::from_ref(request), |r| measuring_program(r.kind));
        outcome
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// [`Self::attach_configured`] for many probes at once (one link per file, program
    /// and kind on the uprobe_multi path): the outcome of each, in `requests` order.
    pub fn attach_configured_all(
        &mut self,
        requests: &[AttachRequest],
    ) -> Vec<Result<(), AttachError>> {
        self.link_requests(requests, |r| measuring_program(r.kind))
    }

    fn write_config(&mut self, request: &AttachRequest) -> Result<(), AttachError> {
        let map = self
            .ebpf
            .map_mut("CONFIG")
            .ok_or(AttachError::MissingMap("CONFIG"))?;
        let mut configs: Array<&mut MapData, ProbeConfig> =
            Array::try_from(map).map_err(|source| AttachError::Map {
                name: "CONFIG",
                source,
            })?;
        configs
            .set(request.probe_id, request.config, 0)
            .map_err(|source| AttachError::Map {
                name: "CONFIG",
                source,
            })
    }

    /// Attaches probetop's own flush probe (see `flush.rs`) the way the probes are
    /// attached, and starts the thread that fires it on every CPU.
    pub fn attach_flush(&mut self) -> Result<StagedFlush, AttachError> {
        let (path, offset) = flush::own_flush_point().map_err(|source| {
            AttachError::Unsupported(format!("probetop's own flush point: {source}"))
        })?;
        let own_pid = std::process::id();
        let cookie = u64::from(probe_common::FLUSH_PROBE_ID);
        let failed = |source: io::Error| AttachError::PerfEventOpen {
            probe_id: probe_common::FLUSH_PROBE_ID,
            kind: ProbeKind::Uprobe,
            path: path.display().to_string(),
            offset,
            source,
        };
        let link = match self.multi.as_mut() {
            Some(programs) => {
                let point = multi::Point {
                    offset,
                    ref_ctr_offset: 0,
                    cookie,
                };
                let program = programs.program(PROG_UPROBE)?;
                vec![multi::create_link(program, &path, &[point], false, own_pid).map_err(failed)?]
            }
            None => {
                let (pmu, program_fd) = self.perf_program(PROG_UPROBE)?;
                let perf_event =
                    open_uprobe_event(pmu, &path, offset, 0, false, own_pid).map_err(failed)?;
                let link =
                    sys::bpf::link_perf_event(program_fd.as_fd(), perf_event.as_fd(), cookie)
                        .map_err(failed)?;
                vec![link, perf_event]
            }
        };
        StagedFlush::start(link).map_err(|source| {
            AttachError::Unsupported(format!("starting probetop's flush thread: {source}"))
        })
    }

    /// How many probe ids the per-probe maps hold (ids `0..capacity`).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// The entry for `id` in a per-probe table, which grows to hold it.
fn slot_mut<T>(table: &mut Vec<Option<T>>, id: u32) -> &mut Option<T> {
    let slot = id as usize;
    if table.len() <= slot {
        table.resize_with(slot + 1, || None);
    }
    &mut table[slot]
}

/// The measuring programs' copies for uprobe_multi links, if this kernel makes them.
fn multi_programs(ebpf: &Ebpf) -> Result<multi::Programs, AttachError> {
    let mut programs = multi::Programs::relocate(
        ebpf,
        EBPF_OBJECT,
        &[PROG_UPROBE, PROG_URETPROBE, PROG_EMPTY],
    )?;
    let probe = programs.program(PROG_UPROBE)?;
    multi::kernel_supports(probe).map_err(AttachError::NoUprobeMulti)?;
    programs.program(PROG_URETPROBE)?;
    Ok(programs)
}

/// Kernel memory the maps of an attachment loaded with `options` take, bytes, as far as
/// they grow with the probes or are large (a memory cgroup is charged for them): the
/// ring buffer, and per probe slot its config, drop and hit counters, in-kernel
/// histograms (kernel and auto modes) and gap histograms (when under
/// [`GAP_MAP_BUDGET`]), the per-CPU ones once per possible CPU.
pub(crate) fn kernel_memory_bytes(options: &LoadOptions) -> u64 {
    let cpus = aya::util::nr_cpus().map_or(1, |n| n as u64);
    let slots = u64::from(
        options
            .probe_count
            .saturating_add(options.spare_probes)
            .clamp(1, probe_common::MAX_PROBES),
    );
    let size = |bytes: usize| bytes as u64;
    let config = size(std::mem::size_of::<ProbeConfig>());
    // DROPS and HITS: one u64 per CPU each.
    let counters = 2 * 8 * cpus;
    let histograms = if options.kernel_histograms {
        size(std::mem::size_of::<probe_common::KernelHistogram>()) * cpus
    } else {
        0
    };
    let gaps = if gap_capacity(slots as u32, cpus) > 1 {
        size(std::mem::size_of::<probe_common::GapHistogram>()) * cpus
    } else {
        0
    };
    // Latency pairs the kernel pairs: two histograms each per CPU, and the threads'
    // stacks (an LRU hash, allocated whole).
    let pairs = if options.pair_slots > 0 {
        let histograms = u64::from(probe_common::pair::BUCKETS) * 8 * 2 * cpus;
        u64::from(options.pair_slots) * histograms
            + u64::from(probe_common::pair::STACK_ENTRIES)
                * size(std::mem::size_of::<probe_common::PairStack>() + 64)
    } else {
        0
    };
    u64::from(options.ring_bytes) + slots * (config + counters + histograms + gaps) + pairs
}

/// Kernel memory the gap histograms may take (per probe, per CPU); beyond it there are
/// none and hits are priced without them (`calibrate::gap`).
const GAP_MAP_BUDGET: u64 = 32 << 20;

/// Probes with a gap histogram: all of them, or none (one unused slot) when that would
/// take more than [`GAP_MAP_BUDGET`].
fn gap_capacity(capacity: u32, cpus: u64) -> u32 {
    let bytes = u64::from(capacity)
        * cpus.max(1)
        * std::mem::size_of::<probe_common::GapHistogram>() as u64;
    if bytes <= GAP_MAP_BUDGET { capacity } else { 1 }
}
