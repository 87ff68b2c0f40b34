//! Setting the machine up: apt packages, Go, the nightly toolchain and its components, a
//! bpf-linker built against nightly's own LLVM; fixtures and the release build.

use super::*;

pub fn setup(ctx: &Ctx) -> Result<()> {
    setup_apt(ctx)?;
    setup_go(ctx)?;
    setup_otelcol(ctx)?;
    setup_nightly(ctx)?;
    setup_stable_components(ctx)?;
    setup_nightly_components(ctx)?;
    setup_bpf_linker(ctx)?;
    Ok(())
}

pub fn fixtures(ctx: &Ctx) -> Result<()> {
    run(Command::new("make")
        .arg("-C")
        .arg(ctx.root.join("fixtures")))
}

pub fn build(ctx: &Ctx) -> Result<()> {
    run(ctx.cargo().args(["build", "--release"]))
}

pub fn setup_apt(ctx: &Ctx) -> Result<()> {
    install_apt(ctx, APT_PACKAGES)?;
    println!("setup: apt packages: ok");
    Ok(())
}

/// Installs the `packages` that are missing, without starting any service they ship
/// (see [`apt::install_missing`]).
pub fn install_apt(ctx: &Ctx, packages: &[&str]) -> Result<()> {
    apt::install_missing(packages, |pkg| {
        let out = ctx.query(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))?;
        // Anything but this (not known, removed, config-files only, half-installed) needs
        // an install; dpkg-query fails outright for a package it has never seen.
        Ok(!(out.status.success() && out.stdout.trim() == "install ok installed"))
    })
}

/// The Go fixture needs a Go toolchain: the machine's own (/usr/local/go) when there is
/// one, else Debian's.
pub fn setup_go(ctx: &Ctx) -> Result<()> {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("go").is_file()));
    if on_path || Path::new("/usr/local/go/bin/go").is_file() {
        println!("setup: go: ok");
        return Ok(());
    }
    println!("setup: go: installing golang-go");
    install_apt(ctx, &["golang-go"])
}

/// Where the OpenTelemetry Collector of `--otlp`'s test is found (tests/it/otlp.rs).
pub const OTELCOL: &str = "/var/cache/probetop/otelcol";

