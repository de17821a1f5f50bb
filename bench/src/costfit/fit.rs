//! The cost model and its fit: attended query–key pairs of a prefill ([`pairs`]), ordinary least
//! squares on a few columns ([`least_squares`]: normal equations, solved by Gaussian
//! elimination), and the fit `time ≈ a·tokens + b·pairs + c` with its R² and each kind's mean
//! relative residual ([`fit_abc`]); [`fit_per_kind_b`] fits one `b` per kind with `a` and `c`
//! shared, the direct test of "does a pair after a cached or pooled prefix cost more".

use serde::Serialize;

/// Query–key pairs a causal prefill of `computed` tokens after `prefix` tokens already in KV
/// attends: each new token sees the whole prefix, itself and the new tokens before it.
pub fn pairs(prefix: u64, computed: u64) -> u64 {
    computed * prefix + computed * (computed + 1) / 2
}

/// One measured prefill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub tokens: f64,
    pub pairs: f64,
    pub seconds: f64,
}

/// `x` with `y` fitted by least squares: one row of `xs` per point, one coefficient per
/// column. None when the columns are not independent on these points (too few points, or a
/// column that is a combination of the others) or the input is not finite.
pub fn least_squares(xs: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = xs.first()?.len();
    if k == 0 || xs.len() < k || xs.len() != y.len() || xs.iter().any(|r| r.len() != k) {
        return None;
    }
    // Columns scaled to a largest magnitude of 1: tokens (~1e3) and pairs (~1e7) squared in
    // the normal equations would otherwise span 1e14 and lose the small column.
    let scale: Vec<f64> = (0..k)
        .map(|j| xs.iter().map(|r| r[j].abs()).fold(0.0, f64::max))
        .collect();
    if scale.iter().any(|s| !(s.is_finite() && *s > 0.0)) || y.iter().any(|v| !v.is_finite()) {
        return None;
    }
    // [XᵀX | Xᵀy] on the scaled columns.
    let mut m = vec![vec![0.0; k + 1]; k];
    for (r, &v) in xs.iter().zip(y) {
        for i in 0..k {
            let xi = r[i] / scale[i];
            for j in 0..k {
                m[i][j] += xi * r[j] / scale[j];
            }
            m[i][k] += xi * v;
        }
    }
    let coef = solve(m)?;
    Some(coef.iter().zip(&scale).map(|(c, s)| c / s).collect())
}

/// Solves the augmented `k × (k+1)` system by Gaussian elimination with partial pivoting.
fn solve(mut m: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = m.len();
    let norm = m.iter().flatten().map(|v| v.abs()).fold(0.0, f64::max);
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        // Relative to the system's size: a pivot at rounding level means dependent columns.
        if m[pivot][col].abs() <= norm * 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let (top, rest) = m.split_at_mut(col + 1);
        let p = &top[col];
        for r in rest {
            let f = r[col] / p[col];
            for (x, y) in r[col..].iter_mut().zip(&p[col..]) {
                *x -= f * y;
            }
        }
    }
    let mut x = vec![0.0; k];
    for i in (0..k).rev() {
        let s: f64 = (i + 1..k).map(|j| m[i][j] * x[j]).sum();
        x[i] = (m[i][k] - s) / m[i][i];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// `time ≈ a·tokens + b·pairs + c`, fitted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Abc {
    /// Seconds per computed token.
    pub a: f64,
    /// Seconds per attended pair.
    pub b: f64,
    /// Seconds per request.
    pub c: f64,
}

impl Abc {
    pub fn predict(&self, p: &Point) -> f64 {
        self.a * p.tokens + self.b * p.pairs + self.c
    }
}

