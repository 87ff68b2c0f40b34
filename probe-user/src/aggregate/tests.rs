//! The aggregator's unit tests.

use super::*;
use probe_common::khist;

use crate::histogram::{HIGHEST_TRACKABLE_NS, new_ns_histogram};

fn hit(probe_id: u32, handler_ns: u64) -> HitEvent {
    HitEvent {
        probe_id,
        handler_ns,
        ..Default::default()
    }
}

#[test]
fn records_are_split_by_process_only_when_asked() {
    let event = |pid| HitEvent {
        pid,
        tid: pid + 1,
        ..hit(0, 10)
    };
    let mut agg = Aggregator::new(1);
    agg.record(&event(7));
    assert!(agg.measurements().probes[0].processes.is_empty());
    agg.count_processes = true;
    for pid in [9, 7, 9] {
        agg.record(&event(pid));
    }
    assert_eq!(agg.measurements().probes[0].processes, vec![(7, 1), (9, 2)]);
    let focus = agg.focus_detail(0).expect("probe 0");
    assert_eq!(
        (focus.processes, focus.process_count),
        (vec![(9, 2), (7, 1)], 2)
    );
}

#[test]
fn summary_of_known_values() {
    let mut agg = Aggregator::new(1);
    for ns in 1..=1000 {
        agg.record(&hit(0, ns));
    }
    let s = agg.probes()[0].summary();
    assert_eq!(s.count, 1000);
    assert_eq!(s.min, 1);
    assert_eq!(s.max, 1000);
    assert_eq!(s.p50, 500);
    assert_eq!(s.p90, 900);
    assert_eq!(s.p99, 990);
    assert_eq!(s.p999, 999);
    assert!((s.mean - 500.5).abs() < 0.5, "mean {}", s.mean);
}

#[test]
fn empty_summary_is_zero() {
    assert_eq!(
        Aggregator::new(1).probes()[0].summary(),
        HandlerSummary::default()
    );
}

#[test]
fn zero_handler_time_is_recorded_as_one() {
    let mut agg = Aggregator::new(1);
    agg.record(&hit(0, 0));
    assert_eq!(agg.probes()[0].summary().min, 1);
}

#[test]
fn unknown_probe_is_counted_not_recorded() {
    let mut agg = Aggregator::new(2);
    agg.record(&hit(7, 10));
    assert_eq!(agg.unknown_records, 1);
    assert_eq!(agg.received(), 0);
}

#[test]
fn only_hits_inside_the_window_count() {
    let mut agg = Aggregator::new(1);
    agg.open_window(100);
    agg.close_window(200);
    for ktime_ns in [99, 100, 150, 200, 201] {
        agg.record(&HitEvent {
            ktime_ns,
            handler_ns: 10,
            ..Default::default()
        });
    }
    assert_eq!(agg.received(), 3);
    assert_eq!(agg.outside_window, 2);
}

#[test]
fn last_arguments_are_kept() {
    let mut agg = Aggregator::new(1);
    let event = probe_common::HitArgsEvent {
        hit: hit(0, 10),
        count: 3,
        faulted: 0b010,
        args: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
    };
    agg.record_any(&Record::HitWithArgs(event));
    let args = agg.probes()[0].last_args.expect("captured");
    assert_eq!(args.values().collect::<Vec<_>>(), [Some(1), None, Some(3)]);
    assert_eq!(agg.received(), 1);
}

#[test]
fn kernel_histogram_deltas() {
    let mut probe = ProbeAggregate {
        mode: DeliveryMode::KernelHistogram,
        ..Default::default()
    };
    let mut totals = vec![0u64; khist::BUCKETS as usize];
    totals[khist::bucket(1000) as usize] = 5;
    probe.set_counted_hits(300);
    probe.apply_kernel_histogram(&totals);
    totals[khist::bucket(1000) as usize] = 7;
    totals[khist::bucket(20) as usize] = 1;
    probe.set_counted_hits(500);
    probe.apply_kernel_histogram(&totals);
    // Hits are the kernel's count; the histogram holds the timed ones.
    assert_eq!(probe.kernel_hits, 500);
    assert_eq!(probe.hits(), 500);
    assert_eq!(probe.kernel_timed, 8);
    assert_eq!(probe.handler_ns.len(), 8);
    assert_eq!(probe.handler_ns.min(), 20);
    // 1000 lies in 992..=1023, recorded at its midpoint.
    let max = probe.handler_ns.max();
    assert!((992..=1023).contains(&max), "{max}");
}