/// Builds the OpenTelemetry Collector that `--otlp`'s test pushes to (xtask/otelcol:
/// the v0.165.0 OTLP receiver and debug exporter) into a directory named by a hash of
/// its sources, kept across checkouts, so it is built again only when they change or
/// it is missing; [`OTELCOL`] links to it. A first build downloads the modules from the
/// Go module proxy and takes minutes.
pub fn setup_otelcol(ctx: &Ctx) -> Result<()> {
    let src = ctx.root.join("xtask/otelcol");
    // FNV-1a over the files that decide the binary.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for name in ["main.go", "go.mod", "go.sum"] {
        let bytes =
            fs::read(src.join(name)).with_context(|| format!("reading xtask/otelcol/{name}"))?;
        for byte in bytes.iter().chain(name.as_bytes()) {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let dir = Path::new(OTELCOL).with_file_name(format!("otelcol-{hash:016x}"));
    let binary = dir.join("otelcol");
    if !binary.is_file() {
        println!(
            "setup: OpenTelemetry Collector: building into {}",
            dir.display()
        );
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let go = if Path::new("/usr/local/go/bin/go").is_file() {
            PathBuf::from("/usr/local/go/bin/go")
        } else {
            PathBuf::from("go")
        };
        let partial = dir.join("otelcol.partial");
        run(Command::new(go)
            .current_dir(&src)
            .args(["build", "-trimpath", "-o"])
            .arg(&partial)
            .arg("."))?;
        fs::rename(&partial, &binary).with_context(|| format!("moving {}", binary.display()))?;
    }
    let link = Path::new(OTELCOL);
    if fs::read_link(link).ok().as_deref() != Some(binary.as_path()) {
        let _ = fs::remove_file(link);
        std::os::unix::fs::symlink(&binary, link)
            .with_context(|| format!("linking {}", link.display()))?;
    }
    println!("setup: OpenTelemetry Collector: ok ({})", binary.display());
    Ok(())
}

pub fn setup_nightly(ctx: &Ctx) -> Result<()> {
    let out = ctx.query_ok(Command::new("rustup").args(["toolchain", "list"]))?;
    if out.lines().any(|l| l.starts_with("nightly")) {
        println!("setup: nightly toolchain: ok");
        return Ok(());
    }
    // Not installed here on purpose: the machine pins which nightly it ships, and
    // RUSTUP_AUTO_INSTALL=0 means nothing should pull a toolchain behind our back.
    bail!(
        "the nightly toolchain is missing (`rustup toolchain list` has no nightly); the eBPF \
         programs need it. Install it with `rustup toolchain install nightly --profile minimal \
         --component rust-src`, then rerun `cargo xtask setup`"
    )
}

/// `cargo xtask lint` runs rustfmt and clippy of the workspace's toolchain (stable here)
/// on the host crates; a minimal-profile toolchain lacks both.
pub fn setup_stable_components(ctx: &Ctx) -> Result<()> {
    setup_components(ctx, None, &["rustfmt", "clippy"])
}

/// Nightly builds the eBPF crate with -Z build-std=core (compiled from rust-src) and
/// lints it with its clippy.
pub fn setup_nightly_components(ctx: &Ctx) -> Result<()> {
    setup_components(ctx, Some("nightly"), &["rust-src", "clippy"])
}

/// Adds the `components` a toolchain (None: the one active at the root) lacks.
pub fn setup_components(ctx: &Ctx, toolchain: Option<&str>, components: &[&str]) -> Result<()> {
    let toolchain_args = |cmd: &mut Command| {
        if let Some(t) = toolchain {
            cmd.args(["--toolchain", t]);
        }
        cmd.current_dir(&ctx.root);
    };
    let mut list = Command::new("rustup");
    list.args(["component", "list", "--installed"]);
    toolchain_args(&mut list);
    let installed = ctx.query_ok(&mut list)?;
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !installed.lines().any(|l| has_component(l, c)))
        .collect();
    let item = format!(
        "{} {}",
        toolchain.unwrap_or("default toolchain"),
        components.join(", ")
    );
    if missing.is_empty() {
        println!("setup: {item}: ok");
        return Ok(());
    }
    println!("setup: {item}: installing {}", missing.join(" "));
    let mut add = Command::new("rustup");
    add.args(["component", "add"]).args(&missing);
    toolchain_args(&mut add);
    run(&mut add)
}

