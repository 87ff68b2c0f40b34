//! Keys: a spec's suffix ` key=argN[:FORMAT]` (or `--key` for every spec given on the
//! command line) splits its row by the value of one argument, one row per value.
//!
//! FORMAT says what the value is: an integer of a size (`i32`, `u8`, ...; the default
//! is the USDT note's size, or 64 bits for a function's register), `str` (the
//! argument points at a NUL-terminated string: its first [`KEY_STR_BYTES`] bytes are
//! read at the hit), or a table of names for an integer (`mysql-command`: MariaDB's and
//! MySQL's `enum_server_command`).

use std::fmt;

/// Bytes of a string key read at each hit: four 8-byte argument slots.
pub(crate) const KEY_STR_BYTES: usize = 32;

/// What a key argument's value is and how it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// An integer of `bytes` bytes (0: as captured), signed or not.
    Int { bytes: u8, signed: bool },
    /// A pointer to a string.
    Str,
    /// A 32-bit value named by a table.
    Names(&'static NameTable),
}

/// Values of an enum and their names.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NameTable {
    pub name: &'static str,
    pub values: &'static [(u64, &'static str)],
}

/// `enum enum_server_command` of MariaDB 10.11 (include/mysql_com.h), which
/// `dispatch_command` takes first: the client protocol's command bytes. MySQL shares
/// 0 to 31.
pub(crate) static MYSQL_COMMAND: NameTable = NameTable {
    name: "mysql-command",
    values: &[
        (0, "COM_SLEEP"),
        (1, "COM_QUIT"),
        (2, "COM_INIT_DB"),
        (3, "COM_QUERY"),
        (4, "COM_FIELD_LIST"),
        (5, "COM_CREATE_DB"),
        (6, "COM_DROP_DB"),
        (7, "COM_REFRESH"),
        (8, "COM_SHUTDOWN"),
        (9, "COM_STATISTICS"),
        (10, "COM_PROCESS_INFO"),
        (11, "COM_CONNECT"),
        (12, "COM_PROCESS_KILL"),
        (13, "COM_DEBUG"),
        (14, "COM_PING"),
        (15, "COM_TIME"),
        (16, "COM_DELAYED_INSERT"),
        (17, "COM_CHANGE_USER"),
        (18, "COM_BINLOG_DUMP"),
        (19, "COM_TABLE_DUMP"),
        (20, "COM_CONNECT_OUT"),
        (21, "COM_REGISTER_SLAVE"),
        (22, "COM_STMT_PREPARE"),
        (23, "COM_STMT_EXECUTE"),
        (24, "COM_STMT_SEND_LONG_DATA"),
        (25, "COM_STMT_CLOSE"),
        (26, "COM_STMT_RESET"),
        (27, "COM_SET_OPTION"),
        (28, "COM_STMT_FETCH"),
        (29, "COM_DAEMON"),
        (30, "COM_UNIMPLEMENTED"),
        (31, "COM_RESET_CONNECTION"),
        (250, "COM_STMT_BULK_EXECUTE"),
        (251, "COM_SLAVE_WORKER"),
        (252, "COM_SLAVE_IO"),
        (253, "COM_SLAVE_SQL"),
        (254, "COM_MULTI"),
    ],
};

const TABLES: &[&NameTable] = &[&MYSQL_COMMAND];

/// `key=argN[:FORMAT]`: which argument keys the row, and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeySpec {
    /// The argument's index: a function's N-th integer argument register, a USDT
    /// site's N-th argument, a uretprobe's return value (0).
    pub arg: u8,
    pub format: KeyFormat,
}

