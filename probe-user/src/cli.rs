//! Command-line interface.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// top for user-space probes: attach uprobes, uretprobes and USDT probes to a live
/// process and watch what every hit costs, as live HDR histograms.
#[derive(Debug, Parser)]
#[command(
    name = "probetop",
    version,
    args_conflicts_with_subcommands = true,
    after_help = "The status line, the summary and every export lead with what all probes together cost the target: a share of one CPU, set against the target's own CPU. Per-probe costs do not add up to it: one probe's hit warms the caches the next probe's hit runs in, so a probe alone costs more than within a set, and detaching one moves its neighbours' costs. Read the set's number; --in-situ measures it on the target."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The usage printed when probetop is run with nothing to do.
pub(crate) const USAGE: &str = concat!(
    "usage: probetop --pid PID [-e SPEC]... [--preset NAME] [OPTIONS]  watch what probes cost a process\n",
    "         SPEC: uprobe:FUNC, uretprobe:FUNC, usdt:PROVIDER:NAME, latency:FUNC; --pid PID alone: other tools' probes on it\n",
    "       probetop list [--pid PID | FILE] [PATTERN]                   what a process or file can be probed at\n",
    "       probetop calibrate                                           measure what a hit costs here (20-40 s)\n",
    "       probetop diff A.json B.json [--fail-above PCT]               compare two runs' exports\n",
    "example: probetop --pid $(pidof mariadbd) --preset mysql\n",
    "probetop --help lists every option; probetop man prints the manual",
);

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List the probe points of a process or a file: functions and USDT probes.
    List(ListArgs),
    /// Measure what a probe hit costs on this machine, per cost class, and cache it
    /// for whole-cost estimates (20-40 s on up to one CPU; once per kernel and CPU).
    Calibrate(CalibrateArgs),
    /// Compare two runs' exports (.json or .hlog) probe by probe: rates, p50 to p99.9
    /// and cost per hit, with a test on the distributions and on the counts; exits 1
    /// with --fail-above on a regression, 2 on bad input.
    Diff(DiffArgs),
    /// The calibration's workload (run by `calibrate` itself).
    #[command(name = "__calibrate-workload", hide = true)]
    CalibrateWorkload,
    /// Print the completion script of a shell on stdout (the release tarball ships
    /// bash's, zsh's and fish's).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page on stdout (`probetop man | man -l -`), or write every page
    /// (probetop.1, probetop-list.1, ...) into DIR.
    Man { dir: Option<PathBuf> },
}

