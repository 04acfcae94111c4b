"""Quantized weights through the native runtime against the `gguf` package's reference.

For every GGUF weight type the CPU kernels support, weights are quantized with
`gguf.quants.quantize` (or, for the K-quants, which that package cannot quantize, built as random
valid blocks), uploaded byte for byte with `_core.from_quantized`, and `linear` (decode M == 1 and
prefill M > 1, with and without bias) and `embedding` are compared with
`gguf.quants.dequantize` + NumPy in float64. Tolerance: 1e-5 of the sum of |x * w| over the row
(f32 accumulation), far below any layout mistake, which moves results by O(1).
"""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

from tensorlogic import _core  # noqa: E402

QUANT_TYPES = {
    "q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "q8_0": Q.Q8_0,
    "q4_k": Q.Q4_K, "q5_k": Q.Q5_K, "q6_k": Q.Q6_K,
}
K_QUANTS = {"q4_k", "q5_k", "q6_k"}


def _random_k_blocks(rng: np.random.Generator, qtype, rows: int, cols: int) -> np.ndarray:
    """Random valid super-blocks: random quant bits and scales, small finite f16 d/dmin."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(nblocks, block_bytes), dtype=np.uint8)
    if qtype == Q.Q6_K:
        raw[:, 208:210] = (rng.uniform(0.0005, 0.002, nblocks).astype(np.float16)
                           .view(np.uint8).reshape(nblocks, 2))
    else:
        raw[:, 0:2] = rng.uniform(0.001, 0.01, nblocks).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
        raw[:, 2:4] = rng.uniform(0.001, 0.01, nblocks).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, -1)


def _weights(name: str, rows: int, cols: int, seed: int):
    """(device tensor, float64 dequantized reference) for a [rows, cols] weight of type `name`."""
    rng = np.random.default_rng(seed)
    qtype = QUANT_TYPES[name]
    if name in K_QUANTS:
        raw = _random_k_blocks(rng, qtype, rows, cols)
    else:
        raw = gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32) * 0.1, qtype)
    ref = gguf.quants.dequantize(raw, qtype).astype(np.float64).reshape(rows, cols)
    w = _core.from_quantized(np.ascontiguousarray(raw), name, [rows, cols])
    assert w.dtype == name and tuple(w.shape) == (rows, cols)
    return w, ref


def _assert_linear_close(got: np.ndarray, x: np.ndarray, ref_w: np.ndarray, bias=None):
    want = x.astype(np.float64) @ ref_w.T
    scale = np.abs(x.astype(np.float64)) @ np.abs(ref_w).T
    if bias is not None:
        want = want + bias
        scale = scale + np.abs(bias)
    assert got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want)
    bad = err > 1e-5 * scale + 1e-6
    assert not bad.any(), f"max error {err.max():.3g} at {np.unravel_index(err.argmax(), err.shape)}"


@pytest.mark.parametrize("name", sorted(QUANT_TYPES))
@pytest.mark.parametrize("m", [1, 3, 64])
def test_linear_matches_dequantized_reference(name, m):
    cols = 512 if name in K_QUANTS else 96
    rows = 45
    w, ref = _weights(name, rows, cols, seed=sum(map(ord, name)) * 100 + m)
    x = np.random.default_rng(7).standard_normal((m, cols)).astype(np.float32)
    y = _core.linear(_core.from_numpy(x), w).numpy()
    assert y.dtype == np.float32
    _assert_linear_close(y, x, ref)


@pytest.mark.parametrize("name", ["q4_1", "q8_0", "q6_k"])
def test_linear_with_batch_dims_and_bias(name):
    cols = 256
    w, ref = _weights(name, 20, cols, seed=3)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 5, cols)).astype(np.float32)
    bias = rng.standard_normal(20).astype(np.float32)
    y = _core.linear(_core.from_numpy(x), w, _core.from_numpy(bias)).numpy()
    assert y.shape == (2, 5, 20)
    _assert_linear_close(y.reshape(10, 20), x.reshape(10, cols), ref, bias.astype(np.float64))


@pytest.mark.parametrize("name", sorted(QUANT_TYPES))
def test_embedding_gathers_dequantized_rows(name):
    cols = 256 if name in K_QUANTS else 64
    w, ref = _weights(name, 30, cols, seed=5)
    ids = np.array([[0, 29, 7], [7, 3, 12]], dtype=np.int64)
    e = _core.embedding(w, _core.from_numpy(ids)).numpy()
    assert e.shape == (2, 3, cols)
    np.testing.assert_allclose(e, ref[ids], rtol=1e-6, atol=1e-7)


def test_embedding_out_of_range_id_raises():
    w, _ = _weights("q8_0", 10, 32, seed=1)
    with pytest.raises(RuntimeError):
        _core.embedding(w, _core.from_numpy(np.array([10], dtype=np.int64))).numpy()


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m", [1, 6])
def test_linear_plain_weight_dtypes(dtype, m):
    rng = np.random.default_rng(21)
    w32 = (rng.standard_normal((33, 70)) * 0.1).astype(np.float32)
    if dtype == "f16":
        w_host = w32.astype(np.float16)
        ref = w_host.astype(np.float64)
        w = _core.from_numpy(w_host)
    elif dtype == "bf16":
        w = _core.from_numpy(w32, dtype="bf16")
        ref = w.numpy().astype(np.float64)  # bf16 -> f32 read-back is exact
        assert np.all(np.abs(ref - w32) <= np.abs(w32) * 2.0 ** -8)  # it really is bf16
    else:
        w = _core.from_numpy(w32)
        ref = w32.astype(np.float64)
    assert w.dtype == dtype
    x = rng.standard_normal((m, 70)).astype(np.float32)
    y = _core.linear(_core.from_numpy(x), w).numpy()
    _assert_linear_close(y, x, ref)


def test_quantized_raw_bytes_round_trip():
    raw = gguf.quants.quantize(np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32), Q.Q4_1)
    w = _core.from_quantized(raw, "q4_1", [4, 64])
    back = w.numpy()
    assert back.dtype == np.uint8 and back.shape == raw.shape
    np.testing.assert_array_equal(back, raw)
