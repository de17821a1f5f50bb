//! Which users `bench quality` may rank: a fixed share of users, chosen by a hash of the user
//! id alone, is held out of the ranker's training (`examples/testbed/ranker/data.py` computes
//! the same buckets; `tests/tests/engine_ranker_prompt.rs` checks both agree). A user's place does not
//! depend on the data file, its order or the other users, so the split survives any reload.

/// Mixed into the user id before hashing, so this split is independent of any other use of
/// `mix64` on user ids.
pub const SPLIT_SALT: u64 = 0x7175_616c_6974_7921;
/// Held-out (test) users per thousand: the only ones `bench quality` ranks.
pub const HELD_OUT_PER_MILLE: u64 = 50;
/// Dev users per thousand: the training script's own progress check; neither trained on nor
/// evaluated here.
pub const DEV_PER_MILLE: u64 = 20;

/// The user's place in `0..1000`.
pub fn bucket(user: u64) -> u64 {
    recache_hash::mix64(user ^ SPLIT_SALT) % 1000
}

/// Whether the user was held out of training.
pub fn held_out(user: u64) -> bool {
    bucket(user) < HELD_OUT_PER_MILLE
}

/// Whether the user is a training-time dev user (not held out, not trained on).
pub fn dev(user: u64) -> bool {
    (HELD_OUT_PER_MILLE..HELD_OUT_PER_MILLE + DEV_PER_MILLE).contains(&bucket(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_fixed_by_the_id() {
        // The same values are asserted on the Python side (tests/tests/engine_ranker_prompt.rs runs
        // both): changing the hash silently would evaluate on trained users.
        let held: Vec<u64> = (1..=400).filter(|&u| held_out(u)).collect();
        assert_eq!(held, HELD_IN_1_TO_400);
        assert!(held.iter().all(|&u| !dev(u)));
    }

    #[test]
    fn shares_are_as_configured() {
        let n = 100_000u64;
        let held = (0..n).filter(|&u| held_out(u)).count() as f64 / n as f64;
        let dev_share = (0..n).filter(|&u| dev(u)).count() as f64 / n as f64;
        assert!((held - 0.05).abs() < 0.003, "{held}");
        assert!((dev_share - 0.02).abs() < 0.002, "{dev_share}");
    }

    const HELD_IN_1_TO_400: &[u64] = &[
        15, 24, 25, 54, 56, 65, 83, 98, 101, 142, 161, 165, 205, 231, 282, 327, 341, 352, 391, 392,
    ];
}