#[test]
fn sampled_hits_count_every_hit() {
    let mut agg = Aggregator::new(1);
    agg.probes_mut()[0].mode = DeliveryMode::Sample;
    agg.record(&hit(0, 10));
    agg.probes_mut()[0].set_counted_hits(100);
    assert_eq!(agg.probes()[0].hits(), 100);
    assert_eq!(agg.probes()[0].received, 1);
    agg.tick(Duration::from_secs(1));
    assert!((agg.probes()[0].rate.per_second() - 100.0).abs() < 1e-9);
}

#[test]
fn interval_log_round_trips_every_count() {
    let mut agg = Aggregator::new(2);
    let mut log = IntervalLog::default();
    for ns in [100, 200, 300] {
        agg.record(&hit(0, ns));
    }
    log.close_interval(&mut agg, 0.0, 1.0);
    // Below 2048 every value is its own bucket at 3 significant digits.
    agg.record(&hit(0, 1500));
    agg.record(&hit(1, 7));
    log.close_interval(&mut agg, 1.0, 1.0);
    log.close_interval(&mut agg, 2.0, 1.0);
    let first = log.of_probe(0);
    assert_eq!(first.len(), 2, "empty intervals are not kept");
    assert_eq!(first[0].handler_ns.len(), 3);
    assert_eq!(first[0].handler_ns.max(), 300);
    assert_eq!(first[1].start_s, 1.0);
    assert_eq!(first[1].handler_ns.max(), 1500);
    let second = log.of_probe(1);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].handler_ns.min(), 7);
    assert!(log.bytes() > 0);
}

#[test]
fn hits_are_counted_per_thread() {
    let mut agg = Aggregator::new(1);
    for tid in [7, 8, 7] {
        agg.record(&HitEvent {
            tid,
            handler_ns: 1,
            ..Default::default()
        });
    }
    let threads = &agg.probes()[0].threads;
    assert_eq!((threads[&7], threads[&8], threads.len()), (2, 1, 2));
}

#[test]
fn hits_include_drops() {
    let mut agg = Aggregator::new(1);
    agg.record(&hit(0, 5));
    agg.set_dropped(0, 3);
    assert_eq!(agg.probes()[0].hits(), 4);
}

#[test]
fn drops_per_thread_count_from_a_reset() {
    let mut agg = Aggregator::new(1);
    agg.probes_mut()[0].set_thread_dropped_total(9, 3);
    agg.reset(0);
    assert!(agg.measurements().probes[0].threads_dropped.is_empty());
    agg.probes_mut()[0].set_thread_dropped_total(9, 5);
    agg.probes_mut()[0].set_thread_dropped_total(4, 1);
    assert_eq!(
        agg.measurements().probes[0].threads_dropped,
        [(4, 1), (9, 2)]
    );
}

#[test]
fn threads_cover_says_which_hits_are_counted() {
    let mut agg = Aggregator::new(1);
    assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::EveryHit);
    agg.record(&hit(0, 5));
    assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::EveryHit);
    agg.set_dropped(0, 3);
    assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::NotDropped);
    // The kernel's per-thread drops account for all three: every hit again.
    agg.probes_mut()[0].set_thread_dropped_total(9, 2);
    assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::NotDropped);
    agg.probes_mut()[0].set_thread_dropped_total(9, 3);
    assert_eq!(agg.probes()[0].threads_cover(), ThreadsCover::EveryHit);
    assert_eq!(agg.measurements().probes[0].threads_dropped, [(9, 3)]);
    // Auto mode's switch to the in-kernel histogram.
    agg.probes_mut()[0].mode = DeliveryMode::KernelHistogram;
    agg.probes_mut()[0].set_counted_hits(10);
    assert_eq!(
        agg.probes()[0].threads_cover(),
        ThreadsCover::BeforeKernelMode
    );

    let mut kernel = Aggregator::new(1);
    kernel.probes_mut()[0].mode = DeliveryMode::KernelHistogram;
    kernel.probes_mut()[0].set_counted_hits(10);
    assert_eq!(
        kernel.probes()[0].threads_cover(),
        ThreadsCover::NoneInKernelMode
    );

    let mut sample = Aggregator::new(1);
    sample.probes_mut()[0].mode = DeliveryMode::Sample;
    sample.record(&hit(0, 5));
    assert_eq!(sample.probes()[0].threads_cover(), ThreadsCover::Sampled);
}

