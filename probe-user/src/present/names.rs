//! Probe names as narrow columns show them: the function name stays readable. A C++
//! symbol resolves to its demangled signature (`dispatch_command(THD*, COM_DATA
//! const*, enum_server_command, bool, bool)`), whose parameter list is what goes first
//! when space runs out, then the kind's prefix; the name itself is cut last, at its end.

use super::ProbeLabel;
use crate::spec::ProbeKind;

/// The parts of a label's display text: `kind:`, the name, its parameter list, and
/// what follows (owner, shared, site class, site address).
struct Parts<'a> {
    prefix: &'a str,
    name: &'a str,
    params: &'a str,
    rest: &'a str,
}

fn split(display: &str) -> Parts<'_> {
    // The kind prefix: `uprobe:`, `uretprobe:`, `usdt:`, ... (no spaces, no parens).
    let prefix_end = display
        .find(':')
        .filter(|&i| {
            display[..i]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map_or(0, |i| i + 1);
    let body = &display[prefix_end..];
    // The parameter list: the first `(` outside template brackets, not `operator()`,
    // to its matching `)`.
    let mut depth_angle = 0i32;
    let mut open = None;
    for (i, c) in body.char_indices() {
        match c {
            '<' => depth_angle += 1,
            '>' => depth_angle -= 1,
            ' ' if depth_angle == 0 && open.is_none() => break,
            '(' if depth_angle <= 0 && !body[..i].ends_with("operator") => {
                open = Some(i);
                break;
            }
            _ => {}
        }
    }
    let (name_end, params_end) = match open {
        Some(start) => {
            let mut depth = 0i32;
            let mut end = body.len();
            for (i, c) in body[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = start + i + 1;
                            // A const or ref qualifier stays with the parameters.
                            let after = &body[end..];
                            for q in [" const", " &&", " &"] {
                                if after.starts_with(q) {
                                    end += q.len();
                                }
                            }
                            break;
                        }
                    }
                    _ => {}
                }
            }
            (start, end)
        }
        None => {
            let end = body.find(' ').unwrap_or(body.len());
            (end, end)
        }
    };
    Parts {
        prefix: &display[..prefix_end],
        name: &body[..name_end],
        params: &body[name_end..params_end],
        rest: &body[params_end..],
    }
}

/// `display` in at most `width` characters: the whole; then the parameter list as
/// `(…)`; then without it; then the kind's prefix shortened (`ret:` for a return
/// probe) or dropped; then the marks after the name cut; the name itself is cut at its
/// end last.
pub(crate) fn fit(display: &str, width: usize) -> String {
    fit_parts(&split(display), width, true)
}

/// A title's name: `display`, and ` = resolved` (what the name resolved to) while it
/// fits, in at most `width` characters; fitted as [`fit`] fits it, so the function
/// name stays whole where a cut in the middle would lose it.
pub(crate) fn fit_title(display: &str, resolved: Option<&str>, width: usize) -> String {
    let name = fit(display, width);
    let Some(resolved) = resolved else {
        return name;
    };
    let room = width.saturating_sub(name.chars().count() + 3);
    // A resolved name cut to a stub says nothing: then it is left out.
    if room >= resolved.chars().count().min(12) {
        let resolved = fit(resolved, room);
        format!("{name} = {resolved}")
    } else {
        name
    }
}

/// A table row's name: `display` without its kind (the table shows the kind once, in a
/// column of its own or its title), fitted to `width` as [`fit`] fits it.
pub(crate) fn fit_name(display: &str, width: usize) -> String {
    fit_parts(&split(display), width, false)
}

