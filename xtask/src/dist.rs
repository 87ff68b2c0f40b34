//! `cargo xtask dist`: one file for production hosts. A static (musl) probetop, with
//! the eBPF object already inside (probe-user's build.rs embeds it), packed with its man
//! pages, shell completions and a README into
//! `<target>/dist/probetop-VERSION-x86_64-linux-musl.tar.gz`.
//!
//! The pages and completions come from the built binary itself (`probetop man DIR`,
//! `probetop completions SHELL`), so they match its command line, and running it is the
//! first sign that it runs. `--check` (and `cargo xtask test`) then unpacks the tarball
//! and probes a fixture with the file from it, exact counts; `cargo xtask kernels` runs
//! it in each guest with no libc on the file system.

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail, ensure};

use crate::{Ctx, Fixture, ROOT_REQUIRED, echo, is_root, run, show};

/// The target the file is built for: musl links statically, so the file needs no libc
/// of the host's (nor a glibc as new as the build machine's).
pub(crate) const TARGET: &str = "x86_64-unknown-linux-musl";
/// The C compiler cc-rs builds ring's C with for [`TARGET`], and the variable naming it.
const MUSL_CC_VAR: &str = "CC_x86_64_unknown_linux_musl";
const MUSL_CC: &str = "musl-gcc";
/// The tarball's platform tag.
const PLATFORM: &str = "x86_64-linux-musl";
/// Completion scripts: shell, file name in the tarball's completions/.
const SHELLS: &[(&str, &str)] = &[
    ("bash", "probetop.bash"),
    ("zsh", "_probetop"),
    ("fish", "probetop.fish"),
];
/// Calls of the workload fixture in `--check`.
const CHECK_CALLS: u64 = 20_000;
/// The probes `--check` attaches to it: every call hits each once.
const CHECK_PROBES: &[&str] = &[
    "uprobe:work_unit",
    "uretprobe:leaf_ret",
    "usdt:workload:unit",
];

/// What `dist` produced.
pub(crate) struct Dist {
    /// The packed binary, unpacked beside the tarball (`<target>/dist/<name>/probetop`).
    pub binary: PathBuf,
    pub tarball: PathBuf,
    /// `probetop-VERSION-x86_64-linux-musl`.
    pub name: String,
}

pub(crate) fn dist(ctx: &Ctx) -> Result<Dist> {
    add_target(ctx)?;
    // https is rustls on ring, whose C and assembly are built for musl by Debian's
    // musl-gcc (musl-tools), installed here on first use as `setup` does.
    crate::install_apt(ctx, &["musl-tools"])?;
    run(ctx
        .cargo()
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "--package",
            "probe-user",
            "--bin",
            "probetop",
        ])
        .env(MUSL_CC_VAR, MUSL_CC))?;
    let built = ctx.target_dir().join(TARGET).join("release/probetop");
    ensure_static(&built)?;
    let version = version_of(ctx, &built)?;
    let name = format!("probetop-{version}-{PLATFORM}");
    let out = ctx.target_dir().join("dist");
    let stage = out.join(&name);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    for dir in ["man", "completions"] {
        fs::create_dir_all(stage.join(dir))
            .with_context(|| format!("creating {}", stage.join(dir).display()))?;
    }
    let binary = stage.join("probetop");
    fs::copy(&built, &binary).with_context(|| format!("copying {}", built.display()))?;
    fs::set_permissions(&binary, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod 755 {}", binary.display()))?;
    run(Command::new(&binary)
        .arg("man")
        .arg(stage.join("man"))
        .stdin(Stdio::null()))?;
    for (shell, file) in SHELLS {
        let mut cmd = Command::new(&binary);
        cmd.args(["completions", shell]);
        let script = ctx.query_ok(&mut cmd)?;
        // Every script names the option (fish as `-l pid`) and the subcommands.
        ensure!(
            script.contains("pid") && script.contains("calibrate"),
            "`{}` printed no completion of --pid or calibrate",
            show(&cmd)
        );
        let path = stage.join("completions").join(file);
        fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    }
    let readme = ctx.root.join("xtask/dist/README");
    fs::copy(&readme, stage.join("README"))
        .with_context(|| format!("copying {}", readme.display()))?;

    let tarball = out.join(format!("{name}.tar.gz"));
    // Owned by root in the archive, whoever built it: it is unpacked as root.
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(&tarball)
        .arg("-C")
        .arg(&out)
        .arg(&name))?;
    println!(
        "dist: {} ({}; probetop {})",
        tarball.display(),
        mib(&tarball),
        mib(&binary)
    );
    Ok(Dist {
        binary,
        tarball,
        name,
    })
}

