//! Presets: named sets of probe specs for well-known programs (`--preset mysql`).
//!
//! A preset is data, not code: a file in `presets/` at the repository root, in the same
//! format as `-f FILE`, compiled into the binary so `probetop --preset NAME` needs
//! nothing else on the machine. The file name without `.txt` is the preset's name.

use std::fmt;

/// Every preset: (name, text of `presets/NAME.txt`).
const PRESETS: &[(&str, &str)] = &[
    ("mysql", include_str!("../../presets/mysql.txt")),
    ("postgres", include_str!("../../presets/postgres.txt")),
];

/// A preset name probetop does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct UnknownPreset {
    pub name: String,
}

impl fmt::Display for UnknownPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown preset {:?}: the presets are {}",
            self.name,
            names().collect::<Vec<_>>().join(", ")
        )
    }
}

/// The names of every preset, in the order they are listed.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    PRESETS.iter().map(|(name, _)| *name)
}

/// The spec file text of preset `name`.
pub fn text(name: &str) -> Result<&'static str, UnknownPreset> {
    PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
        .ok_or_else(|| UnknownPreset {
            name: name.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{ProbeKind, ProbeSpec};

    /// Lines that are specs, as `-f` reads them; a latency spec is its two halves.
    fn specs(text: &str) -> Vec<ProbeSpec> {
        text.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .flat_map(|l| {
                if crate::spec::is_latency(l) {
                    crate::spec::parse_latency(l)
                        .unwrap_or_else(|e| panic!("{l}: {e}"))
                        .to_vec()
                } else {
                    vec![ProbeSpec::parse(l).unwrap_or_else(|e| panic!("{l}: {e}"))]
                }
            })
            .collect()
    }

    #[test]
    fn every_preset_parses() {
        for name in names() {
            let text = text(name).expect("listed presets exist");
            assert!(!specs(text).is_empty(), "preset {name} has no specs");
        }
    }

    #[test]
    fn mysql_is_the_request_path() {
        let got: Vec<(ProbeKind, String)> = specs(text("mysql").expect("mysql preset"))
            .into_iter()
            .map(|s| (s.kind, s.text))
            .collect();
        let latency = "latency:dispatch_command key=arg0:mysql-command";
        let want = [
            (ProbeKind::Uprobe, "uprobe:do_command"),
            (ProbeKind::Uprobe, latency),
            (ProbeKind::Uretprobe, latency),
            (ProbeKind::Uprobe, "uprobe:mysql_parse"),
            (ProbeKind::Uprobe, "uprobe:Prepared_statement::execute_loop"),
            (ProbeKind::Uprobe, "uprobe:mysql_execute_command"),
        ]
        .map(|(k, n)| (k, n.to_string()));
        assert_eq!(got, want);
        // dispatch_command's latency, split by command, named.
        let keyed = specs(text("mysql").expect("mysql preset"))
            .into_iter()
            .find(|s| s.pair.is_some())
            .and_then(|s| s.key)
            .expect("a keyed pair");
        assert_eq!(keyed.render(&[3]), "COM_QUERY");
        assert_eq!(keyed.render(&[23]), "COM_STMT_EXECUTE");
    }

    #[test]
    fn postgres_is_queries_transactions_locks_and_the_executor() {
        let got: Vec<(ProbeKind, String)> = specs(text("postgres").expect("postgres preset"))
            .into_iter()
            .map(|s| (s.kind, s.text))
            .collect();
        let usdt = |name: &str| (ProbeKind::Usdt, format!("usdt:postgresql:{name}"));
        let pair = |start: &str, end: &str| {
            let text = format!("latency:postgresql:{start},{end}");
            [(ProbeKind::Usdt, text.clone()), (ProbeKind::Usdt, text)]
        };
        let [query_start, query_done] = pair("query__start", "query__done");
        let [tx_start, tx_commit] = pair("transaction__start", "transaction__commit");
        let want = vec![
            query_start,
            query_done,
            usdt("query__execute__start"),
            usdt("query__execute__done"),
            tx_start,
            tx_commit,
            usdt("transaction__abort"),
            usdt("lock__wait__start"),
            usdt("lock__wait__done"),
            (ProbeKind::Uprobe, "uprobe:ExecutorStart".to_string()),
        ];
        assert_eq!(got, want);
    }

    /// A uretprobe is refused where an exception can unwind through its function (a
    /// C++ server's, nearly always), and a preset is for builds it cannot check: a
    /// preset measures returns at `ret` instructions (`FUNC+ret`), which no
    /// exception or `longjmp` can turn into a crash. A latency spec's return half is
    /// checked on the build it meets (`session::probe::latency_end`): at the ret
    /// instructions wherever an exception can unwind through the function.
    #[test]
    fn presets_measure_returns_at_ret_instructions() {
        for name in names() {
            for spec in specs(text(name).expect("listed presets exist")) {
                if spec.pair.is_some() {
                    continue;
                }
                assert_ne!(spec.kind, ProbeKind::Uretprobe, "{name}: {}", spec.text);
            }
        }
    }

    #[test]
    fn presets_name_functions_not_offsets() {
        // Offsets belong to one build of a program; a preset is for every build.
        for name in names() {
            for spec in specs(text(name).expect("listed presets exist")) {
                assert_eq!(spec.offset, None, "{name}: {}", spec.text);
            }
        }
    }

    #[test]
    fn unknown_names_list_the_presets() {
        let err = text("oracle").expect_err("no such preset");
        assert_eq!(
            err.to_string(),
            "unknown preset \"oracle\": the presets are mysql, postgres"
        );
    }
}
