"""The Gemma 3 forward pass written in TL (stdlib/gemma3.tl, through generate.tl): against the
independent float64 NumPy oracle (numpy_gemma3.py) on tiny models of every storage type the real
file uses, with prompts longer than the sliding window; against the Hugging Face reference on the
real Gemma 3 270M (prompt ids exact, logits within 1e-3, greedy ids equal before the first near-tie,
the 12 tokenizer strings); and on a real prompt longer than the 512-position window against the oracle."""
from __future__ import annotations

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

from numpy_gemma3 import NumpyGemma3  # noqa: E402
from oracle_tolerance import logits_rel, pieces_tol  # noqa: E402
from reference_paths import REFERENCE_DIR  # noqa: E402
from tensorlogic.models.gguf_file import GGUFFile  # noqa: E402
from tensorlogic.apps.llm_session import LlmSession  # noqa: E402
from tensorlogic.models.testing import write_tiny_gemma3  # noqa: E402

# The storage types of the real file (F32 norms; Q5_0, Q8_0, Q4_K, Q6_K matrices), alone and mixed
# as gemma-3-270m-q4_k_m.gguf mixes them. K-quants need rows of 256 values.
K_SHAPE = dict(d_model=256, n_heads=2, head_dim=128, d_ff=512)
TINY_CASES = {
    "F32": dict(weight_type="F32"),
    "F16-untied": dict(weight_type="F16", tied_output=False),
    "Q8_0-one-kv-head": dict(weight_type="Q8_0", n_kv_heads=1),
    "Q5_0": dict(weight_type="Q5_0"),
    "Q4_K": dict(weight_type="Q4_K", weight_types={"token_embd": "Q8_0"}, **K_SHAPE),
    "Q6_K": dict(weight_type="Q6_K", weight_types={"token_embd": "Q8_0"}, **K_SHAPE),
    "mixed-as-real-file": dict(weight_type="Q5_0", n_kv_heads=1, weight_types={
        "token_embd": "Q8_0", "attn_v": "Q8_0", "attn_output": "Q4_K", "ffn_down": "Q6_K"}, **K_SHAPE),
    "pattern-2-local-base-softcap": dict(weight_type="F32", sliding_window_pattern=2, rope_local_base=500.0,
                                         final_logit_softcap=2.0),
}
PROMPT = "The capital of France is Paris. The capital of Italy is Rome. 12345 and 3.14159"


def _close(got: np.ndarray, want: np.ndarray, rel: float | None = None) -> bool:
    rel = logits_rel() if rel is None else rel
    return float(np.abs(got - want).max()) <= rel * max(float(np.abs(want).max()), 1.0)


@pytest.mark.parametrize("name", list(TINY_CASES))
def test_tl_forward_matches_numpy_oracle(tmp_path, name):
    path = write_tiny_gemma3(tmp_path / "g.gguf", seed=len(name), **TINY_CASES[name])
    oracle = NumpyGemma3(GGUFFile(path))
    with LlmSession(path, context=64) as session:
        assert session.config.architecture == "gemma3"
        prompt = session.raw_prompt_ids(PROMPT)
        assert prompt[0] == session.tokenizer.tok.bos_id
        assert len(prompt) > 2 * session.config.sliding_window  # the window matters in the prefill
        expected_ids, expected_first = oracle.greedy(prompt, 8)
        r = session.generate(prompt, 8, stop_at_eog=False, keep_logits=True)
    assert _close(r.prompt_logits, expected_first)
    assert r.ids == expected_ids


def test_local_layers_stop_seeing_keys_older_than_the_window(tmp_path):
    path = write_tiny_gemma3(tmp_path / "g.gguf", weight_type="F32", sliding_window=4)
    oracle = NumpyGemma3(GGUFFile(path))
    with LlmSession(path, context=64) as session:
        prompt = session.raw_prompt_ids(PROMPT)
        got = session.generate(prompt, 0, keep_logits=True).prompt_logits
    want = oracle.forward(prompt, last_only=True)[0]
    oracle.window = 10 ** 6  # the same model attending everywhere: clearly other logits
    oracle.reset()
    unwindowed = oracle.forward(prompt, last_only=True)[0]
    assert _close(got, want)
    assert np.abs(unwindowed - want).max() > 1e-2


def test_prefill_in_pieces_across_the_window_equals_one_prefill(tmp_path):
    path = write_tiny_gemma3(tmp_path / "g.gguf", weight_type="Q8_0", sliding_window=5)
    with LlmSession(path, context=64) as session:
        ids = session.raw_prompt_ids(PROMPT)
        full = session.generate(ids, 6, stop_at_eog=False, keep_logits=True)
        for cut in (3, 7, 11):  # before, across and after one window's length
            session.cached_ids = []
            session.generate(ids[:cut], 0)
            part = session.generate(ids, 6, stop_at_eog=False, keep_logits=True)
            assert part.prefilled == len(ids) - cut
            np.testing.assert_allclose(part.prompt_logits, full.prompt_logits, **pieces_tol())
            assert part.ids == full.ids


