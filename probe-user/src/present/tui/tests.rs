//! Every screen and overlay rendered on ratatui's TestBackend and compared with the
//! committed snapshots in `snapshots/` (review changes with `cargo insta review`, or
//! accept them with `INSTA_UPDATE=always`); and the interactions that change the state.

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::{Terminal, backend::TestBackend, style::Color};

use super::*;
use crate::aggregate::{
    CapturedArgs, FocusDetail, HandlerSummary, HistoryPoint, IntervalSummary, OwnUsage,
    PercentileCurve,
};
use crate::present::ProbeLabel;
use crate::present::ProbeSnapshot;
use crate::spec::ProbeKind;

fn labels() -> Vec<ProbeLabel> {
    vec![
        ProbeLabel::new(ProbeKind::Uprobe, "work_unit", "/opt/fixtures/c/workload"),
        ProbeLabel::new(
            ProbeKind::Uretprobe,
            "work_unit",
            "/opt/fixtures/c/workload",
        ),
        ProbeLabel::new(ProbeKind::Uprobe, "leaf_ret", "/opt/fixtures/c/workload"),
        ProbeLabel::new(
            ProbeKind::Uprobe,
            "malloc",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ),
    ]
}

fn summary(base: u64, count: u64) -> HandlerSummary {
    HandlerSummary {
        count,
        min: base / 2,
        mean: base as f64 * 1.1,
        p50: base,
        p90: base * 3 / 2,
        p99: base * 4,
        p999: base * 12,
        max: base * 300,
    }
}

fn probe(hits: u64, per_second: f64, base: u64) -> ProbeSnapshot {
    ProbeSnapshot {
        mode: crate::delivery::DeliveryMode::Ring,
        hits,
        dropped: 0,
        per_second,
        handler: summary(base, hits),
        interval: IntervalSummary {
            length: Duration::from_secs(1),
            hits: per_second as u64,
            dropped: 0,
            per_second,
            handler: summary(base + 10, per_second as u64),
        },
        ..Default::default()
    }
}

/// A curve shaped like a real handler-time distribution: flat, then a tail.
fn curve(base: u64) -> PercentileCurve {
    let points = PercentileCurve::quantiles()
        .enumerate()
        .map(|(i, q)| {
            (
                q * 100.0,
                base + (base as f64 * 0.02 * (i * i) as f64) as u64,
            )
        })
        .collect::<Vec<_>>();
    PercentileCurve {
        max: points.last().map_or(0, |p| p.1) * 2,
        count: 120_000,
        points,
    }
}

fn history() -> Vec<HistoryPoint> {
    (0..60)
        .map(|i| HistoryPoint {
            length: Duration::from_secs(1),
            per_second: 20_000.0 + 5_000.0 * ((i as f64) / 6.0).sin(),
            p99_ns: Some(400 + (i % 7) * 30),
        })
        .collect()
}

