//! The probe table's columns: what a row shows of a probe ([`Numbers`], in the
//! cumulative or interval [`View`]), which columns there are, how each sorts and which fit
//! a width. The UI's state (`app`) sorts and hit-tests by them, the table (`table`) draws
//! them.

use crate::aggregate::HandlerSummary;
use crate::present::ProbeSnapshot;
use crate::present::format;

/// Cumulative numbers since attach (or reset), or those of the last closed interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum View {
    #[default]
    Cumulative,
    Interval,
}

/// The numbers of one probe in the current view.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Numbers {
    pub hits: u64,
    pub per_second: f64,
    pub dropped: u64,
    pub handler: HandlerSummary,
    pub whole_cost_ns: Option<f64>,
    pub cpu_share: Option<f64>,
    /// The median gap before a hit, us, when hits are priced by it.
    pub gap_median_us: Option<f64>,
    /// What placed its hits on the calibration's curves.
    pub reading: Option<crate::present::GapReading>,
}

impl Numbers {
    pub(crate) fn of(probe: &ProbeSnapshot, view: View) -> Self {
        match view {
            View::Cumulative => Self {
                hits: probe.hits,
                per_second: probe.per_second,
                dropped: probe.dropped,
                handler: probe.handler,
                whole_cost_ns: probe.whole_cost_ns,
                cpu_share: probe.cpu_share,
                gap_median_us: probe.gap_median_us,
                reading: probe.reading,
            },
            View::Interval => Self {
                hits: probe.interval.hits,
                per_second: probe.interval.per_second,
                dropped: probe.interval.dropped,
                handler: probe.interval.handler,
                whole_cost_ns: probe.whole_cost_ns,
                cpu_share: probe.cpu_share,
                gap_median_us: probe.gap_median_us,
                reading: probe.reading,
            },
        }
    }
}

/// Narrowest the probe name column may get before numeric columns are hidden.
pub(super) const NAME_MIN_WIDTH: u16 = 18;
pub(super) const COLUMN_SPACING: u16 = 1;

/// What the table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortColumn {
    Name,
    Hits,
    PerSecond,
    CpuShare,
    WholeCost,
    Min,
    P50,
    P90,
    P99,
    P999,
    Max,
    Mean,
    Drops,
}

impl SortColumn {
    /// The value sorted on; `None` sorts last (no data yet).
    pub(crate) fn key(self, n: &Numbers) -> Option<f64> {
        let has_hits = n.handler.count > 0;
        let handler = |v: u64| has_hits.then_some(v as f64);
        match self {
            Self::Name => None,
            Self::Hits => Some(n.hits as f64),
            Self::PerSecond => Some(n.per_second),
            Self::CpuShare => n.cpu_share,
            Self::WholeCost => n.whole_cost_ns,
            Self::Min => handler(n.handler.min),
            Self::P50 => handler(n.handler.p50),
            Self::P90 => handler(n.handler.p90),
            Self::P99 => handler(n.handler.p99),
            Self::P999 => handler(n.handler.p999),
            Self::Max => handler(n.handler.max),
            Self::Mean => has_hits.then_some(n.handler.mean),
            Self::Drops => Some(n.dropped as f64),
        }
    }

    /// Names read A to Z; numbers read biggest first, as in top.
    pub(crate) fn descending_by_default(self) -> bool {
        self != Self::Name
    }
}

/// A numeric column of the probe table.
pub(super) struct Column {
    pub title: &'static str,
    pub width: u16,
    /// Lower is kept longer when the terminal is narrow.
    pub priority: u8,
    pub sort: SortColumn,
    pub value: fn(&Numbers) -> String,
}

/// A handler-time cell: blank without hits.
fn handler_ns(n: &Numbers, value: u64) -> String {
    if n.handler.count == 0 {
        "-".into()
    } else {
        format::ns(value)
    }
}

/// A cost cell: `-` for a probe without hits (it cost nothing, and its price per hit
/// would read as what it cost) or without a price.
fn cost_cell(n: &Numbers, value: Option<String>) -> String {
    match value {
        Some(v) if n.hits > 0 => v,
        _ => "-".into(),
    }
}

/// A count in full while it fits a column `width` wide, abbreviated (`1.03M`) beyond:
/// the table cuts what does not fit, and a cut number reads as another one.
fn count_cell(value: u64, width: u16) -> String {
    let full = value.to_string();
    if full.len() <= usize::from(width) {
        full
    } else {
        format::count(value as f64)
    }
}

