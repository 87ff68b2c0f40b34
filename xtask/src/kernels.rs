//! `cargo xtask kernels`: probetop on Debian's stock kernels, each booted under qemu
//! (TCG: no KVM needed) from an initramfs holding busybox, probetop and the C fixtures.
//!
//! Per kernel, `xtask/kernels/init.sh` runs as PID 1: uprobe + uretprobe + USDT on the
//! workload fixture in ring mode and in `--mode kernel` (every call counted, none
//! dropped), USDT probes with and without a semaphore on the probes fixture, the red-zone
//! fixture's `nop; nop5` USDT site and nop5 entry in both modes (every value it keeps
//! below %rsp intact), and
//! `probetop list --pid`, and the ring run again with the static probetop of `cargo
//! xtask dist`, with no libc or dynamic loader left on the file system.
//! The 6.12 kernel then boots again with 8 CPUs for the many-CPU scenario (`SMP_KERNEL`):
//! the threads fixture's calls spread over every CPU, counted exactly in both modes. It prints what
//! happened on the serial console; this module judges it. A kernel older than 5.15 must refuse every probe run with probetop's
//! one-line "needs Linux 5.15 or later" and no verifier log.
//!
//! Everything is cached under `<target>/kernels/`: the apt lists of each suite, the
//! kernels (`<label>/vmlinuz-*`), busybox, the initramfs, and each boot's console
//! (`logs/<label>.log`, `logs/<label>.crash.log` when a first boot crashed).

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

use crate::{Ctx, echo, install_apt, output_ok, run, show};

mod dispatch;

