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
use crate::spec::{KeySpec, PairRole};

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
    /// The key the starts capture (after the stack pointer), if the spec has one.
    pub key: Option<KeySpec>,
    /// Its slot in the kernel's pair maps, when the kernel can pair it
    /// (`probe_common::pair`; `--mode kernel`, or moved there by auto mode).
    pub slot: Option<u32>,
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
    /// The call's key, an index into [`PairState::keys`] (keyed pairs).
    key: Option<usize>,
}

/// The calls of one key (or of the whole pair).
#[derive(Debug, Clone)]
struct Calls {
    measured: Histogram<u64>,
    /// Calls with no probed hit nested inside, as measured: corrected by the last
    /// price when the rows are read (a constant shift), so the early hits' prices (a
    /// few cold hits priced high) do not stay in them.
    flat: Histogram<u64>,
    /// Calls with nested hits, corrected by the price when they ended.
    corrected_nested: Histogram<u64>,
    /// Calls with nested hits paired in the kernel, as measured, and their nested hits:
    /// corrected when read by the mean hits nested in each (the kernel keeps no
    /// per-call count).
    kernel_nested: Histogram<u64>,
    kernel_nested_calls: u64,
    kernel_nested_hits: u64,
    calls: u64,
    unwound: u64,
    overflowed: u64,
}

impl Calls {
    fn new() -> Self {
        Self {
            measured: histogram(),
            flat: histogram(),
            corrected_nested: histogram(),
            kernel_nested: histogram(),
            kernel_nested_calls: 0,
            kernel_nested_hits: 0,
            calls: 0,
            unwound: 0,
            overflowed: 0,
        }
    }

    fn reset(&mut self) {
        self.measured.reset();
        self.flat.reset();
        self.corrected_nested.reset();
        self.kernel_nested.reset();
        self.kernel_nested_calls = 0;
        self.kernel_nested_hits = 0;
        self.calls = 0;
        self.unwound = 0;
        self.overflowed = 0;
    }

    fn ended(&mut self, measured: u64, nested_hits: u64, inside: f64) {
        self.calls += 1;
        self.measured.saturating_record(measured.max(1));
        if nested_hits == 0 {
            self.flat.saturating_record(measured.max(1));
        } else {
            let corrected = (measured as f64 - inside).max(1.0).round() as u64;
            self.corrected_nested.saturating_record(corrected);
        }
    }

    /// Every call corrected: the flat ones by the last price, the nested ones as
    /// corrected when they ended.
    fn corrected(&self, prices: Option<Prices>) -> Histogram<u64> {
        let mut out = self.corrected_nested.clone();
        let inside = prices.map_or(0.0, |p| p.inside());
        for value in self.flat.iter_recorded() {
            let at = value.value_iterated_to() as f64;
            let corrected = (at - inside).max(1.0).round() as u64;
            let _ = out.record_n(corrected, value.count_at_value());
        }
        if self.kernel_nested_calls > 0 {
            let mean_hits = self.kernel_nested_hits as f64 / self.kernel_nested_calls as f64;
            let nested = prices.map_or(0.0, |p| {
                p.inside() + mean_hits * (p.whole_start + p.whole_end) / 2.0
            });
            for value in self.kernel_nested.iter_recorded() {
                let at = value.value_iterated_to() as f64;
                let corrected = (at - nested).max(1.0).round() as u64;
                let _ = out.record_n(corrected, value.count_at_value());
            }
        }
        out
    }

    /// Calls the kernel paired: `new[which]` counts per `probe_common::pair` bucket
    /// (0: nothing nested, 1: with nested hits), each recorded at its bucket's lowest
    /// value, which is its own HDR bucket; `nested` the new nested calls and hits.
    fn add_kernel(&mut self, new: [&[u64]; 2], nested: (u64, u64)) {
        for (which, counts) in new.into_iter().enumerate() {
            for (index, &n) in counts.iter().enumerate() {
                if n == 0 {
                    continue;
                }
                let ns = probe_common::pair::lowest(index as u32).max(1);
                self.calls += n;
                let _ = self.measured.record_n(ns, n);
                let _ = if which == 0 {
                    self.flat.record_n(ns, n)
                } else {
                    self.kernel_nested.record_n(ns, n)
                };
            }
        }
        self.kernel_nested_calls += nested.0;
        self.kernel_nested_hits += nested.1;
    }
}

/// What a keyed pair's key is: a value seen, or `other` past `--max-keys` values.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyName {
    Value(String),
    Other,
}

