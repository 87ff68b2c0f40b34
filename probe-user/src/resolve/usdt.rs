//! USDT probes from `.note.stapsdt` notes (SystemTap SDT, `sys/sdt.h`).
//!
//! Each note (owner `stapsdt`, type 3) describes one probe site:
//! `pc, base, semaphore` (address-sized, in the file's byte order), then three
//! NUL-terminated strings: provider, name, arguments. `pc` and `semaphore` are link-time
//! addresses; if the file was prelinked, they moved by `.stapsdt.base`'s address minus
//! the note's `base`, so, like libbpf and bcc, we add that difference.

use super::elf::ElfImage;
use super::usdt_args::{UsdtArg, UsdtArgError, parse_args};

/// One decoded note, before address translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtNote {
    pub provider: String,
    pub name: String,
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    pub args: String,
}

/// Why a note cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsdtNoteError {
    #[error("stapsdt note descriptor is {0} bytes, shorter than its three addresses")]
    Short(usize),
    #[error("stapsdt note is missing the NUL after its {0}")]
    Unterminated(&'static str),
    #[error("stapsdt note has an empty {0}")]
    Empty(&'static str),
    #[error("{provider}:{name}: probe address {pc:#x} is in no executable segment")]
    PcOutsideText {
        provider: String,
        name: String,
        pc: u64,
    },
    #[error("{provider}:{name}: semaphore {address:#x} is in no writable file-backed segment")]
    SemaphoreOutsideData {
        provider: String,
        name: String,
        address: u64,
    },
    /// The kernel adds 1 to a semaphore while the probe is attached: anywhere but the
    /// `.probes` section (where sys/sdt.h and usdt.h put them) that may be a live
    /// variable of the program.
    #[error(
        "{provider}:{name}: semaphore {address:#x} is {why}, where sys/sdt.h and usdt.h put semaphores: the kernel would add 1 to whatever lives there while the probe is attached"
    )]
    SemaphoreOutsideProbes {
        provider: String,
        name: String,
        address: u64,
        why: &'static str,
    },
}

/// Decodes a note descriptor of an ELF file of the given class and byte order.
pub fn decode_note(desc: &[u8], is_64: bool, big_endian: bool) -> Result<UsdtNote, UsdtNoteError> {
    let width = if is_64 { 8 } else { 4 };
    let read = |i: usize| -> Option<u64> {
        let bytes = desc.get(i * width..(i + 1) * width)?;
        let mut buf = [0u8; 8];
        if big_endian {
            buf.get_mut(8 - width..)?.copy_from_slice(bytes);
            Some(u64::from_be_bytes(buf))
        } else {
            buf.get_mut(..width)?.copy_from_slice(bytes);
            Some(u64::from_le_bytes(buf))
        }
    };
    let (Some(pc), Some(base), Some(semaphore)) = (read(0), read(1), read(2)) else {
        return Err(UsdtNoteError::Short(desc.len()));
    };
    let mut rest = desc.get(3 * width..).unwrap_or_default();
    let mut string = |what: &'static str| -> Result<String, UsdtNoteError> {
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(UsdtNoteError::Unterminated(what))?;
        let s = String::from_utf8_lossy(rest.get(..nul).unwrap_or_default()).into_owned();
        rest = rest.get(nul + 1..).unwrap_or_default();
        Ok(s)
    };
    let provider = string("provider")?;
    let name = string("name")?;
    let args = string("arguments")?;
    if provider.is_empty() {
        return Err(UsdtNoteError::Empty("provider"));
    }
    if name.is_empty() {
        return Err(UsdtNoteError::Empty("name"));
    }
    Ok(UsdtNote {
        provider,
        name,
        pc,
        base,
        semaphore,
        args,
    })
}

/// A USDT probe site with its addresses translated to file offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtProbe {
    pub provider: String,
    pub name: String,
    /// Link-time address of the site (after prelink adjustment).
    pub address: u64,
    /// File offset of the site, where the uprobe goes.
    pub file_offset: u64,
    /// Link-time address of the semaphore, if the probe has one.
    pub semaphore_address: Option<u64>,
    /// File offset of the semaphore: the kernel's `ref_ctr_offset`.
    pub semaphore_offset: Option<u64>,
    /// The argument string as stored.
    pub args_raw: String,
    /// The parsed arguments, or why they do not parse (the site is still probe-able).
    pub args: Result<Vec<UsdtArg>, UsdtArgError>,
}

