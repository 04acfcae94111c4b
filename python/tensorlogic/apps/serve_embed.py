"""`tl serve`'s /v1/embeddings on the worker thread: the mean of a text's final hidden states
(stdlib/embed.tl, after the model's output norm), L2-normalized, as llama-server's mean pooling.

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


def embed(session, ids: list[int]) -> EmbeddingResult:
    fn = getattr(session, "_hidden_fn", None)
    if fn is None:
        session.interp.load_file(str(STDLIB_DIR / "embed.tl"))
        fn = session._hidden_fn = session.interp.functions["model_hidden_states"]
    session._ensure_cache(len(ids))
    session.cached_ids = []  # the prefill below overwrites positions 0..len-1
    hidden = session.interp.call_value(fn, [session.model, session.cache, list(ids)])
    session.cached_ids = list(ids)
    rows = np.asarray(hidden.numpy(), dtype=np.float64).reshape(len(ids), -1)
    v = rows.mean(axis=0)
    norm = np.linalg.norm(v)
    return EmbeddingResult(list(ids), (v / norm if norm > 0 else v).astype(np.float32))
