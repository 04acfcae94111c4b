"""The runtime's training ops against NumPy: `adam_update_` / `sgd_update_` (one fused kernel per
parameter, in place) step for step against the update rules evaluated in float32 in the order the
unfused ops evaluate them (bitwise equal on the CPU) and in float64 (within rtol 2e-4, atol 2e-5,
the optimizer tests' tolerance); `scatter_add_rows` against np.add.at, with repeated and out-of-range
ids."""
from __future__ import annotations

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

F = np.float32


def _f32_adam(w, g, m, v, lr, t, b1, b2, eps, wd, decoupled):
    """One step in float32, operation by operation as optimizers.py composed them before fusion."""
    bias1, bias2 = 1 - b1 ** t, 1 - b2 ** t
    if decoupled:
        w = w * F(1.0 - lr * wd)
    elif wd:
        g = g + w * F(wd)
    m = m * F(b1) + g * F(1 - b1)
    v = v * F(b2) + (g * g) * F(1 - b2)
    denom = np.sqrt(v / F(bias2)) + F(eps)
    return w - (m / denom) * F(lr / bias1), m, v


def _f64_adam(w, g, m, v, lr, t, b1, b2, eps, wd, decoupled):
    if decoupled:
        w = w * (1 - lr * wd)
    elif wd:
        g = g + wd * w
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps), m, v


ADAM_CASES = [
    ("adam", dict(lr=0.05, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False)),
    ("adam l2", dict(lr=0.05, b1=0.9, b2=0.999, eps=1e-8, wd=0.1, decoupled=False)),
    ("adamw", dict(lr=0.01, b1=0.9, b2=0.999, eps=1e-8, wd=0.1, decoupled=True)),
    ("adam betas", dict(lr=0.01, b1=0.5, b2=0.9, eps=1e-6, wd=0.0, decoupled=False)),
]


@pytest.mark.parametrize("name,cfg", ADAM_CASES, ids=[c[0] for c in ADAM_CASES])
def test_adam_update_matches_the_float32_rule_bitwise_and_float64_within_tolerance(name, cfg):
    rng = np.random.default_rng(0)
    shape = (37, 129)  # not a multiple of any vector width or thread split
    w0 = rng.standard_normal(shape).astype(F)
    w, m, v = core.from_numpy(w0), core.zeros(list(shape), "f32"), core.zeros(list(shape), "f32")
    rw, rm, rv = w0.copy(), np.zeros(shape, F), np.zeros(shape, F)
    dw, dm, dv = w0.astype(np.float64), np.zeros(shape), np.zeros(shape)
    b1, b2 = cfg["b1"], cfg["b2"]
    for t in range(1, 31):
        g0 = (rng.standard_normal(shape) * (1.0 + 0.1 * t)).astype(F)
        core.adam_update_(w, core.from_numpy(g0), m, v, cfg["lr"], 1 - b1 ** t, 1 - b2 ** t, b1, b2, cfg["eps"],
                          cfg["wd"], cfg["decoupled"])
        rw, rm, rv = _f32_adam(rw, g0, rm, rv, cfg["lr"], t, b1, b2, cfg["eps"], cfg["wd"], cfg["decoupled"])
        dw, dm, dv = _f64_adam(dw, g0.astype(np.float64), dm, dv, cfg["lr"], t, b1, b2, cfg["eps"], cfg["wd"],
                               cfg["decoupled"])
        got = w.numpy()
        assert np.array_equal(got.view(np.uint32), rw.view(np.uint32)), f"{name}: step {t} not bitwise"
        assert np.array_equal(m.numpy(), rm) and np.array_equal(v.numpy(), rv)
        np.testing.assert_allclose(got, dw, rtol=2e-4, atol=2e-5, err_msg=f"{name}, step {t}")


@pytest.mark.parametrize("momentum,nesterov,wd", [(0.0, False, 0.0), (0.9, False, 0.0), (0.9, True, 0.0),
                                                  (0.5, False, 0.1)])