/// `display` fitted as [`fit_name`] fits it, but a function name too long for `width`
/// is never cut in the middle: it loses its leading scopes first (`THD::`, `std::`), a
/// scope at a time, marked `…`, then its end at a `_` boundary (the stdout summary,
/// where a row's name is all a reader has).
pub(crate) fn fit_name_at_boundaries(display: &str, width: usize) -> String {
    let fitted = fit_name(display, width);
    let p = split(display);
    if width == 0 || fitted.starts_with(p.name) {
        return fitted;
    }
    let fits = |s: &str| s.chars().count() <= width;
    // The scopes' ends (`::` outside template brackets).
    let mut depth = 0i32;
    let mut scopes = Vec::new();
    for (i, c) in p.name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ':' if depth == 0 && p.name[i..].starts_with("::") => scopes.push(i + 2),
            _ => {}
        }
    }
    let mut last = p.name;
    for at in scopes {
        let inner = &p.name[at..];
        if inner.is_empty() || inner.starts_with(':') {
            continue;
        }
        last = inner;
        for candidate in [format!("…{inner}{}", p.rest), format!("…{inner}")] {
            if fits(&candidate) {
                return candidate;
            }
        }
    }
    // The innermost name alone is too long: its end goes, at a `_` boundary.
    let lead = if last.len() < p.name.len() { "…" } else { "" };
    let room = width.saturating_sub(lead.chars().count() + 1);
    let head: String = last.chars().take(room).collect();
    let head = match head.rfind('_').filter(|&at| at > 0) {
        Some(at) if head.len() < last.len() => &head[..at],
        _ => head.as_str(),
    };
    format!("{lead}{head}…")
}

/// The narrowest a row shows `display` without cutting into it: the function's name
/// and its marks, the parameter list and the kind dropped.
pub(crate) fn readable_width(display: &str) -> usize {
    let p = split(display);
    p.name.chars().count() + p.rest.chars().count()
}

/// `display` without its kind's prefix (`uprobe:`, `usdt:`): what a row shows.
pub(crate) fn unprefixed(display: &str) -> &str {
    &display[split(display).prefix.len()..]
}

/// A kind as `-e` also takes it, in two characters at most (bpftrace's short forms):
/// `u` uprobe, `ur` uretprobe, `U` usdt.
pub(crate) fn kind_mark(kind: ProbeKind) -> &'static str {
    match kind {
        ProbeKind::Uprobe => "u",
        ProbeKind::Uretprobe => "ur",
        ProbeKind::Usdt => "U",
    }
}

fn fit_parts(p: &Parts<'_>, width: usize, prefixed: bool) -> String {
    let fits = |s: &String| s.chars().count() <= width;
    let (prefix, short_prefix) = if prefixed {
        let short = match p.prefix {
            "uretprobe:" => "ret:",
            "usdt:" | "uprobe:" => "",
            other => other,
        };
        (p.prefix, short)
    } else {
        ("", "")
    };
    let whole = format!("{prefix}{}{}{}", p.name, p.params, p.rest);
    if fits(&whole) {
        return whole;
    }
    let params = if p.params.is_empty() { "" } else { "(…)" };
    // A USDT probe's name without its provider: entry and return differ at the end.
    let bare = if p.prefix == "usdt:" {
        p.name.rsplit(':').next().unwrap_or(p.name)
    } else {
        p.name
    };
    let candidates = [
        format!("{prefix}{}{params}{}", p.name, p.rest),
        format!("{prefix}{}{}", p.name, p.rest),
        format!("{short_prefix}{}{params}{}", p.name, p.rest),
        format!("{short_prefix}{}{}", p.name, p.rest),
        format!("{short_prefix}{bare}{}", p.rest),
    ];
    if let Some(fitting) = candidates.into_iter().find(fits) {
        return fitting;
    }
    // The marks are cut from their end, the name kept whole while it fits.
    let head = format!("{short_prefix}{bare}");
    if head.chars().count() < width {
        let mut out: String = format!("{head}{}", p.rest)
            .chars()
            .take(width - 1)
            .collect();
        out.push('…');
        return out;
    }
    // Too long even alone: cut in the middle, as names alike differ at their ends
    // (`import__find__load__start` and `..._done`).
    let count = head.chars().count();
    if width == 0 {
        return String::new();
    }
    let front = (width - 1) / 2;
    let back = width - 1 - front;
    let mut out: String = head.chars().take(front).collect();
    out.push('…');
    out.extend(head.chars().skip(count - back));
    out
}

/// Whether a table shows each row's kind: only where its probes are of more than one
/// kind (else its title or heading names the one kind).
pub(crate) fn shows_kinds(labels: &[ProbeLabel]) -> bool {
    labels.windows(2).any(|w| w[0].kind != w[1].kind)
}

