//! Debug files from a debuginfod server: elfutils' own `debuginfod` (Debian's package,
//! `cargo xtask setup`) on loopback serves a fixture's debug file, split off and its copy
//! stripped; `probetop list` and a run attaching by name find the functions through it.
//! Over https, a python3 file server with a certificate of the test's own CA serves the
//! same file by build id (elfutils' server speaks plain http). `--all` names another
//! tool's probe on a stripped object through debuginfod too (host.rs).

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common::{
    HttpsFiles, Running, TestCa, fixture, output_ok, probetop, read_export, server_dir, started,
    stop_with_test, turn, wait_until_answering,
};

/// Calls the fixture makes while probed.
const CALLS: &str = "20000";

/// `debuginfod -F` serving the files under a directory, on a free loopback port.
pub(crate) struct Server {
    child: Child,
    pub url: String,
    /// What it should serve, and its log.
    build_id: String,
    log: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of `GET path` on `127.0.0.1:port`, if it answered.
fn status_of(port: u16, path: &str) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()
}

/// The build id of `path`, as readelf prints it.
fn build_id(path: &Path) -> String {
    let out = output_ok(Command::new("readelf").arg("-n").arg(path), "readelf -n");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("the fixture has a build id")
}

/// A stripped copy of the workload fixture at `stripped`, its debug file (split off the
/// fixture) at `debug`; their build id.
pub(crate) fn stripped_copy(stripped: &Path, debug: &Path) -> String {
    output_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(fixture("c/workload"))
            .arg(debug),
        "objcopy --only-keep-debug",
    );
    output_ok(
        Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(stripped)
            .arg(fixture("c/workload")),
        "strip",
    );
    let id = build_id(stripped);
    assert_eq!(build_id(debug), id, "the debug file keeps the build id");
    id
}

/// Starts debuginfod on the files in `serve`, returned once it serves `build_id`'s
/// debug file (its first scan is done).
pub(crate) fn serve(dir: &Path, serve: &Path, build_id: String) -> Server {
    // A port free now; debuginfod failing to bind it shows in its log below.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let log = dir.join("debuginfod.log");
    let out = std::fs::File::create(&log).expect("log");
    let err = out.try_clone().expect("log");
    let mut cmd = Command::new("debuginfod");
    cmd.args([
        "-p",
        &port.to_string(),
        "-c",
        "1",
        "-t",
        "0",
        "-g",
        "0",
        "-d",
    ])
    .arg(dir.join("db.sqlite"))
    .arg("-F")
    .arg(serve)
    .stdin(Stdio::null())
    .stdout(out)
    .stderr(err);
    stop_with_test(&mut cmd, libc::SIGTERM);
    let child = cmd
        .spawn()
        .expect("start debuginfod (apt-get install debuginfod: cargo xtask setup)");
    let mut server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
        build_id,
        log,
    };
    wait_until_answering(
        &mut server,
        "debuginfod",
        |s| &mut s.child,
        |s| {
            let port = s.url.rsplit(':').next().and_then(|p| p.parse().ok());
            port.and_then(|p| status_of(p, &format!("/buildid/{}/debuginfo", s.build_id)))
                == Some(200)
        },
        |s| std::fs::read_to_string(&s.log).unwrap_or_default(),
    );
    server
}

/// probetop asking `server` (unless given `--offline`), with the cache under `cache`.
pub(crate) fn asking(server: &Server, cache: &Path) -> Command {
    asking_url(&server.url, cache)
}

/// probetop asking the debuginfod server at `url`, with the cache under `cache`.
fn asking_url(url: &str, cache: &Path) -> Command {
    let mut cmd = probetop();
    // A proxy the machine sets is not for loopback; the roots are the host's.
    cmd.env("DEBUGINFOD_URLS", url)
        .env("XDG_CACHE_HOME", cache)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    cmd
}

