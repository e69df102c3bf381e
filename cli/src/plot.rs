//! `simulate --plot FILE.svg`: offered vs admitted per minute, and turn
//! latency per minute, as one SVG (plotters, SVG backend only). With
//! several machines a third chart shows the upstream's new connections per
//! minute, all machines together, with a bucket per machine and with one
//! fleet bucket, against the configured rate.

use std::path::Path;

use plotters::prelude::*;

use crate::sim::{MachinesReport, MinuteRow, SimReport};
use crate::sweep::{Sweep, SweepRow};

/// A line on a chart: label, colour, and the value it reads from a minute.
type Series<T> = (&'static str, RGBColor, fn(&MinuteRow) -> T);

fn err<E: std::fmt::Display>(error: E) -> String {
    format!("cannot draw the plot: {error}")
}

/// The chart type every chart here draws on: f64 by f64.
type Chart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// One labelled line with a dot at each point.
fn draw_line<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    points: Vec<(f64, f64)>,
    label: &str,
    color: RGBColor,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
        .map_err(err)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart
        .draw_series(
            points
                .into_iter()
                .map(|point| Circle::new(point, 3, color.filled())),
        )
        .map_err(err)?;
    Ok(())
}

/// As many x labels as whole minutes (at most 20), so every label is a
/// whole minute.
fn minute_labels(minutes: f64) -> usize {
    (minutes as usize + 1).min(21)
}

/// The chart's legend, boxed, at `position`.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    position: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .position(position)
        .draw()
        .map_err(err)
}

/// A chart over `0..minutes` (whole-minute labels) and `0..top·1.1` on
/// `area`, captioned, its y axis named `y_desc`, its mesh drawn.
fn minute_chart<'a, DB: DrawingBackend + 'a>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    minutes: f64,
    top: f64,
    y_desc: &str,
) -> Result<Chart<'a, DB>, String>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..minutes, 0f64..top * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("minute")
        .x_labels(minute_labels(minutes))
        .x_label_formatter(&whole_label)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// `--plot`'s file must be named `.svg` (the only format drawn): an error
/// naming the file otherwise.
pub fn require_svg(path: &Path) -> Result<(), String> {
    let is_svg = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if is_svg {
        Ok(())
    } else {
        Err(format!(
            "--plot {}: the chart is SVG; name a file ending in .svg",
            path.display()
        ))
    }
}

/// An axis position as the whole number it is (minutes, agents); nothing
/// between whole numbers.
fn whole_label(x: &f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        String::new()
    }
}

