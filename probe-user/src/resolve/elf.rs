//! The parts of an ELF file that resolution needs, read once with `object`'s low-level
//! ELF API into plain owned data: loadable segments, symbols, USDT notes and the links
//! to separate debug info.
//!
//! Files are untrusted input: every offset and size is checked, names are capped, and a
//! malformed part is reported or skipped rather than trusted.

use object::elf::{
    EM_X86_64, NT_GNU_BUILD_ID, PF_X, PT_LOAD, R_X86_64_IRELATIVE, SHN_UNDEF, SHT_DYNSYM,
    SHT_NOBITS, SHT_NOTE, SHT_RELA, SHT_SYMTAB, STB_GLOBAL, STB_LOCAL, STB_WEAK, STT_FUNC,
    STT_GNU_IFUNC, STT_OBJECT, STT_TLS,
};
use object::read::elf::{FileHeader, ProgramHeader as _, Rela as _, SectionHeader as _, Sym as _};
use object::{Endianness, FileKind};

use crate::sys::maps::MapEntry;

/// Longest symbol name kept; longer ones are skipped as garbage.
const MAX_NAME_LEN: usize = 64 * 1024;
/// Bytes of symbol names kept per byte of file. Names are read out of the file's string
/// tables, so a real file's add up to less than its size (a little more where a linker
/// shares common suffixes); a hostile file can point every symbol at one long name,
/// which without this budget makes the names quadratic in the file's size.
const NAME_BYTES_PER_FILE_BYTE: usize = 4;

/// Note type of a SystemTap SDT probe descriptor.
pub const NT_STAPSDT: u32 = 3;

/// One `PT_LOAD` program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub executable: bool,
}

/// How a symbol binds, in the order aliases are preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Binding {
    Global,
    Weak,
    Local,
}

/// What a symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    Function,
    /// `STT_GNU_IFUNC`: the address is the resolver's.
    Ifunc,
    /// Data (`STT_OBJECT`, `STT_TLS`): kept for `%rip`-relative USDT arguments.
    Data,
}

/// Which table a symbol came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymbolTableKind {
    Symtab,
    Dynsym,
}

/// A defined symbol with a non-zero address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfSymbol {
    /// The name as stored (mangled), without `@VERSION`.
    pub name: String,
    pub address: u64,
    pub size: u64,
    pub kind: SymbolKind,
    pub binding: Binding,
    pub table: SymbolTableKind,
}

/// An `R_X86_64_IRELATIVE` relocation: the dynamic linker calls the IFUNC resolver at
/// `resolver` and writes what it returns at `got` (link-time addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrelativeSlot {
    pub got: u64,
    pub resolver: u64,
}

/// `.gnu_debuglink`: the separate debug file's name and the CRC32 of its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugLink {
    pub file: String,
    pub crc: u32,
}

/// The descriptor of one `stapsdt` note, undecoded (see `usdt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStapsdtNote {
    pub desc: Vec<u8>,
}

/// What probetop needs from one ELF file.
#[derive(Debug, Clone, Default)]
pub struct ElfImage {
    pub is_64: bool,
    pub big_endian: bool,
    pub machine: u16,
    pub segments: Vec<LoadSegment>,
    /// Defined functions and data objects from `.symtab` and `.dynsym`.
    pub symbols: Vec<ElfSymbol>,
    /// Whether the file has a non-empty `.symtab` (a stripped file has only `.dynsym`).
    pub has_symtab: bool,
    pub build_id: Option<Vec<u8>>,
    pub debuglink: Option<DebugLink>,
    /// Contents of `.gnu_debugdata` (xz-compressed MiniDebugInfo), if present.
    pub gnu_debugdata: Option<Vec<u8>>,
    /// Address of `.stapsdt.base`, for prelink adjustment of USDT locations.
    pub stapsdt_base: Option<u64>,
    /// Address range of `.probes`, where sys/sdt.h and usdt.h put USDT semaphores: the
    /// only place a note's semaphore is accepted (the kernel adds to it while attached).
    pub probes_section: Option<std::ops::Range<u64>>,
    pub stapsdt_notes: Vec<RawStapsdtNote>,
    /// Problems met while reading symbols and notes (truncated, malformed, too large):
    /// reported, not fatal.
    pub read_errors: Vec<String>,
    /// Built by the Go toolchain (it has `.go.buildinfo` or `.gopclntab`).
    pub is_go: bool,
    /// IRELATIVE relocations (x86-64): where each IFUNC's choice is written at load.
    pub irelative: Vec<IrelativeSlot>,
}