/// The names of the rows `ids` (indexes into `labels`) as every table shows them (the
/// TUI's rows, the end-of-run summary): function first and without their kind, each in
/// `room` characters with its `mark` after it; parameter lists go first; two sites
/// whose names would read the same get their sites (` @0x1a2b`).
pub(crate) fn row_names(
    labels: &[ProbeLabel],
    ids: &[usize],
    room: usize,
    mark: impl Fn(usize) -> String,
) -> Vec<String> {
    row_names_with(labels, ids, room, mark, fit_name)
}

/// [`row_names`], each name fitted by `fit` (as [`fit_name`] or
/// [`fit_name_at_boundaries`]).
pub(crate) fn row_names_with(
    labels: &[ProbeLabel],
    ids: &[usize],
    room: usize,
    mark: impl Fn(usize) -> String,
    fit: fn(&str, usize) -> String,
) -> Vec<String> {
    let fitted = |id: usize, display: &str| {
        let mark = mark(id);
        let name = fit(display, room.saturating_sub(mark.chars().count()));
        format!("{name}{mark}")
    };
    let mut names: Vec<String> = ids
        .iter()
        .map(|&id| fitted(id, &labels[id].display))
        .collect();
    // Distinct sites read as distinct names (overloads whose parameters were dropped).
    let mut seen: std::collections::HashMap<(&str, &str), Vec<usize>> = Default::default();
    for (at, &id) in ids.iter().enumerate() {
        let kind = kind_mark(labels[id].kind);
        seen.entry((kind, names[at].as_str())).or_default().push(at);
    }
    let twins: Vec<usize> = seen
        .into_values()
        .filter(|ats| {
            ats.iter()
                .any(|&a| labels[ids[a]].display != labels[ids[ats[0]]].display)
        })
        .flatten()
        .collect();
    for at in twins {
        let label = &labels[ids[at]];
        if let Some(site) = label.site {
            names[at] = fitted(ids[at], &with_site(&label.display, site));
        }
    }
    names
}

/// `display` with its site, ` @0x1a2b` (the file offset), after the name and its
/// parameters, before its marks.
pub(crate) fn with_site(display: &str, site: u64) -> String {
    let p = split(display);
    format!("{}{}{} @{site:#x}{}", p.prefix, p.name, p.params, p.rest)
}

