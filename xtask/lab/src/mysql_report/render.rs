//! Writing the report: the Markdown section of docs/mysqld.md and its JSON.

use super::*;
use crate::util::doc::splice_between;

impl Report {
    /// Runs of one cell and variant in one phase.
    pub(super) fn runs_of(
        &self,
        test: &str,
        threads: u32,
        variant: &Variant,
        single_phase: bool,
    ) -> Vec<&Run> {
        self.runs
            .iter()
            .filter(|r| {
                r.test == test
                    && r.threads == threads
                    && &r.variant == variant
                    && r.single_phase == single_phase
            })
            .collect()
    }

    pub(super) fn cells(&self) -> Vec<(String, u32)> {
        self.options
            .tests
            .iter()
            .flat_map(|t| self.options.threads.iter().map(move |&n| (t.clone(), n)))
            .collect()
    }

    pub(super) fn write(
        &self,
        uptime_before: &str,
        uptime_after: &str,
        elapsed: Duration,
    ) -> Result<()> {
        let out = &self.options.out;
        let files = out.join("mysqld");
        fs::create_dir_all(&files).with_context(|| format!("creating {}", files.display()))?;
        // Only this report's files: stale exports of an earlier report would mislead.
        for entry in fs::read_dir(&files).with_context(|| format!("listing {}", files.display()))? {
            let path = entry?.path();
            if path
                .extension()
                .is_some_and(|e| ["hgrm", "svg", "json", "txt"].iter().any(|x| e == *x))
            {
                fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            }
        }
        // The snapshots of stalled runs go with the report.
        for entry in
            fs::read_dir(&self.work).with_context(|| format!("listing {}", self.work.display()))?
        {
            let path = entry?.path();
            if let Some(name) = path
                .file_name()
                .filter(|n| n.to_string_lossy().ends_with("-stalled.txt"))
            {
                fs::copy(&path, files.join(name))
                    .with_context(|| format!("copying {}", path.display()))?;
            }
        }
        let section = self.section(uptime_before, uptime_after, elapsed, &files)?;
        let doc_path = out.join("mysqld.md");
        let existing = fs::read_to_string(&doc_path).unwrap_or_default();
        fs::write(&doc_path, splice(&existing, &section))
            .with_context(|| format!("writing {}", doc_path.display()))?;
        let raw = json!({
            "uptime_before": uptime_before, "uptime_after": uptime_after,
            "elapsed_s": elapsed.as_secs_f64(),
            "options": {
                "quick": self.options.quick,
                "duration_s": self.options.duration, "repeats": self.options.repeats,
                "tests": self.options.tests, "threads": self.options.threads,
                "tables": self.options.tables, "table_size": self.options.table_size,
            },
            "probes": self.probes.iter().map(|p| json!({
                "spec": p.spec, "name": p.name, "symbol": p.symbol, "address": p.address,
                "first_instruction": p.first_insn, "emulated": p.emulated,
            })).collect::<Vec<_>>(),
            "runs": self.runs.iter().map(Run::to_json).collect::<Vec<_>>(),
            "lost": self.lost,
            "trap_calibration": self.traps.iter().map(|(c, v)| json!({
                "case": c.label, "specs": c.specs,
                "user_ns_per_call": v.iter().map(|(u, _)| *u).collect::<Vec<_>>(),
                "sys_ns_per_call": v.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        let raw_path = files.join("runs.json");
        fs::write(&raw_path, serde_json::to_string_pretty(&raw)?)
            .with_context(|| format!("writing {}", raw_path.display()))?;
        println!(
            "mysql-report: wrote {} and {}/",
            doc_path.display(),
            files.display()
        );
        Ok(())
    }

    /// The generated part of docs/mysqld.md.
    pub(super) fn section(
        &self,
        uptime_before: &str,
        uptime_after: &str,
        elapsed: Duration,
        files: &Path,
    ) -> Result<String> {
        let o = &self.options;
        let mut md = String::new();
        let w = &mut md;
        let _ = writeln!(w, "## Measured\n");
        let mut args = Vec::new();
        if o.quick {
            args.push("--quick".to_string());
        }
        let _ = writeln!(
            w,
            "`cargo xtask mysql-report {}--duration {} --repeats {} --tests {} --threads {}` \
             ran {} sysbench runs in {:.1} min, finishing {} (UTC).\n",
            args.iter().map(|a| format!("{a} ")).collect::<String>(),
            o.duration,
            o.repeats,
            o.tests.join(","),
            o.threads
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            self.runs.len(),
            elapsed.as_secs_f64() / 60.0,
            utc_now()
        );
        let _ = writeln!(w, "| | |\n|---|---|");
        for (what, value) in self.machine() {
            let _ = writeln!(w, "| {what} | {value} |");
        }
        let _ = writeln!(w, "| `uptime` before | {uptime_before} |");
        let _ = writeln!(w, "| `uptime` after | {uptime_after} |");
        let background = spread(self.runs.iter().map(Run::background_cores));
        let steal = spread(self.runs.iter().map(|r| r.host.steal / r.wall_s.max(1e-9)));
        let _ = writeln!(
            w,
            "| CPU of other processes during a run (cores) | {} |",
            show_spread(background, 2)
        );
        let _ = writeln!(
            w,
            "| steal during a run (cores) | {} |\n",
            show_spread(steal, 2)
        );
        if !self.lost.is_empty() {
            let _ = writeln!(
                w,
                "**{} run{} lost** to a stall (the tables have fewer repeats there):\n",
                self.lost.len(),
                if self.lost.len() == 1 { "" } else { "s" }
            );
            for lost in &self.lost {
                let _ = writeln!(w, "- {lost}");
            }
            let _ = writeln!(w);
        }

        self.overhead_table(w);
        self.per_hit_table(w);
        self.trap_table(w);
        if o.per_probe {
            self.single_table(w);
        }
        self.handler_tables(w, files)?;
        self.dispatch_check(w);
        self.commands_section(w);
        Ok(md)
    }

    pub(super) fn machine(&self) -> Vec<(&'static str, String)> {
        let first = |cmd: &mut Command| -> String {
            cmd.output()
                .ok()
                .map(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned()
                        + &String::from_utf8_lossy(&o.stderr);
                    text.lines().next().unwrap_or("").trim().to_string()
                })
                .unwrap_or_default()
        };
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default();
        let cpus = thread::available_parallelism().map_or(0, |n| n.get());
        vec![
            ("CPUs", format!("{cpus} x {cpu}")),
            ("kernel", first(Command::new("uname").arg("-r"))),
            ("server", first(Command::new(MARIADBD).arg("--version"))),
            ("sysbench", first(Command::new("sysbench").arg("--version"))),
            ("bpftrace", first(Command::new("bpftrace").arg("--version"))),
            (
                "data",
                format!(
                    "{} tables of {} rows, InnoDB buffer pool {} MiB (the data fits: CPU-bound)",
                    self.options.tables,
                    self.options.table_size,
                    ServerOptions::default().buffer_pool_mib
                ),
            ),
        ]
    }

    /// The agent study's shape: QPS drop, latency increase, CPU per 10k QPS.
    pub(super) fn overhead_table(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "### Overhead on the server\n\n\
             Medians over the repeats, (min-max) where there are several. QPS and p95 are \
             sysbench's (p95 of a whole transaction: 14 statements in read_only, 18 in \
             read_write, 1 in point_select). mariadbd CPU is utime+stime from /proc over \
             the sysbench run, per statement; a probe's trap and handler run in the \
             probed thread, so they land in it. Tool CPU is probetop's (or bpftrace's) own \
             process. Added CPU per 10k QPS is (mariadbd + tool CPU per statement) minus \
             mariadbd's without probes, as percent of one core at 10,000 statements/s. \
             Other load is the CPU of every other process on the machine during the run \
             (from /proc/stat), in cores of the 2: the noise the interleaving spreads. \
             Detach is the time from SIGINT to the tool's exit.\n"
        );
        let _ = writeln!(
            w,
            "| test | threads | probes | QPS | QPS drop | p95 ms | p95 increase | mariadbd us/query | tool CPU % of a core | added CPU per 10k QPS | probe hits/query | other load (cores) | detach s |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (test, threads) in self.cells() {
            let base = self.runs_of(&test, threads, &Variant::None, false);
            let base_qps = spread(base.iter().map(|r| r.sysbench.qps));
            let base_p95 = spread(base.iter().map(|r| r.sysbench.p95_ms));
            let base_cpu = spread(base.iter().map(|r| r.mariadbd_us_per_query()));
            for variant in MAIN_VARIANTS {
                let runs = self.runs_of(&test, threads, &variant, false);
                let qps = spread(runs.iter().map(|r| r.sysbench.qps));
                let p95 = spread(runs.iter().map(|r| r.sysbench.p95_ms));
                let cpu = spread(runs.iter().map(|r| r.mariadbd_us_per_query()));
                let tool = spread(runs.iter().map(|r| r.tool_cores() * 100.0));
                let total = spread(runs.iter().map(|r| r.total_us_per_query()));
                let hits = spread(runs.iter().map(|r| self.hits_per_query(r)));
                let background = spread(runs.iter().map(|r| r.background_cores()));
                let detach = spread(runs.iter().map(|r| r.stop_s));
                let (drop, increase, added) = if variant == Variant::None {
                    ("-".to_string(), "-".to_string(), "-".to_string())
                } else {
                    (
                        pct(med(qps), med(base_qps)),
                        pct(med(p95), med(base_p95)),
                        // us per statement = % of a core at 10k statements/s.
                        format!("{:.1}%", med(total) - med(base_cpu)),
                    )
                };
                let _ = writeln!(
                    w,
                    "| {test} | {threads} | {} | {} | {drop} | {} | {increase} | {} | {} | {added} | {} | {:.2} | {} |",
                    variant.label(),
                    show_spread(qps, 0),
                    show_spread(p95, 2),
                    show_spread(cpu, 1),
                    if variant == Variant::None {
                        "-".into()
                    } else {
                        show_spread(tool, 1)
                    },
                    if variant == Variant::None {
                        "-".into()
                    } else {
                        format!("{:.2}", med(hits))
                    },
                    med(background),
                    if variant == Variant::None {
                        "-".into()
                    } else {
                        format!("{:.1}", med(detach))
                    },
                );
            }
        }
        let _ = writeln!(w);
    }

    /// Probe hits per sysbench statement: probetop's counts, or bpftrace's histograms.
    pub(super) fn hits_per_query(&self, run: &Run) -> f64 {
        let hits = match run.variant {
            Variant::Bpftrace => run.bpftrace_counts.values().sum(),
            _ => run.hits(),
        };
        if run.sysbench.queries == 0 {
            return f64::NAN;
        }
        hits as f64 / run.sysbench.queries as f64
    }

    pub(super) fn per_hit_table(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "### What one hit costs the server\n\n\
             The added mariadbd CPU per statement (medians) divided by the probe hits per \
             statement. The system part is the trap, the kernel's uprobe dispatch, the BPF \
             program and the return to user space, as the probed thread pays them; the \
             total also holds what the server does differently when it runs slower \
             (InnoDB spin loops, fewer statements per wakeup) and, for a single-stepped \
             site, the user-mode step itself. Small differences are within the noise of \
             the runs (see the spreads above).\n"
        );
        let _ = writeln!(
            w,
            "| test | threads | probes | hits/query | added mariadbd us/query | of which system | us per hit | system us per hit |\n\
             |---|---:|---|---:|---:|---:|---:|---:|"
        );
        for (test, threads) in self.cells() {
            let base = self.runs_of(&test, threads, &Variant::None, false);
            let base_cpu = med(spread(base.iter().map(|r| r.mariadbd_us_per_query())));
            let base_sys = med(spread(base.iter().map(|r| r.mariadbd_sys_us_per_query())));
            for variant in [
                Variant::Probetop,
                Variant::ProbetopKernel,
                Variant::Bpftrace,
            ] {
                let runs = self.runs_of(&test, threads, &variant, false);
                let cpu = med(spread(runs.iter().map(|r| r.mariadbd_us_per_query())));
                let sys = med(spread(runs.iter().map(|r| r.mariadbd_sys_us_per_query())));
                let hits = med(spread(runs.iter().map(|r| self.hits_per_query(r))));
                let _ = writeln!(
                    w,
                    "| {test} | {threads} | {} | {hits:.2} | {:.2} | {:.2} | {} | {} |",
                    variant.label(),
                    cpu - base_cpu,
                    sys - base_sys,
                    per(cpu - base_cpu, hits),
                    per(sys - base_sys, hits),
                );
            }
        }
        let _ = writeln!(w);
    }

    pub(super) fn trap_table(&self, w: &mut String) {
        if self.traps.is_empty() {
            return;
        }
        let _ = writeln!(
            w,
            "### The trap alone\n\n\
             probetop (`--no-tui`, ring mode, as above) on a small program that only calls \
             one function in a loop (`xtask/lab/src/trapcost.c`), CPU time per call from \
             getrusage; medians of {} runs. This is the price of a hit with nothing of \
             mariadbd around it: the breakpoint trap, the kernel's uprobe lookup, the BPF \
             program, the return to user space, and for the single-stepped site a second \
             trap after executing the copied instruction out of line.\n",
            self.options.repeats
        );
        let _ = writeln!(
            w,
            "| case | user ns/call | system ns/call | added ns per call |\n|---|---:|---:|---:|"
        );
        let total = |v: &[(f64, f64)]| {
            med(spread(v.iter().map(|(u, _)| *u))) + med(spread(v.iter().map(|(_, s)| *s)))
        };
        let base = self
            .traps
            .iter()
            .find(|(c, _)| c.specs.is_empty())
            .map_or(f64::NAN, |(_, v)| total(v));
        for (case, values) in &self.traps {
            let user = med(spread(values.iter().map(|(u, _)| *u)));
            let sys = med(spread(values.iter().map(|(_, s)| *s)));
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} |",
                case.label,
                fmt0(user),
                fmt0(sys),
                if case.specs.is_empty() {
                    "-".into()
                } else {
                    fmt0(total(values) - base)
                }
            );
        }
        let _ = writeln!(w);
    }