def test_unsupported_gemma3_variants_are_one_line_errors(tmp_path):
    from gguf import GGUFValueType as V

    from tensorlogic.models.errors import ModelError
    from tensorlogic.models.model_config import model_config

    cases = {
        "RoPE scaling 'linear' on gemma3 is not supported": {
            "gemma3.rope.scaling.type": ("linear", V.STRING), "gemma3.rope.scaling.factor": (8.0, V.FLOAT32)},
        "attention logit soft-capping": {"gemma3.attn_logit_softcapping": (50.0, V.FLOAT32)},
        "attention.value_length differs": {"gemma3.attention.value_length": (64, V.UINT32)},
    }
    for message, extra in cases.items():
        path = write_tiny_gemma3(tmp_path / "bad.gguf", extra_metadata=extra)
        with pytest.raises(ModelError, match=message) as e:
            model_config(GGUFFile(path))
        assert "\n" not in str(e.value)
    cfg = model_config(GGUFFile(write_tiny_gemma3(tmp_path / "ok.gguf")))
    assert (cfg.sliding_window_pattern, cfg.rope_local_base, cfg.final_logit_softcap) == (6, 10000.0, 0.0)
    assert cfg.attn_scale == pytest.approx(1 / np.sqrt(cfg.head_dim))


def test_causal_attention_window_matches_numpy():
    rng = np.random.default_rng(5)
    from tensorlogic.builtins.attention import _causal_attention

    for n, t, pos, window in [(1, 9, 8, 4), (5, 9, 4, 3), (9, 9, 0, 4), (3, 12, 9, 20), (4, 4, 0, 1)]:
        q = rng.standard_normal((n, 4, 8)).astype(np.float32)
        k = rng.standard_normal((t, 2, 8)).astype(np.float32)
        v = rng.standard_normal((t, 2, 8)).astype(np.float32)
        got = _causal_attention(core.from_numpy(q), core.from_numpy(k), core.from_numpy(v), pos, 0.3,
                                window).numpy()
        qp, kp = np.arange(pos, pos + n)[:, None], np.arange(t)[None, :]
        visible = (kp <= qp) & (qp - kp < window)
        kk, vv = np.repeat(k, 2, axis=1).astype(np.float64), np.repeat(v, 2, axis=1).astype(np.float64)
        s = np.einsum("shd,thd->hst", q.astype(np.float64), kk) * 0.3
        s = np.where(visible[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(got, np.einsum("hst,thd->shd", p, vv), atol=1e-5)


# ------------------------------------------------------------------------------ the real model


@pytest.fixture(scope="module")
def gemma3_session(gemma3_path):
    with LlmSession(gemma3_path, context=640) as session:
        yield session


def test_real_model_matches_reference(gemma3_session, gemma3_reference):
    session = gemma3_session
    for p in gemma3_reference["prompts"]:
        ids = session.raw_prompt_ids(p["prompt_text"])
        assert ids == p["prompt_ids"]
        session.cached_ids = []
        n = p["first_gap_below_0.01"] or p["n_new"]
        r = session.generate(ids, n, stop_at_eog=False, keep_logits=True)
        hf = np.load(REFERENCE_DIR / p["last_logits_npy"]).reshape(-1)
        assert r.prompt_logits.shape == hf.shape
        assert np.abs(r.prompt_logits - hf).max() < 1e-3
        assert r.ids == p["greedy_ids"][:n]


def test_real_model_matches_reference_with_poison_and_delay(gemma3_session, gemma3_reference):
    p = gemma3_reference["prompts"][0]
    saved = core.get_debug()
    core.set_debug(poison=True, delay_us=200)
    try:
        gemma3_session.cached_ids = []
        r = gemma3_session.generate(p["prompt_ids"], 8, stop_at_eog=False, keep_logits=True)
    finally:
        core.set_debug(poison=saved["poison"], delay_us=saved["delay_us"])
    hf = np.load(REFERENCE_DIR / p["last_logits_npy"]).reshape(-1)
    assert np.abs(r.prompt_logits - hf).max() < 1e-3
    assert r.ids == p["greedy_ids"][:8]


def test_real_tokenizer_matches_reference(gemma3_session, gemma3_tokenizer_reference, gemma3_reference):
    tok = gemma3_session.tokenizer.tok
    strings = gemma3_tokenizer_reference["strings"]
    assert len(strings) == 12
    for s in strings:
        assert tok.encode(s["text"], add_special=False) == s["ids"], s["name"]
        assert tok.decode(s["ids"]) == s["text"], s["name"]
    assert (tok.bos_id, tok.add_bos, tok.add_space_prefix) == (2, True, False)
    assert sorted(tok.eog_ids) == gemma3_reference["llamacpp_eog_ids"]  # <eos>, <end_of_turn>, </s>


@pytest.mark.parametrize("text", [
    "",
    " leading space, and\u00a0a no-break space",
    "smart quotes \u201clike this\u201d \u2014 and dashes \u2013 too",
    "bytes fall back: \u0000 \u0007 \U0001F9EA\U0001FAE0 \u200d",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "mixed scripts: Ελληνικά, русский, עברית, العربية, हिन्दी, ไทย",
    "a" * 300 + " " * 17 + "\t\t\n\n\n" + "Z",
])
def test_real_tokenizer_round_trips_text(gemma3_session, text):
    tok = gemma3_session.tokenizer.tok
    ids = tok.encode(text, add_special=True)
    assert ids[0] == tok.bos_id
    assert tok.decode(ids, skip_special=True) == text.replace("<start_of_turn>", "").replace("<end_of_turn>", "")
    assert tok.decode(ids[1:]) == text


def test_real_long_prompt_beyond_the_window_matches_float64_oracle(gemma3_session, gemma3_path):
    session = gemma3_session
    text = " ".join(f"Item {i}: the {['red', 'green', 'blue', 'yellow'][i % 4]} box holds {i * 7 % 13} stones."
                    for i in range(44))
    ids = session.raw_prompt_ids(text)
    window = session.config.sliding_window
    assert window == 512 and window < len(ids) < session.capacity - 24
    session.cached_ids = []
    r = session.generate(ids, 16, stop_at_eog=False, keep_logits=True)
    oracle = NumpyGemma3(GGUFFile(gemma3_path), keep_weights=False)
    logits = oracle.forward(ids + r.ids[:-1])  # teacher-forced on TL's own greedy ids
    last_prompt = logits[len(ids) - 1]
    assert np.abs(r.prompt_logits - last_prompt).max() < 1e-3
    for step, got in enumerate(r.ids):
        row = logits[len(ids) - 1 + step]
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] > 1e-3:  # not a near-tie: the float64 argmax must be TL's choice
            assert got == int(np.argmax(row)), f"step {step}"


def test_compiled_decode_replays_across_the_window_and_equals_eager_bitwise(tmp_path):
    """model_decode_step on Gemma 3 records once while the sliding window still covers every
    position and once after it filled (a guard refuses the first recording there); every replayed
    step's logits equal the eager step's bit for bit."""
    from tensorlogic.builtins.kvcache import KVCache

    path = write_tiny_gemma3(tmp_path / "g.gguf", weight_type="Q8_0", sliding_window=4)
    with LlmSession(path, context=32) as s:
        cfg, fns, call = s.config, s.interp.functions, s.interp.call_value
        caches = [KVCache(cfg.n_layers, 32, cfg.n_kv_heads, cfg.head_dim, "f32") for _ in range(2)]
        prompt = s.raw_prompt_ids(PROMPT)[:2]
        logits = [call(fns["model_last_logits"], [s.model, call(fns["model_forward"], [s.model, c, prompt, 0])])
                  for c in caches]
        pos = len(prompt)
        for _ in range(12):  # positions 2..13: the window of 4 fills at position 4
            tok = int(np.argmax(logits[0].numpy().reshape(-1)))
            logits = [call(fns["model_decode_step"], [s.model, caches[0], tok, pos]),
                      call(fns["model_last_logits"], [s.model, call(fns["model_forward"],
                                                                    [s.model, caches[1], [tok], pos])])]
            a, b = (x.numpy() for x in logits)
            assert a.tobytes() == b.tobytes(), pos
            pos += 1
        cf = fns["model_decode_step"].impl
        assert (cf.records, cf.replays) == (2, 10)
        for c in caches:
            c.release()


def test_real_model_fast_mode_stays_close_to_reference(gemma3_path, gemma3_reference):
    # --fast (8-bit activations in every quantized product, prompt pieces included): every Gemma
    # weight type (Q5_0, Q8_0, Q4_K, Q6_K) takes the integer path. Measured (2026-11-27): max
    # |logit - HF| 0.492 at the prompt, the first 21 greedy ids equal HF's; with the prompt's
    # products exact (TL_Q8_ACTIVATIONS alone, what --fast was before) 0.196 and 11. Step 11 was a
    # near-tie of that 8-bit model (gap 0.067; HF's gap there is above 0.01): which way it falls
    # depends on the float summation order, since a last-bit change moves some activations to the
    # next 8-bit step; the check stops before it. The bounds fail if the prompt's products silently
    # become exact or the mode drifts far.
    assert not core.q8_activations()
    p = gemma3_reference["prompts"][0]
    with LlmSession(gemma3_path, context=128, fast=True) as session:
        assert core.q8_activations()
        ids = session.raw_prompt_ids(p["prompt_text"])
        n = min(11, p["first_gap_below_0.01"] or p["n_new"])
        r = session.generate(ids, n, stop_at_eog=False, keep_logits=True)
        err = np.abs(r.prompt_logits - np.load(REFERENCE_DIR / p["last_logits_npy"]).reshape(-1)).max()
        assert 0.3 < err < 1.0, err
        assert r.ids == p["greedy_ids"][:n]
    assert not core.q8_activations()