fn snapshot() -> Snapshot {
    let mut leaf = probe(98_000, 19_500.0, 120);
    leaf.last_args = Some(CapturedArgs {
        count: 3,
        faulted: 0b100,
        values: [42, 0x7f00_dead_beef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    });
    let mut malloc = probe(4_100, 800.0, 240);
    malloc.dropped = 17;
    malloc.mode = crate::delivery::DeliveryMode::KernelHistogram;
    Snapshot {
        elapsed: Duration::from_secs(67),
        notice: None,
        probes: vec![
            probe(120_000, 20_000.0, 110),
            probe(120_000, 20_100.0, 140),
            leaf,
            malloc,
        ],
        events_per_second: 60_400.0,
        received: 342_083,
        dropped: 17,
        interval: Duration::from_secs(1),
        focus: Some(FocusDetail {
            probe_id: 1,
            cumulative: curve(140),
            interval: curve(150),
            history: history(),
            ..Default::default()
        }),
        own: OwnUsage {
            cpu_share: Some(0.012),
            rss_bytes: Some(14_300_000),
        },
        assumption: None,
        target_cpu: Some(0.9),
        target_cpu_error: None,
        latency: Vec::new(),
        keyed: Vec::new(),
        calibrated: false,
    }
}

fn app(width: u16, height: u16) -> App {
    let mut app = App::new(
        TargetLine {
            pid: 4242,
            comm: "workload".into(),
        },
        labels(),
        true,
        Theme::default(),
    );
    app.resize(width, height);
    app.update(snapshot());
    app
}

fn render(app: &App) -> Terminal<TestBackend> {
    let mut terminal =
        Terminal::new(TestBackend::new(app.size.0, app.size.1)).expect("test backend");
    terminal.draw(|frame| draw(frame, app)).expect("draw");
    terminal
}

fn text(app: &App) -> String {
    render(app).backend().to_string()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn type_keys(app: &mut App, keys: &str) {
    for c in keys.chars() {
        app.on_key(&key(KeyCode::Char(c)));
    }
}

/// Probe ids in table order.
fn order(app: &App) -> Vec<usize> {
    app.rows()
}

// ---------------------------------------------------------------------------------------
// Screens

#[test]
fn screen_main_wide() {
    insta::assert_snapshot!(render(&app(120, 36)).backend());
}

#[test]
fn screen_whole_cost_and_cpu_share() {
    // What a run shows once this machine is calibrated: whole cost per hit and CPU share
    // filled in, sorted by CPU share like top, a single-stepped site marked where it is
    // named and costing far more per hit than its neighbours.
    let mut labels = labels();
    labels[2].display = format!("{} [sstep]", labels[2].display);
    let mut app = App::new(
        TargetLine {
            pid: 4242,
            comm: "workload".into(),
        },
        labels,
        true,
        Theme::default(),
    );
    app.resize(120, 36);
    let mut snap = snapshot();
    for (probe, cost) in
        snap.probes
            .iter_mut()
            .zip([Some(1_078.0), Some(1_620.0), Some(12_935.0), None])
    {
        probe.whole_cost_ns = cost;
        probe.cpu_share = cost.map(|ns| ns * probe.per_second / 1e9);
    }
    // Priced with the cold loop's rows (--assume): the status line says so.
    snap.assumption = Some(crate::present::Decision {
        assumes: crate::present::Assumption::Cold,
        why: "auto: 31 MiB of code mapped, more than 8 MiB".into(),
    });
    app.update(snap);
    assert_eq!(app.effective_sort_column(), SortColumn::CpuShare);
    assert_eq!(order(&app), [2, 1, 0, 3]);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn clock_pricing_shows_in_the_status_line_and_the_detail_pane() {
    let mut app = app(120, 36);
    app.selected = Some(0);
    let mut snap = snapshot();
    for probe in &mut snap.probes {
        probe.whole_cost_ns = Some(2_166.0);
        probe.cpu_share = Some(2_166.0 * probe.per_second / 1e9);
        probe.gap_median_us = Some(371.0);
        probe.reading = Some(crate::present::GapReading::HandlerClock);
    }
    snap.assumption = Some(crate::present::Decision {
        assumes: crate::present::Assumption::Clock,
        why: "auto: each hit priced by its handler's clock".into(),
    });
    app.update(snap);
    let screen = render(&app).backend().to_string();
    assert!(
        screen.contains("priced by clock: since the CPU's last hit p50 371us"),
        "{screen}"
    );
    assert!(screen.starts_with("\" cost +"), "{screen}");
}

#[test]
fn screen_main_80x24() {
    let mut app = app(80, 24);
    // The detail pane shows the probe the focus is for.
    app.selected = Some(1);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_empty_before_the_first_snapshot() {
    let mut app = App::new(
        TargetLine {
            pid: 4242,
            comm: "workload".into(),
        },
        labels(),
        false,
        Theme::default(),
    );
    app.resize(80, 24);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_no_hits_yet() {
    let mut app = app(80, 24);
    let mut empty = Snapshot {
        probes: vec![ProbeSnapshot::default(); 4],
        interval: Duration::from_secs(1),
        ..Default::default()
    };
    empty.focus = Some(FocusDetail {
        probe_id: 0,
        ..Default::default()
    });
    app.update(empty);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_help_overlay() {
    let mut app = app(80, 24);
    app.on_key(&key(KeyCode::Char('?')));
    assert!(app.help);
    // The headline's rule in words, whole at 80x24.
    let screen = text(&app);
    for words in [
        "own CPU) when that is known within a quarter, else",
        "90% of target's cpu: the probes' share of all it ran",
    ] {
        assert!(screen.contains(words), "{screen}");
    }
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_filter_being_typed() {
    let mut app = app(80, 24);
    type_keys(&mut app, "/leaf");
    assert!(app.editing_filter);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_filter_matching_nothing() {
    let mut app = app(80, 24);
    type_keys(&mut app, "/nothing");
    app.on_key(&key(KeyCode::Enter));
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_interval_view() {
    let mut app = app(100, 30);
    app.selected = Some(1);
    app.on_key(&key(KeyCode::Char('i')));
    assert_eq!(app.view, View::Interval);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_paused_with_a_detached_probe_and_a_message() {
    let mut app = app(80, 24);
    app.selected = Some(2);
    app.on_key(&key(KeyCode::Char('p')));
    app.apply(UiEvent::Attached {
        probe_id: 0,
        attached: false,
    });
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_sorted_by_name_ascending_with_a_notice() {
    let mut app = app(100, 30);
    app.sort = Sort {
        column: SortColumn::Name,
        descending: false,
    };
    let mut snap = snapshot();
    snap.notice = Some(
        "probe 3 fires 250000 hits/s, above 200000: aggregating it in the kernel from now on"
            .into(),
    );
    app.update(snap);
    insta::assert_snapshot!(render(&app).backend());
}

#[test]
fn screen_short_terminal_hides_the_detail_pane() {
    insta::assert_snapshot!(render(&app(100, 14)).backend());
}

#[test]
fn screen_too_small() {
    insta::assert_snapshot!(render(&app(30, 6)).backend());
}

#[test]
fn every_size_down_to_80x24_and_below_draws() {
    for width in [20, 40, 60, 79, 80, 81, 120, 200] {
        for height in [1, 5, 8, 12, 16, 23, 24, 50] {
            let mut app = app(width, height);
            app.help = height > 10;
            render(&app);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Contents

#[test]
fn status_line_has_everything() {
    let screen = text(&app(200, 36));
    let status = screen.lines().next().expect("status line");
    for part in [
        "cost ? (run probetop calibrate)",
        "probetop",
        "pid 4242 (workload)",
        "4/4 probes attached",
        "60.4k events/s",
        "17 drops",
        "self: cpu  1.2%, rss 13.6MiB",
        "1:07",
    ] {
        assert!(status.contains(part), "{part} missing from {status:?}");
    }
}

#[test]
fn the_budget_says_its_use_in_the_status_line_down_to_80_columns() {
    let long = "budget 1.0%: using 0.8% (duty 35%)";
    for width in [80, 81, 100, 120, 200] {
        for priced in [false, true] {
            let mut app = app(width, 24);
            let mut snap = snapshot();
            if priced {
                // The widest headline: a CPU share, against the target's own, per hit.
                for probe in &mut snap.probes {
                    probe.whole_cost_ns = Some(12_935.0);
                    probe.cpu_share = Some(12_935.0 * probe.per_second / 1e9);
                }
                snap.target_cpu = Some(0.93);
            }
            app.update(snap);
            app.apply(UiEvent::Budget {
                long: long.into(),
                short: "budget 1.0%: 0.8% d35%".into(),
            });
            let screen = text(&app);
            let status = screen.lines().next().expect("status line");
            assert!(status.starts_with("\" cost "), "{width}: {status}");
            // The widest headline keeps its price per hit at 80 columns, and the budget
            // its short form there: both cannot fit whole.
            let want = if priced && width < 90 {
                "budget 1.0%: 0.8% d35%"
            } else {
                long
            };
            assert!(status.contains(want), "{width}: {status}");
            assert!(!priced || status.contains("/hit"), "{width}: {status}");
        }
    }
    // Narrower, its short form.
    let mut app = app(60, 24);
    app.apply(UiEvent::Budget {
        long: long.into(),
        short: "budget 1.0%: 0.8% d35%".into(),
    });
    let screen = text(&app);
    assert!(screen.contains("budget 1.0%: 0.8% d35%"), "{screen}");
}

#[test]
fn columns_fit_80() {
    let screen = text(&app(80, 24));
    for title in ["COST/HIT", "%CPU", "HITS/S", "DROPS", "P50", "P99"] {
        assert!(screen.contains(title), "{title} missing:\n{screen}");
    }
    // The status line keeps the headline at 80 columns, before everything else.
    let status = screen.lines().next().expect("status line");
    assert!(status.starts_with("\" cost ?"), "{status}");
    for part in ["4/4 attached", "17 drops"] {
        assert!(status.contains(part), "{part} missing from {status:?}");
    }
}

#[test]
fn detail_shows_the_selected_probe() {
    let mut app = app(120, 36);
    app.selected = Some(2);
    let screen = text(&app);
    assert!(
        screen.contains("last args: 42 (0x2a) · 139641712656111 (0x7f00deadbeef) · ?"),
        "{screen}"
    );
    assert!(screen.contains("uprobe:leaf_ret"), "{screen}");
    app.selected = Some(1);
    let screen = text(&app);
    assert!(screen.contains("99.999%"), "{screen}");
    assert!(screen.contains("hits/s, last 60s"), "{screen}");
    assert!(screen.contains("p99, last 60s"), "{screen}");
}

#[test]
fn no_color_draws_no_colour() {
    let mut plain = app(100, 30);
    plain.theme = Theme::NO_COLOR;
    plain.selected = Some(1);
    let terminal = render(&plain);
    let buffer = terminal.backend().buffer();
    for cell in buffer.content() {
        assert_eq!(cell.fg, Color::Reset, "{cell:?}");
        assert_eq!(cell.bg, Color::Reset, "{cell:?}");
    }
    let mut colored = app(100, 30);
    colored.selected = Some(1);
    let terminal = render(&colored);
    assert!(
        terminal
            .backend()
            .buffer()
            .content()
            .iter()
            .any(|c| c.fg != Color::Reset),
        "colour is on by default"
    );
}

// ---------------------------------------------------------------------------------------
// Interactions

#[test]
fn default_sort_falls_back_to_hits_per_second() {
    let app = app(80, 24);
    assert_eq!(app.sort.column, SortColumn::CpuShare);
    assert_eq!(app.effective_sort_column(), SortColumn::PerSecond);
    assert_eq!(order(&app), [1, 0, 2, 3]);
}

#[test]
fn cpu_share_sorts_once_measured() {
    let mut app = app(80, 24);
    let mut snap = snapshot();
    for (probe, share) in snap
        .probes
        .iter_mut()
        .zip([Some(0.01), None, Some(0.2), Some(0.05)])
    {
        probe.cpu_share = share;
    }
    app.update(snap);
    assert_eq!(app.effective_sort_column(), SortColumn::CpuShare);
    // Unmeasured rows go last, whichever the direction.
    assert_eq!(order(&app), [2, 3, 0, 1]);
    app.on_key(&key(KeyCode::Char('I')));
    assert_eq!(order(&app), [0, 3, 2, 1]);
}

#[test]
fn sort_moves_between_columns() {
    let mut app = app(80, 24);
    for _ in 0..20 {
        app.on_key(&key(KeyCode::Char('<')));
    }
    assert_eq!(app.sort.column, SortColumn::Name);
    assert!(!app.sort.descending, "names read A to Z");
    assert_eq!(order(&app), [2, 3, 0, 1]);
    app.on_key(&key(KeyCode::Char('>')));
    assert_eq!(app.sort.column, SortColumn::WholeCost);
    assert!(app.sort.descending);
    // No cost yet: every row ties, and ties keep name order.
    assert_eq!(order(&app), [2, 3, 0, 1]);
    type_keys(&mut app, ">>");
    assert_eq!(app.sort.column, SortColumn::PerSecond);
    assert_eq!(order(&app), [1, 0, 2, 3]);
    // At 80 columns HITS and MIN are hidden, so right of DROPS comes P50.
    type_keys(&mut app, ">>");
    assert_eq!(app.sort.column, SortColumn::P50);
    assert_eq!(order(&app), [3, 1, 2, 0]);
    for _ in 0..20 {
        app.on_key(&key(KeyCode::Char('>')));
    }
    assert_eq!(app.sort.column, SortColumn::P99);
    assert_eq!(order(&app)[0], 3);
}

#[test]
fn filter_by_name_or_object() {
    let mut app = app(80, 24);
    type_keys(&mut app, "/WORK_");
    assert_eq!(order(&app), [1, 0]);
    app.on_key(&key(KeyCode::Enter));
    assert!(!app.editing_filter);
    assert_eq!(app.filter, "WORK_");
    // The object counts too: every probe in workload matches.
    type_keys(&mut app, "/");
    app.on_key(&key(KeyCode::Backspace));
    assert_eq!(order(&app), [1, 0, 2]);
    app.on_key(&KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    type_keys(&mut app, "libc");
    assert_eq!(order(&app), [3]);
    app.on_key(&key(KeyCode::Esc));
    assert!(app.filter.is_empty());
    assert_eq!(order(&app).len(), 4);
    // Esc with a kept filter clears it rather than quitting.
    type_keys(&mut app, "/leaf");
    app.on_key(&key(KeyCode::Enter));
    assert_eq!(app.on_key(&key(KeyCode::Esc)), Effect::Redraw);
    assert_eq!(app.on_key(&key(KeyCode::Esc)), Effect::Quit);
}

#[test]
fn selection_follows_the_probe_when_rows_move() {
    let mut app = app(80, 24);
    assert_eq!(app.selected_probe(&app.rows()), Some(1));
    app.on_key(&key(KeyCode::Down));
    assert_eq!(app.selected, Some(0));
    // Re-sorted by name, the same probe stays selected on another row.
    app.sort = Sort {
        column: SortColumn::Name,
        descending: false,
    };
    assert_eq!(app.selected_probe(&app.rows()), Some(0));
    app.on_key(&key(KeyCode::End));
    assert_eq!(app.selected, Some(1));
    app.on_key(&key(KeyCode::Home));
    assert_eq!(app.selected, Some(2));
    assert_eq!(app.on_key(&key(KeyCode::Up)), Effect::Nothing);
    // Filtered out: the first row shown is selected.
    type_keys(&mut app, "/malloc");
    assert_eq!(app.selected_probe(&app.rows()), Some(3));
}

#[test]
fn keys_ask_the_session() {
    let mut app = app(80, 24);
    assert_eq!(
        app.on_key(&key(KeyCode::Char('r'))),
        Effect::Send(UiRequest::Reset)
    );
    assert_eq!(
        app.on_key(&key(KeyCode::Char('e'))),
        Effect::Send(UiRequest::Export)
    );
    assert_eq!(
        app.on_key(&key(KeyCode::Char(' '))),
        Effect::Send(UiRequest::ToggleAttach(1))
    );
    assert_eq!(app.on_key(&key(KeyCode::Char('q'))), Effect::Quit);
    assert_eq!(
        app.on_key(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Effect::Quit
    );
    // While typing a filter, letters are text.
    type_keys(&mut app, "/q");
    assert_eq!(app.filter, "q");
}

#[test]
fn help_closes_on_any_key() {
    let mut app = app(80, 24);
    app.on_key(&key(KeyCode::Char('?')));
    assert_eq!(app.on_key(&key(KeyCode::Char('q'))), Effect::Redraw);
    assert!(!app.help);
}

#[test]
fn pause_freezes_the_display() {
    let mut app = app(80, 24);
    app.on_key(&key(KeyCode::Char('p')));
    let mut newer = snapshot();
    newer.probes[0].hits += 1;
    assert!(!app.update(newer.clone()), "paused");
    assert_eq!(app.snapshot.probes[0].hits, 120_000);
    app.on_key(&key(KeyCode::Char('p')));
    assert!(app.update(newer));
    assert_eq!(app.snapshot.probes[0].hits, 120_001);
}

#[test]
fn redraws_only_for_visible_changes() {
    let mut app = app(80, 24);
    let mut same = snapshot();
    same.elapsed += Duration::from_millis(300);
    assert!(!app.update(same), "the clock shows whole seconds");
    let mut later = snapshot();
    later.elapsed += Duration::from_secs(1);
    assert!(app.update(later));
}

fn click(app: &mut App, column: u16, row: u16) -> Effect {
    app.on_mouse(&MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column,
        row,
        modifiers: KeyModifiers::NONE,
    })
}

#[test]
fn mouse_selects_sorts_and_scrolls() {
    let mut app = app(80, 24);
    // Rows start below the status line, the border and the header: row 3 is the first.
    let first_row = order(&app)[0];
    assert_eq!(click(&mut app, 5, 4), Effect::Redraw);
    assert_eq!(app.selected, Some(order(&app)[1]));
    assert_ne!(app.selected, Some(first_row));
    // The PROBE title sorts by name; clicking it again inverts.
    assert_eq!(click(&mut app, 3, 2), Effect::Redraw);
    assert_eq!(app.sort.column, SortColumn::Name);
    assert!(!app.sort.descending);
    click(&mut app, 3, 2);
    assert!(app.sort.descending);
    // The DROPS title.
    let screen = text(&app);
    let header = screen.lines().nth(2).expect("header");
    let drops_at = header
        .chars()
        .collect::<Vec<_>>()
        .windows(5)
        .position(|w| w.iter().collect::<String>() == "DROPS")
        .expect("DROPS title") as u16;
    click(&mut app, drops_at + 1, 2);
    assert_eq!(app.sort.column, SortColumn::Drops);
    let scroll = |app: &mut App, kind| {
        app.on_mouse(&MouseEvent {
            kind,
            column: 10,
            row: 10,
            modifiers: KeyModifiers::NONE,
        })
    };
    app.selected = Some(order(&app)[0]);
    scroll(&mut app, MouseEventKind::ScrollDown);
    assert_eq!(app.selected, Some(order(&app)[1]));
    scroll(&mut app, MouseEventKind::ScrollUp);
    assert_eq!(app.selected, Some(order(&app)[0]));
}

#[test]
fn many_probes_scroll_with_the_selection() {
    let mut app = App::new(
        TargetLine {
            pid: 1,
            comm: "many".into(),
        },
        (0..40)
            .map(|i| ProbeLabel::new(ProbeKind::Uprobe, &format!("f{i:02}"), "/bin/many"))
            .collect(),
        false,
        Theme::default(),
    );
    app.resize(80, 24);
    app.update(Snapshot {
        probes: (0..40)
            .map(|i| probe(1000 + i, 10.0 * i as f64, 100))
            .collect(),
        interval: Duration::from_secs(1),
        ..Default::default()
    });
    app.on_key(&key(KeyCode::End));
    assert_eq!(app.selected, Some(0), "lowest rate last");
    let screen = text(&app);
    assert!(screen.contains("uprobe:f00"), "{screen}");
    assert!(app.offset > 0);
    app.on_key(&key(KeyCode::PageUp));
    app.on_key(&key(KeyCode::Home));
    assert_eq!(app.offset, 0);
    assert!(text(&app).contains("uprobe:f39"));
}

/// In a detached window of `--in-situ` no probe is attached, and the status line says
/// so: `0/4 attached` beside `off`, back to `4/4` when the window turns on.
#[test]
fn an_in_situ_detached_window_shows_no_probe_attached() {
    let mut app = app(80, 24);
    let window = |probes_on| UiEvent::InSitu {
        headline: None,
        probes_on,
        detail: String::new(),
    };
    app.apply(window(false));
    let status = text(&app).lines().next().unwrap_or_default().to_string();
    assert!(
        status.contains(" off") && status.contains("0/4 attached"),
        "{status}"
    );
    app.apply(window(true));
    let status = text(&app).lines().next().unwrap_or_default().to_string();
    assert!(
        status.contains(" on") && status.contains("4/4 attached"),
        "{status}"
    );
}

#[test]
fn session_events_update_the_state() {
    let mut app = app(80, 24);
    app.apply(UiEvent::Attached {
        probe_id: 3,
        attached: false,
    });
    assert!(!app.is_attached(3));
    assert!(text(&app).contains("3/4 attached"));
    app.apply(UiEvent::Message("wrote /tmp/x.json".into()));
    assert!(text(&app).contains("wrote /tmp/x.json"));
    // The next key clears it.
    assert_eq!(app.on_key(&key(KeyCode::F(12))), Effect::Redraw);
    assert_eq!(app.message, None);
}

#[test]
fn a_followed_exec_marks_the_old_rows_and_adds_the_new() {
    let mut app = app(160, 30);
    app.selected = Some(2);
    let mut labels = labels();
    for label in &mut labels {
        label.before_exec = Some(1);
    }
    labels.push(ProbeLabel::new(
        ProbeKind::Uprobe,
        "work_unit",
        "/opt/fixtures/c/other",
    ));
    app.apply(UiEvent::Followed {
        target: TargetLine {
            pid: 4242,
            comm: "other".into(),
        },
        labels,
        attached: vec![false, false, false, false, true],
        message: "exec 1: attached 1 probe to pid 4242 (other)".into(),
    });
    let mut snapshot = snapshot();
    snapshot.probes.push(probe(10, 5.0, 100));
    app.update(snapshot);
    let screen = text(&app);
    // Only the new program's probe counts as attachable: no warning for the old rows.
    // At 160 columns the status line has room for its long forms.
    assert!(screen.contains("1/1 probes attached"), "{screen}");
    assert!(screen.contains("pid 4242 (other)"), "{screen}");
    assert!(screen.contains("[before exec 1]"), "{screen}");
    assert!(screen.contains("exec 1: attached 1 probe"), "{screen}");
    app.resize(60, 30);
    let narrow = text(&app);
    assert!(narrow.contains("│leaf_ret [old]"), "{narrow}");
    assert!(narrow.contains("1/1 attached"), "{narrow}");
    assert_eq!(app.selected, Some(2), "ids are stable");
    assert!(
        screen.contains("replaced by exec 1"),
        "detail pane:\n{screen}"
    );
    // An old row cannot be attached again: its offset means nothing now.
    assert_eq!(app.on_key(&key(KeyCode::Char(' '))), Effect::Redraw);
    assert!(
        app.message
            .as_deref()
            .is_some_and(|m| m.contains("cannot attach again")),
        "{:?}",
        app.message
    );
    // The new one can be detached as usual.
    app.selected = Some(4);
    assert_eq!(
        app.on_key(&key(KeyCode::Char(' '))),
        Effect::Send(UiRequest::ToggleAttach(4))
    );
}

#[test]
fn counts_too_wide_for_their_column_are_abbreviated_not_cut() {
    let mut app = app(100, 30);
    let mut snapshot = snapshot();
    snapshot.probes[0].hits = 1_234_567_890;
    snapshot.probes[3].dropped = 1_028_349;
    snapshot.dropped = 1_028_349;
    app.update(snapshot);
    let screen = text(&app);
    // A row by its name and its kind (the K column: `u` an entry, `ur` a return).
    let row = |name: &str, kind: &str| {
        screen
            .lines()
            .find(|l| l.contains(&format!("│{name} ")) && l.split_whitespace().any(|c| c == kind))
            .unwrap_or_else(|| panic!("no {name} {kind} row:\n{screen}"))
            .to_string()
    };
    assert!(row("malloc", "u").contains(" 1.03M "), "{screen}");
    assert!(
        !row("malloc", "u").contains("028349"),
        "a cut number:\n{screen}"
    );
    assert!(row("work_unit", "u").contains(" 1.23G "), "{screen}");
    assert!(!row("work_unit", "ur").contains(" 1.23G "), "{screen}");
    // Counts that fit stay exact.
    assert!(row("leaf_ret", "u").contains(" 98000 "), "{screen}");
}

/// With several processes (--follow-forks), the detail pane says who took the hits,
/// most first; with one, it says nothing of it.
#[test]
fn detail_pane_lists_processes_when_several() {
    let mut snap = snapshot();
    if let Some(focus) = snap.focus.as_mut() {
        focus.processes = vec![(8440, 2_000), (8439, 1_000), (8466, 1_000)];
        focus.process_count = 13;
    }
    let mut several = app(120, 36);
    several.update(snap);
    let screen = text(&several);
    assert!(
        screen.contains("by process (13): 8440 2000 · 8439 1000 · 8466 1000 · …"),
        "{screen}"
    );
    assert!(!text(&app(120, 36)).contains("by process"));
}

#[test]
fn twins_stay_apart_when_names_are_cut() {
    // Probes named alike but for their ends (JVM and python USDT pairs): cut at the
    // end, each pair would read the same.
    let jvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
    let python = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
    let twins = vec![
        ProbeLabel::new(ProbeKind::Usdt, "hotspot:method__entry", jvm),
        ProbeLabel::new(ProbeKind::Usdt, "hotspot:method__return", jvm),
        ProbeLabel::new(ProbeKind::Usdt, "python:import__find__load__start", python),
        ProbeLabel::new(ProbeKind::Usdt, "python:import__find__load__done", python),
    ];
    for width in [60, 80, 100] {
        let mut app = App::new(
            TargetLine {
                pid: 4242,
                comm: "java".into(),
            },
            twins.clone(),
            true,
            Theme::default(),
        );
        app.resize(width, 24);
        app.update(snapshot());
        let screen = text(&app);
        // The name cell: from the border to the first space (numbers follow).
        let names: std::collections::BTreeSet<&str> = screen
            .lines()
            .filter(|l| l.contains("__"))
            .filter_map(|l| l.trim_start_matches('"').strip_prefix('│'))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter(|name| !name.starts_with("handler"))
            .collect();
        assert_eq!(names.len(), 4, "{width} columns: {names:?} in\n{screen}");
    }
}

/// At 80 columns: every row leads with its function's name, never its kind; the kind
/// is said once, in the K column, where kinds mix (and in the title where they do not);
/// two overloads whose parameter lists were dropped read apart by their sites.
#[test]
fn rows_lead_with_the_function_and_say_the_kind_once() {
    let site = |kind, name: &str, at| {
        let mut l = ProbeLabel::new(kind, name, "/opt/shop");
        l.site = Some(at);
        l
    };
    let add = "shop::Cart::add(shop::Item const&, unsigned long)";
    let labels = vec![
        site(ProbeKind::Uprobe, add, 0x1100),
        site(
            ProbeKind::Uprobe,
            "shop::Cart::add(shop::Coupon const&)",
            0x1200,
        ),
        site(ProbeKind::Uretprobe, add, 0x1100),
        site(ProbeKind::Usdt, "shop:checkout__done", 0x1300),
    ];
    let app_of = |labels: Vec<ProbeLabel>| {
        let mut app = App::new(
            TargetLine {
                pid: 4242,
                comm: "shop".into(),
            },
            labels,
            true,
            Theme::default(),
        );
        app.resize(80, 24);
        let mut snap = snapshot();
        snap.probes.truncate(app.labels.len());
        app.update(snap);
        app
    };
    let screen = text(&app_of(labels.clone()));
    let lines: Vec<Vec<char>> = screen
        .lines()
        .map(|l| l.trim_matches('"').chars().collect())
        .collect();
    let header: String = lines[2].iter().collect();
    assert!(header.starts_with("│PROBE "), "{screen}");
    let k_at = lines[2]
        .windows(3)
        .position(|w| w == [' ', 'K', ' '])
        .expect("a K column")
        + 1;
    let mut rows: Vec<(String, String)> = lines[3..7]
        .iter()
        .map(|row| {
            let name: String = row[1..k_at].iter().collect();
            let kind: String = row[k_at..k_at + 2].iter().collect();
            (name.trim_end().to_string(), kind.trim_end().to_string())
        })
        .collect();
    rows.sort();
    let row = |name: &str, kind: &str| (name.to_string(), kind.to_string());
    assert_eq!(
        rows,
        [
            // Its mark kept, a USDT probe's provider goes.
            row("checkout__done [in-kernel]", "U"),
            row("shop::Cart::add(…)", "ur"),
            row("shop::Cart::add(…) @0x1100", "u"),
            row("shop::Cart::add(…) @0x1200", "u"),
        ],
        "{screen}"
    );
    // One kind: no K column, the title names it.
    let screen = text(&app_of(labels[..2].to_vec()));
    assert!(screen.contains(" 2 uprobes "), "{screen}");
    assert!(!screen.contains(" K "), "{screen}");
}

#[test]
fn names_are_cut_in_the_middle() {
    use super::table::ellipsize_middle;
    assert_eq!(
        ellipsize_middle("usdt:hotspot:method__entry", 12),
        "usdt:…_entry"
    );
    assert_eq!(
        ellipsize_middle("usdt:hotspot:method__return", 12),
        "usdt:…return"
    );
    assert_eq!(ellipsize_middle("short", 12), "short");
    assert_eq!(ellipsize_middle("abcdef", 1), "…");
    assert_eq!(ellipsize_middle("abcdef", 0), "");
}

#[test]
fn owner_column_and_detail_name_another_tools_probe() {
    // Another tool's probe and probetop's own probe on a breakpoint it shares: an OWNER
    // column where the terminal is wide enough, and the detail pane says whose it is.
    let mut labels = labels();
    labels[0].owner = Some("own+bpftrace 1234".into());
    labels[2].display = format!("{} <bpftrace 1234>", labels[2].display);
    labels[2].owner = Some("bpftrace 1234".into());
    let app_of = |width, labels: Vec<ProbeLabel>| {
        let mut app = App::new(
            TargetLine {
                pid: 4242,
                comm: "workload".into(),
            },
            labels,
            true,
            Theme::default(),
        );
        app.resize(width, 36);
        app.update(snapshot());
        app
    };
    let wide = text(&app_of(150, labels.clone()));
    assert!(wide.contains("OWNER"), "{wide}");
    assert!(wide.contains("own+bpftrace 1234"), "{wide}");
    assert!(wide.contains("bpftrace 1234"), "{wide}");
    // Every column but OWNER is still there.
    assert!(wide.contains("DROPS"), "{wide}");
    let narrow = text(&app_of(90, labels.clone()));
    assert!(!narrow.contains("OWNER"), "{narrow}");
    // Only probetop's own probes: no column.
    let own = text(&app_of(150, super::tests::labels()));
    assert!(!own.contains("OWNER"), "{own}");
    // The detail pane of the other tool's row names it.
    let mut app = app_of(150, labels);
    app.selected = Some(2);
    let detail = text(&app);
    assert!(
        detail.contains("owner: bpftrace 1234: another tool's probe"),
        "{detail}"
    );
}

#[test]
fn rows_whose_numbers_read_the_same_keep_their_places() {
    let mut app = app(120, 36);
    for (a, b) in [(1000.2, 999.8), (999.8, 1000.2)] {
        let mut snap = snapshot();
        snap.probes[0].per_second = a;
        snap.probes[1].per_second = b;
        app.update(snap);
        // Both read 1000 hits/s: name order (uprobe:work_unit before uretprobe:), below
        // the rows of ~20k hits/s and above the one of 800.
        let twins: Vec<usize> = order(&app).into_iter().filter(|&id| id < 2).collect();
        assert_eq!(twins, [0, 1], "{a} {b}");
    }
}

#[test]
fn the_status_line_keeps_its_layout_across_10k_events() {
    let status_at = |events: f64| {
        let mut app = app(100, 30);
        let mut snap = snapshot();
        snap.events_per_second = events;
        app.update(snap);
        let screen = text(&app);
        screen.lines().next().expect("status").to_string()
    };
    let (below, above) = (status_at(9_999.0), status_at(10_001.0));
    let parts = |s: &str| s.split("  ").filter(|p| !p.trim().is_empty()).count();
    assert_eq!(parts(&below), parts(&above), "{below}\n{above}");
    assert!(
        below.contains(" 9999 ev/s") && above.contains("10.0k ev/s"),
        "{below}\n{above}"
    );
}

#[test]
fn footer_says_when_there_is_no_calibration_and_keeps_quit() {
    let mut app = app(80, 24);
    app.note = Some(crate::present::NO_CALIBRATION_FOOTER);
    let screen = text(&app);
    let footer = screen.lines().last().expect("footer");
    assert!(footer.contains("q quit"), "{footer:?}");
    assert!(footer.contains("no calibration"), "{footer:?}");
    assert!(footer.contains("probetop calibrate"), "{footer:?}");
    // Without the note the hints fill the line as before.
    app.note = None;
    let screen = text(&app);
    let footer = screen.lines().last().expect("footer");
    assert!(!footer.contains("calibrat"), "{footer:?}");
}

#[test]
fn the_filter_in_force_stays_in_the_footer_beside_the_note() {
    for width in [80, 100, 160] {
        let mut app = app(width, 24);
        app.note = Some(crate::present::NO_CALIBRATION_FOOTER);
        app.filter = "leaf".into();
        let screen = text(&app);
        let footer = screen.lines().last().expect("footer");
        assert!(footer.contains("/leaf"), "{width}: {footer:?}");
        assert!(footer.contains("q quit"), "{width}: {footer:?}");
    }
}

/// At 80 columns the detail pane's words stay whole: the probe's state after its numbers
/// takes its short form (`streamed`) where the long one (`every hit streamed`) would be
/// cut at the border, and a median gap in the first bucket (under 1 us) reads so, not
/// as `0.00ns`.
#[test]
fn the_detail_pane_keeps_its_words_whole_at_80_columns() {
    let mut app = app(80, 24);
    let mut snap = snapshot();
    for (probe, cost) in snap
        .probes
        .iter_mut()
        .zip([1_078.0, 1_620.0, 12_935.0, 900.0])
    {
        probe.whole_cost_ns = Some(cost);
        probe.cpu_share = Some(cost * probe.per_second / 1e9);
        probe.gap_median_us = Some(0.0);
        probe.reading = Some(crate::present::GapReading::HandlerClock);
    }
    snap.assumption = Some(crate::present::Decision {
        assumes: crate::present::Assumption::Clock,
        why: "auto: each hit priced by its handler's clock".into(),
    });
    app.update(snap);
    app.selected = Some(2);
    let screen = text(&app);
    let totals = screen
        .lines()
        .find(|l| l.contains("cost/hit 12.9us"))
        .unwrap_or_else(|| panic!("no totals line: {screen}"));
    assert!(totals.contains("drops 0 · streamed "), "{totals}");
    assert!(!screen.contains("every hit str"), "{screen}");
    assert!(
        screen.contains("since the CPU's last hit p50 under 1us"),
        "{screen}"
    );
    assert!(!screen.contains("0.00ns"), "{screen}");
    // Wide enough, the long form.
    let mut wide = app.clone();
    wide.resize(120, 36);
    assert!(
        text(&wide).contains("drops 0 · every hit streamed "),
        "{}",
        text(&wide)
    );
}

/// Under `--in-situ` the table says that its live rates count hits only while the
/// probes are attached (they fall to 0 in a detached window); without it, nothing.
#[test]
fn in_situ_labels_the_live_rates() {
    let mut app = app(80, 24);
    assert!(!text(&app).contains("only while attached"));
    app.apply(UiEvent::InSitu {
        headline: None,
        probes_on: false,
        detail: String::new(),
    });
    let screen = text(&app);
    assert!(screen.contains(table::IN_SITU_RATES.trim()), "{screen}");
}

/// Another tool's row at 80 columns keeps its owner whole: the short mark `[s]` where
/// `[sampled]` would cut `<bpftrace 28964>`; a row the long mark leaves whole keeps it.
#[test]
fn another_tool_s_row_keeps_its_owner_at_80_columns() {
    let labels = vec![
        ProbeLabel::new(
            ProbeKind::Uprobe,
            "do_command(THD*, bool) <bpftrace 28964>",
            "/usr/sbin/mariadbd",
        ),
        ProbeLabel::new(ProbeKind::Uprobe, "work_unit", "/opt/fixtures/c/workload"),
    ];
    let mut app = App::new(
        TargetLine {
            pid: 4242,
            comm: "mariadbd".into(),
        },
        labels,
        true,
        Theme::default(),
    );
    app.resize(80, 24);
    let mut snap = snapshot();
    let mut other = probe(20_000, 2_000.0, 0);
    other.mode = crate::delivery::DeliveryMode::Sample;
    let mut ours = probe(10_000, 1_000.0, 100);
    ours.mode = crate::delivery::DeliveryMode::Sample;
    snap.probes = vec![other, ours];
    snap.focus = None;
    app.update(snap);
    let screen = text(&app);
    let rows: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains("do_command") || l.contains("work_unit "))
        .collect();
    assert!(
        rows.iter()
            .any(|l| l.contains("│do_command <bpftrace 28964> [s] ")),
        "{screen}"
    );
    assert!(
        rows.iter().any(|l| l.contains("│work_unit [sampled] ")),
        "{screen}"
    );
}
