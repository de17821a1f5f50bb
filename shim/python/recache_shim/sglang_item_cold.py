"""The item pool's cold tier on SGLang (``sglang_item_pool``'s linker with a ``store`` config):
the vLLM connector's client, bounds and value format (``item_cold_loads.ColdLoads``), adapted
to the linker's two differences.

- **When it reads.** vLLM claims a cold part and learns at load time whether the store had it
  (a miss becomes a load error, which vLLM recomputes). In SGLang a failure after ``lookup``
  claimed tokens aborts the request, so the linker reads the store *in* ``lookup``, in one
  call bounded by ``timeout_ms``, and claims only what came back whole. That call runs on
  SGLang's scheduler thread: a store at its bound holds the step as long as a vLLM worker's
  fetch holds vLLM's. A request's answers are kept until it is released, so a request that
  waits for admission (``lookup`` again each step) reads the store once.
- **What an entry is.** The linker keeps an item as one token-major tensor
  ``[n, layers, K/V, heads, dim]`` (``Stacked``); the store keeps the connector's ``Entry``
  (per layer K and V rows under vLLM's attention layer names), so the value format, keys and
  checks are the connector's. Fills are written through with the engine's rows (before the
  pool's codec), in the background, as on vLLM.
"""

from __future__ import annotations

import torch

from .item_cold_loads import ColdLoads, add_cold_stats
from .item_pool_store import Entry


def layer_names(n: int) -> list[str]:
    """The names an entry's layers are stored under: vLLM's for a decoder's attention."""
    return [f"model.layers.{i}.self_attn.attn" for i in range(n)]


def served_name(server_args) -> str:
    """The model name entries are stored under: the served name, else the model path."""
    return str(getattr(server_args, "served_model_name", None)
               or getattr(server_args, "model_path", "") or "")


class SglangCold:
    """Reads and write-throughs for one linker; inert (``enabled`` False) without a store."""

    def __init__(self, config, model: str, kv, make_store=None):
        self.loads = ColdLoads(config, model, make_store)
        self.enabled = self.loads.enabled
        self.names = layer_names(int(kv.layer_num))
        self.got: dict[str, dict] = {}  # rid -> what the store answered for it
        if self.enabled:  # names the layout and starts connecting, in the background
            self.loads.configure(int(kv.head_num), int(kv.head_dim), kv.dtype)

    def fetch(self, rid: str, wants) -> dict[tuple[str, tuple], torch.Tensor]:
        """Rows ``[n, layers, 2, heads, dim]`` of the ``wants`` ([(key, tokens)]) the store
        served whole, read once per request."""
        if not wants:
            return {}
        have = self.got.setdefault(rid, {})
        missing = [w for w in wants if w not in have]
        if missing:
            got = self.loads.fetch_wants(missing, self.names)
            for w in missing:
                e = got.get(w)
                have[w] = None if e is None else torch.stack(
                    [torch.stack((e.k[n], e.v[n]), 1) for n in self.names], 1)
        return {w: have[w] for w in wants if have.get(w) is not None}

    def forget(self, rid: str) -> None:
        self.got.pop(rid, None)

    def put(self, key: str, tokens, rows: torch.Tensor) -> None:
        """Writes a committed fill's rows (``[n, layers, 2, heads, dim]``) through."""
        if not self.enabled:
            return
        e = Entry(tokens=tuple(tokens))
        for i, name in enumerate(self.names):
            e.k[name], e.v[name] = rows[:, i, 0], rows[:, i, 1]
        self.loads.write_through(key, e)

    def counts_into(self, stats: dict) -> None:
        """Adds the tier's counts since the last call to the report's ``stats``."""
        add_cold_stats(stats, self.loads.take_counts())

    def close(self) -> None:
        self.loads.close()
