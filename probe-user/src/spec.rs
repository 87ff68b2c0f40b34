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
pub const ECHO_BYTES: usize = 100;

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
pub fn shorten(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
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

impl ProbeSpec {
    pub fn parse(text: &str) -> Result<Self, SpecError> {
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
                    format!("unknown probe kind {other:?}: use uprobe, uretprobe or usdt"),
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
            text: trimmed.to_string(),
            kind,
            object,
            provider,
            name: name.to_string(),
            offset: func_offset,
            at_returns,
        })
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
