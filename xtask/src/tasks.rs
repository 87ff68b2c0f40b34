//! The tasks that build and run probetop: lint, test, soak and demo, with the background
//! fixture they start.

use super::*;

use std::fs;
use std::path::Path;

/// The eBPF crate, which only builds for bpfel-unknown-none with nightly: next to the
/// host crates, feature unification hands its probe-common dependency aya (and so std),
/// and clippy fails with a duplicate `panic_impl`. It is linted on its own target.
pub(super) const EBPF_PACKAGE: &str = "probe-ebpf";

pub(super) fn lint(ctx: &Ctx) -> Result<()> {
    // Run every check so one CI round reports every problem, then fail if any did.
    let results = [
        run(ctx.cargo().args(["fmt", "--all", "--check"])),
        direction::check(&ctx.root),
        run(ctx.cargo().args([
            "clippy",
            "--workspace",
            "--exclude",
            EBPF_PACKAGE,
            "--all-targets",
            "--release",
            "--",
            "-D",
            "warnings",
        ])),
        run(ctx.cargo().args([
            "+nightly",
            "clippy",
            "--package",
            EBPF_PACKAGE,
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--release",
            "--",
            "-D",
            "warnings",
        ])),
        // The fuzz crate is outside the workspace: without this a moved module breaks
        // it only when `cargo xtask fuzz` builds it, late in CI. It has the workspace's
        // lints (a copy, checked below).
        run(ctx
            .cargo()
            .env("AYA_BUILD_SKIP", "1")
            .args(["+nightly", "clippy", "--all-targets", "--manifest-path"])
            .arg(ctx.root.join("probe-user/fuzz/Cargo.toml"))
            .arg("--target-dir")
            .arg(ctx.target_dir().join("fuzz-check"))
            .args(["--", "-D", "warnings"])),
        same_lints(&ctx.root),
        // rustdoc's broken_intra_doc_links (workspace lints) only shows when the docs
        // build: a link to a moved or renamed item fails here.
        run(ctx
            .cargo()
            .env("RUSTDOCFLAGS", "-D rustdoc::broken_intra_doc_links")
            .args(["doc", "--no-deps", "--workspace", "--exclude", EBPF_PACKAGE])
            .args(["--document-private-items", "--release"])),
    ];
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(failed.is_empty(), "lint failed:\n  {}", failed.join("\n  "));
    Ok(())
}

/// The `[workspace.lints.*]` tables of `Cargo.toml`, as text: every section from the
/// first lints table up to the first table that is not one.
fn lint_tables(manifest: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            inside = line.starts_with("[workspace.lints");
        }
        if inside && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            out.push_str(line.trim());
            out.push('\n');
        }
    }
    out
}

/// The fuzz crate's own workspace has the main workspace's lints (a separate workspace
/// cannot inherit them, so its manifest carries a copy).
fn same_lints(root: &Path) -> Result<()> {
    let read =
        |p: &str| fs::read_to_string(root.join(p)).with_context(|| format!("cannot read {p}"));
    let (main, fuzz) = (read("Cargo.toml")?, read("probe-user/fuzz/Cargo.toml")?);
    ensure!(
        !lint_tables(&main).is_empty() && lint_tables(&main) == lint_tables(&fuzz),
        "probe-user/fuzz/Cargo.toml's [workspace.lints.*] tables differ from Cargo.toml's: copy them over"
    );
    Ok(())
}

pub(super) fn test(ctx: &Ctx, harness_args: &[String]) -> Result<()> {
    ensure!(is_root()?, ROOT_REQUIRED);
    setup(ctx)?;
    // A lint failure fails the run, but only at the end: with builds this slow, one CI
    // round should also say whether the tests pass.
    let lint = lint(ctx);
    fixtures(ctx)?;
    build(ctx)?;
    // --release everywhere: the tests then reuse the release build (2 cores here).
    let mut cmd = ctx.cargo();
    cmd.args([
        "test",
        "--release",
        "--workspace",
        "--exclude",
        EBPF_PACKAGE,
    ])
    .env("PROBETOP_FIXTURES", ctx.root.join("fixtures/build"));
    // The tests that need root, the fixtures, tmux, MariaDB, Java or promtool are
    // #[ignore]d so a plain `cargo test` passes anywhere; setup installed all of them
    // here, so every test runs, the cross-checks against the reference implementations
    // (Java's HdrHistogram reader, Prometheus's promtool) included.
    cmd.args(["--", "--include-ignored"]).args(harness_args);
    run(&mut cmd)?;
    // The release file for production hosts, unpacked and run against a fixture.
    let dist = dist::dist(ctx).and_then(|built| dist::check(ctx, &built));
    // A short round per fuzz target: replays the committed corpus (every past crasher
    // included) and explores a little further.
    let fuzzed = fuzz::fuzz(ctx, fuzz::SECONDS_IN_TEST, &[]);
    // probetop on older and newer kernels (qemu, ~2 min): in CI, or when asked for.
    let kernels = if env::var("CI").is_ok_and(|v| v == "true")
        || env::var("PROBETOP_KERNELS").is_ok_and(|v| v == "1")
    {
        kernels::run_kernels(ctx, &kernels::KernelsArgs::default())
    } else {
        Ok(())
    };
    let failed: Vec<String> = [lint, dist, fuzzed, kernels]
        .into_iter()
        .filter_map(|r| r.err().map(|e| format!("{e:#}")))
        .collect();
    ensure!(
        failed.is_empty(),
        "the tests passed, but:\n  {}",
        failed.join("\n  ")
    );
    Ok(())
}

