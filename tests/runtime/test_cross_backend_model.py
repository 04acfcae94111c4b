"""The Llama forward pass (stdlib/llama.tl, run through LlmSession) on the CUDA backend against
the CPU backend: the greedy ids must be equal and the prompt logits close (f32 sums in another
order: max |diff| <= 1e-3 * max |logit|).

Models: a generated SmolLM2-135M-shaped GGUF (d 576, 9/3 heads of 64, FFN 1536, Q4_1 weights,
Q8_0 embedding; TL_CROSS_MODEL_LAYERS layers, default 4) with random weights; a generated Gemma 3
270M-shaped one (d 640, 4/1 heads of 256, FFN 2048, the real file's storage types Q5_0, Q8_0, Q4_K,
Q6_K, a sliding window shorter than the prompt) with random weights; the real Gemma 3 270M when
it is cached (its reference greedy ids checked too); and, when TL_CROSS_MODEL names a file, that
model (for the real SmolLM2 its reference greedy ids from tests/reference are checked as well). Speed of both backends is printed (run with -s);
TL_CROSS_REPORT=path also writes it as JSON. Skipped where no CUDA backend is usable;
TL_CROSS_BACKEND=cpu runs the harness against the CPU backend.
"""
from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tensorlogic import _core

OTHER = os.environ.get("TL_CROSS_BACKEND", "cuda")


def _other_backend_reason() -> str | None:
    if OTHER not in _core.available_backends():
        return f"this build of TensorLogic has no {OTHER} backend"
    previous = _core.backend_name()
    try:
        _core.init(OTHER)
    except _core.BackendUnavailable as e:
        return str(e)
    finally:
        _core.init(previous)
    return None


_REASON = _other_backend_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"no {OTHER} backend: {_REASON}")

REPORT: dict = {}


def _generate(path: Path, backend: str, prompt_ids: list[int], n_new: int):
    from tensorlogic.apps.llm_session import LlmSession

    gc.collect()
    with LlmSession(path, backend=backend, context=len(prompt_ids) + n_new + 1) as s:
        s.generate(list(prompt_ids), 4, stop_at_eog=False)  # warm-up (pool, first launches)
        s.cached_ids = []
        r = s.generate(list(prompt_ids), n_new, stop_at_eog=False, keep_logits=True)
    gc.collect()
    _core.init("cpu")
    return r


def _compare(name: str, path: Path, prompt_ids: list[int], n_new: int):
    ref = _generate(path, "cpu", prompt_ids, n_new)
    got = _generate(path, OTHER, prompt_ids, n_new)
    REPORT[name] = {
        "prompt_tokens": len(prompt_ids), "new_tokens": n_new,
        "cpu": {"prompt_tok_s": round(ref.prompt_tok_s, 1), "decode_tok_s": round(ref.decode_tok_s, 1)},
        OTHER: {"prompt_tok_s": round(got.prompt_tok_s, 1), "decode_tok_s": round(got.decode_tok_s, 1)},
    }
    a = np.asarray(ref.prompt_logits, dtype=np.float64)
    b = np.asarray(got.prompt_logits, dtype=np.float64)
    assert a.shape == b.shape
    diff = float(np.max(np.abs(a - b)))
    REPORT[name]["prompt_logits_max_abs_diff"] = diff
    REPORT[name]["greedy_ids_equal"] = ref.ids == got.ids
    print(f"\n{name}: {json.dumps(REPORT[name])}")
    if os.environ.get("TL_CROSS_REPORT"):
        Path(os.environ["TL_CROSS_REPORT"]).write_text(json.dumps(REPORT, indent=1))
    assert diff <= 1e-3 * max(1.0, float(np.max(np.abs(a)))), f"prompt logits differ by {diff}"
    if ref.ids != got.ids:
        first = next(i for i, (x, y) in enumerate(zip(ref.ids, got.ids)) if x != y)
        pytest.fail(f"greedy ids differ from step {first}: cpu {ref.ids[first:first + 8]} "
                    f"{OTHER} {got.ids[first:first + 8]}")
    return ref, got


