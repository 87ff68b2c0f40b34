//! Hot, cold or by the handler's clock: which calibration prices a target's hits.
//!
//! `probetop calibrate` measures a hit twice: in a tight loop, where the kernel's uprobe
//! path, the BPF program and its maps stay in the caches and the TLB between hits
//! (hot), and in a loop that runs a large code and data footprint between two hits, as
//! a server does (cold). `--assume hot|cold|auto` picks the rows; auto decides per run
//! from the target:
//!
//! - cold when the target maps more than [`AUTO_TEXT_BYTES`] of executable code (a
//!   large program: a database, a JVM, a browser), or
//! - cold when hits are far apart on a thread: more than [`AUTO_HIT_INTERVAL_NS`]
//!   between two hits, counting as many threads as the target keeps cores busy
//!   (its CPU time per second, rounded, at least one: the process set's, as its hits
//!   are, read by [`TargetCpu`](super::target_cpu::TargetCpu) for the headline too);
//! - hot otherwise (a small program hitting its probes in a tight loop).
//!
//! `--assume gap` is retired: the session takes it as `clock`, which it differed from
//! only in its fallbacks, and says so.
//!
//! `--assume clock` prices each hit by how slow probetop's ring handler ran on it, read
//! on the work curve (or by its gap where dearer), and a probe whose clock cannot be
//! read (too few hits yet, `--args`) cold. Auto takes it where its rule says cold and
//! the clock can be read: on mariadbd it lay within 25% of the truth on two hosts, where
//! the cold rows were far over it on one (docs/cost.md, "By the handler's clock" and
//! "Measured past the curve's end").

use std::time::Instant;

use serde::Serialize;

use crate::insitu::Reading;

/// Executable mappings above which auto assumes cold.
pub(crate) const AUTO_TEXT_BYTES: u64 = 8 << 20;

/// Time between two hits on one thread above which auto assumes cold, ns.
pub(crate) const AUTO_HIT_INTERVAL_NS: f64 = 10_000.0;

/// Which calibration rows price a hit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assumption {
    /// The tight loop's: caches and TLB warm between hits.
    #[default]
    Hot,
    /// The cold loop's: a server's footprint runs between hits.
    Cold,
    /// Each hit by how slow probetop's handler ran on it (the work curve), or by its gap
    /// where dearer; cold where the clock cannot be read.
    Clock,
}

impl Assumption {
    pub fn as_str(self) -> &'static str {
        match self {
            Assumption::Hot => "hot",
            Assumption::Cold => "cold",
            Assumption::Clock => "clock",
        }
    }
}

/// `--assume`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AssumeChoice {
    Hot,
    Cold,
    /// Retired: priced as `clock` (which it differed from only in its fallbacks), with
    /// one line saying so; still accepted so old scripts run.
    #[value(hide = true)]
    Gap,
    /// Each hit by how slow probetop's ring handler ran on it, read on the calibration's
    /// work curve (in-kernel: on the hits streamed for --clock-seconds first), or by the
    /// time before it where dearer; cold where the clock cannot be read (needs a
    /// calibration with the handler's clock; otherwise auto's rule).
    Clock,
    /// Hot for a tight loop; for a large process or sparse hits, by the handler's clock
    /// where the calibration has it, else cold.
    #[default]
    Auto,
}

/// What auto looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct AutoInputs {
    /// The target's executable mappings, bytes (`None`: not read).
    pub text_bytes: Option<u64>,
    /// Hits per second of every probe together.
    pub hits_per_second: f64,
    /// CPUs the target keeps busy (its CPU seconds per second; `None`: not read).
    pub busy_cores: Option<f64>,
    /// Whether the calibration has a gap curve.
    pub gap_curve: bool,
    /// Whether the handler's clock can price the hits: the calibration's work curve has
    /// it, and the probes stream (or stream first, in-kernel) without `--args`.
    pub clock: bool,
}

/// The assumption and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub assumes: Assumption,
    pub why: String,
}

/// Threads the hits are spread over: the cores the target keeps busy, rounded, at least
/// one.
fn busy_threads(busy_cores: Option<f64>) -> f64 {
    busy_cores.map_or(1.0, |c| c.round().max(1.0))
}

