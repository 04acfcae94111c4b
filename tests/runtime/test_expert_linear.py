"""expert_linear (the expert products of a mixture-of-experts layer, ggml's mul_mat_id) against NumPy:
every weight layout it takes (a plain [E, N, K], or [E * N, K] rows of any linear dtype incl. GGUF
blocks), x shared by a token's experts or one row per expert, i32/i64 ids, repeated experts among
tokens (the grouped prefill path) and one token (decode); bad ids and shapes give one-line errors.
A compiled function replays with new ids read on the device (routing is data, not a recorded
constant), and decoder.tl's device-side top-k (moe_top_k) equals NumPy's order, ties included."""
from __future__ import annotations

import io

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

from tensorlogic.interp.interpreter import Interpreter  # noqa: E402

RNG = np.random.default_rng(25)


def _reference(x, w, ids):
    """out[t, j] = x[t, j or 0] @ w[ids[t, j]].T in float64."""
    T, k = ids.shape
    x3 = x.reshape(T, -1, x.shape[-1])
    return np.stack([np.stack([w[ids[t, j]].astype(np.float64) @ x3[t, 0 if x3.shape[1] == 1 else j]
                               for j in range(k)]) for t in range(T)])


@pytest.mark.parametrize("T, k, x_rows", [(1, 2, 1), (7, 2, 1), (5, 3, 3), (1, 4, 4), (40, 2, 1)])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_expert_linear_matches_numpy(T, k, x_rows, id_dtype):
    E, N, K = 6, 17, 40
    w = RNG.standard_normal((E, N, K)).astype(np.float32)
    x = RNG.standard_normal((T, x_rows, K) if x_rows > 1 else (T, K)).astype(np.float32)
    ids = np.stack([RNG.choice(E, k, replace=False) for _ in range(T)]).astype(id_dtype)
    want = _reference(x, w, ids)
    got = core.expert_linear(core.from_numpy(x), core.from_numpy(w), core.from_numpy(ids)).numpy()
    assert got.shape == (T, k, N) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the same weights as GGUF stores them, [E * N, K] with the expert count given
    flat = core.expert_linear(core.from_numpy(x), core.from_numpy(w.reshape(E * N, K)), core.from_numpy(ids), E)
    np.testing.assert_array_equal(flat.numpy(), got)


@pytest.mark.parametrize("qtype", ["F32", "Q4_1", "Q5_1"])
def test_one_token_wide_enough_for_every_pool_worker(qtype):
    """One token (the decode path) with enough rows that the CPU pool splits them among its worker
    threads, which read the token's block sums (the block formats with a minimum use them; workers
    once read their own empty thread_local copy: a crash, or another call's stale sums)."""
    import gguf

    E, N, K, k = 4, 1024, 1024, 2
    w = RNG.standard_normal((E * N, K)).astype(np.float32)
    if qtype == "F32":
        wt, deq = core.from_numpy(w), w
    else:
        t = gguf.GGMLQuantizationType[qtype]
        raw = gguf.quants.quantize(w, t)
        wt = core.from_quantized(raw, qtype.lower(), [E * N, K])
        deq = gguf.quants.dequantize(raw, t).reshape(E * N, K)
    for _ in range(20):  # each call's own sums, whichever thread computes a row
        x = RNG.standard_normal((1, K)).astype(np.float32)
        ids = RNG.choice(E, (1, k), replace=False)
        got = core.expert_linear(core.from_numpy(x), wt, core.from_numpy(ids), E).numpy()
        np.testing.assert_allclose(got, _reference(x, deq.reshape(E, N, K), ids), rtol=1e-4, atol=1e-3)