#[derive(Debug, Clone)]
struct PairState {
    setup: PairSetup,
    stacks: HashMap<u32, Vec<Frame>>,
    /// Every call of the pair.
    all: Calls,
    /// Keyed pairs: the calls of each key, in the order first seen; `Other` at most
    /// once, holding the calls of every value past `max_keys`.
    keys: Vec<(KeyName, Calls)>,
    key_index: HashMap<String, usize>,
    max_keys: usize,
    unmatched: u64,
    /// The probes' prices, as last read.
    prices: Option<Prices>,
    /// What was read of the kernel's pairing so far (cumulative there).
    kernel: KernelSeen,
}

/// The kernel's cumulative counts of a pair, as last read.
#[derive(Debug, Clone, Default)]
struct KernelSeen {
    counts: probe_common::PairCounts,
    histograms: [Vec<u64>; 2],
    /// Calls open in the kernel at the last read.
    open: u64,
}

/// One read of a pair's state in the kernel (cumulative counts).
#[derive(Debug, Clone)]
pub(crate) struct KernelPairRead {
    pub counts: probe_common::PairCounts,
    /// Per `probe_common::pair` bucket: calls with nothing nested, then the rest;
    /// `None` when the calls did not change since the last read (not read again).
    pub histograms: Option<[Vec<u64>; 2]>,
    pub open: u64,
}

fn histogram() -> Histogram<u64> {
    // 1 ns to an hour, 3 significant digits: within 0.1%.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
    })
}

impl PairState {
    fn new(setup: PairSetup, max_keys: usize) -> Self {
        Self {
            setup,
            stacks: HashMap::new(),
            all: Calls::new(),
            keys: Vec::new(),
            key_index: HashMap::new(),
            max_keys,
            unmatched: 0,
            prices: None,
            kernel: KernelSeen::default(),
        }
    }

    /// Keys seen stay, emptied: their rows keep their places.
    fn reset(&mut self) {
        self.stacks.clear();
        self.all.reset();
        for (_, calls) in &mut self.keys {
            calls.reset();
        }
        self.unmatched = 0;
    }

    /// The index of key `value` in `keys`, adding it (or `other`, past `max_keys`).
    fn key_at(&mut self, value: String) -> usize {
        if let Some(&at) = self.key_index.get(&value) {
            return at;
        }
        let distinct = self.key_index.len();
        if distinct < self.max_keys {
            self.keys
                .push((KeyName::Value(value.clone()), Calls::new()));
            self.key_index.insert(value, self.keys.len() - 1);
            return self.keys.len() - 1;
        }
        if let Some(at) = self.keys.iter().position(|(k, _)| *k == KeyName::Other) {
            return at;
        }
        self.keys.push((KeyName::Other, Calls::new()));
        self.keys.len() - 1
    }

    /// The calls of a frame's key, if keyed.
    fn keyed(&mut self, key: Option<usize>) -> Option<&mut Calls> {
        key.and_then(|at| self.keys.get_mut(at)).map(|(_, c)| c)
    }

    fn checks_frames(&self) -> bool {
        self.setup.path != EndPath::Usdt
    }

    /// Pops the frames an unwind left behind: those whose pointer is below `sp` (or at
    /// it, `inclusive`); each is counted, and its hits go to the frame below. Returns
    /// the keys of the frames popped.
    fn pop_unwound(stack: &mut Vec<Frame>, sp: u64, inclusive: bool) -> Vec<Option<usize>> {
        let mut popped = Vec::new();
        while let Some(top) = stack.last().copied() {
            let gone = if inclusive { top.sp <= sp } else { top.sp < sp };
            if !gone {
                break;
            }
            stack.pop();
            popped.push(top.key);
            if let Some(parent) = stack.last_mut() {
                parent.nested_hits += 1 + top.nested_hits;
            }
        }
        popped
    }

    fn count_unwound(&mut self, keys: Vec<Option<usize>>) {
        for key in keys {
            self.all.unwound += 1;
            if let Some(calls) = self.keyed(key) {
                calls.unwound += 1;
            }
        }
    }

