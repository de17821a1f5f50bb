//! A small fuzz harness on stable Rust, shared by the `fuzz*` test files of every crate
//! (`#[path = "../../adapters/tests/fuzzkit/mod.rs"] mod fuzzkit;` outside `adapters`).
//!
//! A target is a generator (seeded [`Rng`] → input bytes, usually a valid seed input run
//! through [`mutate`]) and a check that must not panic. [`run`] calls the check in a loop for
//! the time budget: [`budget`] is 2 s per target, `RECACHE_FUZZ_SECONDS=N` makes it N seconds;
//! `RECACHE_FUZZ_SEED` picks the RNG seed (default: fixed per target, so runs reproduce).
//! Every execution runs under `catch_unwind`; a panic fails the test with the input in hex
//! and escaped form. A watchdog thread aborts the process (printing the input) if one
//! execution runs past [`HANG`]. Slowness short of that is a measurement, not a failure (a
//! loaded CI machine stalls a tiny input for over a second now and then): the slowest
//! execution is reported. At the end one JSON line goes to stderr:
//! `{"fuzz_target":..,"executions":..,"seconds":..,"crashes":0,"seed":..,"slowest_ms":..}`.

#![allow(dead_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The watchdog aborts the process when one execution runs this long.
pub const HANG: Duration = Duration::from_secs(20);

/// xorshift64* seeded through splitmix64: fast, reproducible, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True with probability 1/n.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A "interesting" integer: small, boundary or random.
    pub fn int(&mut self) -> u64 {
        match self.below(6) {
            0 => self.below(4) as u64,
            1 => *self.pick(&[u64::MAX, u64::MAX - 1, i64::MAX as u64, 1 << 63, 1 << 32]),
            2 => *self.pick(&[u32::MAX as u64, u32::MAX as u64 + 1, 255, 256, 65535]),
            3 => self.below(64) as u64,
            _ => self.next_u64(),
        }
    }
}

/// The time each target runs: `RECACHE_FUZZ_SECONDS` (default 2).
pub fn budget() -> Duration {
    let secs = std::env::var("RECACHE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

fn seed_for(target: &str) -> u64 {
    std::env::var("RECACHE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| recache_fnv(target.as_bytes()))
}

fn recache_fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `bytes` as hex and as an escaped string, for a crash report.
pub fn show(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("hex {hex}\nescaped \"{}\"", bytes.escape_ascii())
}

/// Runs `check(gen(rng))` for the time budget; see the module doc. Returns the executions.
pub fn run(
    target: &str,
    mut generate: impl FnMut(&mut Rng) -> Vec<u8>,
    mut check: impl FnMut(&[u8]),
) -> u64 {
    let seed = seed_for(target);
    let mut rng = Rng::new(seed);
    let budget = budget();
    let current = Arc::new(Mutex::new(Vec::<u8>::new()));
    let ticks = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (current, ticks, done) = (current.clone(), ticks.clone(), done.clone());
        let name = target.to_string();
        std::thread::spawn(move || {
            let mut last = (u64::MAX, Instant::now());
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let t = ticks.load(Ordering::Relaxed);
                if t != last.0 {
                    last = (t, Instant::now());
                } else if last.1.elapsed() > HANG {
                    let input = current.lock().map(|c| show(&c)).unwrap_or_default();
                    eprintln!("fuzz target {name}: execution hung > {HANG:?} on\n{input}");
                    std::process::abort();
                }
            }
        })
    };
    let started = Instant::now();
    let mut executions = 0u64;
    let mut slowest = Duration::ZERO;
    while started.elapsed() < budget {
        let input = generate(&mut rng);
        if let Ok(mut c) = current.lock() {
            c.clone_from(&input);
        }
        ticks.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let took = t0.elapsed();
        executions += 1;
        if let Err(e) = outcome {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            done.store(true, Ordering::Relaxed);
            panic!(
                "fuzz target {target} (seed {seed}) crashed after {executions} executions: {msg}\n{}",
                show(&input)
            );
        }
        slowest = slowest.max(took);
    }
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    eprintln!(
        "{{\"fuzz_target\":\"{target}\",\"executions\":{executions},\"seconds\":{:.2},\"crashes\":0,\"seed\":{seed},\"slowest_ms\":{:.1}}}",
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1e3
    );
    executions
}

/// Tokens worth splicing into text formats.
const DICT: &[&[u8]] = &[
    b"null",
    b"true",
    b"-1",
    b"0",
    b"1e999",
    b"-0.0",
    b"18446744073709551616",
    b"4294967296",
    b"\"\\ud800\"",
    b"\"\"",
    b"{}",
    b"[]",
    b"[[[[[[[[",
    b"]]]]",
    b"\xff\xfe",
    b"\xc3\x28",
    b"\"",
    b",",
    b":",
    b"\\",
    b"\n",
    b"\0",
];

/// Applies 1..4 random byte-level mutations to `input`; `others` are splice partners.
pub fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        let last = at.min(b.len().saturating_sub(1));
        match rng.below(9) {
            0 if !b.is_empty() => b[last] ^= 1 << rng.below(8),
            1 if !b.is_empty() => b[last] = rng.next_u64() as u8,
            2 => b.truncate(at),
            3 => {
                let end = (at + 1 + rng.below(16)).min(b.len());
                b.drain(at.min(end)..end);
            }
            4 => {
                let w = rng.pick(DICT);
                b.splice(at..at, w.iter().copied());
            }
            5 if !others.is_empty() => {
                let o = rng.pick(others);
                let from = rng.below(o.len() + 1);
                b.truncate(at);
                b.extend_from_slice(&o[from..]);
            }
            6 => {
                let end = (at + 1 + rng.below(32)).min(b.len());
                let chunk = b[at.min(end)..end].to_vec();
                b.splice(at..at, chunk);
            }
            7 => {
                let n = rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                b.splice(at..at, bytes);
            }
            _ => {}
        }
    }
    b
}
