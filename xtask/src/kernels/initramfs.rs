//! The initramfs: busybox, the dist binary and what each check needs.

use super::*;

/// `<cache>/initramfs.cpio` (newc, uncompressed): busybox (its applets are linked by
/// init.sh), init.sh as /init, probetop, the workload and probes fixtures, and the shared
/// libraries and loader `ldd` names for them, at the same paths; and the static dist
/// probetop as /dist/probetop, which needs none of them.
pub(super) fn build_initramfs(
    ctx: &Ctx,
    cache: &Path,
    busybox: &Path,
    dist: &Path,
) -> Result<PathBuf> {
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
        (fixtures.join("redzone"), "fixtures/redzone".to_owned()),
        (fixtures.join("threads"), "fixtures/threads".to_owned()),
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
pub(super) fn shared_libraries(binaries: &[(PathBuf, String)]) -> Result<Vec<PathBuf>> {
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
pub(super) fn ldd_paths(ldd: &str) -> Vec<PathBuf> {
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
pub(super) fn list_tree(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
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
