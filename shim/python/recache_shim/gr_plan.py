"""The GR replay's plan: per request, which tokens an engine finds in its prefix cache, which the
item pool loads and which it computes, per mode, at equal GPU memory. Pure Python (no torch):
`gr_replay` runs what this plans on a device; `project` prices it without one.

Input: the file ``recache bench gr --trace-only --replay-out FILE`` writes: a header with the
memory split of ``--kv-bytes`` (its ``pool_items``, most valuable first), then per mode and
request the layout recache chose. Modes:

- ``up``: the ``up`` lines, every prompt user-first. The engine's prefix cache (``BlockCache``:
  LRU over ``block``-token blocks keyed by the prompt's content chain, as vLLM's) keeps the
  profiles of returning users.
- ``bat-pool``: the ``bat-admit`` lines (bat-pool's choices are bat-admit's: BAT's admission
  test sends cold users item-first) with the item pool. An item-first prompt's items the pool
  holds lead, in recache's order, and are loaded, not computed (the engine's own prefix hit
  first, the pool after it, as vLLM's connector contract has it). The pool is the header's
  ``pool_items``, computed once before the stream (``precompute_tokens``): its hottest items in
  a device tier whose bytes come out of the mode's GPU KV budget, the rest in pinned host
  memory. Items outside it are computed in the prompt each time (no fills during the stream:
  a fixed pool, which can only understate the pool's gain).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field

MODES = {"up": "up", "bat-pool": "bat-admit"}


@dataclass
class Part:
    """A run of a prompt's tokens: ``ident`` names its content (equal idents, equal tokens)."""
    ident: tuple
    tokens: int


@dataclass
class Request:
    i: int
    kind: str  # "user" | "item"
    parts: list[Part]
    pooled: int = 0  # leading parts (items) the pool holds

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.parts)


@dataclass
class Header:
    block_size: int
    kv_token_bytes: int
    kv_bytes: int
    pool_bytes: int
    pool_items: list[str]
    raw: dict = field(default_factory=dict)


def read(path: str) -> tuple[Header, dict[str, list[dict]]]:
    """The replay file: its header and its request lines per mode name."""
    header, lines = None, {}
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                v = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
            if v.get("header"):
                header = Header(v["block_size"], v["kv_token_bytes"], v["kv_bytes"],
                                v["pool_bytes"], list(v["pool_items"]), v)
            else:
                lines.setdefault(v["mode"], []).append(v)
    if header is None:
        raise ValueError(f"{path}: no header line (write it with bench gr --replay-out)")
    return header, lines


def requests(lines: list[dict], pool: set[str] | None) -> list[Request]:
    """Prompts as parts, in stream order. ``pool``: resident items (bat-pool), moved to the
    front of an item-first prompt in their order, as recache lays out pooled items."""
    out = []
    for v in sorted(lines, key=lambda x: x["i"]):
        items = [Part(("item", k), n) for k, n in zip(v["items"], v["item_tokens"])]
        user = Part(("user", v["user"]), v["user_tokens"])
        tail = v["tokens"] - user.tokens - sum(p.tokens for p in items)
        own = Part(("tail", v["i"]), max(tail, 0))  # instruction: its chain is this prompt's
        pooled = 0
        if v["kind"] == "item":
            if pool is not None:
                res = [p for p in items if p.ident[1] in pool]
                items = res + [p for p in items if p.ident[1] not in pool]
                pooled = len(res)
            parts = items + [user, own]
        else:
            parts = [user] + items + [own]
        out.append(Request(v["i"], v["kind"], parts, pooled))
    return out


def chain_keys(req: Request, block: int) -> list[int]:
    """Content key of each full block: equal keys, equal tokens from the prompt's start."""
    keys, key, pieces, filled = [], 0, [], 0
    for p in req.parts:
        left, off = p.tokens, 0
        while left:
            take = min(left, block - filled)
            pieces.append((p.ident, off, take))
            off, left, filled = off + take, left - take, filled + take
            if filled == block:
                key = hash((key, tuple(pieces)))
                keys.append(key)
                pieces, filled = [], 0
    return keys


