//! `--otlp`: a real OpenTelemetry Collector (v0.165.0 modules: the OTLP receiver and the
//! debug exporter, built by `cargo xtask setup` from xtask/otelcol) on loopback receives
//! probetop's pushes; the last it logged must equal the run's JSON export: hits, drops,
//! and each handler histogram's count, which its exponential buckets add up to.

use std::{
    collections::BTreeMap,
    fs::File,
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::common::*;

/// Where `cargo xtask setup` puts the Collector (`PROBETOP_OTELCOL` overrides it).
fn otelcol() -> PathBuf {
    let path = std::env::var_os("PROBETOP_OTELCOL").map_or_else(
        || PathBuf::from("/var/cache/probetop/otelcol"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} missing: `cargo xtask setup` builds the OpenTelemetry Collector",
        path.display()
    );
    path
}

/// A Collector of its own, logging what it receives to a file.
struct Collector {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    port: u16,
}

impl Collector {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("probetop-otelcol-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        // A free loopback port: taken from the kernel, then handed to the Collector.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  debug:\n    verbosity: detailed\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n\
                 \x20 pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [debug]\n"
            ),
        )
        .expect("config");
        let log = dir.join("collector.log");
        let child = Command::new(otelcol())
            .arg(format!("--config=file:{}", config.display()))
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("stdout")).expect("stdout file"))
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .expect("start the Collector");
        let collector = Self {
            child,
            dir,
            log,
            port,
        };
        let deadline = Instant::now() + PATIENCE;
        while !collector.text().contains("Everything is ready") {
            assert!(
                Instant::now() < deadline,
                "the Collector did not start:\n{}",
                collector.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        collector
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the debug exporter logged last for each (metric, probe id): a sum's value, or a
/// histogram's count and what its buckets add up to.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Point {
    value: u64,
    buckets: u64,
}

fn last_points(log: &str) -> BTreeMap<(String, u64), Point> {
    let mut points = BTreeMap::new();
    let mut metric = String::new();
    let mut at: Option<(String, u64)> = None;
    for line in log.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("-> Name: ") {
            metric = name.to_string();
            at = None;
        } else if let Some(id) = line
            .strip_prefix("-> id: Int(")
            .and_then(|r| r.strip_suffix(')'))
        {
            let key = (metric.clone(), id.parse().expect("id"));
            points.insert(key.clone(), Point::default());
            at = Some(key);
        } else if let Some(key) = &at {
            let point = points.get_mut(key).expect("inserted");
            if let Some(v) = line
                .strip_prefix("Value: ")
                .or_else(|| line.strip_prefix("Count: "))
            {
                point.value = v.parse().unwrap_or_else(|_| panic!("{line}"));
            } else if line.starts_with("Bucket ") {
                let n = line.rsplit("Count: ").next().expect("a count");
                point.buckets += n.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
            }
        }
    }
    points
}

#[test]
#[ignore = "needs root, the fixtures and the Collector (`cargo xtask setup`)"]
fn a_collector_receives_what_the_export_says() {
    let _turn = turn(module_path!());
    let collector = Collector::start();
    let mut command = Command::new(fixture("c/workload"));
    command.args(["--forever", "--rate", "2000"]);
    let target = Running::spawn(command);
    target.out().wait_for("ready pid=");
    let json = export_path("otlp.json");
    let mut command = probetop();
    command
        .args(["--pid", &target.pid().to_string(), "--no-tui", "-d", "3"])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"])
        .args(["--otlp", &format!("http://127.0.0.1:{}", collector.port)])
        .args(["--interval", "0.5", "-o", &json.display().to_string()]);
    let mut probetop = Running::spawn(command);
    assert!(probetop.wait().success());
    let report = read_export(&json);

    // The final push is answered once the Collector has logged it.
    let points = last_points(&collector.text());
    let probes = report["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), 2);
    for probe in probes {
        let id = probe["id"].as_u64().expect("id");
        let point = |metric: &str| {
            points
                .get(&(metric.to_string(), id))
                .copied()
                .unwrap_or_else(|| panic!("no {metric} of probe {id} in {points:?}"))
        };
        let hits = probe["hits"].as_u64().expect("hits");
        assert!(hits > 0, "probe {id}");
        assert_eq!(point("probetop.probe.hits").value, hits, "probe {id}");
        assert_eq!(
            Some(point("probetop.probe.dropped").value),
            probe["dropped"].as_u64(),
            "probe {id}"
        );
        let histogram = point("probetop.handler.duration");
        let count = probe["handler_ns"]["count"].as_u64().expect("count");
        assert_eq!(histogram.value, count, "probe {id}");
        assert_eq!(histogram.buckets, count, "probe {id}: buckets");
    }
    let text = collector.text();
    assert!(
        text.contains(&format!("-> process.pid: Int({})", target.pid())),
        "resource attributes"
    );
    assert!(text.contains("-> service.name: Str(probetop)"));
    let _ = std::fs::remove_file(&json);
}
