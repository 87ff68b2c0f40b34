//! Reports write their section of a document between two marker lines, leaving the
//! rest of it (other reports' sections, text by hand) as it was.

/// `existing` with the text between `marks` replaced by `section` (the marks kept);
/// `None` when it has no such block.
pub(crate) fn splice_between(existing: &str, section: &str, marks: (&str, &str)) -> Option<String> {
    let (begin, end) = marks;
    let block = format!("{begin}\n{section}{end}\n");
    match (existing.find(begin), existing.find(end)) {
        (Some(b), Some(e)) if b < e => {
            let after = &existing[e + end.len()..];
            Some(format!(
                "{}{block}{}",
                &existing[..b],
                after.strip_prefix('\n').unwrap_or(after)
            ))
        }
        _ => None,
    }
}
