//! Debug files fetched by build id from debuginfod servers, as elfutils does: the
//! servers `DEBUGINFOD_URLS` names (space-separated), each asked `URL/buildid/HEX/debuginfo`
//! in turn, the file kept under `$XDG_CACHE_HOME/probetop/debuginfod/HEX/debuginfo`.
//!
//! Asked only for an object with no `.symtab` and no local debug file, while specs are
//! resolved: before anything attaches, or on the blocking threads that resolve again
//! during a run, never on the TUI's loop. Each build id is asked at most once a run.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use super::debuginfo::{MAX_DEBUG_FILE_BYTES, read_capped};
use crate::sys::say;

/// Longest wait for a server to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a whole download may take, unless `DEBUGINFOD_MAXTIME` says otherwise.
const TOTAL_TIMEOUT: Duration = Duration::from_secs(90);
/// Largest debug file taken, unless `DEBUGINFOD_MAXSIZE` says less: real ones are
/// tens to hundreds of MiB; the whole file is held in memory while its symbols are read.
const MAX_BYTES: u64 = 1 << 30;
/// A fetch slower than this gets a line saying what is being waited for.
const SLOW: Duration = Duration::from_secs(1);

/// The servers to ask, where their files are kept, and what this run already asked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Debuginfod {
    /// Base URLs, without a trailing `/`; empty: debuginfod is off.
    urls: Vec<String>,
    /// `--offline`: no server is asked whatever `DEBUGINFOD_URLS` says.
    offline: bool,
    cache: PathBuf,
    limits: Limits,
    /// Build ids (hex) asked this run, and what came of it: the clones a run's resolvers
    /// hold share it, so a file no server has is asked for once, not on every look.
    asked: Arc<Mutex<HashMap<String, Option<PathBuf>>>>,
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    connect: Duration,
    total: Duration,
    max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect: CONNECT_TIMEOUT,
            total: TOTAL_TIMEOUT,
            max_bytes: MAX_BYTES,
        }
    }
}

/// Why one server did not give the file.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("HTTP {0}")]
    Status(u16),
    #[error("{0}")]
    Timeout(String),
    /// What the request met, as [`crate::sys::http::describe`] says it.
    #[error("{0}")]
    Http(String),
    /// No request could be made (https without a root to check it against).
    #[error("{0}")]
    Setup(String),
    #[error("larger than {0} bytes (DEBUGINFOD_MAXSIZE)")]
    TooLarge(u64),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a debug file for this build id")]
    Mismatch,
}

impl Debuginfod {
    /// As `DEBUGINFOD_URLS` (and elfutils' `DEBUGINFOD_MAXSIZE` bytes, `DEBUGINFOD_MAXTIME`
    /// seconds) say, unless `offline`.
    pub(crate) fn from_env(offline: bool) -> Self {
        let var = |name: &str| std::env::var(name).ok();
        let mut limits = Limits::default();
        if let Some(size) = var("DEBUGINFOD_MAXSIZE").and_then(|v| v.trim().parse::<u64>().ok())
            && size > 0
        {
            limits.max_bytes = size.min(MAX_DEBUG_FILE_BYTES);
        }
        if let Some(secs) = var("DEBUGINFOD_MAXTIME").and_then(|v| v.trim().parse::<u64>().ok())
            && secs > 0
        {
            limits.total = Duration::from_secs(secs);
        }
        Self {
            urls: parse_urls(&var("DEBUGINFOD_URLS").unwrap_or_default()),
            offline,
            cache: cache_dir().unwrap_or_default(),
            limits,
            asked: Arc::default(),
        }
    }

    /// Whether a server may be asked.
    fn on(&self) -> bool {
        !self.offline && !self.urls.is_empty() && !self.cache.as_os_str().is_empty()
    }

    /// Why no server was asked, or which were (for `probetop list` on a stripped object).
    pub(crate) fn said(&self) -> String {
        if self.offline {
            "no debuginfod server asked (--offline)".to_string()
        } else if self.urls.is_empty() {
            "no debuginfod server asked (DEBUGINFOD_URLS is empty)".to_string()
        } else {
            format!("none on debuginfod {}", self.urls.join(" "))
        }
    }

