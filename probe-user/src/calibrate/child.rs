//! The calibration's other side: the workload child (this binary, run as
//! `__calibrate-workload`) the parent asks to call probed functions and their twins,
//! where those functions sit in the file, and the ring buffer drained while it runs.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::fd::AsFd as _,
    path::Path,
    process::{Child, ChildStdin, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};

use super::workload::{ColdRun, Func};
use crate::calibrate::table::ColdOptions;
use crate::sys::maps::{FileId, OWN_EXE, read_maps};

use super::{COLD_WARMUP, CalibrateError, WARMUP, WORKLOAD_SUBCOMMAND};

/// File offsets of the probed instructions in this binary (the child is the same file).
pub(super) struct Offsets {
    by_func: Vec<(Func, u64)>,
    exe: FileId,
}

impl Offsets {
    pub(super) fn of_self() -> Result<Self, CalibrateError> {
        let exe = FileId::of(Path::new(OWN_EXE))
            .map_err(|e| CalibrateError::Locate(format!("{OWN_EXE}: {e}")))?;
        let maps = read_maps(std::process::id())
            .map_err(|e| CalibrateError::Locate(format!("/proc/self/maps: {e}")))?;
        let mut by_func = Vec::new();
        for func in Func::ALL {
            let addr = func.probed_address();
            let entry = maps
                .iter()
                .find(|m| m.start <= addr && addr < m.end && exe.matches(m))
                .ok_or_else(|| {
                    CalibrateError::Locate(format!(
                        "{func:?} at {addr:#x} is in no mapping of the executable"
                    ))
                })?;
            by_func.push((func, addr - entry.start + entry.offset));
        }
        Ok(Self { by_func, exe })
    }

    pub(super) fn of(&self, func: Func) -> u64 {
        self.by_func
            .iter()
            .find(|(f, _)| *f == func)
            .map_or(0, |(_, off)| *off)
    }

    /// Runtime address of `func`'s probed instruction in process `pid`.
    pub(super) fn vaddr_in(&self, pid: u32, func: Func) -> Option<u64> {
        let offset = self.of(func);
        read_maps(pid).ok()?.iter().find_map(|m| {
            let len = m.end - m.start;
            (self.exe.matches(m) && m.offset <= offset && offset < m.offset + len)
                .then(|| m.start + (offset - m.offset))
        })
    }
}

/// The child process running the workload; killed when dropped.
pub(super) struct Workload {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
}

/// Longest a run may take before the child is declared stuck.
pub(super) const RUN_TIMEOUT: Duration = Duration::from_secs(120);

