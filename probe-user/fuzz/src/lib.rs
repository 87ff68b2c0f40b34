//! Bodies of probe-user's fuzz targets (one thin binary each in `fuzz_targets/`).
//!
//! probetop runs as root and reads ELF files, notes and argument strings from whatever
//! process it is pointed at: every parser here must return an error, never panic (debug
//! assertions are on, so overflow panics too), and never hold more memory than a small
//! multiple of its input. The invariants asserted are the ones cheap to check.

pub mod meter;

use std::path::{Path, PathBuf};

use probe_user::inner::attach::args::args_config;
use probe_user::inner::resolve::debuginfo::{self, DebugSearch, MAX_DEBUGDATA_BYTES};
use probe_user::inner::resolve::elf::{ElfImage, RawStapsdtNote};
use probe_user::inner::resolve::glob::Glob;
use probe_user::inner::resolve::symbols::{self, SymbolTable};
use probe_user::inner::resolve::usdt::{self, UsdtProbe};
use probe_user::inner::resolve::usdt_args::{self, ArgLocation, UsdtArg};
use probe_user::inner::resolve::{suggest, usdt_probe_point};
use probe_user::inner::spec::ProbeSpec;
use probe_user::inner::sys::maps::MapEntry;

/// Heap a parser may hold per input byte. Generous for real files (the seeds peak well
/// below it), small enough that quadratic growth shows at a few KiB of input.
const HEAP_PER_INPUT_BYTE: usize = 64;
/// Heap allowed whatever the input size (tables, formatting, one-off buffers).
const HEAP_FIXED: usize = 4 << 20;
/// Cap on MiniDebugInfo output in the minidebuginfo target: the real cap
/// ([`MAX_DEBUGDATA_BYTES`], 256 MiB) is what `-malloc_limit_mb` would flag and takes
/// seconds per input to reach; the capping logic is the same at any size.
const FUZZ_DEBUGDATA_CAP: usize = 4 << 20;
/// The xz decoder's dictionary may be this large whatever the input (its memory limit).
const XZ_DICTIONARY_MAX: usize = 128 << 20;
/// A load address for PIE objects, as the kernel picks them.
const PIE_BASE: u64 = 0x5555_5555_4000;

fn assert_heap(what: &str, input_len: usize, peak: usize, extra: usize) {
    let bound = input_len
        .saturating_mul(HEAP_PER_INPUT_BYTE)
        .saturating_add(HEAP_FIXED)
        .saturating_add(extra);
    assert!(
        peak <= bound,
        "{what}: {peak} bytes of heap for {input_len} bytes of input (bound {bound})"
    );
}

// ---------------------------------------------------------------------------------------
// elf_image

/// `ElfImage::parse` and everything a resolve does with a file after it: symbol table,
/// demangling, matching, suggestions, USDT notes and their arguments, file offsets and
/// load bias. Heap stays linear in the file, MiniDebugInfo aside (bounded by its own cap,
/// and fuzzed by the minidebuginfo target).
pub fn elf_image(data: &[u8]) {
    let (image, peak) = meter::peak_during(|| {
        let image = ElfImage::parse(data).ok()?;
        check_image(&image);
        let table = SymbolTable::build(&image.symbols, &image);
        check_table(&image, &table);
        use_table(&table);
        let probes = usdt::probes(&image);
        check_probes(&image, &table, &probes);
        Some(image)
    });
    assert_heap("elf_image", data.len(), peak, 0);
    let Some(image) = image else {
        return;
    };
    // What `Loaded::table` does for a stripped object, with no directory to search (the
    // input is the only file, and an empty path has no parent for a debuglink).
    if !image.has_symtab {
        let search = DebugSearch { roots: Vec::new() };
        if let Some(extra) = debuginfo::find_extra_symbols(&image, Path::new(""), &search) {
            let table = SymbolTable::build(image.symbols.iter().chain(&extra.symbols), &image);
            check_table(&image, &table);
        }
    }
}

