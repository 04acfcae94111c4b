"""`learn` blocks, learnable tensors and the gradient builtins, end to end through the interpreter."""
from __future__ import annotations

import io

import numpy as np
import pytest

import tensorlogic
from tensorlogic.interp.interpreter import Interpreter


def run(source: str, **kw):
    result = tensorlogic.run(source, filename="<test>", **kw)
    return result


def ok(source: str, **kw) -> str:
    result = run(source, **kw)
    assert result.error is None, result.error_text
    return result.output


def error(source: str) -> str:
    result = run(source)
    assert result.error is not None, result.output
    return result.error_text


def test_form_a_linear_regression_recovers_coefficients():
    out = ok("""
    let X = [[1.0, 2.0], [2.0, 1.0], [3.0, 4.0], [4.0, 3.0], [5.0, 5.0]]
    let Y = [[5.0], [4.0], [11.0], [10.0], [15.0]]
    let W = learnable(zeros([2, 1]))
    learn {
        optimizer: adam(lr = 0.1)
        epochs: 500
        for epoch in range(epochs) {
            let err = matmul(X, W) - Y
            backward(mean(err * err))
        }
    }
    print(W)
    """)
    w = np.array(eval(out.strip().replace("\n", "")))
    np.testing.assert_allclose(w.reshape(-1), [1.0, 2.0], atol=0.01)


def test_form_b_runs_statements_and_objective_each_epoch():
    out = ok("""
    let x = learnable([0.0])
    let calls = 0
    learn {
        let d = x - 4.0
        calls = calls + 1
        objective: sum(d * d), optimizer: sgd(lr: 0.25), epochs: 3
    }
    print(calls, x)
    """)
    # x: 0 -> 2 -> 3 -> 3.5 (gradient 2 (x - 4), rate 0.25)
    assert out.split()[0] == "3"
    assert float(out.split()[1].strip("[]")) == pytest.approx(3.5)


def test_lr_setting_alone_means_sgd_and_schedules_tick_per_outer_epoch():
    out = ok("""
    let x = learnable([1.0])
    learn {
        lr: 0.5
        scheduler: step_lr(step_size = 2, gamma = 0.1)
        for e in range(4) {
            print(get_lr(optimizer))
            for k in range(2) { backward(sum(x * 0.0 + x)) }
        }
    }
    """)
    assert [float(v) for v in out.split()] == pytest.approx([0.5, 0.5, 0.05, 0.05])


def test_declared_learnable_f16_and_frozen():
    out = ok("""
    tensor w: float16[2] learnable = [1.0, 2.0]
    tensor f: float32[2] frozen = [1.0, 1.0]
    backward(sum(w * w * f))
    print(grad(w), is_learnable(w), is_learnable(f), dtype(grad(w)))
    """)
    assert out.strip() == "[2., 4.] true false f16"
    assert "grad needs a learnable tensor" in error("tensor f: float32[2] frozen = [1.0, 1.0]\nprint(grad(f))")


def test_walrus_rebinds():
    assert ok("let a = 1\na := a + 1\nprint(a)").strip() == "2"


def test_dropout_is_identity_outside_and_active_inside_learn():
    out = ok("""
    let x = ones([1000])
    print(item(sum(dropout(x, 0.5))))
    let w = learnable([1.0])
    learn {
        optimizer: sgd(lr = 0.1)
        for e in range(1) {
            let d = dropout(x, 0.5)
            print(item(sum(where(d == 0.0, 1.0, 0.0))), item(max(d)))
            backward(sum(w))
        }
    }
    """, seed=3)
    lines = out.split("\n")
    assert float(lines[0]) == 1000.0
    zeros, top = (float(v) for v in lines[1].split())
    assert 400 < zeros < 600 and top == 2.0


def test_set_lr_and_optimizer_fields():
    out = ok("""
    let w = learnable([1.0])
    learn {
        optimizer: sgd(lr = 0.1, momentum = 0.9)
        for e in range(2) { set_lr(optimizer, 0.02)  backward(sum(w)) }
        print(optimizer.lr, optimizer.steps, optimizer)
    }
    """)
    assert out.strip() == "0.02 2 sgd(lr = 0.02, momentum = 0.9)"


