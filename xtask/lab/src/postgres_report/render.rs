//! docs/postgres.md's generated section, and the raw runs beside it.

use probe_user::inner::present::export::json::JsonInterval;

use super::*;
use crate::mysql_report::{fmt0, med, show_spread, spread, utc_now};

impl Report {
    pub(super) fn write(
        &self,
        uptime_before: &str,
        uptime_after: &str,
        elapsed: Duration,
    ) -> Result<()> {
        let out = &self.options.out;
        let files = out.join("postgres");
        fs::create_dir_all(&files).with_context(|| format!("creating {}", files.display()))?;
        let raw = json!({
            "generated": utc_now(), "uptime_before": uptime_before, "uptime_after": uptime_after,
            "elapsed_s": elapsed.as_secs_f64(),
            "options": {
                "seconds": self.options.seconds, "rounds": self.options.rounds,
                "clients": self.options.clients, "rate": self.options.rate,
                "scale": self.options.scale, "in_situ_seconds": self.options.in_situ_seconds,
            },
            "runs": self.runs.iter().map(Run::to_json).collect::<Vec<_>>(),
            "in_situ": self.in_situ.as_ref().map(insitu::InSituRun::to_json),
            "commands": self.commands,
        });
        let raw_path = files.join("runs.json");
        fs::write(&raw_path, serde_json::to_string_pretty(&raw)? + "\n")
            .with_context(|| format!("writing {}", raw_path.display()))?;
        let section = self.section(uptime_before, uptime_after, elapsed);
        let doc_path = out.join("postgres.md");
        let existing = fs::read_to_string(&doc_path).unwrap_or_default();
        let doc =
            splice_between(&existing, &section, (BEGIN_MARK, END_MARK)).unwrap_or_else(|| {
                format!("# probetop on PostgreSQL\n\n{BEGIN_MARK}\n{section}{END_MARK}\n")
            });
        fs::write(&doc_path, doc).with_context(|| format!("writing {}", doc_path.display()))?;
        println!("postgres-report: wrote {}", doc_path.display());
        Ok(())
    }

