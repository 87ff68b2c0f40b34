//! probetop's `--in-situ` measurement through the postmaster under the same load
//! (`--pid POSTMASTER -F`): the CPU of the postmaster and every process it forked (the
//! backends, the background processes) summed in each window, its cost per hit measured
//! on the cluster, beside the estimate and the cost measured from outside.

use probe_user::inner::present::export::json::JsonInSitu;

use super::*;

/// The in-situ run: its load, and what probetop's export said of it.
pub(super) struct InSituRun {
    pub(super) seconds: u32,
    pub(super) tps: f64,
    pub(super) hits: u64,
    /// probetop's in-situ summary and its estimate per hit, as exported.
    pub(super) in_situ: Option<JsonInSitu>,
    pub(super) estimated_per_hit_ns: Option<f64>,
}

impl InSituRun {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "seconds": self.seconds,
            "tps": self.tps,
            "hits": self.hits,
            "in_situ": self.in_situ,
            "estimated_per_hit_ns": self.estimated_per_hit_ns,
        })
    }
}

impl Report {
    pub(super) fn in_situ_run(&mut self) -> Result<InSituRun> {
        let seconds = self.options.in_situ_seconds;
        let json_path = self.work.join("in-situ.json");
        println!("postgres-report: --in-situ through the postmaster (-F), {seconds} s");
        let (load, export) = thread::scope(
            |s| -> Result<(PgbenchResult, crate::util::export::Export)> {
                // The load outlasts the in-situ run: its backends connect first, so that every
                // window covers the same processes.
                let load = s.spawn(|| self.pgbench.run(&self.cluster, seconds + 8));
                let connected = self.backends_up(Duration::from_secs(20));
                let measured = connected.and_then(|()| {
                    let pid = self.cluster.pid();
                    let mut cmd = Command::new(&self.probetop);
                    cmd.arg("--pid")
                        .arg(pid.to_string())
                        .args(["-F", "--no-tui", "--preset", "postgres", "--in-situ"])
                        // A fixed-rate load: the cluster's CPU per second is the meter.
                        .args(["--work", "none", "--duration", &seconds.to_string()])
                        .arg("-o")
                        .arg(&json_path);
                    crate::echo(&cmd);
                    let shown = show(&cmd).replace(&pid.to_string(), "POSTMASTER");
                    self.commands.insert("probetop-in-situ", shown);
                    let out = crate::output_ok(&mut cmd)?;
                    print!("{}", String::from_utf8_lossy(&out.stdout));
                    crate::util::export::read(&json_path)
                });
                let load = load
                    .join()
                    .map_err(|_| anyhow::anyhow!("the pgbench thread panicked"))??;
                Ok((load, measured?))
            },
        )?;
        self.cluster
            .settle(self.baseline_children, Duration::from_secs(10))?;
        Ok(InSituRun {
            seconds,
            tps: load.tps,
            hits: crate::util::export::total_hits(&export),
            in_situ: export.cost.in_situ,
            estimated_per_hit_ns: export.cost.estimated_per_hit_ns,
        })
    }

    /// Returns once the load's connections are up.
    fn backends_up(&self, patience: Duration) -> Result<()> {
        let deadline = Instant::now() + patience;
        // A backend's title: "postgres: USER DB [local] STATE".
        let backends = || -> Vec<u32> {
            let mut pids: Vec<u32> = self
                .cluster
                .children()
                .into_iter()
                .filter(|pid| {
                    fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("[local]"))
                })
                .collect();
            pids.sort_unstable();
            pids
        };
        while backends().len() < self.options.clients as usize {
            ensure!(
                Instant::now() < deadline,
                "no pgbench backends appeared within {patience:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
        // pgbench's own setup connection (it reads the scale) is gone by now.
        thread::sleep(Duration::from_secs(1));
        ensure!(!backends().is_empty(), "the pgbench backends went away");
        Ok(())
    }
}