/// Whether the ELF file at `path` was built by the Go toolchain; false if unreadable.
pub fn is_go_binary(path: &std::path::Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|data| ElfImage::parse(&data).ok())
        .is_some_and(|image| image.is_go)
}

/// Why a file cannot be read as ELF.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ElfError(pub String);

impl From<object::read::Error> for ElfError {
    fn from(e: object::read::Error) -> Self {
        ElfError(e.to_string())
    }
}

impl ElfImage {
    /// Parses an ELF file of either class and byte order.
    pub fn parse(data: &[u8]) -> Result<Self, ElfError> {
        match FileKind::parse(data) {
            Ok(FileKind::Elf64) => parse_generic::<object::elf::FileHeader64<Endianness>>(data),
            Ok(FileKind::Elf32) => parse_generic::<object::elf::FileHeader32<Endianness>>(data),
            Ok(other) => Err(ElfError(format!("not ELF but {other:?}"))),
            Err(e) => Err(ElfError(e.to_string())),
        }
    }

    /// File offset of virtual address `addr`, through the `PT_LOAD` segment whose
    /// file-backed part holds it; `executable` restricts to segments with `PF_X`.
    pub fn vaddr_to_offset(&self, addr: u64, executable: Option<bool>) -> Option<u64> {
        self.segment_of(addr, executable)
            .and_then(|s| (addr - s.vaddr).checked_add(s.offset))
    }

    /// The `PT_LOAD` segment whose file-backed part holds `addr`.
    pub fn segment_of(&self, addr: u64, executable: Option<bool>) -> Option<&LoadSegment> {
        self.segments.iter().find(|s| {
            executable.is_none_or(|x| s.executable == x)
                && addr >= s.vaddr
                && s.vaddr.checked_add(s.filesz).is_some_and(|end| addr < end)
        })
    }
}

