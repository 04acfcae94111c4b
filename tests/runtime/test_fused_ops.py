"""The fused ops (rms_norm_linear, swiglu_linear, linear with a residual, swiglu, rope_kv_write) against NumPy
oracles, and against their unfused compositions bit for bit on the CPU backend; plus the count
of device ops a decoded token of the TL Llama forward pass costs with them."""
from __future__ import annotations

import numpy as np
import pytest

from tensorlogic import _core

RNG = np.random.default_rng(13)


def T(a, dtype=None):
    a = np.ascontiguousarray(a)
    return _core.from_numpy(a, dtype=dtype) if dtype else _core.from_numpy(a)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def np_rms_norm(x, w, eps):
    x64 = x.astype(np.float64)
    inv = 1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)
    y = x * inv.astype(np.float32)
    return y * w if w is not None else y


def np_rope(x, pos, base, neox=False):
    """x [S, H, D] rotated at positions pos.. (angles in double, like the kernels)."""
    S, _, D = x.shape
    half = D // 2
    inv = base ** (-2.0 * np.arange(half) / D)
    theta = (pos + np.arange(S))[:, None] * inv[None, :]
    c, s = np.cos(theta).astype(np.float32)[:, None, :], np.sin(theta).astype(np.float32)[:, None, :]
    i0 = np.arange(half) if neox else 2 * np.arange(half)
    i1 = i0 + half if neox else i0 + 1
    out = x.copy()
    out[..., i0] = x[..., i0] * c - x[..., i1] * s
    out[..., i1] = x[..., i0] * s + x[..., i1] * c
    return out


