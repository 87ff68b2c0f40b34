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

pub mod args;
pub mod dispatch;
pub mod fds;
mod flush;
mod kernel;
pub mod kernel_btf;
mod multi;
mod processes;

pub use flush::StagedFlush;
pub use processes::ProcessSet;

use std::{
    collections::HashMap,
    ffi::CString,
    fs, io,
    os::{
        fd::{AsFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::UProbe,
};
use probe_common::{KernelHistogram, ProbeConfig, khist};

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
const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("loading the eBPF programs failed: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("the eBPF program {name} was refused by the kernel: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("the eBPF object has no map {0}")]
    MissingMap(&'static str),
    #[error("the eBPF object has no program {0}")]
    MissingProgram(&'static str),
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    #[error("this kernel has no uprobe PMU ({UPROBE_PMU}): it needs CONFIG_UPROBE_EVENTS ({0})")]
    NoUprobePmu(io::Error),
    #[error("cannot attach {kind} to {path} at offset {offset:#x}: {source}")]
    PerfEventOpen {
        probe_id: u32,
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error("cannot bind the eBPF program to the {kind} at {path}+{offset:#x}: {source}")]
    Link {
        probe_id: u32,
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error(
        "cannot attach {kind} to {path} at offset {offset:#x} (uprobe_multi link, probe {probe_id}): {source}"
    )]
    UprobeMulti {
        probe_id: u32,
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error("the kernel has no uprobe_multi links ({0})")]
    NoUprobeMulti(io::Error),
    #[error(
        "the uprobe_multi copy of the eBPF program {name} was refused: {source}; verifier: {log}"
    )]
    MultiProgram {
        name: &'static str,
        source: io::Error,
        log: String,
    },
    #[error("preparing the eBPF programs for uprobe_multi links failed: {0}")]
    Relocation(String),
    #[error("reading the kernel's statistics of the eBPF program {name}: {source}")]
    ProgramInfo {
        name: &'static str,
        source: io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error(
        "this probetop was built without its eBPF programs (AYA_BUILD_SKIP was set): rebuild without it"
    )]
    NoEbpfObject,
}

impl AttachError {
    /// Whether the kernel refused this one point for the instruction there (ENOTSUPP,
    /// 524: a prefix or opcode it will not probe; ENOEXEC: bytes it cannot decode),
    /// which says nothing about the other points.
    pub fn point_refused(&self) -> bool {
        const ENOTSUPP: i32 = 524;
        match self {
            Self::PerfEventOpen { source, .. } | Self::UprobeMulti { source, .. } => {
                matches!(source.raw_os_error(), Some(ENOTSUPP | libc::ENOEXEC))
            }
            _ => false,
        }
    }

    /// The probe the kernel refused, when the error is about one.
    pub fn probe_id(&self) -> Option<u32> {
        match self {
            Self::PerfEventOpen { probe_id, .. }
            | Self::Link { probe_id, .. }
            | Self::UprobeMulti { probe_id, .. } => Some(*probe_id),
            _ => None,
        }
    }
}

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
    /// Size the kernel dispatch maps for this process's probes (see `attach::dispatch`);
    /// `None` leaves them minimal.
    pub dispatch_tgid: Option<u32>,
    /// Size the in-kernel histograms for every probe. They take 592 counters per probe
    /// per CPU of kernel memory (1000 probes on 64 CPUs: 300 MiB), so runs that never
    /// aggregate in the kernel (ring and sample modes) leave them minimal.
    pub kernel_histograms: bool,
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
            dispatch_tgid: None,
            kernel_histograms: true,
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
    /// File offset of a USDT semaphore: the kernel counts it up while attached.
    pub semaphore_offset: Option<u64>,
    /// How hits reach user space, and which arguments to capture.
    pub config: ProbeConfig,
    /// Fire only in this process; 0: in every process mapping the file (the programs
    /// then count the hits of a [`ProcessSet`]'s members only).
    pub pid: u32,
}