/// The auto rule: hot or cold as [`hot_or_cold`] decides, and where that says cold, the
/// handler's clock when it can be read. On mariadbd on an Intel host the cold rows
/// priced hits 21-177% over the truth from outside, the clock within 25% of it in every
/// cell measured (docs/cost.md, "By the handler's clock"); on an AMD host the cold rows
/// were near the truth and the clock too, once hits past the work curve's end were priced
/// through walks measured past it ("Measured past the curve's end"). The idle gap curve
/// alone is not part of
/// it: it priced mariadbd 35-48% under the truth, and an estimate that errs low tells a
/// DBA a probe is cheaper than it is.
pub(crate) fn auto(inputs: AutoInputs) -> Decision {
    let decision = hot_or_cold(inputs);
    if decision.assumes == Assumption::Cold && inputs.clock && inputs.gap_curve {
        return Decision {
            assumes: Assumption::Clock,
            why: format!("{}: by the handler's clock", decision.why),
        };
    }
    decision
}

/// Auto's rule, and `--assume gap`'s without a gap curve.
fn hot_or_cold(inputs: AutoInputs) -> Decision {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    if let Some(text) = inputs.text_bytes.filter(|t| *t > AUTO_TEXT_BYTES) {
        return Decision {
            assumes: Assumption::Cold,
            why: format!(
                "auto: {:.0} MiB of code mapped, more than {:.0} MiB",
                mib(text),
                mib(AUTO_TEXT_BYTES)
            ),
        };
    }
    let threads = busy_threads(inputs.busy_cores);
    let text = inputs.text_bytes.map_or(String::new(), |t| {
        format!(", {:.1} MiB of code mapped", mib(t))
    });
    if inputs.hits_per_second <= 0.0 || !inputs.hits_per_second.is_finite() {
        return Decision {
            assumes: Assumption::Cold,
            why: format!("auto: no hits yet{text}"),
        };
    }
    let interval_ns = threads / inputs.hits_per_second * 1e9;
    let threads_text = if threads == 1.0 {
        "a thread".to_string()
    } else {
        format!("each of {threads:.0} busy threads")
    };
    let limit = AUTO_HIT_INTERVAL_NS / 1000.0;
    let (assumes, relation) = if interval_ns > AUTO_HIT_INTERVAL_NS {
        (Assumption::Cold, format!("more than {limit:.0} us: cold"))
    } else {
        (Assumption::Hot, format!("{limit:.0} us or less: hot"))
    };
    Decision {
        assumes,
        why: format!(
            "auto: a hit every {:.1} us on {threads_text} ({relation}){text}",
            interval_ns / 1000.0,
        ),
    }
}

/// `choice` applied to `inputs`.
pub(crate) fn decide(choice: AssumeChoice, inputs: AutoInputs) -> Decision {
    match choice {
        AssumeChoice::Hot => Decision {
            assumes: Assumption::Hot,
            why: "--assume hot".into(),
        },
        AssumeChoice::Cold => Decision {
            assumes: Assumption::Cold,
            why: "--assume cold".into(),
        },
        // Retired `gap` is taken as `clock` (the session says so before this).
        AssumeChoice::Clock | AssumeChoice::Gap if inputs.clock && inputs.gap_curve => Decision {
            assumes: Assumption::Clock,
            why: "--assume clock".into(),
        },
        AssumeChoice::Clock | AssumeChoice::Gap => {
            let mut decision = hot_or_cold(inputs);
            decision.why = format!(
                "--assume clock, but the handler's clock cannot be read here (a calibration without it, --args, or --mode sample) ({})",
                decision.why
            );
            decision
        }
        AssumeChoice::Auto => auto(inputs),
    }
}

/// Bytes of the executable mappings of `pid`.
pub(crate) fn text_bytes(pid: u32) -> Option<u64> {
    let maps = crate::sys::maps::read_maps(pid).ok()?;
    Some(
        maps.iter()
            .filter(|m| m.executable())
            .map(|m| m.end.saturating_sub(m.start))
            .sum(),
    )
}

/// The run's choice and what auto needs of the target, read as the run goes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Assumer {
    pub choice: AssumeChoice,
    pub text_bytes: Option<u64>,
    /// Whether the calibration has a gap curve.
    pub gap_curve: bool,
    /// Whether the handler's clock can price the hits ([`AutoInputs::clock`]).
    pub clock: bool,
    /// (when, CPU ns) of the target's CPU readings: when the window opened, and the last
    /// two since.
    first: Option<(Instant, u64)>,
    previous: Option<(Instant, u64)>,
    last: Option<(Instant, u64)>,
    opened: Option<Instant>,
}

/// When a reading was taken, and the CPU time it read.
fn sample(reading: Option<Reading>) -> Option<(Instant, u64)> {
    reading.map(|r| (r.at, r.cpu_ns))
}

impl Assumer {
    /// For `pid`: reads its executable mappings now.
    pub(crate) fn new(choice: AssumeChoice, pid: u32) -> Self {
        Self {
            choice,
            text_bytes: text_bytes(pid),
            ..Default::default()
        }
    }

