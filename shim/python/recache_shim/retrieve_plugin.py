"""vLLM endpoint plugin (``vllm.endpoint_plugins`` -> ``recache-retrieve``): recache's
trie-constrained beam search (:mod:`recache_shim.beam_trie`) run inside vLLM's API server,
against the engine client, as vLLM's own beam search runs (one engine request per live beam
and step, ``detokenize=False``), but each beam asks only for its own allowed tokens
(``logprob_token_ids``) and the search stops early.

Routes (loaded only when ``VLLM_PLUGINS`` names ``recache-retrieve``; the testbed's
``up --retrieve-plugin`` does):

- ``GET /recache/v1/beam_search``: ``{"object": "recache.beam_search", "version": 1}``, how
  recache learns that a replica runs the search in-process;
- ``POST /recache/v1/beam_search``: ``{"prompt": [ids], "beam_width", "top_k", "exclude":
  [item positions], "index": digest, "codes": [[ids], ...]?}``. The catalog (its codes in
  recache's index order) is sent once: the plugin keeps the last few by digest and answers
  409 ``unknown_index`` for a digest it does not hold, and recache sends it again with
  ``codes``. Answers ``{"object": "recache.beam_search", "items": [[position, score], ...],
  "usage": {steps, engine_requests, prompt_tokens, cached_tokens, pruned_beams,
  stopped_early}}``; errors are OpenAI-shaped (400 naming the field, the engine's failure as
  500).
"""

import asyncio
import logging
import uuid
from collections import OrderedDict

from . import beam_trie

logger = logging.getLogger("recache_shim")

ROUTE = "/recache/v1/beam_search"
VERSION = 1
MAX_BEAM_WIDTH = 1024  # recache's --retrieve-max-beam-width limit
_KEEP_INDEXES = 4


def _error(status: int, message: str, kind: str, param: str | None = None):
    from fastapi.responses import JSONResponse
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": kind, "param": param, "code": status}})


class _Bad(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def _ints(v, param: str, nonempty: bool = True) -> list[int]:
    if not isinstance(v, list) or (nonempty and not v) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise _Bad(param, f"'{param}' must be a {'non-empty ' if nonempty else ''}"
                          "list of non-negative integers")
    return v


def _int(body: dict, param: str, lo: int, hi: int) -> int:
    v = body.get(param)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise _Bad(param, f"'{param}' must be an integer in {lo}..={hi}")
    return v


class RetrievePlugin:
    """The ``vllm.endpoint_plugins`` factory (a zero-argument class)."""

    name = "recache-retrieve"
    required_tasks = ("generate",)

    def __init__(self) -> None:
        self.engine = None
        self.indexes: OrderedDict = OrderedDict()

    async def init_state(self, engine_client, state, args) -> None:
        self.engine = engine_client
        logger.info("recache retrieve plugin: %s in-process beam search", ROUTE)

    def attach_router(self, app) -> None:
        # No `from __future__ import annotations` in this module: FastAPI reads `Request` off
        # the handler's annotation, which must be the class, not a string.
        from fastapi import Request
        app.add_api_route(ROUTE, self.info, methods=["GET"])

        async def post(request: Request):
            return await self.handle(request)
        app.add_api_route(ROUTE, post, methods=["POST"])

    async def info(self):
        return {"object": "recache.beam_search", "version": VERSION}

    def _index(self, body: dict):
        digest = body.get("index")
        if not isinstance(digest, str) or not digest:
            raise _Bad("index", "'index' must be the catalog's digest (a non-empty string)")
        codes = body.get("codes")
        if codes is None:
            trie = self.indexes.get(digest)
            if trie is not None:
                self.indexes.move_to_end(digest)
            return trie
        if not isinstance(codes, list) or not codes:
            raise _Bad("codes", "'codes' must be a non-empty list of codes")
        try:
            trie = beam_trie.Trie([_ints(c, "codes") for c in codes])
        except beam_trie.IndexError_ as e:
            raise _Bad("codes", str(e)) from None
        self.indexes[digest] = trie
        while len(self.indexes) > _KEEP_INDEXES:
            self.indexes.popitem(last=False)
        return trie

    async def handle(self, request):
        if self.engine is None:
            return _error(503, "no engine behind this server", "service_unavailable")
        try:
            body = await request.json()
        except Exception as e:  # a body that is not JSON
            return _error(400, f"the body is not JSON: {e}", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object", "invalid_request_error")
        try:
            trie = self._index(body)
            prompt = _ints(body.get("prompt"), "prompt")
            width = _int(body, "beam_width", 1, MAX_BEAM_WIDTH)
            top_k = _int(body, "top_k", 1, width)
            exclude = _ints(body.get("exclude", []), "exclude", nonempty=False)
        except _Bad as e:
            return _error(400, str(e), "invalid_request_error", e.param)
        if trie is None:
            return _error(409, f"unknown catalog {body['index']!r}: send it with 'codes'",
                          "unknown_index", "index")
        try:
            answer = await self.search(trie, prompt, width, top_k, exclude)
        except _EngineFailed as e:
            return _error(500, str(e), "engine_error")
        except ValueError as e:  # vLLM's own validation (e.g. a token outside the vocabulary)
            return _error(400, str(e), "invalid_request_error")
        s = answer.stats
        return {"object": "recache.beam_search",
                "items": [[i, score] for i, score in answer.items],
                "usage": {"steps": s.steps, "engine_requests": s.engine_requests,
                          "prompt_tokens": s.prompt_tokens, "cached_tokens": s.cached_tokens,
                          "pruned_beams": s.pruned_beams, "stopped_early": s.stopped_early}}

    async def search(self, trie, prompt, width, top_k, exclude) -> beam_trie.Answer:
        from vllm.inputs.engine import tokens_input
        from vllm.sampling_params import SamplingParams
        stats = beam_trie.Stats()
        rid = f"recache-beam-{uuid.uuid4().hex}"
        engine = self.engine

        async def one(tokens: list[int], labels: list[int], request_id: str) -> list[float]:
            # Raw log-probabilities over the whole vocabulary (vLLM's default logprobs
            # mode), so each label reads what a call of its own would; nothing reads the
            # one generated token, so no allowed-token mask (its cost is per request).
            params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                                    logprob_token_ids=labels)
            last = None
            async for out in engine.generate(tokens_input(tokens), params, request_id):
                last = out
            if last is None or not last.outputs:
                raise _EngineFailed(f"the engine answered nothing for {request_id}")
            o = last.outputs[0]
            if o.finish_reason in ("error", "abort") or not o.logprobs:
                raise _EngineFailed(f"the engine ended {request_id}: {o.finish_reason}")
            stats.engine_requests += 1
            stats.prompt_tokens += len(tokens)
            stats.cached_tokens += last.num_cached_tokens or 0
            got = o.logprobs[0]
            return [got[t].logprob if t in got else beam_trie.NEG_INF for t in labels]

        async def score(beams, labels):
            step = stats.steps
            return await asyncio.gather(*(
                one(prompt + b, ls, f"{rid}-{step}-{i}")
                for i, (b, ls) in enumerate(zip(beams, labels))))

        return await beam_trie.search(trie, width, top_k, exclude, score, stats)


class _EngineFailed(RuntimeError):
    pass
