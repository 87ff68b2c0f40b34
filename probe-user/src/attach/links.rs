//! Which probe is held by which link, and linking, unlinking and linking again: one
//! perf event and link per probe, or one uprobe_multi link per (file, program, kind)
//! shared by its probes.

use std::{collections::HashMap, io, os::fd::OwnedFd, path::PathBuf};

use super::{AttachError, AttachPath, AttachRequest, Attachment, multi, slot_mut};
use crate::spec::ProbeKind;

/// The link of one probe, or of every probe of a uprobe_multi link; dropping it
/// detaches them.
#[derive(Debug)]
pub struct ProbeLink {
    pub(super) _fds: LinkFds,
}

#[derive(Debug)]
pub(super) enum LinkFds {
    /// A perf event and the BPF link binding the program to it (the link first, so it
    /// is closed first), one per site of the probe.
    PerfEvent { _events: Vec<(OwnedFd, OwnedFd)> },
    /// A uprobe_multi link.
    Multi { _link: OwnedFd },
}

/// A probe's new place in [`Attachment::move_probes`].
#[derive(Debug, Clone)]
pub struct ProbeMove {
    pub probe_id: u32,
    pub path: PathBuf,
    pub file_offset: u64,
    pub semaphore_offset: Option<u64>,
}

/// Where an attached probe's link is.
#[derive(Debug)]
pub(super) enum Attached {
    /// Its own perf event and link.
    PerfEvent(ProbeLink),
    /// Shared: the key of its uprobe_multi link in [`Attachment::multi_links`].
    Multi(u64),
}

/// A uprobe_multi link and the probes it holds (all of one [`GroupKey`]).
#[derive(Debug)]
pub(super) struct MultiLink {
    link: OwnedFd,
    members: Vec<u32>,
}

/// What the probes of one uprobe_multi link share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    program: &'static str,
    path: PathBuf,
    retprobe: bool,
    pid: u32,
}

/// An [`AttachRequest`] kept to attach the same probe again after a detach. Its config
/// is not kept: it stays in the kernel's per-probe map, where the collector may have
/// changed it since.
#[derive(Debug, Clone)]
pub(super) struct StoredRequest {
    /// The program the probe runs.
    pub(super) program: &'static str,
    pub(super) kind: ProbeKind,
    pub(super) path: PathBuf,
    pub(super) file_offset: u64,
    /// The probe's other sites, under the same cookie.
    pub(super) more_offsets: Vec<u64>,
    pub(super) semaphore_offset: Option<u64>,
    pub(super) pid: u32,
}

impl StoredRequest {
    /// Every file offset the probe is attached at, the first one first.
    pub(super) fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.file_offset).chain(self.more_offsets.iter().copied())
    }
}

impl StoredRequest {
    fn group(&self) -> GroupKey {
        GroupKey {
            program: self.program,
            path: self.path.clone(),
            retprobe: self.kind == ProbeKind::Uretprobe,
            pid: self.pid,
        }
    }
}

impl Attachment {
    /// Records and links `requests` (their configs are in place), each running the
    /// program `program` names for it; the outcome of each, in order. A probe attached
    /// already under the same id is detached first.
    pub(super) fn link_requests(
        &mut self,
        requests: &[AttachRequest],
        program: impl Fn(&AttachRequest) -> &'static str,
    ) -> Vec<Result<(), AttachError>> {
        let ids: Vec<u32> = requests.iter().map(|r| r.probe_id).collect();
        self.unlink(&ids);
        for request in requests {
            let stored = StoredRequest {
                program: program(request),
                kind: request.kind,
                path: request.path.to_path_buf(),
                file_offset: request.file_offset,
                more_offsets: request.more_offsets.clone(),
                semaphore_offset: request.semaphore_offset,
                pid: request.pid,
            };
            *slot_mut(&mut self.requests, request.probe_id) = Some(stored);
        }
        let mut failures = self.link_stored(&ids);
        ids.iter()
            .map(|id| match failures.remove(id) {
                Some(error) => {
                    // Never attached: nothing to attach again.
                    *slot_mut(&mut self.requests, *id) = None;
                    Err(error)
                }
                None => Ok(()),
            })
            .collect()
    }