/// [`Abc`] fitted on `points`, with its coefficient of determination. None with 3 points or
/// fewer: three points fit exactly, and their R² and residuals would say nothing.
pub fn fit_abc(points: &[Point]) -> Option<(Abc, f64)> {
    if points.len() <= 3 {
        return None;
    }
    let xs: Vec<Vec<f64>> = points
        .iter()
        .map(|p| vec![p.tokens, p.pairs, 1.0])
        .collect();
    let y: Vec<f64> = points.iter().map(|p| p.seconds).collect();
    let c = least_squares(&xs, &y)?;
    let abc = Abc {
        a: c[0],
        b: c[1],
        c: c[2],
    };
    let predicted: Vec<f64> = points.iter().map(|p| abc.predict(p)).collect();
    Some((abc, r_squared(&y, &predicted)))
}

/// One `b` per kind (`kind[i]` indexes `points[i]`'s kind, `0..kinds`), `a` and `c` shared:
/// `(a, c, b per kind, R²)`. None when a kind has no point, the columns are dependent, or
/// there are no more points than coefficients.
pub fn fit_per_kind_b(
    points: &[Point],
    kind: &[usize],
    kinds: usize,
) -> Option<(f64, f64, Vec<f64>, f64)> {
    let bad = kind.len() != points.len() || points.len() <= kinds + 2;
    if bad || (0..kinds).any(|k| !kind.contains(&k)) {
        return None;
    }
    let xs: Vec<Vec<f64>> = points
        .iter()
        .zip(kind)
        .map(|(p, &k)| {
            let mut row = vec![p.tokens, 1.0];
            row.extend((0..kinds).map(|j| if j == k { p.pairs } else { 0.0 }));
            row
        })
        .collect();
    let y: Vec<f64> = points.iter().map(|p| p.seconds).collect();
    let c = least_squares(&xs, &y)?;
    let predicted: Vec<f64> = xs
        .iter()
        .map(|r| r.iter().zip(&c).map(|(x, c)| x * c).sum())
        .collect();
    Some((c[0], c[1], c[2..].to_vec(), r_squared(&y, &predicted)))
}

/// 1 − SS_res / SS_tot (NaN when every measured value is the same).
pub fn r_squared(y: &[f64], predicted: &[f64]) -> f64 {
    let mean = y.iter().sum::<f64>() / y.len().max(1) as f64;
    let ss_tot: f64 = y.iter().map(|v| (v - mean).powi(2)).sum();
    let ss_res: f64 = y.iter().zip(predicted).map(|(v, p)| (v - p).powi(2)).sum();
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        f64::NAN
    }
}