/// rustup's musl standard library, added on first use (a few seconds) rather than by
/// `setup`, so machines that never build a release do not fetch it.
fn add_target(ctx: &Ctx) -> Result<()> {
    let installed = ctx.query_ok(
        Command::new("rustup")
            .args(["target", "list", "--installed"])
            .current_dir(&ctx.root),
    )?;
    if installed.lines().any(|l| l.trim() == TARGET) {
        return Ok(());
    }
    println!("dist: adding the {TARGET} target");
    run(Command::new("rustup")
        .args(["target", "add", TARGET])
        .current_dir(&ctx.root)
        .stdin(Stdio::null()))
}

/// "probetop 0.1.0" from `probetop --version` -> "0.1.0".
fn version_of(ctx: &Ctx, binary: &Path) -> Result<String> {
    let out = ctx.query_ok(Command::new(binary).arg("--version"))?;
    let version = out
        .trim()
        .strip_prefix("probetop ")
        .with_context(|| format!("`{} --version` printed {out:?}", binary.display()))?;
    ensure!(
        !version.is_empty() && !version.contains(char::is_whitespace),
        "`{} --version` printed {out:?}",
        binary.display()
    );
    Ok(version.to_owned())
}

fn ensure_static(binary: &Path) -> Result<()> {
    let bytes = fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    if let Some(interp) = interpreter(&bytes).with_context(|| binary.display().to_string())? {
        bail!(
            "{} asks for the dynamic loader {interp}: it is not static",
            binary.display()
        );
    }
    Ok(())
}

/// The program interpreter (PT_INTERP) a 64-bit little-endian ELF file asks for: None
/// for a static file, which the kernel starts without any loader or library.
fn interpreter(elf: &[u8]) -> Result<Option<String>> {
    const PT_INTERP: u32 = 3;
    ensure!(
        elf.len() >= 64 && elf[..4] == *b"\x7fELF" && elf[4] == 2 && elf[5] == 1,
        "not a 64-bit little-endian ELF file"
    );
    let u16_at = |at: usize| {
        elf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        elf.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |at: usize| {
        elf.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let truncated = || anyhow::anyhow!("truncated ELF program headers");
    let phoff = usize::try_from(u64_at(0x20).ok_or_else(truncated)?)?;
    let phentsize = usize::from(u16_at(0x36).ok_or_else(truncated)?);
    let phnum = usize::from(u16_at(0x38).ok_or_else(truncated)?);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph).ok_or_else(truncated)? != PT_INTERP {
            continue;
        }
        let offset = usize::try_from(u64_at(ph + 8).ok_or_else(truncated)?)?;
        let size = usize::try_from(u64_at(ph + 32).ok_or_else(truncated)?)?;
        let path = elf.get(offset..offset + size).ok_or_else(truncated)?;
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        return Ok(Some(String::from_utf8_lossy(path).into_owned()));
    }
    Ok(None)
}

