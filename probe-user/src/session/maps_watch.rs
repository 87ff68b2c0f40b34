//! A probed library replaced on disk (a new file renamed over its path, as a package
//! upgrade does). The kernel's probes are on a file (an inode), not on a path.
//!
//! - Loaded when probing started: the probes are on the old file, which the target
//!   still runs; loaded again, the new file gets none of its calls. The target's maps
//!   are watched for a probed object mapped at its path as another file, and that is
//!   said once per object (on stderr, in the TUI's footer) and kept in the JSON
//!   (`replaced_objects`), instead of the counts going quiet with no word.
//! - Not loaded yet (`does not map (yet)`): the old file is one the target will never
//!   map. Its path is looked at, and the target's maps, every 100 ms; once the path
//!   names another file, or the target maps another file there, the specs are
//!   resolved again (in the file the target maps, else the one at the path), the
//!   probes are moved to the new file keeping their ids, and that is said in one line
//!   and kept in the JSON (`probes_moved`). Moved before the target maps it, every call
//!   counts; moved after, the calls in between do not, which the line says.
//!
//! A library closed and opened again unchanged needs nothing: the probes are on its
//! inode, and the kernel puts them into every new mapping of it.

use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use tokio::sync::{mpsc, oneshot};

use super::probe::Probe;
use super::report::{ReportSource, unix_now_ms};
use crate::attach::{Attachment, ProbeMove};
use crate::present::export::ReplacedObject;
use crate::resolve::{ProbePoint, ResolveOptions, Resolver};
use crate::spec::{ProbeKind, ProbeSpec};
use crate::sys::maps::{self, FileId, MapEntry};
use crate::target::Target;

/// How often the paths of objects not loaded yet are looked at: a library replaced
/// and then loaded within this may lose the calls of its first moments.
const POLL: Duration = Duration::from_millis(100);
/// Loaded objects are looked at every this many rounds (500 ms): a replaced library
/// shows its first calls' loss within that.
const MAPPED_EVERY: u32 = 5;

/// A probed file the target mapped when its probes were attached.
#[derive(Debug)]
struct Watched {
    /// How the target's maps name it.
    names: Vec<String>,
    /// The file the probes are on.
    file: FileId,
    probes: Vec<u32>,
}

/// A probed file the target did not map (yet), by the path its probes were attached
/// through.
#[derive(Debug)]
struct Pending {
    /// As the target's maps would name it (its own mount namespace).
    name: String,
    /// `/proc/PID/root/...`: the path the kernel resolved.
    path: PathBuf,
    /// The file the probes are on.
    file: FileId,
    probes: Vec<u32>,
}

/// The files the probes' paths name, taken just before they are attached (the kernel
/// resolves each path then): a file renamed over one right after is another file.
pub(super) fn identities(probes: &[Probe]) -> HashMap<PathBuf, FileId> {
    let mut files = HashMap::new();
    for probe in probes {
        let path = &probe.point.attach_path;
        if path.starts_with("/proc/self") || files.contains_key(path) {
            continue;
        }
        if let Ok(file) = FileId::of(path) {
            files.insert(path.clone(), file);
        }
    }
    files
}

/// The objects to watch: every probed file the target maps, but its executable
/// (reached through a pinned descriptor; an exec is `--follow-exec`'s), and every one
/// it does not map yet; `files` are the files their paths named at attach.
fn watched(probes: &[Probe], files: &HashMap<PathBuf, FileId>) -> (Vec<Watched>, Vec<Pending>) {
    let mut objects: Vec<Watched> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    for (id, probe) in probes.iter().enumerate() {
        // Reached through the target's root (`/proc/PID/root/...`), or for the
        // executable through a descriptor probetop holds (`/proc/self/fd/N`).
        let path = &probe.point.attach_path;
        if path.starts_with("/proc/self") {
            continue;
        }
        // As the target's maps name it, in its own mount namespace.
        let name = probe.point.object.display().to_string();
        if probe.point.load_bias.is_none() {
            // One uprobe_multi link per path: its probes move together.
            if let Some(object) = pending.iter_mut().find(|o| o.path == *path) {
                object.probes.push(id as u32);
                continue;
            }
            let Some(&file) = files.get(path) else {
                continue;
            };
            pending.push(Pending {
                name,
                path: path.clone(),
                file,
                probes: vec![id as u32],
            });
            continue;
        }
        if let Some(object) = objects.iter_mut().find(|o| o.names[0] == name) {
            object.probes.push(id as u32);
            continue;
        }
        // Gone already: nothing is known to compare with.
        let Some(&file) = files.get(path) else {
            continue;
        };
        objects.push(Watched {
            names: vec![name],
            file,
            probes: vec![id as u32],
        });
    }
    (objects, pending)
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

/// What a look at an object not loaded at the start found.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    /// Not mapped, and its path names the probed file.
    Same,
    /// The target maps the probed file: from now on it is watched as loaded.
    Loaded,
    /// Another file: the target maps it (`mapped`), or the path names it.
    Another { mapped: bool },
}

