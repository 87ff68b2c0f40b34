//! The run's probe points before they are attached: duplicates merged, the total
//! capped by `--max-probes`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::Probe;
use crate::UsageError;
use crate::spec::ProbeKind;

/// The file a point is in: its device and inode where it can be read (the same file
/// reached through `/proc/PID/exe` and through its path is one), else its path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum File {
    Inode(u64, u64),
    Path(PathBuf),
}

/// What makes two probe points one: the kernel would put the same breakpoint, running
/// the same program, at the same place.
type PointKey = (File, u64, ProbeKind);

/// Keeps the first of every set of identical probe points (same file, offset and
/// kind), in order: the row keeps the name and spec the user wrote first. Returns how
/// many were dropped. Without it, 2000 copies of one `-e` (or a preset and the same
/// `-e`) attached 2000 probes, each hit running 2000 programs.
pub(super) fn merge_duplicates(probes: &mut Vec<Probe>) -> usize {
    use std::os::unix::fs::MetadataExt as _;
    let before = probes.len();
    let mut files: HashMap<PathBuf, File> = HashMap::new();
    let mut seen: HashSet<PointKey> = HashSet::with_capacity(before);
    probes.retain(|probe| {
        let path = &probe.point.attach_path;
        let file = files
            .entry(path.clone())
            .or_insert_with(|| match std::fs::metadata(path) {
                Ok(meta) => File::Inode(meta.dev(), meta.ino()),
                Err(_) => File::Path(path.clone()),
            })
            .clone();
        seen.insert((file, probe.point.file_offset, probe.point.kind))
    });
    before - probes.len()
}

/// The line said when duplicates were merged.
pub(super) fn merged_line(merged: usize) -> String {
    format!(
        "probetop: merged {merged} duplicate probe point{} (same object, offset and kind; each row keeps the spec written first)",
        if merged == 1 { "" } else { "s" }
    )
}

/// `--max-probes` caps every spec's matches (in the resolver) and the run's total here.
pub(super) fn check_total(total: usize, max: usize, specs: usize) -> Result<(), UsageError> {
    if total > max {
        return Err(UsageError(format!(
            "{total} probe points from {specs} spec{} in all, more than --max-probes {max}: narrow the specs, or raise --max-probes",
            if specs == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_above_the_cap_are_refused() {
        assert!(check_total(3, 3, 2).is_ok());
        let refused = check_total(4, 3, 2).expect_err("above the cap");
        assert!(refused.0.contains("more than --max-probes 3"), "{refused}");
    }
}
