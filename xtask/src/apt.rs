//! Installing apt packages without starting the services they ship: `cargo xtask setup`
//! and the lab's reports (xtask/lab) install through [`install_missing`].
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use std::{fs, thread};

use anyhow::{Context as _, Result, ensure};

use crate::cmd::{is_root, run};

/// Where Debian's maintainer scripts ask whether they may start a service.
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// The package's own server, as its unit/init script would start it.
const PACKAGED_PID_FILE: &str = "/run/mysqld/mysqld.pid";
const PACKAGED_SOCKET: &str = "/run/mysqld/mysqld.sock";

/// `apt-get install`s the `packages` that are not installed, without letting their
/// maintainer scripts start any service.
///
/// Debian's mariadb-server postinst starts (restarts) the system server through
/// `deb-systemd-invoke`/`invoke-rc.d`, and both ask `/usr/sbin/policy-rc.d` first: exit
/// status 101 means "action forbidden". So during the install a policy-rc.d that
/// answers 101 is put in place ([`NoServiceStarts`]) unless the machine already has one
/// (containers and this VM ship one that forbids everything; it is left alone). If a
/// policy of the machine's let the server start anyway, it is stopped afterwards with
/// the package's own `mariadb-admin shutdown` ([`stop_packaged_server`]): never
/// systemctl or service.
pub fn install_missing(packages: &[&str], missing: impl Fn(&str) -> Result<bool>) -> Result<()> {
    let mut todo = Vec::new();
    for &pkg in packages {
        if missing(pkg)? {
            todo.push(pkg);
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    println!("setup: apt packages: installing {}", todo.join(" "));
    ensure!(
        is_root()?,
        "installing apt packages {} needs root",
        todo.join(" ")
    );
    // No prompts, no debconf dialogs: CI has no terminal and no stdin.
    let apt = |args: &[&str]| {
        let mut cmd = Command::new("apt-get");
        cmd.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null());
        cmd
    };
    run(&mut apt(&["update", "-q"]))?;
    let policy = NoServiceStarts::new()?;
    let installed = run(apt(&["install", "-y", "-q"]).args(&todo));
    drop(policy);
    installed?;
    stop_packaged_server()
}

/// A `policy-rc.d` forbidding every service action, removed on drop; does nothing when
/// the machine has its own.
pub struct NoServiceStarts {
    created: Option<PathBuf>,
}

impl NoServiceStarts {
    pub fn new() -> Result<Self> {
        let path = Path::new(POLICY_RC_D);
        if path.symlink_metadata().is_ok() {
            return Ok(Self { created: None });
        }
        println!("+ write {POLICY_RC_D} (exit 101: no service starts during the install)");
        fs::write(
            path,
            "#!/bin/sh\n# Written by probetop's `cargo xtask` for one apt-get install, then \
             removed:\n# 101 = action forbidden, so no package starts its service.\nexit 101\n",
        )
        .with_context(|| format!("writing {POLICY_RC_D}"))?;
        let guard = Self {
            created: Some(path.to_path_buf()),
        };
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {POLICY_RC_D} executable"))?;
        Ok(guard)
    }
}

impl Drop for NoServiceStarts {
    fn drop(&mut self) {
        if let Some(path) = self.created.take() {
            println!("+ rm {}", path.display());
            if let Err(e) = fs::remove_file(&path) {
                eprintln!("xtask: cannot remove {}: {e}", path.display());
            }
        }
    }
}

/// Stops the package's system server if something started it, with the package's own
/// tool over its socket (root logs in through unix_socket authentication).
pub fn stop_packaged_server() -> Result<()> {
    let Some(pid) = fs::read_to_string(PACKAGED_PID_FILE)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
    else {
        return Ok(());
    };
    println!(
        "setup: the system MariaDB server (pid {pid}) was started by the install: stopping it"
    );
    run(Command::new("mariadb-admin").args([
        "--no-defaults",
        &format!("--socket={PACKAGED_SOCKET}"),
        "--user=root",
        "shutdown",
    ]))?;
    wait_gone(pid, Duration::from_secs(60))
}

fn wait_gone(pid: u32, patience: Duration) -> Result<()> {
    let deadline = Instant::now() + patience;
    while Path::new(&format!("/proc/{pid}")).exists() {
        ensure!(
            Instant::now() < deadline,
            "pid {pid} still runs after {patience:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
