//! A probe point at a site given by file and offset rather than by name: where another
//! tool's probe sits (`attach::others`), named as `probetop list` would name it.

use std::path::Path;

use super::{FunctionSpan, ProbePoint, Resolver, usdt_probe_point};
use crate::spec::ProbeKind;
use crate::sys::maps::FileId;

impl Resolver<'_> {
    /// The point at `file_offset` of `file` in the target: the USDT site whose note (or
    /// the nop5 after it) is there, else the function it falls in, as `FUNC+OFFSET`, else
    /// an unnamed point. `returns`: a return probe (at a function's entry). `None` when
    /// the target does not map `file` or it cannot be read.
    pub(crate) fn point_at(
        &self,
        file: &Path,
        file_offset: u64,
        returns: bool,
    ) -> Option<ProbePoint> {
        let id = FileId::of(file).ok()?;
        let object = self
            .scope
            .mapped_objects()
            .into_iter()
            .find(|o| o.id == Some(id))?;
        let loaded = self.objects.load(&object, &self.scope, &self.opts).ok()?;
        if !returns {
            // A USDT site is probed on its note's address; a probe one byte on (the
            // nop5 of a `nop; nop5` site, where older libbpf put it) is named as the
            // function offset it is.
            for probe in loaded.usdt().iter().flatten() {
                if probe.file_offset != file_offset {
                    continue;
                }
                let table = loaded.symbols();
                return Some(usdt_probe_point(
                    probe,
                    object.display.clone(),
                    object.attach_path.clone(),
                    loaded.load_bias,
                    |name| table.address_of(name),
                ));
            }
        }
        let table = loaded.symbols();
        let function = table
            .functions
            .iter()
            .filter(|f| f.file_offset <= file_offset && file_offset < f.file_offset + f.size.max(1))
            .max_by_key(|f| f.file_offset);
        let kind = if returns {
            ProbeKind::Uretprobe
        } else {
            ProbeKind::Uprobe
        };
        let (name, symbol, address, span) = match function {
            Some(f) => {
                let offset = file_offset - f.file_offset;
                let shown = f.name.display.clone();
                let name = if offset == 0 {
                    shown
                } else {
                    format!("{shown}+{offset:#x}")
                };
                let raw = f.name.raw.clone();
                (
                    name,
                    raw,
                    f.address + offset,
                    Some(FunctionSpan {
                        offset,
                        size: f.size,
                        inner_symbol: None,
                    }),
                )
            }
            None => {
                let address = loaded
                    .image
                    .segments
                    .iter()
                    .find(|s| s.offset <= file_offset && file_offset < s.offset + s.filesz)
                    .map_or(file_offset, |s| s.vaddr + (file_offset - s.offset));
                (format!("{file_offset:#x}"), String::new(), address, None)
            }
        };
        Some(ProbePoint {
            kind,
            object: object.display.clone(),
            attach_path: object.attach_path.clone(),
            name,
            address,
            file_offset,
            symbol,
            load_bias: loaded.load_bias,
            usdt: None,
            function: span,
            resolved: None,
            ifunc_resolver: false,
            returns: None,
        })
    }
}