#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Measure longer (2-3 minutes instead of 20-40 s): more and longer repetitions of
    /// every case and curve; prints them all.
    #[arg(long)]
    pub thorough: bool,

    /// The default's length (20-40 s); kept for scripts written when it was not.
    #[arg(long, hide = true, conflicts_with = "thorough")]
    pub quick: bool,

    /// Print every row and curve measured, not only the three-line result.
    #[arg(short, long)]
    pub verbose: bool,

    /// Repetitions of every case (default 15, --thorough 31; 3 to 1000).
    #[arg(long, value_name = "N", value_parser = whole::<usize>(3, 1000, "a median and quartiles need at least 3"))]
    pub reps: Option<usize>,

    /// Skip the dispatch-measurement phase (fentry/fexit).
    #[arg(long)]
    pub no_dispatch: bool,

    /// Print the calibration as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Do not write the result to the cache (~/.cache/probetop).
    #[arg(long)]
    pub no_save: bool,

    /// Skip the cold cases (the loop that evicts caches between two hits).
    #[arg(long)]
    pub no_cold: bool,

    /// The cold loop's data walk, in MiB (default: this CPU's L2, 2 if unknown; the
    /// last-level cache, e.g. 32, for an upper bound; 0 to 4096).
    #[arg(long, value_name = "MIB", value_parser = real(0.0, 4096.0, "MiB"))]
    pub cold_data_mib: Option<f64>,

    /// The cold loop's code footprint, in MiB (default 0.5; 4 for an upper bound; 0 to
    /// 4096).
    #[arg(long, value_name = "MIB", value_parser = real(0.0, 4096.0, "MiB"))]
    pub cold_code_mib: Option<f64>,

    /// Iterations of the cold loop per run (one hit each; 1 to 10^9).
    #[arg(long, value_name = "N", hide = true, value_parser = whole::<u64>(1, 1_000_000_000, "iterations"))]
    pub cold_iters: Option<u64>,

    /// The cold cases alone, not saved: for studies of the cold loop's sizes.
    #[arg(long, hide = true)]
    pub cold_only: bool,

    /// Skip the gap and work curves (a hit after sleeps of 2 us to 2 ms between calls,
    /// and after footprints walked between them), which `--assume clock` prices hits with.
    #[arg(long)]
    pub no_gap: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The run before: a .json or .hlog export of probetop's.
    pub a: PathBuf,
    /// The run after, compared against A.
    pub b: PathBuf,

    /// Exit 1 when a probe's --metric rose by more than PCT percent, and by more than
    /// the measurement's resolution (the clock's step or the histogram's bucket width,
    /// at least 20 ns), with its distribution significantly different (for CI; 0 to
    /// 10^6). Without it, rows are flagged above 10% and the exit status is 0.
    #[arg(long, value_name = "PCT", value_parser = real(0.0, 1e6, "percent"))]
    pub fail_above: Option<f64>,

    /// What a regression is measured on: the p50, p90, p99 or p99.9 of the handler
    /// time (a probe) or of the latency (a latency pair), the whole cost per hit, or the
    /// rate (hits/s, judged by the rate test; a --budget run's by its scaled hits'
    /// interval).
    #[arg(long, value_enum, default_value_t = crate::present::export::diff::Metric::P50)]
    pub metric: crate::present::export::diff::Metric,

    /// Significance level over all rows, split evenly between them (Bonferroni; above 0,
    /// at most 0.5).
    #[arg(long, value_name = "P", default_value_t = 0.001, value_parser = real(1e-12, 0.5, "(a probability)"))]
    pub alpha: f64,

    /// Print the comparison as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Also write an HTML page with each probe's two distributions overlaid.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// List what process PID has mapped (its executable first).
    #[arg(short, long, value_name = "PID", value_parser = pid())]
    pub pid: Option<u32>,

    /// Without --pid: the ELF file to list, then an optional PATTERN. With --pid: PATTERN.
    #[arg(value_name = "PATH | PATTERN")]
    pub operands: Vec<String>,

    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,

    /// Ask no debuginfod server (DEBUGINFOD_URLS) for the debug file of a stripped
    /// object.
    #[arg(long)]
    pub offline: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Process to probe; repeatable: the specs are resolved in the first, and hits
    /// count in every one that maps the same files.
    #[arg(short, long = "pid", value_name = "PID", value_parser = pid())]
    pub pids: Vec<u32>,

    /// Every process whose mapped objects carry user-space probes of any tool, one row
    /// each: probes, hits/s, what they cost it and who put them there, sorted by CPU
    /// share; Enter opens one as --pid would. Not with --pid, -e, -f, --preset.
    #[arg(long)]
    pub all: bool,

    /// Probe the --pid processes and every process forked from them, now and later
    /// (hits are counted per process: the JSON's `pids`, the TUI's detail pane).
    #[arg(short = 'F', long)]
    pub follow_forks: bool,

    /// Probe every process in this cgroup v2 directory and its sub-cgroups, now and
    /// later (with --pid: those too; without: the specs are resolved in its first process).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Probe to attach, repeatable: uprobe:FUNC, uretprobe:FUNC, usdt:\[PROVIDER:\]NAME,
    /// latency:FUNC (each call's latency), with an optional OBJECT: before FUNC (a path
    /// or a library name like libc); uprobe:FUNC+OFFSET or uprobe:0xADDR probes an
    /// instruction inside FUNC; uprobe:FUNC+ret probes each ret instruction of FUNC, its
    /// returns without a uretprobe (safe where exceptions unwind through FUNC; a return
    /// an exception unwinds is not counted).
    #[arg(short = 'e', long = "probe", value_name = "SPEC")]
    pub probes: Vec<String>,

    /// Read probe specs from a file, one a line; `#` starts a comment.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub spec_file: Option<PathBuf>,

    /// Attach a built-in set of probes, repeatable: `mysql` (MySQL and MariaDB's
    /// request path: do_command, dispatch_command and its returns, mysql_parse,
    /// Prepared_statement::execute_loop, mysql_execute_command); `postgres`
    /// (PostgreSQL's statement, transaction and lock-wait USDT probes and ExecutorStart:
    /// probe the postmaster with --follow-forks).
    #[arg(long = "preset", value_name = "NAME")]
    pub presets: Vec<String>,

    /// Stop after this many seconds (above 0, at most a year: 31536000).
    #[arg(short, long, value_name = "SECS", value_parser = seconds(f64::MIN_POSITIVE, 31_536_000.0))]
    pub duration: Option<f64>,

    /// No terminal UI: print `attached` once probes are live, then a summary at the end.
    #[arg(long)]
    pub no_tui: bool,

    /// When the target execs another program, keep going: detach its probes (their
    /// measurements are kept, marked as before the exec), resolve the same specs in the
    /// new program and attach them there. Without it, an exec ends the run.
    #[arg(long)]
    pub follow_exec: bool,

    /// Write the measurements at exit; the format follows the extension: .json, .csv,
    /// .html, .svg, .hlog (HdrHistogram interval log), .hgrm (one percentile
    /// distribution per probe), .prom (Prometheus text). Repeatable.
    #[arg(short = 'o', long = "export", value_name = "FILE")]
    pub exports: Vec<PathBuf>,

    /// Interval of the histograms in an .hlog export, of the TUI's last-interval view
    /// (`i`) and time series, and of --otlp's pushes, in seconds (0.01 to 3600).
    #[arg(long, value_name = "SECS", default_value_t = 1.0, value_parser = seconds(0.01, 3600.0))]
    pub interval: f64,

    /// Serve the live measurements in the Prometheus text format at
    /// http://ADDR:PORT/metrics (fleet mode), with or without the TUI. Port 0 picks a
    /// free port; the address served is printed on stderr.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,

    /// Push the live measurements to an OpenTelemetry Collector over OTLP/HTTP
    /// (protobuf) every --interval, and the final ones at exit: http://HOST:PORT or https:// (4318
    /// is OTLP/HTTP's port; /v1/metrics is appended unless the URL ends with it).
    #[arg(long, value_name = "URL", value_parser = otlp_url)]
    pub otlp: Option<String>,

    /// Capture up to N argument values with each hit (USDT arguments, function
    /// arguments in registers, or a uretprobe's return value); the TUI shows the last
    /// (0 to 12).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = whole::<usize>(
        0,
        probe_common::MAX_ARGS,
        "a hit carries at most 12 argument values (the most a USDT site has, as in libbpf)",
    ))]
    pub args: usize,

    /// Split the rows of the -e and -f specs by an argument's value, one row per
    /// value: argN or argN:FORMAT, FORMAT an integer type (i8..i64, u8..u64; default the
    /// USDT note's, or 64 bits for a function's register), str (the argument points at
    /// a string: its first 32 bytes) or a name table (mysql-command). A spec's own
    /// suffix ` key=argN[:FORMAT]` does the same for that spec alone.
    #[arg(long, value_name = "argN[:FORMAT]", value_parser = key_spec)]
    pub key: Option<crate::spec::KeySpec>,

    /// Distinct keys of a keyed row at most; the calls or hits of any further value
    /// are counted in one row, `other` (1 to 100000).
    #[arg(long, value_name = "N", default_value_t = crate::aggregate::DEFAULT_MAX_KEYS,
        value_parser = whole::<usize>(1, 100_000, "distinct keys of a row"))]
    pub max_keys: usize,

    /// Refuse a spec that matches more probe points than this, and specs that match
    /// more than this in all (identical points counted once; 1 to 1000000).
    #[arg(long, value_name = "N", default_value_t = crate::resolve::DEFAULT_MAX_PROBES,
        value_parser = whole::<usize>(1, 1_000_000, "probe points"))]
    pub max_probes: usize,

    /// Write exports even through a symbolic link (refused by default: probetop runs
    /// as root); attach uretprobes to Go functions (refused by default: Go moves
    /// goroutine stacks, which breaks return probes and can crash the target), or to
    /// functions an exception can unwind through (refused by default: the unwinder
    /// cannot pass a uretprobe's return address and terminates the target; use
    /// uprobe:FUNC+ret instead); probe a
    /// process under ptrace (refused by default: a debugger's breakpoints and uprobes on
    /// the same function interfere, and can kill the target with SIGTRAP); probe a
    /// 5-byte nop past a function's entry on a kernel that optimizes it (refused by
    /// default: its call writes below %rsp, over the function's red zone).
    #[arg(long)]
    pub force: bool,

    /// Ask no debuginfod server (DEBUGINFOD_URLS) for the debug file of a stripped
    /// object: names come only from the files on this host.
    #[arg(long)]
    pub offline: bool,

    /// Ring buffer size in MiB (a power of two, 1 to 2048).
    #[arg(long, value_name = "MIB", default_value_t = 8, value_parser = power_of_two(1, 2048, "MiB"))]
    pub ring_mib: u32,

    /// Ring buffer size in KiB instead (a power of two, at least 4): a tiny buffer
    /// overflows at once, which tests drop accounting.
    #[arg(long, value_name = "KIB", conflicts_with = "ring_mib", hide = true,
        value_parser = power_of_two(4, 2048 << 10, "KiB"))]
    pub ring_kib: Option<u32>,

    /// How hits reach probetop: `auto` (the default) streams every hit, as `ring` does,
    /// until the probes streaming pass --auto-above hits/s together or the ring buffer
    /// drops records, then aggregates the busiest in the kernel until the rest fit,
    /// saying each move once (hits stay exact); `ring` streams every hit and never moves
    /// one (a full ring buffer drops records: counted, not timed); `sample` streams one
    /// hit in --sample-every and counts all in the kernel; `kernel` aggregates in the
    /// kernel (cheapest per hit, histogram within 3.2%, no per-hit records). `kernel`
    /// times one hit in --time-every.
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,

    /// With --mode sample: stream one hit in this many (1 to 10^9).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = whole::<u32>(
        1,
        1_000_000_000,
        "give 1 to stream every hit, or N to stream one hit in N",
    ))]
    pub sample_every: u32,

    /// With --mode kernel, and --mode auto once it moves a probe into the kernel: time
    /// the handler of one hit in N, chosen at random per CPU (default 64); every hit is
    /// still counted. Two clock reads are most of what the in-kernel handler costs a hit;
    /// `--time-every 1` times every hit. The other modes time every hit, whose records
    /// carry it. 1 to 10^9.
    #[arg(long, value_name = "N", value_parser = whole::<u64>(
        1,
        1_000_000_000,
        "give 1 to time every hit, or N to time one hit in N",
    ))]
    pub time_every: Option<u64>,

    /// With --mode kernel and --assume auto or clock: stream every hit, timed, for
    /// this long first, then aggregate in the kernel. The ring handler's clock on those
    /// hits says how cold the target runs each probe, which prices its in-kernel hits
    /// (the in-kernel handler's own clock cannot: docs/cost.md). Costs the target the
    /// ring mode's price for that long. 0: never; hits a clock would price are then
    /// priced cold. At most 3600.
    #[arg(long, value_name = "SECS", default_value_t = 3.0, value_parser = seconds(0.0, 3600.0))]
    pub clock_seconds: f64,

    /// With --mode auto: the hits/s every streaming probe together may send through the
    /// ring buffer; above it the busiest are aggregated in the kernel (1 to 10^9).
    #[arg(long, value_name = "HITS_PER_S", default_value_t = 200_000.0, value_parser = real(1.0, 1e9, "hits/s"))]
    pub auto_above: f64,

    /// Do not measure kernel dispatch time (fentry/fexit around the kernel's uprobe
    /// handling, ~100 ns per hit more on the target while on); whole cost then comes
    /// from calibration alone.
    #[arg(long)]
    pub no_dispatch: bool,

    /// Price hits with the calibration's hot loop (caches warm between hits: a tight
    /// loop), its cold loop (a server's code and data run between hits), the handler's
    /// clock (how slow probetop's handler ran on each hit: how cold it was; cold where
    /// it cannot be read), or auto: hot for a program of at most 8 MiB of code hitting
    /// each busy thread at least every 10 us; otherwise the clock where the calibration
    /// has it, else cold. (`gap`, retired, is taken as `clock`.)
    #[arg(long, value_enum, value_name = "CACHES", default_value_t = crate::price::assume::AssumeChoice::Auto)]
    pub assume: crate::price::assume::AssumeChoice,

    /// Turn on the kernel's BPF run statistics for the run (costs every BPF program on
    /// the host ~20-40 ns per run) to report what other BPF programs on the target's
    /// probes cost; they go off again when probetop exits.
    #[arg(long)]
    pub bpf_stats: bool,

    /// Measure what the probes cost the target on the target itself: alternate windows
    /// with every probe attached and detached, and compare the target's CPU time per
    /// unit of work (--work) between them. Hits are counted in the attached windows only.
    /// With several processes (-F, --cgroup, several --pid) their CPU and work are summed.
    #[arg(long)]
    pub in_situ: bool,

    /// With --in-situ: the length of a window, in seconds (each is drawn within 20% of
    /// it, so a periodic load cannot line up with the windows; 0.1 to 3600).
    #[arg(long, value_name = "SECS", default_value_t = 1.0, value_parser = seconds(0.1, 3600.0))]
    pub in_situ_window: f64,

    /// With --in-situ: the unit of the target's work (summed over a process set). syscalls: /proc/PID/io's syscr +
    /// syscw (a server makes a few reads and writes per request); wakeups: its threads'
    /// voluntary context switches (a request wakes a thread; for servers on recv/send,
    /// like mariadbd);
    /// none: CPU per second, for a load that comes at a fixed rate; auto: the first of
    /// syscalls and wakeups that moves.
    #[arg(long, value_enum, value_name = "METER", default_value_t = crate::insitu::WorkMeter::Auto)]
    pub work: crate::insitu::WorkMeter,

    /// Keep what the probes cost the target at or under a budget over every
    /// --budget-window: a share of its CPU time (2%) or CPU time per second (20ms/s).
    /// Every probe is then attached for a fraction of short periods (the duty, chosen
    /// from the measured cost), and hits and rates are scaled to the whole run with a
    /// 95% interval.
    #[arg(long, value_name = "PCT|MS/s", value_parser = crate::insitu::budget::Budget::parse)]
    pub budget: Option<crate::insitu::budget::Budget>,

    /// With --budget: the window the budget holds over, in seconds (1 to 3600).
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = seconds(1.0, 3600.0))]
    pub budget_window: f64,
}

