//! Builds the eBPF programs (probe-ebpf) with aya-build and leaves the object in OUT_DIR,
//! where `attach` embeds it, so `cargo build --release` at the root yields one binary.
use anyhow::{Context as _, anyhow};

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
        .context("building the eBPF programs failed; `cargo xtask setup` installs what they need (nightly rust-src, bpf-linker)")
}
