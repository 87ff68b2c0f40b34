//! Probe specs as users write them: `uprobe:[OBJECT:]FUNC[+OFFSET|+ret]`,
//! `uretprobe:[OBJECT:]FUNC`, `usdt:[OBJECT:][PROVIDER:]NAME`.
//!
//! `uprobe:FUNC+ret` probes every `ret` instruction of FUNC: its normal returns, counted
//! in one row, without the return address a uretprobe replaces (which an exception
//! unwinding through FUNC cannot pass).
//!
//! OBJECT is an absolute path or a library name (`libc`); FUNC and NAME may be globs.
//! C++ names contain `::`, so only a single `:` separates fields. OFFSET (`0x4` or `4`)
//! puts a uprobe on a later instruction of one function; the resolver checks that it is
//! an instruction boundary inside the function.

use std::fmt;

mod key;

pub(crate) use key::{KeyFormat, KeySpec, split_key};

/// What fires the probe.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// Function entry.
    Uprobe,
    /// Function return.
    Uretprobe,
    /// A statically defined tracepoint (`.note.stapsdt`).
    Usdt,
}

impl ProbeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Uprobe => "uprobe",
            ProbeKind::Uretprobe => "uretprobe",
            ProbeKind::Usdt => "usdt",
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One parsed `-e` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The text as the user wrote it.
    pub text: String,
    pub kind: ProbeKind,
    /// Absolute path or library name; `None`: the main executable (uprobes) or every
    /// mapped object (usdt).
    pub object: Option<String>,
    /// USDT provider; `None` matches any.
    pub provider: Option<String>,
    /// Function (uprobes) or probe name (usdt), possibly a glob.
    pub name: String,
    /// Bytes past the function's entry (`uprobe:FUNC+OFFSET`); `None`: the entry.
    pub offset: Option<u64>,
    /// `uprobe:FUNC+ret`: at each `ret` instruction of the function, not its entry.
    pub at_returns: bool,
    /// One half of a `latency:` spec, whose hits are paired with the other half's.
    pub pair: Option<PairRole>,
    /// ` key=argN[:FORMAT]`: the row is split by this argument's value.
    pub key: Option<KeySpec>,
}

/// Which half of a `latency:` spec a probe is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PairRole {
    /// The function's entry, or the first USDT probe (`START`).
    Start,
    /// The function's returns, or the second USDT probe (`END`).
    End,
}

/// `latency:[OBJECT:]FUNC` or `latency:[OBJECT:][PROVIDER:]START,END`: its two probes,
/// each a [`ProbeSpec`] whose `pair` says which half it is and whose `text` is the
/// latency spec's. A function's end is a uretprobe here; the session makes it a
/// `+ret` probe where a uretprobe is unsafe.
pub fn parse_latency(full: &str) -> Result<[ProbeSpec; 2], SpecError> {
    let (text, key) = key::split_key(full);
    let key = parse_key(full, key)?;
    let full_trimmed = full.trim();
    let trimmed = text.trim();
    let lead = text.len() - text.trim_start().len();
    let rest = trimmed
        .strip_prefix(LATENCY)
        .and_then(|r| r.strip_prefix(':'))
        .unwrap_or("");
    let rest_at = lead + LATENCY.len() + 1;
    // Errors of the halves point into the text as the user wrote it.
    let relocate = |e: SpecError, kind_len: usize| SpecError {
        text: trimmed.to_string(),
        reason: e.reason,
        at: (e.at + rest_at).saturating_sub(kind_len + 1),
        len: e.len,
    };
    let with_role = |mut spec: ProbeSpec, role| {
        spec.text = full_trimmed.to_string();
        spec.pair = Some(role);
        spec.key = key;
        spec
    };
    let (head, last) = match rest.rfind(':') {
        Some(at) if !rest[..at].ends_with(':') && !rest[at + 1..].is_empty() => {
            (&rest[..=at], &rest[at + 1..])
        }
        _ => ("", rest),
    };
    if let Some((start, end)) = last.split_once(',') {
        if start.is_empty() || end.is_empty() || end.contains(',') {
            return Err(SpecError::new(
                text,
                "a USDT pair is latency:[OBJECT:][PROVIDER:]START,END: two probe names",
                rest_at + head.len(),
                last.len().max(1),
            ));
        }
        let start = ProbeSpec::parse(&format!("usdt:{head}{start}")).map_err(|e| relocate(e, 4))?;
        let end = ProbeSpec::parse(&format!("usdt:{head}{end}")).map_err(|e| relocate(e, 4))?;
        return Ok([
            with_role(start, PairRole::Start),
            with_role(end, PairRole::End),
        ]);
    }
    let entry = ProbeSpec::parse(&format!("uprobe:{rest}")).map_err(|e| relocate(e, 6))?;
    if entry.offset.is_some() || entry.at_returns {
        return Err(SpecError::new(
            text,
            "latency takes a function, without +OFFSET or +ret: it probes the entry and the returns itself",
            rest_at,
            rest.len().max(1),
        ));
    }
    let mut exit = entry.clone();
    exit.kind = ProbeKind::Uretprobe;
    Ok([
        with_role(entry, PairRole::Start),
        with_role(exit, PairRole::End),
    ])
}

