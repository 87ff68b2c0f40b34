//! "Did you mean": the existing names closest to one that matched nothing.

use std::collections::BTreeSet;

/// Names longer than this are not compared by edit distance (cost is quadratic).
const MAX_COMPARED_LEN: usize = 256;

/// How far `name` is from `wanted` (both lowercased), lower is closer: a name holding
/// `wanted` (or held in it, if at least half its length) is as far as the characters
/// it adds or lacks, and comes before a name only an edit distance of at most a third
/// of `wanted` (1 to 4) away; `None`: not close.
pub(crate) fn distance(wanted_lc: &str, name_lc: &str) -> Option<(u8, usize)> {
    if wanted_lc.is_empty() {
        return None;
    }
    let (w, n) = (wanted_lc.chars().count(), name_lc.chars().count());
    if name_lc.contains(wanted_lc) || (n >= 3 && 2 * n >= w && wanted_lc.contains(name_lc)) {
        return Some((0, n.abs_diff(w)));
    }
    if n > MAX_COMPARED_LEN {
        return None;
    }
    let max_distance = (w / 3).clamp(1, 4);
    let d = levenshtein(wanted_lc, name_lc, max_distance);
    (d <= max_distance).then_some((1, d))
}

/// Up to `limit` names from `candidates` closest to `wanted` ([`distance`]), then
/// shortest, then in name order.
pub fn closest<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Vec<String> {
    let wanted_lc = wanted.to_lowercase();
    if wanted_lc.is_empty() {
        return Vec::new();
    }
    // (rank, distance, length, name): BTreeSet sorts and de-duplicates.
    let mut scored: BTreeSet<(u8, usize, usize, &str)> = BTreeSet::new();
    for name in candidates {
        if let Some((rank, d)) = distance(&wanted_lc, &name.to_lowercase()) {
            scored.insert((rank, d, name.len(), name));
        }
        // Keep memory bounded on huge symbol tables.
        if scored.len() > limit.saturating_mul(20).max(100) {
            let keep: BTreeSet<_> = scored.iter().take(limit).copied().collect();
            scored = keep;
        }
    }
    scored
        .into_iter()
        .take(limit)
        .map(|(_, _, _, n)| n.to_string())
        .collect()
}

/// Edit distance, giving up (returning `max + 1`) once it must exceed `max`.
pub fn levenshtein(a: &str, b: &str, max: usize) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return max + 1;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        if let Some(first) = cur.first_mut() {
            *first = i + 1;
        }
        let mut row_min = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev.get(j).copied().unwrap_or(usize::MAX) + usize::from(ca != cb);
            let del = prev
                .get(j + 1)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            let ins = cur.get(j).copied().unwrap_or(usize::MAX).saturating_add(1);
            let v = sub.min(del).min(ins);
            if let Some(c) = cur.get_mut(j + 1) {
                *c = v;
            }
            row_min = row_min.min(v);
        }
        if row_min > max {
            return max + 1;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev.last().copied().unwrap_or(max + 1).min(max + 1)
}

/// Formats suggestions as an error hint: `; did you mean: a, b?`.
pub fn hint(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean: {}?", suggestions.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(levenshtein("kitten", "sitting", 5), 3);
        assert_eq!(levenshtein("abc", "abc", 1), 0);
        assert_eq!(levenshtein("abc", "xyzxyz", 1), 2);
        assert_eq!(levenshtein("", "ab", 3), 2);
    }

    #[test]
    fn substring_then_typos() {
        let names = [
            "work_unit",
            "work_unit_slow",
            "leaf_ret",
            "do_work",
            "wrok_unti",
        ];
        let got = closest("work_uint", names.iter().copied(), 5);
        assert_eq!(got, vec!["work_unit"]);
        let got = closest("wrok_unit", names.iter().copied(), 5);
        assert_eq!(got, vec!["work_unit", "wrok_unti"]);
        let got = closest("work", names.iter().copied(), 2);
        assert_eq!(got, vec!["do_work", "work_unit"]);
        assert!(closest("zzzzzz", names.iter().copied(), 5).is_empty());
        // A short name inside a long request is not close to it: `do` is no answer to
        // `do_command_slowly`, `do_command` is.
        let names = ["do", "do_command", "main"];
        assert_eq!(
            closest("do_command_slowly", names.iter().copied(), 5),
            vec!["do_command"]
        );
    }
}
