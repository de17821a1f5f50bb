//! Order statistics every benchmark reports with: nearest-rank quantiles of sorted samples
//! and the median and range of a number over repeated runs ([`Spread`]), of a ratio over
//! paired rounds too ([`paired_ratio`]).

use serde::Serialize;

/// The `q` quantile (0..=1, nearest rank) of `sorted`; NaN when empty (JSON `null`: no
/// successful request, no latency).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    nearest(sorted, q).unwrap_or(f64::NAN)
}

/// [`quantile`], 0 when empty (the rows of `bench replay`, `route` and `soak`).
pub fn pct(sorted: &[f64], q: f64) -> f64 {
    nearest(sorted, q).unwrap_or(0.0)
}

fn nearest(sorted: &[f64], q: f64) -> Option<f64> {
    let i = ((sorted.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
    sorted.get(i).copied()
}

/// Median and range of one number over a group's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// NaN values (a run with no successful request has NaN latencies) are left out; an empty
    /// or all-NaN input gives NaN everywhere.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return Self {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        // Even counts take the mean of the middle two: a median of 2 rounds is their mean.
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}

/// Median and range over rounds of the paired ratio `a_r / b_r` (round `r`'s numerator over
/// the same round's denominator), from the rounds both sides have with `b_r > 0` (a round
/// missing on either side is left out); None when no round pairs. Not a ratio of medians:
/// that would set one round's numerator against another's denominator.
pub fn paired_ratio(a: &[(u64, f64)], b: &[(u64, f64)]) -> Option<Spread> {
    let ratios: Vec<f64> = (a.iter())
        .filter_map(|(r, x)| {
            let (_, y) = b.iter().find(|(rb, _)| rb == r)?;
            (*y > 0.0 && x.is_finite()).then(|| x / y)
        })
        .collect();
    (!ratios.is_empty()).then(|| Spread::of(ratios))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratios_pair_rounds_and_skip_missing_ones() {
        // Odd: rounds 0..3, ratios 2, 3, 1.5 (a ratio of medians would say 4/2).
        let a = [(0, 4.0), (1, 9.0), (2, 3.0)];
        let b = [(0, 2.0), (1, 3.0), (2, 2.0)];
        assert_eq!(
            paired_ratio(&a, &b),
            Some(Spread {
                median: 2.0,
                min: 1.5,
                max: 3.0
            })
        );
        // Even: the mean of the middle two.
        let a4 = [(0, 4.0), (1, 9.0), (2, 3.0), (3, 10.0)];
        let b4 = [(0, 2.0), (1, 3.0), (2, 2.0), (3, 2.0)];
        assert_eq!(paired_ratio(&a4, &b4).map(|s| s.median), Some(2.5));
        // A round missing on one side (or with no throughput below) is left out.
        let b_missing = [(0, 2.0), (2, 2.0), (3, 0.0)];
        assert_eq!(
            paired_ratio(&a4, &b_missing),
            Some(Spread {
                median: 1.75,
                min: 1.5,
                max: 2.0
            })
        );
        assert_eq!(paired_ratio(&a, &[]), None);
    }

    #[test]
    fn nearest_rank_and_empty_inputs() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(
            (quantile(&v, 0.5), quantile(&v, 0.99), pct(&v, 0.0)),
            (3.0, 5.0, 1.0)
        );
        assert!(quantile(&[], 0.5).is_nan());
        assert_eq!(pct(&[], 0.99), 0.0);
        let s = Spread::of([3.0, f64::NAN, 1.0, 2.0, 10.0]);
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 10.0));
        assert!(Spread::of([f64::NAN]).median.is_nan());
    }
}
