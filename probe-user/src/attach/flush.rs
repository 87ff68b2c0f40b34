//! Flushing the hit records each CPU stages (probe_common::HitBatch): a CPU writes its
//! batch to the ring buffer when it is full, or older than `FLUSH_AFTER_NS` at that
//! CPU's next hit. A probe that fires rarely, or the last hits before a run ends, would
//! otherwise wait there. So probetop puts a uprobe of its own, with the cookie
//! `FLUSH_PROBE_ID`, on [`probetop_flush_staged_records`] in its own process, and one
//! thread of its own pinned to each CPU calls that function there: on a timer, and when
//! the collector asks before it reads the last records. Pinned once rather than one
//! thread moved from CPU to CPU: each move wakes the kernel's migration thread on the
//! CPU the target runs on.

use std::{
    io,
    os::fd::OwnedFd,
    path::PathBuf,
    sync::mpsc,
    thread::{self, JoinHandle},
    time::Duration,
};

use probe_common::FLUSH_PROBE_ID;

use crate::sys;

/// How often every CPU's staged records are flushed without being asked: the live
/// views refresh no faster, and each flush is a wakeup on the target's CPUs.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// The function probetop probes in itself; a hit on it flushes the CPU's batch.
#[unsafe(no_mangle)]
#[inline(never)]
pub(super) extern "C" fn probetop_flush_staged_records() -> u32 {
    // Kept opaque so the function has a body of its own that no other one is merged with.
    std::hint::black_box(FLUSH_PROBE_ID)
}

/// Where [`probetop_flush_staged_records`] is in probetop's own executable: the path to
/// give the kernel and the file offset, from the mapping holding its address.
pub(super) fn own_flush_point() -> io::Result<(PathBuf, u64)> {
    let address = probetop_flush_staged_records as *const () as usize as u64;
    let maps = sys::maps::read_maps(std::process::id())?;
    let offset = file_offset_in_maps(&maps, address).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no mapping of probetop's own code holds {address:#x}"),
        )
    })?;
    // The kernel opens the path in probetop's own process: /proc/self/exe is its file
    // even if it was replaced on disk since.
    Ok((sys::maps::OWN_EXE.into(), offset))
}

/// The file offset of `address` in the mapping that holds it.
fn file_offset_in_maps(maps: &[sys::maps::MapEntry], address: u64) -> Option<u64> {
    maps.iter()
        .find(|m| (m.start..m.end).contains(&address))
        .map(|m| address - m.start + m.offset)
}

/// The flush probe, attached, and the threads that fire it. Dropping it stops the
/// threads and detaches the probe.
#[derive(Debug)]
pub struct StagedFlush {
    /// One per CPU thread: a request carries where to say it is done.
    requests: Vec<mpsc::Sender<mpsc::Sender<()>>>,
    threads: Vec<JoinHandle<()>>,
    _link: Vec<OwnedFd>,
}

impl StagedFlush {
    /// Starts a thread pinned to each CPU probetop may run on, firing the flush probe
    /// attached by `link` there.
    pub(super) fn start(link: Vec<OwnedFd>) -> io::Result<Self> {
        let mut flush = Self {
            requests: Vec::new(),
            threads: Vec::new(),
            _link: link,
        };
        for cpu in allowed_cpus()? {
            let (requests, incoming) = mpsc::channel::<mpsc::Sender<()>>();
            let thread = thread::Builder::new()
                .name(format!("probetop-flush{cpu}"))
                .spawn(move || {
                    // A CPU taken away since (a cpuset change) keeps its records until
                    // its next hit; the other CPUs' threads carry on.
                    if pin_to(cpu).is_err() {
                        return;
                    }
                    loop {
                        let ack = match incoming.recv_timeout(FLUSH_EVERY) {
                            Ok(ack) => Some(ack),
                            Err(mpsc::RecvTimeoutError::Timeout) => None,
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        };
                        probetop_flush_staged_records();
                        if let Some(ack) = ack {
                            let _ = ack.send(());
                        }
                    }
                })?;
            flush.requests.push(requests);
            flush.threads.push(thread);
        }
        Ok(flush)
    }

    /// Flushes every CPU's staged records now; returns once they are in the ring.
    pub fn flush_now(&self) {
        let (ack, done) = mpsc::channel();
        let asked = self
            .requests
            .iter()
            .filter(|requests| requests.send(ack.clone()).is_ok())
            .count();
        drop(ack);
        for _ in 0..asked {
            // Bounded: a thread that died must not hang the run's end.
            if done.recv_timeout(Duration::from_secs(1)).is_err() {
                break;
            }
        }
    }
}

impl Drop for StagedFlush {
    fn drop(&mut self) {
        self.requests.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The CPUs probetop's threads may run on. A target on a CPU outside them (another
/// cpuset) has its last records flushed by its own next hit only.
fn allowed_cpus() -> io::Result<Vec<usize>> {
    sys::cpu::allowed_cpus()
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> io::Result<()> {
    sys::cpu::pin_thread_to(cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_comes_from_the_mapping_that_holds_the_address() {
        let maps = "\
5555a000-5555b000 r--p 00000000 fe:01 42 /usr/bin/probetop
5555b000-5555f000 r-xp 00001000 fe:01 42 /usr/bin/probetop
7fff0000-7fff1000 rw-p 00000000 00:00 0 [stack]
";
        let maps = sys::maps::parse_maps(maps);
        assert_eq!(file_offset_in_maps(&maps, 0x5555_b010), Some(0x1010));
        assert_eq!(file_offset_in_maps(&maps, 0x5555_a004), Some(0x4));
        assert_eq!(file_offset_in_maps(&maps, 0x1000), None);
    }

    #[test]
    fn the_flush_function_is_mapped_in_this_process() {
        let (path, offset) = own_flush_point().expect("own flush point");
        assert_eq!(path, PathBuf::from("/proc/self/exe"));
        assert!(offset > 0);
    }
}
