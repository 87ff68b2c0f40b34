//! What a hit of a tracefs uprobe event costs (`perf probe`, a line written into
//! `uprobe_events`): no BPF, but ftrace fetching the event's arguments once, then
//! reserving, filling and committing a record in the trace buffer of every instance
//! the event is enabled in, on top of the trap. Other tools' tracefs events are priced
//! with it (`price::estimate`), by their arguments and instances.
//!
//! The events are probetop's own, on a function of its own ([`Func::Tracefs`]: an event
//! in `uprobe_events` traps in every process mapping the file), enabled in tracefs
//! instances of their own: first with no arguments in one instance (the cheapest
//! record: its header and the probed address), then with [`ARGS`] arguments of one kind
//! (registers, 8-byte reads of the stack, short strings on the stack), then bare in two
//! instances. Each repetition runs the event and its unprobed twin, alternating which
//! goes first, as phase one does.

use crate::stats::Summary;
use crate::sys::tracefs::OwnUprobeEvent;

use super::child::{Offsets, Workload};
use super::table::TracefsShapes;
use super::workload::Func;
use super::{CalibrateError, CalibrateOptions, calls_for};

/// Arguments of the one kind in each event with arguments: the difference to the bare
/// event over this many is what one argument adds.
pub(super) const ARGS: u32 = 4;

/// What the phase measured.
pub(super) struct Measured {
    /// The bare event in one instance.
    pub bare: Summary,
    /// The other shapes; `Err(why)` when one could not be set up.
    pub shapes: Result<TracefsShapes, String>,
}

/// The whole cost per hit of each event on a `push %rbp` entry, one sample per
/// repetition; `Ok(Err(why))` when tracefs or the bare event could not be set up.
pub(super) fn measure(
    child: &mut Workload,
    offsets: &Offsets,
    options: &CalibrateOptions,
) -> Result<Result<Measured, String>, CalibrateError> {
    let bare = match shape(child, offsets, options, "", 1)? {
        Ok(bare) => bare,
        Err(why) => return Ok(Err(why)),
    };
    let args = |fetch: &dyn Fn(u32) -> String| {
        (0..ARGS)
            .map(|i| format!("a{i}={}", fetch(i)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // At the entry, %sp points at the return address, under the caller's frame: every
    // read is of mapped stack. The return address's bytes are a string of 6 or fewer.
    const REGISTERS: [&str; ARGS as usize] = ["%di", "%si", "%dx", "%cx"];
    let registers = args(&|i| format!("{}:u64", REGISTERS[i as usize]));
    let memory = args(&|i| format!("+{}(%sp):u64", 8 * i));
    let strings = args(&|_| "+0(%sp):string".to_string());
    let mut measured = Vec::new();
    for (fetch, instances) in [
        (registers, 1),
        (memory, 1),
        (strings, 1),
        (String::new(), 2),
    ] {
        match shape(child, offsets, options, &fetch, instances)? {
            Ok(summary) => measured.push(summary),
            Err(why) => {
                return Ok(Ok(Measured {
                    bare,
                    shapes: Err(why),
                }));
            }
        }
    }
    let shapes = Ok(TracefsShapes {
        args: ARGS,
        registers_ns: measured[0],
        memory_ns: measured[1],
        strings_ns: measured[2],
        two_instances_ns: measured[3],
    });
    Ok(Ok(Measured { bare, shapes }))
}

/// One event, `args` its fetched arguments, enabled in `instances` instances.
fn shape(
    child: &mut Workload,
    offsets: &Offsets,
    options: &CalibrateOptions,
    args: &str,
    instances: usize,
) -> Result<Result<Summary, String>, CalibrateError> {
    let exe = crate::sys::procfs::exe(child.pid());
    let event = match OwnUprobeEvent::add(&exe, offsets.of(Func::Tracefs), args, instances) {
        Ok(event) => event,
        Err(e) => {
            let what = if args.is_empty() {
                format!("a tracefs uprobe event in {instances} instance(s)")
            } else {
                format!("a tracefs uprobe event with `{args}`")
            };
            return Ok(Err(format!("{what}: {e}")));
        }
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
