//! Attachment: loads probetop's eBPF programs and attaches one per probe point.
//!
//! Each probe is its own uprobe perf event, opened here with `perf_event_open(2)` on the
//! kernel's `uprobe` PMU rather than through aya, because aya cannot pass
//! `ref_ctr_offset` (the kernel-counted USDT semaphore). The program is bound to the
//! event by a BPF link carrying the probe id as its cookie. A probe is detached by
//! closing its two file descriptors, which the kernel also does if probetop dies, so
//! no exit path leaves a probe behind.

pub mod args;
mod kernel;

use std::{
    ffi::CString,
    fs, io,
    os::{
        fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, RingBuf},
    programs::UProbe,
};
use probe_common::{KernelHistogram, ProbeConfig, khist};

use crate::spec::ProbeKind;

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
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error("cannot bind the eBPF program to the {kind} at {path}+{offset:#x}: {source}")]
    Link {
        kind: ProbeKind,
        path: String,
        offset: u64,
        source: io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error(
        "this probetop was built without its eBPF programs (AYA_BUILD_SKIP was set): rebuild without it"
    )]
    NoEbpfObject,
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
    /// Size the kernel dispatch maps for this process's probes (see `cost::dispatch`);
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
    /// Fire only in this process.
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

/// One attached probe: the perf event and the BPF link binding the program to it.
/// Dropping it detaches the probe.
#[derive(Debug)]
pub struct ProbeLink {
    _link: OwnedFd,
    _perf_event: OwnedFd,
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

/// The loaded programs, their maps, and every attached probe.
pub struct Attachment {
    ebpf: Ebpf,
    pmu: UprobePmu,
    /// Probe ids below this fit the per-probe maps.
    capacity: u32,
    links: Vec<Option<ProbeLink>>,
    /// Indexed by probe id, like `links`.
    requests: Vec<Option<StoredRequest>>,
}

impl Attachment {
    /// Loads and verifies the programs; nothing is attached yet.
    pub fn load(options: LoadOptions) -> Result<Self, AttachError> {
        if EBPF_OBJECT.is_empty() {
            return Err(AttachError::NoEbpfObject);
        }
        kernel::require_features().map_err(AttachError::Unsupported)?;
        let pmu = UprobePmu::read().map_err(AttachError::NoUprobePmu)?;
        let dispatch =
            crate::cost::dispatch::MapSizes::new(options.dispatch_tgid, options.probe_count);
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
            .override_global("WAKEUP_RECORDS", &wakeup_records, true);
        dispatch.apply(&mut loader);
        let mut ebpf = loader.load(EBPF_OBJECT)?;
        for name in [PROG_UPROBE, PROG_URETPROBE] {
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
            pmu,
            capacity,
            links: Vec::new(),
            requests: Vec::new(),
        };
        attachment.set_time_every(options.time_every)?;
        Ok(attachment)
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
        self.attach_program(request, measuring_program(request.kind))
    }

    /// Attaches one probe running a program that does nothing (`probetop calibrate`'s
    /// baseline), loading that program first if needed.
    pub fn attach_empty(&mut self, request: &AttachRequest) -> Result<(), AttachError> {
        let name = PROG_EMPTY;
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
        self.attach_program(request, name)
    }

    /// The kernel's run count and run time (ns) of probetop's measuring program for
    /// probes of `kind`, or of the empty program with `empty`; both zero while BPF
    /// statistics are off.
    pub fn run_stats(&self, kind: ProbeKind, empty: bool) -> Result<(u64, u64), AttachError> {
        let name = if empty {
            PROG_EMPTY
        } else {
            measuring_program(kind)
        };
        let info = self
            .ebpf
            .program(name)
            .ok_or(AttachError::MissingProgram(name))?
            .info()
            .map_err(|source| AttachError::Program { name, source })?;
        let run_time_ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
        Ok((info.run_count(), run_time_ns))
    }

    /// The loaded object, for `cost::dispatch` to load and attach its programs and
    /// take its maps.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Attaches one more probe once the kernel counters were taken
    /// ([`Self::take_counters`]): CONFIG is theirs then, and the caller must have
    /// written `request.config` through [`KernelCounters::set_config`] first.
    pub fn attach_configured(&mut self, request: &AttachRequest) -> Result<(), AttachError> {
        self.link_request(request, measuring_program(request.kind))
    }