/// What the uprobe PMU's sysfs directory says about its config layout.
#[derive(Debug, Clone, Copy)]
struct UprobePmu {
    perf_type: u32,
    retprobe_bit: u32,
}

impl UprobePmu {
    fn read() -> io::Result<Self> {
        let perf_type = fs::read_to_string(format!("{UPROBE_PMU}/type"))?
            .trim()
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let format = fs::read_to_string(format!("{UPROBE_PMU}/format/retprobe"))?;
        let retprobe_bit = format
            .trim()
            .strip_prefix("config:")
            .and_then(|bit| bit.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format.clone()))?;
        Ok(Self {
            perf_type,
            retprobe_bit,
        })
    }
}

/// The link of one probe, or of every probe of a uprobe_multi link; dropping it
/// detaches them.
#[derive(Debug)]
pub struct ProbeLink {
    _fds: LinkFds,
}

#[derive(Debug)]
enum LinkFds {
    /// A perf event and the BPF link binding the program to it.
    PerfEvent {
        _link: OwnedFd,
        _perf_event: OwnedFd,
    },
    /// A uprobe_multi link.
    Multi { _link: OwnedFd },
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
    fn forced() -> Result<Option<Self>, AttachError> {
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
pub const ATTACH_PATH_ENV: &str = "PROBETOP_ATTACH_PATH";

/// Where an attached probe's link is.
#[derive(Debug)]
enum Attached {
    /// Its own perf event and link.
    PerfEvent(ProbeLink),
    /// Shared: the key of its uprobe_multi link in [`Attachment::multi_links`].
    Multi(u64),
}

/// A uprobe_multi link and the probes it holds (all of one [`GroupKey`]).
#[derive(Debug)]
struct MultiLink {
    link: OwnedFd,
    members: Vec<u32>,
}

/// What the probes of one uprobe_multi link share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    program: &'static str,
    path: PathBuf,
    retprobe: bool,
    pid: u32,
}

/// An [`AttachRequest`] kept to attach the same probe again after a detach. Its config
/// is not kept: it stays in the kernel's per-probe map, where the collector may have
/// changed it since.
#[derive(Debug, Clone)]
struct StoredRequest {
    /// The program the probe runs.
    program: &'static str,
    kind: ProbeKind,
    path: PathBuf,
    file_offset: u64,
    semaphore_offset: Option<u64>,
    pid: u32,
}

impl StoredRequest {
    fn group(&self) -> GroupKey {
        GroupKey {
            program: self.program,
            path: self.path.clone(),
            retprobe: self.kind == ProbeKind::Uretprobe,
            pid: self.pid,
        }
    }
}

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
        let capacity = options
            .probe_count
            .saturating_add(options.spare_probes)
            .clamp(1, probe_common::MAX_PROBES);
        // Every online CPU may produce: the wakeup threshold is split among them.
        let cpus = aya::util::online_cpus().map_or(1, |cpus| cpus.len() as u64);
        let wakeup_records = probe_common::wakeup_records(options.wakeup_bytes, cpus);
        let mut loader = EbpfLoader::new();
        loader
            .map_max_entries("EVENTS", options.ring_bytes)
            .map_max_entries("CONFIG", capacity)
            .map_max_entries(
                "KERNEL_HISTOGRAM",
                if options.kernel_histograms {
                    capacity
                } else {
                    1
                },
            )
            .map_max_entries("GAPS", gap_capacity(capacity, cpus))
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

    /// Records and links `requests` (their configs are in place), each running the
    /// program `program` names for it; the outcome of each, in order. A probe attached
    /// already under the same id is detached first.
    fn link_requests(
        &mut self,
        requests: &[AttachRequest],
        program: impl Fn(&AttachRequest) -> &'static str,
    ) -> Vec<Result<(), AttachError>> {
        let ids: Vec<u32> = requests.iter().map(|r| r.probe_id).collect();
        self.unlink(&ids);
        for request in requests {
            let stored = StoredRequest {
                program: program(request),
                kind: request.kind,
                path: request.path.to_path_buf(),
                file_offset: request.file_offset,
                semaphore_offset: request.semaphore_offset,
                pid: request.pid,
            };
            *slot_mut(&mut self.requests, request.probe_id) = Some(stored);
        }
        let mut failures = self.link_stored(&ids);
        ids.iter()
            .map(|id| match failures.remove(id) {
                Some(error) => {
                    // Never attached: nothing to attach again.
                    *slot_mut(&mut self.requests, *id) = None;
                    Err(error)
                }
                None => Ok(()),
            })
            .collect()
    }