impl Workload {
    pub(super) fn spawn() -> Result<Self, CalibrateError> {
        let mut child = Command::new(OWN_EXE)
            .arg(WORKLOAD_SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(CalibrateError::Spawn)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CalibrateError::Child("no pipes to the child".into()));
        };
        let (tx, replies) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut workload = Self {
            child,
            stdin,
            replies,
        };
        match workload.replies.recv_timeout(RUN_TIMEOUT) {
            Ok(line) if line == "ready" => Ok(workload),
            Ok(line) => Err(CalibrateError::Child(format!(
                "said {line:?} instead of ready"
            ))),
            Err(_) => {
                let status = workload.child.try_wait().ok().flatten();
                Err(CalibrateError::Child(format!(
                    "did not start ({})",
                    status.map_or_else(|| "no answer".to_string(), |s| s.to_string())
                )))
            }
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `command` to the child and parses its reply, `PREFIX V1 V2 ...`, as
    /// `count` numbers.
    pub(super) fn ask(
        &mut self,
        command: &str,
        prefix: &str,
        count: usize,
    ) -> Result<Vec<f64>, CalibrateError> {
        writeln!(self.stdin, "{command}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| CalibrateError::Child(format!("cannot send a command: {e}")))?;
        let line = self
            .replies
            .recv_timeout(RUN_TIMEOUT)
            .map_err(|_| CalibrateError::Child("stopped answering (did it die?)".into()))?;
        line.strip_prefix(prefix)
            .and_then(|rest| {
                rest.trim_start()
                    .split(' ')
                    .map(|v| v.parse().ok())
                    .collect()
            })
            .filter(|values: &Vec<f64>| values.len() == count)
            .ok_or_else(|| CalibrateError::Child(format!("replied {line:?}")))
    }

    /// Runs `calls` calls of `func` in the child; returns ns per call.
    pub(super) fn run(&mut self, func: Func, calls: u64) -> Result<f64, CalibrateError> {
        let values = self.ask(&format!("run {} {calls} {WARMUP}", func.name()), "ns", 1)?;
        Ok(values[0])
    }

    /// Runs `iters` iterations of the cold loop calling `func`.
    pub(super) fn run_cold(
        &mut self,
        func: Func,
        cold: &ColdOptions,
    ) -> Result<ColdRun, CalibrateError> {
        let command = format!(
            "cold {} {} {COLD_WARMUP} {} {}",
            func.name(),
            cold.iters,
            cold.data_bytes,
            cold.code_bytes
        );
        let values = self.ask(&command, "cold", 3)?;
        Ok(ColdRun {
            cpu_ns_per_iter: values[0],
            iter_ns_median: values[1],
            call_ns_median: values[2],
        })
    }

    /// [`Workload::run_pair`] in the cold loop: (probed, unprobed).
    pub(super) fn run_cold_pair(
        &mut self,
        func: Func,
        cold: &ColdOptions,
        probed_first: bool,
    ) -> Result<(ColdRun, ColdRun), CalibrateError> {
        if probed_first {
            let probed = self.run_cold(func, cold)?;
            Ok((probed, self.run_cold(func.twin(), cold)?))
        } else {
            let unprobed = self.run_cold(func.twin(), cold)?;
            Ok((self.run_cold(func, cold)?, unprobed))
        }
    }

    /// Runs probed `func` and its unprobed twin back to back, the twin first unless
    /// `probed_first` (alternated so drift does not bias the difference); returns
    /// (probed, unprobed) ns per call.
    pub(super) fn run_pair(
        &mut self,
        func: Func,
        calls: u64,
        probed_first: bool,
    ) -> Result<(f64, f64), CalibrateError> {
        if probed_first {
            let probed = self.run(func, calls)?;
            Ok((probed, self.run(func.twin(), calls)?))
        } else {
            let unprobed = self.run(func.twin(), calls)?;
            Ok((self.run(func, calls)?, unprobed))
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads hit records off the ring buffer, keeping count and handler-time totals.
pub(super) struct RingReader {
    ring: RingBuf<MapData>,
    records: u64,
    handler_sum_ns: u64,
}

impl RingReader {
    pub(super) fn drain(&mut self) {
        while let Some(item) = self.ring.next() {
            // A batch of staged hits counts as each of its hits.
            let (records, handler_sum_ns) = (&mut self.records, &mut self.handler_sum_ns);
            let parsed = crate::record::Record::parse_each(&item, |record| {
                *records += 1;
                *handler_sum_ns += record.hit().handler_ns;
            });
            if !parsed {
                self.records += 1;
            }
        }
    }
}

/// Drains the ring in a background thread while the child runs, as the live collector
/// does, so the handler's cost includes a consumer working beside it.
pub(super) struct Drainer {
    /// Fires the flush probe so the last staged hits reach the ring.
    flush: crate::attach::StagedFlush,
    stop: Arc<AtomicBool>,
    records: Arc<AtomicU64>,
    handler_sum_ns: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drainer {
    pub(super) fn start(ring: RingBuf<MapData>, flush: crate::attach::StagedFlush) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let records = Arc::new(AtomicU64::new(0));
        let handler_sum_ns = Arc::new(AtomicU64::new(0));
        let (s, r, h) = (stop.clone(), records.clone(), handler_sum_ns.clone());
        let thread = thread::spawn(move || {
            let mut reader = RingReader {
                ring,
                records: 0,
                handler_sum_ns: 0,
            };
            while !s.load(Ordering::Relaxed) {
                reader.drain();
                r.store(reader.records, Ordering::Release);
                h.store(reader.handler_sum_ns, Ordering::Release);
                // As the live collector: woken by the handler once 64 KiB are queued,
                // else every 25 ms. A consumer that is not woken leaves the queue above
                // the threshold, and then every hit forces a wakeup (~800 ns more).
                crate::sys::process::wait_readable(reader.ring.as_fd(), 25);
            }
        });
        Self {
            flush,
            stop,
            records,
            handler_sum_ns,
            thread: Some(thread),
        }
    }

    pub(super) fn totals(&self) -> (u64, u64) {
        (
            self.records.load(Ordering::Acquire),
            self.handler_sum_ns.load(Ordering::Acquire),
        )
    }

    /// Waits until at least `records` were read, at most a second.
    pub(super) fn wait_for(&self, records: u64) -> (u64, u64) {
        let deadline = Instant::now() + Duration::from_secs(1);
        self.flush.flush_now();
        loop {
            let totals = self.totals();
            if totals.0 >= records || Instant::now() >= deadline {
                return totals;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