#[test]
fn rate_over_window() {
    let mut rate = RateWindow::new(Duration::from_secs(1));
    assert_eq!(rate.per_second(), 0.0);
    for _ in 0..10 {
        rate.add(100);
        rate.tick(Duration::from_millis(100));
    }
    assert!((rate.per_second() - 1000.0).abs() < 1e-6);
    // Older ticks leave the window.
    for _ in 0..10 {
        rate.add(10);
        rate.tick(Duration::from_millis(100));
    }
    assert!((rate.per_second() - 100.0).abs() < 1e-6);
}

#[test]
fn percentile_curve_matches_value_at_quantile() {
    let mut hist = new_ns_histogram();
    let mut state: u64 = 7;
    for _ in 0..50_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        hist.record(80 + (state >> 40) % 5_000).expect("in range");
    }
    hist.record(1_000_000).expect("in range");
    let curve = PercentileCurve::of(&hist);
    assert_eq!(
        curve.points.len() as u32,
        CURVE_DECADES * CURVE_STEPS_PER_DECADE + 1
    );
    for ((p, v), q) in curve.points.iter().zip(PercentileCurve::quantiles()) {
        assert!((p / 100.0 - q).abs() < 1e-12);
        assert_eq!(*v, hist.value_at_quantile(q), "q={q}");
    }
    assert!((curve.points.last().expect("points").0 - 99.999).abs() < 1e-9);
    assert_eq!(curve.max, hist.max());
    assert_eq!(
        PercentileCurve::of(&new_ns_histogram()),
        PercentileCurve::default()
    );
}

#[test]
fn live_intervals_and_history() {
    let mut agg = Aggregator::new(1);
    for ns in [100, 200, 300, 400] {
        agg.record(&hit(0, ns));
    }
    agg.roll_interval(Duration::from_secs(2));
    let p = &agg.probes()[0];
    assert_eq!(p.last_interval.hits, 4);
    assert!((p.last_interval.per_second - 2.0).abs() < 1e-9);
    assert_eq!(p.last_interval.handler.max, 400);
    assert_eq!(p.last_interval_curve.count, 4);
    agg.probes_mut()[0].clear_interval();
    agg.record(&hit(0, 50));
    agg.set_dropped(0, 1);
    agg.roll_interval(Duration::from_secs(1));
    let p = &agg.probes()[0];
    assert_eq!(p.last_interval.hits, 2, "one received, one dropped");
    assert_eq!(p.last_interval.dropped, 1);
    assert_eq!(p.history.len(), 2);
    assert_eq!(
        p.history[1].p99_ns,
        Some(50),
        "the cleared interval starts afresh"
    );
    // Only the last minute is kept.
    for _ in 0..100 {
        agg.roll_interval(Duration::from_secs(1));
    }
    assert_eq!(agg.probes()[0].history.len(), 60);
    let detail = agg.focus_detail(0).expect("probe 0");
    assert_eq!(detail.history.len(), 60);
    assert_eq!(detail.cumulative.count, 5);
    assert!(agg.focus_detail(1).is_none());
}

#[test]
fn reset_restarts_counts_against_kernel_totals() {
    let mut agg = Aggregator::new(1);
    agg.open_window(100);
    agg.record(&HitEvent {
        ktime_ns: 150,
        handler_ns: 10,
        ..Default::default()
    });
    agg.set_dropped(0, 5);
    agg.roll_interval(Duration::from_secs(1));
    agg.reset(1000);
    assert_eq!(agg.window_start_ns(), 1000);
    let p = &agg.probes()[0];
    assert_eq!((p.hits(), p.dropped, p.handler_ns.len()), (0, 0, 0));
    assert!(p.history.is_empty());
    // Hits from before the reset no longer count; the kernel's total is the new zero.
    agg.record(&HitEvent {
        ktime_ns: 999,
        handler_ns: 10,
        ..Default::default()
    });
    agg.record(&HitEvent {
        ktime_ns: 1001,
        handler_ns: 20,
        ..Default::default()
    });
    agg.set_dropped(0, 7);
    let p = &agg.probes()[0];
    assert_eq!((p.received, p.dropped, p.hits()), (1, 2, 3));
    agg.roll_interval(Duration::from_secs(1));
    assert_eq!(agg.probes()[0].last_interval.hits, 3);
}