/// Writes the chart for `report` to `path`, which must name an `.svg`
/// file (the only format drawn).
pub fn write_svg(report: &SimReport, path: &Path) -> Result<(), String> {
    require_svg(path)?;
    let rows = &report.per_minute;
    let minutes = rows.len().max(1) as f64;
    let machines = report.machines.as_ref();
    let height = if machines.is_some() { 1120 } else { 760 };
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let load = match report.settings.load {
        "closed" => format!("{} agents", report.settings.agents.unwrap_or(0)),
        _ => format!(
            "offered {:.1}/min",
            report.settings.offered_per_min.unwrap_or(0.0)
        ),
    };
    let title = format!(
        "{} — {} · rate {}/min · burst {} · bound {} ms",
        match machines {
            Some(m) => format!("{} machines × {load}, a bucket per machine", m.machines),
            None => load,
        },
        match report.settings.design {
            crate::sim::Design::Paced => "this design",
            crate::sim::Design::AdmitAnyway => "admit anyway",
        },
        report.settings.rate_per_min,
        report.settings.burst,
        report.settings.bound_ms,
    );
    let root = root.titled(&title, ("sans-serif", 22)).map_err(err)?;
    let (top, bottom) = root.split_vertically(360);
    let (bottom, upstream) = match machines {
        Some(_) => {
            let (latency, upstream) = bottom.split_vertically(370);
            (latency, Some(upstream))
        }
        None => (bottom, None),
    };

    // Per-minute counts, drawn at the middle of their minute.
    let count_max = rows
        .iter()
        .map(|row| {
            row.offered
                .max(row.attempts)
                .max(row.admitted)
                .max(row.throttled.unwrap_or(0))
                .max(row.rate_in_force.map_or(0, u64::from))
        })
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let mut counts = minute_chart(
        &top,
        "per minute: offered, attempts, admitted, refused, terminal errors",
        minutes,
        count_max,
        "count per minute",
    )?;
    let series: [Series<u64>; 5] = [
        ("offered (new requests)", BLUE, |row| row.offered),
        ("attempts (with retries)", RGBColor(150, 150, 150), |row| {
            row.attempts
        }),
        ("admitted (opened)", RED, |row| row.admitted),
        ("refused (attempts)", RGBColor(230, 150, 0), |row| {
            row.refused
        }),
        ("terminal rate-limit errors (turns)", BLACK, |row| {
            row.terminal_errors
        }),
    ];
    for (label, color, value) in series {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .map(|row| (row.minute as f64 + 0.5, value(row) as f64))
            .collect();
        draw_line(&mut counts, points, label, color)?;
    }
    // A hidden upstream limit and adaptive pacing (SPEC §14): the upstream's
    // throttles per minute, and the rate in force at each minute's start.
    let limit_lines: [Series<Option<u64>>; 2] = [
        ("upstream throttles", RGBColor(140, 0, 160), |row| {
            row.throttled
        }),
        (
            "rate in force (per min, at the minute's start)",
            RGBColor(0, 140, 140),
            |row| row.rate_in_force.map(u64::from),
        ),
    ];
    for (label, color, value) in limit_lines {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|row| value(row).map(|v| (row.minute as f64 + 0.5, v as f64)))
            .collect();
        if !points.is_empty() {
            draw_line(&mut counts, points, label, color)?;
        }
    }
    draw_legend(&mut counts, SeriesLabelPosition::MiddleRight)?;

    // Turn latency of the turns completed in each minute.
    let latency_max = rows
        .iter()
        .filter_map(|row| row.latency_max_ms)
        .max()
        .unwrap_or(1000)
        .max(1000) as f64
        / 1000.0;
    let mut latency = minute_chart(
        &bottom,
        "turn latency of turns completed in the minute, s",
        minutes,
        latency_max,
        "seconds",
    )?;
    let latency_series: [Series<Option<u64>>; 2] = [
        ("p50", RGBColor(0, 120, 0), |row| row.latency_p50_ms),
        ("max", RGBColor(200, 120, 0), |row| row.latency_max_ms),
    ];
    for (label, color, value) in latency_series {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|row| value(row).map(|ms| (row.minute as f64 + 0.5, ms as f64 / 1000.0)))
            .collect();
        draw_line(&mut latency, points, label, color)?;
    }
    draw_legend(&mut latency, SeriesLabelPosition::MiddleRight)?;
    if let (Some(m), Some(area)) = (machines, upstream) {
        draw_upstream(m, &area)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The upstream's new connections per minute in both arrangements, with
/// the configured rate (and machines × rate) as dashed lines.
fn draw_upstream<DB: DrawingBackend>(
    m: &MachinesReport,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let (a, b) = (&m.bucket_per_machine, &m.fleet_bucket);
    let minutes = a
        .upstream_per_minute
        .len()
        .max(b.upstream_per_minute.len())
        .max(1) as f64;
    let rate = u64::from(m.rate_per_min);
    let all_rates = rate * u64::from(m.machines);
    let count_max = a
        .upstream_per_minute
        .iter()
        .chain(&b.upstream_per_minute)
        .copied()
        .chain([all_rates])
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let mut chart = minute_chart(
        area,
        &format!(
            "upstream new connections per minute, all {} machines",
            m.machines
        ),
        minutes,
        count_max,
        "connections per minute",
    )?;
    let per_machine_label = format!("a bucket per machine ({} pacers)", m.machines);
    for (label, color, values) in [
        (per_machine_label.as_str(), RED, &a.upstream_per_minute),
        (
            "one fleet bucket (1 shared pacer)",
            BLUE,
            &b.upstream_per_minute,
        ),
    ] {
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .map(|(minute, &count)| (minute as f64 + 0.5, count as f64))
            .collect();
        draw_line(&mut chart, points, label, color)?;
    }
    let configured = format!("configured rate {rate}/min");
    let times = format!("{} × the rate", m.machines);
    for (label, color, level) in [
        (configured.as_str(), BLACK, rate),
        (times.as_str(), RGBColor(150, 150, 150), all_rates),
    ] {
        let style = color.stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, level as f64), (minutes, level as f64)],
                8,
                6,
                style,
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    draw_legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
    Ok(())
}

