//! Export paths on hostile ground: a missing or read-only directory, a FIFO or a device
//! is refused in one line before anything is attached; a disk that fills during the run
//! leaves the previous file whole (no truncated export), names the file, and the other
//! exports are still written. Mounts tmpfs file systems of its own (needs root). And
//! every format carries each probe's whole cost and CPU share and the run's headline,
//! the same numbers in each.

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

/// Every export carries what each probe cost the target and the run's headline, each
/// format read by its own reader, the numbers equal across formats; the stdout summary
/// leads with the same headline and has COST/HIT and %CPU; a probe without hits shows
/// no cost and no time (the CSV's empty field, no NaN in `.prom`).
#[test]
#[ignore = "needs root and the fixtures"]
fn every_format_carries_the_cost_and_the_headline() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--rate", "2000"]);
    let cache = calibrated_cache("exports");
    let base = export_path("headline");
    let path = |ext: &str| base.with_extension(ext);
    let mut cmd = probetop();
    cmd.env("XDG_CACHE_HOME", &cache)
        .args(["--pid", &target.pid().to_string(), "--no-tui", "-d", "3"])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"])
        // Found in the workload and never called while it loops: a probe without hits.
        .args(["-e", "uprobe:main"]);
    for ext in ["json", "csv", "prom", "html"] {
        cmd.arg("--export").arg(path(ext));
    }
    let out = output_ok(&mut cmd, "probetop with every export");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);

    // JSON: the headline object, and each probe's cost.
    let json = read_export(&path("json"));
    let headline = &json["headline"];
    let share = headline["cpu_share"].as_f64().expect("a priced run");
    let per_hit = headline["per_hit_ns"].as_f64().expect("per hit");
    assert!(share > 0.0 && per_hit > 0.0, "{headline}");
    assert_eq!(headline["method"], "estimate", "{headline}");
    let text = headline["text"].as_str().expect("text");
    assert!(
        text.contains("of one CPU") && text.contains("estimated"),
        "{text}"
    );
    let probes = json["probes"].as_array().expect("probes");
    let mut summed = 0.0;
    for p in probes {
        let hits = p["hits"].as_u64().expect("hits");
        if hits == 0 {
            assert!(p["whole_cost_ns"].is_null(), "no hits, no cost: {p}");
            assert!(p["cpu_share"].is_null(), "{p}");
        } else {
            assert!(
                p["whole_cost_ns"].as_f64().expect("whole cost") > 0.0,
                "{p}"
            );
            summed += p["cpu_share"].as_f64().expect("cpu share");
        }
    }
    // The headline is the set's: here the sum of the per-probe estimates.
    assert!(
        (summed - share).abs() <= 1e-9 * share.max(1.0),
        "{summed} {share}"
    );
    assert!(
        probes.iter().any(|p| p["hits"] == 0),
        "uprobe:main took no hit: {probes:?}"
    );

    // CSV, read by the csv crate: the same numbers per probe and for the run.
    let mut reader = csv::Reader::from_path(path("csv")).expect("csv");
    let header = reader.headers().expect("header").clone();
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), probes.len());
    for (row, p) in rows.iter().zip(probes) {
        match p["whole_cost_ns"].as_f64() {
            Some(whole) => {
                let csv_whole: f64 = row[col("whole_cost_ns")].parse().expect("whole_cost_ns");
                assert!((csv_whole - whole).abs() <= 0.001, "{csv_whole} {whole}");
                let csv_share: f64 = row[col("cpu_share")].parse().expect("cpu_share");
                // Printed by two writers: equal to the last digit or two.
                let share = p["cpu_share"].as_f64().expect("cpu_share");
                assert!(
                    (csv_share - share).abs() <= share * 1e-12,
                    "{csv_share} {share}"
                );
                assert_eq!(&row[col("cost_method")], "estimate");
            }
            None => {
                assert_eq!(&row[col("whole_cost_ns")], "");
                assert_eq!(&row[col("p50")], "", "no hits, no time: {row:?}");
            }
        }
        let run_share: f64 = row[col("run_cpu_share")].parse().expect("run_cpu_share");
        assert_eq!(run_share, share);
        assert_eq!(&row[col("run_cost_method")], "estimate");
        // The headline against the target, as the JSON has it: empty where it is null.
        for (column, field) in [
            ("run_target_own_cpu_share", "target_own_cpu_share"),
            ("run_of_target_cpu", "of_target_cpu"),
            ("run_target_cpu_share", "target_cpu_share"),
        ] {
            match headline[field].as_f64() {
                Some(json) => {
                    let csv: f64 = row[col(column)].parse().expect(column);
                    assert!(
                        (csv - json).abs() <= json.abs() * 1e-12,
                        "{column} {csv} {json}"
                    );
                }
                None => assert_eq!(&row[col(column)], "", "{column}: {headline}"),
            }
        }
    }
    // The workload's CPU was measured, so the CSV's column is not empty.
    assert!(
        headline["target_cpu_share"].as_f64().is_some(),
        "{headline}"
    );

    // .prom: a gauge per probe and the headline, labelled by method; no NaN.
    let prom = std::fs::read_to_string(path("prom")).expect("prom");
    assert!(!prom.contains("NaN"), "{prom}");
    let value_of = |prefix: &str| -> f64 {
        prom.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{prom}"))
    };
    assert_eq!(
        value_of("probetop_cost_cpu_share{method=\"estimate\"}"),
        share
    );
    for p in probes.iter().filter(|p| p["hits"].as_u64() > Some(0)) {
        let line = prom
            .lines()
            .find(|l| {
                l.starts_with("probetop_probe_cost_seconds{")
                    && l.contains(&format!("id=\"{}\"", p["id"]))
            })
            .unwrap_or_else(|| panic!("no cost of probe {}:\n{prom}", p["id"]));
        assert!(line.contains("method=\"estimate\""), "{line}");
        let seconds: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("value");
        let whole = p["whole_cost_ns"].as_f64().expect("whole");
        assert!(
            (seconds * 1e9 - whole).abs() <= 1e-6 * whole,
            "{line} {whole}"
        );
    }

    // HTML: the headline on its first screen, before the table; cost columns.
    let html = std::fs::read_to_string(path("html")).expect("html");
    let at = html
        .find("What the probes cost")
        .expect("headline in the HTML");
    assert!(
        at < html.find("<table").expect("table"),
        "the headline comes first"
    );
    assert!(
        html.contains("Cost/hit") && html.contains("%CPU"),
        "cost columns"
    );

    // stdout: the summary leads with the headline; COST/HIT and %CPU columns.
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("probes' cost to the target: +"),
        "{stdout}"
    );
    assert!(
        stdout.contains("COST/HIT") && stdout.contains("%CPU"),
        "{stdout}"
    );
    // stderr: the one answer at the end; the probe without hits has no price there.
    assert!(
        stderr.contains("the answer: the probes cost the target +"),
        "{stderr}"
    );
    let main_line = stderr
        .lines()
        .find(|l| l.starts_with("  uprobe:main"))
        .unwrap_or_else(|| panic!("no end line for uprobe:main: {stderr}"));
    assert!(main_line.contains(": no hits"), "{main_line}");
    assert!(!main_line.contains("ns/hit"), "{main_line}");
    // The answer first: the summary table, the HTML report's table and the end lines
    // list the probes dearest first by the JSON's shares, the one without hits last.
    let mut by_cost: Vec<(bool, f64, &str)> = probes
        .iter()
        .map(|p| {
            (
                p["hits"] == 0,
                -p["cpu_share"].as_f64().unwrap_or(0.0),
                p["spec"].as_str().expect("spec"),
            )
        })
        .collect();
    by_cost.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let by_cost: Vec<&str> = by_cost.into_iter().map(|(_, _, spec)| spec).collect();
    assert_eq!(by_cost.last(), Some(&"uprobe:main"), "{by_cost:?}");
    let names = |lines: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        lines
            .filter(|l| l.starts_with("uprobe:") || l.starts_with("uretprobe:"))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    };
    // The summary names its rows function first, the kind in its K column.
    let lines: Vec<&str> = stdout.lines().collect();
    let rows: Vec<String> = summary_rows(&lines).iter().map(|r| r.spec()).collect();
    assert_eq!(rows, by_cost, "{stdout}");
    assert!(widest_line(&stdout) <= 100, "{stdout}");
    assert_eq!(
        names(&mut stderr.lines().map(str::trim_start)),
        by_cost,
        "{stderr}"
    );
    let in_html: Vec<&str> = html
        .split("<tr><td class=\"n\">")
        .skip(1)
        .filter_map(|row| row.split("<code>").nth(1)?.split("</code>").next())
        .collect();
    assert_eq!(in_html, by_cost, "{html}");
    for ext in ["json", "csv", "prom", "html"] {
        let _ = std::fs::remove_file(path(ext));
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// Calls of each spin function in the latency fixture's measured pass.
const LATENCY_CALLS: u64 = 200;

/// Starts the `c/latency` fixture with `LATENCY_CALLS` calls of each spin function, and
/// little recursion; `--hold` keeps it alive after its `done` line.
fn latency_fixture(hold: bool) -> Running {
    let mut command = Command::new(fixture("c/latency"));
    command.args(["--calls", &LATENCY_CALLS.to_string()]);
    command.args(["--threads", "1", "--depth", "0", "--rounds", "1"]);
    if hold {
        command.arg("--hold");
    }
    let running = Running::spawn(command);
    running.out().wait_for("ready pid=");
    running
}

/// What Java's HdrHistogram (`tests/java/HlogCheck.java`) reads in an `.hlog`: per tag,
/// the `TAG` line (`TAG t intervals=N count=N max=N`).
fn java_hlog_tags(hlog: &Path) -> Vec<String> {
    let java_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java");
    let lib = java_dir.join("target/lib");
    output_ok(
        Command::new("mvn")
            .arg("-q")
            .arg("-f")
            .arg(java_dir.join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display())),
        "mvn dependency:copy-dependencies (Maven 3)",
    );
    let out = output_ok(
        Command::new("java")
            .arg("-Duser.timezone=UTC")
            .arg("-cp")
            .arg(format!("{}/*", lib.display()))
            .arg(java_dir.join("HlogCheck.java"))
            .arg(hlog),
        "java HlogCheck.java (JDK 11+)",
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("TAG "))
        .map(str::to_string)
        .collect()
}

