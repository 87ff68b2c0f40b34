//! Running the cells: each variant of each sysbench cell, the one-probe-at-a-time pricing
//! and the trap-cost cases.

use super::*;

impl Report {
    /// What a hit costs a thread that does nothing else: probetop on a small program's
    /// function whose first instruction is emulated or single-stepped, as entry and
    /// return probe. Explains the per-hit costs measured in mariadbd.
    pub(super) fn trap_calibration(&mut self) -> Result<()> {
        let source = self.work.join("trapcost.c");
        let binary = self.work.join("trapcost");
        fs::write(&source, TRAPCOST_C).with_context(|| format!("writing {}", source.display()))?;
        crate::run(
            Command::new("cc")
                .args(["-O2", "-o"])
                .arg(&binary)
                .arg(&source),
        )?;
        let calls: u64 = if self.options.quick { 20_000 } else { 100_000 };
        let mut results: Vec<(TrapCase, Vec<(f64, f64)>)> =
            TRAP_CASES.iter().map(|c| (c.clone(), Vec::new())).collect();
        for repeat in 0..self.options.repeats {
            for case in shuffled(TRAP_CASES, u64::from(repeat)) {
                let measured = self.trap_run(&binary, &case, calls)?;
                println!(
                    "mysql-report: trap calibration: {}: user {:.0} ns, system {:.0} ns per call",
                    case.label, measured.0, measured.1
                );
                if let Some((_, values)) = results.iter_mut().find(|(c, _)| *c == case) {
                    values.push(measured);
                }
            }
        }
        self.commands.insert(
            "trapcost",
            format!(
                "cc -O2 -o trapcost xtask/lab/src/trapcost.c && ./trapcost {calls} f_push  # then \
                 probetop --pid PID --no-tui -e uprobe:f_push, and a line on its stdin"
            ),
        );
        self.traps = results;
        Ok(())
    }

