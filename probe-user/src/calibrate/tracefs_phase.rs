//! What a hit of a tracefs uprobe event costs (`perf probe`, a line written into
//! `uprobe_events`): no BPF, but ftrace reserving, filling and committing a record in
//! the trace buffer of every instance the event is enabled in, on top of the trap. Other
//! tools' tracefs events are priced with it (`price::estimate`).
//!
//! The event is probetop's own, with no arguments (the cheapest record: its header and
//! the probed address), on a function of its own ([`Func::Tracefs`]: an event in
//! `uprobe_events` traps in every process mapping the file), enabled in a tracefs
//! instance of its own; each repetition runs it and its unprobed twin, alternating which
//! goes first, as phase one does.

use crate::stats::Summary;
use crate::sys::tracefs::OwnUprobeEvent;

use super::child::{Offsets, Workload};
use super::workload::Func;
use super::{CalibrateError, CalibrateOptions, calls_for};

/// The whole cost per hit of the event on a `push %rbp` entry, one sample per
/// repetition; `Ok(Err(why))` when tracefs or the event could not be set up.
pub(super) fn measure(
    child: &mut Workload,
    offsets: &Offsets,
    options: &CalibrateOptions,
) -> Result<Result<Summary, String>, CalibrateError> {
    let exe = crate::sys::procfs::exe(child.pid());
    let event = match OwnUprobeEvent::add(&exe, offsets.of(Func::Tracefs)) {
        Ok(event) => event,
        Err(e) => return Ok(Err(format!("a tracefs uprobe event: {e}"))),
    };
    let calls = calls_for(Func::Tracefs, options);
    let mut samples = Vec::with_capacity(options.reps);
    for rep in 0..options.reps {
        let (probed, twin) = child.run_pair(Func::Tracefs, calls, rep % 2 == 1)?;
        samples.push(probed - twin);
    }
    drop(event);
    Ok(Summary::of(&samples).ok_or_else(|| "no repetition measured".to_string()))
}