    fn of(&self, variant: Variant) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(move |r| r.variant == variant)
    }

    /// The same round's run of `variant`.
    fn partner(&self, run: &Run, variant: Variant) -> Option<&Run> {
        self.runs
            .iter()
            .find(|r| r.variant == variant && r.round == run.round)
    }

    /// Median (range) over rounds of `variant`'s CPU per transaction against `base`'s
    /// in the same round.
    fn ratio(&self, variant: Variant, base: Variant) -> String {
        if variant == base {
            return "-".into();
        }
        let ratios = self.of(variant).filter_map(|r| {
            let b = self.partner(r, base)?;
            Some((r.us_per_tx() / b.us_per_tx() - 1.0) * 100.0)
        });
        match spread(ratios) {
            None => "-".into(),
            Some(s) => format!("{:+.1}% ({:+.1} to {:+.1})", s.median, s.min, s.max),
        }
    }

    /// CPU the variant added per hit, from outside: the cluster's CPU per transaction
    /// above the same round's bare run, over hits per transaction; ns.
    fn outside_per_hit(&self, variant: Variant) -> Option<crate::util::stats::Spread> {
        spread(self.of(variant).filter_map(|r| {
            let bare = self.partner(r, Variant::Bare)?;
            let hits = r.hits_per_tx();
            (hits > 0.0).then(|| (r.us_per_tx() - bare.us_per_tx()) * 1000.0 / hits)
        }))
    }

    fn section(&self, uptime_before: &str, uptime_after: &str, elapsed: Duration) -> String {
        let o = &self.options;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Generated {} UTC by `cargo xtask postgres-report` in {:.1} min: {} round(s) of \
             {} pgbench runs of {} s, rotated. Load before: `{uptime_before}`; after: \
             `{uptime_after}`. Raw runs: [postgres/runs.json](postgres/runs.json).\n",
            utc_now(),
            elapsed.as_secs_f64() / 60.0,
            o.rounds,
            VARIANTS.len(),
            o.seconds
        );
        let _ = writeln!(
            s,
            "The load: `pgbench -S` (select only: one `SELECT abalance FROM \
             pgbench_accounts WHERE aid = :aid` a transaction, simple query protocol) from \
             {} clients at a fixed {} transactions/s (`-R`, an open loop), scale {}, on a \
             private cluster (autovacuum off). **cluster CPU** is every process of the \
             cluster (the postmaster, its background processes and the backends, reaped ones \
             included) per transaction; *vs bare* and *vs bpftrace* compare it with the \
             same round's run, median (range) over rounds. Tool CPU is the tool's own.\n",
            o.clients, o.rate, o.scale
        );
        s.push_str(
            "| beside the load | TPS | latency ms | cluster CPU us/tx | vs bare | vs bpftrace | tool CPU % of a core | hits/tx |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for v in VARIANTS {
            let runs: Vec<&Run> = self.of(v).collect();
            let col = |f: &dyn Fn(&Run) -> f64, d: usize| {
                show_spread(spread(runs.iter().map(|r| f(r))), d)
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                v.label(),
                col(&|r| r.pgbench.tps, 0),
                col(&|r| r.pgbench.latency_ms, 3),
                col(&|r| r.us_per_tx(), 1),
                self.ratio(v, Variant::Bare),
                self.ratio(v, Variant::Bpftrace),
                col(&|r| r.tool_s / r.wall_s.max(1e-9) * 100.0, 1),
                if v == Variant::Bare {
                    "-".into()
                } else {
                    col(&|r| r.hits_per_tx(), 2)
                },
            );
        }
        s.push('\n');

        // Per hit.
        s.push_str(
            "**Per hit.** *From outside*: the cluster CPU a transaction took above the same \
             round's bare run, over the hits of a transaction (median, range). *Estimate*: \
             probetop's calibrated whole cost per hit (`probetop calibrate`; `whole_cost_ns` \
             weighted by hits). *In situ*: `--in-situ` through the postmaster (`-F`: the \
             postmaster and every process it forked, their CPU summed in each window), \
             probes attached and detached in alternate windows, the cluster's CPU per \
             second compared (`--work none`: the load's rate is fixed), mean and 95% \
             interval; pairs of windows in which a process exited are dropped and \
             counted.\n\n\
             | | ns per hit |\n|---|---|\n",
        );
        for v in [
            Variant::Probetop,
            Variant::ProbetopKernel,
            Variant::Bpftrace,
        ] {
            let _ = writeln!(
                s,
                "| {} from outside | {} |",
                v.label(),
                show_spread(self.outside_per_hit(v), 0)
            );
        }
        let estimate = spread(
            self.of(Variant::Probetop)
                .filter_map(|r| r.estimate_ns)
                .collect::<Vec<_>>(),
        );
        let _ = writeln!(
            s,
            "| probetop's estimate (ring runs) | {} |",
            show_spread(estimate, 0)
        );
        match &self.in_situ {
            Some(
                v @ insitu::InSituRun {
                    in_situ: Some(is), ..
                },
            ) => {
                let per_hit =
                    |f: fn(&JsonInterval) -> f64| fmt0(is.per_hit_ns.as_ref().map_or(f64::NAN, f));
                let _ = writeln!(
                    s,
                    "| probetop `--in-situ` through the postmaster ({} processes, {} s, {} hits, {:.0} TPS, {} pairs, {} dropped) | {} [{} to {}], verdict {}; its estimate {} |",
                    is.processes,
                    v.seconds,
                    v.hits,
                    v.tps,
                    is.pairs,
                    is.dropped_pairs,
                    per_hit(|i| i.mean),
                    per_hit(|i| i.low),
                    per_hit(|i| i.high),
                    is.verdict,
                    fmt0(v.estimated_per_hit_ns.unwrap_or(f64::NAN)),
                );
            }
            Some(_) => s.push_str("| probetop `--in-situ` | its export has no in-situ summary |\n"),
            None => s.push_str("| probetop `--in-situ` | not run |\n"),
        }
        s.push('\n');

        // Every query counted.
        let _ = writeln!(
            s,
            "**Every query counted through the postmaster.** pgbench's transactions \
             against `{QUERY_START}`'s hits less the {PGBENCH_SETUP_QUERIES} queries \
             pgbench's own connection sends before its clients start (it reads the scale \
             and the partitioning).\n\n\
             | run | transactions | query__start hits | less setup | exact | backends counted |\n\
             |---|---|---|---|---|---|"
        );
        for r in self.runs.iter().filter(|r| r.variant != Variant::Bare) {
            let _ = writeln!(
                s,
                "| {} round {} | {} | {} | {} | {} | {} |",
                r.variant.label(),
                r.round + 1,
                r.pgbench.transactions,
                r.hits.get(QUERY_START).copied().unwrap_or(0),
                r.queries_counted().unwrap_or(0),
                if r.exact() == Some(true) {
                    "yes"
                } else {
                    "**no**"
                },
                match r.variant {
                    Variant::Bpftrace => "- (not split)".to_string(),
                    // The kernel counts without the record that names the process.
                    Variant::ProbetopKernel => "- (kernel mode: not split)".to_string(),
                    _ => r.query_pids.to_string(),
                }
            );
        }
        s.push('\n');

        // Hits per transaction by probe.
        s.push_str("Hits per transaction by probe (median over the runs):\n\n| probe |");
        let tools = [
            Variant::Probetop,
            Variant::ProbetopKernel,
            Variant::Bpftrace,
        ];
        for v in tools {
            let _ = write!(s, " {} |", v.label());
        }
        s.push_str("\n|---|---|---|---|\n");
        for spec in &self.specs {
            let _ = write!(s, "| `{spec}` |");
            for v in tools {
                let per = spread(self.of(v).map(|r| {
                    r.hits.get(spec).copied().unwrap_or(0) as f64
                        / r.pgbench.transactions.max(1) as f64
                }));
                let _ = write!(s, " {:.3} |", med(per));
            }
            s.push('\n');
        }
        s.push('\n');

        let _ = writeln!(s, "Commands:\n\n```");
        for (name, cmd) in &self.commands {
            let _ = writeln!(s, "# {name}\n{cmd}");
        }
        let _ = writeln!(
            s,
            "```\n\nThe bpftrace script (`postgres.bt`):\n\n```\n{}```",
            self.bpftrace_script
        );
        s
    }
}
