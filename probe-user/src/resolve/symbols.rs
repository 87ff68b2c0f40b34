//! Function symbols of one object as probe candidates: demangled, with aliases at one
//! address folded into one entry, and matched by exact name or glob against every
//! spelling people use (mangled, demangled, demangled without parameters).

use std::collections::{BTreeMap, HashMap};

use super::elf::{Binding, ElfImage, ElfSymbol, SymbolKind};
use super::glob::Glob;

/// C++ names longer than this are not demangled (kept mangled): bounds the demangler's
/// work on hostile input.
const MAX_DEMANGLE_LEN: usize = 16 * 1024;

/// One spelling of a function: the stored name and its demangled forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolName {
    /// As stored in the symbol table (mangled for C++ and Rust).
    pub raw: String,
    /// For display: C++ without return type but with parameters, Rust without the
    /// hash, otherwise `raw`.
    pub display: String,
    /// Further spellings that match (C++ with return type, C++ without parameters).
    pub other_keys: Vec<String>,
    pub binding: Binding,
    pub ifunc: bool,
}

impl SymbolName {
    fn new(sym: &ElfSymbol) -> Self {
        let (display, other_keys) = demangle(&sym.name);
        Self {
            raw: sym.name.clone(),
            display,
            other_keys,
            binding: sym.binding,
            ifunc: sym.kind == SymbolKind::Ifunc,
        }
    }

    /// Every spelling this name answers to.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.raw.as_str())
            .chain((self.display != self.raw).then_some(self.display.as_str()))
            .chain(self.other_keys.iter().map(String::as_str))
    }

    /// Whether `glob` matches any spelling.
    pub fn matches(&self, glob: &Glob) -> bool {
        self.keys().any(|k| glob.matches(k))
    }
}

/// Demangles `raw` into (display name, further keys). Rust first: legacy Rust symbols
/// are also valid C++ manglings, and only rustc-demangle knows to drop the hash.
pub fn demangle(raw: &str) -> (String, Vec<String>) {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        let display = format!("{d:#}");
        // v0 prints inherent methods as `<crate::Type>::method`; legacy mangling, and
        // users, write `crate::Type::method`. Answer to both.
        let keys = rust_inherent_path(&display).into_iter().collect();
        return (display, keys);
    }
    if raw.starts_with("_Z")
        && raw.len() <= MAX_DEMANGLE_LEN
        && let Ok(sym) = cpp_demangle::Symbol::new(raw)
    {
        let full = sym.demangle().ok();
        let no_ret = sym
            .demangle_with_options(&cpp_demangle::DemangleOptions::new().no_return_type())
            .ok();
        // GCC clones (`.cold`, `.constprop.0`, `.isra.0`) are not the function's
        // entry: they keep their full name but do not answer to the bare name.
        let no_params = if raw.contains('.') {
            None
        } else {
            sym.demangle_with_options(
                &cpp_demangle::DemangleOptions::new()
                    .no_params()
                    .no_return_type(),
            )
            .ok()
        };
        let display = no_ret
            .or_else(|| full.clone())
            .unwrap_or_else(|| raw.to_string());
        let mut keys: Vec<String> = Vec::new();
        for k in [full, no_params].into_iter().flatten() {
            if k != display && k != raw && !keys.contains(&k) {
                keys.push(k);
            }
        }
        return (display, keys);
    }
    (raw.to_string(), Vec::new())
}

/// `<a::B>::c` as `a::B::c`, for inherent impls only (`<a::B as Trait>::c` stays).
fn rust_inherent_path(name: &str) -> Option<String> {
    let rest = name.strip_prefix('<')?;
    let mut depth = 1usize;
    for (i, c) in rest.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    let (self_type, after) = (&rest[..i], &rest[i + 1..]);
                    return (!self_type.contains(" as ") && after.starts_with("::"))
                        .then(|| format!("{self_type}{after}"));
                }
            }
            _ => {}
        }
    }
    None
}

/// A function entry point: one address, one or more names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Virtual address (st_value).
    pub address: u64,
    pub size: u64,
    /// File offset of `address`, through an executable `PT_LOAD` segment.
    pub file_offset: u64,
    /// The preferred name: global over weak over local, then shortest, then first in
    /// byte order, so the choice is stable.
    pub name: SymbolName,
    /// The other names at this address.
    pub aliases: Vec<SymbolName>,
}

impl Function {
    /// Every name at this address, the preferred one first.
    pub fn names(&self) -> impl Iterator<Item = &SymbolName> {
        std::iter::once(&self.name).chain(self.aliases.iter())
    }