    pub(super) fn single_table(&self, w: &mut String) {
        let test = self.per_probe_test();
        let threads = self.options.threads.iter().copied().min().unwrap_or(2);
        let base = self.runs_of(&test, threads, &Variant::None, true);
        let base_cpu = med(spread(base.iter().map(|r| r.mariadbd_us_per_query())));
        let base_sys = med(spread(base.iter().map(|r| r.mariadbd_sys_us_per_query())));
        let base_qps = med(spread(base.iter().map(|r| r.sysbench.qps)));
        let _ = writeln!(
            w,
            "### One probe at a time\n\n\
             {test} with {threads} threads, probetop attached with one spec of the preset \
             (in a shuffled order with runs without probes: {} QPS, {:.1} us of mariadbd \
             CPU per query, medians). The first instruction decides how the kernel resumes the \
             probed thread: it emulates a relative jmp/call, jcc, nop and push of a \
             register; any other instruction is copied out of line and single-stepped, \
             a second trap. A uretprobe traps at the return address the uprobe planted at \
             entry, so it costs an entry trap and a return trap. Probes that never fired \
             in {test} are left out.\n",
            fmt0(base_qps),
            base_cpu
        );
        let _ = writeln!(
            w,
            "| probe | first instruction | kernel | hits/query | QPS drop | added mariadbd us/query | of which system | us per hit | system us per hit | handler p50 ns | other load (cores) |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &self.probes {
            let variant = Variant::Single(p.spec.clone());
            let runs = self.runs_of(&test, threads, &variant, true);
            if runs.is_empty() {
                continue;
            }
            let cpu = med(spread(runs.iter().map(|r| r.mariadbd_us_per_query())));
            let sys = med(spread(runs.iter().map(|r| r.mariadbd_sys_us_per_query())));
            let qps = med(spread(runs.iter().map(|r| r.sysbench.qps)));
            let hits = med(spread(runs.iter().map(|r| self.hits_per_query(r))));
            let background = spread(runs.iter().map(|r| r.background_cores()));
            let p50 =
                med(spread(runs.iter().filter_map(|r| {
                    r.probes.first().map(|p| p.handler_ns.p50 as f64)
                })));
            let kernel = if p.kind == "uretprobe" {
                "entry + return trap"
            } else if p.emulated {
                "emulated"
            } else {
                "single-stepped"
            };
            let _ = writeln!(
                w,
                "| `{}` | `{}` | {kernel} | {hits:.2} | {} | {:.2} | {:.2} | {} | {} | {} | {} |",
                p.spec,
                p.first_insn,
                pct(qps, base_qps),
                cpu - base_cpu,
                sys - base_sys,
                per(cpu - base_cpu, hits),
                per(sys - base_sys, hits),
                fmt0(p50),
                show_spread(background, 2)
            );
        }
        let _ = writeln!(w);
    }

