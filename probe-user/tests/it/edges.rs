//! The edges a second hostile round found (issue 30): files probetop reads that are not
//! what they should be, names and numbers from outside, a target gone while probetop
//! starts, and signals, keys and scrapes at the wrong moment.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use crate::common::*;

/// A directory of this test's own, emptied.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probetop-edges-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Caps a child's address space: a probetop that reads without bound then fails at
/// once rather than take the machine's memory.
fn cap_memory(cmd: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits for `running` at most `limit`; kills it and fails past that.
fn wait_within(running: &mut Running, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = running.child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = running.child.kill();
            let _ = running.child.wait();
            panic!("{what}: probetop still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The calibration cache made a FIFO (no writer: an open that blocks forever), a link to
/// /dev/zero (endless bytes) and a sparse file of 4 GiB: each is one line of warning and
/// a run that measures without calibration.
#[test]
#[ignore = "needs root and the fixtures"]
fn a_calibration_cache_that_is_not_a_file_is_one_line_and_the_run_goes_on() {
    let _turn = turn(module_path!());
    let name = probe_user::cost::calibration::Machine::current().cache_file_name();
    type Make = fn(&Path);
    let cases: [(&str, &str, Make); 3] = [
        ("fifo", "a FIFO, not a regular file", |path| {
            probe_user::sys::files::mkfifo(path, 0o600).expect("mkfifo");
        }),
        ("zero", "a symbolic link, not a regular file", |path| {
            std::os::unix::fs::symlink("/dev/zero", path).expect("symlink");
        }),
        ("sparse", "more than", |path| {
            std::fs::File::create(path)
                .and_then(|f| f.set_len(4 << 30))
                .expect("sparse file");
        }),
    ];
    for (case, needle, make) in cases {
        let cache = scratch(&format!("cache-{case}"));
        std::fs::create_dir_all(cache.join("probetop")).expect("cache dir");
        make(&cache.join("probetop").join(&name));
        let target = workload(&["--calls", "1", "--wait-signal"]);
        let mut cmd = probetop();
        cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
            .args(["-e", "uprobe:work_unit", "--duration", "0.5"])
            .env("XDG_CACHE_HOME", &cache);
        cap_memory(&mut cmd, 4 << 30);
        let mut probetop = Running::spawn(cmd);
        let status = wait_within(&mut probetop, Duration::from_secs(30), case);
        let stderr = probetop.err().rest();
        assert!(status.success(), "{case}: {status}: {stderr:#?}");
        let warnings: Vec<&String> = stderr
            .iter()
            .filter(|l| l.contains("calibration cache"))
            .collect();
        assert_eq!(warnings.len(), 1, "{case}: {stderr:#?}");
        assert!(warnings[0].contains(needle), "{case}: {stderr:#?}");
        assert!(
            stderr.iter().any(|l| l.starts_with("probetop: attached")),
            "{case}: {stderr:#?}"
        );
        let _ = std::fs::remove_dir_all(&cache);
    }
}
