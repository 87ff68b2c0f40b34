//! probetop's `--in-situ` measurement on one backend under the same load: its cost per
//! hit measured on the target, beside the estimate and the cost measured from outside.
//! `--in-situ` measures one process, so it runs on a backend's pid, not through the
//! postmaster.

use super::*;

impl Report {
    pub(super) fn in_situ_run(&mut self) -> Result<Value> {
        let seconds = self.options.in_situ_seconds;
        let json_path = self.work.join("in-situ.json");
        println!("postgres-report: --in-situ on one backend, {seconds} s");
        let (load, export) = thread::scope(|s| -> Result<(PgbenchResult, Value)> {
            // The load outlasts the in-situ run: its backends connect first.
            let load = s.spawn(|| self.pgbench.run(&self.cluster, seconds + 8));
            let backend = self.a_backend(Duration::from_secs(20));
            let measured = backend.and_then(|pid| {
                let mut cmd = Command::new(&self.probetop);
                cmd.arg("--pid")
                    .arg(pid.to_string())
                    .args(["--no-tui", "--preset", "postgres", "--in-situ"])
                    // A fixed-rate load: the backend's CPU per second is the meter.
                    .args(["--work", "none", "--duration", &seconds.to_string()])
                    .arg("-o")
                    .arg(&json_path);
                crate::echo(&cmd);
                let shown = show(&cmd).replace(&pid.to_string(), "BACKEND");
                self.commands.insert("probetop-in-situ", shown);
                let out = crate::output_ok(&mut cmd)?;
                print!("{}", String::from_utf8_lossy(&out.stdout));
                let text = fs::read(&json_path)
                    .with_context(|| format!("reading {}", json_path.display()))?;
                serde_json::from_slice::<Value>(&text)
                    .with_context(|| format!("reading {}", json_path.display()))
            });
            let load = load
                .join()
                .map_err(|_| anyhow::anyhow!("the pgbench thread panicked"))??;
            Ok((load, measured?))
        })?;
        self.cluster
            .settle(self.baseline_children, Duration::from_secs(10))?;
        let hits: u64 = export["probes"]
            .as_array()
            .map(|ps| ps.iter().filter_map(|p| p["hits"].as_u64()).sum())
            .unwrap_or(0);
        Ok(json!({
            "seconds": seconds,
            "tps": load.tps,
            "hits": hits,
            "in_situ": export["cost"]["in_situ"].clone(),
            "estimated_per_hit_ns": export["cost"]["estimated_per_hit_ns"].clone(),
        }))
    }

    /// The pid of a client backend once the load's connections are up.
    fn a_backend(&self, patience: Duration) -> Result<u32> {
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
        backends()
            .first()
            .copied()
            .context("the pgbench backends went away")
    }
}
