//! `--otlp URL`: pushes the live measurements over OTLP/HTTP (protobuf, `POST
//! /v1/metrics`) every `--interval`, and the final ones at exit.
//!
//! Per probe (attributes `probe`, `name`, `kind`, `object`, `id`, and `owner` for another
//! tool's probe): `probetop.probe.hits` and `probetop.probe.dropped` (monotonic sums),
//! `probetop.handler.duration` (an exponential histogram, seconds, at the scale the HDR
//! precision calls for: the same buckets as `--listen`'s native histograms, see
//! [`crate::present::export::native`]), `probetop.probe.cost` and
//! `probetop.probe.cpu_share` (gauges, attribute `method`); for the run
//! `probetop.cost.cpu_share`. Every sum and histogram is cumulative from the start of
//! the window, so a push that is lost costs nothing the next one does not carry.
//!
//! Pushing never holds up measuring: requests go through a bounded queue to a thread
//! of their own, which retries with backoff; when the queue is full the oldest request
//! is dropped and counted. An endpoint that cannot be reached is said once.

use std::{
    collections::VecDeque,
    sync::{Arc, Condvar, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    metrics::v1::{
        AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Metric,
        NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
    },
    resource::v1::Resource,
};

use crate::present::export::{OtlpPushes, ProbeReport, Report, native};

/// Requests waiting to be pushed; beyond it the oldest is dropped (each carries the
/// totals, so the newest is the one worth sending).
const QUEUE: usize = 4;
/// Tries of one request before it counts as failed.
const TRIES: u32 = 4;
/// The first retry's wait, doubled at each one after.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// A request's deadline, connection included.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// How long the exit waits for the final push.
const EXIT_DEADLINE: Duration = Duration::from_secs(5);

/// The URL pushed to: `URL` as given when it names `/v1/metrics`, else with it appended
/// (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read). `None` for anything but `http://` or
/// `https://`.
pub(crate) fn metrics_url(given: &str) -> Option<String> {
    let rest = given
        .strip_prefix("http://")
        .or_else(|| given.strip_prefix("https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return None;
    }
    if given.trim_end_matches('/').ends_with("/v1/metrics") {
        Some(given.to_string())
    } else {
        Some(format!("{}/v1/metrics", given.trim_end_matches('/')))
    }
}

/// What the push thread did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Counts {
    sent: u64,
    /// Requests that failed every try.
    failed: u64,
    /// Requests dropped from a full queue, or left unsent at exit.
    dropped: u64,
    /// Why the last request that failed did.
    last_error: Option<String>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    requests: VecDeque<Vec<u8>>,
    closed: bool,
    counts: Counts,
}

/// The push thread and its queue.
pub(crate) struct Pusher {
    url: String,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Pusher {
    /// Starts the push thread for `url` (from [`metrics_url`]).
    pub(crate) fn start(url: String) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        });
        let thread = std::thread::Builder::new().name("otlp".into()).spawn({
            let shared = shared.clone();
            let url = url.clone();
            move || push_loop(&url, &shared)
        })?;
        Ok(Self {
            url,
            shared,
            thread: Some(thread),
        })
    }

    /// Queues `report`'s metrics; never waits on the network.
    pub(crate) fn offer(&self, report: &Report, resource: &[KeyValue]) {
        use prost::Message as _;
        let body = request(report, resource, unix_now_ns()).encode_to_vec();
        let mut queue = lock(&self.shared.queue);
        while queue.requests.len() >= QUEUE {
            queue.requests.pop_front();
            queue.counts.dropped += 1;
        }
        queue.requests.push_back(body);
        drop(queue);
        self.shared.ready.notify_one();
    }

    /// What the pushes came to so far.
    pub(crate) fn so_far(&self) -> OtlpPushes {
        let counts = lock(&self.shared.queue).counts.clone();
        self.pushes(counts)
    }

    fn pushes(&self, counts: Counts) -> OtlpPushes {
        OtlpPushes {
            endpoint: self.url.clone(),
            pushed: counts.sent,
            failed: counts.failed,
            dropped: counts.dropped,
            last_error: counts.last_error,
        }
    }

    /// Pushes `report` last, waits up to [`EXIT_DEADLINE`] for the queue to empty, and
    /// returns what the pushes came to (the exports' `otlp`; [`lost_line`] says it at
    /// exit when any was lost).
    pub(crate) fn finish(mut self, report: &Report, resource: &[KeyValue]) -> OtlpPushes {
        self.offer(report, resource);
        lock(&self.shared.queue).closed = true;
        self.shared.ready.notify_one();
        let deadline = Instant::now() + EXIT_DEADLINE;
        while Instant::now() < deadline && self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(thread) = self.thread.take_if(|t| t.is_finished()) {
            let _ = thread.join();
        }
        let mut queue = lock(&self.shared.queue);
        // Whatever is still queued stays unsent: the thread is left to end with the
        // process (its request is bounded by REQUEST_DEADLINE).
        let left = queue.requests.len() as u64;
        queue.requests.clear();
        queue.counts.dropped += left;
        let counts = queue.counts.clone();
        drop(queue);
        self.pushes(counts)
    }
}