fn parse_generic<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<ElfImage, ElfError> {
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let mut image = ElfImage {
        is_64: header.is_class_64(),
        big_endian: header.is_big_endian(),
        machine: header.e_machine(endian),
        ..ElfImage::default()
    };

    for ph in header.program_headers(endian, data)? {
        if ph.p_type(endian) != PT_LOAD {
            continue;
        }
        image.segments.push(LoadSegment {
            vaddr: ph.p_vaddr(endian).into(),
            memsz: ph.p_memsz(endian).into(),
            offset: ph.p_offset(endian).into(),
            filesz: ph.p_filesz(endian).into(),
            executable: ph.p_flags(endian) & PF_X != 0,
        });
    }

    let sections = header.sections(endian, data)?;
    image.is_go = sections.iter().any(|section| {
        matches!(
            sections.section_name(endian, section),
            Ok(b".go.buildinfo" | b".gopclntab")
        )
    });
    let mut name_budget = data.len().saturating_mul(NAME_BYTES_PER_FILE_BYTE);
    'tables: for (table_kind, sh_type) in [
        (SymbolTableKind::Symtab, SHT_SYMTAB),
        (SymbolTableKind::Dynsym, SHT_DYNSYM),
    ] {
        // A broken table is skipped, not fatal: separate debug info may stand in.
        let Ok(table) = sections.symbols(endian, data, sh_type) else {
            continue;
        };
        if table_kind == SymbolTableKind::Symtab {
            image.has_symtab = table.len() > 1;
        }
        for sym in table.iter() {
            let kind = match sym.st_type() {
                STT_FUNC => SymbolKind::Function,
                STT_GNU_IFUNC => SymbolKind::Ifunc,
                STT_OBJECT | STT_TLS => SymbolKind::Data,
                _ => continue,
            };
            let binding = match sym.st_bind() {
                STB_GLOBAL => Binding::Global,
                STB_WEAK => Binding::Weak,
                STB_LOCAL => Binding::Local,
                // STB_GNU_UNIQUE and others behave like globals for our purpose.
                _ => Binding::Global,
            };
            let address: u64 = sym.st_value(endian).into();
            if sym.st_shndx(endian) == SHN_UNDEF || address == 0 {
                continue;
            }
            let Ok(name) = table.symbol_name(endian, sym) else {
                continue;
            };
            if name.is_empty() || name.len() > MAX_NAME_LEN {
                continue;
            }
            // Lossy conversion borrows valid UTF-8: the budget is checked before a copy.
            let name = String::from_utf8_lossy(name);
            let Some(left) = name_budget.checked_sub(name.len()) else {
                image.read_errors.push(format!(
                    "symbol names add up to more than {NAME_BYTES_PER_FILE_BYTE} times the file's size: the rest are ignored"
                ));
                break 'tables;
            };
            name_budget = left;
            image.symbols.push(ElfSymbol {
                name: name.into_owned(),
                address,
                size: sym.st_size(endian).into(),
                kind,
                binding,
                table: table_kind,
            });
        }
    }

    for section in sections.iter() {
        let Ok(name) = sections.section_name(endian, section) else {
            continue;
        };
        let sh_type = section.sh_type(endian);
        match name {
            b".stapsdt.base" => image.stapsdt_base = Some(section.sh_addr(endian).into()),
            b".probes" => {
                let start: u64 = section.sh_addr(endian).into();
                let size: u64 = section.sh_size(endian).into();
                image.probes_section = start.checked_add(size).map(|end| start..end);
            }
            b".gnu_debuglink" if sh_type != SHT_NOBITS => {
                if let Ok(bytes) = section.data(endian, data) {
                    image.debuglink = parse_debuglink(bytes, image.big_endian);
                }
            }
            b".gnu_debugdata" if sh_type != SHT_NOBITS => {
                if let Ok(bytes) = section.data(endian, data) {
                    image.gnu_debugdata = Some(bytes.to_vec());
                }
            }
            _ => {}
        }
        if sh_type == SHT_RELA && image.machine == EM_X86_64 {
            // A broken table is skipped: only IFUNC probes need it.
            if let Ok(Some((relocations, _))) = section.rela(endian, data) {
                image.irelative.extend(
                    relocations
                        .iter()
                        .filter(|r| r.r_type(endian, false) == R_X86_64_IRELATIVE)
                        .map(|r| {
                            let addend: i64 = r.r_addend(endian).into();
                            IrelativeSlot {
                                got: r.r_offset(endian).into(),
                                resolver: addend as u64,
                            }
                        }),
                );
            }
            continue;
        }
        if sh_type != SHT_NOTE {
            continue;
        }
        let is_stapsdt = name == b".note.stapsdt";
        let mut notes = match section.notes(endian, data) {
            Ok(Some(notes)) => notes,
            Ok(None) => continue,
            Err(e) => {
                if is_stapsdt {
                    image
                        .read_errors
                        .push(format!("unreadable .note.stapsdt: {e}"));
                }
                continue;
            }
        };
        loop {
            match notes.next() {
                Ok(Some(note)) => {
                    let (owner, n_type) = (note.name(), note.n_type(endian));
                    if owner == b"stapsdt" && n_type == NT_STAPSDT {
                        image.stapsdt_notes.push(RawStapsdtNote {
                            desc: note.desc().to_vec(),
                        });
                    } else if owner == b"GNU" && n_type == NT_GNU_BUILD_ID {
                        image.build_id = Some(note.desc().to_vec());
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let what = String::from_utf8_lossy(name);
                    image
                        .read_errors
                        .push(format!("truncated note in {what}: {e}"));
                    break;
                }
            }
        }
    }
    Ok(image)
}

/// `.gnu_debuglink`: a NUL-terminated file name, padding to 4 bytes, then a CRC32.
fn parse_debuglink(bytes: &[u8], big_endian: bool) -> Option<DebugLink> {
    let nul = bytes.iter().position(|&b| b == 0)?;
    let name = bytes.get(..nul)?;
    let crc_at = (nul + 1).checked_next_multiple_of(4)?;
    let crc: [u8; 4] = bytes.get(crc_at..crc_at.checked_add(4)?)?.try_into().ok()?;
    let crc = if big_endian {
        u32::from_be_bytes(crc)
    } else {
        u32::from_le_bytes(crc)
    };
    let file = std::str::from_utf8(name).ok()?;
    // A link names a file in a directory, never a path: refuse `/` and `..` tricks.
    if file.is_empty() || file.contains('/') || file == ".." || file == "." {
        return None;
    }
    Some(DebugLink {
        file: file.to_string(),
        crc,
    })
}

