//! Fleet mode: `--listen ADDR:PORT` serves the live measurements in the Prometheus text
//! format at `GET /metrics`, so a fleet's Prometheus can scrape every host; a scraper
//! whose `Accept` prefers the protobuf exposition gets that, with native histograms
//! ([`Format`]).
//!
//! A minimal HTTP/1.1 server: one request per connection (`Connection: close`), a
//! bounded request head read within a deadline, a deadline per connection, and a bound
//! on connections open at once where a new connection cuts off the oldest, so a slow or
//! hostile client can neither hold probetop's memory or tasks nor keep a scrape waiting.
//! Of the connections whose request came whole, [`MAX_ANSWERING`] are answered at once
//! (each copies the measurements); the rest get a 503 with `Retry-After`, a whole answer
//! rather than a reset (500 scrapes at once were cut off, most with nothing read).

use std::{collections::VecDeque, future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    task::AbortHandle,
};

/// The exposition format's content type (text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Longest request head read; Prometheus sends a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;
/// A connection is closed after this long, answered or not.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// The request head must have arrived within this; Prometheus sends it at once.
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// Connections open at once; a new one beyond this cuts off the oldest (a scrape is
/// answered in milliseconds, so the oldest is the idle one). Each holds a task and at
/// most [`MAX_HEAD`] bytes: 16 MiB at worst.
const MAX_CONNECTIONS: usize = 1024;
/// Requests answered with the measurements at once; more get 503 and `Retry-After`.
const MAX_ANSWERING: usize = 16;
/// `Retry-After` of a request refused for the others answered then, seconds.
const RETRY_AFTER_S: u32 = 1;

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    HeaderTooLarge,
    RequestTimeout,
    Unavailable,
    /// [`MAX_ANSWERING`] requests are being answered: come back in [`RETRY_AFTER_S`].
    Busy,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Self::Ok => "200 OK",
            Self::BadRequest => "400 Bad Request",
            Self::NotFound => "404 Not Found",
            Self::MethodNotAllowed => "405 Method Not Allowed",
            Self::HeaderTooLarge => "431 Request Header Fields Too Large",
            Self::RequestTimeout => "408 Request Timeout",
            Self::Unavailable | Self::Busy => "503 Service Unavailable",
        }
    }
}

/// Which exposition a scrape gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Text format 0.0.4: everyone who does not ask for protobuf.
    Text,
    /// `io.prometheus.client.MetricFamily`, length-delimited: native histograms.
    Protobuf,
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// GET /metrics (or HEAD: `head_only`).
    Metrics {
        head_only: bool,
        format: Format,
    },
    Refused(Status),
}

/// The exposition an `Accept` header's value prefers: protobuf when it names
/// `application/vnd.google.protobuf` with `proto=io.prometheus.client.MetricFamily` and
/// `encoding=delimited` at a quality no lower than any range text matches.
pub(crate) fn negotiate(accept: &str) -> Format {
    let mut protobuf = 0.0f64;
    let mut text = 0.0f64;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut q = 1.0f64;
        let (mut proto, mut encoding) = (None, None);
        for param in parts {
            let Some((key, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().unwrap_or(0.0),
                "proto" => proto = Some(value.to_string()),
                "encoding" => encoding = Some(value.to_ascii_lowercase()),
                _ => {}
            }
        }
        match media.as_str() {
            "application/vnd.google.protobuf"
                if proto.as_deref() == Some("io.prometheus.client.MetricFamily")
                    && encoding.as_deref() == Some("delimited") =>
            {
                protobuf = protobuf.max(q);
            }
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    if protobuf > 0.0 && protobuf >= text {
        Format::Protobuf
    } else {
        Format::Text
    }
}

/// Routes a complete request head (up to and including the blank line).
pub(crate) fn route(head: &[u8]) -> Route {
    let Ok(head) = std::str::from_utf8(head) else {
        return Route::Refused(Status::BadRequest);
    };
    let request_line = head.split("\r\n").next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Refused(Status::BadRequest);
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Refused(Status::BadRequest);
    }
    // The query string, if any, does not matter.
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Route::Refused(Status::NotFound);
    }
    let format = head
        .split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("accept"))
        .map_or(Format::Text, |(_, value)| negotiate(value));
    match method {
        "GET" => Route::Metrics {
            head_only: false,
            format,
        },
        "HEAD" => Route::Metrics {
            head_only: true,
            format,
        },
        _ => Route::Refused(Status::MethodNotAllowed),
    }
}

