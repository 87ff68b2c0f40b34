//! `cargo xtask kernels`: probetop on Debian's stock kernels, each booted under qemu
//! (TCG: no KVM needed) from an initramfs holding busybox, probetop and the C fixtures.
//!
//! Per kernel, `xtask/kernels/init.sh` runs as PID 1: uprobe + uretprobe + USDT on the
//! workload fixture in ring mode and in `--mode kernel` (every call counted, none
//! dropped), USDT probes with and without a semaphore on the probes fixture, and
//! `probetop list --pid`, and the ring run again with the static probetop of `cargo
//! xtask dist`, with no libc or dynamic loader left on the file system. It prints what
//! happened on the serial console; this module judges it. A kernel older than 5.15 must refuse every probe run with probetop's
//! one-line "needs Linux 5.15 or later" and no verifier log.
//!
//! Everything is cached under `<target>/kernels/`: the apt lists of each suite, the
//! kernels (`<label>/vmlinuz-*`), busybox, the initramfs, and each boot's console
//! (`logs/<label>.log`, `logs/<label>.crash.log` when a first boot crashed).

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

use crate::{Ctx, echo, install_apt, output_ok, run, show};

mod dispatch;

#[derive(clap::Args, Debug, Clone)]
pub struct KernelsArgs {
    /// Only these kernels, by label: 510 (bullseye), 61 (bookworm), 612 (bookworm-
    /// backports), 612t (trixie).
    #[arg(long, value_delimiter = ',', value_name = "LABELS")]
    only: Vec<String>,
    /// Fewer calls per probe run (2000 and 200 instead of 20000 and 1000), for iterating.
    #[arg(long)]
    quick: bool,
    /// Seconds one boot may take before its qemu is killed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

impl Default for KernelsArgs {
    fn default() -> Self {
        Self {
            only: Vec::new(),
            quick: false,
            timeout: 300,
        }
    }
}

/// One Debian kernel: the suite whose `linux-image-cloud-amd64` names it. The cloud
/// flavour boots fast and has everything probetop needs built in (no modules to load).
struct Kernel {
    label: &'static str,
    suite: &'static str,
}

const KERNELS: &[Kernel] = &[
    Kernel {
        label: "510",
        suite: "bullseye",
    },
    Kernel {
        label: "61",
        suite: "bookworm",
    },
    Kernel {
        label: "612",
        suite: "bookworm-backports",
    },
    Kernel {
        label: "612t",
        suite: "trixie",
    },
];

const METAPACKAGE: &str = "linux-image-cloud-amd64";
const MIRROR: &str = "http://deb.debian.org/debian";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Where busybox-static comes from (downloaded and unpacked, not installed: the host's
/// own busybox, if any, is left alone).
const BUSYBOX_SUITE: &str = "bookworm";
/// The first release with everything probetop needs (bpf_get_attach_cookie, BPF links
/// for perf events); older kernels must refuse with this line.
const NEEDED: (u32, u32) = (5, 15);
const REFUSAL: &str = "probetop: needs Linux 5.15 or later (";

/// The probe runs of init.sh: step, probes, mode, whether the count is pt_sema's.
const PROBE_RUNS: &[(&str, &[&str], &str, bool)] = &[
    (
        "ring",
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "ring",
        false,
    ),
    (
        "kernel",
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "kernel",
        false,
    ),
    // The same beside a second probetop (on uprobe:workload_xol, once per call).
    (
        "foreign",
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "ring",
        false,
    ),
    (
        "usdt",
        &["usdt:fixture_sema:tick", "usdt:fixture:tick"],
        "ring",
        true,
    ),
    (
        DIST_STEP,
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "ring",
        false,
    ),
];
/// The probe run of the dist file (`/dist/probetop` in the guest), which init.sh runs with
/// /lib, /lib64 and /usr/lib moved away; its `NOLIBC` line says whether the glibc
/// probetop could still start then (it must not).
const DIST_STEP: &str = "dist";
/// What `probetop list --pid` must show of the workload.
const LISTED: &[&str] = &["work_unit", "leaf_ret", "workload:unit"];

pub fn run_kernels(ctx: &Ctx, args: &KernelsArgs) -> Result<()> {
    let started = Instant::now();
    let kernels = select(&args.only)?;
    let (calls, sema) = if args.quick {
        (2000, 200)
    } else {
        (20000, 1000)
    };
    crate::fixtures(ctx)?;
    crate::build(ctx)?;
    let dist = crate::dist::dist(ctx)?;
    // The system's qemu is not the one run (see Qemu), but brings the libraries and
    // the BIOS (seabios) that one needs.
    install_apt(ctx, &["qemu-system-x86", "cpio"])?;

    let cache = ctx.target_dir().join("kernels");
    fs::create_dir_all(cache.join("logs"))
        .with_context(|| format!("creating {}", cache.display()))?;
    let mut apt = Apt::new(&cache);
    let busybox = fetch_busybox(&mut apt, &cache)?;
    let qemu = fetch_qemu(ctx, &mut apt, &cache)?;
    let mut vmlinuz = Vec::new();
    for kernel in &kernels {
        vmlinuz.push(fetch_kernel(&mut apt, &cache, kernel)?);
    }
    let initramfs = build_initramfs(ctx, &cache, &busybox, &dist.binary)?;

    let cmdline = format!("pt_calls={calls} pt_sema={sema}");
    let timeout = Duration::from_secs(args.timeout);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (kernel, vmlinuz) in kernels.iter().zip(&vmlinuz) {
        let log = cache.join("logs").join(format!("{}.log", kernel.label));
        println!(
            "kernels: {} ({}): booting {} (console: {})",
            kernel.label,
            kernel.suite,
            vmlinuz.display(),
            log.display()
        );
        let crash_log = cache
            .join("logs")
            .join(format!("{}.crash.log", kernel.label));
        // A crash log left by an earlier run would read as this one's.
        if crash_log.exists() {
            fs::remove_file(&crash_log)
                .with_context(|| format!("removing {}", crash_log.display()))?;
        }
        let boot_started = Instant::now();
        let mut boot = boot(&qemu, vmlinuz, &initramfs, &cmdline, &log, timeout)?;
        if boot.crashed() {
            // A guest kernel that died (under TCG, see Qemu) gets one more boot; the crash
            // is kept and noted.
            fs::rename(&log, &crash_log)
                .with_context(|| format!("keeping {}", crash_log.display()))?;
            let why = boot.crash.clone().unwrap_or_default();
            println!(
                "kernels: {}: the guest crashed ({why}); booting again",
                kernel.label
            );
            notes.push(format!(
                "{}: the first boot crashed ({why}; {}); the results are the second boot's",
                kernel.label,
                crash_log.display()
            ));
            boot = self::boot(&qemu, vmlinuz, &initramfs, &cmdline, &log, timeout)?;
        }
        let kernel_rows = judge(kernel, &boot, calls, sema);
        let failed = kernel_rows.iter().filter(|r| !r.ok).count();
        println!(
            "kernels: {}: {} in {:.0} s, {} of {} checks ok",
            kernel.label,
            boot.release.as_deref().unwrap_or("(no scenario)"),
            boot_started.elapsed().as_secs_f64(),
            kernel_rows.len() - failed,
            kernel_rows.len()
        );
        rows.extend(kernel_rows);
    }

    let failed = rows.iter().filter(|r| !r.ok).count();
    let mut summary = table(&rows);
    for note in &notes {
        summary.push_str(&format!("note: {note}\n"));
    }
    summary.push_str(&format!(
        "{} kernels, {} checks, {} failed, in {:.0} s (calls {calls}, usdt {sema}); consoles in {}\n",
        kernels.len(),
        rows.len(),
        failed,
        started.elapsed().as_secs_f64(),
        cache.join("logs").display()
    ));
    print!("\n{summary}");
    let summary_path = cache.join("summary.txt");
    fs::write(&summary_path, &summary)
        .with_context(|| format!("writing {}", summary_path.display()))?;
    ensure!(
        failed == 0,
        "kernels: {failed} of {} checks failed (see the table above and the consoles in {})",
        rows.len(),
        cache.join("logs").display()
    );
    Ok(())
}

fn select(only: &[String]) -> Result<Vec<&'static Kernel>> {
    if only.is_empty() {
        return Ok(KERNELS.iter().collect());
    }
    let labels: Vec<&str> = KERNELS.iter().map(|k| k.label).collect();
    only.iter()
        .map(|label| {
            KERNELS
                .iter()
                .find(|k| k.label == label.trim())
                .with_context(|| {
                    format!("--only: no kernel {label:?} (known: {})", labels.join(", "))
                })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Fetching: apt with a configuration of its own per suite, so the host's sources and
// lists are neither needed nor touched.

struct Apt {
    dir: PathBuf,
    updated: HashSet<&'static str>,
}

impl Apt {
    fn new(cache: &Path) -> Self {
        Self {
            dir: cache.join("apt"),
            updated: HashSet::new(),
        }
    }

    /// apt-get or apt-cache, seeing `suite` alone.
    fn command(&self, tool: &str, suite: &str) -> Command {
        let dir = self.dir.join(suite);
        let mut cmd = Command::new(tool);
        for (key, value) in [
            ("Dir::Etc::SourceList", dir.join("sources.list")),
            ("Dir::Etc::SourceParts", dir.join("sources.list.d")),
            ("Dir::Etc::Preferences", dir.join("preferences")),
            ("Dir::Etc::PreferencesParts", dir.join("preferences.d")),
            ("Dir::State::Lists", dir.join("lists")),
            ("Dir::Cache", dir.join("cache")),
        ] {
            cmd.arg("-o").arg(format!("{key}={}", value.display()));
        }
        // Downloads land in a directory of ours: no need for the _apt user's sandbox.
        cmd.args([
            "-o",
            "APT::Sandbox::User=root",
            "-o",
            "Acquire::Languages=none",
        ]);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Refreshes `suite`'s package lists, once per run.
    fn update(&mut self, suite: &'static str) -> Result<()> {
        if self.updated.contains(suite) {
            return Ok(());
        }
        let dir = self.dir.join(suite);
        for sub in [
            "lists/partial",
            "cache/archives/partial",
            "sources.list.d",
            "preferences.d",
        ] {
            fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        let signed_by = if Path::new(KEYRING).is_file() {
            format!(" [signed-by={KEYRING}]")
        } else {
            String::new()
        };
        fs::write(
            dir.join("sources.list"),
            format!("deb{signed_by} {MIRROR} {suite} main\n"),
        )
        .with_context(|| format!("writing {}/sources.list", dir.display()))?;
        run(self.command("apt-get", suite).args(["update", "-qq"]))?;
        self.updated.insert(suite);
        Ok(())
    }

    /// The package `linux-image-cloud-amd64` of `suite` depends on.
    fn kernel_package(&mut self, suite: &'static str) -> Result<String> {
        self.update(suite)?;
        let mut cmd = self.command("apt-cache", suite);
        cmd.args(["depends", METAPACKAGE]);
        echo(&cmd);
        let out = output_ok(&mut cmd)?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.trim().strip_prefix("Depends:"))
            .map(|p| p.trim().to_owned())
            .with_context(|| format!("{METAPACKAGE} of {suite} depends on no kernel: {text}"))
    }

    /// Downloads `packages` of `suite` and unpacks them into `dest` (replaced).
    fn unpack(&mut self, suite: &'static str, packages: &[&str], dest: &Path) -> Result<()> {
        self.update(suite)?;
        let debs = self.dir.join("debs");
        if debs.exists() {
            fs::remove_dir_all(&debs).with_context(|| format!("emptying {}", debs.display()))?;
        }
        fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
        run(self
            .command("apt-get", suite)
            .args(["download", "-q"])
            .args(packages)
            .current_dir(&debs))?;
        if dest.exists() {
            fs::remove_dir_all(dest).with_context(|| format!("removing {}", dest.display()))?;
        }
        for package in packages {
            let deb = only_entry(&debs, |name| {
                name.starts_with(&format!("{package}_")) && name.ends_with(".deb")
            })?;
            run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dest))?;
        }
        fs::remove_dir_all(&debs).with_context(|| format!("removing {}", debs.display()))
    }
}

/// The one entry of `dir` whose name passes `wanted`.
fn only_entry(dir: &Path, wanted: impl Fn(&str) -> bool) -> Result<PathBuf> {
    let mut found = Vec::new();
    if dir.is_dir() {
        for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
            let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
            if wanted(&entry.file_name().to_string_lossy()) {
                found.push(entry.path());
            }
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("nothing expected in {}", dir.display()),
        _ => bail!("several candidates in {}: {found:?}", dir.display()),
    }
}

/// `<cache>/busybox/bin/busybox` (or usr/bin), unpacked from busybox-static once.
fn fetch_busybox(apt: &mut Apt, cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("busybox");
    let find = || {
        ["bin/busybox", "usr/bin/busybox"]
            .iter()
            .map(|p| dir.join(p))
            .find(|p| p.is_file())
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    println!("kernels: fetching busybox-static ({BUSYBOX_SUITE})");
    apt.unpack(BUSYBOX_SUITE, &["busybox-static"], &dir)?;
    find().with_context(|| format!("busybox-static unpacked no busybox into {}", dir.display()))
}

/// The qemu that boots the kernels: bookworm-backports' (10.0), unpacked under
/// `<cache>/qemu` once. Bookworm's own qemu 7.2 (installed for its libraries and
/// firmware, which this one shares) crashes the bookworm-backports 6.12 kernel in SLUB
/// (`kmem_cache_alloc_noprof`: a GPF or double fault) in 5 boots of 6 under TCG, with
/// one thread or several and whatever the CPU model; under qemu 10.0 it boots cleanly.
struct Qemu {
    binary: PathBuf,
    /// Its option ROMs (linuxboot_dma.bin); the BIOS comes from the seabios package.
    data: PathBuf,
}

const QEMU_SUITE: &str = "bookworm-backports";
const SEABIOS: &str = "/usr/share/seabios";

fn fetch_qemu(ctx: &Ctx, apt: &mut Apt, cache: &Path) -> Result<Qemu> {
    let dir = cache.join("qemu");
    let qemu = Qemu {
        binary: dir.join("usr/bin/qemu-system-x86_64"),
        data: dir.join("usr/share/qemu"),
    };
    if !qemu.binary.is_file() {
        println!("kernels: fetching qemu-system-x86 ({QEMU_SUITE})");
        apt.unpack(QEMU_SUITE, &["qemu-system-x86", "qemu-system-data"], &dir)?;
    }
    let version = ctx.query(Command::new(&qemu.binary).arg("--version"))?;
    ensure!(
        version.status.success(),
        "{} does not run ({}): {}",
        qemu.binary.display(),
        version.status,
        version.stderr.trim()
    );
    println!(
        "kernels: {}",
        version.stdout.lines().next().unwrap_or("qemu (no version)")
    );
    Ok(qemu)
}

/// `<cache>/<label>/vmlinuz-*`: the kernel the suite's `linux-image-cloud-amd64` named
/// when it was first fetched (remove the directory to fetch the suite's newest).
fn fetch_kernel(apt: &mut Apt, cache: &Path, kernel: &Kernel) -> Result<PathBuf> {
    let dir = cache.join(kernel.label);
    let vmlinuz = |dir: &Path| only_entry(dir, |name| name.starts_with("vmlinuz-"));
    if let Ok(found) = vmlinuz(&dir) {
        return Ok(found);
    }
    let package = apt.kernel_package(kernel.suite)?;
    println!(
        "kernels: {}: fetching {package} ({})",
        kernel.label, kernel.suite
    );
    let unpacked = cache.join(format!("{}.unpacked", kernel.label));
    apt.unpack(kernel.suite, &[&package], &unpacked)?;
    // Only the kernel image is kept: the modules are not needed (nor loaded).
    let image = vmlinuz(&unpacked.join("boot"))?;
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let kept = dir.join(image.file_name().context("vmlinuz without a name")?);
    fs::rename(&image, &kept).with_context(|| format!("moving {}", image.display()))?;
    fs::remove_dir_all(&unpacked).with_context(|| format!("removing {}", unpacked.display()))?;
    Ok(kept)
}

// ---------------------------------------------------------------------------------------
// The initramfs

/// `<cache>/initramfs.cpio` (newc, uncompressed): busybox (its applets are linked by
/// init.sh), init.sh as /init, probetop, the workload and probes fixtures, and the shared
/// libraries and loader `ldd` names for them, at the same paths; and the static dist
/// probetop as /dist/probetop, which needs none of them.
fn build_initramfs(ctx: &Ctx, cache: &Path, busybox: &Path, dist: &Path) -> Result<PathBuf> {
    let root = cache.join("initramfs");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    for dir in [
        "bin", "usr/bin", "fixtures", "proc", "sys", "dev", "tmp", "root", "etc",
    ] {
        fs::create_dir_all(root.join(dir))
            .with_context(|| format!("creating {}", root.join(dir).display()))?;
    }
    let probetop = ctx.target_dir().join("release/probetop");
    let fixtures = ctx.root.join("fixtures/build/c");
    let mut binaries = vec![
        (probetop.clone(), "usr/bin/probetop".to_owned()),
        (fixtures.join("workload"), "fixtures/workload".to_owned()),
        (fixtures.join("probes"), "fixtures/probes".to_owned()),
    ];
    for lib in shared_libraries(&binaries)? {
        let inside = lib
            .strip_prefix("/")
            .context("ldd named a relative path")?
            .display()
            .to_string();
        binaries.push((lib, inside));
    }
    binaries.push((busybox.to_path_buf(), "bin/busybox".to_owned()));
    binaries.push((dist.to_path_buf(), "dist/probetop".to_owned()));
    binaries.push((ctx.root.join("xtask/kernels/init.sh"), "init".to_owned()));
    for (from, inside) in &binaries {
        let to = root.join(inside);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        // fs::copy follows symlinks (libc.so.6 -> libc-2.36.so).
        fs::copy(from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        // Whatever mode the checkout gave init.sh, everything here is run or loaded.
        fs::set_permissions(&to, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("chmod 755 {}", to.display()))?;
    }
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
        .context("writing etc/passwd")?;

    let mut entries = Vec::new();
    list_tree(&root, Path::new("."), &mut entries)?;
    let out = cache.join("initramfs.cpio");
    let mut cpio = Command::new("cpio");
    cpio.args(["--quiet", "-o", "-H", "newc", "-R", "0:0"])
        .current_dir(&root)
        .stdin(Stdio::piped())
        .stdout(File::create(&out).with_context(|| format!("creating {}", out.display()))?);
    echo(&cpio);
    let mut child = cpio
        .spawn()
        .with_context(|| format!("starting {}", show(&cpio)))?;
    {
        let mut stdin = child.stdin.take().context("cpio's stdin")?;
        for entry in &entries {
            writeln!(stdin, "{}", entry.display()).context("writing cpio's file list")?;
        }
    }
    let status = child.wait().context("waiting for cpio")?;
    ensure!(status.success(), "`{}` failed: {status}", show(&cpio));
    let size = fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!(
        "kernels: initramfs {} ({:.1} MiB, {} entries)",
        out.display(),
        size as f64 / (1 << 20) as f64,
        entries.len()
    );
    Ok(out)
}

/// The libraries and loader of every binary, as `ldd` names them (deduplicated).
fn shared_libraries(binaries: &[(PathBuf, String)]) -> Result<Vec<PathBuf>> {
    let mut libs: Vec<PathBuf> = Vec::new();
    for (binary, _) in binaries {
        ensure!(
            binary.is_file(),
            "{} is missing: build it first (`cargo xtask build`, `cargo xtask fixtures`)",
            binary.display()
        );
        let out = output_ok(Command::new("ldd").arg(binary).stdin(Stdio::null()))?;
        for lib in ldd_paths(&String::from_utf8_lossy(&out.stdout)) {
            if !libs.contains(&lib) {
                libs.push(lib);
            }
        }
    }
    Ok(libs)
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and `/lib64/ld-linux... (0x...)`
/// lines -> their paths; the vDSO has none.
fn ldd_paths(ldd: &str) -> Vec<PathBuf> {
    ldd.lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next(),
            }?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Every entry under `dir` as a path relative to the archive's root, parents first.
fn list_tree(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let full = root.join(dir);
    let mut names: Vec<_> = fs::read_dir(&full)
        .with_context(|| format!("listing {}", full.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("listing {}", full.display()))?;
    names.sort();
    for name in names {
        let path = dir.join(name);
        out.push(path.clone());
        if root.join(&path).symlink_metadata()?.is_dir() {
            list_tree(root, &path, out)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Booting

/// What one boot printed, read from its console log.
#[derive(Debug, Default)]
struct Boot {
    /// `uname -r`, once the scenario began.
    release: Option<String>,
    /// The scenario reached its end.
    ended: bool,
    timed_out: bool,
    /// The first line of a kernel crash on the console.
    crash: Option<String>,
    /// The scenario's own lines, without the "PT " prefix.
    lines: Vec<String>,
}

impl Boot {
    /// The guest died before the end of the scenario with a kernel crash on the console.
    fn crashed(&self) -> bool {
        !self.ended && self.crash.is_some()
    }

    fn parse(console: &str, timed_out: bool) -> Self {
        let mut boot = Boot {
            timed_out,
            ..Default::default()
        };
        for line in console.lines() {
            let line = line.trim_end_matches('\r');
            // The first line may follow the BIOS's output on the same console line.
            let line = line.find("PT BEGIN ").map_or(line, |at| &line[at..]);
            if let Some(rest) = line.strip_prefix("PT ") {
                if let Some(begin) = rest.strip_prefix("BEGIN kernel=") {
                    boot.release = begin.split_whitespace().next().map(str::to_owned);
                }
                boot.ended |= rest.starts_with("END ");
                boot.lines.push(rest.to_owned());
            } else if boot.crash.is_none() {
                // From the sign on: the first kernel line may follow the BIOS's output
                // and its escape sequences on the same console line.
                boot.crash = CRASH_SIGNS
                    .iter()
                    .filter_map(|sign| line.find(sign))
                    .min()
                    .map(|at| line[at..].trim().chars().take(100).collect());
            }
        }
        boot
    }

    /// The probetop exit status and "attached" of a step's `RC` line.
    fn rc(&self, step: &str) -> Option<(i32, bool)> {
        let prefix = format!("RC {step} ");
        let rest = self.lines.iter().find_map(|l| l.strip_prefix(&prefix))?;
        let field = |key: &str| {
            rest.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let rc = field("probetop")?.parse().ok()?;
        Some((rc, field("attached") == Some("1")))
    }

    /// The lines a step relayed under `tag` (ERR: probetop's stderr, OUT: its stdout).
    fn relayed(&self, tag: &str, step: &str) -> Vec<&str> {
        let prefix = format!("{tag} {step} | ");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .collect()
    }

    fn export(&self, step: &str) -> Option<&str> {
        let prefix = format!("JSON {step} ");
        self.lines.iter().find_map(|l| l.strip_prefix(&prefix))
    }
}

/// Console lines of a dying kernel. With `oops=panic` on the command line every oops
/// ends in a panic, and with `panic=-1 -no-reboot` the panic ends qemu.
const CRASH_SIGNS: &[&str] = &[
    "Kernel panic",
    "Oops:",
    "BUG:",
    "general protection fault",
    "double fault",
];

/// Boots `vmlinuz` with the initramfs, the console going to `log`, and kills the qemu
/// (our own child) if it outlives `timeout`.
fn boot(
    qemu: &Qemu,
    vmlinuz: &Path,
    initramfs: &Path,
    cmdline: &str,
    log: &Path,
    timeout: Duration,
) -> Result<Boot> {
    let console = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(&qemu.binary);
    cmd.arg("-L")
        .arg(&qemu.data)
        .args(["-L", SEABIOS])
        .args(["-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "2048"])
        // No default devices (their ROMs, and audio or display modules, which would be
        // looked for among the system qemu's): the serial console is all there is.
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-audio",
            "none",
        ])
        .args(["-serial", "stdio", "-no-reboot", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=-1 oops=panic quiet loglevel=3 {cmdline}"
        ))
        .stdin(Stdio::null())
        .stderr(console.try_clone().context("duplicating the console log")?)
        .stdout(console);
    echo(&cmd);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", show(&cmd)))?;
    let mut timed_out = false;
    loop {
        if child.try_wait().context("waiting for qemu")?.is_some() {
            break;
        }
        if started.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let bytes = fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    Ok(Boot::parse(&String::from_utf8_lossy(&bytes), timed_out))
}

// ---------------------------------------------------------------------------------------
// Judging

struct Row {
    kernel: String,
    step: String,
    expected: String,
    got: String,
    ok: bool,
}

/// One row per step of the scenario (or one for a boot that never ran it).
fn judge(kernel: &Kernel, boot: &Boot, calls: u64, sema: u64) -> Vec<Row> {
    let name = match &boot.release {
        Some(release) => format!(
            "{} {}",
            release.trim_end_matches("-cloud-amd64"),
            kernel.suite
        ),
        None => format!("{} {}", kernel.label, kernel.suite),
    };
    let row = |step: &str, expected: String, got: String, ok: bool| Row {
        kernel: name.clone(),
        step: step.to_owned(),
        expected,
        got,
        ok,
    };
    let Some(release) = &boot.release else {
        let got = if boot.timed_out {
            "timed out before the scenario began".to_owned()
        } else {
            boot.crash
                .clone()
                .unwrap_or_else(|| "no scenario on the console".to_owned())
        };
        return vec![row("boot", "the scenario runs".to_owned(), got, false)];
    };
    let refuses = version(release).is_some_and(|v| v < NEEDED);
    let mut rows = Vec::new();
    for &(step, specs, mode, is_sema) in PROBE_RUNS {
        let count = if is_sema { sema } else { calls };
        let (expected, (got, ok)) = if refuses {
            ("refused clearly".to_owned(), judge_refusal(boot, step))
        } else {
            (
                format!("{} x {count} hits, 0 dropped", specs.len()),
                judge_counts(boot, step, specs, mode, count),
            )
        };
        let (expected, got, ok) = if step == DIST_STEP {
            judge_no_libc(boot, expected, got, ok)
        } else {
            (expected, got, ok)
        };
        rows.push(row(step, expected, got, ok));
    }
    if !refuses {
        // Kernel dispatch time: every return of probetop's own uretprobe timed, none
        // of its hits counted as other uprobes, and the second probetop's all counted.
        for step in ["ring", "kernel"] {
            let (expected, got, ok) = dispatch::judge(boot, step, calls, 0);
            rows.push(row(&format!("{step} dispatch"), expected, got, ok));
        }
        let (expected, got, ok) = dispatch::judge(boot, "foreign", calls, calls);
        let other = dispatch::foreign_hits(boot);
        rows.push(row(
            "foreign dispatch",
            format!("{expected} (the other's {calls} hits)"),
            format!(
                "{got} (the other's {})",
                other.map_or("-".to_owned(), |n| n.to_string())
            ),
            ok && other == Some(calls),
        ));
    }
    let (got, ok) = judge_list(boot);
    rows.push(row("list", "work_unit, leaf_ret, USDT".to_owned(), got, ok));
    if !boot.ended {
        let got = if boot.timed_out {
            "timed out".to_owned()
        } else {
            boot.crash
                .clone()
                .unwrap_or_else(|| "the guest stopped early".to_owned())
        };
        rows.push(row("end", "the scenario ends".to_owned(), got, false));
    }
    rows
}

/// "5.10.0-32-cloud-amd64" -> (5, 10).
fn version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The step ran to the end with every probe counting every call.
fn judge_counts(boot: &Boot, step: &str, specs: &[&str], mode: &str, count: u64) -> (String, bool) {
    let Some((rc, attached)) = boot.rc(step) else {
        return ("did not run".to_owned(), false);
    };
    if rc != 0 || !attached {
        let err = boot
            .relayed("ERR", step)
            .into_iter()
            .rfind(|l| l.starts_with("probetop: "))
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>();
        return (format!("rc={rc} attached={attached}: {err}"), false);
    }
    let Some(json) = boot.export(step) else {
        return ("no export".to_owned(), false);
    };
    let export: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return (format!("unreadable export: {e}"), false),
    };
    let probes = export["probes"].as_array().cloned().unwrap_or_default();
    let mut hits = Vec::new();
    let mut dropped = 0;
    let mut ok = true;
    for spec in specs {
        let Some(probe) = probes.iter().find(|p| p["spec"] == *spec) else {
            hits.push("-".to_owned());
            ok = false;
            continue;
        };
        let h = probe["hits"].as_u64().unwrap_or(0);
        let d = probe["dropped"].as_u64().unwrap_or(u64::MAX);
        hits.push(h.to_string());
        dropped += d;
        ok &= h == count && d == 0 && probe["mode"] == mode;
    }
    (format!("{}, {dropped} dropped", hits.join("/")), ok)
}

/// The dist run counts only if no libc was there to use: init.sh's `NOLIBC` line must
/// say that the glibc probetop could not start (the loader it names was gone).
fn judge_no_libc(boot: &Boot, expected: String, got: String, ok: bool) -> (String, String, bool) {
    let expected = format!("{expected}, no libc");
    let prefix = format!("NOLIBC {DIST_STEP} glibc_probetop_rc=");
    let rc = boot
        .lines
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rc| rc.trim().parse::<i32>().ok());
    match rc {
        Some(rc) if rc != 0 => (expected, format!("{got}, no libc"), ok),
        Some(_) => (expected, format!("{got}, but libc was there"), false),
        None => (expected, format!("{got}, libc not hidden"), false),
    }
}

/// Every probe run of a kernel without what probetop needs must end before attaching,
/// on probetop's one line, with no verifier log.
fn judge_refusal(boot: &Boot, step: &str) -> (String, bool) {
    let Some((rc, attached)) = boot.rc(step) else {
        return ("did not run".to_owned(), false);
    };
    let err = boot.relayed("ERR", step);
    let refusals = err.iter().filter(|l| l.starts_with(REFUSAL)).count();
    let verifier = err.iter().any(|l| l.to_lowercase().contains("verifier"));
    if rc == 1 && !attached && refusals == 1 && !verifier {
        return ("refused clearly".to_owned(), true);
    }
    let last = err.last().copied().unwrap_or("").chars().take(50);
    (
        format!(
            "rc={rc} attached={attached}{}: {}",
            if verifier { ", verifier log" } else { "" },
            last.collect::<String>()
        ),
        false,
    )
}

fn judge_list(boot: &Boot) -> (String, bool) {
    let Some((rc, _)) = boot.rc("list") else {
        return ("did not run".to_owned(), false);
    };
    let out = boot.relayed("OUT", "list");
    let missing: Vec<&str> = LISTED
        .iter()
        .copied()
        .filter(|name| !out.iter().any(|l| l.split_whitespace().any(|w| w == *name)))
        .collect();
    if rc == 0 && missing.is_empty() {
        ("all listed".to_owned(), true)
    } else {
        (format!("rc={rc}, missing {}", missing.join(", ")), false)
    }
}

/// The summary: one line per row, the kernel named on its first row only.
fn table(rows: &[Row]) -> String {
    let width = |f: fn(&Row) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let (wk, ws, we, wg) = (
        width(|r| &r.kernel, "kernel"),
        width(|r| &r.step, "step"),
        width(|r| &r.expected, "expected"),
        width(|r| &r.got, "got"),
    );
    let mut out = format!(
        "{:wk$}  {:ws$}  {:we$}  {:wg$}  ok\n",
        "kernel", "step", "expected", "got"
    );
    let mut last = "";
    for r in rows {
        let kernel = if r.kernel == last { "" } else { &r.kernel };
        last = &r.kernel;
        out.push_str(&format!(
            "{kernel:wk$}  {:ws$}  {:we$}  {:wg$}  {}\n",
            r.step,
            r.expected,
            r.got,
            if r.ok { "ok" } else { "FAIL" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ldd() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f8c)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f8c)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn reads_versions() {
        assert_eq!(version("5.10.0-32-cloud-amd64"), Some((5, 10)));
        assert_eq!(version("6.12.95+deb12-cloud-amd64"), Some((6, 12)));
        assert!(version("5.10.0").is_some_and(|v| v < NEEDED));
        assert!(version("5.15.0").is_some_and(|v| v >= NEEDED));
        assert!(version("6.1.0").is_some_and(|v| v >= NEEDED));
    }

    #[test]
    fn selects_kernels() {
        let labels = |only: &[&str]| {
            let only: Vec<String> = only.iter().map(|s| (*s).to_owned()).collect();
            select(&only).map(|ks| ks.iter().map(|k| k.label).collect::<Vec<_>>())
        };
        assert_eq!(labels(&[]).unwrap(), ["510", "61", "612", "612t"]);
        assert_eq!(labels(&["61", "612"]).unwrap(), ["61", "612"]);
        assert!(labels(&["6.1"]).is_err());
    }

    fn console(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{l}\r\n")).collect()
    }

    #[test]
    fn judges_a_kernel_that_runs() {
        // `other`: the other uprobes' dispatches the run counted.
        let export = |mode: &str, hits: u64, other: u64| {
            format!(
                r#"{{"probes": [{{"spec": "uprobe:work_unit", "mode": "{mode}", "hits": {hits}, "dropped": 0}},
                {{"spec": "uretprobe:leaf_ret", "mode": "{mode}", "hits": {hits}, "dropped": 0,
                  "dispatch_ns": {{"return": {{"count": {hits}}}}}}},
                {{"spec": "usdt:workload:unit", "mode": "{mode}", "hits": {hits}, "dropped": 0}}],
                "cost": {{"other_uprobe_dispatch": {{"count": {other}}},
                          "dispatch_hooks": {{"returns": "uprobe_notify_resume at the int3 trampoline"}}}}}}"#
            )
            .replace('\n', "")
        };
        let text = console(&[
            "[    1.0] random kernel line",
            "Booting from ROM..\x1bc\x1b[?7l\x1b[2JPT BEGIN kernel=6.1.0-50-cloud-amd64 cpus=2",
            "PT RC ring probetop=0 attached=1 fixture=0 secs=9.0",
            "PT ERR ring | probetop: attached 3 probes to pid 80 (workload)",
            &format!("PT JSON ring {}", export("ring", 20, 0)),
            "PT RC kernel probetop=0 attached=1 fixture=0 secs=9.0",
            &format!("PT JSON kernel {}", export("kernel", 19, 0)),
            "PT RC other probetop=0",
            r#"PT JSON other {"probes": [{"spec": "uprobe:workload_xol", "hits": 20}]}"#,
            "PT RC foreign probetop=0 attached=1 fixture=0 secs=9.0",
            // Its own returns counted as other uprobes, beside the other's 20.
            &format!("PT JSON foreign {}", export("ring", 20, 40)),
            "PT RC usdt probetop=0 attached=1 fixture=0 secs=2.0",
            r#"PT JSON usdt {"probes": [{"spec": "usdt:fixture_sema:tick", "mode": "ring", "hits": 5, "dropped": 0}, {"spec": "usdt:fixture:tick", "mode": "ring", "hits": 5, "dropped": 0}]}"#,
            "PT RC list probetop=0 lines=4000",
            "PT OUT list |   uprobe   0x1a10  0x1a10  emulated-push   leaf_ret",
            "PT OUT list |   uprobe   0x1a30  0x1a30  emulated-push   work_unit",
            "PT OUT list |   usdt     0x1a48  0x1a48  emulated-nop    workload:unit  args=\"-8@%rbx\"",
            "PT NOLIBC dist glibc_probetop_rc=127",
            "PT RC dist probetop=0 attached=1 fixture=0 secs=9.0",
            &format!("PT JSON dist {}", export("ring", 20, 0)),
            "PT END uptime=30.0",
        ]);
        let boot = Boot::parse(&text, false);
        assert!(boot.ended && !boot.crashed());
        let kernel = &KERNELS[1];
        let rows = judge(kernel, &boot, 20, 5);
        let oks: Vec<(&str, bool)> = rows.iter().map(|r| (r.step.as_str(), r.ok)).collect();
        assert_eq!(
            oks,
            [
                ("ring", true),
                ("kernel", false),
                ("foreign", true),
                ("usdt", true),
                ("dist", true),
                ("ring dispatch", true),
                ("kernel dispatch", false),
                ("foreign dispatch", false),
                ("list", true)
            ]
        );
        assert_eq!(rows[1].got, "19/19/19, 0 dropped");
        assert_eq!(rows[4].got, "20/20/20, 0 dropped, no libc");
        assert_eq!(rows[5].got, "20 returns by uprobe_notify_resume, 0 other");
        assert_eq!(
            rows[7].got,
            "20 returns by uprobe_notify_resume, 40 other (the other's 20)"
        );

        // The same dist run with a libc the glibc probetop could still start with, or
        // with no word on it, proves nothing.
        for (nolibc, got) in [
            ("PT NOLIBC dist glibc_probetop_rc=0", "but libc was there"),
            ("PT X", "libc not hidden"),
        ] {
            let text = text.replace("PT NOLIBC dist glibc_probetop_rc=127", nolibc);
            let rows = judge(kernel, &Boot::parse(&text, false), 20, 5);
            assert!(!rows[4].ok && rows[4].got.ends_with(got), "{}", rows[4].got);
        }
        assert_eq!(rows[0].kernel, "6.1.0-50 bookworm");
    }

    #[test]
    fn judges_a_kernel_that_must_refuse() {
        let refusal = "PT ERR {} | probetop: needs Linux 5.15 or later (bpf_get_attach_cookie, \
                       BPF links for perf events); this kernel is 5.10.0-32-cloud-amd64";
        let mut lines = vec!["PT BEGIN kernel=5.10.0-32-cloud-amd64 cpus=2".to_owned()];
        lines.push("PT NOLIBC dist glibc_probetop_rc=127".to_owned());
        for step in ["ring", "kernel", "foreign", "usdt", "dist"] {
            lines.push(format!(
                "PT RC {step} probetop=1 attached=0 fixture=143 secs=1.0"
            ));
            lines.push(format!(
                "PT ERR {step} | probetop: 3 probe points from 3 specs"
            ));
            if step != "usdt" {
                lines.push(refusal.replace("{}", step));
            }
        }
        // The usdt run printed a verifier log instead.
        lines.push("PT ERR usdt | probetop: the eBPF program ... Verifier output: 0: (85)".into());
        lines.push("PT END uptime=10".into());
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let boot = Boot::parse(&console(&refs), false);
        let rows = judge(&KERNELS[0], &boot, 20, 5);
        let oks: Vec<bool> = rows.iter().map(|r| r.ok).collect();
        // list did not run: a failure too.
        assert_eq!(oks, [true, true, true, false, true, false]);
        assert!(rows[3].got.contains("verifier log"), "{}", rows[3].got);
    }

    #[test]
    fn a_crash_before_the_end_is_seen() {
        let text = console(&[
            "PT BEGIN kernel=6.12.95+deb12-cloud-amd64 cpus=2",
            "Booting from ROM..\x1b[2J[   3.1] Oops: general protection fault, probably for non-canonical address",
            "[   3.2] Kernel panic - not syncing: Fatal exception",
        ]);
        let boot = Boot::parse(&text, false);
        assert!(boot.crashed());
        assert!(
            boot.crash
                .as_deref()
                .unwrap()
                .starts_with("Oops: general protection")
        );
        let rows = judge(&KERNELS[2], &boot, 20, 5);
        assert!(rows.iter().all(|r| !r.ok));
        assert_eq!(rows.last().unwrap().step, "end");
    }
}