/// Where the handler's columns start in [`COLUMNS`]: the ones before say what the probes
/// cost the target; these, the time the BPF program itself took, a part of that cost.
pub(super) const HANDLER_FROM: usize = 5;

/// The cost columns first (what a hit costs the target, the share of a CPU), then the
/// rates, then the BPF handler's own time.
pub(super) const COLUMNS: [Column; 12] = [
    Column {
        title: "COST/HIT",
        // The title and the sort mark; %CPU gives the cell back (its widest, `99.9%`
        // or `1000%`, and `%CPU▼` are 5).
        width: 9,
        priority: 0,
        sort: SortColumn::WholeCost,
        value: |n| cost_cell(n, n.whole_cost_ns.map(format::ns_f)),
    },
    Column {
        title: "%CPU",
        width: 5,
        priority: 0,
        sort: SortColumn::CpuShare,
        value: |n| cost_cell(n, n.cpu_share.map(format::percent)),
    },
    Column {
        title: "HITS/S",
        width: 7,
        priority: 0,
        sort: SortColumn::PerSecond,
        value: |n| format::count(n.per_second),
    },
    Column {
        title: "HITS",
        width: 9,
        priority: 1,
        sort: SortColumn::Hits,
        value: |n| count_cell(n.hits, 9),
    },
    Column {
        title: "DROPS",
        width: 6,
        priority: 0,
        sort: SortColumn::Drops,
        value: |n| count_cell(n.dropped, 6),
    },
    Column {
        title: "MIN",
        width: 6,
        priority: 2,
        sort: SortColumn::Min,
        value: |n| handler_ns(n, n.handler.min),
    },
    Column {
        title: "P50",
        width: 6,
        priority: 0,
        sort: SortColumn::P50,
        value: |n| handler_ns(n, n.handler.p50),
    },
    Column {
        title: "P90",
        width: 6,
        priority: 3,
        sort: SortColumn::P90,
        value: |n| handler_ns(n, n.handler.p90),
    },
    Column {
        title: "P99",
        width: 6,
        priority: 0,
        sort: SortColumn::P99,
        value: |n| handler_ns(n, n.handler.p99),
    },
    Column {
        title: "P99.9",
        width: 6,
        priority: 2,
        sort: SortColumn::P999,
        value: |n| handler_ns(n, n.handler.p999),
    },
    Column {
        title: "MAX",
        width: 6,
        priority: 1,
        sort: SortColumn::Max,
        value: |n| handler_ns(n, n.handler.max),
    },
    Column {
        title: "MEAN",
        width: 6,
        priority: 3,
        sort: SortColumn::Mean,
        value: |n| {
            if n.handler.count == 0 {
                "-".into()
            } else {
                format::ns_f(n.handler.mean)
            }
        },
    },
];

/// The numeric columns that fit beside a readable probe name in `width` cells, least
/// important dropped first.
pub(super) fn visible_columns(width: u16) -> Vec<&'static Column> {
    let mut shown: Vec<&Column> = COLUMNS.iter().collect();
    let needed = |cols: &[&Column]| {
        NAME_MIN_WIDTH + cols.iter().map(|c| c.width + COLUMN_SPACING).sum::<u16>()
    };
    for priority in (0..=3).rev() {
        if needed(&shown) <= width {
            break;
        }
        // Even the essential columns do not fit: keep what fits, left to right.
        if priority == 0 {
            let mut used = NAME_MIN_WIDTH;
            shown.retain(|c| {
                used += c.width + COLUMN_SPACING;
                used <= width
            });
            break;
        }
        shown.retain(|c| c.priority < priority);
    }
    shown
}

/// The OWNER column: shown when some row is another tool's probe or shares its
/// breakpoint with one, and the table is wide enough to keep it beside the essential
/// columns.
pub(super) const OWNER_WIDTH: u16 = 18;
const OWNER_TABLE_MIN: u16 = 100;

/// Whether the OWNER column is shown, and the numeric columns beside it, for a table
/// `width` cells wide.
pub(super) fn layout(
    labels: &[crate::present::ProbeLabel],
    width: u16,
) -> (bool, Vec<&'static Column>) {
    let owner = width >= OWNER_TABLE_MIN && labels.iter().any(|l| l.owner.is_some());
    let left = if owner {
        width - OWNER_WIDTH - COLUMN_SPACING
    } else {
        width
    };
    (owner, visible_columns(left))
}