    /// The debug file of the object `object` whose build id is `build_id`, from the cache
    /// or the first server that has it, as `accept` reads it (`None`: not its debug
    /// file). Says what was fetched, and once why nothing was.
    pub(crate) fn find<T>(
        &self,
        build_id: &[u8],
        object: &Path,
        accept: impl Fn(&[u8]) -> Option<T>,
    ) -> Option<(PathBuf, T)> {
        if !self.on() || build_id.len() < 2 {
            return None;
        }
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        let before = asked.get(&hex).cloned();
        if before == Some(None) {
            return None;
        }
        let object_shown = object.display();
        let dir = self.cache.join(&hex);
        let path = dir.join("debuginfo");
        if let Ok(data) = read_capped(&path, self.limits.max_bytes) {
            if let Some(found) = accept(&data) {
                if before.is_none() {
                    say(&format!(
                        "probetop: symbols of {object_shown} from the debuginfod cache: {}",
                        path.display()
                    ));
                    asked.insert(hex, Some(path.clone()));
                }
                return Some((path, found));
            }
            // Not the file it should be (cut short, or another's): fetched again.
            let _ = std::fs::remove_file(&path);
        }
        let started = Instant::now();
        let mut failures = Vec::new();
        for url in &self.urls {
            let from = format!("{url}/buildid/{hex}/debuginfo");
            let data = match self.fetch_slowly_said(&from, &object_shown.to_string()) {
                Ok(data) => data,
                Err(e) => {
                    failures.push(format!("{url}: {e}"));
                    continue;
                }
            };
            let Some(found) = accept(&data) else {
                failures.push(format!("{url}: {}", FetchError::Mismatch));
                continue;
            };
            let kept = match store(&dir, &path, &data) {
                Ok(()) => path.display().to_string(),
                Err(e) => format!("not cached ({}: {e})", path.display()),
            };
            say(&format!(
                "probetop: symbols of {object_shown} from debuginfod {url} ({} KiB in {:.1} s): {kept}",
                data.len().div_ceil(1024),
                started.elapsed().as_secs_f64()
            ));
            asked.insert(hex, Some(path.clone()));
            return Some((path, found));
        }
        say(&format!(
            "probetop: no debug file for {object_shown} (build id {hex}) from debuginfod: {}; going on with what it has",
            failures.join("; ")
        ));
        asked.insert(hex, None);
        None
    }

    /// [`fetch`] on a thread of its own, saying what is awaited once it takes longer than
    /// [`SLOW`].
    fn fetch_slowly_said(&self, from: &str, object: &str) -> Result<Vec<u8>, FetchError> {
        let (tx, rx) = mpsc::channel();
        let limits = self.limits;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = tx.send(fetch(from, limits));
            });
            match rx.recv_timeout(SLOW) {
                Ok(result) => result,
                Err(_) => {
                    say(&format!(
                        "probetop: fetching the debug file of {object} from {from} (at most {} s)...",
                        limits.total.as_secs()
                    ));
                    rx.recv()
                        .unwrap_or_else(|_| Err(FetchError::Io(std::io::Error::other("lost"))))
                }
            }
        })
    }
}

/// One GET of `url`, its body capped at `limits.max_bytes`.
fn fetch(url: &str, limits: Limits) -> Result<Vec<u8>, FetchError> {
    let agent = crate::sys::http::agent(
        url,
        crate::sys::http::Timeouts {
            connect: Some(limits.connect),
            total: limits.total,
        },
    )
    .map_err(FetchError::Setup)?;
    let timed_out = |e: ureq::Error| match e {
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => {
            FetchError::Timeout(format!(
                "no connection within {} s",
                limits.connect.as_secs()
            ))
        }
        ureq::Error::Timeout(_) => FetchError::Timeout(format!(
            "not whole within {} s (DEBUGINFOD_MAXTIME)",
            limits.total.as_secs()
        )),
        e => FetchError::Http(crate::sys::http::describe(&e)),
    };
    let response = agent.get(url).call().map_err(timed_out)?;
    let status = response.status().as_u16();
    if status != 200 {
        return Err(FetchError::Status(status));
    }
    let body = response.into_body();
    if body.content_length().is_some_and(|n| n > limits.max_bytes) {
        return Err(FetchError::TooLarge(limits.max_bytes));
    }
    let mut data = Vec::new();
    body.into_reader()
        .take(limits.max_bytes.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| match e.downcast::<ureq::Error>() {
            Ok(e) => timed_out(e),
            Err(e) => FetchError::Io(e),
        })?;
    if data.len() as u64 > limits.max_bytes {
        return Err(FetchError::TooLarge(limits.max_bytes));
    }
    Ok(data)
}

