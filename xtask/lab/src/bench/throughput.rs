//! Part 2 of the bench: the highest lossless hit rate and probetop's own CPU.

use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};

use super::*;

// ---------------------------------------------------------------------------------------
// 2. Throughput

#[derive(Debug, Clone)]
pub(super) struct ThroughputRun {
    pub(super) mode: &'static str,
    /// Requested hits/s over every thread; None: unpaced.
    pub(super) offered: Option<f64>,
    pub(super) seconds: f64,
    pub(super) calls: u64,
    pub(super) hits: u64,
    pub(super) dropped: u64,
    pub(super) received: u64,
    /// probetop's CPU time while the load ran, as a fraction of one core.
    pub(super) cpu_cores: f64,
}

impl ThroughputRun {
    pub(super) fn rate(&self) -> f64 {
        self.calls as f64 / self.seconds
    }

    /// Every hit counted, none dropped.
    pub(super) fn lossless(&self) -> bool {
        self.dropped == 0 && self.hits == self.calls
    }

    /// probetop's CPU per 100k hits/s, in % of one core.
    pub(super) fn cpu_per_100k(&self) -> f64 {
        100.0 * self.cpu_cores / (self.rate() / 100_000.0)
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{} {}: {:.0} hits/s for {:.0} s, {} of {} hits counted, {} dropped, probetop {:.1}% of a core",
            self.mode,
            self.offered
                .map_or("flood".to_string(), |r| format!("paced {r:.0}/s")),
            self.rate(),
            self.seconds,
            self.hits,
            self.calls,
            self.dropped,
            100.0 * self.cpu_cores
        )
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct ThroughputResults {
    /// Per mode: the highest lossless run, if any.
    pub(super) best: Vec<(&'static str, Option<ThroughputRun>)>,
    pub(super) runs: Vec<ThroughputRun>,
    pub(super) threads: usize,
}

impl Bench {
    pub(super) fn throughput(&self) -> Result<ThroughputResults> {
        let s = &self.settings;
        let mut results = ThroughputResults {
            threads: self.cpus,
            ..Default::default()
        };
        for mode in ["ring", "kernel"] {
            // Unpaced threads on every CPU: the fastest the kernel fires probes here, with
            // probetop competing for the same CPUs. If that loses nothing, it is the answer.
            let flood = self.throughput_run(mode, None, s.sustain_s)?;
            eprintln!("bench: throughput: {}", flood.describe());
            results.runs.push(flood.clone());
            let best = if flood.lossless() {
                Some(flood.clone())
            } else {
                self.lossless_search(mode, &flood, &mut results.runs)?
            };
            for &rate in &s.paced_rates {
                if rate < flood.rate() {
                    let run = self.throughput_run(mode, Some(rate), s.search_s)?;
                    eprintln!("bench: throughput: {}", run.describe());
                    results.runs.push(run);
                }
            }
            results.best.push((mode, best));
        }
        Ok(results)
    }

    /// Bisects the paced rate below a lossy flood with short runs, then confirms the best
    /// with a sustained run (stepping down while that loses events).
    pub(super) fn lossless_search(
        &self,
        mode: &'static str,
        flood: &ThroughputRun,
        runs: &mut Vec<ThroughputRun>,
    ) -> Result<Option<ThroughputRun>> {
        let s = &self.settings;
        let (mut low, mut high) = (0.0, flood.rate());
        for _ in 0..if s.quick { 2 } else { 4 } {
            let rate = if low == 0.0 {
                high / 2.0
            } else {
                (low + high) / 2.0
            };
            let run = self.throughput_run(mode, Some(rate), s.search_s)?;
            eprintln!("bench: throughput search: {}", run.describe());
            if run.lossless() {
                low = rate;
            } else {
                high = rate;
            }
            runs.push(run);
        }
        let mut rate = low;
        for _ in 0..3 {
            if rate <= 0.0 {
                return Ok(None);
            }
            let run = self.throughput_run(mode, Some(rate), s.sustain_s)?;
            eprintln!("bench: throughput confirm: {}", run.describe());
            runs.push(run.clone());
            if run.lossless() {
                return Ok(Some(run));
            }
            rate *= 0.8;
        }
        Ok(None)
    }

    pub(super) fn throughput_run(
        &self,
        mode: &'static str,
        offered: Option<f64>,
        seconds: f64,
    ) -> Result<ThroughputRun> {
        let threads = self.cpus;
        let mut cmd = Command::new(&self.threads);
        cmd.args([
            "--threads",
            &threads.to_string(),
            "--seconds",
            &format!("{seconds}"),
        ]);
        if let Some(rate) = offered {
            cmd.args(["--rate", &format!("{}", rate / threads as f64)]);
        }
        let target = Proc::spawn("threads", &mut cmd)?;
        target.wait_for("ready pid=", PATIENCE)?;
        let export = self.work.path.join(format!("throughput-{mode}.json"));
        let mut cmd = self.probetop();
        cmd.args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "--mode",
            mode,
            // The mode's own price, without the streamed start that reads the clock.
            "--clock-seconds",
            "0",
        ])
        .args(["-e", "uprobe:work_unit", "--export"])
        .arg(&export);
        let mut probetop = Proc::spawn("probetop", &mut cmd)?;
        probetop.wait_for("probetop: attached", PATIENCE)?;
        let pt = probetop.pid();
        let first = (Instant::now(), cpu_seconds(pt)?);
        target.signal("USR1")?;
        // probetop's CPU while the load runs: sampled until the target says it is done
        // (probetop exits soon after, taking its /proc entry with it).
        let mut last = first;
        let deadline = Instant::now() + Duration::from_secs_f64(seconds) + PATIENCE;
        let done = loop {
            match target.next_line(Duration::from_millis(100)) {
                Some(line) if line.text.starts_with("done calls=") => break line,
                Some(_) => {}
                None => ensure!(
                    Instant::now() < deadline,
                    "the threads fixture did not finish"
                ),
            }
            if let Ok(cpu) = cpu_seconds(pt) {
                last = (Instant::now(), cpu);
            }
        };
        let calls = field(&done.text, "calls").context("no calls= in the done line")? as u64;
        let status = probetop.wait(PATIENCE)?;
        ensure!(
            status.success(),
            "probetop exited with {status}: {}",
            probetop.rest_text()
        );
        let report = crate::util::export::read(&export)?;
        let probe = report
            .probe_rows()
            .next()
            .context("no probe in the export")?;
        Ok(ThroughputRun {
            mode,
            offered,
            seconds,
            calls,
            hits: probe.hits,
            dropped: probe.dropped,
            received: probe.handler_ns.count,
            cpu_cores: (last.1 - first.1) / (last.0 - first.0).as_secs_f64().max(1e-3),
        })
    }
}