    /// The measuring window opens (or is reset): the run's rates count from here, and
    /// from `reading`, the target's CPU then (`None`: not read).
    pub(crate) fn open(&mut self, reading: Option<Reading>) {
        self.opened = Some(Instant::now());
        self.first = sample(reading);
        self.previous = None;
        self.last = self.first;
    }

    /// Takes the target's CPU time as read now (once a second or so, by the collector).
    pub(crate) fn observe(&mut self, reading: Option<Reading>) {
        let Some(now) = sample(reading) else {
            return;
        };
        self.previous = self.last;
        self.last = Some(now);
    }

    fn cores(from: Option<(Instant, u64)>, to: Option<(Instant, u64)>) -> Option<f64> {
        let ((t0, c0), (t1, c1)) = (from?, to?);
        let seconds = t1.saturating_duration_since(t0).as_secs_f64();
        (seconds >= 0.2).then(|| c1.saturating_sub(c0) as f64 / 1e9 / seconds)
    }

    /// The decision for the last second: `hits_per_second` of every probe together.
    pub(crate) fn live(&self, hits_per_second: f64) -> Decision {
        decide(
            self.choice,
            AutoInputs {
                text_bytes: self.text_bytes,
                hits_per_second,
                busy_cores: Self::cores(self.previous, self.last)
                    .or_else(|| Self::cores(self.first, self.last)),
                gap_curve: self.gap_curve,
                clock: self.clock,
            },
        )
    }

