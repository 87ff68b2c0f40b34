//! The other commands: `probetop calibrate` and `probetop list`.

use anyhow::bail;

use crate::target::Target;
use crate::{UsageError, present, privileges};

/// `probetop calibrate`: measures what a hit costs here, prints the result, caches it.
pub(crate) fn calibrate(args: crate::cli::CalibrateArgs) -> anyhow::Result<()> {
    use crate::calibrate::{self, CalibrateOptions};
    privileges::check()?;
    let mut options = if args.thorough {
        CalibrateOptions::thorough()
    } else {
        CalibrateOptions::standard()
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
    say!(
        "probetop calibrate: measuring what a probe hit costs here ({}; a workload of its own on up to one CPU, no other process probed)",
        options.expected()
    );
    if let Some(busy) = busy_host() {
        say!(
            "probetop calibrate: warning: the host is busy ({busy}): the workload takes up to one CPU for {} beside what runs here and slows it (a database's p95 beside it: docs/cost.md), and reads noisier costs; calibrate when it is quieter (the result is kept for this kernel and CPU)",
            options.expected()
        );
    }
    let (calibration, spent) =
        calibrate::run(options, |phase| say!("probetop calibrate: {phase}"))?;
    let result = crate::present::calibration::result_lines(&calibration).join("\n") + "\n";
    if args.json {
        crate::error_line::write_stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&calibration)?
        ))?;
    } else if args.verbose || args.thorough {
        crate::error_line::write_stdout(&format!("{}\n{result}", calibration.render_text()))?;
    } else {
        crate::error_line::write_stdout(&result)?;
    }
    let cpu = spent.cpu.map_or(String::new(), |cpu| {
        format!(
            ", {:.1} s of CPU ({:.0}% of one CPU on average)",
            cpu.as_secs_f64(),
            100.0 * cpu.as_secs_f64() / spent.wall.as_secs_f64().max(1e-3)
        )
    });
    let more = if args.verbose || args.thorough || args.json {
        ""
    } else {
        "; --verbose prints every row and curve"
    };
    say!(
        "probetop calibrate: done in {:.0} s{cpu}{more}",
        spent.wall.as_secs_f64()
    );
    if save {
        let path = calibrate::save(&calibration)?;
        say!("probetop calibrate: saved {}", path.display());
    }
    Ok(())
}

/// Why the host counts as busy, if it does: a load average above its CPU count, or its
/// CPUs more than half busy over a short look.
fn busy_host() -> Option<String> {
    use crate::sys::procfs::{cpu_ticks, load_average};
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let before = cpu_ticks();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let busy_share = before.zip(cpu_ticks()).and_then(|((b0, t0), (b1, t1))| {
        let total = t1.saturating_sub(t0);
        (total > 0).then(|| b1.saturating_sub(b0) as f64 / total as f64)
    });
    let load = load_average();
    let loaded = load.is_some_and(|l| l > cpus as f64);
    let spinning = busy_share.is_some_and(|b| b > 0.5);
    if !loaded && !spinning {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(load) = load {
        parts.push(format!(
            "load {load:.1} on {cpus} CPU{}",
            if cpus == 1 { "" } else { "s" }
        ));
    }
    if let Some(busy) = busy_share {
        parts.push(format!("CPUs {:.0}% busy just now", busy * 100.0));
    }
    Some(parts.join(", "))
}

/// `probetop list`: every probe point of a process or file that matches a pattern.
pub(crate) fn list(args: crate::cli::ListArgs) -> anyhow::Result<()> {
    use crate::resolve::list::{ListSource, list_with};
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
    let options = crate::resolve::ResolveOptions {
        debuginfod: crate::resolve::debuginfod::Debuginfod::from_env(args.offline),
        ..Default::default()
    };
    let listing = list_with(&source, pattern.as_deref(), &options)?;
    if args.json {
        crate::error_line::write_stdout(&format!("{}\n", present::list::render_json(&listing)?))?;
    } else {
        crate::error_line::write_stdout(&present::list::render_text(&listing))?;
    }
    Ok(())
}

/// `probetop diff A B`: the comparison on stdout (a table, or JSON), the HTML page if
/// asked; exit 1 with `--fail-above` on a regression above it, 2 on bad input.
pub(crate) fn diff(args: &crate::cli::DiffArgs) -> std::process::ExitCode {
    use std::process::ExitCode;

    use crate::present::export::diff::{self, DiffOptions};
    let options = DiffOptions {
        metric: args.metric,
        threshold_pct: args.fail_above.unwrap_or(DEFAULT_FLAG_PCT),
        alpha: args.alpha,
    };
    let (result, hists) = match diff::diff(&args.a, &args.b, options) {
        Ok(found) => found,
        Err(error) => {
            crate::sys::say(&format!("probetop diff: {error}"));
            return ExitCode::from(2);
        }
    };
    let written = (|| -> anyhow::Result<()> {
        if let Some(path) = &args.html {
            crate::present::export::write_file(
                path,
                diff::render_html(&result, &hists).as_bytes(),
                false,
            )?;
        }
        let text = if args.json {
            diff::render_json(&result)?
        } else {
            diff::render_text(&result)
        };
        crate::error_line::write_stdout(&text)?;
        Ok(())
    })();
    match written {
        Ok(()) => {}
        Err(error) if crate::error_line::is_broken_pipe(&error) => {}
        Err(error) => {
            crate::sys::say(&format!(
                "probetop diff: {}",
                crate::error_line::error_line(&error)
            ));
            // Not 1: that says "regression" to a CI job.
            return ExitCode::from(2);
        }
    }
    if args.fail_above.is_some() && result.regressions > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Without `--fail-above`, `probetop diff` flags moves above this many percent.
const DEFAULT_FLAG_PCT: f64 = 10.0;