    fn start(&mut self, tid: u32, ktime_ns: u64, sp: u64, key: Option<String>) {
        let checks = self.checks_frames();
        let stack = self.stacks.entry(tid).or_default();
        let popped = if checks {
            Self::pop_unwound(stack, sp, true)
        } else {
            Vec::new()
        };
        let deep = stack.len() >= MAX_DEPTH;
        self.count_unwound(popped);
        let key = key.map(|k| self.key_at(k));
        if deep {
            self.all.overflowed += 1;
            if let Some(calls) = self.keyed(key) {
                calls.overflowed += 1;
            }
            return;
        }
        self.stacks.entry(tid).or_default().push(Frame {
            start_ns: ktime_ns,
            sp,
            nested_hits: 0,
            key,
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
        let popped = if checks {
            Self::pop_unwound(stack, frame_sp, false)
        } else {
            Vec::new()
        };
        let matches = stack
            .last()
            .is_some_and(|top| !checks || top.sp == frame_sp);
        let frame = if matches { stack.pop() } else { None };
        if let (Some(frame), Some(parent)) = (frame, stack.last_mut()) {
            parent.nested_hits += 2 + frame.nested_hits;
        }
        if stack.is_empty() {
            self.stacks.remove(&tid);
        }
        self.count_unwound(popped);
        let Some(frame) = frame else {
            // A call begun before the window opened, or deeper than MAX_DEPTH.
            self.unmatched += 1;
            return;
        };
        let measured = ktime_ns.saturating_sub(frame.start_ns);
        let inside = self.prices.map_or(0.0, |p| {
            p.inside() + frame.nested_hits as f64 * (p.whole_start + p.whole_end) / 2.0
        });
        self.all.ended(measured, frame.nested_hits, inside);
        if let Some(calls) = self.keyed(frame.key) {
            calls.ended(measured, frame.nested_hits, inside);
        }
    }

    /// Calls open, of key `key` (`None`: all of them, the kernel's too).
    fn open(&self, key: Option<usize>) -> u64 {
        let streamed = self
            .stacks
            .values()
            .flatten()
            .filter(|f| key.is_none() || f.key == key)
            .count() as u64;
        streamed + if key.is_none() { self.kernel.open } else { 0 }
    }

    /// Folds in a read of the kernel's pairing: what is new since the last one.
    fn apply_kernel(&mut self, read: KernelPairRead) {
        let seen = &mut self.kernel;
        self.all.unwound += read.counts.unwound.saturating_sub(seen.counts.unwound);
        self.all.overflowed += read
            .counts
            .overflowed
            .saturating_sub(seen.counts.overflowed);
        seen.open = read.open;
        if let Some(histograms) = read.histograms {
            let new: Vec<Vec<u64>> = histograms
                .iter()
                .zip(&seen.histograms)
                .map(|(now, before)| {
                    now.iter()
                        .enumerate()
                        .map(|(i, &n)| n.saturating_sub(before.get(i).copied().unwrap_or(0)))
                        .collect()
                })
                .collect();
            let nested = (
                read.counts
                    .nested_calls
                    .saturating_sub(seen.counts.nested_calls),
                read.counts
                    .nested_hits
                    .saturating_sub(seen.counts.nested_hits),
            );
            self.all.add_kernel([&new[0], &new[1]], nested);
            seen.histograms = histograms;
            seen.counts = read.counts;
        } else {
            seen.counts.unwound = read.counts.unwound;
            seen.counts.overflowed = read.counts.overflowed;
        }
    }

    /// The row of `calls`, of key `key` (an index into `keys`).
    fn row(&self, calls: &Calls, key: Option<usize>, elapsed_s: f64) -> LatencyRow {
        let corrected_hist = calls.corrected(self.prices);
        let corrected = HandlerSummary::of(&corrected_hist);
        let whole_cost_ns = self.prices.map(|p| p.whole_start + p.whole_end);
        LatencyRow {
            spec: self.setup.spec.clone(),
            name: self.setup.name.clone(),
            key: key.and_then(|at| self.keys.get(at)).map(|(k, _)| match k {
                KeyName::Value(v) => RowKey::Value(v.clone()),
                KeyName::Other => RowKey::Other,
            }),
            object: self.setup.object.clone(),
            path: self.setup.path,
            starts: self.setup.starts.clone(),
            ends: self.setup.ends.clone(),
            calls: calls.calls,
            calls_per_second: if elapsed_s > 0.0 {
                calls.calls as f64 / elapsed_s
            } else {
                0.0
            },
            open: self.open(key),
            unwound: calls.unwound,
            // An end without its start has no key: the pair's row counts it.
            unmatched: if key.is_none() { self.unmatched } else { 0 },
            overflowed: calls.overflowed,
            latency_ns: HandlerSummary::of(&calls.measured),
            corrected_applied: self.prices.is_some(),
            latency_corrected_ns: corrected,
            whole_cost_ns,
            overhead_share: whole_cost_ns
                .filter(|_| corrected.count > 0 && corrected.mean > 0.0)
                .map(|w| w / corrected.mean),
            shed: false,
            latency_hist: calls.measured.clone(),
            corrected_hist,
        }
    }
}

/// Every latency pair of the run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latency {
    pairs: Vec<PairState>,
    /// Probe id to (pair, role).
    roles: HashMap<u32, (usize, PairRole)>,
    /// Keys of a keyed pair at most (`--max-keys`).
    max_keys: usize,
}

/// Distinct keys of a keyed row at most by default (`--max-keys`).
pub(crate) const DEFAULT_MAX_KEYS: usize = 64;

impl Latency {
    /// The pairs, keyed ones with at most `max_keys` keys each.
    pub(crate) fn new(setups: Vec<PairSetup>, max_keys: usize) -> Self {
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
            pairs: setups
                .into_iter()
                .map(|s| PairState::new(s, max_keys))
                .collect(),
            roles,
            max_keys,
        }
    }

