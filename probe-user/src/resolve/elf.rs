//! The parts of an ELF file that resolution needs, read once with `object`'s low-level
//! ELF API into plain owned data: loadable segments, symbols, USDT notes and the links
//! to separate debug info.
//!
//! Files are untrusted input: every offset and size is checked, names are capped, and a
//! malformed part is reported or skipped rather than trusted.

use object::elf::{
    NT_GNU_BUILD_ID, PF_X, PT_LOAD, SHN_UNDEF, SHT_DYNSYM, SHT_NOBITS, SHT_NOTE, SHT_SYMTAB,
    STB_GLOBAL, STB_LOCAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC, STT_OBJECT, STT_TLS,
};
use object::read::elf::{FileHeader, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::{Endianness, FileKind};

/// Longest symbol name kept; longer ones are skipped as garbage.
const MAX_NAME_LEN: usize = 64 * 1024;

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
    pub stapsdt_notes: Vec<RawStapsdtNote>,
    /// Problems met while reading notes (truncated or malformed): reported, not fatal.
    pub note_errors: Vec<String>,
    /// Built by the Go toolchain (it has `.go.buildinfo` or `.gopclntab`).
    pub is_go: bool,
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
    for (table_kind, sh_type) in [
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
            image.symbols.push(ElfSymbol {
                name: String::from_utf8_lossy(name).into_owned(),
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
                        .note_errors
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
                        .note_errors
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn truncated_files_of_this_test_binary_never_panic() {
        let exe = std::fs::read("/proc/self/exe").unwrap_or_default();
        for len in [16usize, 52, 64, 100, 1000, 4096, 65536] {
            if let Some(part) = exe.get(..len) {
                let _ = ElfImage::parse(part);
            }
        }
    }
}