/// The kind word of a `latency:` spec.
pub(crate) const LATENCY: &str = "latency";

/// Whether `text` is a `latency:` spec.
pub fn is_latency(text: &str) -> bool {
    text.trim_start()
        .strip_prefix(LATENCY)
        .is_some_and(|r| r.starts_with(':'))
}

/// A spec that does not parse, with the byte range of the bad part for a caret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}\n  {}", caret_lines(.text, *.at, *.len))]
pub struct SpecError {
    pub text: String,
    pub reason: String,
    pub at: usize,
    pub len: usize,
}

/// Bytes of a spec echoed in an error at most: a spec of 100,000 characters is shown as
/// the part around its caret.
pub(crate) const ECHO_BYTES: usize = 100;

/// The spec and a caret line under bytes `at..at + len`; a long spec is cut to
/// [`ECHO_BYTES`] around the caret, `…` marking what was left out.
fn caret_lines(text: &str, at: usize, len: usize) -> String {
    if text.len() <= ECHO_BYTES {
        return format!("{text}\n  {}{}", " ".repeat(at), "^".repeat(len.max(1)));
    }
    let floor = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = floor(at.saturating_sub(ECHO_BYTES / 2));
    let end = floor(start + ECHO_BYTES);
    let (before, after) = (
        if start > 0 { "…" } else { "" },
        if end < text.len() { "…" } else { "" },
    );
    let column = at.saturating_sub(start) + usize::from(start > 0);
    let carets = len.max(1).min(end.saturating_sub(at).max(1));
    format!(
        "{before}{}{after} ({} bytes)\n  {}{}",
        &text[start..end],
        text.len(),
        " ".repeat(column),
        "^".repeat(carets)
    )
}

/// `text` cut to `max` bytes (at a character boundary) with `…` and its length when
/// longer, for errors that name a spec or a name taken from input.
pub(crate) fn shorten(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len()).into()
}

impl SpecError {
    fn new(text: &str, reason: impl Into<String>, at: usize, len: usize) -> Self {
        Self {
            text: text.to_string(),
            reason: reason.into(),
            at,
            len,
        }
    }
}

/// Splits at the first `:` that is not half of a `::`, returning (before, after).
fn split_single_colon(s: &str) -> Option<(&str, &str)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b':' {
            if bytes.get(i + 1) == Some(&b':') {
                i += 2;
                continue;
            }
            return Some((&s[..i], &s[i + 1..]));
        }
        i += 1;
    }
    None
}

/// Whether a field before a single `:` names an object rather than a function.
fn looks_like_object(field: &str) -> bool {
    field.starts_with('/') || field.starts_with("lib") || field.contains(".so")
}

