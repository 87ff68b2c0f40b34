//! Booting a kernel in qemu and reading what it printed.

use super::*;

/// What one boot printed, read from its console log.
#[derive(Debug, Default)]
pub(super) struct Boot {
    /// `uname -r`, once the scenario began.
    pub(super) release: Option<String>,
    /// The scenario reached its end.
    pub(super) ended: bool,
    pub(super) timed_out: bool,
    /// The first line of a kernel crash on the console.
    pub(super) crash: Option<String>,
    /// The scenario's own lines, without the "PT " prefix.
    pub(super) lines: Vec<String>,
}

impl Boot {
    /// The guest died before the end of the scenario with a kernel crash on the console.
    pub(super) fn crashed(&self) -> bool {
        !self.ended && self.crash.is_some()
    }

    pub(super) fn parse(console: &str, timed_out: bool) -> Self {
        let mut boot = Boot {
            timed_out,
            ..Default::default()
        };
        for line in console.lines() {
            let line = line.trim_end_matches('\r');
            // The first line may follow the BIOS's output on the same console line.
            let line = line.find("PT BEGIN ").map_or(line, |at| &line[at..]);
            if let Some(rest) = line.strip_prefix("PT ") {
                if let Some(begin) = rest.strip_prefix("BEGIN kernel=") {
                    boot.release = begin.split_whitespace().next().map(str::to_owned);
                }
                boot.ended |= rest.starts_with("END ");
                boot.lines.push(rest.to_owned());
            } else if boot.crash.is_none() {
                // From the sign on: the first kernel line may follow the BIOS's output
                // and its escape sequences on the same console line.
                boot.crash = CRASH_SIGNS
                    .iter()
                    .filter_map(|sign| line.find(sign))
                    .min()
                    .map(|at| line[at..].trim().chars().take(100).collect());
            }
        }
        boot
    }

    /// The probetop exit status and "attached" of a step's `RC` line.
    pub(super) fn rc(&self, step: &str) -> Option<(i32, bool)> {
        let prefix = format!("RC {step} ");
        let rest = self.lines.iter().find_map(|l| l.strip_prefix(&prefix))?;
        let field = |key: &str| {
            rest.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let rc = field("probetop")?.parse().ok()?;
        Some((rc, field("attached") == Some("1")))
    }

    /// The lines a step relayed under `tag` (ERR: probetop's stderr, OUT: its stdout).
    pub(super) fn relayed(&self, tag: &str, step: &str) -> Vec<&str> {
        let prefix = format!("{tag} {step} | ");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .collect()
    }

    pub(super) fn export(&self, step: &str) -> Option<&str> {
        let prefix = format!("JSON {step} ");
        self.lines.iter().find_map(|l| l.strip_prefix(&prefix))
    }
}

/// Console lines of a dying kernel. With `oops=panic` on the command line every oops
/// ends in a panic, and with `panic=-1 -no-reboot` the panic ends qemu.
pub(super) const CRASH_SIGNS: &[&str] = &[
    "Kernel panic",
    "Oops:",
    "BUG:",
    "general protection fault",
    "double fault",
];

/// Boots `vmlinuz` with the initramfs, the console going to `log`, and kills the qemu
/// (our own child) if it outlives `timeout`.
pub(super) fn boot(
    qemu: &Qemu,
    vmlinuz: &Path,
    initramfs: &Path,
    cpus: u32,
    cmdline: &str,
    log: &Path,
    timeout: Duration,
) -> Result<Boot> {
    let console = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(&qemu.binary);
    cmd.arg("-L")
        .arg(&qemu.data)
        .args(["-L", SEABIOS])
        .args(["-accel", "tcg", "-cpu", "max", "-smp"])
        .arg(cpus.to_string())
        .args(["-m", "2048"])
        // No default devices (their ROMs, and audio or display modules, which would be
        // looked for among the system qemu's): the serial console is all there is.
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-audio",
            "none",
        ])
        .args(["-serial", "stdio", "-no-reboot", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=-1 oops=panic quiet loglevel=3 {cmdline}"
        ))
        .stdin(Stdio::null())
        .stderr(console.try_clone().context("duplicating the console log")?)
        .stdout(console);
    echo(&cmd);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", show(&cmd)))?;
    let mut timed_out = false;
    loop {
        if child.try_wait().context("waiting for qemu")?.is_some() {
            break;
        }
        if started.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let bytes = fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    Ok(Boot::parse(&String::from_utf8_lossy(&bytes), timed_out))
}