    /// Attaches the probes of `ids`, whose requests are stored and which are not
    /// attached; returns the refusals by probe id.
    fn link_stored(&mut self, ids: &[u32]) -> HashMap<u32, AttachError> {
        let mut failures = HashMap::new();
        match self.path {
            AttachPath::PerfEvent => {
                for &id in ids {
                    match self.open_perf_link(id) {
                        Ok(link) => {
                            *slot_mut(&mut self.links, id) = Some(Attached::PerfEvent(link))
                        }
                        Err(error) => {
                            failures.insert(id, error);
                        }
                    }
                }
            }
            AttachPath::UprobeMulti => {
                // One link per group, in the order groups first appear.
                let mut groups: Vec<(GroupKey, Vec<u32>)> = Vec::new();
                for &id in ids {
                    let Some(request) = self.request(id) else {
                        continue;
                    };
                    let key = request.group();
                    match groups.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, members)) => members.push(id),
                        None => groups.push((key, vec![id])),
                    }
                }
                for (key, members) in groups {
                    self.link_group(&key, members, &mut failures);
                }
            }
        }
        failures
    }

    pub(super) fn request(&self, probe_id: u32) -> Option<&StoredRequest> {
        self.requests
            .get(probe_id as usize)
            .and_then(Option::as_ref)
    }

    /// Creates one uprobe_multi link for `members` (all of `key`). The kernel refuses
    /// a whole link for one point it cannot probe: then each half is tried on its own,
    /// down to the refused points, so every other one is attached and each refusal
    /// names its probe.
    fn link_group(
        &mut self,
        key: &GroupKey,
        members: Vec<u32>,
        failures: &mut HashMap<u32, AttachError>,
    ) {
        if members.is_empty() {
            return;
        }
        let points: Vec<multi::Point> = members
            .iter()
            .filter_map(|&id| self.request(id).map(|request| (id, request)))
            .flat_map(|(id, request)| {
                request.offsets().map(move |offset| multi::Point {
                    offset,
                    ref_ctr_offset: request.semaphore_offset.unwrap_or(0),
                    cookie: u64::from(id),
                })
            })
            .collect();
        let created = match self.multi.as_mut() {
            Some(programs) => match programs.program(key.program) {
                Ok(program) => {
                    multi::create_link(program, &key.path, &points, key.retprobe, key.pid)
                        .map_err(multi::Refusal::Kernel)
                }
                Err(error) => Err(multi::Refusal::Program(error)),
            },
            None => Err(multi::Refusal::Program(AttachError::Unsupported(
                "uprobe_multi links were not set up".to_string(),
            ))),
        };
        match created {
            Ok(link) => {
                let handle = self.next_multi_link;
                self.next_multi_link += 1;
                for &id in &members {
                    *slot_mut(&mut self.links, id) = Some(Attached::Multi(handle));
                }
                self.multi_links.insert(handle, MultiLink { link, members });
            }
            Err(multi::Refusal::Kernel(source)) if members.len() == 1 => {
                failures.insert(members[0], self.multi_error(members[0], source));
            }
            Err(multi::Refusal::Kernel(source)) if !multi::refuses_the_whole_link(&source) => {
                let mut first = members;
                let second = first.split_off(first.len() / 2);
                self.link_group(key, first, failures);
                self.link_group(key, second, failures);
            }
            // The same for every point: the target is gone, the file cannot be opened.
            Err(multi::Refusal::Kernel(source)) => {
                for id in members {
                    let error = match source.raw_os_error() {
                        Some(code) => self.multi_error(id, io::Error::from_raw_os_error(code)),
                        None => AttachError::Unsupported(format!("probe {id}: {source}")),
                    };
                    failures.insert(id, error);
                }
            }
            Err(multi::Refusal::Program(error)) => {
                let message = error.to_string();
                for id in members {
                    failures.insert(id, AttachError::Unsupported(message.clone()));
                }
            }
        }
    }

    /// The error of a uprobe_multi link refused with `source`, naming `probe_id`
    /// (the refused point when the link held only it).
    fn multi_error(&self, probe_id: u32, source: io::Error) -> AttachError {
        match self.request(probe_id) {
            Some(request) => AttachError::UprobeMulti {
                probe_id,
                kind: request.kind,
                path: super::error::shown_path(&request.path),
                offset: request.file_offset,
                source,
            },
            None => AttachError::Unsupported(format!("probe {probe_id}: {source}")),
        }
    }

    /// Whether probe `probe_id` is attached now.
    pub fn is_attached(&self, probe_id: u32) -> bool {
        self.links
            .get(probe_id as usize)
            .is_some_and(Option::is_some)
    }

    /// Detaches the probes of `ids` that are attached; returns how many, and the links
    /// that held only probes of `ids`, for the caller to close (closing waits for the
    /// kernel's grace period). A uprobe_multi link that holds other probes too is
    /// closed here and made again for those (one close and one create per link, never
    /// one per probe): they miss the hits in between, rather than count one twice.
    fn unlink(&mut self, ids: &[u32]) -> (usize, Vec<ProbeLink>) {
        let mut detached = 0;
        let mut closing = Vec::new();
        let mut touched: Vec<u64> = Vec::new();
        for &id in ids {
            match self.links.get_mut(id as usize).and_then(Option::take) {
                Some(Attached::PerfEvent(link)) => {
                    detached += 1;
                    closing.push(link);
                }
                Some(Attached::Multi(handle)) => {
                    detached += 1;
                    if let Some(link) = self.multi_links.get_mut(&handle) {
                        link.members.retain(|&member| member != id);
                    }
                    if !touched.contains(&handle) {
                        touched.push(handle);
                    }
                }
                None => {}
            }
        }
        for handle in touched {
            let Some(MultiLink { link, members }) = self.multi_links.remove(&handle) else {
                continue;
            };
            if members.is_empty() {
                closing.push(ProbeLink {
                    _fds: LinkFds::Multi { _link: link },
                });
                continue;
            }
            drop(link);
            for &id in &members {
                *slot_mut(&mut self.links, id) = None;
            }
            // Points the kernel accepted a moment ago; should it refuse one now (the
            // target gone), those stay detached, their requests kept for a reattach.
            let _ = self.link_stored(&members);
        }
        (detached, closing)
    }

    /// Detaches one probe; it can be attached again with [`Self::reattach`]. Returns
    /// whether it was attached.
    pub fn detach(&mut self, probe_id: u32) -> bool {
        self.detach_set(&[probe_id]) == 1
    }

    /// Detaches one probe for good: its request is forgotten, so it cannot be attached
    /// again. For probes of a program the target no longer runs (it exec'd): their
    /// attach path may name the new program now, where their offset means nothing.
    /// Returns its link, for the caller to close where waiting is harmless (closing
    /// waits for the kernel's grace period), unless the link holds other probes.
    pub fn retire(&mut self, probe_id: u32) -> Option<ProbeLink> {
        self.retire_set(&[probe_id]).pop()
    }

    /// [`Self::retire`] for many probes at once: the links they held alone (one per
    /// uprobe_multi link, however many probes it held), for the caller to close.
    pub fn retire_set(&mut self, ids: &[u32]) -> Vec<ProbeLink> {
        for &id in ids {
            if let Some(request) = self.requests.get_mut(id as usize) {
                *request = None;
            }
        }
        self.unlink(ids).1
    }

    /// Attaches a probe detached by [`Self::detach`] again, as its original request
    /// asked; nothing happens if it is attached.
    pub fn reattach(&mut self, probe_id: u32) -> Result<(), AttachError> {
        self.reattach_set(&[probe_id])
    }

    /// The ids of every probe attached now.
    pub fn attached_ids(&self) -> Vec<u32> {
        (0..self.links.len() as u32)
            .filter(|&id| self.is_attached(id))
            .collect()
    }

    /// The ids of every probe that can be attached: attached now, or detached by
    /// [`Self::detach_set`] (its request kept).
    pub(crate) fn held_ids(&self) -> Vec<u32> {
        (0..self.requests.len() as u32)
            .filter(|&id| self.request(id).is_some())
            .collect()
    }

    /// Detaches the probes of `ids` that are attached, keeping their requests so that
    /// [`Self::reattach_set`] can attach them again; returns how many it detached.
    /// On the uprobe_multi path this is one close per link touched (and one create
    /// for the probes of a link left attached).
    pub fn detach_set(&mut self, ids: &[u32]) -> usize {
        self.unlink(ids).0
    }

    /// Attaches the probes of `ids` again (those detached by [`Self::detach_set`] or
    /// [`Self::detach`]); probes attached already are left as they are. On the
    /// uprobe_multi path they get one new link per file, program and kind. Every probe
    /// that can be is attached; the error is the first that cannot, in `ids` order.
    pub fn reattach_set(&mut self, ids: &[u32]) -> Result<(), AttachError> {
        let mut wanted = Vec::new();
        // A set, not `wanted.contains`: tens of thousands of ids go through here.
        let mut seen = std::collections::HashSet::new();
        for &id in ids {
            if !self.is_attached(id) && self.request(id).is_some() && seen.insert(id) {
                wanted.push(id);
            }
        }
        let mut failures = self.link_stored(&wanted);
        for &id in ids {
            if self.request(id).is_none() {
                return Err(AttachError::Unsupported(format!(
                    "probe {id} was never attached, or belonged to a program the target no longer runs"
                )));
            }
            if let Some(error) = failures.remove(&id) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// Moves probes to another file (the same functions in a new file at a library's
    /// path): each `moves` probe keeps its id, program, kind and config, takes the new
    /// path and offsets, and is linked there if it was attached (one detached by the
    /// TUI or an in-situ window stays detached, to be attached there later); the probes
    /// of `retire` (not found in the new file) are detached for good. Both are unlinked
    /// together, so no shared uprobe_multi link is made again, by path, with an old
    /// offset on the new file. Returns the outcome of each move, in order, and the links
    /// to close (closing waits for the kernel's grace period).
    pub fn move_probes(
        &mut self,
        moves: &[ProbeMove],
        retire: &[u32],
    ) -> (Vec<Result<(), AttachError>>, Vec<ProbeLink>) {
        let ids: Vec<u32> = moves.iter().map(|m| m.probe_id).collect();
        let attached: Vec<bool> = ids.iter().map(|&id| self.is_attached(id)).collect();
        for &id in retire {
            if let Some(request) = self.requests.get_mut(id as usize) {
                *request = None;
            }
        }
        let all: Vec<u32> = ids.iter().chain(retire).copied().collect();
        let (_, closing) = self.unlink(&all);
        let mut relink = Vec::new();
        let mut missing = Vec::new();
        for (m, &was_attached) in moves.iter().zip(&attached) {
            match self
                .requests
                .get_mut(m.probe_id as usize)
                .and_then(Option::as_mut)
            {
                Some(request) => {
                    request.path = m.path.clone();
                    request.file_offset = m.file_offset;
                    request.semaphore_offset = m.semaphore_offset;
                    if was_attached {
                        relink.push(m.probe_id);
                    }
                }
                None => missing.push(m.probe_id),
            }
        }
        let mut failures = self.link_stored(&relink);
        let outcomes = ids
            .iter()
            .map(|&id| {
                if missing.contains(&id) {
                    return Err(AttachError::Unsupported(format!(
                        "probe {id} was never attached"
                    )));
                }
                match failures.remove(&id) {
                    Some(error) => {
                        // Its old place is gone and the new one refused: nothing to
                        // attach again.
                        *slot_mut(&mut self.requests, id) = None;
                        Err(error)
                    }
                    None => Ok(()),
                }
            })
            .collect();
        (outcomes, closing)
    }

    /// Detaches every probe; the programs stay loaded until the attachment is dropped.
    /// On the uprobe_multi path that is one close per link, not per probe.
    pub fn detach_all(&mut self) {
        // Closing from many threads at once was tried: perf-event probes still closed
        // one after the other (293 in 40 s), the kernel serialises their teardown.
        self.links.clear();
        self.multi_links.clear();
    }
}
