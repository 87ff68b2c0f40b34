//! Struct member offsets from the running kernel's BTF (/sys/kernel/btf/vmlinux): the
//! few the dispatch programs follow to tell a uretprobe's return from a probe hit and
//! to name the returning function ([`probe_common::DispatchOffsets`]).
//!
//! aya parses BTF too, but keeps its type lookups to itself; what is needed here is
//! small: the type section's records, their names, and struct members.

use std::collections::HashMap;

use probe_common::DispatchOffsets;

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub(crate) enum BtfError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: &'static str,
        source: std::io::Error,
    },
    #[error("not BTF, or cut short")]
    Malformed,
    #[error("unknown BTF kind {0}")]
    UnknownKind(u32),
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    #[error("the kernel's BTF has no member {member} in struct {within}")]
    NoMember { within: String, member: String },
}

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// The offsets the dispatch programs need, from this kernel's BTF.
pub(crate) fn dispatch_offsets() -> Result<DispatchOffsets, BtfError> {
    let data = std::fs::read(VMLINUX).map_err(|source| BtfError::Read {
        path: VMLINUX,
        source,
    })?;
    offsets_in(&KernelBtf::parse(&data)?)
}

fn offsets_in(btf: &KernelBtf) -> Result<DispatchOffsets, BtfError> {
    Ok(DispatchOffsets {
        task_mm: btf.member_offset("task_struct", "mm")?,
        mm_xol_area: btf.member_offset("mm_struct", "uprobes_state")?
            + btf.member_offset("uprobes_state", "xol_area")?,
        xol_vaddr: btf.member_offset("xol_area", "vaddr")?,
        task_utask: btf.member_offset("task_struct", "utask")?,
        utask_return_instances: btf.member_offset("uprobe_task", "return_instances")?,
        ri_func: btf.member_offset("return_instance", "func")?,
        valid: 1,
        _pad: 0,
    })
}

/// A member of a struct or union: name (0 for an anonymous one), type, bit offset.
#[derive(Debug, Clone, Copy)]
struct Member {
    name: u32,
    type_id: u32,
    bit_offset: u32,
}

/// The structs and unions of a BTF blob, by type id, and the ids of structs by name.
struct KernelBtf<'a> {
    strings: &'a [u8],
    /// Type id -> members, for structs and unions only.
    members: HashMap<u32, Vec<Member>>,
    structs: HashMap<&'a str, u32>,
}

impl<'a> KernelBtf<'a> {
    fn parse(data: &'a [u8]) -> Result<Self, BtfError> {
        let u16_at = |at: usize| -> Result<u16, BtfError> {
            let b = data.get(at..at + 2).ok_or(BtfError::Malformed)?;
            Ok(u16::from_le_bytes([b[0], b[1]]))
        };
        let u32_at = |at: usize| -> Result<u32, BtfError> {
            let b = data.get(at..at + 4).ok_or(BtfError::Malformed)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if u16_at(0)? != MAGIC {
            return Err(BtfError::Malformed);
        }
        let hdr_len = u32_at(4)? as usize;
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(BtfError::Malformed)?;
        let mut btf = KernelBtf {
            strings,
            members: HashMap::new(),
            structs: HashMap::new(),
        };
        let (mut at, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
        let mut id = 1u32;
        while at < end {
            let name = u32_at(at)?;
            let info = u32_at(at + 4)?;
            let (vlen, kind, kind_flag) = (
                (info & 0xffff) as usize,
                (info >> 24) & 0x1f,
                info >> 31 != 0,
            );
            at += 12;
            let extra = match kind {
                2 | 7..=12 | 16 | 18 => 0,
                1 | 14 | 17 => 4,
                3 => 12,
                KIND_STRUCT | KIND_UNION | 15 | 19 => vlen * 12,
                6 | 13 => vlen * 8,
                other => return Err(BtfError::UnknownKind(other)),
            };
            if kind == KIND_STRUCT || kind == KIND_UNION {
                let mut members = Vec::with_capacity(vlen);
                for m in 0..vlen {
                    let base = at + m * 12;
                    let offset = u32_at(base + 8)?;
                    members.push(Member {
                        name: u32_at(base)?,
                        type_id: u32_at(base + 4)?,
                        // With kind_flag, the top 8 bits are a bitfield's size.
                        bit_offset: if kind_flag {
                            offset & 0xff_ffff
                        } else {
                            offset
                        },
                    });
                }
                btf.members.insert(id, members);
                if kind == KIND_STRUCT && name != 0 {
                    // The first of a name wins: the kernel's own comes before any
                    // later duplicate.
                    let name = btf.string(name)?;
                    btf.structs.entry(name).or_insert(id);
                }
            }
            at += extra;
            id += 1;
        }
        Ok(btf)
    }

    fn string(&self, offset: u32) -> Result<&'a str, BtfError> {
        let rest = self
            .strings
            .get(offset as usize..)
            .ok_or(BtfError::Malformed)?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(BtfError::Malformed)?;
        std::str::from_utf8(&rest[..len]).map_err(|_| BtfError::Malformed)
    }

    /// Byte offset of `member` in struct `within`, looking through anonymous structs
    /// and unions (mm_struct keeps its fields in one).
    fn member_offset(&self, within: &str, member: &str) -> Result<u32, BtfError> {
        let id = *self
            .structs
            .get(within)
            .ok_or_else(|| BtfError::NoStruct(within.to_owned()))?;
        self.find(id, member, 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoMember {
                within: within.to_owned(),
                member: member.to_owned(),
            })
    }

    fn find(&self, id: u32, member: &str, depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        let members = self.members.get(&id)?;
        for m in members {
            if m.name != 0 && self.string(m.name).ok()? == member {
                return Some(m.bit_offset);
            }
        }
        members
            .iter()
            .filter(|m| m.name == 0)
            .find_map(|m| Some(m.bit_offset + self.find(m.type_id, member, depth + 1)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kernel: its BTF has every member, at offsets that fit the
    /// structures (the BPF side then reads them).
    #[test]
    fn reads_this_kernels_offsets() {
        let Ok(data) = std::fs::read(VMLINUX) else {
            eprintln!("no {VMLINUX}: skipped");
            return;
        };
        let btf = KernelBtf::parse(&data).expect("parses");
        let o = offsets_in(&btf).expect("every member");
        assert_eq!(o.valid, 1);
        // Fields that sit deep in task_struct and mm_struct, and one near the top of
        // the small return_instance (after its uprobe pointer).
        assert!(o.task_mm > 64 && o.task_utask > 64, "{o:?}");
        assert!(o.mm_xol_area > 64, "{o:?}");
        assert!(o.ri_func <= 64 && o.xol_vaddr <= 512, "{o:?}");
        assert!(matches!(
            btf.member_offset("task_struct", "no_such_member"),
            Err(BtfError::NoMember { .. })
        ));
        assert!(matches!(
            btf.member_offset("no_such_struct", "mm"),
            Err(BtfError::NoStruct(_))
        ));
    }

    #[test]
    fn refuses_what_is_not_btf() {
        assert!(matches!(
            KernelBtf::parse(b"not btf at all, really"),
            Err(BtfError::Malformed)
        ));
        assert!(matches!(KernelBtf::parse(b""), Err(BtfError::Malformed)));
    }
}
