//! Builds the eBPF programs (probe-ebpf) with aya-build and leaves the object in OUT_DIR,
//! where `attach` embeds it, so `cargo build --release` at the root yields one binary.
//!
//! With `AYA_BUILD_SKIP=1` (aya-build's own switch) the eBPF build is skipped and an empty
//! object is embedded instead: the library then still builds for what never attaches
//! (the fuzz targets, whose sanitizer builds would otherwise spend minutes on it), and
//! `Attachment::load` refuses the empty object with a clear error.
use anyhow::{Context as _, anyhow};

/// The file name `attach` embeds from OUT_DIR.
const OBJECT: &str = "probetop-ebpf";

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "probe-ebpf")
        .ok_or_else(|| anyhow!("probe-ebpf is not in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("probe-ebpf's manifest has no parent directory"))?
        .to_string();
    let package = aya_build::Package {
        name: "probe-ebpf",
        root_dir: &root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([package], aya_build::Toolchain::default())
        .context("building the eBPF programs failed; `cargo xtask setup` installs what they need (nightly rust-src, bpf-linker)")?;
    // aya-build emits rerun-if-env-changed for the switch and, when skipping, leaves
    // OUT_DIR without an object; same test as aya-build's.
    let skipped = std::env::var_os("AYA_BUILD_SKIP")
        .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skipped {
        let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?;
        let path = std::path::Path::new(&out_dir).join(OBJECT);
        std::fs::write(&path, []).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
