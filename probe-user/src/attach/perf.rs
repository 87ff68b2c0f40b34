//! The perf-event path: one uprobe perf event per probe on the kernel's `uprobe` PMU,
//! opened here rather than through aya because aya cannot pass `ref_ctr_offset`, and
//! bound to the program by a BPF link carrying the probe id as its cookie.

use std::{
    ffi::CString,
    fs, io,
    os::{
        fd::{AsFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use aya::programs::UProbe;

use super::links::{LinkFds, ProbeLink};
use super::{AttachError, Attachment};
use crate::spec::ProbeKind;
use crate::sys;

pub(super) const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe";

/// What the uprobe PMU's sysfs directory says about its config layout.
#[derive(Debug, Clone, Copy)]
pub(super) struct UprobePmu {
    perf_type: u32,
    retprobe_bit: u32,
}

impl UprobePmu {
    pub(super) fn read() -> io::Result<Self> {
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

impl Attachment {
    /// The uprobe PMU and the fd of the loaded program `name`: what binding a perf
    /// event to it takes.
    pub(super) fn perf_program(
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
    pub(super) fn open_perf_link(&self, probe_id: u32) -> Result<ProbeLink, AttachError> {
        let request = self.request(probe_id).ok_or_else(|| {
            AttachError::Unsupported(format!("probe {probe_id} has no attach request"))
        })?;
        let (pmu, program_fd) = self.perf_program(request.program)?;
        let path_text = super::error::shown_path(&request.path);
        let mut events = Vec::new();
        for offset in request.offsets() {
            let perf_event = open_uprobe_event(
                pmu,
                &request.path,
                offset,
                request.semaphore_offset.unwrap_or(0),
                request.kind == ProbeKind::Uretprobe,
                request.pid,
            )
            .map_err(|source| AttachError::PerfEventOpen {
                probe_id,
                kind: request.kind,
                path: path_text.clone(),
                offset,
                source,
            })?;
            let link = sys::bpf::link_perf_event(
                program_fd.as_fd(),
                perf_event.as_fd(),
                u64::from(probe_id),
            )
            .map_err(|source| AttachError::Link {
                probe_id,
                kind: request.kind,
                path: path_text.clone(),
                offset,
                source,
            })?;
            events.push((link, perf_event));
        }
        Ok(ProbeLink {
            _fds: LinkFds::PerfEvent { _events: events },
        })
    }
}

/// Opens a uprobe (or uretprobe) perf event at `path`+`offset` for process `pid` (0: for
/// every process).
/// `ref_ctr_offset` non-zero makes the kernel count the USDT semaphore at that file offset.
pub(super) fn open_uprobe_event(
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