/// Unpacks the tarball afresh and runs the probetop in it against the workload fixture:
/// each probe must count every call, none dropped.
pub(crate) fn check(ctx: &Ctx, dist: &Dist) -> Result<()> {
    ensure!(is_root()?, ROOT_REQUIRED);
    let dir = ctx.target_dir().join("dist/check");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&dist.tarball)
        .arg("-C")
        .arg(&dir))?;
    let unpacked = dir.join(&dist.name);
    for file in [
        "probetop",
        "README",
        "man/probetop.1",
        "man/probetop-list.1",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(SHELLS.iter().map(|(_, f)| format!("completions/{f}")))
    {
        ensure!(
            unpacked.join(&file).is_file(),
            "{} has no {file}",
            dist.tarball.display()
        );
    }
    let binary = unpacked.join("probetop");
    ensure_static(&binary)?;
    // bash is on every machine here (zsh and fish are not): its script must load and
    // register the completion.
    let bash = unpacked.join("completions/probetop.bash");
    let registered = ctx.query_ok(
        Command::new("bash")
            .arg("-c")
            .arg(r#"source "$1" && complete -p probetop"#)
            .arg("bash")
            .arg(&bash),
    )?;
    ensure!(
        registered.contains("_probetop"),
        "{} registers no completion: {registered}",
        bash.display()
    );

    let workload = ctx.root.join("fixtures/build/c/workload");
    ensure!(
        workload.is_file(),
        "{} is missing: run `cargo xtask fixtures`",
        workload.display()
    );
    let mut fixture = Fixture::start(
        Command::new(&workload).args(["--calls", &CHECK_CALLS.to_string(), "--wait-signal"]),
        true,
    )?;
    let export = dir.join("check.json");
    let mut cmd = Command::new(&binary);
    cmd.arg("--pid").arg(fixture.pid.to_string());
    for probe in CHECK_PROBES {
        cmd.args(["-e", probe]);
    }
    // --duration is a safety stop: the run ends when the fixture exits.
    cmd.args(["--no-tui", "--duration", "120", "--export"])
        .arg(&export)
        // Without the environment's library paths: nothing of the host's may be needed.
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    echo(&cmd);
    let mut probetop = cmd
        .spawn()
        .with_context(|| format!("starting {}", show(&cmd)))?;
    let stderr = BufReader::new(probetop.stderr.take().context("probetop's stderr")?);
    let mut attached = false;
    let mut said = Vec::new();
    let mut lines = stderr.lines();
    for line in lines.by_ref() {
        let line = line.context("reading probetop's stderr")?;
        eprintln!("{line}");
        attached = line.starts_with("probetop: attached");
        said.push(line);
        if attached {
            break;
        }
    }
    if !attached {
        let _ = probetop.kill();
        let _ = probetop.wait();
        bail!("the dist probetop did not attach: {}", said.join(" / "));
    }
    // Releases the fixture: it makes its calls and exits, which ends probetop's run.
    run(Command::new("kill").args(["-USR1", &fixture.pid.to_string()]))?;
    for line in lines {
        eprintln!("{}", line.context("reading probetop's stderr")?);
    }
    let status = probetop.wait().context("waiting for probetop")?;
    fixture.stop();
    ensure!(status.success(), "the dist probetop failed: {status}");
    let text =
        fs::read_to_string(&export).with_context(|| format!("reading {}", export.display()))?;
    let got = counts(&text)?;
    let wrong: Vec<String> = CHECK_PROBES
        .iter()
        .filter_map(|spec| match got.iter().find(|(s, _, _)| s == spec) {
            Some((_, hits, 0)) if *hits == CHECK_CALLS => None,
            Some((_, hits, dropped)) => Some(format!("{spec}: {hits} hits, {dropped} dropped")),
            None => Some(format!("{spec}: not in the export")),
        })
        .collect();
    ensure!(
        wrong.is_empty(),
        "the dist probetop miscounted {CHECK_CALLS} calls: {}",
        wrong.join("; ")
    );
    println!(
        "dist: check ok: {} from the tarball counted {CHECK_CALLS} of {CHECK_CALLS} calls on {} \
         probes, none dropped",
        binary.display(),
        CHECK_PROBES.len()
    );
    Ok(())
}

/// Each probe's (spec, hits, dropped) in a JSON export.
fn counts(json: &str) -> Result<Vec<(String, u64, u64)>> {
    let export: serde_json::Value = serde_json::from_str(json).context("reading the export")?;
    let probes = export["probes"]
        .as_array()
        .context("the export has no probes")?;
    probes
        .iter()
        .map(|p| {
            Some((
                p["spec"].as_str()?.to_owned(),
                p["hits"].as_u64()?,
                p["dropped"].as_u64()?,
            ))
        })
        .collect::<Option<Vec<_>>>()
        .context("a probe in the export without spec, hits or dropped")
}

fn mib(path: &Path) -> String {
    let bytes = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_file_names_its_loader() {
        // The test binary itself is built for the host (glibc): dynamic.
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
        let interp = interpreter(&me).unwrap().expect("a dynamic test binary");
        assert!(interp.contains("ld-linux"), "{interp}");
    }

    #[test]
    fn a_file_without_interpreter_is_static() {
        // A minimal ELF64 header with one PT_LOAD program header and no PT_INTERP.
        let mut elf = vec![0u8; 64 + 56];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[64..68].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(interpreter(&elf).unwrap(), None);
        // The same header pointing past its end is an error, not a panic.
        elf[0x38..0x3a].copy_from_slice(&9u16.to_le_bytes());
        assert!(interpreter(&elf).is_err());
        assert!(interpreter(b"#!/bin/sh\n").is_err());
    }

    #[test]
    fn reads_counts_from_an_export() {
        let json = r#"{"probes": [{"spec": "uprobe:work_unit", "mode": "ring", "hits": 7, "dropped": 0},
            {"spec": "usdt:workload:unit", "hits": 7, "dropped": 1}]}"#;
        assert_eq!(
            counts(json).unwrap(),
            [
                ("uprobe:work_unit".to_owned(), 7, 0),
                ("usdt:workload:unit".to_owned(), 7, 1)
            ]
        );
        assert!(counts(r#"{"probes": [{"spec": "x"}]}"#).is_err());
    }
}