/// `rustup component list` prints `rust-src` but `clippy-x86_64-unknown-linux-gnu`.
pub fn has_component(line: &str, component: &str) -> bool {
    let line = line.trim();
    line == component
        || line
            .strip_prefix(component)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// bpf-linker links the eBPF object with LLVM, and must use the same LLVM major as the
/// nightly rustc that emits the bitcode. It is built against nightly's own libLLVM
/// (no system LLVM needed), and a marker records which major it was built for, so a
/// nightly with a new LLVM triggers a rebuild.
pub fn setup_bpf_linker(ctx: &Ctx) -> Result<()> {
    let verbose =
        ctx.query_ok(Command::new("rustc").args(["+nightly", "--version", "--verbose"]))?;
    let major = llvm_major(&verbose)?;
    let cargo_home = cargo_home()?;
    let marker = cargo_home.join("probetop/bpf-linker.llvm");

    let marked = fs::read_to_string(&marker).is_ok_and(|m| m.trim() == major);
    if marked && bpf_linker_runs(ctx)? {
        println!("setup: bpf-linker (LLVM {major}): ok");
        return Ok(());
    }
    println!("setup: bpf-linker (LLVM {major}): building against nightly's libLLVM (~3 min)");

    // LLVM_PREFIX/lib must hold libLLVM.so for bpf-linker's build (llvm-sys links
    // -lLLVM) and the soname file itself: the binary's rpath points there, and without it
    // bpf-linker only runs where rustup puts nightly's lib/ on LD_LIBRARY_PATH.
    let prefix = cargo_home.join(format!("probetop/llvm-{major}"));
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let sysroot = ctx.query_ok(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let so = nightly_libllvm(&Path::new(sysroot.trim()).join("lib"))?;
    let so_name = so
        .file_name()
        .context("libLLVM path has no file name")?
        .to_owned();
    for link in [lib.join("libLLVM.so"), lib.join(&so_name)] {
        replace_symlink(&so, &link)?;
    }

    let mut install = Command::new("cargo");
    install
        .args([
            "+nightly",
            "install",
            "bpf-linker",
            "--locked",
            "--no-default-features",
            "--features",
        ])
        .arg(format!("llvm-{major}"))
        .arg("--force")
        .env("LLVM_PREFIX", &prefix)
        // cargo install would build in (and leave its objects behind in) a target dir
        // set for the workspace; without one it uses a temporary directory.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .stdin(Stdio::null());
    run(&mut install)?;

    ensure!(
        bpf_linker_runs(ctx)?,
        "bpf-linker was installed into {} but `bpf-linker --version` does not run: is {} on \
         PATH?",
        cargo_home.join("bin").display(),
        cargo_home.join("bin").display()
    );
    fs::write(&marker, format!("{major}\n"))
        .with_context(|| format!("writing {}", marker.display()))?;
    println!("setup: bpf-linker (LLVM {major}): installed");
    Ok(())
}

/// "LLVM version: 22.1.4" in `rustc -vV` -> "22".
pub fn llvm_major(rustc_verbose: &str) -> Result<String> {
    let version = rustc_verbose
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .context("`rustc +nightly --version --verbose` prints no LLVM version")?
        .trim();
    let major = version.split('.').next().unwrap_or_default();
    ensure!(
        !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()),
        "cannot read the LLVM major from {version:?}"
    );
    Ok(major.to_owned())
}

/// The real libLLVM of a toolchain: `libLLVM.so.<ver>-rust-...` (its
/// `libLLVM-<major>-rust-...so` sibling is not the soname bpf-linker ends up needing).
pub fn nightly_libllvm(lib: &Path) -> Result<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(lib).with_context(|| format!("listing {}", lib.display()))? {
        let entry = entry.with_context(|| format!("listing {}", lib.display()))?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("libLLVM.so.")
        {
            found.push(entry.path());
        }
    }
    match found.as_slice() {
        [so] => Ok(so.clone()),
        [] => bail!("no libLLVM.so.* in {}", lib.display()),
        _ => bail!("several libLLVM.so.* in {}: {found:?}", lib.display()),
    }
}

pub fn replace_symlink(target: &Path, link: &Path) -> Result<()> {
    if link.symlink_metadata().is_ok() {
        fs::remove_file(link).with_context(|| format!("removing {}", link.display()))?;
    }
    println!("+ ln -s {} {}", target.display(), link.display());
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} -> {}", link.display(), target.display()))
}

/// Whether `bpf-linker --version` runs from PATH the way rustc will run it. Without
/// LD_LIBRARY_PATH: under `cargo +nightly` rustup puts nightly's lib/ there, which would
/// hide a missing or stale libLLVM link in the prefix.
pub fn bpf_linker_runs(ctx: &Ctx) -> Result<bool> {
    let mut cmd = Command::new("bpf-linker");
    cmd.arg("--version").env_remove("LD_LIBRARY_PATH");
    ctx.echo_query(&cmd);
    Ok(cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success()))
}

pub fn cargo_home() -> Result<PathBuf> {
    if let Some(home) = env::var_os("CARGO_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    let home = env::var_os("HOME").context("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}