/// Splits `FUNC+OFFSET` into FUNC and the offset text (what follows the last `+`).
/// A `+` of a C++ operator name (`operator+`, `operator++`, `operator+=`) is part of
/// the name, unless a digit follows it: `operator++0x4` is `operator+` at +0x4.
fn split_offset(func: &str) -> Option<(&str, &str)> {
    let plus = func.rfind('+')?;
    let (name, offset) = (&func[..plus], &func[plus + 1..]);
    let digit_follows = offset.starts_with(|c: char| c.is_ascii_digit());
    if !digit_follows && offset != RET && name.trim_end_matches('+').ends_with("operator") {
        return None;
    }
    Some((name, offset))
}

/// What follows `+` in `uprobe:FUNC+ret`.
const RET: &str = "ret";

/// `0x` and hex digits in place of a function name: an address (no C or C++ name
/// starts with a digit).
fn parse_address(name: &str) -> Option<u64> {
    let hex = name
        .strip_prefix("0x")
        .or_else(|| name.strip_prefix("0X"))?;
    u64::from_str_radix(hex, 16).ok()
}

/// An offset as written after `+`: `0x` and hex digits, or decimal digits.
fn parse_offset(text: &str) -> Result<u64, &'static str> {
    const FORM: &str = "an offset is 0x and hex digits, or decimal digits: FUNC+0x10 or FUNC+16";
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(FORM);
    }
    u64::from_str_radix(digits, radix).map_err(|_| "the offset does not fit in 64 bits")
}

/// The key of a spec's ` key=` suffix, parsed; an error points at it in `full`.
fn parse_key(full: &str, key: Option<(&str, usize)>) -> Result<Option<KeySpec>, SpecError> {
    key.map(|(key, at)| {
        KeySpec::parse(key).map_err(|reason| SpecError::new(full, reason, at, key.len().max(1)))
    })
    .transpose()
}

