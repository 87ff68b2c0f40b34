//! Part 4 of the bench: probetop's peak RSS with 1, 100 and 1000 probes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use std::{fs, thread};

use anyhow::{Context as _, Result, bail, ensure};

use super::*;

// ---------------------------------------------------------------------------------------
// 4. Memory

#[derive(Debug, Clone)]
pub(super) struct MemoryRun {
    pub(super) probes: usize,
    /// VmHWM, KiB, one per repetition.
    pub(super) peak_kib: Vec<u64>,
    /// The same of the `--compare` binary, measured in turn.
    pub(super) compared_peak_kib: Vec<u64>,
    /// libc functions the kernel refused to probe, replaced by others.
    pub(super) replaced: Vec<String>,
}

impl Bench {
    pub(super) fn memory(&self) -> Result<Vec<MemoryRun>> {
        let target = Workload::start(&self.workload, 10_000, Some(1000.0))?;
        let listing = command_listing(self.probetop().args([
            "list",
            "--pid",
            &target.pid().to_string(),
            "--json",
        ]))?;
        // Functions of libc that have one probe point each, a name that is no glob, and a
        // first instruction the kernel will put a uprobe on: it refuses a lock prefix
        // (pthread_spin_lock) and VEX/EVEX encodings (the *_avx2 string functions), and
        // probetop then attaches nothing; no IFUNC probetop cannot place; and no point
        // another name shares (an IFUNC listed at the implementation it calls, which has
        // a name of its own: a run merges the two into one probe). Each refusal caught
        // later costs a whole run.
        let mut at_offset: BTreeMap<(&Path, u64), usize> = BTreeMap::new();
        for point in &listing.points {
            *at_offset
                .entry((point.object.as_path(), point.file_offset))
                .or_default() += 1;
        }
        let mut counts: BTreeMap<String, (usize, bool)> = BTreeMap::new();
        let mut images: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for point in &listing.points {
            let object = point.object.display().to_string();
            if !object.contains("/libc.so") || point.kind != ListedKind::Uprobe {
                continue;
            }
            if !images.contains_key(&object) {
                let bytes = fs::read(&object).with_context(|| format!("reading {object}"))?;
                images.insert(object.clone(), bytes);
            }
            let first = usize::try_from(point.file_offset)
                .ok()
                .and_then(|o| images.get(&object)?.get(o).copied());
            // An IFUNC whose choice the listing could not read is refused by a run (its
            // symbol is the resolver, which runs once at load); a point the listing
            // classes refused is skipped by it.
            let placed = point.ifunc.as_ref().is_none_or(|i| i.at_resolver.is_none())
                && point.cost_class != Some(CostClass::Refused)
                && at_offset.get(&(point.object.as_path(), point.file_offset)) == Some(&1);
            let probeable =
                placed && first.is_some_and(|b| !matches!(b, 0xf0 | 0xc4 | 0xc5 | 0x62));
            let entry = counts.entry(point.name.clone()).or_insert((0, true));
            entry.0 += 1;
            entry.1 &= probeable;
        }
        let names: Vec<&String> = counts
            .iter()
            .filter(|(n, (c, ok))| *c == 1 && *ok && !n.contains(['*', '?', '[', '#', ' ']))
            .map(|(n, _)| n)
            .collect();
        ensure!(
            names.len() >= 1000,
            "libc has only {} plain function names",
            names.len()
        );
        let mut runs = Vec::new();
        for probes in [1usize, 100, 1000] {
            // Spread over the alphabet rather than the first N, which would all be __*.
            let step = names.len() / probes;
            let mut chosen: Vec<&str> = (0..probes).map(|i| names[i * step].as_str()).collect();
            // Replacements for functions the kernel refuses to probe: uprobes cannot
            // decode some first instructions (the VEX-encoded one of
            // __memset_avx2_unaligned, for one) and probetop then attaches nothing.
            let mut spare = names
                .iter()
                .map(|n| n.as_str())
                .filter(|n| !chosen.contains(n))
                .collect::<Vec<_>>()
                .into_iter();
            let mut run = MemoryRun {
                probes,
                peak_kib: Vec::new(),
                compared_peak_kib: Vec::new(),
                replaced: Vec::new(),
            };
            let file = self.work.path.join(format!("memory-{probes}.spec"));
            while run.peak_kib.len() < self.settings.memory_reps {
                let specs: String = chosen
                    .iter()
                    .map(|n| format!("uprobe:libc:{n}\n"))
                    .collect();
                fs::write(&file, specs).with_context(|| format!("writing {}", file.display()))?;
                match self.peak_rss(&self.probetop, target.pid(), &file, probes)? {
                    Ok(kib) => {
                        eprintln!("bench: memory: {probes} probes: VmHWM {kib} KiB");
                        run.peak_kib.push(kib);
                        if let Some(bin) = &self.settings.compare {
                            match self.peak_rss(bin, target.pid(), &file, probes)? {
                                Ok(kib) => {
                                    eprintln!(
                                        "bench: memory: {probes} probes: compared VmHWM {kib} KiB"
                                    );
                                    run.compared_peak_kib.push(kib);
                                }
                                Err(refused) => {
                                    bail!("the compared probetop refused {refused}, this one not")
                                }
                            }
                        }
                    }
                    Err(refused) => {
                        let slot = chosen.iter().position(|n| *n == refused.as_str());
                        let (Some(slot), Some(other)) = (slot, spare.next()) else {
                            bail!("probetop refused {refused}, and it cannot be replaced");
                        };
                        ensure!(run.replaced.len() < 200, "too many libc functions refused");
                        eprintln!(
                            "bench: memory: the kernel refuses a uprobe on {refused}; using {other}"
                        );
                        run.replaced.push(refused);
                        chosen[slot] = other;
                    }
                }
            }
            runs.push(run);
        }
        Ok(runs)
    }