    fn attach_program(
        &mut self,
        request: &AttachRequest,
        name: &'static str,
    ) -> Result<(), AttachError> {
        // The config must be in place before the first hit can fire.
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
            })?;
        self.link_request(request, name)
    }

    /// Opens and records the probe's link; its config is in place.
    fn link_request(
        &mut self,
        request: &AttachRequest,
        name: &'static str,
    ) -> Result<(), AttachError> {
        let stored = StoredRequest {
            program: name,
            kind: request.kind,
            path: request.path.to_path_buf(),
            file_offset: request.file_offset,
            semaphore_offset: request.semaphore_offset,
            pid: request.pid,
        };
        let link = self.open_link(request.probe_id, &stored)?;
        let slot = request.probe_id as usize;
        if self.links.len() <= slot {
            self.links.resize_with(slot + 1, || None);
        }
        if self.requests.len() <= slot {
            self.requests.resize_with(slot + 1, || None);
        }
        self.links[slot] = Some(link);
        self.requests[slot] = Some(stored);
        Ok(())
    }

    /// Opens the perf event of a probe and binds the program to it.
    fn open_link(&self, probe_id: u32, request: &StoredRequest) -> Result<ProbeLink, AttachError> {
        let name = request.program;
        let program: &UProbe = self
            .ebpf
            .program(name)
            .ok_or(AttachError::MissingProgram(name))?
            .try_into()
            .map_err(|source| AttachError::Program { name, source })?;
        let program_fd = program
            .fd()
            .map_err(|source| AttachError::Program { name, source })?;
        let path_text = request.path.display().to_string();
        let perf_event = open_uprobe_event(
            self.pmu,
            &request.path,
            request.file_offset,
            request.semaphore_offset.unwrap_or(0),
            request.kind == ProbeKind::Uretprobe,
            request.pid,
        )
        .map_err(|source| AttachError::PerfEventOpen {
            kind: request.kind,
            path: path_text.clone(),
            offset: request.file_offset,
            source,
        })?;
        let link = link_perf_event(program_fd.as_fd(), perf_event.as_fd(), u64::from(probe_id))
            .map_err(|source| AttachError::Link {
                kind: request.kind,
                path: path_text,
                offset: request.file_offset,
                source,
            })?;
        Ok(ProbeLink {
            _link: link,
            _perf_event: perf_event,
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

    /// Detaches one probe; it can be attached again with [`Self::reattach`]. Returns
    /// whether it was attached.
    pub fn detach(&mut self, probe_id: u32) -> bool {
        self.links
            .get_mut(probe_id as usize)
            .and_then(Option::take)
            .is_some()
    }

    /// Detaches one probe for good: its request is forgotten, so it cannot be attached
    /// again. For probes of a program the target no longer runs (it exec'd): their
    /// attach path may name the new program now, where their offset means nothing.
    /// Returns the link, for the caller to close where waiting is harmless (closing
    /// a probe waits for the kernel's grace period).
    pub fn retire(&mut self, probe_id: u32) -> Option<ProbeLink> {
        if let Some(request) = self.requests.get_mut(probe_id as usize) {
            *request = None;
        }
        self.links.get_mut(probe_id as usize).and_then(Option::take)
    }

    /// Attaches a probe detached by [`Self::detach`] again, as its original request
    /// asked; nothing happens if it is attached.
    pub fn reattach(&mut self, probe_id: u32) -> Result<(), AttachError> {
        if self.is_attached(probe_id) {
            return Ok(());
        }
        let slot = probe_id as usize;
        let request = self
            .requests
            .get(slot)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                AttachError::Unsupported(format!(
                    "probe {probe_id} was never attached, or belonged to a program the target no longer runs"
                ))
            })?;
        let link = self.open_link(probe_id, request)?;
        if self.links.len() <= slot {
            self.links.resize_with(slot + 1, || None);
        }
        self.links[slot] = Some(link);
        Ok(())
    }

    /// The ids of every probe attached now.
    pub fn attached_ids(&self) -> Vec<u32> {
        (0..self.links.len() as u32)
            .filter(|&id| self.is_attached(id))
            .collect()
    }

    /// Detaches the probes of `ids` that are attached, keeping their requests so that
    /// [`Self::reattach_set`] can attach them again; returns how many it detached.
    pub fn detach_set(&mut self, ids: &[u32]) -> usize {
        ids.iter().filter(|&&id| self.detach(id)).count()
    }

    /// Attaches the probes of `ids` again (those detached by [`Self::detach_set`] or
    /// [`Self::detach`]); probes attached already are left as they are.
    pub fn reattach_set(&mut self, ids: &[u32]) -> Result<(), AttachError> {
        ids.iter().try_for_each(|&id| self.reattach(id))
    }

    /// Detaches every probe; the programs stay loaded until the attachment is dropped.
    pub fn detach_all(&mut self) {
        self.links.clear();
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
            hits: take(&mut self.ebpf, "HITS", PerCpuArray::try_from)?,
            histogram: take(&mut self.ebpf, "KERNEL_HISTOGRAM", PerCpuArray::try_from)?,
            config: take(&mut self.ebpf, "CONFIG", Array::try_from)?,
            dispatch: None,
        })
    }
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