def test_gradients_flow_through_user_functions_structs_and_tensor_equations():
    out = ok("""
    struct Lin { w: float32[?, ?] }
    fn apply(l, x) { matmul(x, l.w) }
    let l = Lin { w: learnable([[1.0], [2.0]]) }
    let X = [[1.0, 1.0], [2.0, 0.0]]
    backward(sum(apply(l, X)))
    print(grad(l.w))
    let V = learnable([[1.0], [2.0]])
    Y[i, k] = X[i, j] V[j, k]
    backward(sum(Y))
    print(grad(V))
    """)
    assert out.strip() == "[[3.],\n [1.]]\n[[3.],\n [1.]]"


@pytest.mark.parametrize("source,message", [
    ("learn { epochs: 3 }", "needs `optimizer: sgd(...)/adam(...)/adamw(...)` or `lr: RATE`"),
    ("learn { speed: 3 }", "unknown learn setting 'speed'"),
    ("learn { lr: 0.1, lr: 0.2 }", "'lr' is given twice"),
    ("learn { objective: 1.0, lr: 0.1 }", "needs `epochs: N`"),
    ("learn { optimizer: 3 }", "optimizer must be sgd, adam, adamw, rmsprop or adagrad (...), got int"),
    ("learn { optimizer: adam(rate = 0.1) }", "adam: no argument named 'rate' (it takes lr, beta1"),
    ("learn { optimizer: sgd(lr = -1.0) }", "lr must be positive"),
    ("learn { optimizer: sgd(lr = 0.1, nesterov = true) }", "nesterov needs a momentum > 0"),
    ("learn { optimizer: sgd(0.1) \n backward(sum([1.0])) }", "no learnable tensor to train"),
    ("let w = learnable([1.0])\nlearn { lr: 0.1 \n learn { lr: 0.1 } }", "learn blocks do not nest"),
    ("backward(3)", "loss must be a tensor"),
    ("print(grad([1.0]))", "W must be a learnable tensor, got array"),
    ("dropout([1.0], 1.5)", "p must be in [0, 1)"),
    ("learn { scheduler: 3, lr: 0.1 }", "scheduler must be step_lr"),
    ("step_lr(step_size = 0)", "step_size must be positive"),
    ("fn f(a) { a }\nprint(f(a = 2))", "f is a TL function: pass 'a' by position"),
])
def test_bad_learning_programs_get_one_line_errors(source, message):
    text = error(source)
    assert message in text
    assert "Traceback" not in text


def test_training_state_does_not_grow_over_2000_steps():
    interp = Interpreter(out=io.StringIO(), seed=1)
    interp.run_top_level(interp.load_source("""
    let X = randn([32, 8])
    let Y = randn([32, 2])
    let W = learnable(randn([8, 2]))
    learn {
        optimizer: adam(lr = 0.001)
        clip_grad_norm: 1.0
        epochs: 2000
        for epoch in range(epochs) {
            let err = matmul(relu(X), W) - Y
            backward(mean(err * err))
            if epoch == 200 || epoch == 1999 {
                synchronize()
                let s = memory_stats()
                print(s.live_bytes, s.allocations, s.live_tensors)
            }
        }
    }
    """, "<test>"))
    out = interp.ctx.out.getvalue()
    (live_a, alloc_a, tensors_a), (live_b, alloc_b, tensors_b) = (
        [int(v) for v in line.split()] for line in out.strip().split("\n"))
    assert live_a == live_b and tensors_a == tensors_b
    # the pool serves the steps: new allocations only while the in-flight window first deepens (a
    # few hundred at most), never one per step (1,800 steps make ~40,000 temporaries)
    assert alloc_b - alloc_a < 1000
    assert len(interp.ctx.state.tape.tracked) < 10  # the graphs of finished steps are gone (the run's tape)
    interp.close()