    /// Runs probetop with the specs in `file` for 2 s and returns its peak RSS in KiB,
    /// or `Err(function)` when attaching to that libc function was refused.
    pub(super) fn peak_rss(
        &self,
        bin: &Path,
        pid: u32,
        file: &Path,
        probes: usize,
    ) -> Result<Result<u64, String>> {
        let mut cmd = Command::new(bin);
        cmd.args(["--pid", &pid.to_string(), "--no-tui", "-f"])
            .arg(file)
            .args(["--duration", "2"]);
        let mut tool = Proc::spawn("probetop", &mut cmd)?;
        let attached = match tool.wait_for("probetop: attached", PATIENCE) {
            Ok(line) => line,
            Err(e) => {
                // `probetop: attaching uprobe:libc:NAME: cannot attach ...`
                let refused = tool.drain().iter().find_map(|l| {
                    let rest = l.text.split("attaching uprobe:libc:").nth(1)?;
                    Some(rest.split(':').next()?.to_string())
                });
                return match refused {
                    Some(name) => Ok(Err(name)),
                    None => Err(e),
                };
            }
        };
        let n: usize = attached
            .text
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        ensure!(n == probes, "probetop attached {n} probes, not {probes}");
        let mut peak = 0;
        while tool.running() {
            if let Some(kib) = status_kib(tool.pid(), "VmHWM:") {
                peak = kib;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let status = tool.wait(PATIENCE)?;
        ensure!(
            status.success(),
            "probetop exited with {status}: {}",
            tool.rest_text()
        );
        Ok(Ok(peak))
    }
}

pub(super) fn render_memory(md: &mut String, mem: &[MemoryRun]) {
    let _ = writeln!(md, "### 4. Memory\n");
    let _ = writeln!(
        md,
        "probetop's peak RSS (VmHWM) attached to the workload with N entry probes on distinct \
         libc functions (`-f` spec file), ring mode, 2 s.\n"
    );
    let compared = mem.iter().any(|r| !r.compared_peak_kib.is_empty());
    if compared {
        let _ = writeln!(
            md,
            "| probes | VmHWM, MiB | `--compare` build, MiB | this / compared |\n|---|---|---|---|"
        );
    } else {
        let _ = writeln!(md, "| probes | VmHWM, MiB |\n|---|---|");
    }
    let mib = |kib: &[u64]| spread(&kib.iter().map(|k| *k as f64 / 1024.0).collect::<Vec<_>>());
    for run in mem {
        let this = mib(&run.peak_kib);
        if compared {
            let other = mib(&run.compared_peak_kib);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} |",
                run.probes,
                this.show(1),
                other.show(1),
                this.median / other.median
            );
        } else {
            let _ = writeln!(md, "| {} | {} |", run.probes, this.show(1));
        }
    }
    md.push('\n');
}