/// How hits reach user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    Ring,
    Sample,
    Kernel,
    Auto,
}

// Every number on the command line is checked here, by the parser, so that an edge
// (`--interval 1e19`, `--clock-seconds inf`, `--auto-above nan`) is one line and exit 2
// before anything is opened, never a panic in a conversion later (issue 30).

/// A pid: a positive `pid_t`.
fn pid() -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    whole::<u32>(1, i32::MAX as u32, "a pid is a positive number")
}

/// A whole number in `min..=max`; `why` says what the range is for.
fn whole<T>(
    min: T,
    max: T,
    why: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy + Send + Sync + 'static,
{
    move |text: &str| match text.trim().parse::<T>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ if why.starts_with("give ") => Err(format!("{why} (from {min} to {max})")),
        _ => Err(format!("{why}: give a whole number from {min} to {max}")),
    }
}

/// `--key argN[:FORMAT]`.
fn key_spec(text: &str) -> Result<crate::spec::KeySpec, String> {
    crate::spec::KeySpec::parse(text.trim())
}

/// A power of two in `min..=max` `unit`s.
fn power_of_two(
    min: u32,
    max: u32,
    unit: &'static str,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    move |text: &str| match text.trim().parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) && n.is_power_of_two() => Ok(n),
        _ => Err(format!(
            "give a power of two from {min} to {max} {unit} ({min}, {}, {}, ...)",
            min * 2,
            min * 4
        )),
    }
}