/// What `object` is now: `at_path` is the file its path names (if any), `maps` the
/// target's. The file the target maps decides over the path.
fn look(object: &Pending, at_path: Option<FileId>, maps: &[MapEntry]) -> Look {
    // Under any name (a library found through the loader's cache may be mapped
    // through a link to it).
    if maps.iter().any(|m| m.is_file() && object.file.matches(m)) {
        return Look::Loaded;
    }
    if maps
        .iter()
        .any(|m| m.is_file() && m.path.as_deref() == Some(object.name.as_str()))
    {
        return Look::Another { mapped: true };
    }
    match at_path {
        Some(file) if file != object.file => Look::Another { mapped: false },
        _ => Look::Same,
    }
}

/// Probes to move to the file now at an object's path, for the session's loop, which
/// holds the attachment.
pub(super) struct Move {
    name: String,
    /// Whether the target mapped the new file before the move.
    mapped: bool,
    /// Each probe and its point in the new file.
    moves: Vec<(u32, ProbePoint)>,
    /// Probes whose point the new file does not have.
    lost: Vec<u32>,
    /// The file resolved: the move is made only if the path still names it.
    file: FileId,
    /// The ids moved (attached there, or to be when attached again); `None` if the
    /// path named another file again by then (tried again next round).
    reply: oneshot::Sender<Option<Vec<u32>>>,
}

/// What the watch needs to resolve the specs again.
pub(super) struct Respec {
    pub specs: Vec<ProbeSpec>,
    pub options: ResolveOptions,
}

/// Watches the maps of `pid` (a live thread's where the main thread has exited) for
/// the objects of the probes attached at the start; `None` when none is watched.
/// Aborted at the end. The receiver gets the probes to move (see [`apply`]).
pub(super) fn spawn(
    pid: u32,
    source: &Arc<ReportSource>,
    files: &HashMap<PathBuf, FileId>,
    respec: Respec,
) -> Option<(tokio::task::JoinHandle<()>, mpsc::Receiver<Move>)> {
    let (objects, pending) = watched(
        &source
            .rows
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .probes,
        files,
    );
    if objects.is_empty() && pending.is_empty() {
        return None;
    }
    let (moves, received) = mpsc::channel(1);
    let task = tokio::spawn(run(
        pid,
        objects,
        pending,
        source.clone(),
        Arc::new(respec),
        moves,
    ));
    Some((task, received))
}

async fn run(
    pid: u32,
    mut objects: Vec<Watched>,
    mut pending: Vec<Pending>,
    source: Arc<ReportSource>,
    respec: Arc<Respec>,
    moves: mpsc::Sender<Move>,
) {
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut round: u32 = 0;
    while !objects.is_empty() || !pending.is_empty() {
        poll.tick().await;
        round = round.wrapping_add(1);
        let mapped_due = round.is_multiple_of(MAPPED_EVERY) && !objects.is_empty();
        if !mapped_due && pending.is_empty() {
            continue;
        }
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
        if mapped_due {
            let (now, kept): (Vec<Watched>, Vec<Watched>) =
                objects.into_iter().partition(|o| replaced(o, &maps));
            objects = kept;
            for object in now {
                say_replaced(pid, object, &source);
            }
        }
        let mut index = 0;
        while index < pending.len() {
            let object = &pending[index];
            match look(object, FileId::of(&object.path).ok(), &maps) {
                Look::Same => index += 1,
                Look::Loaded => {
                    let object = pending.swap_remove(index);
                    let mut names = vec![object.name];
                    for m in maps.iter().filter(|m| object.file.matches(m)) {
                        if let Some(path) = &m.path
                            && !names.contains(path)
                        {
                            names.push(path.clone());
                        }
                    }
                    objects.push(Watched {
                        names,
                        file: object.file,
                        probes: object.probes,
                    });
                }
                Look::Another { mapped } => {
                    match move_probes(object, mapped, &source, &respec, &moves).await {
                        Some(Moved::Again) => index += 1,
                        Some(Moved::To(file, moved)) if !moved.is_empty() => {
                            let object = &mut pending[index];
                            object.file = file;
                            object.probes = moved;
                            index += 1;
                        }
                        // Nothing left on it (or the session is ending).
                        _ => {
                            pending.swap_remove(index);
                        }
                    }
                }
            }
        }
    }
}

/// Says that a loaded object was loaded again as another file, and keeps it for the
/// JSON.
fn say_replaced(pid: u32, object: Watched, source: &ReportSource) {
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
            probes_moved: false,
        })
    });
}