impl ProbeSpec {
    pub fn parse(full: &str) -> Result<Self, SpecError> {
        let (text, key) = key::split_key(full);
        let key = parse_key(full, key)?;
        let full_trimmed = full.trim();
        let trimmed = text.trim();
        let offset = text.len() - text.trim_start().len();
        let Some((kind_str, rest)) = trimmed.split_once(':') else {
            return Err(SpecError::new(
                text,
                "a probe spec is KIND:TARGET, for example uprobe:my_func, uretprobe:libc:malloc or usdt:provider:name",
                offset,
                trimmed.len(),
            ));
        };
        let kind = match kind_str {
            "uprobe" | "u" => ProbeKind::Uprobe,
            "uretprobe" | "ur" => ProbeKind::Uretprobe,
            "usdt" | "U" => ProbeKind::Usdt,
            other => {
                return Err(SpecError::new(
                    text,
                    format!("unknown probe kind {other:?}: use uprobe, uretprobe, usdt or latency"),
                    offset,
                    kind_str.len().max(1),
                ));
            }
        };
        let rest_at = offset + kind_str.len() + 1;
        if rest.is_empty() {
            return Err(SpecError::new(
                text,
                format!("{kind} needs a target after the colon"),
                rest_at,
                1,
            ));
        }
        let (object, provider, name) = match kind {
            ProbeKind::Uprobe | ProbeKind::Uretprobe => match split_single_colon(rest) {
                Some((object, func)) if looks_like_object(object) => {
                    (Some(object.to_string()), None, func)
                }
                Some((first, _)) => {
                    return Err(SpecError::new(
                        text,
                        format!(
                            "{first:?} is not an object: give an absolute path or a library name (libfoo)"
                        ),
                        rest_at,
                        first.len().max(1),
                    ));
                }
                None => (None, None, rest),
            },
            ProbeKind::Usdt => {
                let fields: Vec<&str> = rest.split(':').collect();
                match fields.as_slice() {
                    [name] => (None, None, *name),
                    [first, name] if looks_like_object(first) && first.starts_with('/') => {
                        (Some(first.to_string()), None, *name)
                    }
                    [provider, name] => (None, Some(provider.to_string()), *name),
                    [object, provider, name] => {
                        (Some(object.to_string()), Some(provider.to_string()), *name)
                    }
                    _ => {
                        return Err(SpecError::new(
                            text,
                            "usdt takes at most OBJECT:PROVIDER:NAME",
                            rest_at,
                            rest.len(),
                        ));
                    }
                }
            }
        };
        let name_at = offset + trimmed.len() - name.len();
        let (name, func_offset, at_returns) = match kind {
            ProbeKind::Uprobe | ProbeKind::Uretprobe => match split_offset(name) {
                Some((func, digits)) => {
                    let plus_at = name_at + func.len();
                    if kind == ProbeKind::Uretprobe {
                        return Err(SpecError::new(
                            text,
                            "a uretprobe takes no +OFFSET: a return probe starts at the function's entry (uprobe:FUNC+ret probes its ret instructions)",
                            plus_at,
                            name.len() - func.len(),
                        ));
                    }
                    if digits == RET {
                        (func, None, true)
                    } else {
                        let value = parse_offset(digits).map_err(|reason| {
                            SpecError::new(text, reason, plus_at + 1, digits.len())
                        })?;
                        if func.contains(['*', '?', '[']) {
                            return Err(SpecError::new(
                                text,
                                "an offset applies to one function, not a pattern",
                                name_at,
                                func.len(),
                            ));
                        }
                        (func, Some(value), false)
                    }
                }
                None => (name, None, false),
            },
            ProbeKind::Usdt => (name, None, false),
        };
        if name.is_empty() {
            return Err(SpecError::new(
                text,
                format!("{kind} needs a name after the last colon"),
                name_at,
                1,
            ));
        }
        if kind != ProbeKind::Usdt
            && parse_address(name).is_some()
            && (func_offset.is_some() || at_returns)
        {
            return Err(SpecError::new(
                text,
                "an address takes no +OFFSET or +ret: write the instruction's own address",
                name_at,
                trimmed.len() + offset - name_at,
            ));
        }
        if let Some(object) = &object
            && object.is_empty()
        {
            return Err(SpecError::new(text, "empty object name", rest_at, 1));
        }
        if let Some(bad) = name.find(|c: char| c.is_whitespace()) {
            return Err(SpecError::new(
                text,
                "names have no spaces",
                name_at + bad,
                1,
            ));
        }
        Ok(ProbeSpec {
            text: full_trimmed.to_string(),
            kind,
            object,
            provider,
            name: name.to_string(),
            offset: func_offset,
            at_returns,
            pair: None,
            key,
        })
    }

    /// `uprobe:[OBJECT:]0xADDR`: the address written in place of a function name, a
    /// virtual address of the object as `probetop list` and objdump show it.
    pub fn address(&self) -> Option<u64> {
        if self.kind == ProbeKind::Usdt {
            return None;
        }
        parse_address(&self.name)
    }

    /// Whether `name` uses glob characters (`*`, `?`, `[`).
    pub fn is_glob(&self) -> bool {
        self.name.contains(['*', '?', '['])
    }
}

impl fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> ProbeSpec {
        ProbeSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_latency_spec_is_an_entry_and_a_return() {
        let [start, end] = parse_latency("latency:libc:malloc").expect("parses");
        assert_eq!(
            (start.kind, start.object.as_deref(), start.name.as_str()),
            (ProbeKind::Uprobe, Some("libc"), "malloc")
        );
        assert_eq!(
            (end.kind, end.name.as_str()),
            (ProbeKind::Uretprobe, "malloc")
        );
        assert_eq!(
            (start.pair, end.pair, start.text.as_str()),
            (
                Some(PairRole::Start),
                Some(PairRole::End),
                "latency:libc:malloc"
            )
        );
        let [start, end] =
            parse_latency("latency:postgresql:query__start,query__done").expect("parses");
        assert_eq!(
            (start.kind, start.provider.as_deref(), start.name.as_str()),
            (ProbeKind::Usdt, Some("postgresql"), "query__start")
        );
        assert_eq!(
            (end.kind, end.name.as_str()),
            (ProbeKind::Usdt, "query__done")
        );
        let [start, _] = parse_latency("latency:/usr/bin/x:p:a,b").expect("parses");
        assert_eq!(
            (start.object.as_deref(), start.provider.as_deref()),
            (Some("/usr/bin/x"), Some("p"))
        );
        assert!(is_latency(" latency:f") && !is_latency("uprobe:latency"));
    }