    /// The decision over the run so far: `hits` of every probe together since the
    /// window opened.
    pub(crate) fn run(&self, hits: u64) -> Decision {
        let seconds = self.opened.map_or(0.0, |t| t.elapsed().as_secs_f64());
        decide(
            self.choice,
            AutoInputs {
                text_bytes: self.text_bytes,
                hits_per_second: if seconds > 0.0 {
                    hits as f64 / seconds
                } else {
                    0.0
                },
                busy_cores: Self::cores(self.first, self.last),
                gap_curve: self.gap_curve,
                clock: self.clock,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(text_mib: Option<u64>, hits_per_second: f64, busy_cores: Option<f64>) -> AutoInputs {
        AutoInputs {
            text_bytes: text_mib.map(|m| m << 20),
            hits_per_second,
            busy_cores,
            gap_curve: false,
            clock: false,
        }
    }

    #[test]
    fn auto_rule() {
        // The tight loop of tests/cost_estimate.rs: one busy thread, a hit a microsecond.
        let tight = auto(inputs(Some(2), 1_000_000.0, Some(1.0)));
        assert_eq!(tight.assumes, Assumption::Hot, "{}", tight.why);
        assert!(tight.why.contains("1.0 us"), "{}", tight.why);
        // mariadbd: a large program, whatever its rate.
        let server = auto(inputs(Some(30), 1_000_000.0, Some(2.0)));
        assert_eq!(server.assumes, Assumption::Cold, "{}", server.why);
        assert!(server.why.contains("30 MiB"), "{}", server.why);
        // A small program hit rarely: 8000 hits/s on the one busy thread, 125 us apart.
        let sparse = auto(inputs(Some(2), 8000.0, Some(0.8)));
        assert_eq!(sparse.assumes, Assumption::Cold, "{}", sparse.why);
        // Four busy threads share 1M hits/s: 4 us apart on each: hot.
        let threads = auto(inputs(Some(2), 1_000_000.0, Some(3.9)));
        assert_eq!(threads.assumes, Assumption::Hot, "{}", threads.why);
        assert!(threads.why.contains("4 busy threads"), "{}", threads.why);
        // Idle threads do not count: 1 busy core of 30 threads, 1M hits/s.
        assert_eq!(
            auto(inputs(Some(2), 1_000_000.0, Some(1.02))).assumes,
            Assumption::Hot
        );
        // Exactly 8 MiB is not large: the rate decides, 8 us apart hot, 12.5 cold.
        assert_eq!(
            auto(inputs(Some(8), 125_000.0, None)).assumes,
            Assumption::Hot
        );
        assert_eq!(
            auto(inputs(Some(8), 80_000.0, None)).assumes,
            Assumption::Cold
        );
        assert_eq!(
            auto(AutoInputs {
                text_bytes: Some((8 << 20) + 1),
                hits_per_second: 1e7,
                busy_cores: None,
                gap_curve: false,
                clock: false,
            })
            .assumes,
            Assumption::Cold
        );
        // Nothing known but a rate: one thread.
        assert_eq!(auto(inputs(None, 50_000.0, None)).assumes, Assumption::Cold);
        assert_eq!(auto(inputs(None, 500_000.0, None)).assumes, Assumption::Hot);
        // No hits: cold (and they cost nothing anyway).
        assert_eq!(auto(inputs(Some(1), 0.0, None)).assumes, Assumption::Cold);
        // With the handler's clock readable, cold becomes the clock; hot stays hot.
        let clocked = |text_mib, hits_per_second| AutoInputs {
            gap_curve: true,
            clock: true,
            ..inputs(Some(text_mib), hits_per_second, Some(1.0))
        };
        let server = auto(clocked(30, 6000.0));
        assert_eq!(server.assumes, Assumption::Clock, "{}", server.why);
        assert!(
            server.why.ends_with("by the handler's clock"),
            "{}",
            server.why
        );
        assert_eq!(auto(clocked(2, 1_000_000.0)).assumes, Assumption::Hot);
    }

    #[test]
    fn choices_override_auto() {
        let server = inputs(Some(30), 10.0, None);
        assert_eq!(decide(AssumeChoice::Hot, server).assumes, Assumption::Hot);
        assert_eq!(
            decide(AssumeChoice::Cold, inputs(Some(1), 1e7, Some(1.0))).assumes,
            Assumption::Cold
        );
        assert_eq!(decide(AssumeChoice::Auto, server).assumes, Assumption::Cold);
        // --assume clock without a readable clock: auto's hot or cold, saying why.
        let no_clock = decide(AssumeChoice::Clock, server);
        assert_eq!(no_clock.assumes, Assumption::Cold);
        assert!(
            no_clock.why.starts_with("--assume clock, but"),
            "{}",
            no_clock.why
        );
        let clocked = AutoInputs {
            gap_curve: true,
            clock: true,
            ..inputs(Some(1), 1e7, Some(1.0))
        };
        assert_eq!(
            decide(AssumeChoice::Clock, clocked).assumes,
            Assumption::Clock
        );
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        let text = text_bytes(pid).expect("maps");
        assert!(text > 0);
        let mut cpu = crate::price::target_cpu::TargetCpu::new(crate::insitu::Members {
            roots: vec![pid],
            follow_forks: false,
            cgroup: None,
        });
        let mut assumer = Assumer::new(AssumeChoice::Auto, pid);
        let opened = cpu.open();
        assert!(opened.is_some());
        assumer.open(opened);
        assumer.observe(cpu.observe());
        assert_eq!(assumer.text_bytes, Some(text));
        // Too soon for a CPU rate: one thread assumed.
        let d = assumer.live(1_000_000.0);
        assert_eq!(
            d.assumes,
            if text > AUTO_TEXT_BYTES {
                Assumption::Cold
            } else {
                Assumption::Hot
            }
        );
    }

    /// The busy cores come from the target's CPU readings it is handed: over the last
    /// interval live, over the window for the run, none from a reading too soon after
    /// the last.
    #[test]
    fn busy_cores_come_from_the_readings() {
        let at = Instant::now();
        let reading = |ms: u64, cpu_ms: u64| {
            Some(Reading {
                at: at + std::time::Duration::from_millis(ms),
                cpu_ns: cpu_ms * 1_000_000,
                work: 0,
                processes: 1,
                lost: 0,
            })
        };
        let mut assumer = Assumer {
            choice: AssumeChoice::Auto,
            text_bytes: Some(1 << 20),
            ..Default::default()
        };
        assumer.open(reading(0, 0));
        // One core busy for a second, then four: 1M hits/s over four threads are 4 us
        // apart on each (hot), over one 1 us.
        assumer.observe(reading(1000, 1000));
        assumer.observe(reading(2000, 4900));
        let live = assumer.live(1_000_000.0);
        assert!(live.why.contains("4 busy threads"), "{}", live.why);
        let run = assumer.run(0);
        assert_eq!(run.assumes, Assumption::Cold, "{}", run.why);
        assert_eq!(
            Assumer::cores(assumer.first, assumer.last).map(|c| (c * 100.0).round()),
            Some(245.0)
        );
        // A reading 0.1 s after the last is too soon for the last interval: the window's.
        assumer.observe(reading(2100, 5000));
        let live = assumer.live(1_000_000.0);
        assert!(live.why.contains("each of 2 busy threads"), "{}", live.why);
        // Nothing read: nothing taken.
        assumer.observe(None);
        assert_eq!(assumer.last, reading(2100, 5000).map(|r| (r.at, r.cpu_ns)));
    }
}