/// Whether `got` is what `vaddr_to_offset` must answer for `addr`: the offset through a
/// segment of the right kind whose file-backed part holds `addr`.
fn offset_is_sound(image: &ElfImage, addr: u64, executable: Option<bool>, got: u64) -> bool {
    image.segments.iter().any(|s| {
        executable.is_none_or(|x| s.executable == x)
            && addr >= s.vaddr
            && addr - s.vaddr < s.filesz
            && s.offset.checked_add(addr - s.vaddr) == Some(got)
    })
}

fn check_image(image: &ElfImage) {
    // The first segments only: a hostile file may have thousands, and each check scans
    // them all.
    for s in image.segments.iter().take(64) {
        for addr in [
            s.vaddr,
            s.vaddr.wrapping_add(s.filesz / 2),
            s.vaddr.wrapping_add(s.filesz),
        ] {
            for exec in [None, Some(true), Some(false)] {
                if let Some(off) = image.vaddr_to_offset(addr, exec) {
                    assert!(
                        offset_is_sound(image, addr, exec, off),
                        "{addr:#x} -> {off:#x}"
                    );
                }
            }
        }
    }
    for sym in &image.symbols {
        assert!(!sym.name.is_empty() && sym.address != 0, "{sym:?}");
    }
    if let Some(link) = &image.debuglink {
        // A debuglink names a file next to the object, never a path out of its directory.
        assert!(!link.file.contains('/') && link.file != ".." && !link.file.is_empty());
    }
    // The process side of a resolve: the file mapped whole, once non-PIE style (offset
    // 0 at its first segment's address) and once PIE style.
    let first = image.segments.first().map_or(0, |s| s.vaddr);
    for start in [first, PIE_BASE] {
        let map = |perms: &str| MapEntry {
            start,
            end: start.saturating_add(1 << 20),
            perms: perms.into(),
            offset: 0,
            dev_major: 8,
            dev_minor: 1,
            inode: 42,
            path: Some("/fuzz/object".into()),
            deleted: false,
        };
        let maps_ = [map("r--p"), map("r-xp")];
        let _ = probe_user::inner::resolve::elf::load_bias(image, &maps_);
    }
}

fn check_table(image: &ElfImage, table: &SymbolTable) {
    let mut last = None;
    for f in &table.functions {
        assert!(last < Some(f.address), "functions not sorted by address");
        last = Some(f.address);
        assert!(
            offset_is_sound(image, f.address, Some(true), f.file_offset),
            "{:#x} -> {:#x}",
            f.address,
            f.file_offset
        );
        for n in f.names() {
            assert!(!n.raw.is_empty());
            assert!(
                n.keys().any(|k| k == n.raw),
                "{n:?} does not answer to its own name"
            );
        }
    }
}

/// What resolving a spec against the table does: exact names, globs, and suggestions
/// when nothing matched.
fn use_table(table: &SymbolTable) {
    for pattern in ["main", "*", "_Z*", "std::*::push_back*", "[a-f]?*_[!x]"] {
        let glob = Glob::new(pattern);
        let n = table.matching(&glob).take(1000).count();
        if pattern == "*" {
            assert_eq!(
                n,
                table.functions.len().min(1000),
                "`*` must match every function"
            );
        }
    }
    for wanted in ["mian", "work_unit", "pthread_crate"] {
        let got = suggest::closest(wanted, table.all_names(), 5);
        assert!(got.len() <= 5);
    }
    if let Some(f) = table.functions.first() {
        assert!(
            table.address_of(&f.name.raw).is_some(),
            "{} has no address",
            f.name.raw
        );
    }
}

