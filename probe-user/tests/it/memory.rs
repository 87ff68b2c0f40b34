//! probetop's own memory: an idle probe costs a few KiB (histograms come with hits),
//! and a run whose probes would not fit the memory cgroup probetop runs in is refused
//! before anything is attached, rather than killed mid-run with its measurements.

use crate::common::*;

/// What the design allows one probe in probetop's memory, hit or idle
/// (`probe_user::inner::aggregate::BYTES_PER_PROBE`): the refusal below is computed with it.
const BYTES_PER_PROBE: u64 = probe_user::inner::aggregate::BYTES_PER_PROBE;

/// `VmRSS` of `pid`, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib << 10
}

/// probetop on an idle target with `specs`: how many probes it attached and its RSS
/// once they have been live for a few snapshots and intervals.
fn idle_rss(target: u32, specs: &[&str]) -> (u64, u64) {
    let mut cmd = probetop();
    cmd.args(["--pid", &target.to_string(), "--no-tui", "--mode", "ring"])
        .args(["--max-probes", "100000"]);
    for spec in specs {
        cmd.args(["-e", spec]);
    }
    let probetop = Running::spawn(cmd);
    let line = probetop.err().wait_for("attached ");
    let probes: u64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // Two live intervals (1 s each) and many snapshots: the per-probe series exist.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let bytes = rss(probetop.pid());
    probetop.signal(libc::SIGINT);
    (probes, bytes)
}

/// The RSS that probes add, measured at two probe counts on the same run: per probe it
/// stays within the design's bound (no histogram for a probe without hits; before, two
/// 16 KiB histograms each, ~35 KiB per idle probe).
#[test]
#[ignore = "needs root and the fixtures"]
fn an_idle_probe_costs_a_few_kib() {
    let _turn = turn(module_path!());
    let target = workload(&["--wait-signal"]);
    let (few, few_rss) = idle_rss(target.pid(), &["uprobe:libc:str*"]);
    let (many, many_rss) = idle_rss(target.pid(), &["uprobe:libc:*", "uretprobe:libc:*"]);
    assert!(many > few + 2000, "{few} and {many} probes");
    let per_probe = many_rss.saturating_sub(few_rss) / (many - few);
    eprintln!(
        "{few} probes: {} KiB, {many} probes: {} KiB, {} bytes per idle probe",
        few_rss >> 10,
        many_rss >> 10,
        per_probe
    );
    assert!(
        per_probe <= BYTES_PER_PROBE,
        "{per_probe} bytes per idle probe, more than the {BYTES_PER_PROBE} the design allows"
    );
}

/// A memory cgroup (v2 where its memory controller is, else the v1 memory hierarchy),
/// removed when dropped.
struct MemoryCgroup {
    dir: std::path::PathBuf,
}

impl MemoryCgroup {
    fn new(limit: u64) -> Self {
        let unified = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .find(|root| {
                std::fs::read_to_string(format!("{root}/cgroup.subtree_control"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
            });
        let (root, limit_file) = match unified {
            Some(root) => (root, "memory.max"),
            None => ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        };
        let dir = std::path::PathBuf::from(root)
            .join(format!("probetop-test-memory-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the memory cgroup");
        std::fs::write(dir.join(limit_file), limit.to_string()).expect("set its limit");
        Self { dir }
    }

    /// `cmd` started inside the cgroup.
    fn command(&self, cmd: &std::process::Command) -> std::process::Command {
        let mut inside = std::process::Command::new("sh");
        inside
            .arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(self.dir.join("cgroup.procs"))
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (key, value) in cmd.get_envs() {
            match value {
                Some(value) => inside.env(key, value),
                None => inside.env_remove(key),
            };
        }
        inside
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Under a 64 MiB memory cgroup, ~7,000 probes (which need more than that) are refused
/// in one line before any is attached, saying what to do; one probe attaches and counts
/// exactly in the same cgroup.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_run_too_big_for_its_memory_cgroup_is_refused_before_attaching() {
    let _turn = turn(module_path!());
    let cgroup = MemoryCgroup::new(64 << 20);
    let mut target = workload(&["--wait-signal", "--calls", "1000"]);
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["--max-probes", "100000"])
        .args(["-e", "uprobe:libc:*", "-e", "uretprobe:libc:*"]);
    let out = cgroup
        .command(&cmd)
        .output()
        .expect("run probetop in the cgroup");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("attached"), "{stderr}");
    let refusals: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the memory cgroup"))
        .collect();
    assert_eq!(refusals.len(), 1, "{stderr}");
    let line = refusals[0];
    assert!(
        line.contains("raise its limit, or probe fewer points"),
        "{line}"
    );
    assert!(line.contains(&cgroup.dir.display().to_string()), "{line}");
    // One probe fits, and counts every call.
    let json = export_path("memory-cgroup-one.json");
    cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "--export"])
        .arg(&json)
        .args(["-e", "uprobe:work_unit"]);
    let mut probetop = Running::spawn(cgroup.command(&cmd));
    probetop.err().wait_for("attached 1 probe");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done");
    let status = probetop.wait();
    assert!(status.success(), "{:?}", probetop.err().rest());
    assert_eq!(probe(&read_export(&json), "work_unit")["hits"], 1000);
    let _ = target.wait();
}