    #[test]
    fn a_bad_latency_spec_says_what_to_write() {
        let e = parse_latency("latency:f+ret").expect_err("+ret");
        assert!(e.reason.contains("without +OFFSET"), "{e}");
        let e = parse_latency("latency:a,").expect_err("half a pair");
        assert!(e.reason.contains("START,END"), "{e}");
        let e = parse_latency("latency:").expect_err("empty");
        assert_eq!(e.text, "latency:");
        assert_eq!(e.at, 8, "{e}");
    }

    #[test]
    fn plain_uprobe_and_uretprobe() {
        let s = ok("uprobe:work_unit");
        assert_eq!(
            (
                s.kind,
                s.object.as_deref(),
                s.provider.as_deref(),
                s.name.as_str()
            ),
            (ProbeKind::Uprobe, None, None, "work_unit")
        );
        let s = ok("uretprobe:leaf_ret");
        assert_eq!(
            (s.kind, s.name.as_str()),
            (ProbeKind::Uretprobe, "leaf_ret")
        );
    }

    #[test]
    fn object_forms() {
        let s = ok("uprobe:libc:malloc");
        assert_eq!(
            (s.object.as_deref(), s.name.as_str()),
            (Some("libc"), "malloc")
        );
        let s = ok("uretprobe:/usr/sbin/mariadbd:do_command");
        assert_eq!(s.object.as_deref(), Some("/usr/sbin/mariadbd"));
        let s = ok("uprobe:libstdc++:std::terminate");
        assert_eq!(
            (s.object.as_deref(), s.name.as_str()),
            (Some("libstdc++"), "std::terminate")
        );
    }

    #[test]
    fn cpp_names_keep_double_colons() {
        let s = ok("uprobe:THD::*");
        assert_eq!((s.object.as_deref(), s.name.as_str()), (None, "THD::*"));
        assert!(s.is_glob());
        let s = ok("uprobe:ns::Class::method");
        assert_eq!(s.name, "ns::Class::method");
    }

    #[test]
    fn usdt_forms() {
        let s = ok("usdt:tick");
        assert_eq!(
            (s.object, s.provider, s.name.as_str()),
            (None, None, "tick")
        );
        let s = ok("usdt:fixture:tick");
        assert_eq!(
            (s.provider.as_deref(), s.name.as_str()),
            (Some("fixture"), "tick")
        );
        let s = ok("usdt:/opt/app:tick");
        assert_eq!(
            (s.object.as_deref(), s.provider.as_deref()),
            (Some("/opt/app"), None)
        );
        let s = ok("usdt:libstdc++:libstdcxx:throw");
        assert_eq!(
            (s.object.as_deref(), s.provider.as_deref(), s.name.as_str()),
            (Some("libstdc++"), Some("libstdcxx"), "throw")
        );
    }

    #[test]
    fn bad_specs_point_at_the_bad_part() {
        let e = ProbeSpec::parse("kprobe:foo").unwrap_err();
        assert_eq!((e.at, e.len), (0, 6));
        assert!(e.to_string().contains("unknown probe kind"));
        assert!(e.to_string().ends_with("  ^^^^^^"), "{e}");

        let e = ProbeSpec::parse("uprobe:").unwrap_err();
        assert_eq!(e.at, 7);
        let e = ProbeSpec::parse("work_unit").unwrap_err();
        assert!(e.reason.contains("KIND:TARGET"));
        let e = ProbeSpec::parse("uprobe:libc:").unwrap_err();
        assert_eq!(e.at, 12);
        let e = ProbeSpec::parse("uprobe:foo:bar").unwrap_err();
        assert_eq!((e.at, e.len), (7, 3));
        let e = ProbeSpec::parse("usdt:a:b:c:d").unwrap_err();
        assert!(e.reason.contains("at most"));
        let e = ProbeSpec::parse("uprobe:foo bar").unwrap_err();
        assert_eq!(e.at, 10);
    }