def test_generated_smollm2_shaped_model_matches_cpu(tmp_path):
    from tensorlogic.models.testing import write_tiny_llama

    layers = int(os.environ.get("TL_CROSS_MODEL_LAYERS", "4"))
    path = write_tiny_llama(tmp_path / "smollm2_shaped.gguf", n_layers=layers, d_model=576, n_heads=9,
                            n_kv_heads=3, d_ff=1536, context_length=512, rope_base=100000.0,
                            weight_type="Q4_1", embedding_type="Q8_0", seed=3)
    prompt = [int(i) for i in np.random.default_rng(0).integers(3, 150, 40)]
    _compare(f"generated SmolLM2-shaped, {layers} layers", path, prompt, 32)


def test_named_model_matches_cpu_and_reference():
    model = os.environ.get("TL_CROSS_MODEL")
    if not model:
        pytest.skip("TL_CROSS_MODEL is not set (path of a GGUF to compare on both backends)")
    ref_path = Path(os.environ.get("TL_REFERENCE_DIR", Path(__file__).resolve().parents[1] / "reference")) / "smollm2.json"
    prompts = []
    if "gemma" in Path(model).name:
        ref_path = ref_path.with_name("gemma3.json")
    if ref_path.is_file() and ("SmolLM2" in Path(model).name or "gemma" in Path(model).name):
        reference = json.loads(ref_path.read_text())
        prompts = [(p["name"], p["prompt_ids"], p["greedy_ids"][:p.get("first_gap_below_0.01") or None])
                   for p in reference["prompts"]]
    else:
        prompts = [("prompt", [1, 2, 3, 4, 5, 6, 7, 8], None)]
    for name, ids, want in prompts:
        _, got = _compare(f"{Path(model).name} {name}", Path(model), ids, len(want) if want else 32)
        if want is not None:
            assert got.ids == want[:len(got.ids)], f"{name}: {OTHER} greedy ids differ from the reference"


def test_generated_gemma3_shaped_model_matches_cpu(tmp_path):
    from tensorlogic.models.testing import write_tiny_gemma3

    layers = int(os.environ.get("TL_CROSS_MODEL_LAYERS", "4"))
    path = write_tiny_gemma3(tmp_path / "gemma3_shaped.gguf", n_layers=layers, d_model=640, n_heads=4,
                             n_kv_heads=1, head_dim=256, d_ff=2048, context_length=512, sliding_window=24,
                             sliding_window_pattern=2, weight_type="Q5_0", seed=4,
                             weight_types={"token_embd": "Q8_0", "attn_v": "Q8_0", "attn_output": "Q4_K",
                                           "ffn_down": "Q6_K"})
    prompt = [int(i) for i in np.random.default_rng(1).integers(3, 150, 40)]
    _compare(f"generated Gemma3-shaped, {layers} layers", path, prompt, 32)


def test_real_gemma3_matches_cpu_and_reference():
    from tensorlogic.models.fetch import cached_path

    path = cached_path("gemma-3-270m")
    if not path.is_file():
        pytest.skip(f"gemma-3-270m is not cached ({path}); `tl model fetch gemma-3-270m`")
    ref_path = Path(os.environ.get("TL_REFERENCE_DIR", Path(__file__).resolve().parents[1] / "reference")) / "gemma3.json"
    if not ref_path.is_file():
        pytest.skip(f"no reference outputs at {ref_path.parent}")
    for p in json.loads(ref_path.read_text())["prompts"]:
        want = p["greedy_ids"][:p["first_gap_below_0.01"] or None]
        _, got = _compare(f"gemma-3-270m {p['name']}", path, p["prompt_ids"], len(want))
        assert got.ids == want, f"{p['name']}: {OTHER} greedy ids differ from the reference"
