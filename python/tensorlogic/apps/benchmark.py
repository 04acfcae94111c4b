"""The TL side of bench/llm.py: load a model, then time one prefill and N greedy decode steps of
the TL forward pass (stdlib/llama.tl), median of `repeat` runs after one warm-up."""
from __future__ import annotations

import statistics
import time


def run_tl_benchmark(model_path: str, prompt_ids: list[int], decode_tokens: int, repeat: int = 3) -> dict:
    from ..builtins.sampling import SamplerValue
    from .llm_session import LlmSession

    class WaitTimingSampler(SamplerValue):
        """Greedy, and counts the time spent waiting for each token's logits (device work the host
        did not overlap); the rest of a decode step is interpreter and binding time."""

        def __init__(self):
            super().__init__(0.0, 0, 1.0, lambda: None)  # greedy: never draws
            self.waits: list[float] = []

        def sample(self, logits):
            t = time.perf_counter()
            tid = super().sample(logits)
            self.waits.append(time.perf_counter() - t)
            return tid

        def take(self, picked):  # the greedy loop that picks ahead reads each id here
            t = time.perf_counter()
            tid = super().take(picked)
            self.waits.append(time.perf_counter() - t)
            return tid

    t0 = time.perf_counter()
    session = LlmSession(model_path, context=len(prompt_ids) + decode_tokens + 1)
    load_s = time.perf_counter() - t0
    runs = []
    shares = []
    try:
        for i in range(repeat + 1):
            session.cached_ids = []  # a full prefill every run
            sampler = WaitTimingSampler()
            r = session.generate(list(prompt_ids), decode_tokens + 1, stop_at_eog=False, track_memory=True,
                                 sampler=sampler)
            if i > 0:
                runs.append(r)
                decode_wait = sum(sampler.waits[1:])
                if r.decode_seconds > 0:
                    shares.append(max(0.0, 1.0 - decode_wait / r.decode_seconds))
    finally:
        session.close()
    prompt_s = statistics.median(r.prompt_seconds for r in runs)
    decode_s = statistics.median(r.decode_seconds for r in runs)
    last = runs[-1]
    steps = max(len(last.ids) - 1, 1)
    out = {"load_s": load_s, "prompt_tok_s": len(prompt_ids) / prompt_s, "decode_tok_s": decode_tokens / decode_s}
    if shares:
        out["interp_share"] = statistics.median(shares)
    a, b = last.memory_at_first, last.memory_at_last
    if a and b:
        out["allocs_per_token"] = (b.get("allocations", 0) - a.get("allocations", 0)) / steps
        out["pool_hits_per_token"] = (b.get("pool_hits", 0) - a.get("pool_hits", 0)) / steps
    return out
