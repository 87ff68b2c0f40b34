//! `--otlp`: a real OpenTelemetry Collector (v0.165.0 modules: the OTLP receiver and the
//! debug exporter, built by `cargo xtask setup` from xtask/otelcol) on loopback receives
//! probetop's pushes; the last it logged must equal the run's JSON export: hits, drops,
//! and each handler histogram's count, which its exponential buckets add up to; the
//! export's `otlp` counts the pushes it logged. Over https its receiver has a certificate
//! of a CA made for the test: trusted through `SSL_CERT_FILE` the pushes land, untrusted
//! each is refused, said once, and counted failed with the reason.

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
    /// Plain http, or https with `tls`'s server certificate.
    fn start(tls: Option<&TestCa>) -> Self {
        // Its own directory: the tests of this module run at once.
        let dir = server_dir("otelcol");
        // A free loopback port: taken from the kernel, then handed to the Collector.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n{tls}\
                 exporters:\n  debug:\n    verbosity: detailed\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n\
                 \x20 pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [debug]\n",
                tls = tls.map_or_else(String::new, |ca| format!(
                    "        tls:\n          cert_file: {}\n          key_file: {}\n",
                    ca.cert.display(),
                    ca.key.display()
                )),
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

    /// The requests it logged: one resource each, the line after each batch's `Metrics`.
    fn requests(&self) -> u64 {
        self.text()
            .lines()
            .filter(|l| l.ends_with("\tResourceMetrics #0"))
            .count() as u64
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

/// The workload fixture, calling at 2000/s until killed.
fn target() -> Running {
    let mut command = Command::new(fixture("c/workload"));
    command.args(["--forever", "--rate", "2000"]);
    let target = Running::spawn(command);
    target.out().wait_for("ready pid=");
    target
}

/// probetop on `target` for `seconds`, pushing to `url` every 0.5 s; its JSON export.
fn pushing(target: &Running, url: &str, seconds: &str, json: &std::path::Path) -> Command {
    let mut command = probetop();
    command
        .args([
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "-d",
            seconds,
        ])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"])
        .args(["--otlp", url])
        .args(["--interval", "0.5", "-o", &json.display().to_string()])
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    command
}

/// What the Collector logged last equals the export: hits, drops, and each histogram's
/// count and buckets; its resource names the target; the export's `otlp` counts every
/// request it logged, none failed.
fn assert_received(collector: &Collector, url: &str, report: &serde_json::Value, target: &Running) {
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
    let otlp = &report["otlp"];
    assert_eq!(otlp["endpoint"], format!("{url}/v1/metrics"), "{otlp}");
    assert!(
        collector.requests() >= 2,
        "an interval push and the final one"
    );
    assert_eq!(otlp["pushed"], collector.requests(), "{otlp}");
    assert_eq!(otlp["failed"], 0, "{otlp}");
    assert_eq!(otlp["last_error"], serde_json::Value::Null, "{otlp}");
}

#[test]
#[ignore = "needs root, the fixtures and the Collector (`cargo xtask setup`)"]
fn a_collector_receives_what_the_export_says() {
    let _turn = turn(module_path!());
    let collector = Collector::start(None);
    let target = target();
    let json = export_path("otlp.json");
    let url = format!("http://127.0.0.1:{}", collector.port);
    let mut probetop = Running::spawn(pushing(&target, &url, "3", &json));
    assert!(probetop.wait().success());
    // The final push is answered once the Collector has logged it.
    let report = read_export(&json);
    assert_received(&collector, &url, &report, &target);
    let _ = std::fs::remove_file(&json);
}

#[test]
#[ignore = "needs root, the fixtures, openssl and the Collector (`cargo xtask setup`)"]
fn https_pushes_land_where_the_ca_is_trusted_and_are_counted_failed_where_not() {
    let _turn = turn(module_path!());
    let dir = server_dir("otlp-tls");
    let ca = TestCa::new(&dir);
    let collector = Collector::start(Some(&ca));
    let target = target();
    let url = format!("https://127.0.0.1:{}", collector.port);

    // Trusted through SSL_CERT_FILE: every push lands.
    let json = dir.join("trusted.json");
    let mut command = pushing(&target, &url, "2", &json);
    command.env("SSL_CERT_FILE", &ca.ca);
    let mut probetop = Running::spawn(command);
    assert!(probetop.wait().success());
    let report = read_export(&json);
    assert_received(&collector, &url, &report, &target);
    let landed = collector.requests();

    // The host's roots only: refused, said once, counted failed in the exit line and the
    // JSON, with the reason; nothing more reached the Collector.
    let json = dir.join("untrusted.json");
    let mut probetop = Running::spawn(pushing(&target, &url, "1", &json));
    assert!(probetop.wait().success());
    let said = probetop.err().rest();
    let refused: Vec<&String> = said.iter().filter(|l| l.contains("cannot push")).collect();
    assert_eq!(refused.len(), 1, "{said:?}");
    assert!(
        refused[0].contains("TLS: the server's certificate is signed by no CA this host trusts")
            && refused[0].contains("SSL_CERT_FILE"),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("0 pushes sent") && l.contains(" failed")),
        "the exit line: {said:?}"
    );
    let report = read_export(&json);
    let otlp = &report["otlp"];
    assert_eq!(otlp["pushed"], 0, "{otlp}");
    assert!(otlp["failed"].as_u64().is_some_and(|n| n >= 1), "{otlp}");
    assert!(
        otlp["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("signed by no CA this host trusts")),
        "{otlp}"
    );
    assert_eq!(collector.requests(), landed, "an untrusted push landed");
    drop(collector);
    let _ = std::fs::remove_dir_all(&dir);
}
