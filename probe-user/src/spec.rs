//! Probe specs as users write them: `uprobe:[OBJECT:]FUNC`, `uretprobe:[OBJECT:]FUNC`,
//! `usdt:[OBJECT:][PROVIDER:]NAME`.
//!
//! OBJECT is an absolute path or a library name (`libc`); FUNC and NAME may be globs.
//! C++ names contain `::`, so only a single `:` separates fields.

use std::fmt;

/// What fires the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
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
}

/// A spec that does not parse, with the byte range of the bad part for a caret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}\n  {text}\n  {caret}", caret = caret_line(*.at, *.len))]
pub struct SpecError {
    pub text: String,
    pub reason: String,
    pub at: usize,
    pub len: usize,
}

fn caret_line(at: usize, len: usize) -> String {
    format!("{}{}", " ".repeat(at), "^".repeat(len.max(1)))
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
}
