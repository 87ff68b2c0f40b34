//! Export paths on hostile ground: a missing or read-only directory, a FIFO or a device
//! is refused in one line before anything is attached; a disk that fills during the run
//! leaves the previous file whole (no truncated export), names the file, and the other
//! exports are still written. Mounts tmpfs file systems of its own (needs root).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use crate::common::*;

/// A tmpfs mounted for the test, unmounted (and its directory removed) at the end.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(name: &str, options: &str) -> Self {
        let dir = export_path(name);
        let _ = std::fs::create_dir_all(&dir);
        output_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", options, "probetop-test"])
                .arg(&dir),
            "mount -t tmpfs",
        );
        Self { dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Runs probetop with `-o export` to its end, at most `PATIENCE` (a FIFO's open would
/// block for good: that is a failure here, not a hang).
fn run_with_export(pid: u32, export: &Path) -> Output {
    let mut cmd = probetop();
    cmd.args(["--pid", &pid.to_string(), "--no-tui", "-d", "5"])
        .args(["-e", "uprobe:work_unit", "-o"])
        .arg(export);
    let mut running = Running::spawn(cmd);
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = running.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "probetop -o {} did not end",
            export.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: Vec::new(),
        stderr: running.err().rest().join("\n").into_bytes(),
    }
}

#[test]
#[ignore = "needs root and the fixtures"]
fn unwritable_export_paths_are_one_line_before_attaching() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--rate", "200"]);
    let dir = export_path("hostile-paths");
    let _ = std::fs::create_dir_all(&dir);
    let readonly = Tmpfs::mount("readonly-tmpfs", "ro,size=64k");
    let fifo = dir.join("fifo.json");
    let _ = std::fs::remove_file(&fifo);
    output_ok(Command::new("mkfifo").arg(&fifo), "mkfifo");
    // /dev/null's device, under a name with an export's extension.
    let device = dir.join("null.json");
    let _ = std::fs::remove_file(&device);
    output_ok(
        Command::new("mknod").arg(&device).args(["c", "1", "3"]),
        "mknod",
    );
    let missing = dir.join("no/such/dir/r.json");
    let in_readonly = readonly.dir.join("r.json");
    for (path, needle) in [
        (
            missing.clone(),
            format!(
                "cannot write {}: directory {} does not exist",
                missing.display(),
                dir.join("no/such/dir").display()
            ),
        ),
        (
            in_readonly.clone(),
            format!(
                "cannot write {}: cannot create a file in {}: Read-only file system",
                in_readonly.display(),
                readonly.dir.display()
            ),
        ),
        (
            fifo.clone(),
            format!(
                "{} is a FIFO: probetop writes exports to regular files only",
                fifo.display()
            ),
        ),
        (
            device.clone(),
            format!(
                "{} is a character device: probetop writes exports to regular files only",
                device.display()
            ),
        ),
    ] {
        let out = run_with_export(target.pid(), &path);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{}: {err}", path.display());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains(&needle), "expected {needle:?} in {err}");
        assert!(!err.contains("attached"), "{err}");
    }
    let _ = std::fs::remove_file(&fifo);
    let _ = std::fs::remove_file(&device);
}

/// Writes into `dir` until the file system is full.
fn fill(dir: &Path) {
    use std::io::Write as _;
    let mut file = std::fs::File::create(dir.join("filler")).expect("filler");
    let block = vec![0xa5u8; 4096];
    while file.write_all(&block).is_ok() {}
}

#[test]
#[ignore = "needs root and the fixtures"]
fn a_full_disk_keeps_the_old_export_whole_and_writes_the_others() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--rate", "2000"]);
    let small = Tmpfs::mount("full-tmpfs", "size=1m");
    let json = small.dir.join("r.json");
    let html = small.dir.join("r.html");
    let old = "{\"the previous run\": true}\n";
    std::fs::write(&json, old).expect("previous export");
    let csv = export_path("beside-full.csv");
    let _ = std::fs::remove_file(&csv);
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "uprobe:work_unit"])
        .arg("-o")
        .arg(&json)
        .arg("-o")
        .arg(&html)
        .arg("-o")
        .arg(&csv);
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached");
    // The disk fills while probetop measures.
    fill(&small.dir);
    std::thread::sleep(Duration::from_millis(500));
    probetop.signal(libc::SIGINT);
    let status = probetop.wait();
    let err = probetop.err().rest().join("\n");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "cannot write {}: No space left on device",
            json.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("wrote {}", csv.display())),
        "the CSV export, on another disk: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(&json).expect("the previous export"),
        old,
        "the previous export must be left whole"
    );
    assert!(!html.exists(), "no empty or truncated {}", html.display());
    let mut left: Vec<String> = std::fs::read_dir(&small.dir)
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["filler", "r.json"], "no temporary file left behind");
    let rows = std::fs::read_to_string(&csv).expect("the CSV export");
    assert!(rows.contains("work_unit"), "{rows}");
    let _ = std::fs::remove_file(&csv);
}