/// A `latency:` pair in every export, each read by its own reader (the csv crate,
/// promtool, Java's HdrHistogram for the `.hlog`, the `.hgrm` text, the HTML page): a
/// latency row whose calls are the fixture's calls, exactly, beside the probes' rows,
/// with the same percentiles as the JSON's.
#[test]
#[ignore = "needs root, the fixtures, promtool, Java and Maven"]
fn every_format_carries_a_latency_row_with_every_call() {
    let _turn = turn(module_path!());
    let mut target = latency_fixture(false);
    let base = export_path("latency-every-format");
    let path = |ext: &str| base.with_extension(ext);
    // Priced by this machine's calibration, so the corrected columns and the share are
    // there too.
    let cache = calibrated_cache("latency-exports");
    let mut cmd = probetop();
    cmd.env("XDG_CACHE_HOME", &cache)
        .args(["--pid", &target.pid().to_string(), "--no-tui"])
        .args(["-e", "latency:spin_20us"]);
    for ext in ["json", "csv", "prom", "html", "hlog", "hgrm"] {
        cmd.arg("--export").arg(path(ext));
    }
    let mut probetop = Running::spawn(cmd);
    probetop.err().wait_for("attached 2 probes");
    target.signal(libc::SIGUSR1);
    target.out().wait_for("done ");
    assert!(target.wait().success());
    let status = probetop.wait();
    assert!(status.success(), "{:?}", probetop.err().rest());
    // stdout leads with the headline, the latency table after the probes' table.
    let stdout = probetop.out().rest();
    assert!(
        stdout[0].starts_with("probes' cost to the target: +"),
        "{stdout:?}"
    );
    let probes_at = stdout.iter().position(|l| l.starts_with("PROBE "));
    let latency_at = stdout.iter().position(|l| l.starts_with("LATENCY "));
    assert!(probes_at.is_some() && latency_at > probes_at, "{stdout:?}");

    // JSON: the row every other format is held against.
    let json = read_export(&path("json"));
    let entries = json["probes"].as_array().expect("probes");
    let row = entries
        .iter()
        .find(|p| p["kind"] == "latency")
        .unwrap_or_else(|| panic!("no latency row: {json}"));
    assert_eq!(row["calls"], LATENCY_CALLS, "{row}");
    assert_eq!(row["corrected"], true, "priced: {row}");
    let measured = &row["latency_ns"];
    let corrected = &row["latency_corrected_ns"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v}"));

    // CSV: one row per JSON entry, the latency row last.
    let mut reader = csv::Reader::from_path(path("csv")).expect("csv");
    let header = reader.headers().expect("header").clone();
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), entries.len());
    let last = rows.last().expect("rows");
    assert_eq!(&last[col("kind")], "latency");
    assert_eq!(&last[col("name")], "spin_20us");
    assert_eq!(last[col("calls")].parse::<u64>().ok(), Some(LATENCY_CALLS));
    for (csv_col, value) in [
        ("p50", &measured["p50"]),
        ("p999", &measured["p999"]),
        ("max", &measured["max"]),
        ("corrected_p50", &corrected["p50"]),
        ("corrected_p99", &corrected["p99"]),
    ] {
        assert_eq!(
            last[col(csv_col)].parse::<u64>().ok(),
            Some(n(value)),
            "{csv_col}"
        );
    }
    let share: f64 = last[col("overhead_share")].parse().expect("overhead_share");
    assert!((share - row["overhead_share"].as_f64().expect("share")).abs() <= share * 1e-12);
    assert_eq!(&last[col("end_path")], "uretprobe");

    // .prom: promtool accepts it; the histogram counts every call.
    let prom = std::fs::read_to_string(path("prom")).expect("prom");
    let checked = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(path("prom")).expect("prom"))
        .output()
        .expect("run promtool (Debian package prometheus)");
    assert!(
        checked.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    for family in [
        "probetop_latency_seconds",
        "probetop_latency_corrected_seconds",
    ] {
        let count = prom
            .lines()
            .find(|l| {
                l.starts_with(&format!("{family}_count{{")) && l.contains("name=\"spin_20us\"")
            })
            .unwrap_or_else(|| panic!("no {family}_count in\n{prom}"));
        assert!(count.ends_with(&format!(" {LATENCY_CALLS}")), "{count}");
    }

    // .hlog, read by Java's HdrHistogram: a tag for each latency histogram, every call.
    let tags = java_hlog_tags(&path("hlog"));
    for (tag, summary) in [
        ("latency.spin_20us", measured),
        ("latency.spin_20us.corrected", corrected),
    ] {
        let line = format!(
            "TAG {tag} intervals=1 count={LATENCY_CALLS} max={}",
            n(&summary["max"])
        );
        assert!(tags.contains(&line), "{line} in {tags:?}");
    }

    // .hgrm: a file per latency histogram, its total count every call.
    for tag in ["latency.spin_20us", "latency.spin_20us.corrected"] {
        let file = base.with_file_name(format!(
            "{}.{tag}.hgrm",
            base.file_name().expect("name").to_string_lossy()
        ));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains(&format!("Total count    = {LATENCY_CALLS:>12}]")),
            "{text}"
        );
        let _ = std::fs::remove_file(file);
    }

    // HTML: the latency table and its plot.
    let html = std::fs::read_to_string(path("html")).expect("html");
    let at = html.find("<h2>Latency</h2>").expect("latency section");
    assert!(
        html[at..].contains(&format!(
            "<td rowspan=\"2\" class=\"n\">{LATENCY_CALLS}</td>"
        )),
        "calls in the latency table"
    );
    assert!(html[at..].contains("Latency by percentile, spin_20us"));
    for ext in ["json", "csv", "prom", "html", "hlog"] {
        let _ = std::fs::remove_file(path(ext));
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// `.hgrm` files are named by function: a two-probe run writes exactly
/// `run.work_unit.hgrm` and `run.leaf_ret.ret.hgrm` (the return probe's kind added),
/// each naming its probe in its first line and holding every hit the JSON counts.
#[test]
#[ignore = "needs root and the fixtures"]
fn hgrm_files_are_named_by_function() {
    let _turn = turn(module_path!());
    let target = workload(&["--forever", "--rate", "2000"]);
    let base = export_path("hgrm-names");
    let stem = base
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    let dir = base.parent().expect("dir").to_path_buf();
    let ours = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&format!("{stem}.")) && n.ends_with(".hgrm"))
            .collect();
        names.sort();
        names
    };
    for old in ours(&dir) {
        let _ = std::fs::remove_file(dir.join(old));
    }
    let mut cmd = probetop();
    cmd.args(["--pid", &target.pid().to_string(), "--no-tui", "-d", "2"])
        .args(["-e", "uprobe:work_unit", "-e", "uretprobe:leaf_ret"])
        .arg("--export")
        .arg(base.with_extension("hgrm"))
        .arg("--export")
        .arg(base.with_extension("json"));
    output_ok(&mut cmd, "probetop --export run.hgrm");
    let json = read_export(&base.with_extension("json"));
    let probes = json["probes"].as_array().expect("probes");
    let mut expected = Vec::new();
    for (file, kind, name) in [
        ("leaf_ret.ret", "uretprobe", "leaf_ret"),
        ("work_unit", "uprobe", "work_unit"),
    ] {
        let path = dir.join(format!("{stem}.{file}.hgrm"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("#probetop probe ")
                && first.contains(&format!(": {kind} {name} in ")),
            "{first}"
        );
        let entry = probes
            .iter()
            .find(|p| p["kind"] == kind && p["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {json}"));
        let received =
            entry["hits"].as_u64().expect("hits") - entry["dropped"].as_u64().expect("dropped");
        assert!(received > 0, "{entry}");
        assert!(
            text.contains(&format!("Total count    = {received:>12}]")),
            "{received} hits in\n{text}"
        );
        expected.push(format!("{stem}.{file}.hgrm"));
    }
    assert_eq!(ours(&dir), expected, "exactly one file per probe");
    for file in expected {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let _ = std::fs::remove_file(base.with_extension("json"));
}
