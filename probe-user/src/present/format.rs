//! Human-readable numbers, shared by the TUI and the summary table.

/// Nanoseconds with a unit that keeps three significant digits: `812ns`, `1.23us`, `45.6ms`.
pub(crate) fn ns(value: u64) -> String {
    const UNITS: [(f64, &str); 3] = [(1e9, "s"), (1e6, "ms"), (1e3, "us")];
    for (scale, unit) in UNITS {
        let v = value as f64 / scale;
        if v >= 1.0 {
            return format!("{}{unit}", three_digits(v));
        }
    }
    format!("{value}ns")
}

/// Fractional nanoseconds (means), same units as [`ns`].
pub(crate) fn ns_f(value: f64) -> String {
    if value < 1000.0 {
        format!("{}ns", three_digits(value))
    } else {
        ns(value.round() as u64)
    }
}

fn three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Counts with k/M/G suffixes past 10,000: `9999`, `12.3k`, `4.56M`.
pub(crate) fn count(value: f64) -> String {
    const UNITS: [(f64, &str); 3] = [(1e9, "G"), (1e6, "M"), (1e3, "k")];
    if value < 10_000.0 {
        return format!("{value:.0}");
    }
    for (scale, unit) in UNITS {
        if value >= scale {
            return format!("{}{unit}", three_digits(value / scale));
        }
    }
    format!("{value:.0}")
}

/// Bytes with a binary unit: `512B`, `12.3KiB`, `45.6MiB`.
pub(crate) fn bytes(value: u64) -> String {
    const UNITS: [(f64, &str); 3] = [
        (1_073_741_824.0, "GiB"),
        (1_048_576.0, "MiB"),
        (1024.0, "KiB"),
    ];
    for (scale, unit) in UNITS {
        let v = value as f64 / scale;
        if v >= 1.0 {
            return format!("{}{unit}", three_digits(v));
        }
    }
    format!("{value}B")
}

/// A share of one CPU as a percentage: `0.0%`, `12.3%`, `150%`.
pub(crate) fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p >= 100.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// A short duration in seconds: `1s`, `0.5s`, `2.25s`.
pub(crate) fn seconds(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    let text = format!("{s:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}s")
}

/// A duration as a clock: `0:07`, `12:34`, `1:02:03`.
pub(crate) fn clock(elapsed: std::time::Duration) -> String {
    let s = elapsed.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// A handler summary as every view shows it: min, p50, p90, p99, p99.9, max, mean.
pub(crate) fn handler_cells(h: &crate::aggregate::HandlerSummary) -> [String; 7] {
    [
        ns(h.min),
        ns(h.p50),
        ns(h.p90),
        ns(h.p99),
        ns(h.p999),
        ns(h.max),
        ns_f(h.mean),
    ]
}

/// A latency pair's overhead: the probes' whole cost per call over the corrected mean
/// call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Overhead {
    /// Not priced yet, or no call ended.
    Unknown,
    Share(f64),
    /// The probes cost as much as the call or more: the correction took the call to
    /// (nearly) nothing, and a share over 100% (a 3 us `COM_STMT_CLOSE` under the mysql
    /// preset's single-stepped returns read 1,000% and more) says no more than that.
    MoreThanTheCall,
}

impl Overhead {
    /// `row`'s, as every surface that shows it says it.
    pub(crate) fn of(row: &crate::aggregate::LatencyRow) -> Self {
        Self::from_parts(
            row.whole_cost_ns,
            row.overhead_share,
            row.corrected_applied && row.latency_corrected_ns.count > 0,
        )
    }

    /// From the probes' cost per call, its share of the corrected mean, and whether
    /// calls were corrected.
    fn from_parts(whole_ns: Option<f64>, share: Option<f64>, corrected: bool) -> Self {
        match (whole_ns, share) {
            (None, _) => Self::Unknown,
            (Some(_), Some(share)) if share < 1.0 => Self::Share(share),
            (Some(_), Some(_)) => Self::MoreThanTheCall,
            // Priced, and every call corrected to nothing.
            (Some(_), None) if corrected => Self::MoreThanTheCall,
            (Some(_), None) => Self::Unknown,
        }
    }

    /// In a table's cell: `4.2%`, `more than the call`, `-`.
    pub(crate) fn cell(self) -> String {
        match self {
            Self::Unknown => "-".into(),
            Self::Share(share) => percent(share),
            Self::MoreThanTheCall => "more than the call".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe pair dearer than the call it times is said in words, never as 1,240%.
    #[test]
    fn an_overhead_over_the_call_is_said_in_words() {
        let row = |whole: Option<f64>, share: Option<f64>, corrected_calls: u64| {
            Overhead::from_parts(whole, share, corrected_calls > 0)
        };
        assert_eq!(row(Some(300.0), Some(0.042), 10).cell(), "4.2%");
        // COM_STMT_CLOSE: 3 us measured, 10.5 us of probes, corrected to 0.25 us.
        let close = row(Some(10_500.0), Some(42.0), 10);
        assert_eq!(close, Overhead::MoreThanTheCall);
        assert_eq!(close.cell(), "more than the call");
        assert_eq!(row(Some(1000.0), Some(1.0), 10), Overhead::MoreThanTheCall);
        // Every call corrected to 0: no share, still more than the call.
        assert_eq!(row(Some(10_500.0), None, 10), Overhead::MoreThanTheCall);
        // Not priced, or no call ended: unknown.
        assert_eq!(row(None, None, 10).cell(), "-");
        assert_eq!(row(Some(10_500.0), None, 0).cell(), "-");
    }

    #[test]
    fn nanoseconds() {
        assert_eq!(ns(0), "0ns");
        assert_eq!(ns(812), "812ns");
        assert_eq!(ns(1_234), "1.23us");
        assert_eq!(ns(45_600_000), "45.6ms");
        assert_eq!(ns(2_000_000_000), "2.00s");
        assert_eq!(ns_f(12.345), "12.3ns");
        assert_eq!(ns_f(1500.0), "1.50us");
    }

    #[test]
    fn counts() {
        assert_eq!(count(9999.0), "9999");
        assert_eq!(count(12_345.0), "12.3k");
        assert_eq!(count(4_560_000.0), "4.56M");
        assert_eq!(count(0.4), "0");
    }

    #[test]
    fn bytes_percent_clock() {
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(12_900_000), "12.3MiB");
        assert_eq!(percent(0.123), "12.3%");
        assert_eq!(percent(1.5), "150%");
        assert_eq!(clock(std::time::Duration::from_secs(67)), "1:07");
        assert_eq!(seconds(std::time::Duration::from_secs(1)), "1s");
        assert_eq!(seconds(std::time::Duration::from_millis(2250)), "2.25s");
        assert_eq!(clock(std::time::Duration::from_secs(3723)), "1:02:03");
    }
}
