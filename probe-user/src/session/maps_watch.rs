//! A probed library replaced on disk (a new file renamed over its path, as a package
//! upgrade does) and loaded again by the target: the kernel's probes are on the old
//! file's inode, so they count none of the new file's calls. The target's maps are
//! watched for a probed object mapped at its path as another file, and that is said
//! once per object (on stderr, in the TUI's footer) and kept in the JSON
//! (`replaced_objects`), instead of the counts going quiet with no word.
//!
//! A library closed and opened again unchanged needs nothing: the probes are on its
//! inode, and the kernel puts them into every new mapping of it.

use std::{sync::Arc, time::Duration};

use super::probe::Probe;
use super::report::{ReportSource, unix_now_ms};
use crate::present::export::ReplacedObject;
use crate::sys::maps::{self, FileId, MapEntry};

/// How often the maps are read: a replaced library shows its first calls' loss within
/// this.
const POLL: Duration = Duration::from_millis(500);

/// A probed file the target mapped when its probes were attached.
#[derive(Debug)]
struct Watched {
    /// How the target's maps name it.
    names: Vec<String>,
    /// The file the probes are on.
    file: FileId,
    probes: Vec<u32>,
}

/// The objects to watch: every probed file the target maps, but its executable (reached
/// through a pinned descriptor; an exec is `--follow-exec`'s).
fn watched(probes: &[Probe]) -> Vec<Watched> {
    let mut objects: Vec<Watched> = Vec::new();
    for (id, probe) in probes.iter().enumerate() {
        // Reached through the target's root (`/proc/PID/root/...`), or for the
        // executable through a descriptor probetop holds (`/proc/self/fd/N`).
        let path = &probe.point.attach_path;
        if probe.point.load_bias.is_none() || path.starts_with("/proc/self") {
            continue;
        }
        // As the target's maps name it, in its own mount namespace.
        let name = probe.point.object.display().to_string();
        if let Some(object) = objects.iter_mut().find(|o| o.names[0] == name) {
            object.probes.push(id as u32);
            continue;
        }
        // Gone already: nothing is known to compare with.
        let Ok(file) = FileId::of(path) else { continue };
        objects.push(Watched {
            names: vec![name],
            file,
            probes: vec![id as u32],
        });
    }
    objects
}

/// Whether `maps` holds `object`'s path mapped from another file than the probed one.
fn replaced(object: &Watched, maps: &[MapEntry]) -> bool {
    maps.iter().any(|m| {
        !m.deleted
            && m.is_file()
            && m.path
                .as_deref()
                .is_some_and(|p| object.names.iter().any(|n| n == p))
            && !object.file.matches(m)
    })
}

/// Watches the maps of `pid` (a live thread's where the main thread has exited) for
/// the objects of the probes attached at the start; `None` when none is watched.
/// Aborted at the end.
pub(super) fn spawn(pid: u32, source: &Arc<ReportSource>) -> Option<tokio::task::JoinHandle<()>> {
    let objects = watched(
        &source
            .rows
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .probes,
    );
    (!objects.is_empty()).then(|| tokio::spawn(run(pid, objects, source.clone())))
}

async fn run(pid: u32, mut objects: Vec<Watched>, source: Arc<ReportSource>) {
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !objects.is_empty() {
        poll.tick().await;
        // An exec followed retired the probes watched, with their program.
        let execed = !source
            .rows
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .execs
            .is_empty();
        // A read fails once the process is gone, which ends the run.
        let (false, Ok(maps)) = (execed, maps::read_maps(pid)) else {
            return;
        };
        let (now, kept): (Vec<Watched>, Vec<Watched>) =
            objects.into_iter().partition(|o| replaced(o, &maps));
        objects = kept;
        for object in now {
            let n = object.probes.len();
            crate::sys::say(&format!(
                "probetop: pid {pid} loaded {} again and it is another file now (replaced on disk): {n} probe{} stay{} on the old file, counting none of the new one's calls; run probetop again to probe it",
                object.names[0],
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" },
            ));
            source.update_rows(|rows| {
                rows.replaced.push(ReplacedObject {
                    object: object.names[0].clone(),
                    probes: object.probes,
                    at_unix_ms: unix_now_ms(),
                })
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, inode: u64, deleted: bool) -> MapEntry {
        MapEntry {
            start: 0x1000,
            end: 0x2000,
            perms: "r-xp".into(),
            offset: 0,
            dev_major: 8,
            dev_minor: 1,
            inode,
            path: Some(path.into()),
            deleted,
        }
    }

    #[test]
    fn another_file_at_the_probed_path_is_a_replacement() {
        let object = Watched {
            names: vec!["/tmp/lib.so".into(), "/real/lib.so".into()],
            file: FileId {
                dev_major: 8,
                dev_minor: 1,
                inode: 7,
            },
            probes: vec![0],
        };
        // Still the probed file, or the old one deleted and still mapped: not yet.
        assert!(!replaced(&object, &[entry("/tmp/lib.so", 7, false)]));
        assert!(!replaced(&object, &[entry("/tmp/lib.so", 7, true)]));
        // Closed (not mapped at all), or another library: nothing to say.
        assert!(!replaced(&object, &[entry("/tmp/other.so", 9, false)]));
        // Loaded again from a new file, under either name.
        assert!(replaced(&object, &[entry("/tmp/lib.so", 9, false)]));
        assert!(replaced(
            &object,
            &[
                entry("/tmp/lib.so", 7, true),
                entry("/real/lib.so", 9, false)
            ]
        ));
    }
}
