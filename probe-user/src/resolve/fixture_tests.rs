//! Resolution checked against real fixtures (fixtures/build, `cargo xtask fixtures`),
//! and against binutils (`readelf`) run on the same files.
//!
//! The fixtures are located through `PROBETOP_FIXTURES` (default `<repo>/fixtures/build`).
//! The tests that read them are `#[ignore = "needs the fixtures ..."]`, as the project's
//! test policy asks (docs/architecture.md, "Tests"): a plain `cargo test` names them as
//! skipped, and `cargo xtask test` runs them with `--include-ignored`, where a missing
//! fixture fails the test, never skips it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use super::debuginfo::{DebugSearch, SymbolSource};
use super::elf::ElfImage;
use super::list::{ListSource, ListedKind, Listing, list_with};
use super::symbols::SymbolTable;
use super::usdt_args::{ArgLocation, Displacement, Reg, RegRef, UsdtArg, parse_args};
use super::*;
use crate::spec::{ProbeKind, ProbeSpec};
use crate::sys::maps::{self, FileId};
use crate::target::Target;

// ---------------------------------------------------------------------------------------
// Fixtures and binutils

fn fixtures_root() -> PathBuf {
    let root = std::env::var_os("PROBETOP_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/build"));
    // Processes' maps show canonical paths: compare like with like.
    std::fs::canonicalize(&root).unwrap_or(root)
}

fn fixture(relative: &str) -> PathBuf {
    let path = fixtures_root().join(relative);
    assert!(
        path.exists(),
        "fixture {} is missing: run cargo xtask fixtures (or make -C fixtures)",
        path.display()
    );
    path
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hex(s: &str) -> u64 {
    let s = s.trim().trim_end_matches(',');
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[derive(Debug, Clone)]
struct RSym {
    name: String,
    value: u64,
    size: u64,
    kind: String,
    bind: String,
}

/// `readelf -sW`: defined symbols of one table (`.symtab` or `.dynsym`).
fn readelf_symbols(path: &Path, table: &str) -> Vec<RSym> {
    let text = run("readelf", &["-sW", &path.to_string_lossy()]);
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("Symbol table") {
            in_table = line.contains(&format!("'{table}'"));
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if !in_table || f.len() < 8 || f[0] == "Num:" || !f[0].ends_with(':') || f[6] == "UND" {
            continue;
        }
        out.push(RSym {
            name: f[7].split('@').next().unwrap_or("").to_string(),
            value: hex(f[1]),
            size: f[2].parse().unwrap_or(0),
            kind: f[3].to_string(),
            bind: f[4].to_string(),
        });
    }
    out
}

fn readelf_function(path: &Path, name: &str) -> RSym {
    readelf_symbols(path, ".symtab")
        .into_iter()
        .chain(readelf_symbols(path, ".dynsym"))
        .find(|s| s.name == name && (s.kind == "FUNC" || s.kind == "IFUNC"))
        .unwrap_or_else(|| panic!("readelf: no function {name} in {}", path.display()))
}

#[derive(Debug)]
struct RSeg {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    exec: bool,
}

/// `readelf -lW`: the PT_LOAD segments.
fn readelf_segments(path: &Path) -> Vec<RSeg> {
    run("readelf", &["-lW", &path.to_string_lossy()])
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            RSeg {
                offset: hex(f[1]),
                vaddr: hex(f[2]),
                filesz: hex(f[4]),
                exec: f[6..].iter().any(|x| x.contains('E')),
            }
        })
        .collect()
}

fn expected_offset(segs: &[RSeg], vaddr: u64, exec: bool) -> u64 {
    let s = segs
        .iter()
        .find(|s| s.exec == exec && vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz)
        .unwrap_or_else(|| panic!("no segment for {vaddr:#x}"));
    vaddr - s.vaddr + s.offset
}

#[derive(Debug)]
struct RNote {
    provider: String,
    name: String,
    location: u64,
    base: u64,
    semaphore: u64,
    args: String,
}

/// `readelf -n`: the stapsdt notes.
fn readelf_notes(path: &Path) -> Vec<RNote> {
    let text = run("readelf", &["-nW", &path.to_string_lossy()]);
    let mut out = Vec::new();
    let mut cur: Option<RNote> = None;
    for line in text.lines().map(str::trim) {
        if let Some((_, p)) = line.split_once("Provider: ") {
            cur = Some(RNote {
                provider: p.to_string(),
                name: String::new(),
                location: 0,
                base: 0,
                semaphore: 0,
                args: String::new(),
            });
        } else if let (Some(n), Some(c)) = (line.strip_prefix("Name: "), cur.as_mut()) {
            c.name = n.to_string();
        } else if let (Some(l), Some(c)) = (line.strip_prefix("Location: "), cur.as_mut()) {
            let f: Vec<&str> = l.split_whitespace().collect();
            c.location = hex(f[0]);
            c.base = hex(f[2]);
            c.semaphore = hex(f[4]);
        } else if let Some(a) = line.strip_prefix("Arguments:")
            && let Some(mut c) = cur.take()
        {
            c.args = a.trim().to_string();
            out.push(c);
        }
    }
    out
}

fn section_address(path: &Path, name: &str) -> Option<u64> {
    run("readelf", &["-SW", &path.to_string_lossy()])
        .lines()
        .find_map(|l| {
            let l = l.split_once(']')?.1;
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&name)).then(|| hex(f[2]))
        })
}

fn section_range(path: &Path, name: &str) -> (usize, usize) {
    run("readelf", &["-SW", &path.to_string_lossy()])
        .lines()
        .find_map(|l| {
            let l = l.split_once(']')?.1;
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&name)).then(|| (hex(f[3]) as usize, hex(f[4]) as usize))
        })
        .unwrap_or_else(|| panic!("no section {name}"))
}

