//! `--plot FILE.png`: hit ratio vs capacity (at the first noise value) and
//! hit ratio vs noise (at the first capacity), one line per policy.
//!
//! plotters' bitmap backend renders text with `ab_glyph` from a TTF file read
//! at run time, so the build needs no font libraries: `$RECACHE_PLOT_FONT`,
//! else DejaVu Sans / Liberation Sans from the usual Debian paths.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use super::SimError;
use super::report::SimRow;

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var("RECACHE_PLOT_FONT").ok();
        let path = env
            .iter()
            .map(String::as_str)
            .chain(FONTS.iter().copied())
            .find(|p| Path::new(p).is_file());
        let path = path.ok_or("no TTF font found; set RECACHE_PLOT_FONT=/path/to/font.ttf")?;
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes.leak())
            .map_err(|_| format!("{path}: not a usable font"))
    })
    .clone()
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

fn series(rows: &[SimRow], x: impl Fn(&SimRow) -> f64, keep: impl Fn(&SimRow) -> bool) -> Series {
    let mut out: Series = Vec::new();
    for r in rows.iter().filter(|r| keep(r)) {
        match out.iter_mut().find(|(p, _)| *p == r.policy) {
            Some((_, pts)) => pts.push((x(r), r.hit_ratio)),
            None => out.push((r.policy.clone(), vec![(x(r), r.hit_ratio)])),
        }
    }
    out
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    xlabel: &str,
    data: &Series,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let xs = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = if lo < hi {
        (lo, hi)
    } else {
        (lo - 0.5, lo + 0.5)
    };
    let ymax = data
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(lo..hi, 0.0..(ymax * 1.1).max(0.01))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc("hit ratio")
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in data.iter().enumerate() {
        let color = Palette99::pick(i).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// Draws both panels into `path`.
pub fn draw(path: &Path, rows: &[SimRow]) -> Result<(), SimError> {
    let fail = |msg: String| SimError::Plot {
        path: path.to_path_buf(),
        msg,
    };
    register_font().map_err(fail)?;
    let (Some(first_noise), Some(first_cap)) = (rows.first().map(|r| r.noise), rows.first()) else {
        return Err(fail("no results to plot".into()));
    };
    let first_cap = first_cap.capacity_blocks;
    let by_cap = series(rows, |r| r.capacity, |r| r.noise == first_noise);
    let by_noise = series(rows, |r| r.noise, |r| r.capacity_blocks == first_cap);
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(600);
    let t1 = format!("hit ratio vs capacity (noise {first_noise})");
    panel(
        &left,
        &t1,
        "capacity (fraction of distinct blocks)",
        &by_cap,
    )
    .map_err(fail)?;
    let t2 = format!("hit ratio vs noise ({first_cap} blocks)");
    panel(&right, &t2, "oracle noise p", &by_noise).map_err(fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}
