//! A terminal for the TUI tests: a tmux server of their own, driven as a person would
//! (send-keys to type, capture-pane to read the screen). Needs tmux (Debian `tmux`).

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use super::PATIENCE;

/// A tmux server of its own (`-L`), killed when the test ends, pass or fail.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    pub(crate) fn start(name: &str, width: u16, height: u16, dir: &Path, command: &str) -> Self {
        let tmux = Self {
            socket: format!("probetop-test-{name}-{}", std::process::id()),
        };
        let status = Command::new("tmux")
            .args([
                "-u",
                "-L",
                &tmux.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
            ])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .arg("-c")
            .arg(dir)
            .args(["-e", "LANG=C.UTF-8"])
            // No cached calibration: one cached on this machine by anything else
            // would give every probe a CPU share and change the default sort.
            .arg("-e")
            .arg(format!("XDG_CACHE_HOME={}", dir.join("cache").display()))
            // Keep the pane after probetop exits, to read what it printed.
            .arg(format!("{command}; echo probetop-exit=$?; sleep 600"))
            .status()
            .expect("run tmux (Debian package tmux)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "0"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
        // Let the UI take them in before the next step looks.
        std::thread::sleep(Duration::from_millis(150));
    }

    /// Resizes the window, as a person dragging the terminal's corner would.
    pub(crate) fn resize(&self, width: u16, height: u16) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "resize-window", "-t", "0"])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .status()
            .expect("tmux resize-window");
        assert!(status.success());
    }

    /// Types `text` as it is (escape sequences included, as a terminal would send).
    pub(crate) fn literal(&self, text: &str) {
        self.keys(&["-l", text]);
    }

    pub(crate) fn screen(&self) -> String {
        self.capture(false)
    }

    /// With `escapes`, the screen's SGR sequences (colours, bold, reverse) are kept.
    pub(crate) fn capture(&self, escapes: bool) -> String {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"]);
        if escapes {
            command.arg("-e");
        }
        let out = command.output().expect("tmux capture-pane");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen satisfies `ready`; panics with the last screen otherwise.
    pub(crate) fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        self.wait_within(what, PATIENCE, ready)
    }

    /// [`Self::wait_for`], at most `bound`.
    pub(crate) fn wait_within(
        &self,
        what: &str,
        bound: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + bound;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} ({bound:?}); screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Tmux {
    /// Copies this machine's cached calibration, when it has one, into the cache a
    /// pane started with `dir` reads (`dir/cache`); whether there was one.
    pub(crate) fn calibrated(dir: &Path) -> bool {
        super::copy_calibration(&dir.join("cache")) > 0
    }

    /// The pid of the command the pane runs: the child of the pane's shell.
    pub(crate) fn command_pid(&self) -> u32 {
        let out = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "list-panes",
                "-t",
                "0",
                "-F",
                "#{pane_pid}",
            ])
            .output()
            .expect("tmux list-panes");
        let shell = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        children
            .split_whitespace()
            .next()
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("no command under the pane's shell {shell:?}"))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// `path` quoted for the shell a pane runs its command in.
pub(crate) fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The TUI's status line leads with the headline: with this machine's calibration, what
/// every probe costs as a CPU share and per hit, estimated; without one, how to get it.
pub(crate) fn assert_headline(screen: &str, calibrated: bool) {
    let status = screen.lines().next().unwrap_or_default();
    assert!(
        status.starts_with(" cost "),
        "the headline leads:\n{screen}"
    );
    if calibrated {
        assert!(
            status.contains("% cpu") && status.contains("/hit") && status.contains(" est"),
            "the whole cost of every probe, per hit, estimated:\n{screen}"
        );
    } else {
        assert!(status.contains("probetop calibrate"), "{screen}");
    }
}
