//! Shell-style globs for symbol and probe names: `*`, `?`, `[abc]`, `[a-z]`, `[!x]`/`[^x]`.
//!
//! Patterns come from the command line and names from untrusted files, so matching is
//! linear backtracking over at most one `*` at a time (O(pattern x name)), never recursive.

/// One element of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
    is_pattern: bool,
}

impl Glob {
    /// Compiles `pattern`. A `[` without a closing `]` is taken literally, as shells do.
    pub fn new(pattern: &str) -> Self {
        let chars: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::with_capacity(chars.len());
        let mut is_pattern = false;
        let mut i = 0;
        while let Some(&c) = chars.get(i) {
            match c {
                '*' => {
                    is_pattern = true;
                    // Runs of `*` are one `*`: keeps matching linear.
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                    i += 1;
                }
                '?' => {
                    is_pattern = true;
                    tokens.push(Token::AnyOne);
                    i += 1;
                }
                '[' => match parse_class(&chars, i + 1) {
                    Some((token, next)) => {
                        is_pattern = true;
                        tokens.push(token);
                        i = next;
                    }
                    None => {
                        tokens.push(Token::Literal('['));
                        i += 1;
                    }
                },
                _ => {
                    tokens.push(Token::Literal(c));
                    i += 1;
                }
            }
        }
        Self { tokens, is_pattern }
    }

    /// Whether the pattern has any wildcard (otherwise it matches one exact string).
    pub fn is_pattern(&self) -> bool {
        self.is_pattern
    }

    /// The one string a pattern without wildcards matches; None for a pattern.
    pub fn literal(&self) -> Option<String> {
        if self.is_pattern {
            return None;
        }
        self.tokens
            .iter()
            .map(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// The longest run of literal characters, used to find suggestions for globs.
    pub fn longest_literal(&self) -> String {
        let mut best = String::new();
        let mut cur = String::new();
        for t in &self.tokens {
            if let Token::Literal(c) = t {
                cur.push(*c);
            } else {
                if cur.len() > best.len() {
                    best = std::mem::take(&mut cur);
                }
                cur.clear();
            }
        }
        if cur.len() > best.len() { cur } else { best }
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        let (mut p, mut t) = (0usize, 0usize);
        // Where to resume after the most recent `*`: (pattern index after it, text index).
        let mut resume: Option<(usize, usize)> = None;
        loop {
            let token = self.tokens.get(p);
            let ch = text.get(t);
            match (token, ch) {
                (Some(Token::AnyRun), _) => {
                    resume = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                (Some(tok), Some(&c)) if single_matches(tok, c) => {
                    p += 1;
                    t += 1;
                    continue;
                }
                (None, None) => return true,
                _ => {}
            }
            // Mismatch: let the last `*` swallow one more character, if there is one.
            match resume {
                Some((rp, rt)) if rt < text.len() => {
                    resume = Some((rp, rt + 1));
                    p = rp;
                    t = rt + 1;
                }
                _ => return false,
            }
        }
    }
}

fn single_matches(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(l) => *l == c,
        Token::AnyOne => true,
        Token::AnyRun => false,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
        }
    }
}

/// Parses a class body starting after `[`; returns the token and the index after `]`.
fn parse_class(chars: &[char], start: usize) -> Option<(Token, usize)> {
    let mut i = start;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let c = *chars.get(i)?;
        // A `]` right after `[` or `[!` is a member, as in shells.
        if c == ']' && !first {
            return Some((Token::Class { negated, ranges }, i + 1));
        }
        first = false;
        if chars.get(i + 1) == Some(&'-')
            && let Some(&hi) = chars.get(i + 2)
            && hi != ']'
        {
            ranges.push((c.min(hi), c.max(hi)));
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).matches(t)
    }

    #[test]
    fn basics() {
        assert!(m("work_unit", "work_unit"));
        assert!(!m("work_unit", "work_unit2"));
        assert!(m("work_*", "work_unit"));
        assert!(m("*unit", "work_unit"));
        assert!(m("*", ""));
        assert!(m("w?rk*", "work"));
        assert!(!m("w?rk*", "wrk"));
        assert!(m("THD::*", "THD::send_kill_message() const"));
        assert!(!m("THD::*", "ns::THD::x"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!m("*a*b*c*", "xxaxxcxxbxx"));
    }

    #[test]
    fn classes() {
        assert!(m("f[0-9]", "f7"));
        assert!(!m("f[0-9]", "fa"));
        assert!(m("f[!0-9]", "fa"));
        assert!(m("f[^0-9]", "fa"));
        assert!(m("f[]x]", "f]"));
        assert!(m("f[ab-]", "f-"));
        // Unclosed `[` is a literal.
        assert!(m("f[0", "f[0"));
        assert!(Glob::new("a[b]").is_pattern());
        assert!(!Glob::new("a[b").is_pattern());
    }

    #[test]
    fn pathological_is_fast() {
        let text = "a".repeat(5000);
        let pat = format!("{}b", "*a".repeat(200));
        assert!(!m(&pat, &text));
    }

    #[test]
    fn literal_part() {
        assert_eq!(Glob::new("*disp?tch_comm*").longest_literal(), "tch_comm");
    }
}