    /// probetop's own histograms of its handler time, per probe, from the median-QPS
    /// probetop run of each cell; their .hgrm and .svg exports are copied next to the doc.
    pub(super) fn handler_tables(&self, w: &mut String, files: &Path) -> Result<()> {
        let _ = writeln!(
            w,
            "### probetop's handler time per hit\n\n\
             What probetop measures and shows: from the first to the last instruction of \
             its BPF program, per hit (the trap around it is not included: compare with \
             the cost per hit above). From the probetop run with the median QPS of each \
             cell; the full distributions are in `mysqld/*.hgrm` (HdrHistogram's \
             percentile format: plot them with HdrHistogram's plotter), the plots in \
             `mysqld/*.svg`.\n"
        );
        let mut first_svg = None;
        for (test, threads) in self.cells() {
            let runs = self.runs_of(&test, threads, &Variant::Probetop, false);
            let Some(run) = self.representative(&runs) else {
                continue;
            };
            let stem = format!("{test}-t{threads}");
            let copied = self.copy_exports(run, files, &stem)?;
            let _ = writeln!(
                w,
                "**{test}, {threads} threads** ({:.0} QPS, repeat {}; [{stem}.svg](mysqld/{stem}.svg))\n",
                run.sysbench.qps,
                run.repeat + 1
            );
            let _ = writeln!(
                w,
                "| probe | hits | dropped | p50 ns | p90 ns | p99 ns | p99.9 ns | max ns | histogram |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---|"
            );
            for p in &run.probes {
                let h = &p.handler_ns;
                let spec = &p.spec;
                let file = copied
                    .iter()
                    .find(|f| f.contains(&format!(".{}.", safe_tag(spec))))
                    .map(|f| format!("[{f}](mysqld/{f})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    w,
                    "| `{spec}` | {} | {} | {} | {} | {} | {} | {} | {file} |",
                    p.hits, p.dropped, h.p50, h.p90, h.p99, h.p999, h.max
                );
            }
            let _ = writeln!(w);
            if first_svg.is_none() {
                first_svg = Some(stem);
            }
        }
        if let Some(stem) = first_svg {
            let _ = writeln!(
                w,
                "![probetop's handler time percentiles, {stem}](mysqld/{stem}.svg)\n"
            );
        }
        // bpftrace's log2 histograms of the same cell, for comparison.
        let (test, threads) = self.cells().into_iter().next().unwrap_or_default();
        let bt = self.runs_of(&test, threads, &Variant::Bpftrace, false);
        if let Some(run) = self.representative(&bt) {
            let path = self.work.join(format!(
                "main-{test}-t{threads}-r{}-bpftrace.txt",
                run.repeat
            ));
            if let Ok(text) = fs::read_to_string(&path) {
                let name = format!("{test}-t{threads}-bpftrace.txt");
                fs::write(files.join(&name), &text).with_context(|| format!("writing {name}"))?;
                let _ = writeln!(
                    w,
                    "bpftrace's own histograms of its handler time in the same cell (ns, \
                     log2 buckets): [mysqld/{name}](mysqld/{name}).\n"
                );
            }
        }
        Ok(())
    }

    /// The run with the median QPS.
    pub(super) fn representative<'r>(&self, runs: &[&'r Run]) -> Option<&'r Run> {
        let mut sorted: Vec<&Run> = runs.to_vec();
        sorted.sort_by(|a, b| a.sysbench.qps.total_cmp(&b.sysbench.qps));
        sorted.get(sorted.len() / 2).copied()
    }

    /// Copies a probetop run's .hgrm and .svg exports to `files` as `stem.*`; returns the
    /// file names.
    pub(super) fn copy_exports(&self, run: &Run, files: &Path, stem: &str) -> Result<Vec<String>> {
        let prefix = run
            .export_prefix
            .as_ref()
            .context("a probetop run without exports")?;
        let base = prefix
            .file_name()
            .context("export prefix without a name")?
            .to_string_lossy()
            .into_owned();
        let mut copied = Vec::new();
        for entry in fs::read_dir(&self.work).context("listing the work directory")? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(rest) = name.strip_prefix(&base) else {
                continue;
            };
            if !(rest.ends_with(".hgrm") || rest == ".svg") {
                continue;
            }
            let to = format!("{stem}{rest}");
            fs::copy(&path, files.join(&to))
                .with_context(|| format!("copying {} to {}", path.display(), to))?;
            copied.push(to);
        }
        copied.sort();
        Ok(copied)
    }

    pub(super) fn dispatch_check(&self, w: &mut String) {
        let Some(dispatch) = self
            .probes
            .iter()
            .find(|p| p.kind == "uprobe" && p.spec.ends_with(":dispatch_command"))
        else {
            return;
        };
        let ret = self.probes.iter().find(|p| {
            // The preset counts returns at the ret instructions now (a uretprobe on
            // mariadbd is refused); runs recorded before that used a uretprobe.
            p.spec.ends_with(":dispatch_command+ret")
                || (p.kind == "uretprobe" && p.spec.ends_with(":dispatch_command"))
        });
        let _ = writeln!(
            w,
            "### Every command counted\n\n\
             probetop attaches before sysbench connects and detaches after it has \
             disconnected, so dispatch_command must fire once for each statement sysbench \
             counts plus, per connection, one COM_STMT_PREPARE and one COM_STMT_CLOSE for \
             each statement it prepares and one COM_QUIT (`extra`). Every probetop run, \
             streamed (ring) or counted in the kernel:\n"
        );
        let _ = writeln!(
            w,
            "| test | threads | mode | repeat | sysbench queries | extra | expected | uprobe hits | return hits | dropped (all probes) |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
        );
        let mut all_match = true;
        for run in self
            .runs
            .iter()
            .filter(|r| matches!(r.variant, Variant::Probetop | Variant::ProbetopKernel))
        {
            let extra = extra_commands_per_connection(&run.test, self.options.tables)
                .map(|e| e * u64::from(run.threads));
            let entry = run.probe_hits(&dispatch.spec);
            let exit = ret.and_then(|r| run.probe_hits(&r.spec));
            let expected = extra.map(|e| e + run.sysbench.queries);
            all_match &= expected.is_some() && expected == entry && entry == exit;
            let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                run.test,
                run.threads,
                if run.variant == Variant::ProbetopKernel {
                    "kernel"
                } else {
                    "ring"
                },
                run.repeat + 1,
                run.sysbench.queries,
                opt(extra),
                opt(expected),
                opt(entry),
                opt(exit),
                run.dropped()
            );
        }
        let _ = writeln!(
            w,
            "\n{}\n",
            if all_match {
                "Every run: hits = expected, entry = return."
            } else {
                "**Some runs differ from the expected count: see the rows above.**"
            }
        );
    }

    pub(super) fn commands_section(&self, w: &mut String) {
        let _ = writeln!(
            w,
            "### Exact commands\n\nAs the report ran them (the pid, socket and paths are \
             this run's):\n"
        );
        let _ = writeln!(w, "```sh");
        for key in [
            "mariadbd",
            "prepare",
            "sysbench",
            "probetop",
            "probetop-kernel",
            "bpftrace",
            "probetop-single",
            "trapcost",
        ] {
            if let Some(cmd) = self.commands.get(key) {
                let _ = writeln!(w, "# {key}\n{cmd}");
            }
        }
        let _ = writeln!(
            w,
            "```\n\nThe bpftrace script (`mysql.bt`):\n\n```\n{}```\n",
            self.bpftrace_script
        );
    }
}

/// `total / hits` with two decimals, `-` without hits.
pub(super) fn per(total: f64, hits: f64) -> String {
    if hits > 0.0 && total.is_finite() {
        format!("{:.2}", total / hits)
    } else {
        "-".into()
    }
}

pub(crate) fn med(s: Option<Spread>) -> f64 {
    s.map_or(f64::NAN, |s| s.median)
}

pub(crate) fn fmt0(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.0}")
    } else {
        "-".into()
    }
}

/// The tag probetop's .hgrm export gives a spec's file (`uprobe:do_command` ->
/// `uprobe_do_command`).
pub(crate) fn safe_tag(spec: &str) -> String {
    spec.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `existing` with the text between the markers replaced by `section`; a new document
/// when there are no markers.
pub(super) fn splice(existing: &str, section: &str) -> String {
    splice_between(existing, section, (BEGIN_MARK, END_MARK)).unwrap_or_else(|| {
        format!("# probetop on a live mysqld\n\n{BEGIN_MARK}\n{section}{END_MARK}\n")
    })
}

/// Now as `YYYY-MM-DD HH:MM`, from the system clock (xtask has no date crate).
pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{d:02} {h:02}:{m:02}")
}