class BlockCache:
    """An engine's paged KV cache with prefix caching: ``num_blocks`` blocks; full blocks keep
    their key when freed and are reused on a hit until evicted (least recently freed first)."""

    def __init__(self, num_blocks: int, block: int):
        self.block, self.num_blocks = block, num_blocks
        self.free = list(range(num_blocks - 1, -1, -1))
        self.cached: dict[int, int] = {}  # key -> block
        self.evictable: OrderedDict[int, int] = OrderedDict()  # key -> block, LRU first
        self.refs: dict[int, int] = {}

    def admit(self, keys: list[int], ctx: int):
        """Blocks for a prompt of ``ctx`` tokens: (block table, hit tokens), or None if the
        free and evictable blocks cannot hold it now."""
        hit = []
        for k in keys:
            b = self.cached.get(k)
            if b is None:
                break
            hit.append(b)
        need = math.ceil(ctx / self.block) - len(hit)
        spare = len(self.free) + len(self.evictable) - sum(
            1 for k in keys[: len(hit)] if k in self.evictable)
        if need > spare:
            return None
        for k, b in zip(keys, hit):
            self.evictable.pop(k, None)
            self.refs[b] = self.refs.get(b, 0) + 1
        table = list(hit)
        while len(table) < len(hit) + need:
            if self.free:
                b = self.free.pop()
            else:
                k, b = self.evictable.popitem(last=False)
                del self.cached[k]
            self.refs[b] = 1
            table.append(b)
        # vLLM recomputes at least the last token of a fully cached prompt.
        return table, min(len(hit) * self.block, ctx - 1)

    def release(self, keys: list[int], table: list[int]) -> None:
        """The request is done: its full blocks stay cached under their keys."""
        for j, b in enumerate(table):
            self.refs[b] -= 1
            if self.refs[b]:
                continue
            k = keys[j] if j < len(keys) else None
            if k is None or self.cached.get(k, b) != b:
                self.free.append(b)
                continue
            self.cached[k] = b
            self.evictable[k] = b
            self.evictable.move_to_end(k)


@dataclass
class Step:
    """One request's work in a batch."""
    req: Request
    table: list[int]
    hit: int  # tokens found in the engine's cache
    loads: list[tuple[str, int, int, int]]  # (item, offset in item, tokens, prompt position)
    keys: list[int]

    @property
    def ctx(self) -> int:
        return self.req.tokens

    @property
    def loaded(self) -> int:
        return sum(n for _, _, n, _ in self.loads)

    @property
    def computed(self) -> int:
        return self.ctx - self.hit - self.loaded


def plan_loads(req: Request, hit: int) -> list[tuple[str, int, int, int]]:
    """Pooled items' tokens after the engine's own hit: what the pool loads."""
    out, pos = [], 0
    for p in req.parts[: req.pooled]:
        start = max(hit - pos, 0)
        if start < p.tokens:
            out.append((p.ident[1], start, p.tokens - start, pos + start))
        pos += p.tokens
    return out


def batches(reqs: list[Request], cache: BlockCache, size: int):
    """Yields lists of ``Step`` of at most ``size`` requests, in stream order, each admitted
    when the cache can hold it; call ``cache.release`` for each step after running it."""
    i = 0
    while i < len(reqs):
        out = []
        while i < len(reqs) and len(out) < size:
            r = reqs[i]
            keys = chain_keys(r, cache.block)
            got = cache.admit(keys, r.tokens)
            if got is None:
                if not out:
                    raise ValueError(f"request {r.i} ({r.tokens} tokens) does not fit in "
                                     f"{cache.num_blocks} blocks of {cache.block}")
                break
            table, hit = got
            out.append(Step(r, table, hit, plan_loads(r, hit), keys))
            i += 1
        yield out