/// A finite number in `min..=max` `unit`s (NaN and infinities refused).
fn real(
    min: f64,
    max: f64,
    unit: &'static str,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text: &str| match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (min..=max).contains(&x) => Ok(x),
        _ => Err(format!("give a number from {min} to {max} {unit}")),
    }
}

/// Seconds in `min..=max`; `min` of `f64::MIN_POSITIVE` reads "above 0".
fn seconds(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text: &str| match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (min..=max).contains(&x) => Ok(x),
        _ if min == f64::MIN_POSITIVE => {
            Err(format!("give a number of seconds above 0, at most {max}"))
        }
        _ => Err(format!("give a number of seconds from {min} to {max}")),
    }
}

/// `--otlp`'s URL, with `/v1/metrics`.
fn otlp_url(text: &str) -> Result<String, String> {
    crate::present::otlp::metrics_url(text.trim()).ok_or_else(|| {
        "give an http:// or https:// URL of an OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318"
            .into()
    })
}

/// A value the parser refused, as probetop's one line: `--flag VALUE: why`; `None` for
/// the other errors of clap's, which clap words itself.
pub(crate) fn refused_value_line(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::ValueValidation {
        return None;
    }
    let text = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let flag = text(ContextKind::InvalidArg)?;
    // `--interval <SECS>` or `-d <SECS>`: the flag alone.
    let flag = flag.split_whitespace().next().unwrap_or(&flag).to_string();
    let value = text(ContextKind::InvalidValue).unwrap_or_default();
    let why = std::error::Error::source(error).map_or_else(String::new, ToString::to_string);
    Some(crate::sys::stderr::one_line(&format!("{flag} {value}: {why}")).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(args: &[&str]) -> String {
        let error = Cli::try_parse_from([&["probetop"], args].concat()).expect_err("refused");
        refused_value_line(&error).unwrap_or_else(|| panic!("not a value error: {error}"))
    }

    #[test]
    fn numbers_at_the_edges_are_refused_in_one_line() {
        assert_eq!(
            refused(&["--interval", "1e19"]),
            "--interval 1e19: give a number of seconds from 0.01 to 3600"
        );
        assert_eq!(
            refused(&["-d", "nan"]),
            "--duration nan: give a number of seconds above 0, at most 31536000"
        );
        assert_eq!(
            refused(&["--ring-mib", "3"]),
            "--ring-mib 3: give a power of two from 1 to 2048 MiB (1, 2, 4, ...)"
        );
        assert!(refused(&["--pid", "0"]).starts_with("--pid 0: a pid is a positive number"));
        let ok = Cli::try_parse_from(["probetop", "--clock-seconds", "0", "-d", "1e-3"])
            .expect("in range");
        assert_eq!(ok.run.clock_seconds, 0.0);
    }
}
