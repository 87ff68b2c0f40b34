//! A target under ptrace (gdb, strace -k, rr): a debugger's breakpoint on a probed
//! function and probetop's uprobe share one byte. Set after probetop attached, the
//! debugger saves probetop's int3 as the "original" byte; once probetop detaches and
//! the debugger removes its breakpoint, it writes that int3 back and the target dies
//! of SIGTRAP. Set before, the uprobe misses hits. Neither says anything by itself.

use crate::UsageError;
use crate::target::{Target, Tracer};

/// Refuses a traced target unless `force`; with it, one line saying what may happen.
pub(super) fn check_at_attach(target: &Target, force: bool) -> Result<(), UsageError> {
    let Some(tracer) = target.tracer() else {
        return Ok(());
    };
    if force {
        crate::sys::say(&format!(
            "probetop: {}; attaching anyway (--force)",
            what_happens(target, &tracer)
        ));
        return Ok(());
    }
    Err(UsageError(format!(
        "{}: detach the tracer first, or give --force to probe anyway",
        what_happens(target, &tracer)
    )))
}

/// Before detaching: if a tracer is there now, say what removing its breakpoints may do.
pub(super) fn warning_at_exit(target: &Target) -> Option<String> {
    let tracer = target.tracer()?;
    Some(format!(
        "pid {} is traced by pid {} ({}) now: a breakpoint it set on a probed function while probetop was attached saved probetop's int3 as the original byte, and removing that breakpoint after probetop exits writes the int3 back: the target dies of SIGTRAP when it next runs there",
        target.pid, tracer.pid, tracer.comm
    ))
}

fn what_happens(target: &Target, tracer: &Tracer) -> String {
    format!(
        "pid {} is traced by pid {} ({}): its breakpoints and probetop's uprobes on the same function interfere (probes miss hits, or after probetop exits removing a breakpoint kills the target with SIGTRAP)",
        target.pid, tracer.pid, tracer.comm
    )
}
