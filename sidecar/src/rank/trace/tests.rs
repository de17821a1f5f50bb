//! The trace of hand-made prompts: parts, chains, entities and pooled items.

use recache_eviction::trace::SegmentKind;

use super::*;

fn shape<'a>(
    kind: PrefixKind,
    tokens: &'a [u32],
    item_lens: &'a [usize],
    item_ids: &'a [&'a str],
    pooled: usize,
) -> PromptShape<'a> {
    PromptShape {
        link: 0,
        kind,
        tokens,
        user_len: 8,
        item_lens,
        item_ids,
        pooled,
        user_id: "42",
        salt: None,
    }
}

fn kinds(r: &Request) -> Vec<(SegmentKind, Option<u64>, usize, bool)> {
    r.segments
        .iter()
        .flatten()
        .map(|s| (s.kind, s.entity, s.len, s.root))
        .collect()
}

#[test]
fn user_first_prompt_is_one_chain_of_user_items_other() {
    // user 8 tokens, three items of 4 (label included), instruction 6: 26 tokens, blocks of 2.
    let tokens: Vec<u32> = (0..26).collect();
    let lens = [4, 4, 4];
    let r = request(
        &shape(PrefixKind::User, &tokens, &lens, &["1", "2", "3"], 0),
        2,
        7,
    );
    assert_eq!(r.hash_ids, blocks::prompt_ids(&tokens, 2));
    assert_eq!(r.timestamp, Some(7));
    assert_eq!(r.input_length, Some(26));
    assert_eq!(
        kinds(&r),
        vec![
            (SegmentKind::User, Some(42), 4, false),
            (SegmentKind::Items, None, 6, false),
            (SegmentKind::Other, None, 3, false),
        ]
    );
    assert_eq!(r.chains(), vec![(0, 13)]);
}

#[test]
fn straddling_blocks_are_other_and_partial_blocks_dropped() {
    let tokens: Vec<u32> = (0..27).collect();
    let lens = [4, 4, 4];
    // Blocks of 3: [0,3) [3,6) user, [6,9) straddles user/items, ... [18,21) straddles
    // items/instruction, the last 0 tokens of a partial block dropped (27 = 9 blocks).
    let r = request(
        &shape(PrefixKind::User, &tokens, &lens, &["1", "2", "3"], 0),
        3,
        0,
    );
    assert_eq!(
        kinds(&r),
        vec![
            (SegmentKind::User, Some(42), 2, false),
            (SegmentKind::Other, None, 1, false),
            (SegmentKind::Items, None, 3, false),
            (SegmentKind::Other, None, 3, false),
        ]
    );
}

#[test]
fn item_first_prompt_with_pooled_items() {
    // Items first (12 tokens), then user (8) and instruction (6); the first two items pooled.
    let tokens: Vec<u32> = (100..126).collect();
    let lens = [4, 4, 4];
    let plain = request(
        &shape(PrefixKind::Item, &tokens, &lens, &["1", "2", "3"], 0),
        2,
        0,
    );
    assert_eq!(
        kinds(&plain),
        vec![
            (SegmentKind::Items, None, 6, false),
            (SegmentKind::Other, None, 7, false),
        ]
    );
    let pooled = request(
        &shape(PrefixKind::Item, &tokens, &lens, &["1", "sku-2", "3"], 2),
        2,
        0,
    );
    let sku = entity("sku-2");
    assert_ne!(sku, 2);
    assert_eq!(
        kinds(&pooled),
        vec![
            (SegmentKind::Item, Some(1), 1, true),
            (SegmentKind::Item, Some(sku), 1, true),
            // The blocks starting at token 8 and later: the third item, then user + instruction.
            (SegmentKind::Items, None, 2, true),
            (SegmentKind::Other, None, 7, false),
        ]
    );
    assert_eq!(pooled.chains(), vec![(0, 1), (1, 2), (2, 11)]);
    let all = blocks::prompt_ids(&tokens, 2);
    assert_eq!(pooled.hash_ids[2..], all[4..]);
    // A pooled item's block is the same in every prompt that holds it, wherever it sits.
    let other: Vec<u32> = (500..526).collect();
    let again = request(
        &shape(PrefixKind::Item, &other, &lens, &["sku-2", "9", "1"], 1),
        2,
        0,
    );
    assert_eq!(again.hash_ids[0], pooled.hash_ids[1]);
    // A user-first prompt never uses the pool.
    let up = request(
        &shape(PrefixKind::User, &tokens, &lens, &["1", "2", "3"], 2),
        2,
        0,
    );
    assert_eq!(up.hash_ids, all);
}

#[test]
fn sink_writes_lines_sim_reads_back() {
    let dir = std::env::temp_dir().join(format!("recache-rank-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("t.jsonl");
    let tokens: Vec<u32> = (0..26).collect();
    let lens = [4, 4, 4];
    {
        let sink = TraceSink::create(&path, 2).expect("create");
        sink.record(&shape(
            PrefixKind::User,
            &tokens,
            &lens,
            &["1", "2", "3"],
            0,
        ));
        sink.record(&shape(
            PrefixKind::Item,
            &tokens,
            &lens,
            &["1", "2", "3"],
            1,
        ));
    }
    let back = recache_eviction::trace::load_mooncake(&path).expect("load");
    assert_eq!(back.len(), 2);
    assert_eq!(back[0].hash_ids, blocks::prompt_ids(&tokens, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_salt_changes_engine_blocks_not_pooled_items() {
    let tokens: Vec<u32> = (100..126).collect();
    let lens = [4, 4, 4];
    let plain = request(
        &shape(PrefixKind::Item, &tokens, &lens, &["1", "2", "3"], 1),
        2,
        0,
    );
    let salted = |salt| {
        let mut s = shape(PrefixKind::Item, &tokens, &lens, &["1", "2", "3"], 1);
        s.salt = Some(salt);
        request(&s, 2, 0)
    };
    let (a, b) = (salted("a"), salted("b"));
    assert_eq!(a.hash_ids[0], plain.hash_ids[0]);
    assert_eq!(a.hash_ids, salted("a").hash_ids);
    for i in 1..a.hash_ids.len() {
        assert_ne!(a.hash_ids[i], plain.hash_ids[i]);
        assert_ne!(a.hash_ids[i], b.hash_ids[i]);
    }
}