def test_sgd_update_matches_the_float32_rule_bitwise(momentum, nesterov, wd):
    rng = np.random.default_rng(1)
    shape = (5, 1001)
    w0 = rng.standard_normal(shape).astype(F)
    w = core.from_numpy(w0)
    buf = core.zeros(list(shape), "f32") if momentum else None
    rw, rb = w0.copy(), np.zeros(shape, F)
    lr = 0.02
    for t in range(20):
        g0 = rng.standard_normal(shape).astype(F)
        core.sgd_update_(w, core.from_numpy(g0), buf, lr, momentum, nesterov, wd)
        g = g0 + rw * F(wd) if wd else g0
        if momentum:
            rb = rb * F(momentum) + g
            g = g + rb * F(momentum) if nesterov else rb
        rw = rw - g * F(lr)
        assert np.array_equal(w.numpy().view(np.uint32), rw.view(np.uint32)), f"step {t}"


def test_optimizer_update_rejects_mismatched_state_naming_the_op_and_shapes():
    w = core.zeros([2, 3], "f32")
    with pytest.raises(Exception, match=r"adam_update_: m must be a contiguous f32 tensor of the parameter's "
                                        r"shape \[2, 3\], got \[3, 2\] f32"):
        core.adam_update_(w, core.zeros([2, 3], "f32"), core.zeros([3, 2], "f32"), core.zeros([2, 3], "f32"),
                          0.1, 0.1, 0.001)
    with pytest.raises(Exception, match=r"sgd_update_: the gradient \[3\] f32 does not match the parameter \[2, 3\]"):
        core.sgd_update_(w, core.zeros([3], "f32"), None, 0.1)


@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64])
def test_scatter_add_rows_matches_np_add_at_with_repeated_ids(ids_dtype):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 7, size=300).astype(ids_dtype)
    ids[:5] = 3  # many repeats of one row
    src = rng.standard_normal((300, 33)).astype(F)
    want = np.zeros((9, 33), F)  # rows 7 and 8 get nothing
    np.add.at(want, ids, src)
    got = core.scatter_add_rows(core.from_numpy(ids), core.from_numpy(src), 9).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # In id order, one column per task: the same bits on every run and every thread count.
    again = core.scatter_add_rows(core.from_numpy(ids), core.from_numpy(src), 9).numpy()
    assert np.array_equal(got.view(np.uint32), again.view(np.uint32))
    seq = np.zeros((9, 33), F)
    for i, r in enumerate(ids):
        seq[r] += src[i]
    assert np.array_equal(got.view(np.uint32), seq.view(np.uint32))


def test_scatter_add_rows_out_of_range_id_is_an_error_naming_the_op_and_shapes():
    ids = core.from_numpy(np.array([0, 5, 1], dtype=np.int64))
    out = core.scatter_add_rows(ids, core.ones([3, 4], "f32"), 5)
    with pytest.raises(Exception, match=r"scatter_add_rows: id 5 \(position 1 of ids \[3\]\) is out of range "
                                        r"for \[5, 4\] rows \(src \[3, 4\]\)"):
        out.numpy()
    neg = core.scatter_add_rows(core.from_numpy(np.array([-1], dtype=np.int32)), core.ones([1, 2], "f32"), 4)
    with pytest.raises(Exception, match=r"scatter_add_rows: id -1 "):
        neg.numpy()
    with pytest.raises(Exception, match=r"scatter_add_rows: src must be \[n, D\] with n = the number of ids, "
                                        r"got src \[2, 4\] and ids \[3\]"):
        core.scatter_add_rows(ids, core.ones([2, 4], "f32"), 5)


def test_the_scatter_add_rows_builtin_matches_np_add_at_and_names_itself_on_a_bad_id():
    import tensorlogic
    result = tensorlogic.run("""
let src = reshape(arange(0, 12) * 1.0, [4, 3])
let out = scatter_add_rows([2, 0, 2, 2], src, 5)
print(out)
""")
    assert result.error is None, result.error_text
    want = np.zeros((5, 3))
    np.add.at(want, [2, 0, 2, 2], np.arange(12.0).reshape(4, 3))
    got = np.array(eval(result.output.replace("\n", "")))  # the printed nested list
    np.testing.assert_array_equal(got, want)
    bad = tensorlogic.run("let y = scatter_add_rows([1, 9], ones([2, 3]), 5)\n", filename="bad.tl")
    assert bad.error is not None
    assert ("bad.tl:1" in bad.error_text and "scatter_add_rows: id 9 (position 1 of 2 ids) is out of range for "
            "5 rows (src [2, 3])" in bad.error_text)
