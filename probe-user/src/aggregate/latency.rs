//! Latency pairs (`latency:` specs): each start hit (a function's entry, a USDT `START`)
//! paired with its end hit (the function's return, `END`) on the same thread, the
//! difference of their clocks one call's latency.
//!
//! Pairing: per pair and thread a stack of open calls, so nested and recursive calls
//! pair with their own ends and threads never mix. The probes of a pair stream every hit
//! with the stack pointer (`session::probe`), written to the ring at once, so one
//! thread's records arrive in the order it made them. For a function, the pointer at the
//! entry points at the return address; at a `ret` instruction it is the same, and at a
//! uretprobe (the return address popped) 8 more. An entry at or above an open call's
//! pointer, or a return above it, means that call's frame is gone without a return seen
//! (an exception or a longjmp unwound it): it ends as unwound, never as a stale start.
//! USDT pairs have no frame to check and pair last-in, first-out.
//!
//! Correction: a probed call runs slower by the part of the probes' own cost that falls
//! between the two clock reads: what follows the start probe's clock read (the rest of
//! its program, measured by its own clock, then the kernel's return to the target and
//! the probed instruction's emulation or single step) and what precedes the end probe's
//! (the trap and the kernel's dispatch to the program). The cost model prices each
//! probe's whole hit (the price stage's estimate) and its program is timed; the rest of
//! a hit, outside the program, is taken as half before the program and half after it.
//! So the part inside a call is `handler(start) + (whole(start) - handler(start)) / 2 +
//! (whole(end) - handler(end)) / 2`, and each probed hit nested inside the call
//! (recursion, a probed callee) adds its whole cost. A call with nothing nested is
//! corrected by the last price when the rows are read; one with nested hits by the
//! price when it ended (prices set by the price stage with each snapshot, every 100 ms).

use std::collections::HashMap;

use hdrhistogram::Histogram;

use super::summary::HandlerSummary;
use crate::spec::PairRole;

/// How a pair's end is probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndPath {
    /// A uretprobe on the function.
    Uretprobe,
    /// Uprobes on the function's `ret` instructions (where a uretprobe is unsafe).
    RetUprobes,
    /// A second USDT probe.
    Usdt,
}

impl EndPath {
    pub fn as_str(self) -> &'static str {
        match self {
            EndPath::Uretprobe => "uretprobe",
            EndPath::RetUprobes => "ret-uprobes",
            EndPath::Usdt => "usdt",
        }
    }
}

/// One pair as the session sets it up: the probe ids of its two halves.
#[derive(Debug, Clone)]
pub(crate) struct PairSetup {
    /// The spec as written.
    pub spec: String,
    /// The function, or `START,END`.
    pub name: String,
    pub object: String,
    pub path: EndPath,
    pub starts: Vec<u32>,
    pub ends: Vec<u32>,
}

/// Open calls per thread at most, per pair: deeper recursion counts as `overflowed`.
const MAX_DEPTH: usize = 4096;

/// What a pair's probes cost, ns per hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Prices {
    /// Whole cost of a hit of the start and the end probe.
    pub whole_start: f64,
    pub whole_end: f64,
    /// Their programs' mean time (the handler clock).
    pub handler_start: f64,
    pub handler_end: f64,
}

impl Prices {
    /// The probes' cost between the start's clock read and the end's.
    fn inside(&self) -> f64 {
        self.handler_start
            + (self.whole_start - self.handler_start).max(0.0) / 2.0
            + (self.whole_end - self.handler_end).max(0.0) / 2.0
    }
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    start_ns: u64,
    sp: u64,
    /// Probe hits (of this pair) inside the call so far.
    nested_hits: u64,
}

#[derive(Debug, Clone)]
struct PairState {
    setup: PairSetup,
    stacks: HashMap<u32, Vec<Frame>>,
    measured: Histogram<u64>,
    /// Calls with no probed hit nested inside, as measured: corrected by the last
    /// price when the rows are read (a constant shift), so the early hits' prices (a
    /// few cold hits priced high) do not stay in them.
    flat: Histogram<u64>,
    /// Calls with nested hits, corrected by the price when they ended.
    corrected_nested: Histogram<u64>,
    calls: u64,
    unwound: u64,
    unmatched: u64,
    overflowed: u64,
    /// The probes' prices, as last read.
    prices: Option<Prices>,
}