/// The line to say at exit when a push was lost.
pub(crate) fn lost_line(pushes: &OtlpPushes) -> Option<String> {
    (pushes.failed > 0 || pushes.dropped > 0).then(|| {
        format!(
            "--otlp {}: {} pushes sent, {} failed, {} dropped{}",
            pushes.endpoint,
            pushes.pushed,
            pushes.failed,
            pushes.dropped,
            pushes
                .last_error
                .as_ref()
                .map(|e| format!(" (the last: {e})"))
                .unwrap_or_default()
        )
    })
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    // Nothing panics while holding it; if something did, the queue is whole.
    queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn push_loop(url: &str, shared: &Shared) {
    let agent = crate::sys::http::agent(
        url,
        crate::sys::http::Timeouts {
            connect: None,
            total: REQUEST_DEADLINE,
        },
    );
    let mut said = false;
    loop {
        let body = {
            let mut queue = lock(&shared.queue);
            loop {
                if let Some(body) = queue.requests.pop_front() {
                    break body;
                }
                if queue.closed {
                    return;
                }
                queue = shared
                    .ready
                    .wait(queue)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let mut last_error = String::new();
        let mut sent = false;
        for attempt in 0..TRIES {
            if attempt > 0 {
                // The exit is waiting: no retry then.
                if lock(&shared.queue).closed {
                    break;
                }
                std::thread::sleep(FIRST_BACKOFF * 2u32.pow(attempt - 1));
            }
            let agent = match &agent {
                Ok(agent) => agent,
                // No try can do better: https without roots to check it against.
                Err(why) => {
                    last_error.clone_from(why);
                    break;
                }
            };
            match post(agent, url, &body) {
                Ok(()) => {
                    sent = true;
                    break;
                }
                Err(e) => last_error = e,
            }
        }
        let mut queue = lock(&shared.queue);
        if sent {
            queue.counts.sent += 1;
        } else {
            queue.counts.failed += 1;
            if !said {
                said = true;
                crate::sys::say(&format!(
                    "probetop: --otlp {url}: cannot push ({last_error}); retrying every --interval, the count of lost pushes comes at exit"
                ));
            }
            queue.counts.last_error = Some(last_error);
        }
    }
}

/// One POST; `Err` says why it did not land (a 4xx but 429 will not land on a retry
/// either, but the next request is a new one, so it is counted the same).
fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> Result<(), String> {
    let response = agent
        .post(url)
        .header("Content-Type", "application/x-protobuf")
        .send(body)
        .map_err(|e| crate::sys::http::describe(&e))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {status}"))
    }
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    attribute(key, any_value::Value::StringValue(value.to_string()))
}

/// The resource: this host, the target process, and probetop.
pub(crate) fn resource(report: &Report) -> Vec<KeyValue> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let target = &report.target;
    vec![
        text("service.name", "probetop"),
        text("service.version", env!("CARGO_PKG_VERSION")),
        text("host.name", &host),
        attribute(
            "process.pid",
            any_value::Value::IntValue(i64::from(target.pid)),
        ),
        text("process.executable.name", &target.comm),
        text("process.executable.path", &target.exe.display().to_string()),
        text("process.command_line", &target.cmdline),
    ]
}

fn probe_attributes(p: &ProbeReport) -> Vec<KeyValue> {
    let mut out = vec![
        text("probe", &p.spec),
        text("name", &p.name),
        text("kind", p.kind.as_str()),
        text("object", &p.object),
        attribute("id", any_value::Value::IntValue(i64::from(p.id))),
    ];
    if let Some(site) = &p.other {
        out.push(text("owner", &site.owner.tool));
    }
    out
}

/// The request for `report` at `now_ns` (Unix nanoseconds).
pub(crate) fn request(
    report: &Report,
    resource: &[KeyValue],
    now_ns: u64,
) -> ExportMetricsServiceRequest {
    let start_ns = report.started_unix_ms.saturating_mul(1_000_000);
    let point = |attributes: Vec<KeyValue>, value: number_data_point::Value| NumberDataPoint {
        attributes,
        start_time_unix_nano: start_ns,
        time_unix_nano: now_ns,
        value: Some(value),
        ..Default::default()
    };
    let counter = |name: &str, description: &str, of: fn(&ProbeReport) -> u64| Metric {
        name: name.to_string(),
        description: description.to_string(),
        unit: "1".to_string(),
        data: Some(Data::Sum(Sum {
            data_points: report
                .probes
                .iter()
                .map(|p| {
                    point(
                        probe_attributes(p),
                        number_data_point::Value::AsInt(i64::try_from(of(p)).unwrap_or(i64::MAX)),
                    )
                })
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    };
    let mut metrics = vec![
        counter(
            "probetop.probe.hits",
            "Hits the probe took: hit records received plus records dropped.",
            |p| p.hits,
        ),
        counter(
            "probetop.probe.dropped",
            "Hits whose record the kernel could not queue (ring buffer full).",
            |p| p.dropped,
        ),
        Metric {
            name: "probetop.handler.duration".to_string(),
            description:
                "Handler time per received hit, from an HDR histogram (3 significant digits)."
                    .to_string(),
            unit: "s".to_string(),
            data: Some(Data::ExponentialHistogram(ExponentialHistogram {
                data_points: report
                    .probes
                    .iter()
                    .map(|p| exponential_point(p, start_ns, now_ns))
                    .collect(),
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            })),
            ..Default::default()
        },
    ];
    type Of = fn(&ProbeReport) -> Option<f64>;
    let gauges: [(&str, &str, &str, Of); 2] = [
        (
            "probetop.probe.cost",
            "Whole cost of one hit to the target (trap, kernel, BPF program, return); method: estimate or in-situ.",
            "s",
            |p| p.cost.whole_cost_ns.map(|ns| ns * 1e-9),
        ),
        (
            "probetop.probe.cpu_share",
            "Share of one CPU the probe's hits cost the target.",
            "1",
            |p| p.cost.cpu_share,
        ),
    ];
    for (name, description, unit, of) in gauges {
        let data_points: Vec<NumberDataPoint> = report
            .probes
            .iter()
            .filter_map(|p| {
                let value = of(p)?;
                let mut attributes = probe_attributes(p);
                attributes.push(text(
                    "method",
                    crate::present::headline::probe_method(&p.cost),
                ));
                Some(point(attributes, number_data_point::Value::AsDouble(value)))
            })
            .collect();
        if !data_points.is_empty() {
            metrics.push(Metric {
                name: name.to_string(),
                description: description.to_string(),
                unit: unit.to_string(),
                data: Some(Data::Gauge(Gauge { data_points })),
                ..Default::default()
            });
        }
    }
    let headline = crate::present::headline::Headline::of_report(report);
    if let Some(share) = headline.cpu_share {
        metrics.push(Metric {
            name: "probetop.cost.cpu_share".to_string(),
            description: "The headline: share of one CPU all probes together cost the target."
                .to_string(),
            unit: "1".to_string(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![point(
                    vec![text("method", headline.method.as_str())],
                    number_data_point::Value::AsDouble(share),
                )],
            })),
            ..Default::default()
        });
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource.to_vec(),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "probetop".to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// One probe's handler times as an exponential histogram point, seconds.
fn exponential_point(p: &ProbeReport, start_ns: u64, now_ns: u64) -> ExponentialHistogramDataPoint {
    let h = &p.handler_ns;
    let native = native::of_ns(h);
    let (offset, bucket_counts) = native.otlp_positive();
    let seconds = |ns: u64| ns as f64 / 1e9;
    let sum_ns: u128 = h
        .iter_recorded()
        .map(|v| {
            u128::from(h.median_equivalent(v.value_iterated_to())) * u128::from(v.count_at_value())
        })
        .sum();
    ExponentialHistogramDataPoint {
        attributes: probe_attributes(p),
        start_time_unix_nano: start_ns,
        time_unix_nano: now_ns,
        count: h.len(),
        sum: Some(sum_ns as f64 / 1e9),
        scale: native.schema,
        zero_count: 0,
        zero_threshold: native::ZERO_THRESHOLD,
        positive: Some(Buckets {
            offset,
            bucket_counts,
        }),
        min: (!h.is_empty()).then(|| seconds(h.min())),
        max: (!h.is_empty()).then(|| seconds(h.max())),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::present::export::testing::rich_report;

    #[test]
    fn urls() {
        assert_eq!(
            metrics_url("http://127.0.0.1:4318").as_deref(),
            Some("http://127.0.0.1:4318/v1/metrics")
        );
        assert_eq!(
            metrics_url("http://c:4318/").as_deref(),
            Some("http://c:4318/v1/metrics")
        );
        assert_eq!(
            metrics_url("http://c:4318/v1/metrics").as_deref(),
            Some("http://c:4318/v1/metrics")
        );
        assert_eq!(
            metrics_url("https://c:4318").as_deref(),
            Some("https://c:4318/v1/metrics")
        );
        assert_eq!(metrics_url("ftp://c:4318"), None);
        assert_eq!(metrics_url("c:4318"), None);
        assert_eq!(metrics_url("http://"), None);
    }

    #[test]
    fn the_request_carries_every_probe() {
        let report = rich_report();
        let bytes = request(&report, &resource(&report), 7).encode_to_vec();
        let decoded = ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let scope = &decoded.resource_metrics[0].scope_metrics[0];
        let metric = |name: &str| {
            scope
                .metrics
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        let Some(Data::Sum(hits)) = &metric("probetop.probe.hits").data else {
            panic!("hits is a sum")
        };
        assert!(hits.is_monotonic);
        let Some(Data::ExponentialHistogram(histogram)) = &metric("probetop.handler.duration").data
        else {
            panic!("an exponential histogram")
        };
        for (p, (hit, point)) in report
            .probes
            .iter()
            .zip(hits.data_points.iter().zip(&histogram.data_points))
        {
            assert_eq!(
                hit.value,
                Some(number_data_point::Value::AsInt(p.hits as i64))
            );
            assert_eq!(point.count, p.handler_ns.len());
            assert_eq!(point.scale, 8);
            let counted: u64 = point
                .positive
                .as_ref()
                .map_or(0, |b| b.bucket_counts.iter().sum());
            assert_eq!(counted, p.handler_ns.len());
            assert_eq!(point.time_unix_nano, 7);
        }
        let attributes = &decoded.resource_metrics[0]
            .resource
            .as_ref()
            .expect("resource")
            .attributes;
        assert!(attributes.iter().any(|a| a.key == "service.name"));
        assert!(attributes.iter().any(|a| a.key == "process.pid"));
    }

    /// A dead endpoint: the pushes fail, are counted, and the exit does not hang.
    #[test]
    fn a_dead_endpoint_is_counted() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port")
            .port();
        let pusher = Pusher::start(format!("http://127.0.0.1:{port}/v1/metrics")).expect("start");
        let report = rich_report();
        let resource = resource(&report);
        for _ in 0..10 {
            pusher.offer(&report, &resource);
        }
        let pushes = pusher.finish(&report, &resource);
        assert_eq!(pushes.pushed, 0, "{pushes:?}");
        assert!(pushes.failed > 0, "{pushes:?}");
        assert!(pushes.dropped > 0, "a full queue drops: {pushes:?}");
        assert!(
            pushes.last_error.as_deref().is_some_and(|e| !e.is_empty()),
            "{pushes:?}"
        );
        let line = lost_line(&pushes).expect("a line");
        assert!(line.contains("0 pushes sent"), "{line}");
        assert!(line.contains("(the last: "), "{line}");
    }
}