mod boot;
mod fetch;
mod initramfs;
mod judge;
use boot::*;
use fetch::*;
use initramfs::*;
use judge::*;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct KernelsArgs {
    /// Only these kernels, by label: 510 (bullseye), 61 (bookworm), 612 (bookworm-
    /// backports), 612t (trixie).
    #[arg(long, value_delimiter = ',', value_name = "LABELS")]
    only: Vec<String>,
    /// Fewer calls per probe run (2000 and 200 instead of 20000 and 1000), for iterating.
    #[arg(long)]
    quick: bool,
    /// Seconds one boot may take before its qemu is killed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

impl Default for KernelsArgs {
    fn default() -> Self {
        Self {
            only: Vec::new(),
            quick: false,
            timeout: 300,
        }
    }
}

/// One Debian kernel: the suite whose `linux-image-cloud-amd64` names it. The cloud
/// flavour boots fast and has everything probetop needs built in (no modules to load).
struct Kernel {
    label: &'static str,
    suite: &'static str,
}

const KERNELS: &[Kernel] = &[
    Kernel {
        label: "510",
        suite: "bullseye",
    },
    Kernel {
        label: "61",
        suite: "bookworm",
    },
    Kernel {
        label: "612",
        suite: "bookworm-backports",
    },
    Kernel {
        label: "612t",
        suite: "trixie",
    },
];

const METAPACKAGE: &str = "linux-image-cloud-amd64";
const MIRROR: &str = "http://deb.debian.org/debian";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Where busybox-static comes from (downloaded and unpacked, not installed: the host's
/// own busybox, if any, is left alone).
const BUSYBOX_SUITE: &str = "bookworm";
/// The first release with everything probetop needs (bpf_get_attach_cookie, BPF links
/// for perf events); older kernels must refuse with this line.
const NEEDED: (u32, u32) = (5, 15);
const REFUSAL: &str = "probetop: needs Linux 5.15 or later (";

/// The probe runs of init.sh: step, probes, mode, whether the count is pt_sema's.
const PROBE_RUNS: &[(&str, &[&str], &str, bool)] = &[
    (
        "ring",
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "ring",
        false,
    ),
    (
        "kernel",
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "kernel",
        false,
    ),
    // The same beside a second probetop (on uprobe:workload_xol, once per call).
    (
        "foreign",
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "ring",
        false,
    ),
    (
        "usdt",
        &["usdt:fixture_sema:tick", "usdt:fixture:tick"],
        "ring",
        true,
    ),
    // The red zone: a `nop; nop5` USDT site and a function whose first instruction
    // is a 5-byte nop, on the fixture that counts values changed below %rsp.
    (
        REDZONE_STEP,
        &["usdt:redzone:site", "uprobe:redzone_entry"],
        "ring",
        false,
    ),
    (
        "redzone-kernel",
        &["usdt:redzone:site", "uprobe:redzone_entry"],
        "kernel",
        false,
    ),
    (
        DIST_STEP,
        &[
            "uprobe:work_unit",
            "uretprobe:leaf_ret",
            "usdt:workload:unit",
        ],
        "ring",
        false,
    ),
];
/// The probe run of the dist file (`/dist/probetop` in the guest), which init.sh runs with
/// /lib, /lib64 and /usr/lib moved away; its `NOLIBC` line says whether the glibc
/// probetop could still start then (it must not).
const DIST_STEP: &str = "dist";
/// The red-zone runs' steps start with this; their fixture's `done` line must count no
/// value changed below %rsp (fixtures/c/redzone.c).
const REDZONE_STEP: &str = "redzone";
/// The kernel booted once more with `SMP_CPUS` vCPUs for the many-CPU scenario (init.sh's
/// `pt_smp`): `SMP_THREADS` threads of the threads fixture, each calling `SMP_RATE`
/// times a second for a few seconds (long enough for init.sh to move every thread round
/// every CPU), in ring and kernel mode. Every CPU's staged batch, flush and per-CPU
/// counters then carry hits, and the sum must be the fixture's own count.
const SMP_KERNEL: &str = "612";
const SMP_CPUS: u32 = 8;
const SMP_THREADS: u64 = 16;
const SMP_RATE: u64 = 1000;
/// What `probetop list --pid` must show of the workload.
const LISTED: &[&str] = &["work_unit", "leaf_ret", "workload:unit"];

pub(crate) fn run_kernels(ctx: &Ctx, args: &KernelsArgs) -> Result<()> {
    let started = Instant::now();
    let kernels = select(&args.only)?;
    let (calls, sema) = if args.quick {
        (2000, 200)
    } else {
        (20000, 1000)
    };
    crate::fixtures(ctx)?;
    crate::build(ctx)?;
    let dist = crate::dist::dist(ctx)?;
    // The system's qemu is not the one run (see Qemu), but brings the libraries and
    // the BIOS (seabios) that one needs.
    install_apt(ctx, &["qemu-system-x86", "cpio"])?;

    let cache = ctx.target_dir().join("kernels");
    fs::create_dir_all(cache.join("logs"))
        .with_context(|| format!("creating {}", cache.display()))?;
    let mut apt = Apt::new(&cache);
    let busybox = fetch_busybox(&mut apt, &cache)?;
    let qemu = fetch_qemu(ctx, &mut apt, &cache)?;
    let mut vmlinuz = Vec::new();
    for kernel in &kernels {
        vmlinuz.push(fetch_kernel(&mut apt, &cache, kernel)?);
    }
    let initramfs = build_initramfs(ctx, &cache, &busybox, &dist.binary)?;

    let cmdline = format!("pt_calls={calls} pt_sema={sema}");
    let timeout = Duration::from_secs(args.timeout);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (kernel, vmlinuz) in kernels.iter().zip(&vmlinuz) {
        let log = cache.join("logs").join(format!("{}.log", kernel.label));
        println!(
            "kernels: {} ({}): booting {} (console: {})",
            kernel.label,
            kernel.suite,
            vmlinuz.display(),
            log.display()
        );
        let crash_log = cache
            .join("logs")
            .join(format!("{}.crash.log", kernel.label));
        // A crash log left by an earlier run would read as this one's.
        if crash_log.exists() {
            fs::remove_file(&crash_log)
                .with_context(|| format!("removing {}", crash_log.display()))?;
        }
        let boot_started = Instant::now();
        let mut boot = boot(&qemu, vmlinuz, &initramfs, 2, &cmdline, &log, timeout)?;
        if boot.crashed() {
            // A guest kernel that died (under TCG, see Qemu) gets one more boot; the crash
            // is kept and noted.
            fs::rename(&log, &crash_log)
                .with_context(|| format!("keeping {}", crash_log.display()))?;
            let why = boot.crash.clone().unwrap_or_default();
            println!(
                "kernels: {}: the guest crashed ({why}); booting again",
                kernel.label
            );
            notes.push(format!(
                "{}: the first boot crashed ({why}; {}); the results are the second boot's",
                kernel.label,
                crash_log.display()
            ));
            boot = self::boot(&qemu, vmlinuz, &initramfs, 2, &cmdline, &log, timeout)?;
        }
        let kernel_rows = judge(kernel, &boot, calls, sema);
        let failed = kernel_rows.iter().filter(|r| !r.ok).count();
        println!(
            "kernels: {}: {} in {:.0} s, {} of {} checks ok",
            kernel.label,
            boot.release.as_deref().unwrap_or("(no scenario)"),
            boot_started.elapsed().as_secs_f64(),
            kernel_rows.len() - failed,
            kernel_rows.len()
        );
        rows.extend(kernel_rows);
    }

    if let Some((kernel, vmlinuz)) = kernels
        .iter()
        .zip(&vmlinuz)
        .find(|(k, _)| k.label == SMP_KERNEL)
    {
        let secs = if args.quick { 2 } else { 5 };
        let label = format!("{}-smp{SMP_CPUS}", kernel.label);
        let log = cache.join("logs").join(format!("{label}.log"));
        println!(
            "kernels: {label}: booting {} with {SMP_CPUS} CPUs (console: {})",
            vmlinuz.display(),
            log.display()
        );
        let cmdline = format!("pt_smp={SMP_THREADS} pt_rate={SMP_RATE} pt_secs={secs}");
        let boot_started = Instant::now();
        let mut boot = boot(
            &qemu, vmlinuz, &initramfs, SMP_CPUS, &cmdline, &log, timeout,
        )?;
        if boot.crashed() {
            let why = boot.crash.clone().unwrap_or_default();
            println!("kernels: {label}: the guest crashed ({why}); booting again");
            notes.push(format!(
                "{label}: the first boot crashed ({why}); the results are the second boot's"
            ));
            boot = self::boot(
                &qemu, vmlinuz, &initramfs, SMP_CPUS, &cmdline, &log, timeout,
            )?;
        }
        let smp_rows = judge_smp(kernel, &boot, SMP_CPUS, SMP_THREADS);
        println!(
            "kernels: {label}: {} checks in {:.0} s, {} failed",
            smp_rows.len(),
            boot_started.elapsed().as_secs_f64(),
            smp_rows.iter().filter(|r| !r.ok).count()
        );
        rows.extend(smp_rows);
    }

    let failed = rows.iter().filter(|r| !r.ok).count();
    let mut summary = table(&rows);
    for note in &notes {
        summary.push_str(&format!("note: {note}\n"));
    }
    summary.push_str(&format!(
        "{} kernels, {} checks, {} failed, in {:.0} s (calls {calls}, usdt {sema}); consoles in {}\n",
        kernels.len(),
        rows.len(),
        failed,
        started.elapsed().as_secs_f64(),
        cache.join("logs").display()
    ));
    print!("\n{summary}");
    let summary_path = cache.join("summary.txt");
    fs::write(&summary_path, &summary)
        .with_context(|| format!("writing {}", summary_path.display()))?;
    ensure!(
        failed == 0,
        "kernels: {failed} of {} checks failed (see the table above and the consoles in {})",
        rows.len(),
        cache.join("logs").display()
    );
    Ok(())
}

fn select(only: &[String]) -> Result<Vec<&'static Kernel>> {
    if only.is_empty() {
        return Ok(KERNELS.iter().collect());
    }
    let labels: Vec<&str> = KERNELS.iter().map(|k| k.label).collect();
    only.iter()
        .map(|label| {
            KERNELS
                .iter()
                .find(|k| k.label == label.trim())
                .with_context(|| {
                    format!("--only: no kernel {label:?} (known: {})", labels.join(", "))
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ldd() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f8c)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f8c)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn reads_versions() {
        assert_eq!(version("5.10.0-32-cloud-amd64"), Some((5, 10)));
        assert_eq!(version("6.12.95+deb12-cloud-amd64"), Some((6, 12)));
        assert!(version("5.10.0").is_some_and(|v| v < NEEDED));
        assert!(version("5.15.0").is_some_and(|v| v >= NEEDED));
        assert!(version("6.1.0").is_some_and(|v| v >= NEEDED));
    }

    #[test]
    fn selects_kernels() {
        let labels = |only: &[&str]| {
            let only: Vec<String> = only.iter().map(|s| (*s).to_owned()).collect();
            select(&only).map(|ks| ks.iter().map(|k| k.label).collect::<Vec<_>>())
        };
        assert_eq!(labels(&[]).unwrap(), ["510", "61", "612", "612t"]);
        assert_eq!(labels(&["61", "612"]).unwrap(), ["61", "612"]);
        assert!(labels(&["6.1"]).is_err());
    }

    fn console(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{l}\r\n")).collect()
    }

    #[test]
    fn judges_a_kernel_that_runs() {
        // `other`: the other uprobes' dispatches the run counted.
        let export = |mode: &str, hits: u64, other: u64| {
            format!(
                r#"{{"probes": [{{"spec": "uprobe:work_unit", "mode": "{mode}", "hits": {hits}, "dropped": 0}},
                {{"spec": "uretprobe:leaf_ret", "mode": "{mode}", "hits": {hits}, "dropped": 0,
                  "dispatch_ns": {{"return": {{"count": {hits}}}}}}},
                {{"spec": "usdt:workload:unit", "mode": "{mode}", "hits": {hits}, "dropped": 0}}],
                "cost": {{"other_uprobe_dispatch": {{"count": {other}}}, "dispatch_unmeasured": 0,
                          "dispatch_hooks": {{"returns": "uprobe_notify_resume at the int3 trampoline"}}}}}}"#
            )
            .replace('\n', "")
        };
        let text = console(&[
            "[    1.0] random kernel line",
            "Booting from ROM..\x1bc\x1b[?7l\x1b[2JPT BEGIN kernel=6.1.0-50-cloud-amd64 cpus=2",
            "PT RC ring probetop=0 attached=1 fixture=0 secs=9.0",
            "PT ERR ring | probetop: attached 3 probes to pid 80 (workload)",
            &format!("PT JSON ring {}", export("ring", 20, 0)),
            "PT RC kernel probetop=0 attached=1 fixture=0 secs=9.0",
            &format!("PT JSON kernel {}", export("kernel", 19, 0)),
            "PT RC other probetop=0",
            r#"PT JSON other {"probes": [{"spec": "uprobe:workload_xol", "hits": 20}]}"#,
            "PT RC foreign probetop=0 attached=1 fixture=0 secs=9.0",
            // Its own returns counted as other uprobes, beside the other's 20.
            &format!("PT JSON foreign {}", export("ring", 20, 40)),
            "PT RC usdt probetop=0 attached=1 fixture=0 secs=2.0",
            r#"PT JSON usdt {"probes": [{"spec": "usdt:fixture_sema:tick", "mode": "ring", "hits": 5, "dropped": 0}, {"spec": "usdt:fixture:tick", "mode": "ring", "hits": 5, "dropped": 0}]}"#,
            "PT RC redzone probetop=0 attached=1 fixture=0 secs=3.0",
            "PT FX redzone | ready pid=90",
            "PT FX redzone | done calls=20 corrupted_usdt=0 corrupted_mid=0 corrupted_entry=0",
            r#"PT JSON redzone {"probes": [{"spec": "usdt:redzone:site", "mode": "ring", "hits": 20, "dropped": 0}, {"spec": "uprobe:redzone_entry", "mode": "ring", "hits": 20, "dropped": 0}]}"#,
            "PT RC redzone-kernel probetop=0 attached=1 fixture=0 secs=3.0",
            "PT FX redzone-kernel | done calls=20 corrupted_usdt=19 corrupted_mid=0 corrupted_entry=0",
            r#"PT JSON redzone-kernel {"probes": [{"spec": "usdt:redzone:site", "mode": "kernel", "hits": 20, "dropped": 0}, {"spec": "uprobe:redzone_entry", "mode": "kernel", "hits": 20, "dropped": 0}]}"#,
            "PT RC list probetop=0 lines=4000",
            "PT OUT list |   uprobe   0x1a10  0x1a10  emulated-push   leaf_ret",
            "PT OUT list |   uprobe   0x1a30  0x1a30  emulated-push   work_unit",
            "PT OUT list |   usdt     0x1a48  0x1a48  emulated-nop    workload:unit  args=\"-8@%rbx\"",
            "PT NOLIBC dist glibc_probetop_rc=127",
            "PT RC dist probetop=0 attached=1 fixture=0 secs=9.0",
            &format!("PT JSON dist {}", export("ring", 20, 0)),
            "PT END uptime=30.0",
        ]);
        let boot = Boot::parse(&text, false);
        assert!(boot.ended && !boot.crashed());
        let kernel = &KERNELS[1];
        let rows = judge(kernel, &boot, 20, 5);
        let oks: Vec<(&str, bool)> = rows.iter().map(|r| (r.step.as_str(), r.ok)).collect();
        assert_eq!(
            oks,
            [
                ("ring", true),
                ("kernel", false),
                ("foreign", true),
                ("usdt", true),
                ("redzone", true),
                // Every hit counted, but 19 values changed below %rsp.
                ("redzone-kernel", false),
                ("dist", true),
                ("ring dispatch", true),
                // 19 of 20 returns: one off is a failure.
                ("kernel dispatch", false),
                ("foreign dispatch", false),
                ("list", true)
            ]
        );
        assert_eq!(rows[1].got, "19/19/19, 0 dropped");
        assert_eq!(rows[4].got, "20/20, 0 dropped, 0 values changed below %rsp");
        assert_eq!(
            rows[5].got,
            "20/20, 0 dropped, 19 values changed below %rsp"
        );
        assert_eq!(rows[6].got, "20/20/20, 0 dropped, no libc");
        assert_eq!(
            rows[7].got,
            "20 returns by uprobe_notify_resume, 0 other, 0 untimed"
        );
        assert_eq!(
            rows[9].got,
            "20 returns by uprobe_notify_resume, 40 other, 0 untimed (the other's 20)"
        );

        // The same dist run with a libc the glibc probetop could still start with, or
        // with no word on it, proves nothing.
        for (nolibc, got) in [
            ("PT NOLIBC dist glibc_probetop_rc=0", "but libc was there"),
            ("PT X", "libc not hidden"),
        ] {
            let text = text.replace("PT NOLIBC dist glibc_probetop_rc=127", nolibc);
            let rows = judge(kernel, &Boot::parse(&text, false), 20, 5);
            assert!(!rows[6].ok && rows[6].got.ends_with(got), "{}", rows[6].got);
        }
        assert_eq!(rows[0].kernel, "6.1.0-50 bookworm");
    }

    #[test]
    fn judges_a_kernel_that_must_refuse() {
        let refusal = "PT ERR {} | probetop: needs Linux 5.15 or later (bpf_get_attach_cookie, \
                       BPF links for perf events); this kernel is 5.10.0-32-cloud-amd64";
        let mut lines = vec!["PT BEGIN kernel=5.10.0-32-cloud-amd64 cpus=2".to_owned()];
        lines.push("PT NOLIBC dist glibc_probetop_rc=127".to_owned());
        for step in [
            "ring",
            "kernel",
            "foreign",
            "usdt",
            "redzone",
            "redzone-kernel",
            "dist",
        ] {
            lines.push(format!(
                "PT RC {step} probetop=1 attached=0 fixture=143 secs=1.0"
            ));
            lines.push(format!(
                "PT ERR {step} | probetop: 3 probe points from 3 specs"
            ));
            if step != "usdt" {
                lines.push(refusal.replace("{}", step));
            }
        }
        // The usdt run printed a verifier log instead.
        lines.push("PT ERR usdt | probetop: the eBPF program ... Verifier output: 0: (85)".into());
        lines.push("PT END uptime=10".into());
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let boot = Boot::parse(&console(&refs), false);
        let rows = judge(&KERNELS[0], &boot, 20, 5);
        let oks: Vec<bool> = rows.iter().map(|r| r.ok).collect();
        // list did not run: a failure too.
        assert_eq!(oks, [true, true, true, false, true, true, true, false]);
        assert!(rows[3].got.contains("verifier log"), "{}", rows[3].got);
    }

    #[test]
    fn judges_many_cpus() {
        let run = |mode: &str, hits: u64, done: u64, threads: usize, cpus: &str| {
            let mut lines = vec![format!(
                "PT RC smp-{mode} probetop=0 attached=1 fixture=0 secs=5.0"
            )];
            for t in 0..threads {
                lines.push(format!("PT FX smp-{mode} | tid={} calls={}", 300 + t, 5));
            }
            lines.push(format!("PT FX smp-{mode} | done calls={done}"));
            lines.push(format!(
                r#"PT JSON smp-{mode} {{"probes": [{{"spec": "uprobe:work_unit", "mode": "{mode}", "hits": {hits}, "dropped": 0}}]}}"#
            ));
            lines.push(format!("PT CPUS smp-{mode} seen={cpus}"));
            lines
        };
        let judged = |ring: Vec<String>, kernel: Vec<String>| {
            let mut lines = vec!["PT BEGIN kernel=6.12.95+deb12-cloud-amd64 cpus=8".to_owned()];
            lines.extend(ring);
            lines.extend(kernel);
            lines.push("PT END uptime=15".to_owned());
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            judge_smp(&KERNELS[2], &Boot::parse(&console(&refs), false), 8, 16)
                .iter()
                .map(|r| r.ok)
                .collect::<Vec<_>>()
        };
        let all = "0 1 2 3 4 5 6 7 ";
        assert_eq!(
            judged(run("ring", 80, 80, 16, all), run("kernel", 80, 80, 16, all)),
            [true, true]
        );
        // One hit short; one CPU never used; a thread that made no call.
        assert_eq!(
            judged(
                run("ring", 79, 80, 16, all),
                run("kernel", 80, 80, 16, "0 1 2 3 4 5 6 ")
            ),
            [false, false]
        );
        assert_eq!(
            judged(run("ring", 80, 80, 15, all), Vec::new()),
            [false, false]
        );
    }

    #[test]
    fn a_crash_before_the_end_is_seen() {
        let text = console(&[
            "PT BEGIN kernel=6.12.95+deb12-cloud-amd64 cpus=2",
            "Booting from ROM..\x1b[2J[   3.1] Oops: general protection fault, probably for non-canonical address",
            "[   3.2] Kernel panic - not syncing: Fatal exception",
        ]);
        let boot = Boot::parse(&text, false);
        assert!(boot.crashed());
        assert!(
            boot.crash
                .as_deref()
                .unwrap()
                .starts_with("Oops: general protection")
        );
        let rows = judge(&KERNELS[2], &boot, 20, 5);
        assert!(rows.iter().all(|r| !r.ok));
        assert_eq!(rows.last().unwrap().step, "end");
    }
}
