"""recache's trie-constrained beam search, in Python, for the vLLM endpoint plugin
(:mod:`recache_shim.retrieve_plugin`).

It is the same search as recache's (``sidecar/src/retrieve/search.rs``), step for step, so an
answer from inside the engine equals one from recache's own loop:

- each step offers every live beam the trie's children of its node, less subtrees whose items
  are all excluded; a beam with nothing to offer is not scored;
- a candidate's score is ``float32(beam score) + float32(log-probability)`` (the beam top-k
  kernel's arithmetic); the step keeps the best ``beam_width`` candidates, ties broken by beam
  position, then by token (the kernel's key order); impossible (-inf or NaN) ones are dropped;
- a candidate that reaches a leaf is a finished item, kept best first, ties by item position;
- once ``top_k`` items are finished, beams scoring no better than the k-th are dropped before
  they cost the engine anything, and the search stops when none is left (the early stop).

Scoring is a callable ``score(beams, labels) -> awaitable list of per-beam log-probability
lists``: the plugin passes one that submits each beam as its own engine request.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

NEG_INF = float("-inf")


class IndexError_(ValueError):
    """A catalog the search cannot use (duplicate codes, a code that is a prefix of another)."""


class Trie:
    """The catalog's codes as a prefix trie: node 0 is the root; children sorted by token."""

    def __init__(self, codes: list[list[int]]):
        kids: list[dict[int, int]] = [{}]
        leaf: dict[int, int] = {}
        parent = [-1]
        for item, code in enumerate(codes):
            if not code:
                raise IndexError_(f"item {item} has an empty code")
            node = 0
            for tok in code:
                if node in leaf:
                    raise IndexError_(f"item {item}'s code runs through item {leaf[node]}'s")
                nxt = kids[node].get(tok)
                if nxt is None:
                    nxt = len(kids)
                    kids[node][tok] = nxt
                    kids.append({})
                    parent.append(node)
                node = nxt
            if kids[node] or node in leaf:
                raise IndexError_(f"item {item}'s code is a prefix of, or equals, another's")
            leaf[node] = item
        self.children = [sorted(k.items()) for k in kids]
        self.leaf_item = leaf
        self.parent = parent
        self.items = len(codes)
        self.codes = codes
        subtree = [0] * len(kids)
        for node in leaf:
            while node >= 0:
                subtree[node] += 1
                node = parent[node]
        self.subtree_items = subtree


@dataclass
class Stats:
    steps: int = 0
    engine_requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    pruned_beams: int = 0
    stopped_early: bool = False


@dataclass
class _Beam:
    tokens: list[int]
    node: int
    score: np.float32


@dataclass
class Answer:
    items: list[tuple[int, float]] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)


def _excluded_counts(trie: Trie, exclude: list[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for item in set(exclude):
        if not 0 <= item < trie.items:
            continue
        node = 0
        for tok in trie.codes[item]:
            node = dict(trie.children[node]).get(tok, -1)
            if node < 0:
                break
        while node >= 0:
            counts[node] = counts.get(node, 0) + 1
            node = trie.parent[node]
    return counts


async def search(trie: Trie, beam_width: int, top_k: int, exclude: list[int], score,
                 stats: Stats | None = None) -> Answer:
    """Runs the search: the best ``top_k`` items first as (item position, score). ``score(beams,
    labels)`` answers each beam's label log-probabilities (and counts its own cost into
    ``stats``, which it shares with the caller)."""
    excluded = _excluded_counts(trie, exclude)
    stats = stats or Stats()

    def allowed(node: int) -> list[tuple[int, int]]:
        return [(t, k) for t, k in trie.children[node]
                if trie.subtree_items[k] > excluded.get(k, 0)]

    found: list[tuple[float, int, float]] = []  # (-score, item, score), best first
    live = [_Beam([], 0, np.float32(0.0))]
    while live:
        if len(found) >= top_k:
            kth = found[top_k - 1][2]
            before = len(live)
            live = [b for b in live if b.score > kth]
            stats.pruned_beams += before - len(live)
            if not live:
                stats.stopped_early = True
                break
        stats.steps += 1
        offers = [allowed(b.node) for b in live]
        asked = [i for i, o in enumerate(offers) if o]
        rows: list[list[float]] = [[] for _ in live]
        if asked:
            got = await score([live[i].tokens for i in asked],
                              [[t for t, _ in offers[i]] for i in asked])
            for i, lp in zip(asked, got):
                rows[i] = lp
        cands = []
        for b, beam in enumerate(live):
            lps = rows[b]
            for j, (tok, kid) in enumerate(offers[b]):
                lp = np.float32(lps[j] if j < len(lps) else NEG_INF)
                s = np.float32(beam.score + lp)
                if s > NEG_INF:  # NaN fails this too
                    cands.append((-float(s), b, tok, kid, s))
        cands.sort(key=lambda c: (c[0], c[1], c[2]))
        nxt = []
        for _, b, tok, kid, s in cands[:beam_width]:
            item = trie.leaf_item.get(kid)
            if item is None:
                nxt.append(_Beam(live[b].tokens + [tok], kid, s))
            else:
                bisect.insort(found, (-float(s), item, s))
        live = nxt
    return Answer(items=[(item, float(s)) for _, item, s in found[:top_k]], stats=stats)