/// Two probes whose names read the same (one USDT probe at two sites, a symbol in two
/// objects) are told apart by their site: ` @0x1a2b` (the file offset) after the name.
pub(crate) fn distinguish(labels: &mut [ProbeLabel]) {
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for label in labels.iter() {
        *seen.entry(label.display.clone()).or_default() += 1;
    }
    for label in labels.iter_mut() {
        if seen.get(&label.display).copied().unwrap_or(0) > 1
            && let Some(site) = label.site
        {
            label.display = with_site(&label.display, site);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: &str = "uretprobe:dispatch_command(THD*, COM_DATA const*, enum_server_command, bool, bool) [sstep]";

    #[test]
    fn the_function_name_outlives_its_parameters() {
        assert_eq!(fit(SIG, 200), SIG);
        assert_eq!(fit(SIG, 40), "uretprobe:dispatch_command(…) [sstep]");
        assert_eq!(fit(SIG, 34), "uretprobe:dispatch_command [sstep]");
        assert_eq!(fit(SIG, 31), "ret:dispatch_command(…) [sstep]");
        assert_eq!(fit(SIG, 28), "ret:dispatch_command [sstep]");
        assert_eq!(fit(SIG, 24), "ret:dispatch_command [s…");
        assert_eq!(fit(SIG, 12), "ret:d…ommand");
        assert_eq!(
            fit(
                "uprobe:Prepared_statement::execute_loop(String*, bool, unsigned char*, unsigned char*)",
                38
            ),
            "Prepared_statement::execute_loop(…)"
        );
        assert_eq!(
            fit("usdt:postgresql:query__execute__start", 32),
            "postgresql:query__execute__start"
        );
        assert_eq!(
            fit("usdt:postgresql:query__execute__start", 30),
            "query__execute__start"
        );
        assert_eq!(
            fit("uprobe:std::vector<int>::push_back(int&&)", 30),
            "std::vector<int>::push_back(…)"
        );
        assert_eq!(fit("uprobe:operator()(int) const", 12), "operator()");
    }

    #[test]
    fn a_title_keeps_the_function_name_whole() {
        assert_eq!(fit_title(SIG, None, 200), SIG);
        assert_eq!(
            fit_title(SIG, None, 74),
            "uretprobe:dispatch_command(…) [sstep]"
        );
        assert_eq!(
            fit_title("uprobe:calloc", Some("__libc_calloc"), 74),
            "uprobe:calloc = __libc_calloc"
        );
        // No room for what it resolved to: the name alone, whole.
        assert_eq!(
            fit_title(SIG, Some("dispatch_command_impl(THD*)"), 40),
            "uretprobe:dispatch_command(…) [sstep]"
        );
        assert_eq!(
            fit_title(SIG, Some("dispatch_command_impl(THD*)"), 64),
            "uretprobe:dispatch_command(…) [sstep] = dispatch_command_impl(…)"
        );
    }

    #[test]
    fn a_row_name_is_the_function_first_without_its_kind() {
        assert_eq!(
            fit_name(SIG, 200),
            "dispatch_command(THD*, COM_DATA const*, enum_server_command, bool, bool) [sstep]"
        );
        assert_eq!(fit_name(SIG, 40), "dispatch_command(…) [sstep]");
        assert_eq!(fit_name(SIG, 24), "dispatch_command [sstep]");
        assert_eq!(fit_name(SIG, 20), "dispatch_command [s…");
        assert_eq!(fit_name("uprobe:THD::run", 30), "THD::run");
        assert_eq!(
            fit_name("usdt:postgresql:query__execute__start", 32),
            "postgresql:query__execute__start"
        );
        assert_eq!(
            fit_name("usdt:postgresql:query__execute__start", 31),
            "query__execute__start"
        );
        assert_eq!(
            fit_name("uprobe:dispatch_command(THD*, bool)+ret [sstep]", 28),
            "dispatch_command+ret [sstep]"
        );
        assert_eq!(unprefixed("uretprobe:THD::run(bool)"), "THD::run(bool)");
        assert_eq!(readable_width(SIG), "dispatch_command [sstep]".len());
        assert_eq!(unprefixed("usdt:pg:start"), "pg:start");
        assert_eq!(
            with_site("uprobe:f(int) [sstep]", 0x1139),
            "uprobe:f(int) @0x1139 [sstep]"
        );
        let marks: Vec<&str> = [ProbeKind::Uprobe, ProbeKind::Uretprobe, ProbeKind::Usdt]
            .into_iter()
            .map(kind_mark)
            .collect();
        assert_eq!(marks, ["u", "ur", "U"]);
    }

    #[test]
    fn a_long_name_loses_its_scopes_then_its_end_never_its_middle() {
        let long = "uprobe:THD::charset_collation_context_create_table_in_db(char const*, bool)";
        assert_eq!(
            fit_name_at_boundaries(long, 100),
            "THD::charset_collation_context_create_table_in_db(char const*, bool)"
        );
        assert_eq!(
            fit_name_at_boundaries(long, 49),
            "THD::charset_collation_context_create_table_in_db"
        );
        assert_eq!(
            fit_name_at_boundaries(long, 47),
            "…charset_collation_context_create_table_in_db"
        );
        assert_eq!(
            fit_name_at_boundaries(long, 30),
            "…charset_collation_context…"
        );
        assert_eq!(
            fit_name_at_boundaries("uprobe:a::b::very_long_function_name [sstep]", 28),
            "…b::very_long_function_name"
        );
        assert_eq!(
            fit_name_at_boundaries("uprobe:abcdefghijklmnop", 8),
            "abcdefg…"
        );
    }

    #[test]
    fn duplicate_names_get_their_sites() {
        let label = |site| {
            let mut l = ProbeLabel::new(ProbeKind::Usdt, "postgresql:query__execute__start", "/pg");
            l.site = Some(site);
            l
        };
        let mut labels = vec![label(0x10), label(0x20), {
            let mut l = ProbeLabel::new(ProbeKind::Usdt, "postgresql:query__start", "/pg");
            l.site = Some(0x30);
            l
        }];
        distinguish(&mut labels);
        assert_eq!(
            labels[0].display,
            "usdt:postgresql:query__execute__start @0x10"
        );
        assert_eq!(
            labels[1].display,
            "usdt:postgresql:query__execute__start @0x20"
        );
        assert_eq!(labels[2].display, "usdt:postgresql:query__start");
    }
}