/// What became of a move.
enum Moved {
    /// The path named yet another file meanwhile: the next round tries again.
    Again,
    /// The probes of these ids are on this file now.
    To(FileId, Vec<u32>),
}

/// Resolves the specs of `object`'s probes again (off the loop: it reads the whole
/// file) and hands the session the moves; `None` when the session is gone.
async fn move_probes(
    object: &Pending,
    mapped: bool,
    source: &Arc<ReportSource>,
    respec: &Arc<Respec>,
    moves: &mpsc::Sender<Move>,
) -> Option<Moved> {
    let rows: Vec<(u32, Probe)> = {
        let rows = source
            .rows
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        object
            .probes
            .iter()
            .filter_map(|&id| Some((id, rows.probes.get(id as usize)?.clone())))
            .collect()
    };
    let target = source.target.clone();
    let respec = respec.clone();
    let (name, path) = (object.name.clone(), object.path.clone());
    let resolved =
        tokio::task::spawn_blocking(move || resolve_again(&target, &respec, &rows, &name, &path))
            .await
            .ok()?;
    let Some(Found { file, found, lost }) = resolved else {
        return Some(Moved::Again);
    };
    let (reply, moved) = oneshot::channel();
    let request = Move {
        name: object.name.clone(),
        mapped,
        moves: found,
        lost,
        file,
        reply,
    };
    moves.send(request).await.ok()?;
    Some(match moved.await.ok()? {
        Some(ids) => Moved::To(file, ids),
        None => Moved::Again,
    })
}

/// The specs resolved again in a replaced object's new file.
struct Found {
    /// The file resolved.
    file: FileId,
    /// Each probe and its point in it.
    found: Vec<(u32, ProbePoint)>,
    /// The probes whose point it does not have.
    lost: Vec<u32>,
}

/// Where a probe is in its file, as a spec named it: kind, symbol (or
/// `provider:name`), and offset into the function.
type PointKey = (ProbeKind, String, Option<u64>);

fn key(point: &ProbePoint) -> PointKey {
    (
        point.kind,
        point.symbol.clone(),
        point.function.map(|f| f.offset),
    )
}

/// The specs of `rows` resolved again in `target`: the points in the object `name`
/// (reached through `path`) now, matched to the rows (the n-th site of a name to the
/// n-th); the file they are in, the matches, and the rows with none. `None` if the path
/// named another file after the resolution than before.
fn resolve_again(
    target: &Target,
    respec: &Respec,
    rows: &[(u32, Probe)],
    name: &str,
    path: &std::path::Path,
) -> Option<Found> {
    let before = FileId::of(path).ok();
    let resolver = Resolver::new(target, respec.options.clone());
    let mut fresh: HashMap<PointKey, VecDeque<ProbePoint>> = HashMap::new();
    let mut attach_path = None;
    for spec in respec
        .specs
        .iter()
        .filter(|s| rows.iter().any(|(_, p)| p.spec == s.text))
    {
        // A spec that matches nothing in the new file: its rows are lost below.
        let Ok(points) = resolver.resolve(spec) else {
            continue;
        };
        for point in points {
            if point.object.as_os_str() != name && point.attach_path != path {
                continue;
            }
            attach_path.get_or_insert_with(|| point.attach_path.clone());
            fresh.entry(key(&point)).or_default().push_back(point);
        }
    }
    // Read through the path (not through a mapping, which holds its file): the file
    // read must be the one it names still.
    let through_path = attach_path.as_deref().is_none_or(|p| p == path);
    if through_path && FileId::of(path).ok() != before {
        return None;
    }
    let file = match attach_path {
        Some(p) => FileId::of(&p).ok()?,
        None => before?,
    };
    let mut found = Vec::new();
    let mut lost = Vec::new();
    for (id, probe) in rows {
        match fresh
            .get_mut(&key(&probe.point))
            .and_then(VecDeque::pop_front)
        {
            Some(point) => found.push((*id, point)),
            None => lost.push(*id),
        }
    }
    Some(Found { file, found, lost })
}

/// Waits for the next probes to move; never resolves once the watch is gone.
/// Cancel-safe.
pub(super) async fn next_move(moves: &mut Option<mpsc::Receiver<Move>>) -> Move {
    if let Some(received) = moves.as_mut()
        && let Some(request) = received.recv().await
    {
        return request;
    }
    *moves = None;
    std::future::pending().await
}