def _k_blocks(qtype: str, rows: int, cols: int) -> np.ndarray:
    """Random K-quant blocks (the gguf package cannot quantize to them) with small f16 scales."""
    block, scales = {"Q4_K": (144, [0, 2]), "Q6_K": (210, [208])}[qtype]
    raw = RNG.integers(0, 256, (rows * cols // 256, block), dtype=np.uint8)
    for off in scales:
        raw[:, off:off + 2] = (RNG.random(len(raw)) * 0.01 + 0.001).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q5_1", "Q4_K", "Q6_K", "F16"])
def test_expert_linear_quantized_weights_equal_linear_on_each_expert(qtype):
    import gguf

    E, N, K, T, k = 4, 9, 256, 6, 2
    w = RNG.standard_normal((E * N, K)).astype(np.float32)
    t = gguf.GGMLQuantizationType[qtype]
    if qtype == "F16":
        wt = core.from_numpy(w.astype(np.float16))
        deq = w.astype(np.float16).astype(np.float32)
    else:
        raw = _k_blocks(qtype, E * N, K) if qtype.endswith("_K") else gguf.quants.quantize(w, t)
        wt = core.from_quantized(raw, qtype.lower(), [E * N, K])
        deq = gguf.quants.dequantize(raw, t).reshape(E * N, K)
    x = RNG.standard_normal((T, K)).astype(np.float32)
    ids = np.stack([RNG.choice(E, k, replace=False) for _ in range(T)])
    got = core.expert_linear(core.from_numpy(x), wt, core.from_numpy(ids), E).numpy()
    np.testing.assert_allclose(got, _reference(x, deq.reshape(E, N, K), ids), rtol=1e-4, atol=1e-4)
    # and what linear gives on the expert's rows (the same kernels on the CPU; a group of rows for one
    # expert takes linear's many-row path, which sums in another order than one row's; a GPU's
    # kernels differ more: 1.8e-5 on a K-quant row of terms near 100, seen on an H200)
    tol = 1e-5 if core.backend_name() == "cpu" else 1e-4
    for tok in range(T):
        for j in range(k):
            e = int(ids[tok, j])
            one = core.linear(core.from_numpy(x[tok:tok + 1]), wt[e * N:(e + 1) * N]).numpy()[0]
            np.testing.assert_allclose(got[tok, j], one, rtol=tol, atol=tol)
    # one token (decode): on the CPU, linear's matrix-vector numbers exactly (the same dot kernels);
    # a GPU backend's kernels may sum in another order than its linear (cuBLAS, tiles)
    one_tok = core.expert_linear(core.from_numpy(x[:1]), wt, core.from_numpy(ids[:1]), E).numpy()[0]
    for j in range(k):
        e = int(ids[0, j])
        alone = core.linear(core.from_numpy(x[:1]), wt[e * N:(e + 1) * N]).numpy()[0]
        if core.backend_name() == "cpu":
            np.testing.assert_array_equal(one_tok[j], alone)
        else:
            np.testing.assert_allclose(one_tok[j], alone, rtol=1e-5, atol=1e-5)


def test_bad_ids_and_shapes_are_one_line_errors():
    w = core.from_numpy(np.ones((3, 4, 8), np.float32))
    x = core.from_numpy(np.ones((2, 8), np.float32))
    with pytest.raises(core.TLRuntimeError, match="expert id 3 is out of range for 3 experts"):
        core.expert_linear(x, w, core.from_numpy(np.array([[0, 1], [3, 2]]))).numpy()
    for args, words in [((x, w, core.from_numpy(np.zeros((2, 2), np.float32))), "ids must be a 2-D i32/i64"),
                        ((x, w, core.from_numpy(np.zeros((3, 2), np.int64))), "does not match ids"),
                        ((x, core.from_numpy(np.ones((12, 8), np.float32)), core.from_numpy(np.zeros((2, 2), np.int64)), 5),
                         "needs experts > 0 dividing"),
                        ((x, w, core.from_numpy(np.zeros((2, 2), np.int64)), 4), "experts=4 but the weight")]:
        with pytest.raises(Exception, match=words) as e:
            core.expert_linear(*args)
        assert "\n" not in str(e.value)


SOURCE = """
import "std/decoder.tl"
@compile
fn route(p) {
    moe_top_k(p, 3)  // k is a constant of the model, as n_experts_used in the decode step
}
fn route_both(p) {
    [moe_top_k_ranks(p, 3), moe_top_k_rounds(p, 3), moe_top_k(p, 3)]
}
@compile
fn experts(x, w, ids) {
    expert_linear(x, w, ids, 5)
}
"""


def _interp() -> Interpreter:
    interp = Interpreter(out=io.StringIO())
    interp.run_top_level(interp.load_source(SOURCE, "moe_test.tl"))
    return interp


def test_compiled_expert_linear_replays_with_new_ids():
    interp = _interp()
    w = RNG.standard_normal((5, 7, 16)).astype(np.float32)
    wt = core.from_numpy(w)
    for step in range(6):
        x = RNG.standard_normal((1, 16)).astype(np.float32)
        ids = RNG.choice(5, (1, 2), replace=False)
        got = interp.call_value(interp.functions["experts"], [core.from_numpy(x), wt, core.from_numpy(ids)])
        np.testing.assert_allclose(got.numpy(), _reference(x, w, ids), rtol=1e-5, atol=1e-5)
    cf = interp.functions["experts"].impl
    assert cf.records == 1 and cf.replays == 5
    interp.close()


def test_device_top_k_equals_numpy_order_and_replays():
    interp = _interp()
    for step in range(8):
        p = RNG.random((3, 6)).astype(np.float32)
        if step % 2:
            p[1, 4] = p[1, 1] = p[1].max()  # a tie: the smaller column first, as a stable sort
        ids, vals = interp.call_value(interp.functions["route"], [core.from_numpy(p)])
        order = np.argsort(-p, axis=1, kind="stable")[:, :3]
        np.testing.assert_array_equal(ids.numpy(), order)
        np.testing.assert_array_equal(vals.numpy(), np.take_along_axis(p, order, 1))
    cf = interp.functions["route"].impl
    assert cf.records == 1 and cf.replays == 7  # the routing is data of the replay, not a constant
    interp.close()


@pytest.mark.parametrize("rows", [5, 200000])
def test_both_top_k_ways_agree_with_numpy(rows):
    """Ranks (few rows) and rounds of argmax (many: 200000 x 6 x 6 is past moe_top_k's switch) give
    NumPy's stable order, ties included; moe_top_k takes the one its size calls for."""
    interp = _interp()
    p = RNG.random((rows, 6)).astype(np.float32)
    p[:, 2] = p[:, 4]  # a tie in every row
    p[0] = 0.25
    order = np.argsort(-p, axis=1, kind="stable")[:, :3]
    for ids, vals in interp.call_value(interp.functions["route_both"], [core.from_numpy(p)]):
        np.testing.assert_array_equal(ids.numpy(), order)
        np.testing.assert_array_equal(vals.numpy(), np.take_along_axis(p, order, 1))
    interp.close()
