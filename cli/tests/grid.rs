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
