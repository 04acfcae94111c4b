"""R7 (docs/runtime.md) without the real model: after warm-up, a decode step of the TL Llama forward
pass (stdlib/llama.tl through LlmSession) makes at most one new device allocation per token; its
buffers come from the pool's cache and from the compiled decode step's recording (which owns its
intermediates). The same measurement with caching off (every release frees at once) counts more
than one allocation per token, so the bound is one the runtime could miss.
tests/e2e/failures/decode_allocations.tl checks the same on the real SmolLM2."""
from __future__ import annotations

import pytest

_core = pytest.importorskip("tensorlogic._core")

from tensorlogic.apps.llm_session import LlmSession  # noqa: E402
from tensorlogic.models.testing import write_tiny_llama  # noqa: E402

PROMPT = [1, 5, 9, 13, 17, 21, 25, 29]
DECODE = 33  # tokens per run; the first is chosen from the prompt's logits


def _allocations_per_decode_token(session: LlmSession) -> float:
    session.cached_ids = []  # the whole prompt again: the same work every run
    r = session.generate(PROMPT, DECODE, temperature=0.0, stop_at_eog=False, track_memory=True)
    steps = len(r.ids) - 1
    assert steps == DECODE - 1
    return (r.memory_at_last["allocations"] - r.memory_at_first["allocations"]) / steps


@pytest.mark.parametrize("weight_type", ["F32", "Q4_1"])
def test_decode_steps_take_their_buffers_from_the_pool(tmp_path, weight_type):
    path = write_tiny_llama(tmp_path / "m.gguf", weight_type=weight_type, d_model=64, d_ff=128)
    debug = _core.get_debug()
    try:
        with LlmSession(path, context=64) as s:
            _allocations_per_decode_token(s)  # warm-up: the pool learns the decode shapes
            warm = _allocations_per_decode_token(s)
            assert warm <= 1.0, f"{warm} device allocations per decode token after warm-up"
            _core.set_debug(no_cache=True)
            uncached = _allocations_per_decode_token(s)
            assert uncached > 1.0, (warm, uncached)
    finally:
        _core.set_debug(no_cache=bool(debug["no_cache"]))
