//! A keyed probe's hits split by its key argument's value (` key=argN`): per value,
//! its hits and their handler times, at most `--max-keys` values, the rest as `other`.

use std::collections::HashMap;

use hdrhistogram::Histogram;

use super::latency::RowKey;
use super::summary::HandlerSummary;
use crate::spec::KeySpec;

/// One key's hits.
#[derive(Debug, Clone)]
struct KeyHits {
    key: RowKey,
    hits: u64,
    handler_ns: Histogram<u64>,
}

/// The split of one probe's hits.
#[derive(Debug, Clone)]
pub(crate) struct HitKeys {
    key: KeySpec,
    /// The first of the key's slots in the probe's records.
    at: usize,
    max_keys: usize,
    rows: Vec<KeyHits>,
    index: HashMap<String, usize>,
}

/// A keyed probe's numbers for one key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedHits {
    pub key: RowKey,
    pub hits: u64,
    pub handler_ns: HandlerSummary,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
    })
}

impl HitKeys {
    pub(crate) fn new(key: KeySpec, at: usize, max_keys: usize) -> Self {
        Self {
            key,
            at,
            max_keys,
            rows: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Counts one hit from a record's argument slots (`faulted`: bit i, slot i could
    /// not be read).
    pub(crate) fn record(&mut self, args: &[u64], count: usize, faulted: u32, handler_ns: u64) {
        let end = (self.at + self.key.slots()).min(count);
        let value = if self.at < end && faulted & (1 << self.at) == 0 {
            let slots: Vec<u64> = (self.at..end)
                .map(|i| if faulted & (1 << i) != 0 { 0 } else { args[i] })
                .collect();
            self.key.render(&slots)
        } else {
            "?".to_string()
        };
        let at = match self.index.get(&value) {
            Some(&at) => at,
            None if self.index.len() < self.max_keys => {
                self.rows.push(KeyHits {
                    key: RowKey::Value(value.clone()),
                    hits: 0,
                    handler_ns: histogram(),
                });
                self.index.insert(value, self.rows.len() - 1);
                self.rows.len() - 1
            }
            None => match self.rows.iter().position(|r| r.key == RowKey::Other) {
                Some(at) => at,
                None => {
                    self.rows.push(KeyHits {
                        key: RowKey::Other,
                        hits: 0,
                        handler_ns: histogram(),
                    });
                    self.rows.len() - 1
                }
            },
        };
        let row = &mut self.rows[at];
        row.hits += 1;
        row.handler_ns.saturating_record(handler_ns.max(1));
    }

    /// Keys seen stay, emptied.
    pub(crate) fn reset(&mut self) {
        for row in &mut self.rows {
            row.hits = 0;
            row.handler_ns.reset();
        }
    }

    /// One row per key, most hits first, `other` last.
    pub(crate) fn rows(&self) -> Vec<KeyedHits> {
        let mut rows: Vec<&KeyHits> = self.rows.iter().collect();
        rows.sort_by_key(|r| (r.key == RowKey::Other, std::cmp::Reverse(r.hits)));
        rows.into_iter()
            .map(|r| KeyedHits {
                key: r.key.clone(),
                hits: r.hits,
                handler_ns: HandlerSummary::of(&r.handler_ns),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_split_by_key_with_the_rest_as_other() {
        let key = KeySpec::parse("arg1").expect("key");
        let mut keys = HitKeys::new(key, 1, 2);
        for value in [4u64, 4, 8, 4, 15, 16, 8] {
            keys.record(&[0, value], 2, 0, 100);
        }
        keys.record(&[0, 0], 2, 0b10, 100);
        let got: Vec<(String, u64)> = keys
            .rows()
            .into_iter()
            .map(|r| (r.key.as_str().to_string(), r.hits))
            .collect();
        assert_eq!(
            got,
            [
                ("4".to_string(), 3),
                ("8".to_string(), 2),
                ("other".to_string(), 3)
            ]
        );
    }
}
