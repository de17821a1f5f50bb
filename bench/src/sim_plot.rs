//! `recache sim --plot FILE.png`: hit ratio vs capacity (at the first noise value) and hit
//! ratio vs noise (at the first capacity), one line per policy ([`crate::plot`]). The
//! simulator runs in the eviction crate; it calls [`draw`] with its rows.

use std::path::Path;

use recache_eviction::sim::SimRow;

use crate::plot::{self, Lines, Panel, Series, SeriesLabelPosition, XAxis};

/// One line per policy through the rows `keep` selects, at x = `x(row)`.
fn series(
    rows: &[SimRow],
    x: impl Fn(&SimRow) -> f64,
    keep: impl Fn(&SimRow) -> bool,
) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows.iter().filter(|r| keep(r)) {
        match out.iter_mut().find(|s| s.name == r.policy) {
            Some(s) => s.points.push((x(r), r.hit_ratio)),
            None => out.push(Series::new(r.policy.clone(), vec![(x(r), r.hit_ratio)])),
        }
    }
    out
}

fn lines<'a>(title: &'a str, x_desc: &'a str, series: Vec<Series>) -> Lines<'a> {
    Lines {
        title,
        x_desc,
        y_desc: "hit ratio",
        x_axis: XAxis::Span,
        diagonal: false,
        legend: SeriesLabelPosition::UpperLeft,
        series,
    }
}

/// Draws both charts into `path` (the simulator's [`recache_eviction::sim::Plotter`]).
pub fn draw(path: &Path, rows: &[SimRow]) -> Result<(), String> {
    let Some(first) = rows.first() else {
        return Err("no results to plot".into());
    };
    let (first_noise, first_cap) = (first.noise, first.capacity_blocks);
    let by_cap = series(rows, |r| r.capacity, |r| r.noise == first_noise);
    let by_noise = series(rows, |r| r.noise, |r| r.capacity_blocks == first_cap);
    let t1 = format!("hit ratio vs capacity (noise {first_noise})");
    let t2 = format!("hit ratio vs noise ({first_cap} blocks)");
    let panels = [
        Panel::Lines(lines(&t1, "capacity (fraction of distinct blocks)", by_cap)),
        Panel::Lines(lines(&t2, "oracle noise p", by_noise)),
    ];
    plot::draw(path, (1200, 480), &panels)
}
