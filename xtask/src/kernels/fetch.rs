//! Fetching: apt with a configuration of its own per suite, so the host's sources and lists
//! are neither needed nor touched; busybox, qemu and the kernels.

use super::*;

pub(super) struct Apt {
    pub(super) dir: PathBuf,
    pub(super) updated: HashSet<&'static str>,
}

impl Apt {
    pub(super) fn new(cache: &Path) -> Self {
        Self {
            dir: cache.join("apt"),
            updated: HashSet::new(),
        }
    }

    /// apt-get or apt-cache, seeing `suite` alone.
    pub(super) fn command(&self, tool: &str, suite: &str) -> Command {
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
    pub(super) fn update(&mut self, suite: &'static str) -> Result<()> {
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
    pub(super) fn kernel_package(&mut self, suite: &'static str) -> Result<String> {
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
    pub(super) fn unpack(
        &mut self,
        suite: &'static str,
        packages: &[&str],
        dest: &Path,
    ) -> Result<()> {
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
pub(super) fn only_entry(dir: &Path, wanted: impl Fn(&str) -> bool) -> Result<PathBuf> {
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
pub(super) fn fetch_busybox(apt: &mut Apt, cache: &Path) -> Result<PathBuf> {
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
pub(super) struct Qemu {
    pub(super) binary: PathBuf,
    /// Its option ROMs (linuxboot_dma.bin); the BIOS comes from the seabios package.
    pub(super) data: PathBuf,
}

pub(super) const QEMU_SUITE: &str = "bookworm-backports";
pub(super) const SEABIOS: &str = "/usr/share/seabios";

pub(super) fn fetch_qemu(ctx: &Ctx, apt: &mut Apt, cache: &Path) -> Result<Qemu> {
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
pub(super) fn fetch_kernel(apt: &mut Apt, cache: &Path, kernel: &Kernel) -> Result<PathBuf> {
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