    /// Whether probe `id` is half of a pair (it must keep streaming every hit).
    pub(crate) fn pairs_probe(&self, id: u32) -> bool {
        self.roles.contains_key(&id)
    }

    /// The pairs the kernel can pair: (pair index, slot, the probe ids of both halves).
    pub(crate) fn kernel_pairs(&self) -> impl Iterator<Item = (usize, u32, Vec<u32>)> + '_ {
        self.pairs.iter().enumerate().filter_map(|(at, p)| {
            let slot = p.setup.slot?;
            let ids = p
                .setup
                .starts
                .iter()
                .chain(&p.setup.ends)
                .copied()
                .collect();
            Some((at, slot, ids))
        })
    }

    /// Pair `pair`'s start and end probe ids.
    pub(crate) fn halves_of(&self, pair: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let p = self.pairs.get(pair)?;
        Some((p.setup.starts.clone(), p.setup.ends.clone()))
    }

    /// The kernel's calls of pair `pair` so far, as last read (to tell whether its
    /// histograms need reading again).
    pub(crate) fn kernel_calls_seen(&self, pair: usize) -> Option<u64> {
        self.pairs.get(pair).map(|p| p.kernel.counts.calls)
    }

    /// Folds in a read of pair `pair`'s state in the kernel.
    pub(crate) fn apply_kernel(&mut self, pair: usize, read: KernelPairRead) {
        if let Some(state) = self.pairs.get_mut(pair) {
            state.apply_kernel(read);
        }
    }

    /// Adds pairs (of a program the target exec'd), their probe ids already final.
    pub(crate) fn add_pairs(&mut self, setups: Vec<PairSetup>) {
        for setup in setups {
            let index = self.pairs.len();
            for &id in &setup.starts {
                self.roles.insert(id, (index, PairRole::Start));
            }
            for &id in &setup.ends {
                self.roles.insert(id, (index, PairRole::End));
            }
            self.pairs.push(PairState::new(setup, self.max_keys));
        }
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
    /// captured, then a start's key slots (`None`: faulted).
    pub(crate) fn record(
        &mut self,
        id: u32,
        tid: u32,
        ktime_ns: u64,
        sp: u64,
        key_slots: Option<&[u64]>,
    ) {
        let Some(&(index, role)) = self.roles.get(&id) else {
            return;
        };
        let pair = &mut self.pairs[index];
        match role {
            PairRole::Start => {
                let key = pair.setup.key.map(|key| match key_slots {
                    Some(slots) => key.render(slots),
                    None => UNREADABLE.to_string(),
                });
                pair.start(tid, ktime_ns, sp, key)
            }
            PairRole::End => pair.end(tid, ktime_ns, sp),
        }
    }

    pub(crate) fn reset(&mut self) {
        for pair in &mut self.pairs {
            pair.reset();
        }
    }

    /// Every pair's row, then a keyed pair's row per key (most calls first, `other`
    /// last); `elapsed_s` the window's length so far.
    pub(crate) fn rows(&self, elapsed_s: f64) -> Vec<LatencyRow> {
        let mut rows = Vec::new();
        for pair in &self.pairs {
            rows.push(pair.row(&pair.all, None, elapsed_s));
            let mut keyed: Vec<usize> = (0..pair.keys.len()).collect();
            keyed.sort_by_key(|&at| {
                let (name, calls) = &pair.keys[at];
                (*name == KeyName::Other, std::cmp::Reverse(calls.calls), at)
            });
            rows.extend(
                keyed
                    .into_iter()
                    .map(|at| pair.row(&pair.keys[at].1, Some(at), elapsed_s)),
            );
        }
        rows
    }
}