fn check_probes(
    image: &ElfImage,
    table: &SymbolTable,
    probes: &[Result<UsdtProbe, usdt::UsdtNoteError>],
) {
    assert_eq!(probes.len(), image.stapsdt_notes.len());
    for probe in probes.iter().flatten() {
        assert!(!probe.provider.is_empty() && !probe.name.is_empty());
        assert!(
            offset_is_sound(image, probe.address, Some(true), probe.file_offset),
            "{probe:?}"
        );
        if let (Some(addr), Some(off)) = (probe.semaphore_address, probe.semaphore_offset) {
            assert!(offset_is_sound(image, addr, Some(false), off), "{probe:?}");
        }
        assert_eq!(
            probe.semaphore_address.is_some(),
            probe.semaphore_offset.is_some()
        );
        for bias in [None, Some(0), Some(PIE_BASE)] {
            lower(probe, |s| table.address_of(s), bias);
        }
    }
}

/// Builds the probe point a resolve would and lowers its arguments as attach does.
fn lower(probe: &UsdtProbe, lookup: impl Fn(&str) -> Option<u64>, load_bias: Option<u64>) {
    let object = PathBuf::from("/fuzz/object");
    let point = usdt_probe_point(probe, object.clone(), object, load_bias, lookup);
    for count in [0, 1, probe_common::MAX_ARGS, usize::MAX] {
        if let Ok(config) = args_config(&point, count) {
            assert!(config.count as usize <= count.min(probe_common::MAX_ARGS));
        }
    }
    if let Some(site) = &point.usdt {
        for index in 0..usdt_args::MAX_ARGS + 1 {
            let _ = site.arg_static_address(index, load_bias.unwrap_or(0));
        }
    }
}

// ---------------------------------------------------------------------------------------
// usdt_notes

/// Header of a usdt_notes input: which ELF class and byte order to wrap the notes in,
/// and where the executable segment ends (notes' pcs below it are in text, semaphores
/// above it in data), so real notes can be replayed with their own file's layout.
pub const NOTES_HEADER_LEN: usize = 1 + 8 + 8;

/// Flag bits of the header's first byte.
pub mod notes_flags {
    /// ELF64 (else ELF32).
    pub const IS_64: u8 = 1;
    /// Big-endian (else little).
    pub const BIG_ENDIAN: u8 = 2;
    /// Add a `.stapsdt.base` section (prelink adjustment) at the header's base address.
    pub const STAPSDT_BASE: u8 = 4;
    /// Machine x86-64 (else AArch64: arguments are then not parsed).
    pub const X86_64: u8 = 8;
}

/// The `.note.stapsdt` section bytes `notes`, wrapped in an ELF file as `header`
/// describes, through ElfImage::parse and USDT decoding; each descriptor is also decoded
/// on its own in every class and byte order.
pub fn usdt_notes(data: &[u8]) {
    let Some((header, notes)) = data.split_at_checked(NOTES_HEADER_LEN) else {
        return;
    };
    let flags = header[0];
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let (text_end, base) = (word(1), word(9));
    let file = wrap_notes(flags, text_end, base, notes);
    let (_, peak) = meter::peak_during(|| {
        let Ok(image) = ElfImage::parse(&file) else {
            return;
        };
        let table = SymbolTable::build(&image.symbols, &image);
        let probes = usdt::probes(&image);
        check_probes(&image, &table, &probes);
        for RawStapsdtNote { desc } in &image.stapsdt_notes {
            for (is_64, big_endian) in [(true, false), (true, true), (false, false), (false, true)]
            {
                if let Ok(note) = usdt::decode_note(desc, is_64, big_endian) {
                    assert!(!note.provider.is_empty() && !note.name.is_empty());
                    // Three strings, each NUL-terminated, after the three addresses.
                    let width = if is_64 { 8 } else { 4 };
                    assert!(desc.len() >= 3 * width + 3);
                }
            }
        }
    });
    assert_heap("usdt_notes", file.len(), peak, 0);
}