    #[test]
    fn offsets_in_hex_and_decimal() {
        let s = ok("uprobe:work_unit+0x4");
        assert_eq!(
            (s.name.as_str(), s.offset, s.object.as_deref()),
            ("work_unit", Some(4), None)
        );
        assert_eq!(s.text, "uprobe:work_unit+0x4");
        assert_eq!(ok("uprobe:work_unit+16").offset, Some(16));
        assert_eq!(ok("u:work_unit+0X1f").offset, Some(0x1f));
        assert_eq!(ok("uprobe:work_unit+0").offset, Some(0));
        assert_eq!(ok("uprobe:work_unit").offset, None);
        let s = ok("uprobe:/usr/sbin/mariadbd:mysqld_stmt_execute+0x3");
        assert_eq!(
            (s.object.as_deref(), s.name.as_str(), s.offset),
            (Some("/usr/sbin/mariadbd"), "mysqld_stmt_execute", Some(3))
        );
        let s = ok("uprobe:libc:malloc+0x4");
        assert_eq!(
            (s.object.as_deref(), s.name.as_str(), s.offset),
            (Some("libc"), "malloc", Some(4))
        );
        let s = ok("uprobe:ns::Class::method+8");
        assert_eq!((s.name.as_str(), s.offset), ("ns::Class::method", Some(8)));
        // USDT names take no offset: a `+` stays in the name.
        assert_eq!(ok("usdt:p:a+1").name, "a+1");
    }

    #[test]
    fn ret_sites() {
        let s = ok("uprobe:middle+ret");
        assert_eq!(
            (s.kind, s.name.as_str(), s.offset, s.at_returns),
            (ProbeKind::Uprobe, "middle", None, true)
        );
        let s = ok("u:/usr/sbin/mariadbd:dispatch_command+ret");
        assert_eq!(
            (s.object.as_deref(), s.name.as_str(), s.at_returns),
            (Some("/usr/sbin/mariadbd"), "dispatch_command", true)
        );
        // A pattern: every matching function's ret instructions, one row each.
        let s = ok("uprobe:mid*+ret");
        assert_eq!((s.name.as_str(), s.at_returns), ("mid*", true));
        let s = ok("uprobe:V::operator++ret");
        assert_eq!((s.name.as_str(), s.at_returns), ("V::operator+", true));
        assert!(!ok("uprobe:middle").at_returns);
        assert!(!ok("uprobe:middle+4").at_returns);
        let e = ProbeSpec::parse("uretprobe:middle+ret").unwrap_err();
        assert!(e.reason.contains("uprobe:FUNC+ret"), "{e}");
        let e = ProbeSpec::parse("uprobe:middle+rets").unwrap_err();
        assert!(e.reason.contains("FUNC+0x10"), "{e}");
    }

