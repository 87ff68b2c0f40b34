//! `cargo xtask fuzz`: builds probe-user's fuzz targets (probe-user/fuzz, cargo fuzz on
//! nightly) and runs each for a bounded time from its committed corpus, failing on any
//! crash, panic, timeout or allocation past the limits.
//!
//! The committed inputs are read, never written: probe-user/fuzz/corpus/<target> (seeds,
//! minimized with `cargo fuzz cmin`) and probe-user/fuzz/regressions/<target> (inputs
//! that once failed, kept whatever their coverage). What a run discovers goes to a
//! scratch corpus under the target directory, so a CI run leaves the work tree clean.
//! Crash inputs land in probe-user/fuzz/artifacts/<target>/ (ignored by git), and the
//! failure message says how to replay one.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, ensure};

use super::{Ctx, run};

/// Installed when missing. Pinned so every machine fuzzes with the same flags; setup does
/// not install it because building it takes minutes and only fuzzing needs it.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Seconds per target in `cargo xtask test`: with six targets, a minute of fuzzing on
/// top of the fuzz build.
pub(crate) const SECONDS_IN_TEST: u64 = 10;

/// libFuzzer limits for every target. Inputs are at most a few tens of KiB; anything near
/// these limits is a bug (probetop reads hostile files as root).
const LIBFUZZER_LIMITS: &[&str] = &[
    // Total memory of the fuzzing process. ASan's shadow and quarantine took an
    // elf_image run past 512 MiB while loading ~700 corpus files, 35 MiB of them live: a
    // limit of the harness, not a finding. Each input's own heap is bounded much tighter
    // by the targets' allocation meter (probe-user/fuzz/src/meter.rs).
    "-rss_limit_mb=2048",
    // Any single allocation this large.
    "-malloc_limit_mb=256",
    // Seconds for one input: inputs take milliseconds, so a slow one is a bug (the margin
    // is for loaded CI machines, where a sanitizer build can stall for seconds).
    "-timeout=20",
];

/// Fuzzes every target (or `only`) for `seconds` each.
pub(crate) fn fuzz(ctx: &Ctx, seconds: u64, only: &[String]) -> Result<()> {
    ensure!(seconds > 0, "--seconds must be at least 1");
    ensure_cargo_fuzz(ctx)?;
    let fuzz_dir = ctx.root.join("probe-user/fuzz");
    let target_dir = ctx.target_dir().join("fuzz");
    let targets = if only.is_empty() {
        list_targets(ctx, &fuzz_dir)?
    } else {
        only.to_vec()
    };
    ensure!(
        !targets.is_empty(),
        "no fuzz targets in {}",
        fuzz_dir.display()
    );

    // One build for all targets, so a compile error fails fast and the runs below only
    // link-check.
    run(&mut cargo_fuzz(ctx, &fuzz_dir, "build", &target_dir))?;

    let mut failed = Vec::new();
    for target in &targets {
        let scratch = target_dir.join("corpus").join(target);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let mut cmd = cargo_fuzz(ctx, &fuzz_dir, "run", &target_dir);
        // libFuzzer adds what it finds to the first directory only.
        cmd.arg(target).arg(&scratch);
        for dir in ["corpus", "regressions"] {
            let committed = fuzz_dir.join(dir).join(target);
            if committed.is_dir() {
                cmd.arg(committed);
            }
        }
        cmd.arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(LIBFUZZER_LIMITS);
        if let Err(e) = run(&mut cmd) {
            failed.push(format!(
                "{target}: {e:#}\n    replay: cd probe-user && AYA_BUILD_SKIP=1 cargo +nightly fuzz run {target} fuzz/artifacts/{target}/<file>"
            ));
        }
    }
    ensure!(
        failed.is_empty(),
        "fuzzing found problems:\n  {}",
        failed.join("\n  ")
    );
    Ok(())
}

/// `cargo +nightly fuzz SUB --target-dir DIR`, run in probe-user/ (cargo fuzz finds
/// `fuzz/` there).
fn cargo_fuzz(ctx: &Ctx, fuzz_dir: &Path, sub: &str, target_dir: &Path) -> Command {
    let mut cmd = ctx.cargo();
    cmd.current_dir(fuzz_dir.parent().unwrap_or(&ctx.root))
        .args(["+nightly", "fuzz", sub, "--target-dir"])
        .arg(target_dir)
        // The targets never attach: skip the eBPF build (minutes under the sanitizer
        // flags); probe-user embeds an empty object instead (see its build.rs).
        .env("AYA_BUILD_SKIP", "1");
    cmd
}

fn list_targets(ctx: &Ctx, fuzz_dir: &Path) -> Result<Vec<String>> {
    let mut cmd = ctx.cargo();
    cmd.current_dir(fuzz_dir.parent().unwrap_or(&ctx.root))
        .args(["+nightly", "fuzz", "list"]);
    let out = ctx.query_ok(&mut cmd)?;
    Ok(out.split_whitespace().map(str::to_string).collect())
}

fn ensure_cargo_fuzz(ctx: &Ctx) -> Result<()> {
    let mut check = ctx.cargo();
    check.args(["fuzz", "--version"]);
    if ctx.query(&mut check)?.status.success() {
        return Ok(());
    }
    run(ctx.cargo().args([
        "install",
        "--locked",
        "cargo-fuzz",
        "--version",
        CARGO_FUZZ_VERSION,
    ]))
}
