//! Fleet mode: `--listen` serves the live measurements in the Prometheus text format.
//! Checked with promtool (Debian `prometheus`: `promtool check metrics`) and scraped by a
//! real Prometheus server on loopback, whose stored values must equal probetop's own;
//! with native histograms on, it scrapes the protobuf exposition and must find the HDR
//! histograms' counts and p99. Everything stays on 127.0.0.1.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::common::*;

/// A minimal HTTP/1.1 GET: (status code, head, body).
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect_timeout(&addr, PATIENCE).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reply");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head.to_string(), body.to_string())
}

/// `probetop_probe_hits_total` per probe id, from exposition text.
fn hits_by_id(metrics: &str) -> BTreeMap<String, u64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("probetop_probe_hits_total{"))
        .map(|l| {
            let id = l
                .split("id=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("no id label in {l}"))
                .to_string();
            let value = l
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no value in {l}"));
            (id, value)
        })
        .collect()
}

/// Starts probetop headless with `--listen 127.0.0.1:0`; returns it, once its probes
/// are attached and it serves, and the address.
fn probetop_listening(pid: u32, extra: &[&str]) -> (Running, SocketAddr) {
    probetop_listening_with(pid, extra, None)
}

/// [`probetop_listening`] with `cache` as XDG_CACHE_HOME (a calibration).
fn probetop_listening_with(
    pid: u32,
    extra: &[&str],
    cache: Option<&std::path::Path>,
) -> (Running, SocketAddr) {
    let mut command = probetop();
    if let Some(cache) = cache {
        command.env("XDG_CACHE_HOME", cache);
    }
    command
        .args([
            "--pid",
            &pid.to_string(),
            "--no-tui",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"])
        .args(extra);
    let running = Running::spawn(command);
    let line = running.err().wait_for("serving metrics on http://");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (running, addr)
}

fn forever_workload() -> Running {
    let mut command = Command::new(fixture("c/workload"));
    command.args(["--forever", "--rate", "2000"]);
    let running = Running::spawn(command);
    running.out().wait_for("ready pid=");
    running
}

/// `promtool check metrics` must accept the exposition text.
fn promtool_check(metrics: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool (Debian package prometheus)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(metrics.as_bytes())
        .expect("feed promtool");
    let checked = promtool.wait_with_output().expect("promtool");
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{metrics}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
#[ignore = "needs root, the fixtures and promtool (Debian prometheus)"]
fn in_situ_measurement_is_served() {
    let _turn = turn(module_path!());
    let target = forever_workload();
    let (_probetop, addr) = probetop_listening(
        target.pid(),
        &["--in-situ", "--in-situ-window", "0.2", "--work", "none"],
    );
    let deadline = Instant::now() + PATIENCE;
    let metrics = loop {
        let body = http(addr, "GET", "/metrics").2;
        if body.contains(r#"probetop_in_situ_windows{state="off"} 3"#) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no in-situ windows served:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for family in [
        r#"probetop_in_situ_windows{state="on"}"#,
        r#"probetop_in_situ_cpu_share{bound="mean"}"#,
        r#"probetop_in_situ_cpu_share{bound="low"}"#,
        r#"probetop_in_situ_per_hit_seconds{bound="high"}"#,
        "probetop_in_situ_measured ",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    promtool_check(&metrics);
}

#[test]
#[ignore = "needs root, the fixtures and promtool (Debian prometheus)"]
fn metrics_pass_promtool_and_other_paths_are_refused() {
    let _turn = turn(module_path!());
    let target = forever_workload();
    // Calibrated, so every cost family is served too.
    let cache = calibrated_cache("listen");
    let (mut probetop, addr) = probetop_listening_with(target.pid(), &[], Some(&cache));
    assert!(addr.ip().is_loopback());

    // Wait for hits so every family has samples.
    let deadline = Instant::now() + PATIENCE;
    let metrics = loop {
        let (status, head, body) = http(addr, "GET", "/metrics");
        assert_eq!(status, 200, "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        if hits_by_id(&body).values().all(|&h| h > 0)
            && hits_by_id(&body).len() == 2
            && body.contains("probetop_cost_cpu_share{")
        {
            break body;
        }
        assert!(Instant::now() < deadline, "no hits served:\n{body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for family in [
        "probetop_probe_hits_total",
        "probetop_probe_dropped_total",
        "probetop_handler_seconds",
        "probetop_handler_duration_seconds_bucket",
        // What the probes cost, estimated, without --in-situ.
        "probetop_probe_cost_seconds{",
        "probetop_probe_cpu_share{",
        "probetop_cost_cpu_share{method=\"estimate\"}",
        "probetop_cost_per_hit_seconds{method=\"estimate\"}",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    let costs = metrics
        .lines()
        .filter(|l| {
            l.starts_with("probetop_probe_cost_seconds{") && l.contains("method=\"estimate\"")
        })
        .count();
    assert_eq!(costs, 2, "a whole cost per probe:\n{metrics}");
    assert!(metrics.contains(r#"probe="uprobe:work_unit""#), "{metrics}");
    assert!(
        metrics.contains(r#"probe="uretprobe:leaf_ret""#),
        "{metrics}"
    );

    promtool_check(&metrics);

    // Counters only grow.
    let later = hits_by_id(&http(addr, "GET", "/metrics").2);
    for (id, hits) in hits_by_id(&metrics) {
        assert!(
            later[&id] >= hits,
            "probe {id}: {} after {hits}",
            later[&id]
        );
    }

    let (status, head, body) = http(addr, "HEAD", "/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(body.is_empty(), "HEAD has no body: {body:?}");
    assert_eq!(http(addr, "GET", "/").0, 404);
    assert_eq!(http(addr, "GET", "/metrics/x").0, 404);
    assert_eq!(http(addr, "POST", "/metrics").0, 405);

    probetop.signal(libc::SIGTERM);
    assert!(probetop.wait().success());
    // The port is closed with the run.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
    let _ = std::fs::remove_dir_all(&cache);
}

/// A Prometheus server of its own on loopback, with its data in a temp dir.
struct Prometheus {
    running: Running,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    fn start(scrape: SocketAddr) -> Self {
        Self::start_with(scrape, "classic", &[])
    }

    /// A server of its own (`name` tells its temp dir from the others'), with `extra`
    /// flags.
    fn start_with(scrape: SocketAddr, name: &str, extra: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("probetop-prometheus-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("temp dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: probetop\n    static_configs:\n      - targets: ['{scrape}']\n"
            ),
        )
        .expect("config");
        // A free loopback port: taken from the kernel, then handed to Prometheus.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let mut command = Command::new("prometheus");
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .args(extra);
        let running = Running::spawn(command);
        let prometheus = Self { running, addr, dir };
        let deadline = Instant::now() + PATIENCE;
        while !TcpStream::connect_timeout(&addr, Duration::from_millis(200))
            .is_ok_and(|_| http(addr, "GET", "/-/ready").0 == 200)
        {
            assert!(
                Instant::now() < deadline,
                "prometheus did not become ready on {addr}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    /// `probetop_probe_hits_total` per probe id, as Prometheus stored it last.
    fn hits_by_id(&self) -> BTreeMap<String, u64> {
        self.query_by_id("probetop_probe_hits_total")
            .into_iter()
            .map(|(id, v)| (id, v as u64))
            .collect()
    }

    /// The instant vector of a PromQL `query` (URL-safe as written), by label `id`.
    fn query_by_id(&self, query: &str) -> BTreeMap<String, f64> {
        let (status, head, body) = http(self.addr, "GET", &format!("/api/v1/query?query={query}"));
        assert_eq!(status, 200, "{head}\n{body}");
        let reply: serde_json::Value = serde_json::from_str(&body).expect("query JSON");
        assert_eq!(reply["status"], "success", "{body}");
        reply["data"]["result"]
            .as_array()
            .expect("a vector")
            .iter()
            .map(|sample| {
                let id = sample["metric"]["id"]
                    .as_str()
                    .expect("id label")
                    .to_string();
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .expect("a value");
                (id, value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_real_prometheus_scrapes_what_probetop_reports() {
    let _turn = turn(module_path!());
    let target = forever_workload();
    let json = export_path("listen.json");
    let (mut probetop, addr) =
        probetop_listening(target.pid(), &["--export", &json.display().to_string()]);
    let prometheus = Prometheus::start(addr);

    // Scraped while live.
    let deadline = Instant::now() + PATIENCE;
    while prometheus.hits_by_id().values().filter(|&&h| h > 0).count() < 2 {
        assert!(Instant::now() < deadline, "prometheus stored no hits");
        std::thread::sleep(Duration::from_millis(500));
    }

    // Freeze the target so the counts stop moving, then compare once Prometheus has
    // scraped the final numbers.
    target.signal(libc::SIGSTOP);
    let deadline = Instant::now() + PATIENCE;
    let served = loop {
        let before = hits_by_id(&http(addr, "GET", "/metrics").2);
        std::thread::sleep(Duration::from_millis(1200));
        let after = hits_by_id(&http(addr, "GET", "/metrics").2);
        if before == after {
            break after;
        }
        assert!(Instant::now() < deadline, "counts kept moving");
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stored = prometheus.hits_by_id();
        if stored == served {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus has {stored:?}, probetop serves {served:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(served.len(), 2);
    assert!(served.values().all(|&h| h > 0), "{served:?}");

    // And the run's own export says the same.
    probetop.signal(libc::SIGINT);
    assert!(probetop.wait().success());
    let report: serde_json::Value = read_export(&json);
    for probe in report["probes"].as_array().expect("probes") {
        let id = probe["id"].to_string();
        assert_eq!(
            probe["hits"].as_u64(),
            served.get(&id).copied(),
            "probe {id}"
        );
    }
    let _ = std::fs::remove_file(&json);
    target.signal(libc::SIGCONT);
}

/// 500 scrapes at once: each gets a whole answer, the metrics or a 503 with
/// `Retry-After` (they were cut off: resets and empty closes).
#[test]
#[ignore = "needs root and the fixtures"]
fn five_hundred_scrapes_at_once_are_each_answered() {
    let _turn = turn(module_path!());
    let target = forever_workload();
    let (_probetop, addr) = probetop_listening(target.pid(), &[]);
    const SCRAPES: usize = 500;
    // All connected and sent before any answer is read: at once, as far as probetop sees.
    let mut streams: Vec<TcpStream> = (0..SCRAPES)
        .map(|_| {
            let mut stream = TcpStream::connect_timeout(&addr, PATIENCE).expect("connect");
            stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
            write!(
                stream,
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .expect("send");
            stream
        })
        .collect();
    let (mut ok, mut busy) = (0, 0);
    for (i, stream) in streams.iter_mut().enumerate() {
        let mut reply = Vec::new();
        if let Err(e) = stream.read_to_end(&mut reply) {
            panic!("scrape {i}: {e} after {} bytes", reply.len());
        }
        let reply = String::from_utf8_lossy(&reply);
        let (head, body) = reply
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("scrape {i}: no whole answer: {reply:?}"));
        if head.starts_with("HTTP/1.1 200 ") {
            assert!(body.contains("probetop_probe_hits_total{"), "scrape {i}");
            ok += 1;
        } else {
            assert!(head.starts_with("HTTP/1.1 503 "), "scrape {i}: {head}");
            assert!(head.contains("\r\nRetry-After: "), "scrape {i}: {head}");
            busy += 1;
        }
    }
    assert!(ok >= 1, "{ok} answered, {busy} told to retry");
    eprintln!("{ok} scrapes answered, {busy} told to retry");
    // Still serving afterwards.
    assert_eq!(http(addr, "GET", "/metrics").0, 200);
}

/// A `latency:` pair is served as a histogram family per function: after the fixture's
/// known calls, `probetop_latency_seconds_count` is exactly those calls, and promtool
/// accepts the exposition.
#[test]
#[ignore = "needs root, the fixtures and promtool (Debian prometheus)"]
fn a_latency_pair_is_served_as_a_histogram_of_every_call() {
    let _turn = turn(module_path!());
    const CALLS: u64 = 200;
    let mut command = Command::new(fixture("c/latency"));
    command.args(["--calls", &CALLS.to_string()]);
    command.args(["--threads", "1", "--depth", "0", "--rounds", "1", "--hold"]);
    let target = Running::spawn(command);
    target.out().wait_for("ready pid=");
    let mut probetop = probetop();
    probetop
        .args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["--listen", "127.0.0.1:0", "-e", "latency:spin_2us"]);
    let probetop = Running::spawn(probetop);
    let mut addr: Option<SocketAddr> = None;
    let mut attached = false;
    while addr.is_none() || !attached {
        let line = probetop
            .err()
            .next()
            .expect("probetop says it serves and attached");
        if let Some(rest) = line.split("http://").nth(1) {
            addr = rest.strip_suffix("/metrics").and_then(|a| a.parse().ok());
        }
        attached |= line.contains("attached 2 probes");
    }
    let addr = addr.expect("address");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done ");
    let labels = r#"latency="latency:spin_2us",name="spin_2us""#;
    let count_line = format!("probetop_latency_seconds_count{{{labels}");
    // The last records reach probetop within a poll or two after `done`.
    let deadline = Instant::now() + PATIENCE;
    let metrics = loop {
        let body = http(addr, "GET", "/metrics").2;
        let served = body
            .lines()
            .find(|l| l.starts_with(&count_line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok());
        if served == Some(CALLS) {
            break body;
        }
        assert!(
            Instant::now() < deadline && served.is_none_or(|s| s < CALLS),
            "{count_line} served {served:?}, the fixture made {CALLS} calls:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for line in [
        format!("probetop_latency_seconds_bucket{{{labels},object="),
        format!("probetop_latency_corrected_seconds_count{{{labels},object="),
        "# TYPE probetop_latency_seconds histogram".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    let corrected = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "probetop_latency_corrected_seconds_count{{{labels}"
            ))
        })
        .expect("corrected count");
    assert!(corrected.ends_with(&format!(" {CALLS}")), "{corrected}");
    promtool_check(&metrics);
}

/// Issue 36: a Prometheus with native histograms scrapes the protobuf exposition; its
/// `histogram_count` of each probe's handler histogram equals the hits probetop's JSON
/// export counted, and its `histogram_quantile(0.99, ..)` lies within one native bucket
/// (plus the HDR histogram's own resolution) of the export's p99.
#[test]
#[ignore = "needs root, the fixtures and prometheus (Debian prometheus)"]
fn prometheus_native_histograms_match_the_hdr_ones() {
    let _turn = turn(module_path!());
    let target = forever_workload();
    let json = export_path("listen-native.json");
    let (mut probetop, addr) =
        probetop_listening(target.pid(), &["--export", &json.display().to_string()]);
    let prometheus =
        Prometheus::start_with(addr, "native", &["--enable-feature=native-histograms"]);
    let count = "histogram_count(probetop_handler_duration_seconds)";
    let deadline = Instant::now() + PATIENCE;
    while prometheus
        .query_by_id(count)
        .values()
        .filter(|&&c| c > 0.0)
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "prometheus stored no native histogram: {:?}",
            prometheus.query_by_id("probetop_handler_duration_seconds_count")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Freeze the target, wait for the served counts to stop, then for Prometheus to
    // have scraped them.
    target.signal(libc::SIGSTOP);
    let served_counts = |addr| -> BTreeMap<String, f64> {
        http(addr, "GET", "/metrics")
            .2
            .lines()
            .filter(|l| l.starts_with("probetop_handler_duration_seconds_count{"))
            .map(|l| {
                let id = l.split("id=\"").nth(1).and_then(|r| r.split('"').next());
                let value = l.rsplit(' ').next().and_then(|v| v.parse().ok());
                (id.expect("id").to_string(), value.expect("value"))
            })
            .collect()
    };
    let deadline = Instant::now() + PATIENCE;
    let served = loop {
        let before = served_counts(addr);
        std::thread::sleep(Duration::from_millis(1200));
        let after = served_counts(addr);
        if before == after {
            break after;
        }
        assert!(Instant::now() < deadline, "counts kept moving");
    };
    let deadline = Instant::now() + PATIENCE;
    while prometheus.query_by_id(count) != served {
        assert!(
            Instant::now() < deadline,
            "prometheus has {:?}, probetop serves {served:?}",
            prometheus.query_by_id(count)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let p99s = prometheus.query_by_id("histogram_quantile(0.99,probetop_handler_duration_seconds)");

    probetop.signal(libc::SIGINT);
    assert!(probetop.wait().success());
    target.signal(libc::SIGCONT);
    let report: serde_json::Value = read_export(&json);
    let probes = report["probes"].as_array().expect("probes");
    assert_eq!(probes.len(), 2);
    for probe in probes {
        let id = probe["id"].to_string();
        let handler = &probe["handler_ns"];
        let hits = handler["count"].as_u64().expect("count");
        assert!(hits > 0, "probe {id}");
        // Every hit's record arrived (2000 calls/s cannot fill the ring), so the
        // histogram holds every hit.
        assert_eq!(probe["dropped"].as_u64(), Some(0), "probe {id}");
        assert_eq!(probe["hits"].as_u64(), Some(hits), "probe {id}");
        assert_eq!(served[&id], hits as f64, "probe {id}: served count");
        let p99 = handler["p99"].as_u64().expect("p99") as f64 / 1e9;
        let got = p99s[&id];
        // Schema 8: a bucket is 2^(1/256) wide; the HDR p99 is its bucket's highest
        // value, at most 1/1024 above the values in it.
        let bucket = p99 * (2f64.powf(1.0 / 256.0) - 1.0);
        let hdr = p99 / 1024.0;
        assert!(
            (got - p99).abs() <= bucket + hdr,
            "probe {id}: Prometheus' p99 {got} s, probetop's {p99} s (bucket {bucket} s)"
        );
    }
    let _ = std::fs::remove_file(&json);
}