fn histogram() -> Histogram<u64> {
    // 1 ns to an hour, 3 significant digits: within 0.1%.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
    })
}

impl PairState {
    fn new(setup: PairSetup) -> Self {
        Self {
            setup,
            stacks: HashMap::new(),
            measured: histogram(),
            flat: histogram(),
            corrected_nested: histogram(),
            calls: 0,
            unwound: 0,
            unmatched: 0,
            overflowed: 0,
            prices: None,
        }
    }

    fn reset(&mut self) {
        self.stacks.clear();
        self.measured.reset();
        self.flat.reset();
        self.corrected_nested.reset();
        self.calls = 0;
        self.unwound = 0;
        self.unmatched = 0;
        self.overflowed = 0;
    }

    fn checks_frames(&self) -> bool {
        self.setup.path != EndPath::Usdt
    }

    /// Pops the frames an unwind left behind: those whose pointer is below `sp` (or at
    /// it, `inclusive`); each is counted, and its hits go to the frame below.
    fn pop_unwound(stack: &mut Vec<Frame>, sp: u64, inclusive: bool, unwound: &mut u64) {
        while let Some(top) = stack.last().copied() {
            let gone = if inclusive { top.sp <= sp } else { top.sp < sp };
            if !gone {
                break;
            }
            stack.pop();
            *unwound += 1;
            if let Some(parent) = stack.last_mut() {
                parent.nested_hits += 1 + top.nested_hits;
            }
        }
    }

    fn start(&mut self, tid: u32, ktime_ns: u64, sp: u64) {
        let checks = self.checks_frames();
        let stack = self.stacks.entry(tid).or_default();
        if checks {
            Self::pop_unwound(stack, sp, true, &mut self.unwound);
        }
        if stack.len() >= MAX_DEPTH {
            self.overflowed += 1;
            return;
        }
        stack.push(Frame {
            start_ns: ktime_ns,
            sp,
            nested_hits: 0,
        });
    }

    fn end(&mut self, tid: u32, ktime_ns: u64, sp: u64) {
        let checks = self.checks_frames();
        let frame_sp = match self.setup.path {
            EndPath::Uretprobe => sp.wrapping_sub(8),
            _ => sp,
        };
        let Some(stack) = self.stacks.get_mut(&tid) else {
            self.unmatched += 1;
            return;
        };
        if checks {
            Self::pop_unwound(stack, frame_sp, false, &mut self.unwound);
        }
        let matches = stack
            .last()
            .is_some_and(|top| !checks || top.sp == frame_sp);
        if !matches {
            // A call begun before the window opened, or deeper than MAX_DEPTH.
            self.unmatched += 1;
            return;
        }
        let Some(frame) = stack.pop() else {
            return;
        };
        if let Some(parent) = stack.last_mut() {
            parent.nested_hits += 2 + frame.nested_hits;
        }
        if stack.is_empty() {
            self.stacks.remove(&tid);
        }
        let measured = ktime_ns.saturating_sub(frame.start_ns);
        let inside = self.prices.map_or(0.0, |p| {
            p.inside() + frame.nested_hits as f64 * (p.whole_start + p.whole_end) / 2.0
        });
        self.calls += 1;
        self.measured.saturating_record(measured.max(1));
        if frame.nested_hits == 0 {
            self.flat.saturating_record(measured.max(1));
        } else {
            let corrected = (measured as f64 - inside).max(1.0).round() as u64;
            self.corrected_nested.saturating_record(corrected);
        }
    }

    /// Every call corrected: the flat ones by the last price, the nested ones as
    /// corrected when they ended.
    fn corrected(&self) -> Histogram<u64> {
        let mut out = self.corrected_nested.clone();
        let inside = self.prices.map_or(0.0, |p| p.inside());
        for value in self.flat.iter_recorded() {
            let at = value.value_iterated_to() as f64;
            let corrected = (at - inside).max(1.0).round() as u64;
            let _ = out.record_n(corrected, value.count_at_value());
        }
        out
    }

