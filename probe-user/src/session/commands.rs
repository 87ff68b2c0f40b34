//! The other commands: `probetop calibrate` and `probetop list`.

use anyhow::bail;

use crate::target::Target;
use crate::{UsageError, present, privileges};

/// `probetop calibrate`: measures what a hit costs here, prints it, caches it.
pub fn calibrate(args: crate::cli::CalibrateArgs) -> anyhow::Result<()> {
    use crate::calibrate::{self, CalibrateOptions};
    privileges::check()?;
    let mut options = if args.quick {
        CalibrateOptions::quick()
    } else {
        CalibrateOptions::full()
    };
    if let Some(reps) = args.reps {
        options.reps = reps;
    }
    options.dispatch = !args.no_dispatch;
    if args.no_gap || args.cold_only {
        options.gap_reps = 0;
    }
    if args.no_cold {
        options.cold = None;
    }
    if let Some(cold) = options.cold.as_mut() {
        for (mib, bytes) in [
            (args.cold_data_mib, &mut cold.data_bytes),
            (args.cold_code_mib, &mut cold.code_bytes),
        ] {
            // 0 to 4096, checked by the parser.
            if let Some(mib) = mib {
                *bytes = (mib * f64::from(1 << 20)) as u64;
            }
        }
        if let Some(iters) = args.cold_iters {
            cold.iters = iters.max(1);
        }
    }
    if args.cold_only {
        if options.cold.is_none() {
            bail!(UsageError(
                "--cold-only and --no-cold: nothing to measure".into()
            ));
        }
        options.hot = false;
    }
    let save = !args.no_save && !args.cold_only;
    let calibration = calibrate::run(options, |phase| say!("probetop calibrate: {phase}"))?;
    if args.json {
        crate::error_line::write_stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&calibration)?
        ))?;
    } else {
        crate::error_line::write_stdout(&calibration.render_text())?;
    }
    if save {
        let path = calibrate::save(&calibration)?;
        say!("probetop calibrate: saved {}", path.display());
    }
    Ok(())
}

/// `probetop list`: every probe point of a process or file that matches a pattern.
pub fn list(args: crate::cli::ListArgs) -> anyhow::Result<()> {
    use crate::resolve::list::{ListSource, list};
    let mut operands = args.operands.into_iter();
    let source = match args.pid {
        Some(pid) => {
            // The same checks as a probing run, so a bad pid gets the same message.
            Target::open(pid)?;
            ListSource::Pid(pid)
        }
        None => ListSource::Path(operands.next().map(Into::into).ok_or_else(|| {
            UsageError("list what? give --pid PID or the path of an ELF file".into())
        })?),
    };
    let pattern = operands.next();
    if let Some(extra) = operands.next() {
        bail!(UsageError(format!(
            "unexpected {extra:?}: list takes [--pid PID | PATH] [PATTERN]"
        )));
    }
    let listing = list(&source, pattern.as_deref())?;
    if args.json {
        crate::error_line::write_stdout(&format!("{}\n", present::list::render_json(&listing)?))?;
    } else {
        crate::error_line::write_stdout(&present::list::render_text(&listing))?;
    }
    Ok(())
}
