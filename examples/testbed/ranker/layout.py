"""The prompts recache sends for `/v1/rank`, mirrored from the Rust code so the ranker trains
on exactly what it is served (`tests/tests/engine_ranker_prompt.rs` checks the mirror against
`sidecar/src/rank/layout.rs` and the constants below against `rank/config.rs`).

- UP (user-first): `[U] [L_0 I_a] [L_1 I_b] ... [instr]`, items in request order, label of
  prompt position k = LABEL_BASE + k.
- IP (item-first): `[L_0 I_x] [L_1 I_y] ... [U] [instr]`, items hot-first (recache orders by how
  many requests each item appeared in so far, ties by numeric id).
- Pooled (IP with the item KV pool): resident items lead (hot-first among themselves), each with
  its own label LABEL_BASE + MAX_ITEMS + slot and computed alone from position 0 (positions
  restart per item, no attention across items); the other items follow hot-first with
  positional labels LABEL_BASE + k, then U and the instruction at their token index.
Plain stdlib: the prompt test runs it with any Python 3.
"""

LABEL_BASE = 256  # rank/config.rs DEFAULT_LABEL_BASE
MAX_ITEMS = 128  # rank/config.rs DEFAULT_MAX_ITEMS: pool labels start after these
DEFAULT_INSTRUCTION = "Rank the candidate items for this user. The label of the best item is:"
USER, ITEM = "user", "item"


def fit(tokens, n):
    """`tokens` cycled or cut to exactly n ids (bench gr's `workload::fit`)."""
    if not tokens:
        return []
    return [tokens[i % len(tokens)] for i in range(n)]


def item_text(title, n, item_id, id_base=0):
    """An item's n tokens as bench gr / bench quality send them (`Titles::item`): its title
    fitted to n, or with an item-id base (`--item-id-base`) the item's own id token
    `id_base + item_id` first and the title fitted to the other n - 1."""
    if not id_base:
        return fit(title, n)
    return [id_base + item_id] + fit(title, n - 1)


def profile(item_texts):
    """A user's text: its history items' texts back to back (bench gr's `Titles::body` with
    the profile length bench quality sets, i.e. no cycling)."""
    out = []
    for t in item_texts:
        out += t
    return out


def build_labeled(kind, user, items, order, instruction, labels_at):
    """layout::build_labeled: (tokens, [(label, item index)]) with label k given per position."""
    tokens, labels = [], []
    if kind == USER:
        tokens += user
    for i, label in zip(order, labels_at):
        labels.append((label, i))
        tokens.append(label)
        tokens += items[i]
    if kind == ITEM:
        tokens += user
    tokens += instruction
    return tokens, labels


def build(kind, user, items, order, instruction, label_base=LABEL_BASE):
    """layout::build: positional labels."""
    labels_at = [label_base + k for k in range(len(order))]
    return build_labeled(kind, user, items, order, instruction, labels_at)


def hot_first(ids, counts):
    """popularity.rs's order: request counts so far, descending; ties by id ascending."""
    return sorted(range(len(ids)), key=lambda i: (-counts[i], ids[i]))


def pooled(user, items, hot, resident, slots, instruction, label_base=LABEL_BASE,
           max_items=MAX_ITEMS):
    """An item-first prompt with the pool (pipeline.rs): `hot` is the hot-first order,
    `resident[i]` whether item i is pooled, `slots[i]` its pool slot or None (an item being
    filled has a slot, hence its pool label, but is computed in the prompt). Returns (tokens,
    labels, positions): positions restart at 0 for every resident item."""
    first = [i for i in hot if resident[i]]
    order = first + [i for i in hot if not resident[i]]
    labels_at = [label_base + k if slots[i] is None else label_base + max_items + slots[i]
                 for k, i in enumerate(order)]
    tokens, labels = build_labeled(ITEM, user, items, order, instruction, labels_at)
    positions, run = [], 0
    for i in first:
        positions += range(len(items[i]) + 1)
        run += len(items[i]) + 1
    positions += range(run, len(tokens))
    return tokens, labels, positions
