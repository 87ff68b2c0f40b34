//! The database servers the tests start privately (postgres.rs, mysql.rs): the same
//! tie to the test thread, wait for the first answer and shutdown for each.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::PATIENCE;

/// Makes the kernel send `signal` to the command's process when the test thread that
/// started it ends, so the server stops even if the test dies without its guard.
pub(crate) fn stop_with_test(cmd: &mut Command, signal: libc::c_int) {
    // SAFETY: runs in the forked child before exec, after any uid change (which would
    // clear the setting), and only calls prctl, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Polls `answers` every 100 ms until the server `name` just started answers; panics
/// with its `log` if it exits first or does not answer within `PATIENCE`. `child` is
/// the server's process within `server`.
pub(crate) fn wait_until_answering<S>(
    server: &mut S,
    name: &str,
    child: fn(&mut S) -> &mut Child,
    answers: fn(&S) -> bool,
    log: fn(&S) -> String,
) {
    let deadline = Instant::now() + PATIENCE;
    while !answers(server) {
        if let Ok(Some(status)) = child(server).try_wait() {
            panic!("{name} exited ({status}): {}", log(server));
        }
        assert!(
            Instant::now() < deadline,
            "{name} does not answer: {}",
            log(server)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fresh directory for one server under the temporary directory: `probetop-test-NAME-`
/// with the test process's pid and a count, so two servers one test binary starts in
/// turn never share a data directory (the second's install met the first's files).
pub(crate) fn server_dir(name: &str) -> std::path::PathBuf {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("probetop-test-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Stops a server the test started with `signal` (its clean shutdown), SIGKILL if it
/// lingers past `PATIENCE`, and removes its directory `dir`.
pub(crate) fn stop_server(child: &mut Child, signal: libc::c_int, dir: &Path) {
    // SAFETY: kill(2) on our own unreaped child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let deadline = Instant::now() + PATIENCE;
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}
