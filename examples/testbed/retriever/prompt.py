"""The retrieval model's prompt, the one contract between its training and the benches that
serve it (`bench/src/retrieve/codes.rs` builds the same tokens; tests/tests/engine_retrieve.rs
does not need it).

A user is their most recent `history` items before the one to retrieve, each written as its
semantic-ID code (the index's `code`, 2 or 3 tokens) then its own id token (ID_BASE + its
Beauty id: the codes come from another catalog's titles, so they say nothing of how Beauty's
items follow each other and the id carries that), with SEP between items; `/v1/retrieve` gets
those as `user.tokens` and `[SEP]` as `instruction`, so the model reads
`pad… c(h1) id(h1) SEP … c(hn) id(hn) SEP` and writes the next item's code (TIGER's layout
with an id token per item).
recache pads the front to whole KV blocks with the pad token; training draws 0..31 pad tokens
per sequence, so any padding reads alike. Beauty's item `i` is catalog item `keys[i mod n]`
(the n titled items sorted by numeric key: the title `bench gr` gives it).
"""
import json

SEP = 32767  # one below the index's default token base (32768): no code uses it
ID_BASE = 20480  # Beauty item i is token ID_BASE + i (the ranker's convention), below SEP
HISTORY = 20


def load_index(path):
    """(token_base, {catalog id: code}) of a `recache items index` file."""
    with open(path) as f:
        raw = json.load(f)
    codes = {}
    for it in raw["items"]:
        codes[int(it["id"])] = [int(t) for t in it["code"]]
    if raw["token_base"] <= SEP:
        raise SystemExit(f"{path}: token_base {raw['token_base']} must be above SEP {SEP}")
    return raw["token_base"], codes


def catalog_keys(items_path):
    """Numeric keys of the titled items, sorted: Beauty item i is keys[i mod len(keys)]."""
    with open(items_path) as f:
        raw = json.load(f)
    keys = sorted(int(k) for k, v in raw.items() if k.isdigit() and isinstance(v, dict)
                  and isinstance(v.get("title"), str) and v["title"].strip())
    if not keys:
        raise SystemExit(f"{items_path}: no item with a numeric key and a non-empty title")
    return keys


def id_token(item):
    if not 0 <= item < SEP - ID_BASE:
        raise SystemExit(f"item id {item} has no id token (ids below {SEP - ID_BASE})")
    return ID_BASE + item


def user_tokens(history):
    """`c(h1) id(h1) SEP … c(hn) id(hn)` of (code, Beauty id) pairs: `/v1/retrieve`'s
    user.tokens (the instruction is [SEP])."""
    out = []
    for n, (code, item) in enumerate(history):
        if n:
            out.append(SEP)
        out.extend(code)
        out.append(id_token(item))
    return out