/// Writes `data` to `path` whole or not at all: a temporary file in the same directory,
/// renamed over it, so a reader (another probetop) never sees half a file.
fn store(dir: &Path, path: &Path, data: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(".debuginfo.{}.tmp", std::process::id()));
    let written = std::fs::File::create(&temp).and_then(|mut file| {
        file.write_all(data)?;
        file.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&temp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// The servers of a `DEBUGINFOD_URLS` value: separated by spaces, each without its
/// trailing `/`.
fn parse_urls(value: &str) -> Vec<String> {
    value
        .split_whitespace()
        .map(|url| url.trim_end_matches('/').to_string())
        .filter(|url| !url.is_empty())
        .collect()
}

/// `$XDG_CACHE_HOME/probetop/debuginfod`, or under `$HOME/.cache`.
fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("probetop").join("debuginfod"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead as _, BufReader};
    use std::net::TcpListener;

    #[test]
    fn urls_are_split_on_spaces_without_trailing_slashes() {
        assert_eq!(
            parse_urls(" https://a.example/ \thttp://127.0.0.1:8002//\n"),
            ["https://a.example", "http://127.0.0.1:8002"]
        );
        assert!(parse_urls("  ").is_empty());
    }

    /// A one-connection server on loopback answering `response` to the first request,
    /// and the path it was asked for.
    fn serve_once(response: Vec<u8>) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream);
            let mut request = String::new();
            reader.read_line(&mut request).expect("request line");
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = reader.get_mut().write_all(&response);
            request
        });
        (url, server)
    }

    fn client(cache: &Path, urls: Vec<String>, max_bytes: u64) -> Debuginfod {
        Debuginfod {
            urls,
            offline: false,
            cache: cache.to_path_buf(),
            limits: Limits {
                max_bytes,
                ..Limits::default()
            },
            asked: Arc::default(),
        }
    }

    fn temp_cache(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("probetop-debuginfod-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_served_file_is_fetched_by_build_id_and_cached_whole() {
        let cache = temp_cache("served");
        let body = b"debug file bytes";
        let mut response =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        response.extend_from_slice(body);
        let (url, server) = serve_once(response);
        let d = client(&cache, vec![url], 1 << 20);
        let (path, data) = d
            .find(&[0xab, 0xcd, 0x01], Path::new("/bin/x"), |d| {
                Some(d.to_vec())
            })
            .expect("fetched");
        assert_eq!(data, body);
        assert_eq!(path, cache.join("abcd01/debuginfo"));
        assert_eq!(std::fs::read(&path).expect("cached"), body);
        let request = server.join().expect("server");
        assert!(
            request.starts_with("GET /buildid/abcd01/debuginfo HTTP/1.1"),
            "{request}"
        );
        // From the cache now: no server is listening any more.
        let again = client(&cache, vec!["http://127.0.0.1:1".into()], 1 << 20);
        assert!(
            again
                .find(&[0xab, 0xcd, 0x01], Path::new("/bin/x"), |d| Some(d.len()))
                .is_some()
        );
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn a_missing_oversized_or_refused_file_is_none_and_not_cached() {
        let cache = temp_cache("refused");
        let (url, server) =
            serve_once(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec());
        let d = client(&cache, vec![url], 1 << 20);
        assert!(
            d.find(&[1, 2], Path::new("/bin/x"), |d| Some(d.len()))
                .is_none()
        );
        // Asked once a run: the second look asks no server (none is listening).
        assert!(
            d.find(&[1, 2], Path::new("/bin/x"), |d| Some(d.len()))
                .is_none()
        );
        drop(server.join());
        let (url, server) =
            serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789".to_vec());
        let d = client(&cache, vec![url], 10);
        assert!(matches!(
            fetch(&format!("{}/x", d.urls[0]), d.limits),
            Err(FetchError::TooLarge(10))
        ));
        drop(server.join());
        // Nothing listens on port 1; a file the caller does not accept is not kept.
        let (url, server) = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec());
        let d = client(&cache, vec!["http://127.0.0.1:1".into(), url], 1 << 20);
        assert!(
            d.find(&[3, 4], Path::new("/bin/x"), |_| None::<()>)
                .is_none()
        );
        drop(server.join());
        assert!(!cache.join("0304").exists());
        // Off: never asks.
        let off = Debuginfod {
            offline: true,
            ..client(&cache, vec!["http://127.0.0.1:1".into()], 1 << 20)
        };
        assert!(!off.on());
        assert!(off.said().contains("--offline"));
        let _ = std::fs::remove_dir_all(&cache);
    }
}