/// A whole response with `Connection: close`.
pub(crate) fn response(
    status: Status,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.line(),
        body.len()
    );
    if status == Status::MethodNotAllowed {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    if status == Status::Busy {
        out.push_str(&format!("Retry-After: {RETRY_AFTER_S}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Binds the listening socket (before probes are attached, so a taken port fails fast).
pub(crate) async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/metrics` until the task is dropped. `metrics` renders the exposition in the
/// format asked now, or `None` once measuring has stopped (answered with 503).
pub(crate) async fn serve<F, Fut>(listener: TcpListener, metrics: F)
where
    F: Fn(Format) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Vec<u8>>> + Send + 'static,
{
    let metrics = Arc::new(metrics);
    let answering = Arc::new(tokio::sync::Semaphore::new(MAX_ANSWERING));
    // Oldest first. Waiting for a free slot instead would let a few idle clients keep
    // every scrape in the backlog until their deadlines.
    let mut open: VecDeque<AbortHandle> = VecDeque::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors and the like: let it pass rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        open.retain(|task| !task.is_finished());
        while open.len() >= MAX_CONNECTIONS {
            // Dropping its task closes its socket.
            if let Some(oldest) = open.pop_front() {
                oldest.abort();
            }
        }
        let metrics = metrics.clone();
        let answering = answering.clone();
        let task = tokio::spawn(async move {
            // A client that is too slow is cut off; nothing to report.
            let _ =
                tokio::time::timeout(CONNECTION_DEADLINE, answer(stream, &*metrics, &answering))
                    .await;
        });
        open.push_back(task.abort_handle());
    }
}

async fn answer<F, Fut>(
    mut stream: TcpStream,
    metrics: &F,
    answering: &tokio::sync::Semaphore,
) -> io::Result<()>
where
    F: Fn(Format) -> Fut,
    Fut: Future<Output = Option<Vec<u8>>>,
{
    let route = match tokio::time::timeout(HEAD_DEADLINE, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => route(&head),
        Ok(Ok(None)) => Route::Refused(Status::HeaderTooLarge),
        Ok(Err(e)) => return Err(e),
        Err(_) => Route::Refused(Status::RequestTimeout),
    };
    // Held until the answer is written.
    let slot = match route {
        Route::Metrics { .. } => Some(answering.try_acquire()),
        Route::Refused(_) => None,
    };
    let reply = match (route, &slot) {
        (Route::Metrics { head_only, .. }, Some(Err(_))) => response(
            Status::Busy,
            "text/plain; charset=utf-8",
            b"probetop is answering other scrapes: retry\n",
            head_only,
        ),
        (Route::Metrics { head_only, format }, _) => match metrics(format).await {
            Some(body) => {
                let content_type = match format {
                    Format::Text => CONTENT_TYPE,
                    Format::Protobuf => crate::present::export::promproto::CONTENT_TYPE,
                };
                response(Status::Ok, content_type, &body, head_only)
            }
            None => response(
                Status::Unavailable,
                "text/plain; charset=utf-8",
                b"probetop has stopped measuring\n",
                head_only,
            ),
        },
        (Route::Refused(status), _) => response(
            status,
            "text/plain; charset=utf-8",
            format!("{}\n", status.line()).as_bytes(),
            false,
        ),
    };
    stream.write_all(&reply).await?;
    stream.shutdown().await
}

/// Reads up to the blank line that ends a request head; `None` if it is too long.
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    loop {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buffer[..read]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end + 4);
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the server has closed `stream` (EOF or reset), without waiting.
    fn closed_by_server(stream: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        match stream.try_read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
        }
    }

    /// Issue 18 item 14: clients that send half a request and wait must not keep a scrape
    /// waiting for their deadlines; the oldest gives way to a new connection.
    #[tokio::test]
    async fn idle_half_sent_requests_do_not_block_a_scrape() {
        let listener = bind("127.0.0.1:0".parse().expect("address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(serve(listener, |_| async { Some(b"m_total 1\n".to_vec()) }));
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS * 2 {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream.write_all(b"GET /metr").await.expect("send");
            idle.push(stream);
        }
        let mut scrape = TcpStream::connect(addr).await.expect("connect");
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .expect("send");
        let mut reply = String::new();
        scrape.read_to_string(&mut reply).await.expect("reply");
        assert!(reply.ends_with("\r\n\r\nm_total 1\n"), "{reply}");
        // Answered at once, not after the idle ones ran out their time: the newest of
        // them are still open (before the fix the scrape waited until all were cut).
        let open = idle.iter().filter(|s| !closed_by_server(s)).count();
        assert!(
            open >= MAX_CONNECTIONS - 1,
            "only {open} idle connections still open"
        );
        server.abort();
    }

    /// A client that trickles its request head a byte at a time is cut off by the head
    /// deadline, not kept while it keeps sending.
    #[tokio::test]
    async fn trickled_heads_are_cut_off() {
        let listener = bind("127.0.0.1:0".parse().expect("address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(serve(listener, |_| async { Some(Vec::new()) }));
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .expect("send");
        let mut reply = Vec::new();
        // Far more bytes than the deadline lets through at this pace.
        let mut buffer = [0u8; 256];
        for _ in 0..600 {
            match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await {
                Ok(Ok(0) | Err(_)) => break,
                Ok(Ok(read)) => reply.extend_from_slice(&buffer[..read]),
                Err(_) => {
                    if stream.write_all(b"X").await.is_err() {
                        break;
                    }
                }
            }
        }
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 408 Request Timeout"), "{reply}");
        server.abort();
    }

    #[test]
    fn routes() {
        let get =
            |target: &str| route(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(
            get("/metrics"),
            Route::Metrics {
                head_only: false,
                format: Format::Text
            }
        );
        assert_eq!(
            get("/metrics?x=1"),
            Route::Metrics {
                head_only: false,
                format: Format::Text
            }
        );
        assert_eq!(get("/"), Route::Refused(Status::NotFound));
        assert_eq!(get("/metricsx"), Route::Refused(Status::NotFound));
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.0\r\n\r\n"),
            Route::Metrics {
                head_only: true,
                format: Format::Text
            }
        );
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::Refused(Status::MethodNotAllowed)
        );
        assert_eq!(
            route(b"GET /metrics\r\n\r\n"),
            Route::Refused(Status::BadRequest)
        );
        assert_eq!(
            route(b"\xff\xfe\r\n\r\n"),
            Route::Refused(Status::BadRequest)
        );
    }

    #[test]
    fn accept_picks_the_exposition() {
        // What Prometheus sends with native histograms on, and without.
        let prometheus_native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(prometheus_native), Format::Protobuf);
        assert_eq!(
            negotiate(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            ),
            Format::Text
        );
        assert_eq!(negotiate("*/*"), Format::Text);
        // Another protobuf message or the text encoding of it is not ours.
        assert_eq!(
            negotiate("application/vnd.google.protobuf;proto=other.Message;encoding=delimited"),
            Format::Text
        );
        assert_eq!(
            negotiate(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"
            ),
            Format::Text
        );
        // Preferred below text, or refused: text.
        assert_eq!(
            negotiate(
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; q=0.2, text/plain;q=0.9"
            ),
            Format::Text
        );
        assert_eq!(
            negotiate(
                "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0"
            ),
            Format::Text
        );
        let head =
            format!("GET /metrics HTTP/1.1\r\nHost: x\r\nACCEPT: {prometheus_native}\r\n\r\n");
        assert_eq!(
            route(head.as_bytes()),
            Route::Metrics {
                head_only: false,
                format: Format::Protobuf
            }
        );
    }

    #[test]
    fn responses_carry_their_length() {
        let text =
            String::from_utf8(response(Status::Ok, CONTENT_TYPE, b"abc\n", false)).expect("ascii");
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Length: 4\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nabc\n"), "{text}");
        let head = response(Status::Ok, CONTENT_TYPE, b"abc\n", true);
        assert!(
            String::from_utf8(head)
                .expect("ascii")
                .ends_with("\r\n\r\n")
        );
        let refused =
            String::from_utf8(response(Status::MethodNotAllowed, "text/plain", b"", false))
                .expect("ascii");
        assert!(refused.contains("Allow: GET, HEAD\r\n"), "{refused}");
    }

    #[tokio::test]
    async fn serves_over_loopback() {
        let listener = bind("127.0.0.1:0".parse().expect("address"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(serve(listener, |_| async { Some(b"m_total 1\n".to_vec()) }));
        let fetch = |request: &'static str| async move {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream.write_all(request.as_bytes()).await.expect("send");
            let mut reply = String::new();
            stream.read_to_string(&mut reply).await.expect("reply");
            reply
        };
        let ok = fetch("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.contains(CONTENT_TYPE), "{ok}");
        assert!(ok.ends_with("\r\n\r\nm_total 1\n"), "{ok}");
        let missing = fetch("GET /other HTTP/1.1\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404 Not Found"), "{missing}");
        server.abort();
    }
}