    fn open(&self) -> u64 {
        self.stacks.values().map(|s| s.len() as u64).sum()
    }
}

/// Every latency pair of the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latency {
    pairs: Vec<PairState>,
    /// Probe id to (pair, role).
    roles: HashMap<u32, (usize, PairRole)>,
}

impl Latency {
    pub(crate) fn new(setups: Vec<PairSetup>) -> Self {
        let mut roles = HashMap::new();
        for (index, setup) in setups.iter().enumerate() {
            for &id in &setup.starts {
                roles.insert(id, (index, PairRole::Start));
            }
            for &id in &setup.ends {
                roles.insert(id, (index, PairRole::End));
            }
        }
        Self {
            pairs: setups.into_iter().map(PairState::new).collect(),
            roles,
        }
    }

    /// Whether probe `id` is half of a pair (it must keep streaming every hit).
    pub(crate) fn pairs_probe(&self, id: u32) -> bool {
        self.roles.contains_key(&id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Each pair's first start and end probe ids, in pair order.
    pub(crate) fn halves(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.pairs.iter().map(|p| {
            (
                p.setup.starts.first().copied().unwrap_or(u32::MAX),
                p.setup.ends.first().copied().unwrap_or(u32::MAX),
            )
        })
    }

    /// Sets pair `pair`'s prices; `None` keeps the last ones.
    pub(crate) fn set_prices(&mut self, pair: usize, prices: Option<Prices>) {
        if let Some(state) = self.pairs.get_mut(pair) {
            state.prices = prices.or(state.prices);
        }
    }

    /// One counted record of probe `id` on thread `tid`, with the stack pointer
    /// captured.
    pub(crate) fn record(&mut self, id: u32, tid: u32, ktime_ns: u64, sp: u64) {
        let Some(&(index, role)) = self.roles.get(&id) else {
            return;
        };
        let pair = &mut self.pairs[index];
        match role {
            PairRole::Start => pair.start(tid, ktime_ns, sp),
            PairRole::End => pair.end(tid, ktime_ns, sp),
        }
    }

    pub(crate) fn reset(&mut self) {
        for pair in &mut self.pairs {
            pair.reset();
        }
    }

    /// Every pair's row; `elapsed_s` the window's length so far.
    pub(crate) fn rows(&self, elapsed_s: f64) -> Vec<LatencyRow> {
        self.pairs
            .iter()
            .map(|p| {
                let corrected_hist = p.corrected();
                let corrected = HandlerSummary::of(&corrected_hist);
                let whole_cost_ns = p.prices.map(|p| p.whole_start + p.whole_end);
                LatencyRow {
                    spec: p.setup.spec.clone(),
                    name: p.setup.name.clone(),
                    object: p.setup.object.clone(),
                    path: p.setup.path,
                    starts: p.setup.starts.clone(),
                    ends: p.setup.ends.clone(),
                    calls: p.calls,
                    calls_per_second: if elapsed_s > 0.0 {
                        p.calls as f64 / elapsed_s
                    } else {
                        0.0
                    },
                    open: p.open(),
                    unwound: p.unwound,
                    unmatched: p.unmatched,
                    overflowed: p.overflowed,
                    latency_ns: HandlerSummary::of(&p.measured),
                    corrected_applied: p.prices.is_some(),
                    latency_corrected_ns: corrected,
                    whole_cost_ns,
                    overhead_share: whole_cost_ns
                        .filter(|_| corrected.count > 0 && corrected.mean > 0.0)
                        .map(|w| w / corrected.mean),
                    latency_hist: p.measured.clone(),
                    corrected_hist,
                }
            })
            .collect()
    }
}

/// One latency pair's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyRow {
    pub spec: String,
    pub name: String,
    pub object: String,
    pub path: EndPath,
    /// The probe ids of its halves.
    pub starts: Vec<u32>,
    pub ends: Vec<u32>,
    /// Calls paired: a start and its end.
    pub calls: u64,
    pub calls_per_second: f64,
    /// Calls started and not ended when the window closed.
    pub open: u64,
    /// Calls whose frame an exception or a longjmp unwound (no end seen).
    pub unwound: u64,
    /// Ends without a start: calls begun before the window opened.
    pub unmatched: u64,
    /// Starts not tracked: more than 4096 calls open on one thread.
    pub overflowed: u64,
    pub latency_ns: HandlerSummary,
    /// Whether the probes' cost was priced, so subtracted (false: corrected = measured).
    pub corrected_applied: bool,
    pub latency_corrected_ns: HandlerSummary,
    /// Both probes' whole cost per call.
    pub whole_cost_ns: Option<f64>,
    /// `whole_cost_ns` / the corrected mean latency.
    pub overhead_share: Option<f64>,
    /// Every call's latency as measured, and as corrected, ns (1 ns to an hour, 3
    /// significant digits): what the exports write beside the probes' handler times
    /// (the JSON's `latency_ns_hdr`, whose distribution `probetop diff` tests).
    pub latency_hist: Histogram<u64>,
    pub corrected_hist: Histogram<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(path: EndPath) -> Latency {
        Latency::new(vec![PairSetup {
            spec: "latency:f".into(),
            name: "f".into(),
            object: "/x".into(),
            path,
            starts: vec![0],
            ends: vec![1],
        }])
    }

    #[test]
    fn recursion_and_threads_pair_with_their_own_ends() {
        let mut l = pairs(EndPath::RetUprobes);
        // Thread 1 recurses twice; thread 2 interleaves one call.
        l.record(0, 1, 100, 1000);
        l.record(0, 2, 105, 5000);
        l.record(0, 1, 110, 900);
        l.record(0, 1, 120, 800);
        l.record(1, 1, 130, 800);
        l.record(1, 2, 140, 5000);
        l.record(1, 1, 150, 900);
        l.record(1, 1, 200, 1000);
        let row = &l.rows(1.0)[0];
        assert_eq!(
            (row.calls, row.open, row.unwound, row.unmatched),
            (4, 0, 0, 0)
        );
        assert_eq!((row.latency_ns.min, row.latency_ns.max), (10, 100));
    }

    #[test]
    fn an_unwound_frame_is_counted_so_not_left_open() {
        let mut l = pairs(EndPath::Uretprobe);
        // A call whose frame an exception unwound, then the next call at the same depth.
        l.record(0, 1, 100, 1000);
        l.record(0, 1, 200, 1000);
        l.record(1, 1, 250, 1008);
        // Unwound deeper: the caller's return pops the inner frame first.
        l.record(0, 1, 300, 1000);
        l.record(0, 1, 310, 900);
        l.record(1, 1, 400, 1008);
        let row = &l.rows(1.0)[0];
        assert_eq!((row.calls, row.unwound, row.open), (2, 2, 0));
        assert_eq!(row.latency_ns.max, 100);
    }

    #[test]
    fn nested_hits_and_the_start_probe_are_taken_off() {
        let mut l = pairs(EndPath::RetUprobes);
        l.set_prices(
            0,
            Some(Prices {
                whole_start: 10.0,
                whole_end: 30.0,
                handler_start: 4.0,
                handler_end: 10.0,
            }),
        );
        l.record(0, 1, 0, 1000);
        l.record(0, 1, 100, 900);
        l.record(1, 1, 200, 900);
        l.record(1, 1, 1000, 1000);
        let row = &l.rows(1.0)[0];
        // Inside: 4 + 6 / 2 + 20 / 2 = 17. Inner: 100 - 17; outer: 1000 - 17 - 2 x 20.
        assert_eq!(
            (row.latency_corrected_ns.min, row.latency_corrected_ns.max),
            (83, 943)
        );
        assert_eq!(row.whole_cost_ns, Some(40.0));
    }

    #[test]
    fn usdt_pairs_are_last_in_first_out_and_an_early_end_is_unmatched() {
        let mut l = pairs(EndPath::Usdt);
        l.record(1, 1, 50, 0);
        l.record(0, 1, 100, 10);
        l.record(0, 1, 150, 20);
        l.record(1, 1, 160, 30);
        l.record(1, 1, 300, 40);
        l.record(0, 1, 400, 10);
        let row = &l.rows(1.0)[0];
        assert_eq!((row.calls, row.unmatched, row.open), (2, 1, 1));
    }
}