pub(super) fn soak(ctx: &Ctx, seconds: u32) -> Result<()> {
    ensure!(is_root()?, ROOT_REQUIRED);
    setup(ctx)?;
    fixtures(ctx)?;
    build(ctx)?;
    // One mode at a time: parallel floods would share the CPUs and halve each other.
    run(ctx
        .cargo()
        .args([
            "test",
            "--release",
            "-p",
            "probe-user",
            "--test",
            "it",
            "overload::",
        ])
        .args([
            "--",
            "--include-ignored",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env("PROBETOP_FIXTURES", ctx.root.join("fixtures/build"))
        .env("PROBETOP_SOAK_SECONDS", seconds.to_string()))
}

pub(super) fn demo(ctx: &Ctx) -> Result<()> {
    ensure!(
        is_root()?,
        "probetop attaches real probes: run the demo as root"
    );
    setup(ctx)?;
    fixtures(ctx)?;
    build(ctx)?;

    let probetop = ctx.target_dir().join("release/probetop");
    ensure!(
        probetop.is_file(),
        "{} is missing after the build",
        probetop.display()
    );
    // No terminal (CI): a short, non-interactive run instead of the TUI.
    let interactive = std::io::stdin().is_terminal();

    let workload = ctx.root.join("fixtures/build/c/workload");
    let mut fixture = Fixture::start(
        Command::new(&workload).args(["--forever", "--rate", "20000"]),
        !interactive,
    )?;

    let mut cmd = Command::new(&probetop);
    cmd.arg("--pid").arg(fixture.pid.to_string());
    for probe in [
        "uprobe:work_unit",
        "uretprobe:work_unit",
        "uprobe:leaf_ret",
        "uretprobe:leaf_ret",
    ] {
        cmd.args(["-e", probe]);
    }
    if !interactive {
        cmd.args(["--no-tui", "--duration", "5"]);
    }
    // Foreground with the terminal inherited; the fixture is stopped whatever happens.
    let result = run(&mut cmd);
    fixture.stop();
    result
}

// ---------------------------------------------------------------------------------------
// Demo fixture

/// A background fixture process, stopped on [`Fixture::stop`] or on drop (error paths).
pub(super) struct Fixture {
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) relay: Option<JoinHandle<()>>,
}

impl Fixture {
    /// Starts the fixture and waits for its `ready pid=<pid>` line, so probes attach to a
    /// process that has finished exec. Its later output is relayed to stderr when `relay`
    /// (no TUI to disturb) and dropped otherwise; it is always drained, so a full pipe
    /// never stalls the fixture.
    pub(super) fn start(cmd: &mut Command, relay: bool) -> Result<Self> {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        echo(cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(cmd)))?;
        let stdout = child.stdout.take();
        // Owned by the guard from here on: every early return below stops the process.
        let mut fixture = Fixture {
            pid: child.id(),
            child,
            relay: None,
        };
        let mut reader = BufReader::new(stdout.context("the fixture's stdout was not captured")?);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .context("reading the fixture's ready line")?;
        let expected = format!("ready pid={}", fixture.pid);
        ensure!(
            line.trim() == expected,
            "the fixture printed {line:?} instead of `{expected}`"
        );
        fixture.relay = Some(thread::spawn(move || {
            for line in reader.lines() {
                match line {
                    Ok(line) if relay => eprintln!("workload: {line}"),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }));
        Ok(fixture)
    }

    /// SIGTERM first so the workload prints its `done` line, SIGKILL if it lingers.
    pub(super) fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let mut term = Command::new("kill");
        term.args(["-TERM", &self.pid.to_string()]);
        echo(&term);
        let termed = term.status().is_ok_and(|s| s.success());
        let deadline = Instant::now() + Duration::from_secs(3);
        while termed && Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(relay) = self.relay.take() {
            let _ = relay.join();
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lab's commands (xtask/lab), forwarded: `cargo run --release -p probetop-lab -- COMMAND
/// ARGS`. Release, as its measurements need, and its build shares probe-user's release
/// artifacts with `cargo build --release`.
pub(super) fn lab(ctx: &Ctx, command: &str, args: &[OsString]) -> Result<()> {
    let mut cmd = ctx.cargo();
    cmd.args(["run", "--quiet", "--release", "-p", "probetop-lab", "--"]);
    if ctx.verbose {
        cmd.arg("--verbose");
    }
    run(cmd.arg(command).args(args))
}
