"""conv2d, max_pool2d, avg_pool2d, batch_norm and embedding's padding_idx against NumPy transcriptions
of PyTorch's definitions: values and gradients (float64 central finite differences), strides and
padding, batch_norm's running statistics in training and their use in eval { }."""
from __future__ import annotations

import io

import numpy as np
import pytest

import tensorlogic
from gradcheck import check, rand
from tensorlogic.builtins.autograd import tape
from tensorlogic.builtins.registry import BUILTINS
from tensorlogic.interp.interpreter import Interpreter


def b(name):
    return BUILTINS[name].fn


def conv_np(x, w, bias=None, stride=1, padding=0):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    ho, wo = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, ho, wo))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w)
    return out if bias is None else out + bias[None, :, None, None]


def pool_np(x, k, stride=None, padding=0, op=np.max):
    stride = stride or k
    fill = -np.inf if op is np.max else 0.0
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)], constant_values=fill)
    n, c, h, w = x.shape
    ho, wo = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[:, :, i, j] = op(xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k], axis=(2, 3))
    return out


def distinct(*shape):
    n = int(np.prod(shape))
    return (np.random.default_rng(4).permutation(n) * 0.21 - 2.0).reshape(shape)


@pytest.mark.parametrize("stride, padding", [(1, 0), (1, 1), (2, 1), (3, 2)])
def test_conv2d(stride, padding):
    check(lambda x, w, c: b("conv2d")(x, w, c, stride, padding), lambda x, w, c: conv_np(x, w, c, stride, padding),
          [rand(2, 3, 7, 6), rand(4, 3, 3, 2), rand(4)])


def test_conv2d_unbatched_and_without_bias():
    check(lambda x, w: b("conv2d")(x, w), lambda x, w: conv_np(x[None], w)[0], [rand(2, 5, 5), rand(3, 2, 2, 2)])


@pytest.mark.parametrize("k, stride, padding", [(2, None, 0), (3, 1, 1), (3, 2, 1), (2, 3, 1)])
def test_pools(k, stride, padding):
    check(lambda x: b("max_pool2d")(x, k, stride, padding), lambda x: pool_np(x, k, stride, padding),
          [distinct(2, 3, 6, 5)])
    check(lambda x: b("avg_pool2d")(x, k, stride, padding), lambda x: pool_np(x, k, stride, padding, np.mean),
          [rand(2, 3, 6, 5)])


def test_max_pool_gradient_goes_to_the_first_maximum_like_pytorch():
    out = tensorlogic.run("""
    let x = learnable([[[[1.0, 1.0], [0.0, 1.0]]]])
    backward(sum(max_pool2d(x, 2)))
    print(grad(x))
    """, filename="<test>")
    assert out.error is None, out.error_text
    np.testing.assert_allclose(np.array(eval(out.output.replace("\n", ""))), [[[[1.0, 0.0], [0.0, 0.0]]]])  # noqa: S307