    /// Whether `glob` matches any spelling of any alias.
    pub fn matches(&self, glob: &Glob) -> bool {
        self.names().any(|n| n.matches(glob))
    }
}

/// The function table of one object, plus the addresses of data symbols (for
/// `%rip`-relative USDT arguments).
#[derive(Debug, Clone, Default)]
pub struct SymbolTable {
    /// By address, ascending.
    pub functions: Vec<Function>,
    /// Every defined symbol name (functions and data) to its address.
    addresses: HashMap<String, u64>,
}

impl SymbolTable {
    /// Builds the table from `symbols` (possibly read from a separate debug file) and
    /// `layout`, the object whose segments give file offsets.
    pub fn build<'a>(symbols: impl IntoIterator<Item = &'a ElfSymbol>, layout: &ElfImage) -> Self {
        let mut by_address: BTreeMap<u64, (u64, Vec<&'a ElfSymbol>)> = BTreeMap::new();
        let mut addresses = HashMap::new();
        for sym in symbols {
            addresses.entry(sym.name.clone()).or_insert(sym.address);
            if sym.kind == SymbolKind::Data {
                continue;
            }
            let entry = by_address.entry(sym.address).or_insert((0, Vec::new()));
            entry.0 = entry.0.max(sym.size);
            if !entry.1.iter().any(|s| s.name == sym.name) {
                entry.1.push(sym);
            }
        }
        let mut functions = Vec::with_capacity(by_address.len());
        for (address, (size, syms)) in by_address {
            // Symbols outside executable segments (broken or odd files) cannot be probed.
            let Some(file_offset) = layout.vaddr_to_offset(address, Some(true)) else {
                continue;
            };
            let mut names: Vec<SymbolName> = syms.into_iter().map(SymbolName::new).collect();
            names.sort_by(|a, b| {
                (a.binding, a.raw.len(), &a.raw).cmp(&(b.binding, b.raw.len(), &b.raw))
            });
            let mut names = names.into_iter();
            let Some(name) = names.next() else {
                continue;
            };
            functions.push(Function {
                address,
                size,
                file_offset,
                name,
                aliases: names.collect(),
            });
        }
        Self {
            functions,
            addresses,
        }
    }

    /// The functions any of whose names match `glob`.
    pub fn matching<'a>(&'a self, glob: &'a Glob) -> impl Iterator<Item = &'a Function> + 'a {
        self.functions.iter().filter(move |f| f.matches(glob))
    }

    /// Address of the symbol named `name` (raw spelling), function or data.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.addresses.get(name).copied()
    }

    /// Every display name and further key, for suggestions.
    pub fn all_names(&self) -> impl Iterator<Item = &str> {
        self.functions
            .iter()
            .flat_map(|f| f.names())
            .flat_map(|n| n.keys())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn rust_v0_inherent_methods_answer_to_the_plain_path() {
        assert_eq!(
            rust_inherent_path("<rustfix::Worker>::step").as_deref(),
            Some("rustfix::Worker::step")
        );
        assert_eq!(
            rust_inherent_path("<alloc::vec::Vec<u8>>::push").as_deref(),
            Some("alloc::vec::Vec<u8>::push")
        );
        assert_eq!(rust_inherent_path("<a::B as core::fmt::Debug>::fmt"), None);
        assert_eq!(rust_inherent_path("rustfix::trace_me"), None);
    }

    use super::*;

    #[test]
    fn cpp_spellings() {
        let (display, keys) = demangle("_Z16dispatch_command19enum_server_commandP3THDPcjb");
        assert_eq!(
            display,
            "dispatch_command(enum_server_command, THD*, char*, unsigned int, bool)"
        );
        assert_eq!(keys, vec!["dispatch_command".to_string()]);
        let (display, keys) = demangle("_ZN2ns3maxIiEET_S1_S1_");
        assert_eq!(display, "ns::max<int>(int, int)");
        assert_eq!(keys, vec!["int ns::max<int>(int, int)", "ns::max<int>"]);
    }

    #[test]
    fn clones_do_not_answer_to_the_bare_name() {
        let (display, keys) = demangle("_Z3fooi.cold");
        assert_eq!(display, "foo(int) [clone .cold]");
        assert!(keys.iter().all(|k| k != "foo"), "{keys:?}");
    }

    #[test]
    fn rust_without_hash() {
        let (display, keys) = demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE");
        assert_eq!(display, "core::ptr::drop_in_place");
        assert!(keys.is_empty());
    }

    #[test]
    fn plain_names_stay() {
        assert_eq!(demangle("main.traceMe"), ("main.traceMe".into(), vec![]));
        assert_eq!(demangle("_Zgarbage"), ("_Zgarbage".into(), vec![]));
    }
}