/// The key of a start whose key argument could not be read.
const UNREADABLE: &str = "?";

/// A keyed row's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowKey {
    /// The argument's value, as shown.
    Value(String),
    /// Every value past `--max-keys`.
    Other,
}

impl RowKey {
    pub fn as_str(&self) -> &str {
        match self {
            RowKey::Value(v) => v,
            RowKey::Other => "other",
        }
    }
}

/// One latency pair's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyRow {
    pub spec: String,
    pub name: String,
    /// A keyed pair's row of one key; `None`: the pair's every call.
    pub key: Option<RowKey>,
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
    /// A half was detached for the rest of the run by `--budget`'s shedding: its calls
    /// are the few of the time it was attached, too few for a rate or an overhead.
    pub shed: bool,
    /// Every call's latency as measured, and as corrected, ns (1 ns to an hour, 3
    /// significant digits): what the exports write beside the probes' handler times
    /// (the JSON's `latency_ns_hdr`, whose distribution `probetop diff` tests).
    pub latency_hist: Histogram<u64>,
    pub corrected_hist: Histogram<u64>,
}

impl LatencyRow {
    /// The row's name as shown: `dispatch_command`, `dispatch_command[COM_QUERY]`.
    pub fn display_name(&self) -> String {
        match &self.key {
            Some(key) => format!("{}[{}]", self.name, key.as_str()),
            None => self.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `latency:f`, probe 0 its start and probe 1 its end.
    fn setup(path: EndPath) -> PairSetup {
        PairSetup {
            spec: "latency:f".into(),
            name: "f".into(),
            object: "/x".into(),
            path,
            starts: vec![0],
            ends: vec![1],
            key: None,
            slot: None,
        }
    }

    fn pairs(path: EndPath) -> Latency {
        Latency::new(vec![setup(path)], DEFAULT_MAX_KEYS)
    }

    /// Priced: a start hit costs 10 ns whole (4 in its program), an end 30 (10).
    fn priced(setup: PairSetup) -> Latency {
        let mut l = Latency::new(vec![setup], DEFAULT_MAX_KEYS);
        l.set_prices(
            0,
            Some(Prices {
                whole_start: 10.0,
                whole_end: 30.0,
                handler_start: 4.0,
                handler_end: 10.0,
            }),
        );
        l
    }

    /// Records `(probe, thread, ktime_ns, sp)` in order, unkeyed.
    fn play(l: &mut Latency, records: &[(u32, u32, u64, u64)]) {
        for &(id, tid, ktime_ns, sp) in records {
            l.record(id, tid, ktime_ns, sp, None);
        }
    }

    #[test]
    fn recursion_and_threads_pair_with_their_own_ends() {
        let mut l = pairs(EndPath::RetUprobes);
        // Thread 1 recurses twice; thread 2 interleaves one call.
        let outer = [(0, 1, 100, 1000), (0, 2, 105, 5000), (0, 1, 110, 900)];
        // The innermost call and its return, then the others' returns.
        let inner = [(0, 1, 120, 800), (1, 1, 130, 800)];
        let returns = [(1, 2, 140, 5000), (1, 1, 150, 900), (1, 1, 200, 1000)];
        play(&mut l, &outer);
        play(&mut l, &inner);
        play(&mut l, &returns);
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
        let shallow = [(0, 1, 100, 1000), (0, 1, 200, 1000), (1, 1, 250, 1008)];
        // Unwound deeper: the caller's return pops the inner frame first.
        let deeper = [(0, 1, 300, 1000), (0, 1, 310, 900), (1, 1, 400, 1008)];
        play(&mut l, &shallow);
        play(&mut l, &deeper);
        let row = &l.rows(1.0)[0];
        assert_eq!((row.calls, row.unwound, row.open), (2, 2, 0));
        assert_eq!(row.latency_ns.max, 100);
    }

    #[test]
    fn nested_hits_and_the_start_probe_are_taken_off() {
        let mut l = priced(setup(EndPath::RetUprobes));
        play(&mut l, &[(0, 1, 0, 1000), (0, 1, 100, 900)]);
        play(&mut l, &[(1, 1, 200, 900), (1, 1, 1000, 1000)]);
        let row = &l.rows(1.0)[0];
        // Inside: 4 + 6 / 2 + 20 / 2 = 17. Inner: 100 - 17; outer: 1000 - 17 - 2 x 20.
        assert_eq!(
            (row.latency_corrected_ns.min, row.latency_corrected_ns.max),
            (83, 943)
        );
        assert_eq!(row.whole_cost_ns, Some(40.0));
    }

    #[test]
    fn calls_paired_in_the_kernel_keep_their_hdr_values_and_are_read_once() {
        use probe_common::pair;
        let mut l = priced(PairSetup {
            slot: Some(0),
            ..setup(EndPath::Uretprobe)
        });
        let mut flat = vec![0u64; pair::BUCKETS as usize];
        let mut nested = vec![0u64; pair::BUCKETS as usize];
        // 3 flat calls of 123,456 ns (a value HDR keeps exactly at 3 digits: the
        // bucket's lowest), one nested call of 2,000,000 ns with 4 hits inside.
        flat[pair::bucket(123_456) as usize] = 3;
        nested[pair::bucket(2_000_000) as usize] = 1;
        let counts = probe_common::PairCounts {
            calls: 4,
            unwound: 2,
            overflowed: 1,
            nested_calls: 1,
            nested_hits: 4,
        };
        let read = |histograms| KernelPairRead {
            counts,
            histograms,
            open: 5,
        };
        l.apply_kernel(0, read(Some([flat.clone(), nested.clone()])));
        // Read again unchanged: nothing counts twice.
        l.apply_kernel(0, read(None));
        l.apply_kernel(0, read(Some([flat, nested])));
        let row = &l.rows(1.0)[0];
        assert_eq!(
            (row.calls, row.unwound, row.overflowed, row.open),
            (4, 2, 1, 5)
        );
        // Within HDR's own precision (3 digits) of the kernel's values.
        let near = |got: u64, want: u64| got.abs_diff(want) <= want / 500;
        let (measured, corrected) = (row.latency_ns, row.latency_corrected_ns);
        assert!(
            near(measured.min, 123_456) && near(measured.p50, 123_456),
            "{measured:?}"
        );
        assert!(near(measured.max, 2_000_000), "{measured:?}");
        // Flat: less the inside part (17); nested: 17 and 4 hits of 20 more.
        assert!(near(corrected.min, 123_456 - 17), "{corrected:?}");
        let nested_low = pair::lowest(pair::bucket(2_000_000));
        let corrected_max = row.latency_corrected_ns.max;
        assert!(
            corrected_max.abs_diff(nested_low - 97) <= nested_low / 1000,
            "{corrected_max}"
        );
    }

    #[test]
    fn usdt_pairs_are_last_in_first_out_and_an_early_end_is_unmatched() {
        let mut l = pairs(EndPath::Usdt);
        let records = [(1, 1, 50, 0), (0, 1, 100, 10), (0, 1, 150, 20)];
        play(&mut l, &records);
        play(&mut l, &[(1, 1, 160, 30), (1, 1, 300, 40), (0, 1, 400, 10)]);
        let row = &l.rows(1.0)[0];
        assert_eq!((row.calls, row.unmatched, row.open), (2, 1, 1));
    }

    #[test]
    fn keyed_calls_split_by_key_and_past_the_most_go_to_other() {
        let mut l = Latency::new(
            vec![PairSetup {
                spec: "latency:f key=arg0".into(),
                key: Some(KeySpec::parse("arg0").expect("key")),
                ..setup(EndPath::RetUprobes)
            }],
            2,
        );
        // Keys 7 (3 calls), 5 (1), then 9 and 11 past the two kept: other (2).
        for (t, key) in [7u64, 5, 7, 9, 7, 11].into_iter().enumerate() {
            let t = 100 * t as u64;
            l.record(0, 1, t, 1000, Some(&[key]));
            l.record(1, 1, t + 10 + key, 1000, None);
        }
        l.record(0, 1, 900, 1000, Some(&[5]));
        let rows = l.rows(1.0);
        let got: Vec<(String, u64, u64)> = rows
            .iter()
            .map(|r| (r.display_name(), r.calls, r.open))
            .collect();
        assert_eq!(
            got,
            [
                ("f".to_string(), 6, 1),
                ("f[7]".to_string(), 3, 0),
                ("f[5]".to_string(), 1, 1),
                ("f[other]".to_string(), 2, 0),
            ]
        );
        assert_eq!(rows[1].latency_ns.max, 17);
        assert_eq!((rows[3].latency_ns.min, rows[3].latency_ns.max), (19, 21));
    }
}