    #[test]
    fn operator_plus_is_a_name_not_an_offset() {
        for name in [
            "operator+",
            "std::operator+",
            "It::operator++",
            "V::operator+=",
        ] {
            let s = ok(&format!("uprobe:{name}"));
            assert_eq!((s.name.as_str(), s.offset), (name, None));
        }
        let s = ok("uprobe:/usr/sbin/mariadbd:0x85bc03");
        assert_eq!(s.address(), Some(0x85bc03));
        assert_eq!(s.object.as_deref(), Some("/usr/sbin/mariadbd"));
        assert_eq!(ok("uprobe:0x1a10").address(), Some(0x1a10));
        assert_eq!(ok("uprobe:work_unit").address(), None);
        assert_eq!(ok("usdt:0x10").address(), None);
        for bad in ["uprobe:0x1a10+4", "uprobe:0x1a10+ret"] {
            let e = ProbeSpec::parse(bad).unwrap_err();
            assert!(e.reason.contains("an address takes no"), "{bad}: {e}");
        }
        let s = ok("uprobe:std::operator++0x4");
        assert_eq!((s.name.as_str(), s.offset), ("std::operator+", Some(4)));
        let s = ok("uprobe:V::operator+=+0x8");
        assert_eq!((s.name.as_str(), s.offset), ("V::operator+=", Some(8)));
        let s = ok("uretprobe:std::operator+");
        assert_eq!(s.name, "std::operator+");
    }

    #[test]
    fn bad_offsets_point_at_the_offset() {
        // "uprobe:work_unit+" is 17 bytes: the offset starts at 17.
        for (text, at, len) in [
            ("uprobe:work_unit+", 17, 0),
            ("uprobe:work_unit+0x", 17, 2),
            ("uprobe:work_unit+0xg", 17, 3),
            ("uprobe:work_unit+4a", 17, 2),
            ("uprobe:work_unit+-4", 17, 2),
            ("uprobe:work_unit+abc", 17, 3),
        ] {
            let e = ProbeSpec::parse(text).unwrap_err();
            assert!(e.reason.contains("FUNC+0x10"), "{text}: {e}");
            assert_eq!((e.at, e.len), (at, len), "{text}");
            let caret = " ".repeat(at) + &"^".repeat(len.max(1));
            assert!(e.to_string().ends_with(&format!("  {caret}")), "{e}");
        }
        let e = ProbeSpec::parse("uprobe:f+0x10000000000000000").unwrap_err();
        assert!(e.reason.contains("64 bits"), "{e}");
        assert_eq!(e.at, 9);
        let e = ProbeSpec::parse("uprobe:f+99999999999999999999").unwrap_err();
        assert!(e.reason.contains("64 bits"), "{e}");
        // Return probes start at the entry.
        let e = ProbeSpec::parse("uretprobe:work_unit+0x4").unwrap_err();
        assert!(e.reason.contains("uretprobe takes no +OFFSET"), "{e}");
        assert_eq!((e.at, e.len), (19, 4));
        // One function, not a pattern.
        let e = ProbeSpec::parse("uprobe:work_*+4").unwrap_err();
        assert!(e.reason.contains("not a pattern"), "{e}");
        assert_eq!((e.at, e.len), (7, 6));
        // No function before the offset.
        let e = ProbeSpec::parse("uprobe:+4").unwrap_err();
        assert!(e.reason.contains("needs a name"), "{e}");
        assert_eq!(e.at, 7);
        let e = ProbeSpec::parse("uprobe:libc:+4").unwrap_err();
        assert_eq!(e.at, 12);
        // Leading blanks shift the caret with the text.
        let e = ProbeSpec::parse("  uprobe:f+z").unwrap_err();
        assert_eq!((e.at, e.len), (11, 1));
    }

    #[test]
    fn a_long_spec_is_echoed_around_its_caret() {
        let text = format!("uprobe:{} b", "a".repeat(100_000));
        let e = ProbeSpec::parse(&text).unwrap_err();
        let shown = e.to_string();
        assert!(shown.len() < 400, "{} bytes", shown.len());
        let lines: Vec<&str> = shown.lines().collect();
        let (spec, caret) = (lines[lines.len() - 2], lines[lines.len() - 1]);
        assert!(spec.ends_with("aaa b (100009 bytes)"), "{spec}");
        // The caret is under the blank the parser refused.
        let column = caret.find('^').expect("caret");
        assert_eq!(spec.chars().nth(column), Some(' '), "{spec}\n{caret}");
        assert_eq!(shorten("abcdef", 3), "abc… (6 bytes)");
        assert_eq!(shorten("abc", 3), "abc");
    }
}