/// A minimal ELF file: two `PT_LOAD` segments (text below `text_end`, data above it),
/// a `.note.stapsdt` section holding `notes`, and optionally `.stapsdt.base`.
pub fn wrap_notes(flags: u8, text_end: u64, base: u64, notes: &[u8]) -> Vec<u8> {
    use object::elf;
    use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Writer};
    let is_64 = flags & notes_flags::IS_64 != 0;
    let endian = if flags & notes_flags::BIG_ENDIAN != 0 {
        object::Endianness::Big
    } else {
        object::Endianness::Little
    };
    let machine = if flags & notes_flags::X86_64 != 0 {
        elf::EM_X86_64
    } else {
        elf::EM_AARCH64
    };
    // ELF32 addresses are 32 bits.
    let addr_max = if is_64 { u64::MAX } else { u64::from(u32::MAX) };
    let text_end = text_end.min(addr_max);
    let with_base = flags & notes_flags::STAPSDT_BASE != 0;

    let mut out = Vec::new();
    let mut w = Writer::new(endian, is_64, &mut out);
    w.reserve_file_header();
    w.reserve_program_headers(2);
    let _ = w.reserve_null_section_index();
    let note_name = w.add_section_name(b".note.stapsdt");
    let _ = w.reserve_section_index();
    let base_name = with_base.then(|| {
        let name = w.add_section_name(b".stapsdt.base");
        let _ = w.reserve_section_index();
        name
    });
    w.reserve_shstrtab_section_index();
    let note_offset = w.reserve(notes.len(), 4);
    w.reserve_shstrtab();
    w.reserve_section_headers();
    if w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_DYN,
        e_machine: machine,
        e_entry: 0,
        e_flags: 0,
    })
    .is_err()
    {
        return Vec::new();
    }
    w.write_align_program_headers();
    for (p_flags, vaddr, size) in [
        (elf::PF_R | elf::PF_X, 0, text_end),
        (elf::PF_R | elf::PF_W, text_end, addr_max - text_end),
    ] {
        w.write_program_header(&ProgramHeader {
            p_type: elf::PT_LOAD,
            p_flags,
            p_offset: vaddr,
            p_vaddr: vaddr,
            p_paddr: vaddr,
            p_filesz: size,
            p_memsz: size,
            p_align: 0x1000,
        });
    }
    w.write_align(4);
    w.write(notes);
    w.write_shstrtab();
    w.write_null_section_header();
    w.write_section_header(&SectionHeader {
        name: Some(note_name),
        sh_type: elf::SHT_NOTE,
        sh_flags: 0,
        sh_addr: 0,
        sh_offset: note_offset as u64,
        sh_size: notes.len() as u64,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 4,
        sh_entsize: 0,
    });
    if let Some(name) = base_name {
        w.write_section_header(&SectionHeader {
            name: Some(name),
            sh_type: elf::SHT_PROGBITS,
            sh_flags: u64::from(elf::SHF_ALLOC),
            sh_addr: base.min(addr_max),
            sh_offset: 0,
            sh_size: 1,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 1,
            sh_entsize: 0,
        });
    }
    w.write_shstrtab_section_header();
    out
}

// ---------------------------------------------------------------------------------------
// usdt_args

/// An argument string: parsed whole and word by word (which must agree), then lowered
/// to eBPF fetch recipes with and without a load bias, as attach does.
pub fn usdt_args(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (_, peak) = meter::peak_during(|| {
        let parsed = usdt_args::parse_args(&text);
        if let Ok(args) = &parsed {
            assert!(args.len() <= usdt_args::MAX_ARGS);
            let words: Vec<&str> = text.split_ascii_whitespace().collect();
            assert_eq!(words.len(), args.len());
            for (word, arg) in words.iter().zip(args) {
                assert_eq!(usdt_args::parse_arg(word).as_ref(), Ok(arg), "{word:?}");
                check_arg(arg);
            }
        }
        let probe = UsdtProbe {
            provider: "fuzz".into(),
            name: "args".into(),
            address: 0x1000,
            file_offset: 0x1000,
            semaphore_address: None,
            semaphore_offset: None,
            args_raw: text.to_string(),
            args: parsed,
        };
        let lookup = |s: &str| s.len().is_multiple_of(2).then_some(0x4000 + s.len() as u64);
        for bias in [None, Some(0), Some(PIE_BASE), Some(u64::MAX)] {
            lower(&probe, lookup, bias);
        }
    });
    assert_heap("usdt_args", data.len(), peak, 0);
}

