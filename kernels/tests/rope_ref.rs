//! CPU reference tests of the RoPE math the scatter kernel uses.

use recache_kernels::dtype::KvDtype;
use recache_kernels::rope::{RopeConfig, RopeStyle};
use recache_kernels::testing::Rng;

fn cfg(style: RopeStyle) -> RopeConfig {
    RopeConfig {
        rotary_dim: 128,
        theta: 1_000_000.0,
        style,
    }
}

fn rotated(c: &RopeConfig, x: &[f32], delta: i32) -> Vec<f32> {
    let (cos, sin) = c.cos_sin(delta);
    let mut y = x.to_vec();
    c.rotate(&mut y, &cos, &sin);
    y
}

fn head(rng: &mut Rng, d: usize) -> Vec<f32> {
    (0..d).map(|_| rng.uniform(-4.0, 4.0)).collect()
}

#[test]
fn rotation_by_zero_is_identity() {
    let mut rng = Rng::new(1);
    for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
        let x = head(&mut rng, 128);
        assert_eq!(rotated(&cfg(style), &x, 0), x, "{style:?}");
    }
}

#[test]
fn rotations_compose() {
    // R(a) R(b) = R(a + b) up to fp32 angle rounding (|angle| < 2^13 here).
    let mut rng = Rng::new(2);
    for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
        let c = cfg(style);
        for _ in 0..50 {
            let x = head(&mut rng, 128);
            let (a, b) = (rng.below(4000) as i32 - 2000, rng.below(4000) as i32);
            let two = rotated(&c, &rotated(&c, &x, a), b);
            let one = rotated(&c, &x, a + b);
            for (p, q) in two.iter().zip(&one) {
                assert!((p - q).abs() < 5e-3, "{style:?} a={a} b={b}: {p} vs {q}");
            }
        }
    }
}

#[test]
fn rotation_preserves_pair_norms_and_tail() {
    let mut rng = Rng::new(3);
    let c = RopeConfig {
        rotary_dim: 64,
        theta: 10_000.0,
        style: RopeStyle::NeoX,
    };
    let x = head(&mut rng, 128);
    let y = rotated(&c, &x, 777);
    assert_eq!(&y[64..], &x[64..], "dims past rotary_dim are untouched");
    for i in 0..32 {
        let (n0, n1) = (x[i].hypot(x[i + 32]), y[i].hypot(y[i + 32]));
        assert!((n0 - n1).abs() < 1e-5 * n0.max(1.0));
    }
}

#[test]
fn neox_equals_gptj_on_permuted_dims() {
    // GPT-J on interleaved (x0,y0,x1,y1,..) == NeoX on (x0,x1,..,y0,y1,..).
    let mut rng = Rng::new(4);
    let x = head(&mut rng, 128);
    let mut inter = vec![0f32; 128];
    for i in 0..64 {
        inter[2 * i] = x[i];
        inter[2 * i + 1] = x[i + 64];
    }
    let n = rotated(&cfg(RopeStyle::NeoX), &x, 1234);
    let g = rotated(&cfg(RopeStyle::GptJ), &inter, 1234);
    for i in 0..64 {
        assert_eq!(n[i], g[2 * i]);
        assert_eq!(n[i + 64], g[2 * i + 1]);
    }
    assert_ne!(
        n,
        rotated(&cfg(RopeStyle::GptJ), &x, 1234),
        "pairings differ"
    );
}

#[test]
fn rerotation_matches_direct_rotation_after_storage() {
    // Item K computed at position p0 and stored in bf16, then moved by
    // p1 - p0, stays within the storage rounding of its inputs (|x| < 4, so
    // one bf16 ulp at 4) of K computed at p1 directly: re-rotation adds no
    // error beyond what storing K already cost.
    let mut rng = Rng::new(5);
    let c = cfg(RopeStyle::NeoX);
    let dt = KvDtype::Bf16;
    let raw = head(&mut rng, 128);
    let (p0, p1) = (16, 900);
    let stored: Vec<f32> = rotated(&c, &raw, p0)
        .iter()
        .map(|&v| dt.to_f32(dt.from_f32(v)))
        .collect();
    let moved = rotated(&c, &stored, p1 - p0);
    let direct = rotated(&c, &raw, p1);
    for (m, d) in moved.iter().zip(&direct) {
        assert!((m - d).abs() <= dt.ulp(4.0) + 1e-4, "{m} vs {d}");
    }
}

#[test]
fn config_validation_rejects_bad_dims() {
    let mut c = cfg(RopeStyle::NeoX);
    assert!(c.validate(128).is_ok());
    c.rotary_dim = 12;
    assert!(c.validate(128).is_err());
    c.rotary_dim = 256;
    assert!(c.validate(128).is_err());
    c.rotary_dim = 64;
    c.theta = f32::NAN;
    assert!(c.validate(128).is_err());
}