def bn_train_np(x, w, bias, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
    mean = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w.reshape(shape) + bias.reshape(shape)


def test_batch_norm_training_gradient_and_running_statistics():
    run_tape = tape.ensure()
    saved = run_tape.training
    run_tape.training = True
    try:
        rm = tensorlogic.builtins.core.core.zeros([3], "f32")
        rv = tensorlogic.builtins.core.core.ones([3], "f32")
        check(lambda x, w, c: b("batch_norm")(x, rm, rv, w, c), bn_train_np, [rand(4, 3, 2, 2), rand(3), rand(3)])
    finally:
        run_tape.training = saved
    x = rand(5, 3)
    out = tensorlogic.run(f"""
    let rm = zeros([3])
    let rv = ones([3])
    let w = learnable([1.0, 2.0, 3.0])
    learn {{
        lr: 0.1
        epochs: 2
        for epoch in range(epochs) {{
            backward(sum(batch_norm({x.tolist()}, rm, rv, w, momentum = 0.2)))
            eval {{ println(batch_norm({x.tolist()}, rm, rv)) }}
        }}
    }}
    println(rm)
    println(rv)
    """, filename="<test>")
    assert out.error is None, out.error_text
    rm_np, rv_np = np.zeros(3), np.ones(3)
    for _ in range(2):  # PyTorch: running = (1 - m) running + m batch stat, the variance unbiased
        rm_np = 0.8 * rm_np + 0.2 * x.mean(0)
        rv_np = 0.8 * rv_np + 0.2 * x.var(0, ddof=1)
        evaluated = (x - rm_np) / np.sqrt(rv_np + 1e-5)
    blocks = out.output.strip().split("]]\n")
    got_eval = np.array(eval(blocks[1] + "]]"))  # noqa: S307
    np.testing.assert_allclose(got_eval, evaluated, rtol=1e-5, atol=1e-5)
    tail = blocks[-1].strip().split("\n")
    np.testing.assert_allclose(np.array(eval(tail[0])), rm_np, rtol=1e-5, atol=1e-6)  # noqa: S307
    np.testing.assert_allclose(np.array(eval(tail[1])), rv_np, rtol=1e-5)  # noqa: S307


def test_embedding_padding_idx_row_gets_no_gradient():
    out = tensorlogic.run("""
    let t = learnable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    let e = embedding(t, [0, 2, 0, 1], 0)
    println(e)
    backward(sum(e * 2.0))
    println(grad(t))
    """, filename="<test>")
    assert out.error is None, out.error_text
    first, second = out.output.strip().split("]]\n")
    np.testing.assert_allclose(np.array(eval(first + "]]")), [[1, 2], [5, 6], [1, 2], [3, 4]])  # noqa: S307
    np.testing.assert_allclose(np.array(eval(second)), [[0, 0], [2, 2], [2, 2]])  # noqa: S307


@pytest.mark.parametrize("source, message", [
    ("conv2d(zeros([1, 2, 4, 4]), zeros([3, 1, 3, 3]))", "weight [3, 1, 3, 3] must be [O, C, kh, kw] with C = 2"),
    ("conv2d(zeros([4, 4]), zeros([3, 1, 3, 3]))", "input must be [N, C, H, W]"),
    ("conv2d(zeros([1, 1, 2, 2]), zeros([1, 1, 3, 3]))", "does not fit"),
    ("max_pool2d(zeros([1, 1, 4, 4]), 2, padding = 2)", "at most half of kernel_size"),
    ("batch_norm(zeros([2, 3]), zeros([2]), ones([3]))", "running_mean must be an f32 tensor [3]"),
])
def test_bad_shapes_are_one_line_errors(source, message):
    out = tensorlogic.run(source, filename="<test>")
    assert out.error is not None and message in out.error_text, out.error_text
    assert "Traceback" not in out.error_text


CNN_STEP = """
seed(1)
let X = randn([8, 1, 6, 6])
let Y = randn([8, 2])
let W = learnable(randn([3, 1, 3, 3]) * 0.3)
let c = learnable(zeros([3]))
let V = learnable(randn([12, 2]) * 0.3)
COMPILE
fn train_step(x, y) {
    let h = max_pool2d(relu(conv2d(x, W, c, padding = 1)), 3)
    let loss = mse_loss(matmul(reshape(h, [8, 12]), V), y)
    backward(loss)
    loss
}
learn {
    optimizer: adam(lr = 0.01)
    epochs: 12
    for epoch in range(epochs) { let l = train_step(X, Y) }
}
"""


def _run_cnn(compile_it: bool):
    interp = Interpreter(out=io.StringIO())
    interp.run_top_level(interp.load_source(CNN_STEP.replace("COMPILE", "@compile" if compile_it else ""), "t.tl"))
    params = [interp.globals[n].numpy().tobytes() for n in ("W", "c", "V")]
    impl = interp.functions["train_step"].impl
    stats = (impl.records, impl.replays) if compile_it else None
    interp.close()
    return params, stats


def test_a_compiled_cnn_training_step_replays_and_equals_the_eager_one_bitwise():
    compiled, stats = _run_cnn(True)
    eager, _ = _run_cnn(False)
    assert stats == (1, 11)  # recorded once, replayed every later step (the im2col ids are outside state)
    assert compiled == eager
