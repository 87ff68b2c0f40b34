//! The TUI's terminal goes away (an ssh connection drops, a terminal window is killed)
//! while probes are attached: probetop must stop as on SIGHUP, write its exports and
//! detach, never die of a panic on a write to the dead terminal. The terminal is a real
//! pseudo-terminal of the test's own, whose master side the test closes.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    os::unix::process::CommandExt as _,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::Duration,
};

use crate::common::*;

/// A pseudo-terminal pair, 120x40.
fn open_pty() -> (OwnedFd, OwnedFd) {
    let mut master = -1;
    let mut slave = -1;
    let size = libc::winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two new descriptors into the two ints; the name and
    // termios pointers may be null, the winsize pointer is valid for the call.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // Not inherited by other children (probetop's own, or another test's): a master
    // held open anywhere else would keep the terminal alive.
    for fd in [master, slave] {
        // SAFETY: fcntl on a descriptor this function just received.
        let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        assert_eq!(rc, 0, "fcntl: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors that nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Reads the master side (so probetop's writes never block on a full terminal) until
/// told to stop, then closes it: the terminal is gone. Sends `()` once the TUI has
/// drawn `needle`.
fn drain(master: OwnedFd, needle: &'static str, stop: Arc<AtomicBool>, drawn: mpsc::Sender<()>) {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut told = false;
        let mut buf = [0u8; 65536];
        while !stop.load(Ordering::SeqCst) {
            let mut poll = libc::pollfd {
                fd: master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, for the length given.
            let ready = unsafe { libc::poll(&mut poll, 1, 50) };
            if ready <= 0 {
                continue;
            }
            // SAFETY: reads into a buffer of the length given.
            let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            if !told {
                seen.extend_from_slice(&buf[..n as usize]);
                if String::from_utf8_lossy(&seen).contains(needle) {
                    told = true;
                    let _ = drawn.send(());
                }
            }
        }
        drop(master);
    });
}

/// Runs probetop's TUI on a pty, closes the pty once the table shows `work_unit`, and
/// checks that the export is written and nothing is left attached. With `controlling`
/// the pty is probetop's controlling terminal (the kernel also sends SIGHUP when it
/// goes); without, only its writes and reads fail.
fn lose_the_terminal(name: &str, controlling: bool) {
    let target = workload(&["--forever", "--rate", "2000"]);
    let json = export_path(&format!("{name}.json"));
    let _ = std::fs::remove_file(&json);
    let (master, slave) = open_pty();
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string()])
        .args(["-e", "uprobe:work_unit", "--export"])
        .arg(&json)
        .env("TERM", "xterm-256color")
        .env("XDG_CACHE_HOME", export_path(&format!("{name}-cache")))
        .stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stdout(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave));
    // SAFETY: between fork and exec only async-signal-safe calls (setsid, ioctl).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if controlling && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start probetop");
    // The test's copies of the slave side went into the Command, dropped with it.
    drop(cmd);
    let stop = Arc::new(AtomicBool::new(false));
    let (drawn_tx, drawn) = mpsc::channel();
    drain(master, "work_unit", stop.clone(), drawn_tx);
    if drawn.recv_timeout(PATIENCE).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the TUI never drew work_unit");
    }
    std::thread::sleep(Duration::from_millis(1500));
    let (programs, links) = bpf_ids_of(child.id());
    assert!(!programs.is_empty(), "probetop holds no BPF program");
    stop.store(true, Ordering::SeqCst);

    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("probetop did not exit after its terminal went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "probetop ended with {status} when its terminal went away (signal 6 is the abort of a panic)"
    );
    let report = read_export(&json);
    assert!(
        probe(&report, "work_unit")["hits"].as_u64() > Some(0),
        "{report}"
    );
    nothing_left_of(&programs, &links);
    let _ = std::fs::remove_file(&json);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_lost_controlling_terminal_still_exports() {
    let _turn = turn(module_path!());
    lose_the_terminal("lost-ctty", true);
}

#[test]
#[ignore = "needs root and the fixtures"]
fn failed_terminal_writes_end_the_tui_and_export() {
    let _turn = turn(module_path!());
    lose_the_terminal("lost-writes", false);
}