pub(super) fn render_throughput(md: &mut String, t: &ThroughputResults, s: &Settings) {
    let _ = writeln!(md, "### 2. Pipeline throughput\n");
    let _ = writeln!(
        md,
        "`uprobe:work_unit` hit from {} threads (one per CPU) of the `threads` fixture, \
         unpaced (flood: as fast as the kernel fires the probe with probetop running) or \
         paced. Lossless: every hit counted (`hits` = the fixture's own count) and none \
         dropped. probetop's CPU is utime+stime from /proc/PID/stat while the load runs.\n",
        t.threads
    );
    let _ = writeln!(
        md,
        "| mode | highest lossless rate, {:.0} s | probetop CPU, % of a core | per 100k hits/s |",
        s.sustain_s
    );
    let _ = writeln!(md, "|---|---|---|---|");
    for (mode, best) in &t.best {
        match best {
            Some(run) => {
                let _ = writeln!(
                    md,
                    "| {mode} | {:.0} hits/s ({}) | {:.1} | {:.1} |",
                    run.rate(),
                    run.offered
                        .map_or("flood".into(), |r| format!("paced {r:.0}")),
                    100.0 * run.cpu_cores,
                    run.cpu_per_100k()
                );
            }
            None => {
                let _ = writeln!(md, "| {mode} | none lossless | - | - |");
            }
        }
    }
    let _ = writeln!(md, "\nEvery run:\n");
    let _ = writeln!(
        md,
        "| mode | load | s | hits/s | hits counted / calls | dropped | probetop % core | per 100k hits/s |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for run in &t.runs {
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {} / {} | {} | {:.1} | {:.1} |",
            run.mode,
            run.offered
                .map_or("flood".into(), |r| format!("paced {r:.0}/s")),
            run.seconds,
            run.rate(),
            run.hits,
            run.calls,
            run.dropped,
            100.0 * run.cpu_cores,
            run.cpu_per_100k()
        );
    }
    md.push('\n');
}