/// A stripped copy of the workload fixture whose debug file only a debuginfod server
/// has: `list` names its functions through it, and says so (text and JSON), and a run
/// attaching `uprobe:work_unit` by name counts every call; with `--offline` the names
/// are missing, as they are without the server.
#[test]
#[ignore = "needs root, the fixtures and debuginfod (cargo xtask setup)"]
fn a_stripped_binary_is_named_through_debuginfod() {
    let _turn = turn(module_path!());
    let dir = server_dir("debuginfod");
    let served = dir.join("served");
    std::fs::create_dir_all(&served).expect("served dir");
    let stripped = dir.join("workload-stripped");
    let debug = served.join("workload.debug");
    let id = stripped_copy(&stripped, &debug);
    let server = serve(&dir, &served, id.clone());

    // Offline: the functions are not named; the note says no server was asked.
    let offline = output_ok(
        asking(&server, &dir.join("cache-offline"))
            .args(["list", "--offline"])
            .arg(&stripped)
            .arg("work_unit"),
        "probetop list --offline",
    );
    let text = String::from_utf8_lossy(&offline.stdout);
    for needle in [
        "stripped: no symbol table (.symtab) and no debug file",
        "no debuginfod server asked (--offline)",
        "0 points: stripped",
    ] {
        assert!(text.contains(needle), "{needle:?} missing: {text}");
    }
    assert!(!dir.join("cache-offline").exists(), "offline wrote a cache");

    // Through the server: named, and the file said; cached whole under the build id.
    let cache = dir.join("cache-list");
    let listed = output_ok(
        asking(&server, &cache)
            .args(["list", "--json"])
            .arg(&stripped)
            .arg("work_*"),
        "probetop list --json",
    );
    let listing: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    let cached = cache.join(format!("probetop/debuginfod/{id}/debuginfo"));
    assert_eq!(
        listing["objects"][0]["symbols"]["kind"], "debuginfod",
        "{listing}"
    );
    assert_eq!(
        listing["objects"][0]["symbols"]["path"],
        cached.to_str().expect("utf-8 path"),
        "{listing}"
    );
    assert_eq!(names(&listing), ["work_unit"], "{listing}");
    assert_eq!(
        std::fs::read(&cached).expect("cached"),
        std::fs::read(&debug).expect("served file"),
    );
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(
        said.contains(&format!("from debuginfod {}", server.url)),
        "{said}"
    );
    // Again, from the cache: the text names the file.
    let again = output_ok(
        asking(&server, &cache)
            .arg("list")
            .arg(&stripped)
            .arg("work_unit"),
        "probetop list",
    );
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.contains(&format!("(symbols: debuginfod, {}", cached.display())),
        "{text}"
    );
    assert!(text.contains("work_unit"), "{text}");

    // A run attaching by name, with an empty cache: every call counted.
    let mut target = started(&stripped, &["--calls", CALLS, "--wait-signal"]);
    let json = dir.join("run.json");
    let mut run = asking(&server, &dir.join("cache-run"));
    run.args(["--pid", &target.pid().to_string(), "--no-tui", "-e"])
        .arg("uprobe:work_unit")
        .arg("--export")
        .arg(&json);
    let mut run = Running::spawn(run);
    let fetched = run.err().wait_for("symbols of");
    assert!(
        fetched.contains(&format!("from debuginfod {}", server.url))
            && fetched.contains(&format!("/cache-run/probetop/debuginfod/{id}/debuginfo")),
        "{fetched}"
    );
    run.err().wait_for("attached");
    target.signal(libc::SIGUSR1);
    assert!(target.wait().success());
    let status = run.wait();
    assert!(status.success(), "probetop: {:?}", run.err().rest());
    let report = read_export(&json);
    let probe = crate::common::probe(&report, "work_unit");
    assert_eq!(
        probe["hits"],
        CALLS.parse::<u64>().expect("calls"),
        "{report}"
    );

    // The same run offline: the name is not found, and why.
    let target = started(&stripped, &["--wait-signal"]);
    let refused = asking(&server, &dir.join("cache-run-offline"))
        .args([
            "--offline",
            "--pid",
            &target.pid().to_string(),
            "--no-tui",
            "-e",
        ])
        .arg("uprobe:work_unit")
        .output()
        .expect("probetop");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("\"work_unit\" not found") && said.contains("stripped"),
        "{said}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The names of `list --json`'s points.
fn names(listing: &serde_json::Value) -> Vec<&str> {
    listing["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect()
}

/// A debuginfod server over https, with a certificate of a CA made for the test: trusted
/// through `SSL_CERT_FILE`, `list` names the stripped copy's functions through it and
/// caches the file; untrusted (the host's roots only), the certificate is refused in one
/// line saying what to do, nothing is named and nothing cached.
#[test]
#[ignore = "needs the fixtures, openssl and python3"]
fn a_stripped_binary_is_named_through_an_https_server() {
    let _turn = turn(module_path!());
    let dir = server_dir("debuginfod-https");
    let stripped = dir.join("workload-stripped");
    let debug = dir.join("workload.debug");
    let id = stripped_copy(&stripped, &debug);
    // The debuginfod layout: GET /buildid/HEX/debuginfo.
    let files = dir.join("files");
    let served = files.join(format!("buildid/{id}/debuginfo"));
    std::fs::create_dir_all(served.parent().expect("a parent")).expect("served dir");
    std::fs::copy(&debug, &served).expect("copy the debug file");
    let ca = TestCa::new(&dir.join("tls"));
    let server = HttpsFiles::serve(&files, &ca, &dir.join("https.log"));

    // Not trusted: one line says why and what to do; the object stays unnamed.
    let untrusted = dir.join("cache-untrusted");
    let refused = output_ok(
        asking_url(&server.url, &untrusted)
            .args(["list", "--json"])
            .arg(&stripped)
            .arg("work_*"),
        "probetop list (untrusted)",
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    let lines: Vec<&str> = said.lines().filter(|l| l.contains(&server.url)).collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(
        lines[0].contains("TLS: the server's certificate is signed by no CA this host trusts")
            && lines[0].contains("SSL_CERT_FILE"),
        "{said}"
    );
    let listing: serde_json::Value = serde_json::from_slice(&refused.stdout).expect("JSON");
    assert!(names(&listing).is_empty(), "{listing}");
    assert!(!untrusted.join(format!("probetop/debuginfod/{id}")).exists());

    // Trusted through SSL_CERT_FILE: named, the file said and cached whole.
    let cache = dir.join("cache");
    let listed = output_ok(
        asking_url(&server.url, &cache)
            .env("SSL_CERT_FILE", &ca.ca)
            .args(["list", "--json"])
            .arg(&stripped)
            .arg("work_*"),
        "probetop list (trusted)",
    );
    let listing: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(names(&listing), ["work_unit"], "{listing}");
    assert_eq!(
        listing["objects"][0]["symbols"]["kind"], "debuginfod",
        "{listing}"
    );
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(
        said.contains(&format!("from debuginfod {}", server.url)),
        "{said}"
    );
    assert_eq!(
        std::fs::read(cache.join(format!("probetop/debuginfod/{id}/debuginfo"))).expect("cached"),
        std::fs::read(&debug).expect("served file"),
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
