"""`tl serve`'s /v1/embeddings on the worker thread: a text's final hidden states (stdlib/embed.tl,
after the model's output norm) pooled as `tl serve --pooling` says, L2-normalized, as llama-server's
pooling of the same names: "mean" (the default: the mean over the tokens) or "last" (the last
token's, which a causal model's embedding models are trained for).

Invariant: the hidden states come from a prefill at position 0 in the session's KV cache, so the
session's `cached_ids` become exactly the embedded ids (the cache holds their keys and values, and a
later request reuses what it shares with them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .llm_session import STDLIB_DIR


@dataclass
class EmbeddingResult:
    prompt_ids: list[int]
    vector: np.ndarray
    ids: list[int] = field(default_factory=list)  # (nothing generated: what the worker's counters read)
    stopped_by: str = "eog"


POOLINGS = ("mean", "last")


def embed(session, ids: list[int], pooling: str = "mean") -> EmbeddingResult:
    fn = getattr(session, "_hidden_fn", None)
    if fn is None:
        session.interp.load_file(str(STDLIB_DIR / "embed.tl"))
        fn = session._hidden_fn = session.interp.functions["model_hidden_states"]
    session._ensure_cache(len(ids))
    session.cached_ids = []  # the prefill below overwrites positions 0..len-1
    hidden = session.interp.call_value(fn, [session.model, session.cache, list(ids)])
    session.cached_ids = list(ids)
    rows = np.asarray(hidden.numpy(), dtype=np.float64).reshape(len(ids), -1)
    v = rows[-1] if pooling == "last" else rows.mean(axis=0)
    norm = np.linalg.norm(v)
    return EmbeddingResult(list(ids), (v / norm if norm > 0 else v).astype(np.float32))