impl KeySpec {
    /// Parses `argN[:FORMAT]` (what follows `key=`, or `--key`'s value).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        const FORM: &str = "a key is argN[:FORMAT], N from 0 to 11, FORMAT an integer type (i8..i64, u8..u64), str, or a name table (mysql-command)";
        let (arg, format) = match text.split_once(':') {
            Some((arg, format)) => (arg, Some(format)),
            None => (text, None),
        };
        let arg = arg
            .strip_prefix("arg")
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|&n| usize::from(n) < probe_common::MAX_ARGS)
            .ok_or_else(|| format!("{text:?}: {FORM}"))?;
        let format = match format {
            None => KeyFormat::Int {
                bytes: 0,
                signed: true,
            },
            Some("str") => KeyFormat::Str,
            Some(word) => match int_format(word) {
                Some(format) => format,
                None => KeyFormat::Names(
                    TABLES
                        .iter()
                        .find(|t| t.name == word)
                        .copied()
                        .ok_or_else(|| format!("{text:?}: {FORM}"))?,
                ),
            },
        };
        Ok(Self { arg, format })
    }

    /// The argument slots the key takes in a record: one for an integer, four for
    /// a string's first bytes.
    pub(crate) fn slots(&self) -> usize {
        match self.format {
            KeyFormat::Str => KEY_STR_BYTES / 8,
            _ => 1,
        }
    }

    /// The key's value as shown, from its slots (a USDT argument arrives sized and
    /// sign-extended as its note says).
    pub(crate) fn render(&self, slots: &[u64]) -> String {
        let first = slots.first().copied().unwrap_or(0);
        match self.format {
            KeyFormat::Str => {
                let mut bytes: Vec<u8> = slots.iter().flat_map(|s| s.to_le_bytes()).collect();
                if let Some(end) = bytes.iter().position(|&b| b == 0) {
                    bytes.truncate(end);
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
            KeyFormat::Names(table) => {
                let value = first & 0xffff_ffff;
                match table.values.iter().find(|(v, _)| *v == value) {
                    Some((_, name)) => (*name).to_string(),
                    None => value.to_string(),
                }
            }
            KeyFormat::Int { bytes, signed } => {
                let (bytes, signed) = if bytes == 0 {
                    (8, true)
                } else {
                    (bytes, signed)
                };
                let shift = 64 - 8 * u32::from(bytes.clamp(1, 8));
                if signed {
                    (((first << shift) as i64) >> shift).to_string()
                } else {
                    ((first << shift) >> shift).to_string()
                }
            }
        }
    }
}

fn int_format(word: &str) -> Option<KeyFormat> {
    let (signed, bits) = match word.split_at_checked(1)? {
        ("i", bits) => (true, bits),
        ("u", bits) => (false, bits),
        _ => return None,
    };
    let bytes = match bits {
        "8" => 1,
        "16" => 2,
        "32" => 4,
        "64" => 8,
        _ => return None,
    };
    Some(KeyFormat::Int { bytes, signed })
}

impl fmt::Display for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "arg{}", self.arg)?;
        match self.format {
            KeyFormat::Int { bytes: 0, .. } => Ok(()),
            KeyFormat::Int { bytes, signed } => {
                write!(f, ":{}{}", if signed { 'i' } else { 'u' }, 8 * bytes)
            }
            KeyFormat::Str => f.write_str(":str"),
            KeyFormat::Names(table) => write!(f, ":{}", table.name),
        }
    }
}

/// The suffix word: ` key=...` after a spec.
pub(crate) const KEY_WORD: &str = "key=";

/// Splits a trailing ` key=argN[:FORMAT]` off a spec's text: (the spec, the key text
/// and its byte offset in `text`).
pub(crate) fn split_key(text: &str) -> (&str, Option<(&str, usize)>) {
    let trimmed = text.trim_end();
    // The space before `key=` may be any whitespace, some of it more than one byte.
    match trimmed
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
    {
        Some((at, space)) if trimmed[at + space.len_utf8()..].starts_with(KEY_WORD) => {
            let key_at = at + space.len_utf8() + KEY_WORD.len();
            (trimmed[..at].trim_end(), Some((&trimmed[key_at..], key_at)))
        }
        _ => (text, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_byte_space_before_the_key_splits_on_its_boundary() {
        // Found by the probe_spec fuzz target: U+0085 is whitespace of two bytes.
        assert_eq!(split_key("u:\u{85}key=arg0"), ("u:", Some(("arg0", 8))));
        assert_eq!(split_key("u\u{85}x"), ("u\u{85}x", None));
    }

    #[test]
    fn keys_parse_and_render() {
        let k = KeySpec::parse("arg0:mysql-command").expect("a table");
        assert_eq!(k.render(&[0xdead_0000_0003]), "COM_QUERY");
        assert_eq!(k.render(&[99]), "99");
        assert_eq!(k.to_string(), "arg0:mysql-command");
        let k = KeySpec::parse("arg2").expect("plain");
        assert_eq!(k.arg, 2);
        assert_eq!(k.render(&[u64::MAX]), "-1");
        let k = KeySpec::parse("arg2:u32").expect("u32");
        assert_eq!(k.render(&[0x1_0000_0005]), "5");
        let k = KeySpec::parse("arg1:u8").expect("u8");
        assert_eq!(k.render(&[0x1ff]), "255");
        let k = KeySpec::parse("arg1:str").expect("str");
        assert_eq!(k.slots(), 4);
        let mut slots = [0u64; 4];
        slots[0] = u64::from_le_bytes(*b"SELECT 1");
        slots[1] = u64::from_le_bytes(*b"\0garbage");
        assert_eq!(k.render(&slots), "SELECT 1");
        for bad in ["arg", "arg12", "x0", "arg0:f32", "arg0:"] {
            assert!(KeySpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_suffix_splits_off() {
        assert_eq!(
            split_key("latency:f key=arg0:str"),
            ("latency:f", Some(("arg0:str", 14)))
        );
        assert_eq!(split_key("uprobe:f"), ("uprobe:f", None));
        assert_eq!(split_key("uprobe:key=f"), ("uprobe:key=f", None));
    }
}
