//! The study's pictures, as SVG files drawn with plotters (SVG backend only:
//! the text is left to the viewer's fonts, so no font library is needed).

use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const FONT: &str = "sans-serif";
const OFFERED: RGBColor = RGBColor(170, 170, 170);
const ALLOWED: RGBColor = RGBColor(31, 119, 180);
const LIMIT_LINE: RGBColor = RGBColor(214, 39, 40);
const GRID: RGBColor = RGBColor(232, 232, 232);
const SECOND: RGBColor = RGBColor(255, 127, 14);

/// A text style anchored at its right end, vertically centred.
fn right_aligned(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Right, VPos::Center))
}

/// One panel of a pattern's chart: a limiter's name and, over time, the
/// requests it allowed in the span ending then.
pub struct Panel {
    pub name: String,
    pub series: Vec<(f64, f64)>,
}

/// A title and a legend of coloured line samples across the top of `area`.
fn heading(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    legend: &[(RGBColor, &str)],
) -> Result<()> {
    area.draw(&Text::new(title, (14, 10), (FONT, 22).into_font()))?;
    let mut x = 14;
    for (color, label) in legend {
        area.draw(&PathElement::new(
            vec![(x, 50), (x + 26, 50)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(*label, (x + 32, 43), (FONT, 14).into_font()))?;
        x += 40 + 7 * label.len() as i32;
    }
    Ok(())
}

/// One chart per traffic pattern: a panel per limiter, each with the
/// requests sent (grey) and allowed (blue) in the last window, and the limit.
pub fn pattern_chart(
    path: &Path,
    title: &str,
    window_s: u64,
    limit: u64,
    offered: &[(f64, f64)],
    panels: &[Panel],
) -> Result<()> {
    let columns = 2;
    let rows = panels.len().div_ceil(columns);
    let height = 70 + 230 * rows as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(70);
    let sent = format!("sent in the last {window_s} s");
    let allowed = format!("allowed in the last {window_s} s");
    let limit_label = format!("the limit ({limit})");
    heading(
        &top,
        title,
        &[
            (OFFERED, &sent),
            (ALLOWED, &allowed),
            (LIMIT_LINE, &limit_label),
        ],
    )?;
    let x_max = offered.last().map_or(1.0, |p| p.0);
    let peak = panels
        .iter()
        .flat_map(|p| p.series.iter())
        .chain(offered)
        .map(|p| p.1)
        .fold(limit as f64, f64::max);
    let y_max = (peak * 1.1).ceil();
    for (area, panel) in body.split_evenly((rows, columns)).iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.name, (FONT, 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .x_desc("seconds")
            .x_labels(8)
            .y_labels(5)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style((FONT, 12))
            .draw()?;
        chart.draw_series(LineSeries::new(offered.iter().copied(), &OFFERED))?;
        chart.draw_series(LineSeries::new(
            [(0.0, limit as f64), (x_max, limit as f64)],
            LIMIT_LINE.stroke_width(1),
        ))?;
        chart.draw_series(LineSeries::new(
            panel.series.iter().copied(),
            ALLOWED.stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// Horizontal bars, one panel per group: `groups` of `(group title, bars)`,
/// each bar a label and a value; a dashed line marks `reference`.
pub fn bar_chart(
    path: &Path,
    title: &str,
    value_label: &str,
    reference: Option<(f64, &str)>,
    groups: &[(String, Vec<(String, f64)>)],
) -> Result<()> {
    let columns = 2;
    let rows = groups.len().div_ceil(columns);
    let bars = groups.iter().map(|g| g.1.len()).max().unwrap_or(1);
    let panel_height = 60 + 26 * bars as u32;
    let root = SVGBackend::new(path, (1100, 70 + panel_height * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(70);
    let mut legend = vec![(ALLOWED, value_label)];
    if let Some((_, label)) = reference {
        legend.push((LIMIT_LINE, label));
    }
    heading(&top, title, &legend)?;
    let peak = groups
        .iter()
        .flat_map(|g| g.1.iter().map(|b| b.1))
        .chain(reference.map(|r| r.0))
        .fold(0.0, f64::max);
    let x_max = (peak * 1.15).max(1.0);
    for (area, (group, values)) in body.split_evenly((rows, columns)).iter().zip(groups) {
        let n = values.len();
        let labels: Vec<String> = values.iter().map(|v| v.0.clone()).collect();
        let mut chart = ChartBuilder::on(area)
            .caption(group, (FONT, 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(150)
            .build_cartesian_2d(0f64..x_max, 0f64..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .x_labels(6)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|_| String::new())
            .label_style((FONT, 12))
            .draw()?;
        // Bar `i` is drawn from the top, around y = n - 1 - i + 0.5; its label
        // goes left of the axis, in the label area.
        for (i, label) in labels.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(0.0, (n - 1 - i) as f64 + 0.5));
            root.draw(&Text::new(label.as_str(), (x - 8, y), right_aligned(12)))?;
        }
        chart.draw_series(values.iter().enumerate().map(|(i, (_, v))| {
            let y = (n - 1 - i) as f64;
            Rectangle::new([(0.0, y + 0.15), (*v, y + 0.85)], ALLOWED.filled())
        }))?;
        chart.draw_series(values.iter().enumerate().map(|(i, (_, v))| {
            let y = (n - 1 - i) as f64;
            Text::new(format!("{v}"), (*v + x_max * 0.01, y + 0.75), (FONT, 12))
        }))?;
        if let Some((r, _)) = reference {
            chart.draw_series(LineSeries::new(
                [(r, 0.0), (r, n as f64)],
                LIMIT_LINE.stroke_width(2),
            ))?;
        }
    }
    root.present()?;
    Ok(())
}

/// Two bars per group (wrongly allowed, wrongly denied), in percent.
pub fn error_chart(path: &Path, title: &str, groups: &[(String, f64, f64)]) -> Result<()> {
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(70);
    heading(
        &top,
        title,
        &[
            (ALLOWED, "wrongly allowed (% of requests)"),
            (SECOND, "wrongly denied (% of requests)"),
        ],
    )?;
    let peak = groups.iter().map(|g| g.1.max(g.2)).fold(0.0, f64::max);
    let y_max = (peak * 1.2).max(1e-6);
    let n = groups.len();
    let labels: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
    let mut chart = ChartBuilder::on(&body)
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|y| {
            if y_max >= 1.0 {
                format!("{y:.0}%")
            } else {
                format!("{y:.3}%")
            }
        })
        .label_style((FONT, 12))
        .draw()?;
    for (i, (_, wrongly_allowed, wrongly_denied)) in groups.iter().enumerate() {
        let x = i as f64;
        for (offset, value, color) in [
            (0.15, *wrongly_allowed, ALLOWED),
            (0.5, *wrongly_denied, SECOND),
        ] {
            chart.draw_series([Rectangle::new(
                [(x + offset, 0.0), (x + offset + 0.35, value)],
                color.filled(),
            )])?;
            chart.draw_series([Text::new(
                format!("{value:.4}%"),
                (x + offset, value + y_max * 0.05),
                (FONT, 11),
            )])?;
        }
    }
    for (i, label) in labels.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        let style = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(label.as_str(), (x, y + 8), style))?;
    }
    root.present()?;
    Ok(())
}