fn check_arg(arg: &UsdtArg) {
    assert!(matches!(arg.size, 1 | 2 | 4 | 8), "{arg:?}");
    if let ArgLocation::Memory {
        scale, base, index, ..
    } = &arg.location
    {
        assert!(matches!(scale, 1 | 2 | 4 | 8), "{arg:?}");
        assert!(base.is_some() || index.is_some() || *scale == 1, "{arg:?}");
    }
}

// ---------------------------------------------------------------------------------------
// probe_spec

/// A `-e` spec: parsed; accepted specs have a name without spaces and re-parse to
/// themselves; rejected ones point their caret inside the text. The name compiles as a
/// glob, which is then matched against a few names.
pub fn probe_spec(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (_, peak) = meter::peak_during(|| match ProbeSpec::parse(&text) {
        Ok(spec) => {
            assert!(!spec.name.is_empty() && !spec.name.contains(char::is_whitespace));
            assert_eq!(ProbeSpec::parse(&spec.to_string()).as_ref(), Ok(&spec));
            let glob = Glob::new(&spec.name);
            // Only names with glob characters compile to patterns.
            assert!(!glob.is_pattern() || spec.is_glob(), "{spec:?}");
            if !glob.is_pattern() {
                assert!(
                    glob.matches(&spec.name),
                    "{:?} does not match itself",
                    spec.name
                );
            }
            let _ = glob.longest_literal();
            for name in [
                "main",
                "std::vector<int>::push_back(int const&)",
                &text,
                &spec.name,
            ] {
                let _ = glob.matches(name);
            }
        }
        Err(e) => {
            assert!(e.at <= text.len() && e.len <= text.len() + 1, "{e:?}");
            let _ = e.to_string();
        }
    });
    assert_heap("probe_spec", data.len(), peak, 0);
}

// ---------------------------------------------------------------------------------------
// minidebuginfo

/// `.gnu_debugdata` contents: xz-decompressed with a cap, then read as the ELF file
/// MiniDebugInfo is, and its symbols built into a table. Heap stays within the xz
/// dictionary limit plus a multiple of the capped output.
pub fn minidebuginfo(data: &[u8]) {
    let (inner, peak) = meter::peak_during(|| debuginfo::decompress_xz(data, FUZZ_DEBUGDATA_CAP));
    // The output buffer may grow past the cap by one doubling before the cap is seen.
    assert_heap(
        "xz",
        data.len(),
        peak,
        XZ_DICTIONARY_MAX + 2 * FUZZ_DEBUGDATA_CAP,
    );
    let Ok(inner) = inner else {
        return;
    };
    assert!(inner.len() <= FUZZ_DEBUGDATA_CAP);
    let (_, peak) = meter::peak_during(|| {
        let image = ElfImage::parse(&inner).ok()?;
        check_image(&image);
        let table = SymbolTable::build(&image.symbols, &image);
        check_table(&image, &table);
        Some(())
    });
    assert_heap("minidebuginfo ELF", inner.len(), peak, 0);
    // The real cap is larger, never smaller, than the one fuzzed.
    const _: () = assert!(FUZZ_DEBUGDATA_CAP <= MAX_DEBUGDATA_BYTES);
}

// ---------------------------------------------------------------------------------------
// demangle

/// A symbol name (C++ or Rust, legacy or v0, or neither) demangled into every spelling
/// the symbol table keeps, with the same heap bound as the other targets: the elf_image
/// target reaches the demanglers too, but mutating names inside a string table is slow.
pub fn demangle(data: &[u8]) {
    let name = String::from_utf8_lossy(data);
    let ((display, keys), peak) = meter::peak_during(|| symbols::demangle(&name));
    assert_heap("demangle", data.len(), peak, 0);
    assert!(!display.is_empty() || name.is_empty());
    assert!(!keys.contains(&display), "{display:?} repeated in {keys:?}");
}