/// Moves the probes to the new file (the session's loop holds the attachment), updates
/// the rows, and says it in one line.
pub(super) fn apply(request: Move, attachment: &mut Attachment, source: &ReportSource, pid: u32) {
    let Move {
        name,
        mapped,
        moves,
        lost,
        file,
        reply,
    } = request;
    // Replaced again since it was read: its offsets may not fit the file there now.
    if moves
        .iter()
        .any(|(_, point)| FileId::of(&point.attach_path).ok() != Some(file))
    {
        let _ = reply.send(None);
        return;
    }
    let places: Vec<ProbeMove> = moves
        .iter()
        .map(|(id, point)| ProbeMove {
            probe_id: *id,
            path: point.attach_path.clone(),
            file_offset: point.file_offset,
            semaphore_offset: point.usdt.as_ref().and_then(|u| u.semaphore_offset),
        })
        .collect();
    let (outcomes, closing) = attachment.move_probes(&places, &lost);
    // Closing waits for the kernel's grace period: off the loop.
    tokio::task::spawn_blocking(move || drop(closing));
    let mut all: Vec<u32> = moves
        .iter()
        .map(|(id, _)| *id)
        .chain(lost.iter().copied())
        .collect();
    all.sort_unstable();
    let mut moved = Vec::new();
    let mut refused = Vec::new();
    let mut points = Vec::new();
    for ((id, point), outcome) in moves.into_iter().zip(outcomes) {
        match outcome {
            Ok(()) => {
                moved.push(id);
                points.push((id, point));
            }
            Err(e) => refused.push(crate::error_line(&anyhow::Error::new(e))),
        }
    }
    source.update_rows(|rows| {
        for (id, point) in points {
            if let Some(row) = rows.probes.get_mut(id as usize) {
                row.point = point;
            }
        }
        rows.replaced.push(ReplacedObject {
            object: name.clone(),
            probes: all,
            at_unix_ms: unix_now_ms(),
            probes_moved: !moved.is_empty(),
        });
    });
    crate::sys::say(&move_line(
        &name,
        pid,
        mapped,
        moved.len(),
        lost.len(),
        &refused,
    ));
    let _ = reply.send(Some(moved));
}

/// The line said when probes were moved to a replaced object's new file.
fn move_line(
    name: &str,
    pid: u32,
    mapped: bool,
    moved: usize,
    lost: usize,
    refused: &[String],
) -> String {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut line = format!(
        "probetop: {name} was replaced on disk before pid {pid} loaded it: {moved} probe{} moved to the new file",
        plural(moved)
    );
    if mapped && moved > 0 {
        line.push_str(&format!(
            " (pid {pid} mapped it first: its calls until now are not counted)"
        ));
    }
    if lost > 0 {
        line.push_str(&format!(
            "; {lost} probe{} not in it, detached",
            plural(lost)
        ));
    }
    if let Some(first) = refused.first() {
        line.push_str(&format!(
            "; {} could not be attached there ({first})",
            refused.len()
        ));
    }
    line
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

    fn file(inode: u64) -> FileId {
        FileId {
            dev_major: 8,
            dev_minor: 1,
            inode,
        }
    }

    #[test]
    fn another_file_at_the_probed_path_is_a_replacement() {
        let object = Watched {
            names: vec!["/tmp/lib.so".into(), "/real/lib.so".into()],
            file: file(7),
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

    /// An object not loaded at the start: the file the target maps decides, else the
    /// one its path names.
    #[test]
    fn a_pending_object_moves_to_the_file_mapped_or_at_its_path() {
        let object = Pending {
            name: "/tmp/lib.so".into(),
            path: "/proc/1/root/tmp/lib.so".into(),
            file: file(7),
            probes: vec![0],
        };
        let other = [entry("/tmp/other.so", 9, false)];
        // Not mapped, the path unchanged (or unreadable for a moment).
        assert_eq!(look(&object, Some(file(7)), &other), Look::Same);
        assert_eq!(look(&object, None, &[]), Look::Same);
        // Replaced on disk, not loaded yet.
        assert_eq!(
            look(&object, Some(file(9)), &other),
            Look::Another { mapped: false }
        );
        // Loaded as probed: watched as a loaded object from then on.
        assert_eq!(
            look(&object, Some(file(7)), &[entry("/tmp/lib.so", 7, false)]),
            Look::Loaded
        );
        // Loaded as another file, whatever the path names now (replaced again after the
        // load: the mapping is marked deleted).
        assert_eq!(
            look(&object, Some(file(7)), &[entry("/tmp/lib.so", 9, false)]),
            Look::Another { mapped: true }
        );
        assert_eq!(
            look(&object, Some(file(11)), &[entry("/tmp/lib.so", 9, true)]),
            Look::Another { mapped: true }
        );
    }

    #[test]
    fn the_move_line_says_what_was_lost() {
        let line = move_line("/tmp/lib.so", 42, false, 2, 0, &[]);
        assert_eq!(
            line,
            "probetop: /tmp/lib.so was replaced on disk before pid 42 loaded it: 2 probes moved to the new file"
        );
        let line = move_line("/tmp/lib.so", 42, true, 1, 1, &[]);
        assert!(
            line.contains("1 probe moved")
                && line.contains("its calls until now are not counted")
                && line.contains("1 probe not in it, detached"),
            "{line}"
        );
    }
}