/// Mean of |predicted − measured| / measured over `points` (NaN when empty).
pub fn mean_relative_residual(abc: &Abc, points: &[Point]) -> f64 {
    let rel: Vec<f64> = points
        .iter()
        .filter(|p| p.seconds > 0.0)
        .map(|p| (abc.predict(p) - p.seconds).abs() / p.seconds)
        .collect();
    if rel.is_empty() {
        f64::NAN
    } else {
        rel.iter().sum::<f64>() / rel.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_causal_after_the_prefix() {
        // 3 tokens alone: 1 + 2 + 3.
        assert_eq!(pairs(0, 3), 6);
        // After 10 in KV each also sees the 10.
        assert_eq!(pairs(10, 3), 36);
        assert_eq!(pairs(1900, 0), 0);
        assert_eq!(pairs(0, 1), 1);
        // A fresh 7168-token prompt.
        assert_eq!(pairs(0, 7168), 7168 * 7169 / 2);
    }

    /// Points on a grid like the benchmark's (fresh, then after prefixes), times from known
    /// coefficients, with a deterministic ±0.5% wobble.
    fn synthetic(abc: Abc, wobble: f64) -> Vec<(Point, usize)> {
        let mut out = Vec::new();
        for (i, t) in [256u64, 512, 1024, 2048, 4096, 7168]
            .into_iter()
            .enumerate()
        {
            let p = Point {
                tokens: t as f64,
                pairs: pairs(0, t) as f64,
                seconds: 0.0,
            };
            out.push((p, i));
        }
        for (i, (pre, t)) in [
            (512u64, 64u64),
            (2048, 256),
            (4096, 1024),
            (4096, 64),
            (512, 2048),
        ]
        .into_iter()
        .enumerate()
        {
            let p = Point {
                tokens: t as f64,
                pairs: pairs(pre, t) as f64,
                seconds: 0.0,
            };
            out.push((p, i + 6));
        }
        out.into_iter()
            .map(|(mut p, i)| {
                let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
                p.seconds = abc.predict(&p) * (1.0 + sign * wobble);
                (p, i)
            })
            .collect()
    }

    #[test]
    fn least_squares_recovers_known_coefficients() {
        // b/a near the tiny testbed model's FLOP ratio (5e-4).
        let truth = Abc {
            a: 2.3e-4,
            b: 1.1e-7,
            c: 0.012,
        };
        let pts: Vec<Point> = synthetic(truth, 0.0).into_iter().map(|p| p.0).collect();
        let (abc, r2) = fit_abc(&pts).expect("independent columns");
        for (got, want) in [(abc.a, truth.a), (abc.b, truth.b), (abc.c, truth.c)] {
            assert!((got - want).abs() <= want.abs() * 1e-6, "{abc:?}");
        }
        assert!((r2 - 1.0).abs() < 1e-9, "{r2}");
        assert!(mean_relative_residual(&abc, &pts) < 1e-6);
        // With noise the fit stays close and the residual shows it.
        let noisy: Vec<Point> = synthetic(truth, 0.005).into_iter().map(|p| p.0).collect();
        let (abc, r2) = fit_abc(&noisy).expect("independent columns");
        assert!((abc.b - truth.b).abs() < truth.b * 0.05, "{abc:?}");
        assert!(r2 > 0.999, "{r2}");
        let rel = mean_relative_residual(&abc, &noisy);
        assert!(rel > 0.0 && rel < 0.02, "{rel}");
    }

    #[test]
    fn a_b_per_kind_is_recovered_with_shared_a_and_c() {
        let (a, c) = (2e-4, 0.01);
        let mut pts = Vec::new();
        let mut kinds = Vec::new();
        for (k, b) in [1e-8, 3e-8].into_iter().enumerate() {
            let abc = Abc { a, b, c };
            for (p, _) in synthetic(abc, 0.0) {
                pts.push(p);
                kinds.push(k);
            }
        }
        let (fa, fc, bs, r2) = fit_per_kind_b(&pts, &kinds, 2).expect("fit");
        assert!((fa - a).abs() < a * 1e-6 && (fc - c).abs() < c * 1e-6);
        assert!(
            (bs[0] - 1e-8).abs() < 1e-14 && (bs[1] - 3e-8).abs() < 1e-14,
            "{bs:?}"
        );
        assert!(r2 > 0.999_999);
        // A kind with no point has no b.
        assert!(fit_per_kind_b(&pts, &kinds, 3).is_none());
    }

    #[test]
    fn degenerate_inputs_give_no_fit() {
        let p = |t: f64, s: f64| Point {
            tokens: t,
            pairs: t * (t + 1.0) / 2.0,
            seconds: s,
        };
        assert!(fit_abc(&[]).is_none());
        assert!(fit_abc(&[p(10.0, 1.0), p(20.0, 2.0)]).is_none());
        // Three distinct points fit exactly: no fit is reported.
        assert!(fit_abc(&[p(10.0, 1.0), p(20.0, 2.0), p(40.0, 5.0)]).is_none());
        assert!(fit_abc(&[p(10.0, 1.0), p(20.0, 2.0), p(40.0, 5.0), p(80.0, 11.0)]).is_some());
        // Copies of one point: the columns are dependent.
        assert!(fit_abc(&[p(10.0, 1.0); 5]).is_none());
        let nan = [p(1.0, f64::NAN), p(2.0, 1.0), p(3.0, 1.0), p(5.0, 1.0)];
        assert!(fit_abc(&nan).is_none());
        assert!(r_squared(&[1.0, 1.0], &[1.0, 1.0]).is_nan());
    }
}
