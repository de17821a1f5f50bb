//! Bin boundaries reused across LightGBM retrains (owned by the trainer thread).
//!
//! A LightGBM `Dataset` built from rows first finds every feature's bin boundaries; for a
//! 20k-row window that was about a third of a retrain on this machine (35 of ~100 ms, the rest
//! boosting). LightGBM can take the boundaries of a `reference` dataset instead, as it does for
//! validation sets. The sliding window's feature distributions move slowly, so [`BinCache`]
//! keeps a small reference built from a sample of one window's rows and rebuilds it every
//! [`REFRESH`] retrains, when the columns change, or when the window has grown past twice the
//! rows the reference came from (the first retrains see small windows). LightGBM itself finds
//! boundaries from a sample (`bin_construct_sample_cnt`, 200k rows by default).

use lightgbm3::Dataset;

/// Retrains that share one set of bin boundaries.
pub const REFRESH: u32 = 8;
/// Rows the boundaries are found from (an even stride over the window).
pub const SAMPLE_ROWS: usize = 5_000;

#[derive(Default)]
pub struct BinCache {
    reference: Option<Reference>,
}

struct Reference {
    cols: Vec<usize>,
    window_rows: usize,
    uses: u32,
    ds: Dataset,
}

impl BinCache {
    /// A training `Dataset` of the row-major `x` (`cols.len()` wide) with labels `y`, binned
    /// by the cached reference, which is rebuilt first when due. Also says whether it was.
    pub fn dataset(
        &mut self,
        x: &[f32],
        y: &[f32],
        cols: &[usize],
    ) -> Result<(Dataset, bool), String> {
        let width = cols.len();
        let rows = y.len();
        if width == 0 || x.len() != rows * width {
            return Err(format!(
                "{} values for {rows} rows of {width} columns",
                x.len()
            ));
        }
        let fresh = match &self.reference {
            None => true,
            Some(r) => r.cols != cols || r.uses >= REFRESH || rows > 2 * r.window_rows,
        };
        if fresh {
            let step = rows.div_ceil(SAMPLE_ROWS).max(1);
            let mut sx = Vec::with_capacity(rows.div_ceil(step) * width);
            let mut sy = Vec::with_capacity(rows.div_ceil(step));
            for r in (0..rows).step_by(step) {
                sx.extend_from_slice(&x[r * width..(r + 1) * width]);
                sy.push(y[r]);
            }
            let ds =
                Dataset::from_slice(&sx, &sy, width as i32, true).map_err(|e| e.to_string())?;
            self.reference = Some(Reference {
                cols: cols.to_vec(),
                window_rows: rows,
                uses: 0,
                ds,
            });
        }
        let Some(r) = self.reference.as_mut() else {
            return Err("no bin reference".into());
        };
        r.uses += 1;
        let ds = Dataset::from_slice_with_reference(x, y, width as i32, true, Some(&r.ds))
            .map_err(|e| e.to_string())?;
        Ok((ds, fresh))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, width: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = recache_hash::SplitMix64::new(seed);
        let mut next = || rng.unit() as f32;
        let x: Vec<f32> = (0..n * width).map(|_| next()).collect();
        let y = (0..n)
            .map(|r| x[r * width] * 2.0 + x[r * width + 1])
            .collect();
        (x, y)
    }

    #[test]
    fn reference_is_reused_then_refreshed() {
        let (x, y) = rows(3_000, 4, 1);
        let cols = [0, 1, 2, 3];
        let mut bins = BinCache::default();
        let fresh: Vec<bool> = (0..REFRESH + 1)
            .map(|_| {
                bins.dataset(&x, &y, &cols)
                    .map(|(_, f)| f)
                    .expect("dataset")
            })
            .collect();
        assert!(fresh[0]);
        assert!(fresh[1..REFRESH as usize].iter().all(|f| !f));
        assert!(fresh[REFRESH as usize], "refreshed after {REFRESH} uses");
        // Other columns or a window grown past twice the reference's: fresh boundaries.
        assert!(
            bins.dataset(&x[..3_000 * 3], &y, &cols[..3])
                .expect("dataset")
                .1
        );
        let (bx, by) = rows(7_000, 3, 2);
        assert!(bins.dataset(&bx, &by, &cols[..3]).expect("dataset").1);
        assert!(bins.dataset(&x, &y[..10], &cols).is_err(), "shape checked");
    }

    #[test]
    fn binned_model_fits_like_a_fresh_one() {
        let (x, y) = rows(20_000, 4, 3);
        let cols = [0, 1, 2, 3];
        let p = super::super::lgbm::params(&super::super::lgbm::LgbmConfig {
            iterations: 32,
            learning_rate: 0.1,
            ..Default::default()
        });
        let fresh = super::super::lgbm::train(&x, &y, &cols, &p).expect("fresh");
        let mut bins = BinCache::default();
        let (other_x, other_y) = rows(20_000, 4, 4);
        bins.dataset(&other_x, &other_y, &cols).expect("reference");
        let binned = super::super::lgbm::train_with(&mut bins, &x, &y, &cols, &p)
            .expect("binned")
            .0;
        let err = |m: &super::super::trees::Ensemble| {
            (0..2_000)
                .map(|r| (m.predict(&x[r * 4..r * 4 + 4]) - y[r] as f64).powi(2))
                .sum::<f64>()
                / 2_000.0
        };
        let (a, b) = (err(&fresh), err(&binned));
        assert!(b <= a * 1.1 + 1e-4, "binned mse {b} vs fresh {a}");
    }
}
