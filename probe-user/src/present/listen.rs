//! Fleet mode: `--listen ADDR:PORT` serves the live measurements in the Prometheus text
//! format at `GET /metrics`, so a fleet's Prometheus can scrape every host.
//!
//! A minimal HTTP/1.1 server: one request per connection (`Connection: close`), a
//! bounded request head, a deadline per connection, and a bound on connections served
//! at once, so a slow or hostile client cannot hold probetop's memory or tasks.

use std::{future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};

/// The exposition format's content type (text format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Longest request head read; Prometheus sends a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;
/// A connection is closed after this long, answered or not.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16;

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    HeaderTooLarge,
    Unavailable,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Self::Ok => "200 OK",
            Self::BadRequest => "400 Bad Request",
            Self::NotFound => "404 Not Found",
            Self::MethodNotAllowed => "405 Method Not Allowed",
            Self::HeaderTooLarge => "431 Request Header Fields Too Large",
            Self::Unavailable => "503 Service Unavailable",
        }
    }
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// GET /metrics (or HEAD: `head_only`).
    Metrics {
        head_only: bool,
    },
    Refused(Status),
}

/// Routes a complete request head (up to and including the blank line).
pub fn route(head: &[u8]) -> Route {
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
    match method {
        "GET" => Route::Metrics { head_only: false },
        "HEAD" => Route::Metrics { head_only: true },
        _ => Route::Refused(Status::MethodNotAllowed),
    }
}

/// A whole response with `Connection: close`.
pub fn response(status: Status, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.line(),
        body.len()
    );
    if status == Status::MethodNotAllowed {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Binds the listening socket (before probes are attached, so a taken port fails fast).
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/metrics` until the task is dropped. `metrics` renders the exposition text
/// now, or `None` once measuring has stopped (answered with 503).
pub async fn serve<F, Fut>(listener: TcpListener, metrics: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    let metrics = Arc::new(metrics);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // Only fails if the semaphore is closed, which nothing does.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors and the like: let it pass rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // A client that is too slow is cut off; nothing to report.
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, answer(stream, &*metrics)).await;
            drop(slot);
        });
    }
}

async fn answer<F, Fut>(mut stream: TcpStream, metrics: &F) -> io::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let route = match read_head(&mut stream).await? {
        Some(head) => route(&head),
        None => Route::Refused(Status::HeaderTooLarge),
    };
    let reply = match route {
        Route::Metrics { head_only } => match metrics().await {
            Some(text) => response(Status::Ok, CONTENT_TYPE, text.as_bytes(), head_only),
            None => response(
                Status::Unavailable,
                "text/plain; charset=utf-8",
                b"probetop has stopped measuring\n",
                head_only,
            ),
        },
        Route::Refused(status) => response(
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

    #[test]
    fn routes() {
        let get =
            |target: &str| route(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(get("/metrics"), Route::Metrics { head_only: false });
        assert_eq!(get("/metrics?x=1"), Route::Metrics { head_only: false });
        assert_eq!(get("/"), Route::Refused(Status::NotFound));
        assert_eq!(get("/metricsx"), Route::Refused(Status::NotFound));
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.0\r\n\r\n"),
            Route::Metrics { head_only: true }
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
        let server = tokio::spawn(serve(listener, || async {
            Some("m_total 1\n".to_string())
        }));
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