    /// Attaches the probes of `ids`, whose requests are stored and which are not
    /// attached; returns the refusals by probe id.
    fn link_stored(&mut self, ids: &[u32]) -> HashMap<u32, AttachError> {
        let mut failures = HashMap::new();
        match self.path {
            AttachPath::PerfEvent => {
                for &id in ids {
                    match self.open_perf_link(id) {
                        Ok(link) => {
                            *slot_mut(&mut self.links, id) = Some(Attached::PerfEvent(link))
                        }
                        Err(error) => {
                            failures.insert(id, error);
                        }
                    }
                }
            }
            AttachPath::UprobeMulti => {
                // One link per group, in the order groups first appear.
                let mut groups: Vec<(GroupKey, Vec<u32>)> = Vec::new();
                for &id in ids {
                    let Some(request) = self.request(id) else {
                        continue;
                    };
                    let key = request.group();
                    match groups.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, members)) => members.push(id),
                        None => groups.push((key, vec![id])),
                    }
                }
                for (key, members) in groups {
                    self.link_group(&key, members, &mut failures);
                }
            }
        }
        failures
    }

    fn request(&self, probe_id: u32) -> Option<&StoredRequest> {
        self.requests
            .get(probe_id as usize)
            .and_then(Option::as_ref)
    }

    /// Creates one uprobe_multi link for `members` (all of `key`). The kernel refuses
    /// a whole link for one point it cannot probe: then each half is tried on its own,
    /// down to the refused points, so every other one is attached and each refusal
    /// names its probe.
    fn link_group(
        &mut self,
        key: &GroupKey,
        members: Vec<u32>,
        failures: &mut HashMap<u32, AttachError>,
    ) {
        if members.is_empty() {
            return;
        }
        let points: Vec<multi::Point> = members
            .iter()
            .filter_map(|&id| {
                let request = self.request(id)?;
                Some(multi::Point {
                    offset: request.file_offset,
                    ref_ctr_offset: request.semaphore_offset.unwrap_or(0),
                    cookie: u64::from(id),
                })
            })
            .collect();
        let created = match self.multi.as_mut() {
            Some(programs) => match programs.program(key.program) {
                Ok(program) => {
                    multi::create_link(program, &key.path, &points, key.retprobe, key.pid)
                        .map_err(multi::Refusal::Kernel)
                }
                Err(error) => Err(multi::Refusal::Program(error)),
            },
            None => Err(multi::Refusal::Program(AttachError::Unsupported(
                "uprobe_multi links were not set up".to_string(),
            ))),
        };
        match created {
            Ok(link) => {
                let handle = self.next_multi_link;
                self.next_multi_link += 1;
                for &id in &members {
                    *slot_mut(&mut self.links, id) = Some(Attached::Multi(handle));
                }
                self.multi_links.insert(handle, MultiLink { link, members });
            }
            Err(multi::Refusal::Kernel(source)) if members.len() == 1 => {
                failures.insert(members[0], self.multi_error(members[0], source));
            }
            Err(multi::Refusal::Kernel(source)) if !multi::refuses_the_whole_link(&source) => {
                let mut first = members;
                let second = first.split_off(first.len() / 2);
                self.link_group(key, first, failures);
                self.link_group(key, second, failures);
            }
            // The same for every point: the target is gone, the file cannot be opened.
            Err(multi::Refusal::Kernel(source)) => {
                for id in members {
                    let error = match source.raw_os_error() {
                        Some(code) => self.multi_error(id, io::Error::from_raw_os_error(code)),
                        None => AttachError::Unsupported(format!("probe {id}: {source}")),
                    };
                    failures.insert(id, error);
                }
            }
            Err(multi::Refusal::Program(error)) => {
                let message = error.to_string();
                for id in members {
                    failures.insert(id, AttachError::Unsupported(message.clone()));
                }
            }
        }
    }

    /// The error of a uprobe_multi link refused with `source`, naming `probe_id`
    /// (the refused point when the link held only it).
    fn multi_error(&self, probe_id: u32, source: io::Error) -> AttachError {
        match self.request(probe_id) {
            Some(request) => AttachError::UprobeMulti {
                probe_id,
                kind: request.kind,
                path: request.path.display().to_string(),
                offset: request.file_offset,
                source,
            },
            None => AttachError::Unsupported(format!("probe {probe_id}: {source}")),
        }
    }

    /// The uprobe PMU and the fd of the loaded program `name`: what binding a perf
    /// event to it takes.
    fn perf_program(
        &self,
        name: &'static str,
    ) -> Result<(UprobePmu, &aya::programs::ProgramFd), AttachError> {
        let pmu = self
            .pmu
            .ok_or_else(|| AttachError::Unsupported("the uprobe PMU was not read".to_string()))?;
        let program: &UProbe = self
            .ebpf
            .program(name)
            .ok_or(AttachError::MissingProgram(name))?
            .try_into()
            .map_err(|source| AttachError::Program { name, source })?;
        let program_fd = program
            .fd()
            .map_err(|source| AttachError::Program { name, source })?;
        Ok((pmu, program_fd))
    }

    /// Opens the perf event of a stored probe and binds its program to it.
    fn open_perf_link(&self, probe_id: u32) -> Result<ProbeLink, AttachError> {
        let request = self.request(probe_id).ok_or_else(|| {
            AttachError::Unsupported(format!("probe {probe_id} has no attach request"))
        })?;
        let (pmu, program_fd) = self.perf_program(request.program)?;
        let path_text = request.path.display().to_string();
        let perf_event = open_uprobe_event(
            pmu,
            &request.path,
            request.file_offset,
            request.semaphore_offset.unwrap_or(0),
            request.kind == ProbeKind::Uretprobe,
            request.pid,
        )
        .map_err(|source| AttachError::PerfEventOpen {
            probe_id,
            kind: request.kind,
            path: path_text.clone(),
            offset: request.file_offset,
            source,
        })?;
        let link =
            sys::bpf::link_perf_event(program_fd.as_fd(), perf_event.as_fd(), u64::from(probe_id))
                .map_err(|source| AttachError::Link {
                    probe_id,
                    kind: request.kind,
                    path: path_text,
                    offset: request.file_offset,
                    source,
                })?;
        Ok(ProbeLink {
            _fds: LinkFds::PerfEvent {
                _link: link,
                _perf_event: perf_event,
            },
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

    /// Whether probe `probe_id` is attached now.
    pub fn is_attached(&self, probe_id: u32) -> bool {
        self.links
            .get(probe_id as usize)
            .is_some_and(Option::is_some)
    }

    /// Detaches the probes of `ids` that are attached; returns how many, and the links
    /// that held only probes of `ids`, for the caller to close (closing waits for the
    /// kernel's grace period). A uprobe_multi link that holds other probes too is
    /// closed here and made again for those (one close and one create per link, never
    /// one per probe): they miss the hits in between, rather than count one twice.
    fn unlink(&mut self, ids: &[u32]) -> (usize, Vec<ProbeLink>) {
        let mut detached = 0;
        let mut closing = Vec::new();
        let mut touched: Vec<u64> = Vec::new();
        for &id in ids {
            match self.links.get_mut(id as usize).and_then(Option::take) {
                Some(Attached::PerfEvent(link)) => {
                    detached += 1;
                    closing.push(link);
                }
                Some(Attached::Multi(handle)) => {
                    detached += 1;
                    if let Some(link) = self.multi_links.get_mut(&handle) {
                        link.members.retain(|&member| member != id);
                    }
                    if !touched.contains(&handle) {
                        touched.push(handle);
                    }
                }
                None => {}
            }
        }
        for handle in touched {
            let Some(MultiLink { link, members }) = self.multi_links.remove(&handle) else {
                continue;
            };
            if members.is_empty() {
                closing.push(ProbeLink {
                    _fds: LinkFds::Multi { _link: link },
                });
                continue;
            }
            drop(link);
            for &id in &members {
                *slot_mut(&mut self.links, id) = None;
            }
            // Points the kernel accepted a moment ago; should it refuse one now (the
            // target gone), those stay detached, their requests kept for a reattach.
            let _ = self.link_stored(&members);
        }
        (detached, closing)
    }

    /// Detaches one probe; it can be attached again with [`Self::reattach`]. Returns
    /// whether it was attached.
    pub fn detach(&mut self, probe_id: u32) -> bool {
        self.detach_set(&[probe_id]) == 1
    }

    /// Detaches one probe for good: its request is forgotten, so it cannot be attached
    /// again. For probes of a program the target no longer runs (it exec'd): their
    /// attach path may name the new program now, where their offset means nothing.
    /// Returns its link, for the caller to close where waiting is harmless (closing
    /// waits for the kernel's grace period), unless the link holds other probes.
    pub fn retire(&mut self, probe_id: u32) -> Option<ProbeLink> {
        self.retire_set(&[probe_id]).pop()
    }

    /// [`Self::retire`] for many probes at once: the links they held alone (one per
    /// uprobe_multi link, however many probes it held), for the caller to close.
    pub fn retire_set(&mut self, ids: &[u32]) -> Vec<ProbeLink> {
        for &id in ids {
            if let Some(request) = self.requests.get_mut(id as usize) {
                *request = None;
            }
        }
        self.unlink(ids).1
    }

    /// Attaches a probe detached by [`Self::detach`] again, as its original request
    /// asked; nothing happens if it is attached.
    pub fn reattach(&mut self, probe_id: u32) -> Result<(), AttachError> {
        self.reattach_set(&[probe_id])
    }

    /// The ids of every probe attached now.
    pub fn attached_ids(&self) -> Vec<u32> {
        (0..self.links.len() as u32)
            .filter(|&id| self.is_attached(id))
            .collect()
    }

    /// Detaches the probes of `ids` that are attached, keeping their requests so that
    /// [`Self::reattach_set`] can attach them again; returns how many it detached.
    /// On the uprobe_multi path this is one close per link touched (and one create
    /// for the probes of a link left attached).
    pub fn detach_set(&mut self, ids: &[u32]) -> usize {
        self.unlink(ids).0
    }

    /// Attaches the probes of `ids` again (those detached by [`Self::detach_set`] or
    /// [`Self::detach`]); probes attached already are left as they are. On the
    /// uprobe_multi path they get one new link per file, program and kind. Every probe
    /// that can be is attached; the error is the first that cannot, in `ids` order.
    pub fn reattach_set(&mut self, ids: &[u32]) -> Result<(), AttachError> {
        let mut wanted = Vec::new();
        for &id in ids {
            if !self.is_attached(id) && !wanted.contains(&id) && self.request(id).is_some() {
                wanted.push(id);
            }
        }
        let mut failures = self.link_stored(&wanted);
        for &id in ids {
            if self.request(id).is_none() {
                return Err(AttachError::Unsupported(format!(
                    "probe {id} was never attached, or belonged to a program the target no longer runs"
                )));
            }
            if let Some(error) = failures.remove(&id) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Detaches every probe; the programs stay loaded until the attachment is dropped.
    /// On the uprobe_multi path that is one close per link, not per probe.
    pub fn detach_all(&mut self) {
        // Closing from many threads at once was tried: perf-event probes still closed
        // one after the other (293 in 40 s), the kernel serialises their teardown.
        self.links.clear();
        self.multi_links.clear();
    }

    /// Takes the ring buffer of hit records (once).
    pub fn take_ring(&mut self) -> Result<RingBuf<MapData>, AttachError> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .ok_or(AttachError::MissingMap("EVENTS"))?;
        RingBuf::try_from(map).map_err(|source| AttachError::Map {
            name: "EVENTS",
            source,
        })
    }

    /// Takes the kernel-side counters and the per-probe config (once, after attaching).
    pub fn take_counters(&mut self) -> Result<KernelCounters, AttachError> {
        fn take<T>(
            ebpf: &mut Ebpf,
            name: &'static str,
            convert: impl FnOnce(aya::maps::Map) -> Result<T, aya::maps::MapError>,
        ) -> Result<T, AttachError> {
            let map = ebpf.take_map(name).ok_or(AttachError::MissingMap(name))?;
            convert(map).map_err(|source| AttachError::Map { name, source })
        }
        Ok(KernelCounters {
            drops: take(&mut self.ebpf, "DROPS", PerCpuArray::try_from)?,
            thread_drops: take(&mut self.ebpf, "THREAD_DROPS", PerCpuHashMap::try_from)?,
            hits: take(&mut self.ebpf, "HITS", PerCpuArray::try_from)?,
            histogram: take(&mut self.ebpf, "KERNEL_HISTOGRAM", PerCpuArray::try_from)?,
            gaps: take(&mut self.ebpf, "GAPS", PerCpuArray::try_from)?,
            config: take(&mut self.ebpf, "CONFIG", Array::try_from)?,
            timing: self.timing_handle()?,
            dispatch: None,
        })
    }

    /// A second handle on the TIMING map, which stays here for the calibration's cases:
    /// auto mode changes it from the collector, which owns the counters.
    fn timing_handle(&self) -> Result<Array<MapData, u64>, AttachError> {
        let name = "TIMING";
        let Some(aya::maps::Map::Array(data)) = self.ebpf.map(name) else {
            return Err(AttachError::MissingMap(name));
        };
        let id = data
            .info()
            .map_err(|source| AttachError::Map { name, source })?
            .id();
        let data = MapData::from_id(id).map_err(|source| AttachError::Map { name, source })?;
        Array::try_from(aya::maps::Map::Array(data))
            .map_err(|source| AttachError::Map { name, source })
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

/// Counts per `khist` bucket, summed over every CPU's copy of one probe's histogram.
fn sum_over_cpus<'a>(per_cpu: impl Iterator<Item = &'a KernelHistogram>) -> Vec<u64> {
    let mut totals = vec![0u64; khist::BUCKETS as usize];
    for histogram in per_cpu {
        for (total, count) in totals.iter_mut().zip(histogram.counts) {
            *total += count;
        }
    }
    totals
}

/// Kernel memory the gap histograms may take (per probe, per CPU); beyond it there are
/// none and hits are priced without them (`cost::gap`).
const GAP_MAP_BUDGET: u64 = 32 << 20;

/// Probes with a gap histogram: all of them, or none (one unused slot) when that would
/// take more than [`GAP_MAP_BUDGET`].
fn gap_capacity(capacity: u32, cpus: u64) -> u32 {
    let bytes = u64::from(capacity)
        * cpus.max(1)
        * std::mem::size_of::<probe_common::GapHistogram>() as u64;
    if bytes <= GAP_MAP_BUDGET { capacity } else { 1 }
}

/// What the kernel counts per probe besides ring buffer records, and the per-probe
/// config, which can change while attached.
pub struct KernelCounters {
    drops: PerCpuArray<MapData, u64>,
    /// Per (probe id << 32 | thread id), per CPU: dropped hits.
    thread_drops: PerCpuHashMap<MapData, u64, u64>,
    hits: PerCpuArray<MapData, u64>,
    histogram: PerCpuArray<MapData, KernelHistogram>,
    gaps: PerCpuArray<MapData, probe_common::GapHistogram>,
    config: Array<MapData, ProbeConfig>,
    /// One hit in how many is timed (`probe_common::untimed_below`), for all probes.
    timing: Array<MapData, u64>,
    /// Kernel dispatch measurement, when it runs (`dispatch`).
    dispatch: Option<dispatch::Dispatch>,
}

impl KernelCounters {
    /// Hands over the dispatch measurement, read with the other counters.
    pub fn set_dispatch(&mut self, dispatch: dispatch::Dispatch) {
        self.dispatch = Some(dispatch);
    }

    /// The dispatch measurement, if it runs.
    pub fn dispatch(&self) -> Option<&dispatch::Dispatch> {
        self.dispatch.as_ref()
    }

    /// Hits of `probe_id` whose record did not fit in the ring buffer, over all CPUs.
    pub fn drops(&self, probe_id: u32) -> Result<u64, aya::maps::MapError> {
        Ok(self.drops.get(&probe_id, 0)?.iter().sum())
    }

    /// Dropped hits per (probe id, thread id), over all CPUs: every pair the kernel's
    /// table holds (it forgets the least recently dropping past
    /// `probe_common::THREAD_DROPS_ENTRIES`).
    pub fn thread_drops(&self) -> Vec<(u32, u32, u64)> {
        self.thread_drops
            .iter()
            .filter_map(Result::ok)
            .map(|(key, per_cpu)| ((key >> 32) as u32, key as u32, per_cpu.iter().sum::<u64>()))
            .collect()
    }

    /// Every hit of a probe in SAMPLE or KERNEL_HISTOGRAM mode, over all CPUs.
    pub fn hits(&self, probe_id: u32) -> Result<u64, aya::maps::MapError> {
        Ok(self.hits.get(&probe_id, 0)?.iter().sum())
    }

    /// The in-kernel histogram of `probe_id`'s timed hits: counts per `khist` bucket, over
    /// all CPUs.
    pub fn histogram(&self, probe_id: u32) -> Result<Vec<u64>, aya::maps::MapError> {
        Ok(sum_over_cpus(self.histogram.get(&probe_id, 0)?.iter()))
    }

    /// `probe_id`'s gap histogram (`probe_common::gap` buckets) over all CPUs; empty
    /// when the map holds no histogram for it.
    pub fn gaps(&self, probe_id: u32) -> Result<Vec<u64>, aya::maps::MapError> {
        let mut totals = vec![0u64; probe_common::gap::BUCKETS as usize];
        for histogram in self.gaps.get(&probe_id, 0)?.iter() {
            for (total, count) in totals.iter_mut().zip(histogram.counts) {
                *total += count;
            }
        }
        Ok(totals)
    }

    /// Writes the config of a probe about to be attached
    /// ([`Attachment::attach_configured`]).
    pub fn set_config(
        &mut self,
        probe_id: u32,
        config: ProbeConfig,
    ) -> Result<(), aya::maps::MapError> {
        self.config.set(probe_id, config, 0)
    }

    /// Times the handler of one hit in `every` from now on (1: every hit).
    pub fn set_time_every(&mut self, every: u64) -> Result<(), aya::maps::MapError> {
        self.timing.set(0, probe_common::untimed_below(every), 0)
    }

    /// Switches how `probe_id`'s hits reach user space, from its next hit on.
    pub fn set_mode(
        &mut self,
        probe_id: u32,
        mode: crate::delivery::DeliveryMode,
    ) -> Result<(), aya::maps::MapError> {
        let mut config = self.config.get(&probe_id, 0)?;
        config.mode = mode.raw();
        self.config.set(probe_id, config, 0)
    }
}

/// Opens a uprobe (or uretprobe) perf event at `path`+`offset` for process `pid` (0: for
/// every process).
/// `ref_ctr_offset` non-zero makes the kernel count the USDT semaphore at that file offset.
fn open_uprobe_event(
    pmu: UprobePmu,
    path: &Path,
    offset: u64,
    ref_ctr_offset: u64,
    retprobe: bool,
    pid: u32,
) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_bytes())?;
    let mut config = ref_ctr_offset << 32;
    if retprobe {
        config |= 1 << pmu.retprobe_bit;
    }
    sys::perf::uprobe_event(pmu.perf_type, config, &path, offset, pid)
}