def q4_1_weight(n, k):
    """A random Q4_1 matrix [n, k] as raw GGUF blocks (scale, min as f16, then 16 nibble bytes)."""
    blocks = np.zeros((n, k // 32, 20), np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.full(n * k // 32, 0.05, np.float16).tobytes(), np.uint8).reshape(n, k // 32, 2)
    blocks[:, :, 2:4] = np.frombuffer(np.full(n * k // 32, -0.4, np.float16).tobytes(), np.uint8).reshape(n, k // 32, 2)
    blocks[:, :, 4:] = RNG.integers(0, 256, (n, k // 32, 16), dtype=np.uint8)
    return _core.from_quantized(blocks.reshape(n, -1), "q4_1", [n, k])


@pytest.mark.parametrize("M", [1, 4, 33])
def test_rms_norm_linear_matches_numpy_and_equals_norm_then_linear(M):
    K, N = 96, 70
    x, nw, w = randn(M, K) * 2, randn(K), randn(N, K)
    got = _core.rms_norm_linear(T(x), T(nw), T(w), 1e-5).numpy()
    np.testing.assert_allclose(got, np_rms_norm(x, nw, 1e-5) @ w.T, rtol=1e-4, atol=1e-4)
    unfused = _core.linear(_core.rms_norm(T(x), T(nw), 1e-5), T(w)).numpy()
    if _core.backend_name() == "cpu":
        np.testing.assert_array_equal(got, unfused)
    wq = q4_1_weight(N, K)
    fused_q = _core.rms_norm_linear(T(x), T(nw), wq, 1e-5).numpy()
    unfused_q = _core.linear(_core.rms_norm(T(x), T(nw), 1e-5), wq).numpy()
    np.testing.assert_allclose(fused_q, unfused_q, rtol=1e-5, atol=1e-5)
    if _core.backend_name() == "cpu":
        np.testing.assert_array_equal(fused_q, unfused_q)


def test_rms_norm_linear_without_norm_weight_with_residual_and_leading_dims():
    x, w, res = randn(2, 3, 64), randn(10, 64), randn(2, 3, 10)
    got = _core.rms_norm_linear(T(x), None, T(w), 1e-6, T(res)).numpy()
    assert got.shape == (2, 3, 10)
    np.testing.assert_allclose(got, np_rms_norm(x, None, 1e-6) @ w.T + res, rtol=1e-4, atol=1e-4)


def test_rms_norm_linear_rejects_mismatched_shapes_with_one_clear_error():
    with pytest.raises(_core.ShapeError, match="norm weight"):
        _core.rms_norm_linear(T(randn(1, 8)), T(randn(7)), T(randn(4, 8)))
    with pytest.raises(_core.ShapeError, match="does not match weight"):
        _core.rms_norm_linear(T(randn(1, 8)), T(randn(8)), T(randn(4, 9)))


@pytest.mark.parametrize("M", [1, 12])
def test_linear_adds_a_residual_or_bias_in_its_epilogue_like_linear_then_add(M):
    K, N = 64, 50
    x, w, res, bias = randn(M, K), randn(N, K), randn(M, N), randn(N)
    got = _core.linear(T(x), T(w), T(res)).numpy()
    np.testing.assert_allclose(got, x @ w.T + res, rtol=1e-4, atol=1e-4)
    unfused = _core.add(_core.linear(T(x), T(w)), T(res)).numpy()
    with_bias = _core.linear(T(x), T(w), T(bias)).numpy()
    np.testing.assert_allclose(with_bias, x @ w.T + bias, rtol=1e-4, atol=1e-4)
    if _core.backend_name() == "cpu":
        np.testing.assert_array_equal(got, unfused)
    # an addend that would grow the output is added after the product (NumPy broadcasting)
    grown = _core.linear(T(x), T(w), T(randn(3, M, N))).numpy()
    assert grown.shape == (3, M, N)


def test_swiglu_of_fused_halves_and_of_two_strided_tensors_matches_numpy():
    gu = randn(3, 40) * 4
    g, u = gu[:, :20], gu[:, 20:]
    expect = g / (1 + np.exp(-g.astype(np.float64))).astype(np.float32) * u
    np.testing.assert_allclose(_core.swiglu(T(gu)).numpy(), expect, rtol=1e-5, atol=1e-6)
    t = T(gu)
    two = _core.swiglu(t[:, 0:20], t[:, 20:40]).numpy()
    np.testing.assert_allclose(two, expect, rtol=1e-5, atol=1e-6)
    if _core.backend_name() == "cpu":
        unfused = _core.mul(_core.silu(t[:, 0:20]), t[:, 20:40]).numpy()
        np.testing.assert_array_equal(two, unfused)
    assert _core.swiglu(T(randn(2, 3, 8))).shape == (2, 3, 4)


@pytest.mark.parametrize("M", [1, 6, 20])
def test_swiglu_linear_matches_numpy_and_equals_swiglu_then_linear_plus_residual(M):
    K, N = 64, 30
    gu, w, res = randn(M, 2 * K) * 3, randn(N, K), randn(M, N)
    g, u = gu[:, :K].astype(np.float64), gu[:, K:].astype(np.float64)
    got = _core.swiglu_linear(T(gu), T(w), T(res)).numpy()
    np.testing.assert_allclose(got, (g / (1 + np.exp(-g)) * u) @ w.T + res, rtol=1e-4, atol=1e-4)
    wq = q4_1_weight(N, K)
    fused_q = _core.swiglu_linear(T(gu), wq, T(res)).numpy()
    unfused_q = _core.linear(_core.swiglu(T(gu)), wq, T(res)).numpy()
    np.testing.assert_allclose(fused_q, unfused_q, rtol=1e-5, atol=1e-5)
    if _core.backend_name() == "cpu":
        np.testing.assert_array_equal(got, _core.add(_core.linear(_core.swiglu(T(gu)), T(w)), T(res)).numpy())
        np.testing.assert_array_equal(fused_q, unfused_q)
    with pytest.raises(_core.ShapeError, match="gate and up halves"):
        _core.swiglu_linear(T(gu[:, :K]), T(w))


def test_swiglu_rejects_an_odd_last_dim_and_mismatched_halves():
    with pytest.raises(_core.ShapeError, match="must be even"):
        _core.swiglu(T(randn(2, 7)))
    with pytest.raises(_core.ShapeError, match="one shape"):
        _core.swiglu(T(randn(2, 4)), T(randn(2, 5)))


@pytest.mark.parametrize("neox", [False, True])
def test_rope_kv_write_rotates_q_and_k_and_writes_only_its_cache_rows(neox):
    S, Hq, Hkv, D, pos, cap = 3, 6, 2, 16, 5, 12
    qkv = randn(S, (Hq + 2 * Hkv) * D)
    ck0, cv0 = randn(cap, Hkv, D), randn(cap, Hkv, D)
    t = T(qkv)
    q, k, v = t[:, 0:Hq * D], t[:, Hq * D:(Hq + Hkv) * D], t[:, (Hq + Hkv) * D:]
    kc, vc = T(ck0), T(cv0)
    q_out = _core.rope_kv_write(q, k, v, kc, vc, pos, 10000.0, neox)
    qn, kn, vn = (qkv[:, :Hq * D].reshape(S, Hq, D), qkv[:, Hq * D:(Hq + Hkv) * D].reshape(S, Hkv, D),
                  qkv[:, (Hq + Hkv) * D:].reshape(S, Hkv, D))
    np.testing.assert_allclose(q_out.numpy(), np_rope(qn, pos, 10000.0, neox), rtol=1e-5, atol=1e-5)
    ck, cv = kc.numpy(), vc.numpy()
    np.testing.assert_allclose(ck[pos:pos + S], np_rope(kn, pos, 10000.0, neox), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cv[pos:pos + S], vn)
    for got, before in ((ck, ck0), (cv, cv0)):
        np.testing.assert_array_equal(got[:pos], before[:pos])
        np.testing.assert_array_equal(got[pos + S:], before[pos + S:])
    if _core.backend_name() == "cpu":
        q3 = _core.reshape(q, [S, Hq, D])
        np.testing.assert_array_equal(q_out.numpy(), _core.rope(q3, pos, 10000.0, neox).numpy())
        np.testing.assert_array_equal(ck[pos:pos + S], _core.rope(_core.reshape(k, [S, Hkv, D]), pos, 10000.0,
                                                                  neox).numpy())


def test_rope_kv_write_from_a_row_writes_there_and_rotates_at_the_position():
    # a slot store's slot: rows row + pos.. of the caches, RoPE at positions pos..
    S, Hq, Hkv, D, pos, row, cap = 2, 4, 2, 8, 3, 7, 16
    q, k, v = randn(S, Hq, D), randn(S, Hkv, D), randn(S, Hkv, D)
    ck0, cv0 = randn(cap, Hkv, D), randn(cap, Hkv, D)
    kc, vc = T(ck0), T(cv0)
    q_out = _core.rope_kv_write(T(q), T(k), T(v), kc, vc, pos, 10000.0, False, row)
    np.testing.assert_allclose(q_out.numpy(), np_rope(q, pos, 10000.0, False), rtol=1e-5, atol=1e-5)
    ck, cv = kc.numpy(), vc.numpy()
    at = row + pos
    np.testing.assert_allclose(ck[at:at + S], np_rope(k, pos, 10000.0, False), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cv[at:at + S], v)
    for got, before in ((ck, ck0), (cv, cv0)):
        np.testing.assert_array_equal(got[:at], before[:at])
        np.testing.assert_array_equal(got[at + S:], before[at + S:])
    with pytest.raises(_core.ShapeError, match="from row 12 do not fit a cache of 16"):
        _core.rope_kv_write(T(q), T(k), T(v), kc, vc, 3, 10000.0, False, 12)


def test_rope_kv_write_refuses_positions_past_the_cache_and_mismatched_heads():
    kc, vc = T(randn(4, 2, 8)), T(randn(4, 2, 8))
    with pytest.raises(_core.ShapeError, match="do not fit a cache of 4"):
        _core.rope_kv_write(T(randn(2, 4, 8)), T(randn(2, 2, 8)), T(randn(2, 2, 8)), kc, vc, 3)
    with pytest.raises(_core.ShapeError, match="must be"):
        _core.rope_kv_write(T(randn(1, 4, 8)), T(randn(1, 3, 8)), T(randn(1, 3, 8)), kc, vc, 0)
    with pytest.raises(_core.ShapeError, match="head_dim"):
        _core.rope_kv_write(T(randn(1, 30)), T(randn(1, 16)), T(randn(1, 16)), kc, vc, 0)


def test_a_decoded_token_of_the_tl_llama_costs_at_most_six_device_ops_per_layer(tmp_path):
    # Fused: norm+QKV, rope+cache write, attention, output projection + residual, norm+gate/up,
    # swiglu+down projection + residual; plus the embedding, the final norm+logits and argmax.
    pytest.importorskip("gguf")
    from tensorlogic.apps.llm_session import LlmSession
    from tensorlogic.models.testing import write_tiny_llama

    n_layers = 4
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(str(path), n_layers=n_layers, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96,
                     context_length=128, weight_type="Q4_1", embedding_type="Q8_0", seed=5)
    with LlmSession(str(path), context=64) as session:
        session.generate(list(range(3, 10)), 3, stop_at_eog=False)  # warm-up
        counts = []
        for n in (4, 12):
            session.cached_ids = []
            before = _core.memory_stats()["ops_encoded"]
            session.generate(list(range(3, 10)), n, stop_at_eog=False)
            counts.append(_core.memory_stats()["ops_encoded"] - before)
    per_token = (counts[1] - counts[0]) / 8
    assert per_token <= 6 * n_layers + 4, per_token
