"""The CPU kernels' fast paths that conv2d and the pools run on (builtins/autograd/conv_rules.py),
against NumPy, at the shapes where each path has an edge:

- matmul with B row-major (the outer-product path, gemm_nn): every column tail 1..15 of its 16-wide
  tile, row tails of its 4-row tile, A transposed or broadcast over the batch, one large product;
- copy between strided views of one dtype (raw element moves, an odometer over the outer dims):
  permutes, stepped slices, every plain dtype, NaN payloads and -0.0 kept bit for bit;
- embedding over a table of one-element rows (the element gather) and scatter_add_rows of
  one-element rows, i32 and i64 ids, repeated ids summed in id order, out-of-range ids refused;
- max / argmax / min / argmin over a middle axis (branch-free selects): ties keep the first index,
  a NaN wins and stays;
- linear on every weight format for M = 1..17 rows of x (1 is decode, 2..8 a batched decode step
  through the several-row kernels, 9 and up the dequantized-tile product): against NumPy on the
  gguf package's dequantized weights, and each row of M <= 8 bitwise the product of that row
  alone (what keeps batched serving token for token the request alone); odd N (a weight row left
  over from the kernels' pairs), K of an odd and an even number of blocks; again with
  TL_CPU_NO_AVX512=1 for the AVX2 several-row kernels;
- linear with 8-bit activations (--fast) on 1..8 rows, every type with an integer dot product:
  against NumPy on the definition's quantized x, each row bitwise the row alone, longer products
  exact, and the same bits with TL_CPU_NO_AVX512=1 and TL_CPU_NO_SIMD=1.
Each path runs in any backend's kernels only on the CPU; other backends take these ops through
their own kernels (tests/runtime/test_backend_ops.py compares them with the CPU).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorlogic import _core
from tensorlogic.models.testing import QUANT_SCALE_OFFSETS, quant_block_elems, random_quant_blocks

RNG = np.random.default_rng(20261127)
TOL = dict(rtol=1e-5, atol=1e-5)


def T(a):
    return _core.from_numpy(np.ascontiguousarray(a))


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("n", list(range(1, 18)) + [31, 33, 64, 145])
@pytest.mark.parametrize("m", [1, 3, 4, 5, 9])
def test_matmul_row_major_b_every_tail(m, n):
    a, b = f32(m, 13), f32(13, n)
    np.testing.assert_allclose(_core.matmul(T(a), T(b)).numpy(), a.astype(np.float64) @ b, **TOL)


def test_matmul_row_major_b_batched_broadcast_and_transposed_a():
    w, cols = f32(16, 10), f32(8, 10, 64)  # conv2d's forward: w2 . cols[n]
    np.testing.assert_allclose(_core.matmul(T(w), T(cols)).numpy(), np.einsum("ok,nkp->nop", w, cols), **TOL)
    w2, g = f32(32, 144), f32(8, 32, 16)  # conv2d's col2im input: w2^T . g[n], A a transposed view
    got = _core.matmul(_core.transpose(T(w2), 0, 1), T(g)).numpy()
    np.testing.assert_allclose(got, np.einsum("ok,nop->nkp", w2, g), **TOL)
    go, rows = f32(32, 1024), f32(1024, 145)  # the weight gradient: one large product (f32 sums of 1024 terms)
    np.testing.assert_allclose(_core.matmul(T(go), T(rows)).numpy(), go.astype(np.float64) @ rows, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "i64", "bool"])
def test_copy_of_strided_views_is_exact(dtype):
    x = _core.astype(T(RNG.integers(-50, 50, (3, 5, 6, 4)).astype(np.float32) / 4), dtype)
    ref = x.numpy()
    np.testing.assert_array_equal(_core.contiguous(_core.permute(x, [0, 2, 3, 1])).numpy(),
                                  np.transpose(ref, [0, 2, 3, 1]))
    np.testing.assert_array_equal(_core.contiguous(_core.permute(x, [3, 1, 0, 2])).numpy(),
                                  np.transpose(ref, [3, 1, 0, 2]))
    v = _core.slice(_core.slice(x, 2, 1, 6, 2), 3, 0, 4, 3)
    np.testing.assert_array_equal(_core.contiguous(v).numpy(), ref[:, :, 1:6:2, 0:4:3])


def test_copy_keeps_nan_payloads_and_negative_zero():
    bits = np.array([[0x7FC00123, 0x80000000], [0xFFC00001, 0x3F800000]], np.uint32)
    x = T(bits.view(np.float32))
    got = _core.contiguous(_core.transpose(x, 0, 1)).numpy().view(np.uint32)
    np.testing.assert_array_equal(got, bits.T)


@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_element_gather(ids_dtype, dtype):
    table = _core.astype(T(f32(50, 1)), dtype)
    ids = RNG.integers(0, 50, 300).astype(ids_dtype)
    np.testing.assert_array_equal(_core.embedding(table, T(ids)).numpy(), table.numpy()[ids])
    with pytest.raises(Exception, match="out of range"):
        _core.embedding(table, T(np.array([3, 50], ids_dtype))).numpy()
    with pytest.raises(Exception, match="out of range"):
        _core.embedding(table, T(np.array([-1], ids_dtype))).numpy()


@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64])
def test_element_scatter_add_sums_repeated_ids_in_order(ids_dtype):
    ids = RNG.integers(0, 20, 500).astype(ids_dtype)
    src = f32(500, 1)
    want = np.zeros((20, 1), np.float32)
    for i, k in enumerate(ids):  # id order, in f32: what the kernel promises bit for bit
        want[k] += src[i]
    np.testing.assert_array_equal(_core.scatter_add_rows(T(ids), T(src), 20).numpy(), want)
    with pytest.raises(Exception, match="out of range"):
        _core.scatter_add_rows(T(np.array([0, 20], ids_dtype)), T(f32(2, 1)), 20).numpy()


@pytest.mark.parametrize("inner", [1, 3, 16, 700])
def test_max_argmax_over_a_middle_axis(inner):
    x = RNG.integers(-3, 3, (2, 5, inner)).astype(np.float32)  # many ties
    x[1, 2, 0] = np.nan
    x[0, 0, -1] = np.nan
    for name, ref in (("max", np.max), ("min", np.min)):
        got = getattr(_core, name)(T(x), 1).numpy()
        np.testing.assert_array_equal(got, ref(x, 1))  # NaN where a NaN is (NumPy propagates it too)
    for name, ref in (("argmax", np.argmax), ("argmin", np.argmin)):
        np.testing.assert_array_equal(getattr(_core, name)(T(x), 1).numpy(), ref(x, 1))


# ------------------------------------------------------------------------------ linear, a few rows

# GGUF block layouts: bytes per block, elements per block, byte offsets of the f16 scale fields.
SMALL_BATCH_ROWS = 8  # kernels_matmul_quant.cpp's kSmallBatchRows: up to here each row is bitwise alone


def weight(fmt: str, n: int, k: int, rng):
    """(the weight tensor, its values as float64 [n, k])."""
    if fmt in QUANT_SCALE_OFFSETS:
        import gguf
        raw = random_quant_blocks(fmt, n, k, rng)
        values = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[fmt.upper()]).astype(np.float64)
        return _core.from_quantized(raw, fmt, [n, k]), values
    w = rng.standard_normal((n, k)).astype(np.float32)
    t = _core.from_numpy(w) if fmt == "f32" else _core.astype(_core.from_numpy(w), fmt)
    return t, _core.astype(t, "f32").numpy().astype(np.float64)


def check_linear_rows(fmt: str, M: int, rng) -> None:
    be = quant_block_elems(fmt) if fmt in QUANT_SCALE_OFFSETS else 1
    # K: an odd and an even number of blocks (the kernels take even and odd blocks apart); N odd,
    # so a weight row is left over from the several-row kernels' pairs.
    shapes = [(37, be * 3), (2, be * 2)] if be == 256 else [(37, 32), (1, 96), (20, 576), (7, 1504)]
    for N, K in shapes:
        w, wd = weight(fmt, N, K, rng)
        x = rng.standard_normal((M, K)).astype(np.float32)
        got = _core.linear(T(x), w).numpy()
        want = x.astype(np.float64) @ wd.T
        # f32 sums of K products: a few ulps of the sum of the products' magnitudes
        bound = 2e-6 * (np.abs(x).astype(np.float64) @ np.abs(wd).T) + 1e-30
        worst = float(np.max(np.abs(got - want) / bound))
        assert worst <= 1.0, f"{fmt} M={M} N={N} K={K}: off NumPy by {worst:.2f} of the tolerance"
        if M <= SMALL_BATCH_ROWS:
            for m in range(M):
                alone = _core.linear(T(x[m:m + 1]), w).numpy()[0]
                assert np.array_equal(got[m], alone), f"{fmt} M={M} N={N} K={K}: row {m} differs from the row alone"


@pytest.mark.parametrize("M", list(range(1, 18)))
@pytest.mark.parametrize("fmt", list(QUANT_SCALE_OFFSETS) + ["f16", "bf16", "f32"])
def test_linear_rows_match_numpy_and_each_row_alone(fmt, M):
    check_linear_rows(fmt, M, np.random.default_rng([M, len(fmt), ord(fmt[-1])]))


def test_linear_rows_with_the_avx2_kernels():
    """The same checks with TL_CPU_NO_AVX512=1 (the several-row kernels for AVX2 without AVX-512VL),
    in a fresh process: the switch is read once."""
    code = ("import numpy as np, sys\n"
            "sys.path.insert(0, %r)\n"
            "import test_cpu_fast_paths as t\n"
            "for fmt in ('q4_0', 'q4_1', 'q8_0'):\n"
            "    for M in range(1, 18):\n"
            "        t.check_linear_rows(fmt, M, np.random.default_rng(M))\n"
            "print('ok')\n") % str(Path(__file__).parent)
    env = dict(os.environ, TL_CPU_NO_AVX512="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ------------------------------------------------------------------ linear, 8-bit activations (--fast)

Q8_TYPES = ("q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k")  # those with an integer dot product
Q8_ROWS = 8  # the rows of tl serve --parallel's largest batched step (MAX_STEP_ROWS)
# prompt pieces under --fast (set_q8_activations(True, 0): every product): several groups of 8 rows,
# with and without a shorter last group
Q8_PIECE_ROWS = (9, 12, 16, 35, 64)


def q8_reference(x: np.ndarray) -> np.ndarray:
    """x [M, K] as the 8-bit path sees it, by the definition: per block of 32, d = max|x| / 127 (f32)
    and q = round_half_even(x * (127 / max|x|)) in -127..127; returns q * d (float64)."""
    b = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.clip(np.rint(b * inv), -127, 127)
    return (q * (amax / np.float32(127)).astype(np.float32)).astype(np.float64).reshape(x.shape)


def linear_q8(x: np.ndarray, w, rows: int = Q8_ROWS) -> np.ndarray:
    """linear with 8-bit activations for products of up to `rows` rows (a batched decode step's;
    0: every product, as --fast sets it)."""
    before = _core.q8_activations()
    _core.set_q8_activations(True, rows)
    try:
        return _core.linear(T(x), w).numpy()
    finally:
        _core.set_q8_activations(before)


def check_linear_q8_rows(fmt: str, M: int, rng) -> list[np.ndarray]:
    """Checks linear with 8-bit activations on M rows against NumPy and each row against the row
    alone; returns the products (for the comparison across instruction sets)."""
    rows = Q8_ROWS if M <= Q8_ROWS else 0
    be = quant_block_elems(fmt)
    shapes = [(37, be * 3), (2, be * 2)] if be == 256 else [(37, 32), (13, 96), (20, 576)]
    outs = []
    for N, K in shapes:
        w, wd = weight(fmt, N, K, rng)
        x = rng.standard_normal((M, K)).astype(np.float32)
        if K >= 64:
            x[0, 32:64] = 0.0  # an all-zero block
        got = linear_q8(x, w, rows)
        xq = q8_reference(x)
        want = xq @ wd.T
        bound = 2e-6 * np.sqrt(K) * (np.abs(xq) @ np.abs(wd).T) + 1e-30
        worst = float(np.max(np.abs(got - want) / bound))
        assert worst <= 1.0, f"{fmt} M={M} N={N} K={K}: off NumPy by {worst:.2f} of the tolerance"
        exact = _core.linear(T(x), w).numpy()
        assert not np.array_equal(got, exact), f"{fmt} M={M}: the 8-bit path did not run"
        for m in range(M):
            alone = linear_q8(x[m:m + 1], w, 1)[0]
            assert np.array_equal(got[m], alone), f"{fmt} M={M} N={N} K={K}: row {m} differs from the row alone"
        outs.append(got)
    return outs


@pytest.mark.parametrize("M", list(range(1, Q8_ROWS + 1)))
@pytest.mark.parametrize("fmt", Q8_TYPES)
def test_linear_q8_rows_match_numpy_and_each_row_alone(fmt, M):
    """What keeps tl serve --parallel --fast's batched greedy output the request's alone."""
    check_linear_q8_rows(fmt, M, np.random.default_rng([M, len(fmt), ord(fmt[-1])]))


@pytest.mark.parametrize("M", Q8_PIECE_ROWS)
@pytest.mark.parametrize("fmt", Q8_TYPES)
def test_linear_q8_prompt_pieces_rows_match_numpy_and_each_row_alone(fmt, M):
    """--fast prefills through the 8-bit path too (row limit 0: every product): a prompt piece of
    many rows gives every row bitwise its one-row (decode) product, so the cut of a prompt into
    pieces and the other requests' rows do not change a row's product."""
    check_linear_q8_rows(fmt, M, np.random.default_rng([M, len(fmt), ord(fmt[-1]), 1]))


def test_linear_q8_row_limit():
    """Products longer than the row limit take the exact path (1: matrix-vector products only,
    TL_Q8_ACTIVATIONS alone; a count: a batched decode step's rows); 0 covers every product."""
    w, _ = weight("q4_1", 20, 576, np.random.default_rng(3))
    x = f32(Q8_ROWS + 1, 576)
    exact = _core.linear(T(x), w).numpy()
    np.testing.assert_array_equal(linear_q8(x, w), exact)
    every = linear_q8(x, w, rows=0)
    assert not np.array_equal(every, exact)
    np.testing.assert_array_equal(linear_q8(x, w, rows=Q8_ROWS + 1), every)
    for m in range(Q8_ROWS + 1):
        np.testing.assert_array_equal(every[m], linear_q8(x[m:m + 1], w, rows=1)[0])
    x2 = f32(2, 576)
    exact = _core.linear(T(x2), w).numpy()
    np.testing.assert_array_equal(linear_q8(x2, w, rows=1), exact)  # a 2-token prompt piece
    assert not np.array_equal(linear_q8(x2, w, rows=2), exact)
    assert not np.array_equal(linear_q8(x2[:1], w, rows=1), exact[:1])  # decode: one row
    with pytest.raises(ValueError, match="rows must be 0"):
        _core.set_q8_activations(True, -1)
    assert not _core.q8_activations()
    from tensorlogic.builtins.core import q8_state, set_q8_activations
    assert set_q8_activations(True, 0) == (False, 1)
    try:
        assert q8_state() == (True, 0) and _core.get_debug()["q8_rows"] == 0
    finally:
        assert set_q8_activations(False) == (True, 0)
    assert q8_state() == (False, 1)


@pytest.mark.parametrize("env", [{"TL_CPU_NO_AVX512": "1"}, {"TL_CPU_NO_SIMD": "1"}])
def test_linear_q8_same_bits_on_every_instruction_set(env, tmp_path):
    """The AVX-512 VNNI, AVX2 and portable paths give the same bits (one fixed float sequence per
    pair of rows; integer sums are exact), so --fast output does not depend on the CPU's extensions."""
    code = ("import numpy as np, sys\n"
            "sys.path.insert(0, %r)\n"
            "import test_cpu_fast_paths as t\n"
            "outs = [o for fmt in t.Q8_TYPES for M in (1, 3, 8, 20) "
            "for o in t.check_linear_q8_rows(fmt, M, np.random.default_rng(M))]\n"
            "np.savez(%r, *outs)\n") % (str(Path(__file__).parent), str(tmp_path / "out.npz"))
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    theirs = np.load(tmp_path / "out.npz")
    ours = [o for fmt in Q8_TYPES for M in (1, 3, 8, 20) for o in check_linear_q8_rows(fmt, M, np.random.default_rng(M))]
    assert len(ours) == len(theirs.files)
    for i, o in enumerate(ours):
        assert np.array_equal(o, theirs[f"arr_{i}"]), f"product {i} differs with {env}"