#[test]
fn reset_keeps_kernel_baselines() {
    let mut probe = ProbeAggregate {
        mode: DeliveryMode::KernelHistogram,
        ..Default::default()
    };
    let mut totals = vec![0u64; khist::BUCKETS as usize];
    totals[khist::bucket(1000) as usize] = 5;
    probe.set_counted_hits(5);
    probe.apply_kernel_histogram(&totals);
    probe.reset();
    assert_eq!((probe.hits(), probe.kernel_timed), (0, 0));
    totals[khist::bucket(1000) as usize] = 8;
    probe.set_counted_hits(9);
    probe.apply_kernel_histogram(&totals);
    assert_eq!((probe.hits(), probe.kernel_timed), (4, 3));
    let mut sampled = ProbeAggregate {
        mode: DeliveryMode::Sample,
        ..Default::default()
    };
    sampled.set_counted_hits(100);
    sampled.reset();
    sampled.set_counted_hits(130);
    assert_eq!(sampled.hits(), 30);
}

#[test]
fn live_histograms_grow_and_export_with_full_bounds() {
    let mut agg = Aggregator::new(1);
    let small = agg.probes()[0].handler_ns.buckets();
    for ns in [0, 1, 150, 2_000, 75_000, 3_000_000_000, u64::MAX] {
        agg.record(&hit(0, ns));
    }
    let live = &agg.probes()[0].handler_ns;
    let full = full_range(live);
    // Small until used, and only as large as the values recorded need.
    assert!(small * 4 < new_ns_histogram().buckets(), "{small}");
    assert_eq!((full.low(), full.high()), (1, HIGHEST_TRACKABLE_NS));
    assert_eq!(HandlerSummary::of(&full), HandlerSummary::of(live));
    assert_eq!(
        full.max(),
        new_ns_histogram().highest_equivalent(HIGHEST_TRACKABLE_NS)
    );
    let mut reference = new_ns_histogram();
    for ns in [
        1,
        1,
        150,
        2_000,
        75_000,
        3_000_000_000,
        HIGHEST_TRACKABLE_NS,
    ] {
        reference.saturating_record(ns);
    }
    assert_eq!(full, reference);
}

#[test]
fn added_probes_take_the_next_ids() {
    let mut agg = Aggregator::new(1);
    agg.open_window(100);
    agg.record(&HitEvent {
        ktime_ns: 150,
        handler_ns: 10,
        ..Default::default()
    });
    let first = agg.add_probes(vec![ProbeAggregate::default(); 2]);
    assert_eq!(first, 1);
    agg.record(&HitEvent {
        probe_id: 2,
        ktime_ns: 200,
        handler_ns: 20,
        ..Default::default()
    });
    let hits: Vec<u64> = agg.probes().iter().map(ProbeAggregate::hits).collect();
    assert_eq!(hits, [1, 0, 1]);
    assert_eq!(agg.unknown_records, 0);
    assert_eq!(agg.probes().len(), 3);
}

#[test]
fn interval_rolls_over() {
    let mut agg = Aggregator::new(1);
    agg.record(&hit(0, 5));
    let first = agg.probes_mut()[0]
        .take_interval()
        .expect("a value recorded");
    agg.record(&hit(0, 7));
    assert_eq!(first.len(), 1);
    // An interval without values holds no histogram.
    assert!(Aggregator::new(1).probes_mut()[0].take_interval().is_none());
    assert_eq!(agg.probes()[0].interval_ns.len(), 1);
    assert_eq!(agg.probes()[0].handler_ns.len(), 2);
}

/// An idle probe allocates no histogram; its first hit does, and a reset frees it.
#[test]
fn histograms_come_with_the_first_hit() {
    let mut agg = Aggregator::new(2);
    agg.record(&hit(1, 5));
    let idle = &agg.probes()[0];
    assert!(!idle.handler_ns.allocated() && !idle.interval_ns.allocated());
    assert!(idle.handler_ns.is_empty());
    let hit_once = &agg.probes()[1];
    assert!(hit_once.handler_ns.allocated() && hit_once.interval_ns.allocated());
    assert_eq!(hit_once.handler_ns.len(), 1);
    let measured = agg.measurements();
    assert!(!measured.probes[0].handler_ns.allocated());
    assert_eq!(measured.probes[1].handler_ns.len(), 1);
    agg.reset(0);
    assert!(!agg.probes()[1].handler_ns.allocated());
}