/// What a note's site must hold on x86-64: sys/sdt.h emits a one-byte `nop`, libbpf/usdt's
/// usdt.h a `nop` or a 5-byte `nopl 0x0(%rax,%rax,1)` (its `nop; nop5` form from Dec
/// 2025 to May 2026 has its note on the nop). Anything else means the note is wrong (a
/// bit flip, a broken build tool): a breakpoint there would rewrite live code.
pub const SITE_FORMS: [&[u8]; 2] = [&[0x90], &[0x0f, 0x1f, 0x44, 0x00, 0x00]];

/// Every probe site of `image`, or for each bad note why it is bad.
pub fn probes(image: &ElfImage) -> Vec<Result<UsdtProbe, UsdtNoteError>> {
    image
        .stapsdt_notes
        .iter()
        .map(|raw| {
            let note = decode_note(&raw.desc, image.is_64, image.big_endian)?;
            translate(image, note)
        })
        .collect()
}

fn translate(image: &ElfImage, note: UsdtNote) -> Result<UsdtProbe, UsdtNoteError> {
    // Prelink moved the file by (section address - recorded base); only when both exist.
    let shift = match image.stapsdt_base {
        Some(section) if section != 0 && note.base != 0 => section.wrapping_sub(note.base),
        _ => 0,
    };
    let address = note.pc.wrapping_add(shift);
    let file_offset =
        image
            .vaddr_to_offset(address, Some(true))
            .ok_or_else(|| UsdtNoteError::PcOutsideText {
                provider: note.provider.clone(),
                name: note.name.clone(),
                pc: address,
            })?;
    let (semaphore_address, semaphore_offset) = if note.semaphore == 0 {
        (None, None)
    } else {
        let sem = note.semaphore.wrapping_add(shift);
        let off = image.vaddr_to_offset(sem, Some(false)).ok_or_else(|| {
            UsdtNoteError::SemaphoreOutsideData {
                provider: note.provider.clone(),
                name: note.name.clone(),
                address: sem,
            }
        })?;
        let why = match &image.probes_section {
            None => Some("in an object without a .probes section, not a 2-byte counter in .probes"),
            Some(probes) if !probes.contains(&sem) || !probes.contains(&(sem | 1)) => {
                Some("outside the .probes section, not a 2-byte counter in .probes")
            }
            Some(_) if sem % 2 != 0 => Some("not 2-byte aligned, not a counter in .probes"),
            Some(_) => None,
        };
        if let Some(why) = why {
            return Err(UsdtNoteError::SemaphoreOutsideProbes {
                provider: note.provider,
                name: note.name,
                address: sem,
                why,
            });
        }
        (Some(sem), Some(off))
    };
    // Argument strings are assembler operands: only x86-64's are understood.
    let args = if image.machine == object::elf::EM_X86_64 {
        parse_args(&note.args)
    } else {
        Err(UsdtArgError::UnsupportedMachine(image.machine))
    };
    Ok(UsdtProbe {
        provider: note.provider,
        name: note.name,
        address,
        file_offset,
        semaphore_address,
        semaphore_offset,
        args_raw: note.args,
        args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::resolve::elf::{LoadSegment, RawStapsdtNote};

    fn desc64(pc: u64, base: u64, sem: u64, strings: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        for v in [pc, base, sem] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(strings);
        d
    }

    #[test]
    fn decodes_both_classes_and_orders() {
        let d = desc64(0x1139, 0x2004, 0x4010, b"prov\0name\0-4@%edi 8@$1\0");
        let n = decode_note(&d, true, false).expect("decode");
        assert_eq!(
            (n.provider.as_str(), n.name.as_str(), n.args.as_str()),
            ("prov", "name", "-4@%edi 8@$1")
        );
        assert_eq!((n.pc, n.base, n.semaphore), (0x1139, 0x2004, 0x4010));

        let mut d32 = Vec::new();
        for v in [0x8048000u32, 0x8049000, 0] {
            d32.extend_from_slice(&v.to_be_bytes());
        }
        d32.extend_from_slice(b"p\0n\0\0");
        let n = decode_note(&d32, false, true).expect("decode32");
        assert_eq!((n.pc, n.base, n.semaphore), (0x8048000, 0x8049000, 0));
        assert_eq!(n.args, "");
    }

    #[test]
    fn truncated_and_garbage_notes_are_errors() {
        let full = desc64(1, 2, 3, b"prov\0name\0args\0");
        for len in 0..full.len() {
            assert!(
                decode_note(full.get(..len).unwrap_or_default(), true, false).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
        assert_eq!(
            decode_note(&desc64(1, 2, 3, b"\0name\0\0"), true, false),
            Err(UsdtNoteError::Empty("provider"))
        );
        assert_eq!(
            decode_note(&desc64(1, 2, 3, b"p\0\0\0"), true, false),
            Err(UsdtNoteError::Empty("name"))
        );
        // Bytes that are not UTF-8 are kept, lossily, not refused.
        assert!(decode_note(&desc64(1, 2, 3, b"\xff\0\xfe\0\xfd\0"), true, false).is_ok());
    }

    #[test]
    fn prelink_adjustment_and_offsets() {
        let image = ElfImage {
            is_64: true,
            machine: object::elf::EM_X86_64,
            segments: vec![
                LoadSegment {
                    vaddr: 0x1000,
                    memsz: 0x1000,
                    offset: 0x1000,
                    filesz: 0x1000,
                    executable: true,
                },
                LoadSegment {
                    vaddr: 0x3df0,
                    memsz: 0x300,
                    offset: 0x2df0,
                    filesz: 0x250,
                    executable: false,
                },
            ],
            stapsdt_base: Some(0x2004 + 0x10),
            probes_section: Some(0x4000..0x4030),
            stapsdt_notes: vec![
                RawStapsdtNote {
                    desc: desc64(0x1130, 0x2004, 0x4010, b"p\0a\0-4@%edi\0"),
                },
                RawStapsdtNote {
                    desc: desc64(0x9999, 0x2004, 0, b"p\0b\0\0"),
                },
                RawStapsdtNote {
                    desc: desc64(0x1130, 0x2004, 0x1200, b"p\0c\0\0"),
                },
                RawStapsdtNote {
                    desc: desc64(0x1130, 0, 0, b"p\0d\0bogus\0"),
                },
                // In the data segment but not in .probes (a live variable), and in
                // .probes but odd.
                RawStapsdtNote {
                    desc: desc64(0x1130, 0x2004, 0x3e00, b"p\0e\0\0"),
                },
                RawStapsdtNote {
                    desc: desc64(0x1130, 0x2004, 0x4011, b"p\0f\0\0"),
                },
            ],
            ..ElfImage::default()
        };
        let got = probes(&image);
        let a = got[0].as_ref().expect("a");
        assert_eq!((a.address, a.file_offset), (0x1140, 0x1140));
        assert_eq!(a.semaphore_address, Some(0x4020));
        assert_eq!(a.semaphore_offset, Some(0x4020 - 0x3df0 + 0x2df0));
        assert!(matches!(got[1], Err(UsdtNoteError::PcOutsideText { .. })));
        assert!(matches!(
            got[2],
            Err(UsdtNoteError::SemaphoreOutsideData { .. })
        ));
        let d = got[3].as_ref().expect("d");
        // No base in the note: no adjustment.
        assert_eq!(d.address, 0x1130);
        assert!(d.args.is_err());
        let outside = got[4].as_ref().expect_err("e");
        assert!(
            outside
                .to_string()
                .starts_with("p:e: semaphore 0x3e10 is outside the .probes section"),
            "{outside}"
        );
        assert!(matches!(
            got[5],
            Err(UsdtNoteError::SemaphoreOutsideProbes {
                why: "not 2-byte aligned, not a counter in .probes",
                ..
            })
        ));
        // Without a .probes section no semaphore is accepted.
        let bare = ElfImage {
            probes_section: None,
            ..image.clone()
        };
        assert!(matches!(
            probes(&bare)[0],
            Err(UsdtNoteError::SemaphoreOutsideProbes { .. })
        ));
        let arm = ElfImage {
            machine: object::elf::EM_AARCH64,
            ..image
        };
        assert_eq!(
            probes(&arm)[0].as_ref().map(|p| p.args.clone()),
            Ok(Err(UsdtArgError::UnsupportedMachine(
                object::elf::EM_AARCH64
            )))
        );
    }
}