/// Load bias of `image` in a process, from the mappings of its file: the amount added
/// to the object's virtual addresses at run time (0 for a non-PIE executable).
pub fn load_bias<'a>(
    image: &ElfImage,
    mappings: impl IntoIterator<Item = &'a MapEntry>,
) -> Option<u64> {
    let mut fallback = None;
    for m in mappings {
        let Some(m_end) = m
            .end
            .checked_sub(m.start)
            .and_then(|l| m.offset.checked_add(l))
        else {
            continue;
        };
        for s in &image.segments {
            let Some(s_end) = s.offset.checked_add(s.filesz) else {
                continue;
            };
            // A file offset inside both the mapping and the segment ties the two.
            let f = s.offset.max(m.offset);
            if f >= m_end || f >= s_end || s.filesz == 0 {
                continue;
            }
            // runtime(f) - linktime(f) = (m.start + f - m.offset) - (s.vaddr + f - s.offset)
            let bias = m
                .start
                .wrapping_sub(m.offset)
                .wrapping_sub(s.vaddr)
                .wrapping_add(s.offset);
            if m.executable() && s.executable {
                return Some(bias);
            }
            fallback.get_or_insert(bias);
        }
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::maps::parse_maps;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(ElfImage::parse(b"").is_err());
        assert!(ElfImage::parse(b"\x7fELF").is_err());
        assert!(ElfImage::parse(&[0u8; 100]).is_err());
        let mut hdr = vec![0u8; 64];
        hdr[..4].copy_from_slice(b"\x7fELF");
        hdr[4] = 2; // 64-bit
        hdr[5] = 1; // little endian
        hdr[6] = 1; // version
        // Program headers pointing far outside the file.
        hdr[32] = 0xff;
        hdr[54] = 56;
        hdr[56] = 4;
        let _ = ElfImage::parse(&hdr);
    }

    #[test]
    fn debuglink_parsing() {
        let mut b = b"abc.debug\0\0\0".to_vec();
        b.extend_from_slice(&0x1234_5678u32.to_le_bytes());
        assert_eq!(
            parse_debuglink(&b, false),
            Some(DebugLink {
                file: "abc.debug".into(),
                crc: 0x1234_5678
            })
        );
        assert_eq!(parse_debuglink(b"abc", false), None);
        assert_eq!(parse_debuglink(b"../x\0\0\0\0\0\0\0\0", false), None);
        assert_eq!(parse_debuglink(b"abc\0\x01\x02", false), None);
    }

    /// A minimal ELF64 file whose `.symtab` has one function per entry of `names`, each
    /// an offset into `strtab`.
    fn elf_with_symbols(names: &[u32], strtab: &[u8]) -> Vec<u8> {
        let symtab_off = 64usize;
        let symtab_len = 24 * (names.len() + 1);
        let strtab_off = symtab_off + symtab_len;
        let shoff = (strtab_off + strtab.len()).next_multiple_of(8);
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // 64-bit
        f[5] = 1; // little endian
        f[6] = 1;
        f[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        f[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
        f[20..24].copy_from_slice(&1u32.to_le_bytes());
        f[40..48].copy_from_slice(&(shoff as u64).to_le_bytes());
        f[52..54].copy_from_slice(&64u16.to_le_bytes());
        f[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        f[60..62].copy_from_slice(&4u16.to_le_bytes()); // e_shnum
        f[62..64].copy_from_slice(&3u16.to_le_bytes()); // e_shstrndx
        f.extend_from_slice(&[0u8; 24]); // the null symbol
        for (i, &name) in names.iter().enumerate() {
            f.extend_from_slice(&name.to_le_bytes());
            f.push(0x12); // STB_GLOBAL, STT_FUNC
            f.push(0);
            f.extend_from_slice(&1u16.to_le_bytes()); // defined
            f.extend_from_slice(&(0x1000 + i as u64).to_le_bytes());
            f.extend_from_slice(&8u64.to_le_bytes());
        }
        f.extend_from_slice(strtab);
        f.resize(shoff, 0);
        let section =
            |f: &mut Vec<u8>, ty: u32, off: usize, len: usize, link: u32, entsize: u64| {
                f.extend_from_slice(&0u32.to_le_bytes());
                f.extend_from_slice(&ty.to_le_bytes());
                f.extend_from_slice(&[0u8; 16]); // flags, addr
                f.extend_from_slice(&(off as u64).to_le_bytes());
                f.extend_from_slice(&(len as u64).to_le_bytes());
                f.extend_from_slice(&link.to_le_bytes());
                f.extend_from_slice(&1u32.to_le_bytes()); // sh_info: first global
                f.extend_from_slice(&8u64.to_le_bytes());
                f.extend_from_slice(&entsize.to_le_bytes());
            };
        section(&mut f, 0, 0, 0, 0, 0);
        section(&mut f, SHT_SYMTAB, symtab_off, symtab_len, 2, 24);
        section(
            &mut f,
            object::elf::SHT_STRTAB,
            strtab_off,
            strtab.len(),
            0,
            0,
        );
        // Section names: all empty, the string table's leading NUL.
        section(&mut f, object::elf::SHT_STRTAB, strtab_off, 1, 0, 0);
        f
    }

    #[test]
    fn symbols_sharing_one_long_name_stay_within_the_name_budget() {
        // Found by the elf_image fuzz target's heap bound: 2000 symbols naming the same
        // 60 KB string made 120 MB of names out of a 110 KB file.
        let mut strtab = vec![0u8];
        strtab.extend(std::iter::repeat_n(b'f', 60_000));
        strtab.push(0);
        let file = elf_with_symbols(&[1; 2000], &strtab);
        let image = ElfImage::parse(&file).expect("parses");
        let total: usize = image.symbols.iter().map(|s| s.name.len()).sum();
        assert!(
            total <= NAME_BYTES_PER_FILE_BYTE * file.len(),
            "{total} bytes"
        );
        assert!(!image.symbols.is_empty(), "the first names are kept");
        assert!(
            image.read_errors.iter().any(|e| e.contains("symbol names")),
            "{:?}",
            image.read_errors
        );
        // Distinct names, as real files have, are all kept.
        let mut strtab = vec![0u8];
        let mut names = Vec::new();
        for i in 0..2000 {
            names.push(strtab.len() as u32);
            strtab.extend_from_slice(format!("function_number_{i}\0").as_bytes());
        }
        let image = ElfImage::parse(&elf_with_symbols(&names, &strtab)).expect("parses");
        assert_eq!(image.symbols.len(), 2000);
        assert!(image.read_errors.is_empty(), "{:?}", image.read_errors);
    }

    #[test]
    fn real_files_are_within_the_name_budget() {
        for path in ["/proc/self/exe", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"] {
            let Ok(data) = std::fs::read(path) else {
                continue;
            };
            let image = ElfImage::parse(&data).expect("parses");
            assert!(!image.symbols.is_empty(), "{path}");
            assert!(
                image.read_errors.is_empty(),
                "{path}: {:?}",
                image.read_errors
            );
        }
    }

    #[test]
    fn truncated_files_of_this_test_binary_never_panic() {
        let exe = std::fs::read("/proc/self/exe").unwrap_or_default();
        for len in [16usize, 52, 64, 100, 1000, 4096, 65536] {
            if let Some(part) = exe.get(..len) {
                let _ = ElfImage::parse(part);
            }
        }
    }

    #[test]
    fn bias_pie_and_non_pie() {
        let maps = parse_maps(
            "55d0c8a00000-55d0c8a01000 r--p 00000000 fd:01 1234  /opt/my app/bin (x)\n\
             55d0c8a01000-55d0c8a02000 r-xp 00001000 fd:01 1234  /opt/my app/bin (x)\n",
        );
        let pie = ElfImage {
            segments: vec![
                LoadSegment {
                    vaddr: 0,
                    memsz: 0x1000,
                    offset: 0,
                    filesz: 0x1000,
                    executable: false,
                },
                LoadSegment {
                    vaddr: 0x1000,
                    memsz: 0x1000,
                    offset: 0x1000,
                    filesz: 0x1000,
                    executable: true,
                },
            ],
            ..ElfImage::default()
        };
        let bias = load_bias(&pie, maps.iter().take(2));
        assert_eq!(bias, Some(0x55d0c8a00000));
        let non_pie = ElfImage {
            segments: vec![LoadSegment {
                vaddr: 0x401000,
                memsz: 0x1000,
                offset: 0x1000,
                filesz: 0x1000,
                executable: true,
            }],
            ..ElfImage::default()
        };
        let m = parse_maps("00401000-00402000 r-xp 00001000 fd:01 7 /bin/x\n");
        assert_eq!(load_bias(&non_pie, &m), Some(0));
    }
}
