//! The `sched_switch` program that times each CPU's idle task (probe-ebpf's `idle.rs`),
//! so that a gap between two hits splits into idle and busy time.

use aya::programs::RawTracePoint;

use super::{AttachError, Attachment};

const PROG: &str = "probetop_sched_switch";

impl Attachment {
    /// Times each CPU's idle task from now on: the busy part of every gap is counted
    /// beside the gap. It runs at every context switch of the machine (a few tens of
    /// ns each); the link lives as long as the programs.
    pub fn time_idle_cpus(&mut self) -> Result<(), AttachError> {
        let program: &mut RawTracePoint = self
            .ebpf
            .program_mut(PROG)
            .ok_or(AttachError::MissingProgram(PROG))?
            .try_into()
            .map_err(|source| AttachError::Program { name: PROG, source })?;
        program
            .load()
            .map_err(|source| AttachError::Program { name: PROG, source })?;
        program
            .attach("sched_switch")
            .map_err(|source| AttachError::Program { name: PROG, source })?;
        Ok(())
    }
}
