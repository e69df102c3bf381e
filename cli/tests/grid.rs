//! `simulate --adaptive-grid smoke`: the grid's smoke form runs, prints one
//! row a point and the count line, and its exit status follows the count.

mod common;

use common::pacer;

#[test]
fn the_smoke_grid_prints_every_point_and_exits_by_its_count() {
    let run = pacer(&["simulate", "--adaptive-grid", "smoke"], "");
    let rows: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("sliding ") || l.starts_with("change "))
        .collect();
    // Smoke: 2 models × 3 limits × 2 starts × one load and length.
    assert_eq!(rows.len(), 12, "{}", run.stdout);
    let met_rows = rows.iter().filter(|l| l.ends_with("| met")).count();
    let last = run.stdout.lines().last().unwrap_or_default();
    assert_eq!(last, format!("adaptive goal met at {met_rows}/12 points"));
    assert_eq!(run.code == 0, met_rows == 12, "{}", run.stderr);
    if met_rows < 12 {
        assert_eq!(run.code, 1);
        assert!(run
            .stderr
            .contains(&format!("missed its goal at {} of 12", 12 - met_rows)));
    }
}

#[test]
fn the_grid_takes_no_upstream_or_adaptive_flags() {
    let run = pacer(
        &[
            "simulate",
            "--adaptive-grid",
            "smoke",
            "--upstream-limit-per-min",
            "30",
        ],
        "",
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
}

/// The smoke grid's rows (12 points: 60 agents, 10 minutes, limits 20,
/// 80, 320 from 30 and 600/min, sliding and change), split at `|`.
fn rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with("sliding ") || l.starts_with("change "))
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// The columns of a row (see the header): 11 is the rate's range, 12 the
/// share above `T`, 14 the goal.
const RATE: usize = 11;
const ABOVE: usize = 12;
const GOAL: usize = 14;

/// What a row missed, without the rate goal.
fn missed_but_rate(goal: &str) -> Vec<String> {
    goal.trim_start_matches("missed: ")
        .split(", ")
        .filter(|g| *g != "rate" && *g != "met")
        .map(str::to_string)
        .collect()
}

#[test]
fn the_settle_time_moves_only_the_rate_goal() {
    let goal = pacer(&["simulate", "--adaptive-grid", "smoke"], "");
    // Judged from the run's length (10 minutes), no sample of the rate is
    // judged: no range, nothing above `T`, the rate goal met everywhere.
    let none = pacer(
        &[
            "simulate",
            "--adaptive-grid",
            "smoke",
            "--grid-settle-ms",
            "600000",
        ],
        "",
    );
    // Judged from the start: each point's first search (60 agents ask
    // 1200/min, above every limit) is throttled within its first minute
    // and pauses at the lowest rate, 3/min at these defaults (5 retries of
    // at most 4 s: ⌈60000 / 20000⌉, SPEC §3 and §14), below 0.75·T at
    // every limit here.
    let all = pacer(
        &[
            "simulate",
            "--adaptive-grid",
            "smoke",
            "--grid-settle-ms",
            "0",
        ],
        "",
    );
    let (goal_rows, none_rows, all_rows) =
        (rows(&goal.stdout), rows(&none.stdout), rows(&all.stdout));
    assert_eq!(
        (goal_rows.len(), none_rows.len(), all_rows.len()),
        (12, 12, 12)
    );
    for ((g, n), a) in goal_rows.iter().zip(&none_rows).zip(&all_rows) {
        // Every column before the rate's is the same run's.
        assert_eq!(g[..RATE], n[..RATE]);
        assert_eq!(g[..RATE], a[..RATE]);
        assert_eq!((n[RATE].as_str(), n[ABOVE].as_str()), ("-", "0.0"), "{n:?}");
        assert!(!n[GOAL].contains("rate"), "{n:?}");
        assert!(a[RATE].starts_with("3.."), "{a:?}");
        assert!(a[GOAL].contains("rate"), "{a:?}");
        assert_eq!(missed_but_rate(&g[GOAL]), missed_but_rate(&n[GOAL]));
        assert_eq!(missed_but_rate(&g[GOAL]), missed_but_rate(&a[GOAL]));
    }
    let met = |rows: &[Vec<String>]| rows.iter().filter(|r| r[GOAL] == "met").count();
    assert_eq!(
        none.stdout.lines().last().unwrap_or_default(),
        format!(
            "adaptive goal met at {}/12 points (the rate judged from 600 s, not the goal's 180 s)",
            met(&none_rows)
        )
    );
    assert_eq!(met(&all_rows), 0);
    assert_eq!(all.code, 1);
}

#[test]
fn a_settle_time_needs_the_grid_and_at_most_an_hour() {
    let grid_with = |ms| {
        vec![
            "simulate",
            "--adaptive-grid",
            "smoke",
            "--grid-settle-ms",
            ms,
        ]
    };
    for args in [
        vec!["simulate", "--grid-settle-ms", "0"],
        grid_with("3600001"),
        grid_with("-1"),
        grid_with("1.5"),
    ] {
        let run = pacer(&args, "");
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("invalid value") && run.stderr.contains("--grid-settle-ms")
                || run.stderr.contains("required arguments"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{args:?}");
    }
}
