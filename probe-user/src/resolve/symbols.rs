//! Function symbols of one object as probe candidates: demangled, with aliases at one
//! address folded into one entry, and matched by exact name or glob against every
//! spelling people use (mangled, demangled, demangled without parameters).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use super::elf::{Binding, ElfImage, ElfSymbol, SymbolKind};
use super::glob::Glob;

/// C++ names longer than this are not demangled (kept mangled): bounds the demangler's
/// work on hostile input.
const MAX_DEMANGLE_LEN: usize = 16 * 1024;
/// Longest demangled spelling kept, in bytes and in bytes per mangled byte. Back
/// references (C++ substitutions, Rust v0 backrefs) make the output exponential in the
/// input: a 200-byte hostile name demangles to megabytes, a 300-byte one to gigabytes,
/// in time to match. Real names grow at most 16x (LLVM's, measured); a spelling that
/// would be longer is abandoned as it is written, and the name stays as stored.
const MAX_DEMANGLED_LEN: usize = 64 * 1024;
const MAX_DEMANGLED_GROWTH: usize = 32;
/// Nesting the C++ demangler's parser may reach (its default is 96). It backtracks, so a
/// malformed name nested just under the limit costs time exponential in the limit: a
/// 100-byte name takes 170 ms at 96, 5 ms at 64. Of 97,770 names from libstdc++, LLVM,
/// HotSpot and bpftrace, 3 nest deeper; they stay mangled.
const CPP_PARSE_DEPTH: u32 = 64;

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
    let cap = raw
        .len()
        .saturating_mul(MAX_DEMANGLED_GROWTH)
        .min(MAX_DEMANGLED_LEN);
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        let mut display = CappedString::new(cap);
        if write!(display, "{d:#}").is_err() {
            return (raw.to_string(), Vec::new());
        }
        let display = display.out;
        if display.is_empty() {
            return (raw.to_string(), Vec::new());
        }
        // v0 prints inherent methods as `<crate::Type>::method`; legacy mangling, and
        // users, write `crate::Type::method`. Answer to both.
        let keys = rust_inherent_path(&display).into_iter().collect();
        return (display, keys);
    }
    if raw.starts_with("_Z")
        && raw.len() <= MAX_DEMANGLE_LEN
        && let Ok(sym) = cpp_demangle::Symbol::new_with_options(
            raw,
            &cpp_demangle::ParseOptions::default().recursion_limit(CPP_PARSE_DEPTH),
        )
    {
        let spell = |options: &cpp_demangle::DemangleOptions| {
            let mut out = CappedString::new(cap);
            // A name that parses but spells nothing (`_ZNE`, a nested name of no
            // parts) is no demangling: the raw name stays.
            sym.structured_demangle(&mut out, options)
                .ok()
                .map(|()| out.out)
                .filter(|spelled| !spelled.is_empty())
        };
        let full = spell(&cpp_demangle::DemangleOptions::new());
        let no_ret = spell(&cpp_demangle::DemangleOptions::new().no_return_type());
        // GCC clones (`.cold`, `.constprop.0`, `.isra.0`) are not the function's
        // entry: they keep their full name but do not answer to the bare name.
        let no_params = if raw.contains('.') {
            None
        } else {
            spell(
                &cpp_demangle::DemangleOptions::new()
                    .no_params()
                    .no_return_type(),
            )
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

/// A `String` that refuses to grow past `cap` bytes: the write fails, which makes the
/// demanglers stop at once rather than finish an exponential expansion.
struct CappedString {
    out: String,
    cap: usize,
}

impl CappedString {
    fn new(cap: usize) -> Self {
        Self {
            out: String::new(),
            cap,
        }
    }
}

impl fmt::Write for CappedString {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.out.len().saturating_add(s.len()) > self.cap {
            return Err(fmt::Error);
        }
        self.out.push_str(s);
        Ok(())
    }
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
    /// Every spelling of every function name to the functions' indices, ascending:
    /// built at the first exact-name lookup, so a thousand one-name specs cost one pass
    /// over the table instead of a glob match of every function each (~10 ms apiece on
    /// mariadbd's 19,000 functions).
    by_key: OnceLock<HashMap<String, Vec<u32>>>,
}

impl SymbolTable {
    /// Builds the table from `symbols` (possibly read from a separate debug file) and
    /// `layout`, the object whose segments give file offsets.
    pub fn build<'a>(symbols: impl IntoIterator<Item = &'a ElfSymbol>, layout: &ElfImage) -> Self {
        let mut by_address: BTreeMap<u64, (u64, Vec<&'a ElfSymbol>)> = BTreeMap::new();
        let mut addresses = HashMap::new();
        // (address, name) pairs already taken: the first of duplicates (.symtab's, as
        // it comes first) is kept. A set, not a scan of the address's list, which a file
        // with thousands of names at one address would make quadratic.
        let mut seen: HashSet<(u64, &'a str)> = HashSet::new();
        for sym in symbols {
            addresses.entry(sym.name.clone()).or_insert(sym.address);
            if sym.kind == SymbolKind::Data {
                continue;
            }
            let entry = by_address.entry(sym.address).or_insert((0, Vec::new()));
            entry.0 = entry.0.max(sym.size);
            if seen.insert((sym.address, sym.name.as_str())) {
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
            by_key: OnceLock::new(),
        }
    }

    /// The functions any of whose names match `glob`, by address.
    pub fn matching<'a>(&'a self, glob: &'a Glob) -> Box<dyn Iterator<Item = &'a Function> + 'a> {
        match glob.literal() {
            Some(name) => {
                let indices = self.by_key().get(&name).map_or(&[][..], Vec::as_slice);
                Box::new(
                    indices
                        .iter()
                        .filter_map(|&i| self.functions.get(i as usize)),
                )
            }
            None => Box::new(self.functions.iter().filter(move |f| f.matches(glob))),
        }
    }

    fn by_key(&self) -> &HashMap<String, Vec<u32>> {
        self.by_key.get_or_init(|| {
            let mut by_key: HashMap<String, Vec<u32>> = HashMap::new();
            for (i, f) in self.functions.iter().enumerate() {
                for key in f.names().flat_map(|n| n.keys()) {
                    let indices = by_key.entry(key.to_string()).or_default();
                    // Several spellings of one function land on the same key once.
                    if indices.last() != Some(&(i as u32)) {
                        indices.push(i as u32);
                    }
                }
            }
            by_key
        })
    }

    /// The first function after `address` (at a higher address).
    pub fn next_after(&self, address: u64) -> Option<&Function> {
        let at = self.functions.partition_point(|f| f.address <= address);
        self.functions.get(at)
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

    /// `_Z1f` with parameters A<A,A>, A<A<A,A>,A<A,A>>, ...: each level doubles the
    /// demangled text, 10 bytes of input per level.
    fn exponential_cpp_name(levels: usize) -> String {
        fn sub(i: usize) -> String {
            const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
            let (mut n, mut digits) = (i - 1, Vec::new());
            loop {
                digits.push(DIGITS[n % 36]);
                n /= 36;
                if n == 0 {
                    break;
                }
            }
            digits.reverse();
            format!("S{}_", String::from_utf8_lossy(&digits))
        }
        let mut name = String::from("_Z1f1AIS_S_E");
        for k in 1..levels {
            name.push_str(&format!("S_I{0}{0}E", sub(k)));
        }
        name
    }

    #[test]
    fn exponential_demanglings_are_abandoned() {
        // A few levels are a legitimate name, demangled as usual.
        let small = exponential_cpp_name(3);
        let (display, _) = demangle(&small);
        assert!(display.starts_with("f(A<A, A>"), "{display}");
        // 64 levels would be 2^64 bytes: this returns at once, the name as stored.
        let huge = exponential_cpp_name(64);
        let (display, keys) = demangle(&huge);
        assert_eq!(display, huge);
        // Without parameters it is short, and still answers to that.
        assert_eq!(keys, vec!["f".to_string()]);
        // Found by the demangle fuzz target: 389 bytes that made 5 MB of heap.
        let found = "_ZSt9use_cafetISt10money_ZNSt10fileerPDorppEvKSt2l_ZNSbIwSt11char_traitsItrsafetISt10moneypunctIwLb0EEERKT_RKSt6l_ZNSbIwSt12char_traitsItrsIcSaISt11char_traitsItrsaftraitsnctIwLb0EEERKT_RKSt6l_ZNSbIwSt12char_trastisIrtIcSaISt12char_traitrsIcSaISt11char_traitsItrsaftraitsnctIwLb0EEERKT_RKSt6l_ZNSbIwSt12char_trastisIrtsItrsaftraitsItrsafetItrsafetISt10moncSaI4_mESaocalIwEE8_eM_moveEPwPKwm";
        let (display, keys) = demangle(found);
        for s in std::iter::once(&display).chain(&keys) {
            assert!(
                s.len() <= found.len() * MAX_DEMANGLED_GROWTH,
                "{} bytes",
                s.len()
            );
        }
    }

    #[test]
    fn backtracking_names_are_refused_quickly() {
        // Found by the demangle fuzz target (a timeout): malformed names whose parse
        // backtracks at every level of nesting. 200 of them took 30 s at the
        // demangler's default depth; the parse depth limit refuses them. Their speed is
        // guarded by the fuzz run's -timeout on fuzz/regressions/demangle, not here.
        let name = format!("_ZSt1aI{}", "St1aI".repeat(16));
        assert_eq!(demangle(&name), (name.clone(), Vec::new()));
    }

    #[test]
    fn names_that_demangle_to_nothing_keep_their_raw_spelling() {
        // Found by the demangle fuzz target: `_ZNE` parses as a nested name of no parts.
        for raw in ["_ZNE", "_ZNEv"] {
            let (display, keys) = demangle(raw);
            assert!(!display.is_empty(), "{raw}");
            assert!(!keys.iter().any(String::is_empty), "{raw}: {keys:?}");
        }
        assert_eq!(demangle("_ZNE").0, "_ZNE");
    }

    #[test]
    fn many_aliases_at_one_address_are_deduplicated_in_linear_time() {
        let layout = ElfImage {
            segments: vec![crate::resolve::elf::LoadSegment {
                vaddr: 0x1000,
                memsz: 0x1000,
                offset: 0x1000,
                filesz: 0x1000,
                executable: true,
            }],
            ..ElfImage::default()
        };
        let sym = |name: String, binding| ElfSymbol {
            name,
            address: 0x1010,
            size: 8,
            kind: SymbolKind::Function,
            binding,
            table: crate::resolve::elf::SymbolTableKind::Symtab,
        };
        // Each name twice (.symtab, then .dynsym): the first is kept. 50,000 names made
        // the old scan of the address's list do over a billion comparisons.
        let n = 50_000;
        let mut symbols: Vec<ElfSymbol> = (0..n)
            .map(|i| sym(format!("f{i}"), Binding::Local))
            .collect();
        symbols.extend((0..n).map(|i| sym(format!("f{i}"), Binding::Global)));
        let table = SymbolTable::build(&symbols, &layout);
        assert_eq!(table.functions.len(), 1);
        let f = &table.functions[0];
        assert_eq!(f.names().count(), n);
        assert!(f.names().all(|name| name.binding == Binding::Local));
    }

    #[test]
    fn plain_names_stay() {
        assert_eq!(demangle("main.traceMe"), ("main.traceMe".into(), vec![]));
        assert_eq!(demangle("_Zgarbage"), ("_Zgarbage".into(), vec![]));
    }
}

#[cfg(test)]
mod lookup_tests {
    use super::*;

    /// An exact name finds what matching every function against it finds, on this test
    /// binary's own symbols (Rust, with aliases and demangled keys).
    #[test]
    fn an_exact_name_finds_what_the_scan_finds() {
        let data = std::fs::read("/proc/self/exe").expect("own executable");
        let image = ElfImage::parse(&data).expect("own ELF");
        let table = SymbolTable::build(&image.symbols, &image);
        assert!(table.functions.len() > 1000);
        let names: Vec<String> = table
            .functions
            .iter()
            .step_by(97)
            .flat_map(|f| f.names().flat_map(|n| n.keys()).map(str::to_string))
            .chain(["no_such_function_anywhere".to_string()])
            .collect();
        for name in &names {
            let glob = Glob::new(name);
            if glob.is_pattern() {
                continue;
            }
            let fast: Vec<u64> = table.matching(&glob).map(|f| f.address).collect();
            let scan: Vec<u64> = table
                .functions
                .iter()
                .filter(|f| f.matches(&glob))
                .map(|f| f.address)
                .collect();
            assert_eq!(fast, scan, "{name}");
        }
    }
}