/// What the kernel counts per probe besides ring buffer records, and the per-probe
/// config, which can change while attached.
pub struct KernelCounters {
    drops: PerCpuArray<MapData, u64>,
    hits: PerCpuArray<MapData, u64>,
    histogram: PerCpuArray<MapData, KernelHistogram>,
    config: Array<MapData, ProbeConfig>,
    /// Kernel dispatch measurement, when it runs (`cost::dispatch`).
    dispatch: Option<crate::cost::dispatch::Dispatch>,
}

impl KernelCounters {
    /// Hands over the dispatch measurement, read with the other counters.
    pub fn set_dispatch(&mut self, dispatch: crate::cost::dispatch::Dispatch) {
        self.dispatch = Some(dispatch);
    }

    /// The dispatch measurement, if it runs.
    pub fn dispatch(&self) -> Option<&crate::cost::dispatch::Dispatch> {
        self.dispatch.as_ref()
    }

    /// Hits of `probe_id` whose record did not fit in the ring buffer, over all CPUs.
    pub fn drops(&self, probe_id: u32) -> Result<u64, aya::maps::MapError> {
        Ok(self.drops.get(&probe_id, 0)?.iter().sum())
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

    /// Writes the config of a probe about to be attached
    /// ([`Attachment::attach_configured`]).
    pub fn set_config(
        &mut self,
        probe_id: u32,
        config: ProbeConfig,
    ) -> Result<(), aya::maps::MapError> {
        self.config.set(probe_id, config, 0)
    }

    /// Switches how `probe_id`'s hits reach user space, from its next hit on.
    pub fn set_mode(&mut self, probe_id: u32, mode: u32) -> Result<(), aya::maps::MapError> {
        let mut config = self.config.get(&probe_id, 0)?;
        config.mode = mode;
        self.config.set(probe_id, config, 0)
    }
}

/// `struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

/// Opens a uprobe (or uretprobe) perf event at `path`+`offset` for process `pid`.
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
    let attr = PerfEventAttr {
        kind: pmu.perf_type,
        size: size_of::<PerfEventAttr>() as u32,
        config,
        config1: path.as_ptr() as u64,
        config2: offset,
        ..Default::default()
    };
    // SAFETY: attr is a valid perf_event_attr of the size it declares, and the path it
    // points to outlives the call; the kernel copies both before returning.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            pid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: PERF_EVENT_IOC_ENABLE takes no argument and fd is a perf event.
    if unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// `union bpf_attr`'s `link_create` for a perf event target.
#[repr(C)]
struct LinkCreatePerfEvent {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
}

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PERF_EVENT: u32 = 41;

/// Binds `program` to `perf_event` with a link whose cookie the program reads back.
fn link_perf_event(
    program: BorrowedFd<'_>,
    perf_event: BorrowedFd<'_>,
    cookie: u64,
) -> io::Result<OwnedFd> {
    let attr = LinkCreatePerfEvent {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: perf_event.as_raw_fd() as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
    };
    // SAFETY: attr is a valid prefix of union bpf_attr for BPF_LINK_CREATE, the size
    // passed is its own, and the kernel zero-fills the rest.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &attr as *const LinkCreatePerfEvent,
            size_of::<LinkCreatePerfEvent>() as u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_event_attr_has_the_kernel_layout() {
        // PERF_ATTR_SIZE_VER8, and config1/config2 where the uprobe PMU reads path/offset.
        assert_eq!(size_of::<PerfEventAttr>(), 136);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config1), 56);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config2), 64);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config3), 128);
        assert_eq!(std::mem::offset_of!(LinkCreatePerfEvent, bpf_cookie), 16);
    }
}