    /// One calibration run: (user, system) ns per call.
    pub(super) fn trap_run(
        &self,
        binary: &Path,
        case: &TrapCase,
        calls: u64,
    ) -> Result<(f64, f64)> {
        let mut cmd = Command::new(binary);
        cmd.arg(calls.to_string())
            .arg(case.function)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", show(&cmd)))?;
        let guard = KillOnDrop(&mut child);
        let stdout = guard.0.stdout.take().context("trapcost's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next().transpose()?.unwrap_or_default();
        ensure!(
            ready.starts_with("ready pid="),
            "trapcost printed {ready:?}"
        );
        let mut tool = None;
        if !case.specs.is_empty() {
            let mut p = Command::new(&self.probetop);
            p.arg("--pid").arg(guard.0.id().to_string()).arg("--no-tui");
            for spec in case.specs {
                p.args(["-e", spec]);
            }
            tool = Some(Tool::start(p, "attached", Stream::Stderr)?);
        }
        {
            use std::io::Write as _;
            let stdin = guard.0.stdin.as_mut().context("trapcost's stdin")?;
            stdin.write_all(b"go\n")?;
            stdin.flush()?;
        }
        let result = lines.next().transpose()?.unwrap_or_default();
        let status = guard.0.wait()?;
        ensure!(status.success(), "trapcost failed ({status}): {result}");
        if let Some(mut tool) = tool {
            // It stops by itself when the target exits.
            tool.stop()?;
        }
        let field = |key: &str| -> Result<f64> {
            result
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no {key}= in trapcost's {result:?}"))
        };
        Ok((field("user_ns")?, field("sys_ns")?))
    }

    /// A short run of every test first: the buffer pool, the table cache and the
    /// prepared-statement paths are warm before anything is measured.
    pub(super) fn warm_up(&mut self) -> Result<()> {
        let seconds = if self.options.quick { 2.0 } else { 5.0 };
        let threads = self.options.threads.iter().copied().max().unwrap_or(2);
        for test in self.options.tests.clone() {
            self.sysbench.run(&test, threads, seconds)?;
        }
        Ok(())
    }

    pub(super) fn main_phase(&mut self) -> Result<()> {
        let variants = MAIN_VARIANTS;
        let cells: Vec<(String, u32)> = self
            .options
            .tests
            .iter()
            .flat_map(|t| self.options.threads.iter().map(move |&n| (t.clone(), n)))
            .collect();
        for repeat in 0..self.options.repeats {
            for (i, (test, threads)) in cells.iter().enumerate() {
                for variant in rotated(&variants, repeat as usize + i) {
                    if let Some(run) = self.measure(test, *threads, &variant, repeat, false)? {
                        self.runs.push(run);
                    }
                }
            }
        }
        Ok(())
    }

    /// One probe at a time on the cheapest cell to drive (the first test, fewest
    /// threads), for the probes that fired there in the main phase.
    pub(super) fn per_probe_phase(&mut self) -> Result<()> {
        let test = self.per_probe_test();
        let threads = self.options.threads.iter().copied().min().unwrap_or(2);
        let fired: Vec<String> = self
            .probes
            .iter()
            .filter(|p| {
                self.runs
                    .iter()
                    .filter(|r| r.test == test && r.variant == Variant::Probetop && !r.single_phase)
                    .any(|r| r.probe_hits(&p.spec).unwrap_or(0) > 0)
            })
            .map(|p| p.spec.clone())
            .collect();
        let mut variants = vec![Variant::None];
        variants.extend(fired.into_iter().map(Variant::Single));
        for repeat in 0..self.options.repeats {
            // Shuffled, not rotated: with six variants a rotation keeps the same
            // neighbours in every repeat, and a periodic background job then lands on
            // the same variant each time.
            for variant in shuffled(&variants, u64::from(repeat)) {
                if let Some(run) = self.measure(&test, threads, &variant, repeat, true)? {
                    self.runs.push(run);
                }
            }
        }
        Ok(())
    }

    pub(super) fn per_probe_test(&self) -> String {
        if self.options.tests.iter().any(|t| t == "oltp_point_select") {
            "oltp_point_select".into()
        } else {
            self.options.tests.first().cloned().unwrap_or_default()
        }
    }

    /// One run; `None` when it stalled (recorded in `lost`, with a snapshot of where
    /// the threads waited) and the server still answers after the tool is killed.
    pub(super) fn measure(
        &mut self,
        test: &str,
        threads: u32,
        variant: &Variant,
        repeat: u32,
        single_phase: bool,
    ) -> Result<Option<Run>> {
        let phase = if single_phase { "single" } else { "main" };
        // Names this run's files: its exports, and its snapshot if it stalls.
        let label = format!(
            "{phase}-{test}-t{threads}-r{repeat}-{}",
            safe(&variant.label())
        );
        let export_prefix = match variant {
            Variant::Probetop | Variant::ProbetopKernel | Variant::Single(_) => {
                Some(self.work.join(&label))
            }
            _ => None,
        };
        let mut tool = match variant {
            Variant::None => None,
            Variant::Probetop | Variant::ProbetopKernel | Variant::Single(_) => {
                let prefix = export_prefix.as_ref().context("probetop runs export")?;
                let mut cmd = Command::new(&self.probetop);
                cmd.arg("--pid")
                    .arg(self.server.pid().to_string())
                    .arg("--no-tui");
                match variant {
                    Variant::Single(spec) => cmd.args(["-e", spec]),
                    // The mode's own price: its clock phase (ring mode for the first
                    // seconds) would put the ring's price into a 10 s run; insitu-check
                    // measures runs with the phase.
                    Variant::ProbetopKernel => cmd.args([
                        "--preset",
                        "mysql",
                        "--mode",
                        "kernel",
                        "--clock-seconds",
                        "0",
                    ]),
                    _ => cmd.args(["--preset", "mysql"]),
                };
                for ext in ["json", "hgrm", "svg"] {
                    cmd.arg("-o").arg(prefix.with_extension(ext));
                }
                self.commands
                    .entry(match variant {
                        Variant::Single(_) => "probetop-single",
                        Variant::ProbetopKernel => "probetop-kernel",
                        _ => "probetop",
                    })
                    .or_insert_with(|| show(&cmd));
                Some(Tool::start(cmd, "attached", Stream::Stderr)?)
            }
            Variant::Bpftrace => {
                let mut cmd = Command::new("bpftrace");
                cmd.arg("-p")
                    .arg(self.server.pid().to_string())
                    .arg(&self.bpftrace_file);
                self.commands
                    .entry("bpftrace")
                    .or_insert_with(|| show(&cmd));
                Some(Tool::start(cmd, "ready", Stream::Stdout)?)
            }
        };
        // Let attach-time work (and bpftrace's symbol loading) finish before the window.
        if tool.is_some() {
            thread::sleep(Duration::from_millis(500));
        }
        println!(
            "mysql-report: {test} threads={threads} {} repeat {}",
            variant.label(),
            repeat + 1
        );
        self.commands.entry("sysbench").or_insert_with(|| {
            show(
                &self
                    .sysbench
                    .run_command(test, threads, self.options.duration),
            )
        });

        let host0 = HostCpu::now()?;
        let (mu0, ms0) = process_cpu(self.server.pid(), false)?;
        let tool0 = match &tool {
            Some(t) => cpu_sum(process_cpu(t.pid, false)?),
            None => 0.0,
        };
        let kids0 = cpu_sum(process_cpu(std::process::id(), true)?);
        let t0 = Instant::now();
        let result = self.sysbench.run(test, threads, self.options.duration);
        let wall_s = t0.elapsed().as_secs_f64();
        let kids1 = cpu_sum(process_cpu(std::process::id(), true)?);
        let tool1 = match &tool {
            Some(t) => cpu_sum(process_cpu(t.pid, false)?),
            None => 0.0,
        };
        let (mu1, ms1) = process_cpu(self.server.pid(), false)?;
        let host = HostCpu::now()?.since(host0);

        let stopping = Instant::now();
        let output = tool.as_mut().map(Tool::stop);
        let stop_s = stopping.elapsed().as_secs_f64();
        let stalled = [
            result.as_ref().err(),
            output.as_ref().and_then(|o| o.as_ref().err()),
        ]
        .into_iter()
        .flatten()
        .find_map(|e| e.downcast_ref::<Stalled>())
        .map(ToString::to_string);
        if let Some(stalled) = stalled {
            let name = format!("{label}-stalled.txt");
            let path = self.work.join(&name);
            let mut watched = vec![("mariadbd", self.server.pid())];
            if let Some(t) = &tool {
                watched.push(("tool", t.pid));
            }
            fs::write(&path, format!("{stalled}\n\n{}", thread_snapshot(&watched)))
                .with_context(|| format!("writing {}", path.display()))?;
            drop(tool);
            ensure!(
                self.server.ping(),
                "{stalled}; mariadbd no longer answers even with the tool killed (where its threads waited: {})",
                path.display()
            );
            let lost = format!(
                "{test} threads={threads} {} repeat {}: {stalled}; killed, the server answered again; where the threads waited: [mysqld/{name}](mysqld/{name})",
                variant.label(),
                repeat + 1,
            );
            println!("mysql-report: LOST {lost}");
            self.lost.push(lost);
            return Ok(None);
        }
        let output = output.transpose()?;
        let sysbench = result?;
        let mut run = Run {
            test: test.to_string(),
            threads,
            variant: variant.clone(),
            repeat,
            single_phase,
            sysbench,
            wall_s,
            mariadbd_user_s: mu1 - mu0,
            mariadbd_sys_s: ms1 - ms0,
            tool_s: tool1 - tool0,
            stop_s,
            sysbench_s: kids1 - kids0,
            host,
            probes: Vec::new(),
            bpftrace_counts: BTreeMap::new(),
            export_prefix: export_prefix.clone(),
        };
        match variant {
            Variant::Probetop | Variant::ProbetopKernel | Variant::Single(_) => {
                let path = export_prefix
                    .context("probetop runs export")?
                    .with_extension("json");
                run.probes = crate::util::export::read(&path)?
                    .probes
                    .into_iter()
                    .filter_map(probe_user::inner::present::export::json::JsonEntry::into_probe)
                    .collect();
            }
            Variant::Bpftrace => {
                let text = output.unwrap_or_default();
                run.bpftrace_counts = bpftrace_counts(&text);
                // `{label}.txt`: the variant's label is "bpftrace".
                fs::write(self.work.join(format!("{label}.txt")), &text)
                    .context("saving bpftrace's output")?;
            }
            Variant::None => {}
        }
        println!(
            "mysql-report:   {:.0} QPS, p95 {:.2} ms, mariadbd {:.1} us/query, tool {:.1}% of a core, {} hits, {} dropped",
            run.sysbench.qps,
            run.sysbench.p95_ms,
            run.mariadbd_us_per_query(),
            run.tool_cores() * 100.0,
            run.hits() + run.bpftrace_counts.values().sum::<u64>(),
            run.dropped()
        );
        ensure!(
            self.server.ping(),
            "mariadbd stopped answering after {test} threads={threads} {}",
            variant.label()
        );
        thread::sleep(Duration::from_secs(1));
        Ok(Some(run))
    }
}