/// A value of one sweep row, for one line of a chart.
type SweepValue = fn(&SweepRow) -> Option<f64>;
/// A sweep chart: caption, y axis, and its lines (label, colour, value).
type SweepChart = (
    &'static str,
    &'static str,
    Vec<(&'static str, RGBColor, SweepValue)>,
);

/// `simulate --sweep-agents --plot`: completed turns per minute, turn
/// latency p50/p90 and the terminal-error percentage against the agent
/// count, three charts in one SVG (`path` must end in `.svg`).
pub fn write_sweep_svg(sweep: &Sweep, title: &str, path: &Path) -> Result<(), String> {
    require_svg(path)?;
    let (Some(first), Some(last)) = (sweep.rows.first(), sweep.rows.last()) else {
        return Err("the sweep has no rows to draw".into());
    };
    let (lo, hi) = (
        f64::from(first.agents),
        f64::from(last.agents).max(f64::from(first.agents) + 1.0),
    );
    let root = SVGBackend::new(path, (960, 1080)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let areas = root.split_evenly((3, 1));
    let labels = ((hi - lo) as usize + 1).min(17);
    let charts: [SweepChart; 3] = [
        (
            "completed turns per minute",
            "turns per minute",
            vec![("turns/min", BLUE, |r| Some(r.turns_per_min))],
        ),
        (
            "turn latency of completed turns, s",
            "seconds",
            vec![
                ("p50", RGBColor(0, 120, 0), |r| {
                    r.latency_p50_ms.map(|ms| ms as f64 / 1000.0)
                }),
                ("p90", RGBColor(200, 120, 0), |r| {
                    r.latency_p90_ms.map(|ms| ms as f64 / 1000.0)
                }),
            ],
        ),
        (
            "turns ending in a terminal rate-limit error, %",
            "percent of turns",
            vec![("terminal errors", RED, |r| Some(r.terminal_error_percent))],
        ),
    ];
    for ((caption, y_desc, series), area) in charts.into_iter().zip(areas.iter()) {
        let top = series
            .iter()
            .flat_map(|(_, _, value)| sweep.rows.iter().filter_map(value))
            .fold(1.0_f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(lo..hi, 0f64..top * 1.1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("agents")
            .x_labels(labels)
            .x_label_formatter(&whole_label)
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        for (label, color, value) in series {
            let points: Vec<(f64, f64)> = sweep
                .rows
                .iter()
                .filter_map(|r| value(r).map(|v| (f64::from(r.agents), v)))
                .collect();
            draw_line(&mut chart, points, label, color)?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// `simulate --sweep-upstream --plot`: the adaptive runs' rate in force
/// over time, one line per hidden limit, each limit dashed in its colour
/// (`path` must end in `.svg`).
pub fn write_upstream_sweep_svg(
    sweep: &crate::upstream_sweep::Sweep,
    title: &str,
    path: &Path,
) -> Result<(), String> {
    require_svg(path)?;
    let colors = [
        RED,
        BLUE,
        RGBColor(0, 140, 0),
        RGBColor(200, 120, 0),
        RGBColor(140, 0, 160),
        BLACK,
    ];
    let end_ms = sweep
        .rows
        .iter()
        .flat_map(|r| r.rate_in_force_trace.last().map(|p| p[0]))
        .max()
        .unwrap_or(60_000)
        .max(60_000);
    let minutes = end_ms as f64 / 60_000.0;
    let top = sweep
        .rows
        .iter()
        .flat_map(|r| {
            r.rate_in_force_trace
                .iter()
                .map(|p| p[1])
                .chain([u64::from(r.upstream_limit_per_min)])
        })
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 18)).map_err(err)?;
    let mut chart = minute_chart(
        &root,
        "adaptive pacing: rate in force (solid) against the upstream's hidden limit (dashed)",
        minutes,
        top,
        "new connections per minute",
    )?;
    for (row, color) in sweep.rows.iter().zip(colors.iter().cycle()) {
        let color = *color;
        let points: Vec<(f64, f64)> = row
            .rate_in_force_trace
            .iter()
            .map(|p| (p[0] as f64 / 60_000.0, p[1] as f64))
            .collect();
        let label = format!("limit {}/min", row.upstream_limit_per_min);
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        let level = f64::from(row.upstream_limit_per_min);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, level), (minutes, level)],
                8,
                6,
                color.stroke_width(1),
            ))
            .map_err(err)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)?;
    Ok(())
}