// ---------------------------------------------------------------------------------------
// Helpers

fn spec(text: &str) -> ProbeSpec {
    ProbeSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Options that never look in the machine's /usr/lib/debug: results depend only on
/// the fixtures.
fn opts() -> ResolveOptions {
    ResolveOptions {
        max_probes: DEFAULT_MAX_PROBES,
        debug: DebugSearch { roots: Vec::new() },
        debuginfod: Default::default(),
        force: false,
    }
}

fn resolve_ok(path: &Path, text: &str) -> Vec<ProbePoint> {
    resolve_file(path, &spec(text), &opts())
        .unwrap_or_else(|e| panic!("{text} in {}: {e}", path.display()))
}

fn names(points: &[ProbePoint]) -> Vec<String> {
    let mut n: Vec<String> = points.iter().map(|p| p.name.clone()).collect();
    n.sort();
    n
}

fn listing(path: &Path, o: &ResolveOptions) -> Listing {
    list_with(&ListSource::Path(path.to_path_buf()), None, o)
        .unwrap_or_else(|e| panic!("list {}: {e}", path.display()))
}

/// Preferred function name -> (address, file offset), from `list`.
fn functions_of(path: &Path, o: &ResolveOptions) -> BTreeMap<String, (u64, u64)> {
    listing(path, o)
        .points
        .into_iter()
        .filter(|p| p.kind == ListedKind::Uprobe)
        .map(|p| (p.name, (p.address, p.file_offset)))
        .collect()
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("probetop-resolve-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fixture process waiting on stdin, killed on drop.
struct Running {
    child: Child,
    _stdin: Option<ChildStdin>,
    pid: u32,
}

impl Running {
    fn start(program: &str, args: &[&str]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("ready line");
        let pid = line
            .trim()
            .strip_prefix("ready pid=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{program}: expected `ready pid=N`, got {line:?}"));
        Running {
            child,
            _stdin: stdin,
            pid,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const C_BINARIES: [&str; 3] = ["c/probes", "c/probes-nopie", "c/probes-O0"];

// ---------------------------------------------------------------------------------------
// C: functions

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn c_exact_functions_agree_with_readelf() {
    for bin in C_BINARIES {
        let path = fixture(bin);
        let segs = readelf_segments(&path);
        for name in [
            "probe_add",
            "probe_leaf",
            "probe_static_helper",
            "usdt_forms",
            "main",
        ] {
            for kind in ["uprobe", "uretprobe"] {
                let points = resolve_ok(&path, &format!("{kind}:{name}"));
                assert_eq!(points.len(), 1, "{bin} {name}: {points:?}");
                let p = &points[0];
                let want = readelf_function(&path, name);
                assert_eq!(
                    p.kind,
                    if kind == "uprobe" {
                        ProbeKind::Uprobe
                    } else {
                        ProbeKind::Uretprobe
                    }
                );
                assert_eq!((p.name.as_str(), p.symbol.as_str()), (name, name));
                assert_eq!(p.address, want.value, "{bin} {name}");
                assert_eq!(
                    p.file_offset,
                    expected_offset(&segs, want.value, true),
                    "{bin} {name}"
                );
                assert_eq!((&p.object, &p.attach_path), (&path, &path));
                assert_eq!((p.load_bias, &p.usdt), (None, &None));
            }
        }
    }
    // Non-PIE: linked at 0x400000, so addresses and file offsets differ.
    let p = &resolve_ok(&fixture("c/probes-nopie"), "uprobe:probe_add")[0];
    assert!(p.address >= 0x400000 && p.file_offset < p.address, "{p:?}");
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn c_every_function_symbol_is_listed_with_readelfs_offset() {
    for bin in C_BINARIES {
        let path = fixture(bin);
        let segs = readelf_segments(&path);
        let mut want: BTreeSet<(u64, u64)> = BTreeSet::new();
        for s in readelf_symbols(&path, ".symtab")
            .into_iter()
            .chain(readelf_symbols(&path, ".dynsym"))
        {
            if (s.kind == "FUNC" || s.kind == "IFUNC") && s.value != 0 {
                want.insert((s.value, expected_offset(&segs, s.value, true)));
            }
        }
        let got: BTreeSet<(u64, u64)> = listing(&path, &opts())
            .points
            .iter()
            .filter(|p| p.kind == ListedKind::Uprobe)
            .map(|p| (p.address, p.file_offset))
            .collect();
        assert_eq!(got, want, "{bin}");
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn c_aliases_are_one_point_with_a_stable_name() {
    let path = fixture("c/probes");
    let impl_addr = readelf_function(&path, "probe_alias_impl").value;
    for alias in ["probe_alias_impl", "probe_alias_long_name", "pa_weak"] {
        let points = resolve_ok(&path, &format!("uprobe:{alias}"));
        assert_eq!(points.len(), 1, "{alias}");
        // Named as written, with the preferred name beside it when that differs.
        assert_eq!(points[0].name, alias);
        let preferred = (alias != "probe_alias_impl").then(|| "probe_alias_impl".to_string());
        assert_eq!(points[0].resolved, preferred, "{alias}");
        assert_eq!(points[0].address, impl_addr);
    }
    // A pattern names the point by its preferred name.
    assert_eq!(
        resolve_ok(&path, "uprobe:*alias_long*")[0].name,
        "probe_alias_impl"
    );
    assert_eq!(resolve_ok(&path, "uprobe:*alias*").len(), 1);
    let listed = listing(&path, &opts());
    let p = listed
        .points
        .iter()
        .find(|p| p.name == "probe_alias_impl")
        .expect("listed");
    assert_eq!(p.aliases, vec!["probe_alias_long_name", "pa_weak"]);
    // weak symbol alone
    let weak = readelf_symbols(&path, ".symtab")
        .into_iter()
        .find(|s| s.name == "pa_weak")
        .expect("pa_weak");
    assert_eq!((weak.bind.as_str(), weak.value), ("WEAK", impl_addr));
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn c_ifunc_and_static_functions() {
    let path = fixture("c/probes");
    let ifunc = readelf_function(&path, "probe_ifunc");
    assert_eq!(ifunc.kind, "IFUNC");
    // In a file there is no resolver's choice to read: the IFUNC stays at its resolver.
    // In a running process it goes to the implementation (tests/probe_points.rs).
    for name in ["probe_ifunc", "resolve_probe_ifunc"] {
        let points = resolve_ok(&path, &format!("uprobe:{name}"));
        assert_eq!(points.len(), 1);
        assert_eq!(
            (points[0].name.as_str(), points[0].address),
            (name, ifunc.value)
        );
    }
    let local = readelf_function(&path, "probe_static_helper");
    assert_eq!(local.bind, "LOCAL");
    assert_eq!(
        resolve_ok(&path, "uprobe:probe_static_helper")[0].address,
        local.value
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn c_globs() {
    let path = fixture("c/probes");
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:probe_*")),
        vec![
            "probe_add",
            "probe_alias_impl",
            "probe_ifunc",
            "probe_leaf",
            "probe_static_helper"
        ]
    );
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:probe_[al]*")),
        vec!["probe_add", "probe_alias_impl", "probe_leaf"]
    );
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:probe_?dd")),
        vec!["probe_add"]
    );
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:usdt_*")),
        vec!["usdt_compiled", "usdt_forms", "usdt_with_semaphore"]
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn unknown_names_suggest_the_closest() {
    let path = fixture("c/probes");
    for (wanted, suggested) in [
        ("probe_ad", "probe_add"),
        ("prob_leaf", "probe_leaf"),
        ("PROBE_LEAF", "probe_leaf"),
        ("static_helper", "probe_static_helper"),
        ("probe_leaf*x", "probe_leaf"),
    ] {
        let err =
            resolve_file(&path, &spec(&format!("uprobe:{wanted}")), &opts()).expect_err(wanted);
        let ResolveError::SymbolNotFound { hint, .. } = &err else {
            panic!("{wanted}: {err}");
        };
        assert!(hint.contains(suggested), "{wanted}: {err}");
        let n = hint.matches(", ").count() + 1;
        assert!(n <= 5, "{err}");
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn too_many_probes_says_how_many_and_how_to_raise() {
    let path = fixture("c/probes");
    let all = resolve_ok(&path, "uprobe:*").len();
    assert!(all > 10);
    let o = ResolveOptions {
        max_probes: 3,
        ..opts()
    };
    let err = resolve_file(&path, &spec("uprobe:*"), &o).expect_err("cap");
    assert!(
        matches!(err, ResolveError::TooManyProbes { count, max: 3, .. } if count == all),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("matches {all} probe points")) && text.contains("--max-probes"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------
// Separate debug info

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn debuglink_copy_resolves_like_the_unstripped_binary() {
    let full = fixture("c/probes");
    let stripped = fixture("c/probes-debuglink");
    assert!(
        readelf_symbols(&stripped, ".symtab").is_empty(),
        "not stripped"
    );
    let want = functions_of(&full, &opts());
    assert_eq!(functions_of(&stripped, &opts()), want);
    let l = listing(&stripped, &opts());
    assert_eq!(
        l.objects[0].symbols,
        SymbolSource::DebugLink(fixture("c/probes-debuglink.debug"))
    );
    let a = resolve_ok(&full, "uprobe:probe_static_helper");
    let b = resolve_ok(&stripped, "uprobe:probe_static_helper");
    assert_eq!(
        (a[0].address, a[0].file_offset),
        (b[0].address, b[0].file_offset)
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn build_id_debug_file_is_found() {
    let stripped = fixture("c/probes-debuglink");
    let text = run("readelf", &["-nW", &stripped.to_string_lossy()]);
    let id = text
        .lines()
        .find_map(|l| l.split_once("Build ID: ").map(|(_, id)| id.trim()))
        .expect("build id")
        .to_string();
    let root = TempDir::new("buildid");
    let dir = root.0.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let debug = dir.join(format!("{}.debug", &id[2..]));
    std::fs::copy(fixture("c/probes-debuglink.debug"), &debug).expect("copy debug");
    // The stripped binary alone in a directory: its debuglink finds nothing there.
    let alone = TempDir::new("buildid-bin");
    let bin = alone.0.join("probes-debuglink");
    std::fs::copy(&stripped, &bin).expect("copy bin");
    let o = ResolveOptions {
        debug: DebugSearch {
            roots: vec![root.0.clone()],
        },
        ..opts()
    };
    assert_eq!(
        listing(&bin, &o).objects[0].symbols,
        SymbolSource::BuildId(debug)
    );
    assert_eq!(
        functions_of(&bin, &o),
        functions_of(&fixture("c/probes"), &opts())
    );
    // Without the build-id tree: nothing but .dynsym.
    assert_eq!(
        listing(&bin, &opts()).objects[0].symbols,
        SymbolSource::Dynsym
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn debuglink_with_a_bad_crc_is_refused() {
    let dir = TempDir::new("badcrc");
    let bin = dir.0.join("probes-debuglink");
    std::fs::copy(fixture("c/probes-debuglink"), &bin).expect("copy");
    let mut debug = std::fs::read(fixture("c/probes-debuglink.debug")).expect("read");
    let last = debug.len() - 1;
    debug[last] ^= 0xff;
    std::fs::write(dir.0.join("probes-debuglink.debug"), debug).expect("write");
    assert_eq!(
        listing(&bin, &opts()).objects[0].symbols,
        SymbolSource::Dynsym
    );
    let err = resolve_file(&bin, &spec("uprobe:probe_static_helper"), &opts()).expect_err("gone");
    assert!(err.to_string().contains("stripped"), "{err}");
    // probe_add is exported (.dynsym), so it still resolves, to the same place.
    let a = resolve_ok(&bin, "uprobe:probe_add");
    let b = resolve_ok(&fixture("c/probes"), "uprobe:probe_add");
    assert_eq!(
        (a[0].address, a[0].file_offset),
        (b[0].address, b[0].file_offset)
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn minidebuginfo_copy_resolves_like_the_unstripped_binary() {
    let mini = fixture("c/probes-minidebug");
    assert!(readelf_symbols(&mini, ".symtab").is_empty(), "not stripped");
    assert!(section_address(&mini, ".gnu_debugdata").is_some());
    let l = listing(&mini, &opts());
    assert_eq!(l.objects[0].symbols, SymbolSource::MiniDebugInfo);
    assert_eq!(
        functions_of(&mini, &opts()),
        functions_of(&fixture("c/probes"), &opts())
    );
    for name in ["probe_add", "probe_static_helper", "probe_ifunc", "main"] {
        let a = resolve_ok(&mini, &format!("uprobe:{name}"));
        let b = resolve_ok(&fixture("c/probes"), &format!("uprobe:{name}"));
        assert_eq!(
            (a[0].address, a[0].file_offset),
            (b[0].address, b[0].file_offset),
            "{name}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// USDT

const USDT_BINARIES: [&str; 6] = [
    "c/probes",
    "c/probes-nopie",
    "c/probes-O0",
    "c/probes-debuglink",
    "c/probes-minidebug",
    "python/libpyprobes.so",
];

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn usdt_points_agree_with_readelf() {
    for bin in USDT_BINARIES {
        let path = fixture(bin);
        let notes = readelf_notes(&path);
        assert!(notes.len() >= 2, "{bin}: {notes:?}");
        let segs = readelf_segments(&path);
        let base = section_address(&path, ".stapsdt.base").unwrap_or(0);
        let l = listing(&path, &opts());
        assert!(l.warnings.is_empty(), "{bin}: {:?}", l.warnings);
        let usdt: Vec<_> = l
            .points
            .iter()
            .filter(|p| p.kind == ListedKind::Usdt)
            .collect();
        assert_eq!(usdt.len(), notes.len(), "{bin}");
        for n in &notes {
            let address = if base != 0 && n.base != 0 {
                n.location + base - n.base
            } else {
                n.location
            };
            let full = format!("{}:{}", n.provider, n.name);
            let p = usdt
                .iter()
                .find(|p| p.name == full && p.address == address)
                .unwrap_or_else(|| panic!("{bin}: {full} at {address:#x} not listed"));
            assert_eq!(
                p.file_offset,
                expected_offset(&segs, address, true),
                "{bin} {full}"
            );
            assert_eq!(p.args.as_deref(), Some(n.args.as_str()));
            if n.semaphore == 0 {
                assert_eq!((p.semaphore_address, p.semaphore_offset), (None, None));
            } else {
                assert_eq!(p.semaphore_address, Some(n.semaphore));
                assert_eq!(
                    p.semaphore_offset,
                    Some(expected_offset(&segs, n.semaphore, false)),
                    "{bin} {full}"
                );
            }
            parse_args(&n.args).unwrap_or_else(|e| panic!("{bin} {full}: {e}"));
        }
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn usdt_specs_with_providers_and_globs() {
    let path = fixture("c/probes");
    let one = resolve_ok(&path, "usdt:fixture:tick");
    assert_eq!(names(&one), vec!["fixture:tick"]);
    let site = one[0].usdt.as_ref().expect("usdt");
    assert_eq!(
        (site.provider.as_str(), site.name.as_str()),
        ("fixture", "tick")
    );
    assert_eq!(site.semaphore_offset, None);
    assert_eq!(
        names(&resolve_ok(&path, "usdt:fixture:forms_*")),
        vec![
            "fixture:forms_mem",
            "fixture:forms_regs",
            "fixture:forms_rip"
        ]
    );
    let sema = resolve_ok(&path, "usdt:fixture_sema:*");
    assert_eq!(
        names(&sema),
        vec!["fixture_sema:tick", "fixture_sema:twice"]
    );
    assert!(sema.iter().all(|p| {
        p.usdt
            .as_ref()
            .is_some_and(|u| u.semaphore_offset.is_some())
    }));
    // Without a provider, every provider's `tick`.
    assert_eq!(
        names(&resolve_ok(&path, "usdt:tick")),
        vec!["fixture:tick", "fixture_sema:tick"]
    );
    assert_eq!(names(&resolve_ok(&path, "usdt:fixture*:t*")).len(), 3);
    let err = resolve_file(&path, &spec("usdt:fixture:tikc"), &opts()).expect_err("typo");
    assert!(
        matches!(&err, ResolveError::UsdtNotFound { hint, .. } if hint.contains("fixture:tick")),
        "{err}"
    );
    let o = ResolveOptions {
        max_probes: 2,
        ..opts()
    };
    assert!(matches!(
        resolve_file(&path, &spec("usdt:*"), &o),
        Err(ResolveError::TooManyProbes { max: 2, .. })
    ));
}

fn r(name: &str) -> RegRef {
    RegRef::from_name(name).unwrap_or_else(|| panic!("{name}"))
}

fn a(size: u8, signed: bool, location: ArgLocation) -> UsdtArg {
    UsdtArg {
        size,
        signed,
        location,
    }
}

fn mem(base: Option<&str>, index: Option<&str>, scale: u8, offset: i64) -> ArgLocation {
    ArgLocation::Memory {
        base: base.map(r),
        index: index.map(r),
        scale,
        disp: Displacement {
            symbol: None,
            offset,
        },
    }
}

fn rip(sym: &str, offset: i64) -> ArgLocation {
    ArgLocation::RipRelative {
        disp: Displacement {
            symbol: Some(sym.into()),
            offset,
        },
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn usdt_every_argument_form_in_the_fixture() {
    let path = fixture("c/probes");
    let args = |probe: &str| {
        let p = resolve_ok(&path, &format!("usdt:fixture:{probe}"));
        assert_eq!(p.len(), 1);
        p[0].usdt.clone().expect("usdt")
    };
    let reg = |n: &str| ArgLocation::Register { reg: r(n) };
    assert_eq!(
        args("forms_regs").args,
        Ok(vec![
            a(4, true, ArgLocation::Constant { value: 5 }),
            a(8, false, reg("rdi")),
            a(4, true, reg("edi")),
            a(2, false, reg("di")),
            a(1, false, reg("dil")),
            a(8, false, reg("r8")),
            a(4, true, reg("r8d")),
            a(2, false, reg("r8w")),
            a(1, false, reg("r8b")),
            a(1, true, reg("ah")),
            a(1, false, reg("dh")),
            a(8, false, reg("rsp")),
        ])
    );
    assert_eq!(
        r("ah"),
        RegRef {
            reg: Reg::Rax,
            width: 1,
            shift: 8
        }
    );
    assert_eq!(r("r8b").pt_regs_offset(), 72);
    assert_eq!(
        args("forms_mem").args,
        Ok(vec![
            a(8, false, mem(Some("rbp"), None, 1, -16)),
            a(8, false, mem(Some("rax"), Some("rdx"), 8, 0)),
            a(4, true, mem(Some("rbx"), Some("rcx"), 4, 8)),
            a(4, false, mem(None, Some("rcx"), 4, 0)),
            a(8, true, mem(Some("rsp"), None, 1, 0)),
        ])
    );
    let site = args("forms_rip");
    assert_eq!(
        site.args,
        Ok(vec![
            a(8, false, rip("fixture_table", 16)),
            a(4, false, rip("fixture_counter", 0)),
            a(8, false, rip("fixture_table", 16)),
        ])
    );
    let symtab = readelf_symbols(&path, ".symtab");
    let value = |n: &str| symtab.iter().find(|s| s.name == n).expect(n).value;
    let table = value("fixture_table");
    assert_eq!(
        site.arg_symbols,
        BTreeMap::from([
            ("fixture_counter".to_string(), value("fixture_counter")),
            ("fixture_table".to_string(), table),
        ])
    );
    let bias = 0x5555_0000_0000;
    assert_eq!(
        site.arg_static_address(0, bias),
        Ok(Some(bias + table + 16))
    );
    assert_eq!(
        site.arg_static_address(2, bias),
        Ok(Some(bias + table + 16))
    );
    assert_eq!(
        site.arg_static_address(1, 0),
        Ok(Some(value("fixture_counter")))
    );

    // gcc -O2's own %rip-relative arguments: globals and a function-local static.
    let g = args("globals");
    let parsed = g.args.clone().expect("globals parse");
    assert_eq!(parsed[0], a(4, true, rip("fixture_counter", 0)));
    assert_eq!(parsed[1], a(8, true, rip("fixture_table", 16)));
    assert_eq!(parsed[2], a(4, true, rip("local_static.0", 0)));
    assert_eq!(
        g.arg_symbols.get("local_static.0"),
        Some(&value("local_static.0"))
    );
    assert_eq!(
        g.arg_static_address(2, 0),
        Ok(Some(value("local_static.0")))
    );
    // And its indexed operands.
    let idx = args("indexed").args.expect("indexed parse");
    assert!(
        idx.iter().all(|x| matches!(
            x.location,
            ArgLocation::Memory {
                base: Some(_),
                index: Some(_),
                scale: 8,
                ..
            }
        )),
        "{idx:?}"
    );
    // -O0 keeps arguments in the frame.
    let o0 = resolve_ok(&fixture("c/probes-O0"), "usdt:fixture:tick");
    let o0 = o0[0]
        .usdt
        .as_ref()
        .expect("usdt")
        .args
        .clone()
        .expect("parse");
    assert!(
        o0.iter().all(|x| matches!(
            x.location,
            ArgLocation::Memory {
                base: Some(RegRef { reg: Reg::Rbp, .. }),
                index: None,
                ..
            }
        )),
        "{o0:?}"
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn corrupted_notes_and_truncated_files_never_panic() {
    let path = fixture("c/probes");
    let data = std::fs::read(&path).expect("read");
    let (off, size) = section_range(&path, ".note.stapsdt");
    let dir = TempDir::new("garbage");

    // 1. A descsz past the end of the section: a truncated note, reported.
    let mut bad = data.clone();
    bad[off + 4..off + 8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let file = dir.0.join("bad-descsz");
    std::fs::write(&file, &bad).expect("write");
    let l = listing(&file, &opts());
    assert!(
        l.warnings.iter().any(|w| w.contains("note")),
        "{:?}",
        l.warnings
    );
    assert!(l.points.iter().all(|p| p.kind == ListedKind::Uprobe));

    // 2. NULs of every string replaced: unterminated notes, reported one by one.
    let mut bad = data.clone();
    for b in &mut bad[off..off + size] {
        if *b == 0 {
            *b = b'A';
        }
    }
    let file = dir.0.join("no-nuls");
    std::fs::write(&file, &bad).expect("write");
    let l = listing(&file, &opts());
    assert!(!l.warnings.is_empty());

    // 3. Pseudo-random bytes over the note section and the ELF headers.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..300 {
        let mut bad = data.clone();
        for _ in 0..8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = if seed.is_multiple_of(3) {
                (seed >> 8) as usize % 256
            } else {
                off + (seed >> 8) as usize % size
            };
            bad[at] = (seed >> 32) as u8;
        }
        if let Ok(image) = ElfImage::parse(&bad) {
            let _ = usdt::probes(&image);
            let _ = SymbolTable::build(&image.symbols, &image);
        }
    }

    // 4. Every truncation length (in steps): errors or partial results, no panic.
    for len in (0..data.len()).step_by(61) {
        if let Ok(image) = ElfImage::parse(&data[..len]) {
            let _ = usdt::probes(&image);
            let _ = SymbolTable::build(&image.symbols, &image);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Live processes

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn live_c_process_functions_usdt_and_libc() {
    for (bin, pie) in [("c/probes", true), ("c/probes-nopie", false)] {
        let proc = Running::start(&fixture(bin).to_string_lossy(), &["--wait-stdin"]);
        let target = Target::open(proc.pid).expect("target");
        let points = resolve(&target, &spec("uprobe:probe_add")).expect("resolve");
        assert_eq!(points.len(), 1);
        let p = &points[0];
        assert_eq!(p.attach_path, target.exe_link());
        assert_eq!(p.object, target.exe);
        let bias = p.load_bias.expect("bias");
        assert_eq!(bias == 0, !pie, "{bin}: bias {bias:#x}");
        // The runtime address lies in an executable mapping of the file, at the same
        // file offset the probe is attached at.
        let runtime = bias + p.address;
        let maps = maps::read_maps(proc.pid).expect("maps");
        let id = FileId::of(&target.exe_link()).expect("stat");
        let m = maps
            .iter()
            .find(|m| id.matches(m) && m.start <= runtime && runtime < m.end)
            .expect("mapping");
        assert!(m.executable());
        assert_eq!(m.offset + (runtime - m.start), p.file_offset);

        let sema = resolve(&target, &spec("usdt:fixture_sema:tick")).expect("usdt");
        assert_eq!(sema.len(), 1, "{sema:?}");
        assert_eq!(sema[0].object, target.exe);
        assert!(
            sema[0]
                .usdt
                .as_ref()
                .is_some_and(|u| u.semaphore_offset.is_some())
        );

        let malloc = resolve(&target, &spec("uprobe:libc:malloc")).expect("libc:malloc");
        assert_eq!(malloc.len(), 1);
        assert!(
            malloc[0].object.to_string_lossy().contains("libc"),
            "{malloc:?}"
        );
        assert!(malloc[0].load_bias.is_some());

        let l = list::list(&ListSource::Pid(proc.pid), Some("probe_a*")).expect("list");
        assert_eq!(l.objects[0].path, target.exe);
        assert!(
            l.objects
                .iter()
                .any(|o| o.path.to_string_lossy().contains("libc"))
        );
        let listed: BTreeSet<&str> = l.points.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(listed, BTreeSet::from(["probe_add", "probe_alias_impl"]));
    }
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures) and python3"]
fn live_python_usdt_in_a_ctypes_library() {
    let script = fixture("python/pyprobes.py");
    let lib = fixture("python/libpyprobes.so");
    let proc = Running::start("python3", &[&script.to_string_lossy(), "--wait-stdin"]);
    let target = Target::open(proc.pid).expect("target");
    let segs = readelf_segments(&lib);
    let note = readelf_notes(&lib)
        .into_iter()
        .find(|n| n.name == "call")
        .expect("note");
    for text in [
        "usdt:pyprobes:call",
        "usdt:call",
        "usdt:libpyprobes:pyprobes:call",
        &format!("usdt:{}:pyprobes:call", lib.display()),
    ] {
        let points = resolve(&target, &spec(text)).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(points.len(), 1, "{text}: {points:?}");
        let p = &points[0];
        assert_eq!(p.object, lib, "{text}");
        assert!(p.load_bias.is_some_and(|b| b != 0));
        assert!(
            p.attach_path
                .starts_with(format!("/proc/{}/root", proc.pid))
        );
        let site = p.usdt.as_ref().expect("usdt");
        assert_eq!(site.semaphore_address, Some(note.semaphore));
        assert_eq!(
            site.semaphore_offset,
            Some(expected_offset(&segs, note.semaphore, false))
        );
        assert_eq!(site.args_raw, "-8@%rdi 8@%rsi");
    }
    let f = resolve(&target, &spec("uprobe:libpyprobes:pyprobes_call")).expect("uprobe in lib");
    assert_eq!(f[0].address, readelf_function(&lib, "pyprobes_call").value);
    let err = resolve(&target, &spec("uprobe:libpyprobe:pyprobes_call")).expect_err("typo");
    assert!(
        matches!(&err, ResolveError::ObjectNotFound { hint, .. } if hint.contains("libpyprobes.so")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// C++, Rust, Go

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn cpp_demangled_names_overloads_and_globs() {
    let path = fixture("cpp/cppfix");
    let mangled = "_Z16dispatch_command14server_commandP3THDPcjb";
    let full = "dispatch_command(server_command, THD*, char*, unsigned int, bool)";
    let want = readelf_function(&path, mangled);
    let by_name = resolve_ok(&path, "uprobe:dispatch_command");
    assert_eq!(by_name.len(), 1);
    assert_eq!(
        (by_name[0].name.as_str(), by_name[0].symbol.as_str()),
        (full, mangled)
    );
    assert_eq!(by_name[0].address, want.value);
    assert_eq!(resolve_ok(&path, &format!("uprobe:{mangled}")), by_name);
    // The full demangled name has spaces, which the spec grammar refuses; the matcher
    // takes it all the same.
    let with_params = ProbeSpec {
        text: format!("uprobe:{full}"),
        kind: ProbeKind::Uprobe,
        object: None,
        provider: None,
        name: full.into(),
        offset: None,
        at_returns: false,
        pair: None,
        key: None,
    };
    assert_eq!(
        resolve_file(&path, &with_params, &opts()).expect("full"),
        by_name
    );
    assert_eq!(resolve_ok(&path, "uprobe:dispatch_command(*"), by_name);

    assert_eq!(
        names(&resolve_ok(&path, "uprobe:shop::Cart::add")),
        vec!["shop::Cart::add(int)", "shop::Cart::add(shop::Item const&)"]
    );
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:THD::*")),
        vec!["THD::run(int)", "THD::send_kill_message() const"]
    );
    // C1 and C2 constructors share an address: one point.
    let ctor = resolve_ok(&path, "uprobe:shop::Cart::Cart");
    assert_eq!(ctor.len(), 1);
    assert_eq!(
        (ctor[0].name.as_str(), ctor[0].symbol.as_str()),
        ("shop::Cart::Cart()", "_ZN4shop4CartC1Ev")
    );
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:shop::twice<*>")),
        vec!["shop::twice<double>(double)", "shop::twice<int>(int)"]
    );
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:shop::detail::helper")),
        vec!["shop::detail::helper(int)"]
    );
    let err = resolve_file(&path, &spec("uprobe:shop::detail::helpr"), &opts()).expect_err("typo");
    assert!(err.to_string().contains("shop::detail::helper"), "{err}");
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn rust_legacy_and_v0_symbols() {
    let legacy = fixture("rust/rustfix-legacy");
    let p = resolve_ok(&legacy, "uprobe:rustfix::trace_me");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].name, "rustfix::trace_me");
    assert!(
        p[0].symbol.starts_with("_ZN7rustfix8trace_me17h"),
        "{}",
        p[0].symbol
    );
    assert_eq!(p[0].address, readelf_function(&legacy, &p[0].symbol).value);
    assert_eq!(
        names(&resolve_ok(&legacy, "uprobe:rustfix::Worker::step")),
        vec!["rustfix::Worker::step"]
    );
    assert_eq!(resolve_ok(&legacy, "uprobe:rustfix::generic").len(), 2);

    let v0 = fixture("rust/rustfix-v0");
    let p = resolve_ok(&v0, "uprobe:rustfix::trace_me");
    assert_eq!(p.len(), 1);
    assert!(p[0].symbol.starts_with("_R"), "{}", p[0].symbol);
    assert_eq!(p[0].address, readelf_function(&v0, &p[0].symbol).value);
    assert_eq!(
        names(&resolve_ok(&v0, "uprobe:<rustfix::Worker>::step")),
        vec!["<rustfix::Worker>::step"]
    );
    assert_eq!(
        names(&resolve_ok(&v0, "uprobe:rustfix::generic::<*>")),
        vec!["rustfix::generic::<u32>", "rustfix::generic::<u8>"]
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn go_symbols_as_go_spells_them() {
    let path = fixture("go/gofix");
    let p = resolve_ok(&path, "uprobe:main.traceMe");
    assert_eq!(p.len(), 1);
    let want = readelf_function(&path, "main.traceMe");
    assert_eq!(p[0].address, want.value);
    assert_eq!(
        p[0].file_offset,
        expected_offset(&readelf_segments(&path), want.value, true)
    );
    // `[*]` is a literal star: Go's method names hold one.
    assert_eq!(
        names(&resolve_ok(&path, "uprobe:main.([*]Worker).Step")),
        vec!["main.(*Worker).Step"]
    );
}

// ---------------------------------------------------------------------------------------
// FUNC+OFFSET

/// Start offsets of the instructions of `name` in `path`, by objdump.
fn objdump_boundaries(path: &Path, name: &str) -> Vec<u64> {
    let f = readelf_function(path, name);
    let text = run(
        "objdump",
        &[
            "-d",
            &format!("--start-address={:#x}", f.value),
            &format!("--stop-address={:#x}", f.value + f.size),
            &path.to_string_lossy(),
        ],
    );
    text.lines()
        .filter_map(|l| {
            let (addr, rest) = l.trim_start().split_once(':')?;
            // Instruction lines have a tab after the colon; labels do not.
            rest.starts_with('\t').then(|| hex(addr) - f.value)
        })
        .collect()
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures) and objdump"]
fn offsets_land_on_instruction_boundaries_as_objdump_decodes_them() {
    let path = fixture("c/workload");
    let entry = resolve_ok(&path, "uprobe:work_unit");
    let size = readelf_function(&path, "work_unit").size;
    let boundaries = objdump_boundaries(&path, "work_unit");
    assert!(boundaries.len() > 5, "{boundaries:?}");
    for offset in 0..size {
        let text = format!("uprobe:work_unit+{offset:#x}");
        let got = resolve_file(&path, &spec(&text), &opts());
        if boundaries.contains(&offset) {
            let p = got.unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(p.len(), 1);
            assert_eq!(p[0].address, entry[0].address + offset, "{text}");
            assert_eq!(p[0].file_offset, entry[0].file_offset + offset, "{text}");
            let span = p[0].function.expect("span");
            assert_eq!((span.offset, span.size), (offset, size), "{text}");
            assert_eq!(p[0].entry_file_offset(), Some(entry[0].file_offset));
            let want_name = if offset == 0 {
                "work_unit".to_string()
            } else {
                format!("work_unit+{offset:#x}")
            };
            assert_eq!(p[0].name, want_name);
            assert_eq!(p[0].symbol, "work_unit");
        } else {
            let err = got.expect_err(&text).to_string();
            let before = boundaries.iter().rev().find(|b| **b < offset).unwrap();
            let after = boundaries.iter().find(|b| **b > offset).unwrap();
            assert_eq!(
                err,
                format!(
                    "work_unit+{offset:#x} is not on an instruction boundary: the nearest are +{before:#x} and +{after:#x}"
                )
            );
        }
    }
    // Decimal is the same offset.
    assert_eq!(
        resolve_ok(&path, "uprobe:work_unit+4"),
        resolve_ok(&path, "uprobe:work_unit+0x4")
    );
    let err = resolve_file(&path, &spec(&format!("uprobe:work_unit+{size}")), &opts())
        .expect_err("past the end")
        .to_string();
    assert_eq!(
        err,
        format!("work_unit+{size:#x} is outside work_unit, which is {size:#x} bytes long")
    );
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn an_offset_needs_exactly_one_function() {
    let path = fixture("cpp/cppfix");
    // Two overloads: which one's +0x1 is meant is anybody's guess.
    let err = resolve_file(&path, &spec("uprobe:shop::Cart::add+0x1"), &opts())
        .expect_err("ambiguous")
        .to_string();
    assert!(err.contains("names 2 functions"), "{err}");
    assert!(err.contains("_ZN4shop4Cart3addEi"), "{err}");
    // Unknown names are still unknown, with suggestions.
    let err = resolve_file(&path, &spec("uprobe:dispatch_comand+4"), &opts())
        .expect_err("unknown")
        .to_string();
    assert!(err.contains("not found"), "{err}");
}

#[test]
#[ignore = "needs the fixtures (cargo xtask fixtures)"]
fn live_ifunc_resolves_to_the_implementation_the_process_uses() {
    for bin in ["c/probes", "c/probes-nopie"] {
        let path = fixture(bin);
        let implementation = readelf_function(&path, "ifunc_impl");
        let resolver = readelf_function(&path, "probe_ifunc").value;
        let proc = Running::start(&path.to_string_lossy(), &["--wait-stdin"]);
        let target = Target::open(proc.pid).expect("target");
        let points = resolve(&target, &spec("uprobe:probe_ifunc")).expect("resolve");
        assert_eq!(points.len(), 1, "{bin}");
        let p = &points[0];
        assert_eq!(p.name, "probe_ifunc", "{bin}");
        assert_eq!(p.resolved.as_deref(), Some("ifunc_impl"), "{bin}");
        assert_eq!(p.address, implementation.value, "{bin}");
        // The resolver by its own name stays the resolver (whose preferred name, at the
        // same address, is the IFUNC's).
        let points = resolve(&target, &spec("uprobe:resolve_probe_ifunc")).expect("resolve");
        assert_eq!(
            (points[0].address, points[0].resolved.as_deref()),
            (resolver, Some("probe_ifunc")),
            "{bin}"
        );
    }
}

#[test]
fn an_ifunc_whose_choice_cannot_be_read_is_refused_with_the_reason() {
    let image = super::elf::ElfImage::default();
    let table = super::symbols::SymbolTable::default();
    let err = super::ifunc::implementation(std::process::id(), &image, &table, 0, 0x1000)
        .expect_err("no relocation");
    let err = ResolveError::Ifunc {
        name: "strfoo".into(),
        object: "/lib/libc.so.6".into(),
        reason: err,
    };
    assert_eq!(
        err.to_string(),
        "strfoo in /lib/libc.so.6 is an IFUNC: its symbol is a resolver that runs once at load, and the object has no IRELATIVE relocation for it, so its choice cannot be read; probe the implementation by its name instead (probetop list --pid PID '*strfoo*' lists them)"
    );
}

// ---------------------------------------------------------------------------------------
// Notes probetop refuses to trust

#[test]
#[ignore = "needs the fixtures"]
fn wrong_usdt_notes_are_refused_and_the_others_kept() {
    let path = fixture("c/badnotes");
    assert_eq!(
        names(&resolve_ok(&path, "usdt:badnotes:*")),
        vec!["badnotes:good", "badnotes:sema"]
    );
    for (name, needle) in [
        (
            "mid_insn",
            "its site badnotes_fn+0x6 is not on an instruction boundary: the nearest are +0x5 and +0xa",
        ),
        ("not_nop", "is `mov %ecx,%eax`, not the nop"),
        ("data_sema", "is outside the .probes section"),
    ] {
        let err =
            resolve_file(&path, &spec(&format!("usdt:badnotes:{name}")), &opts()).expect_err(name);
        assert!(
            matches!(err, ResolveError::UsdtUnusable { .. }) && err.to_string().contains(needle),
            "{name}: {err}"
        );
    }
}

#[test]
#[ignore = "needs the fixtures"]
fn usdt_sites_stay_on_their_notes_and_are_checked_without_symbols_too() {
    // The `nop; nop5` form: on the nop the note names (redzone_usdt+0x5), never moved.
    let path = fixture("c/redzone");
    let site = resolve_ok(&path, "usdt:redzone:site");
    let entry = resolve_ok(&path, "uprobe:redzone_usdt");
    assert_eq!(site[0].address, entry[0].address + 5);
    assert!(!site[0].usdt.as_ref().expect("usdt").at_function_entry);
    // A stripped copy without its debug file: the sites inside static functions are
    // checked from the nearest exported symbol before them, and all kept.
    let alone = TempDir::new("stripped-usdt");
    let bin = alone.0.join("probes-debuglink");
    std::fs::copy(fixture("c/probes-debuglink"), &bin).expect("copy bin");
    let whole = names(&resolve_ok(&fixture("c/probes"), "usdt:*"));
    assert_eq!(names(&resolve_ok(&bin, "usdt:*")), whole);
}
