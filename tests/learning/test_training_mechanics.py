"""Training mechanics of issue 28: gradient accumulation (`accumulation_steps`), `no_grad { }` and
`eval { }` blocks, and checkpoints (a run resumed from save_checkpoint/load_checkpoint equals the
uninterrupted run bitwise on the CPU)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorlogic


def run(source: str):
    out = tensorlogic.run(source, filename="<test>")
    assert out.error is None, out.error_text
    return out


def weights(source: str) -> dict:
    """The final W and W2 of a run, as host arrays; the run's learnables are freed before returning
    (a checkpoint restores the live learnables, which must be only the next run's)."""
    out = run(source)
    got = {name: out.env[name].numpy().copy() for name in ("W", "W2")}
    del out
    gc.collect()
    return got


DATA = """
seed(3)
let X = randn([32, 5])
let Y = matmul(X, [[1.0], [-2.0], [0.5], [0.0], [3.0]])
let W = learnable(randn([5, 8]) * 0.3)
let W2 = learnable(randn([8, 1]) * 0.3)
"""


def test_accumulating_two_micro_batches_equals_one_batch_twice_as_large():
    accumulated = run(DATA + """
    learn {
        optimizer: sgd(lr = 0.05, momentum = 0.9)
        accumulation_steps: 2
        epochs: 20
        for epoch in range(epochs) {
            for i in range(2) {
                let xb = X[i * 16:(i + 1) * 16]
                backward(mse_loss(matmul(relu(matmul(xb, W)), W2), Y[i * 16:(i + 1) * 16]))
            }
        }
        println(optimizer.steps)
    }
    """)
    whole = run(DATA + """
    learn {
        optimizer: sgd(lr = 0.05, momentum = 0.9)
        epochs: 20
        for epoch in range(epochs) { backward(mse_loss(matmul(relu(matmul(X, W)), W2), Y)) }
    }
    """)
    assert accumulated.output.strip() == "20"  # 40 backwards, 20 steps
    for name in ("W", "W2"):
        np.testing.assert_allclose(accumulated.env[name].numpy(), whole.env[name].numpy(), rtol=1e-5, atol=1e-6)
    start = run(DATA).env["W"].numpy()
    assert np.abs(whole.env["W"].numpy() - start).max() > 1e-2  # training moved them


def test_no_grad_records_nothing_and_eval_turns_dropout_off_then_back_on():
    out = run("""
    let w = learnable([1.0, 2.0])
    let v = 0.0
    no_grad { v = w * 3.0 }
    println(is_learnable(v))
    learn {
        lr: 0.1
        epochs: 1
        for epoch in range(epochs) {
            eval { println(dropout(ones([4]), 0.5)) }
            println(min(dropout(ones([400]), 0.5)) == 0.0)  // some dropped (all 400 kept: 2^-400)
            backward(sum(w * w))
        }
    }
    """)
    lines = out.output.strip().split("\n")
    assert lines[1] == "[1., 1., 1., 1.]" and lines[2] == "true"
    text = tensorlogic.run("let w = learnable([1.0])\nlet v = 0.0\nno_grad { v = w * 3.0 }\nbackward(sum(v))",
                           filename="<test>").error_text
    assert "does not depend on any learnable" in text


CHECKPOINTED = DATA + """
let plateau = reduce_lr_on_plateau(patience = 1, factor = 0.5)
learn {
    optimizer: OPTIMIZER
    scheduler: SCHEDULER
    accumulation_steps: 2
    epochs: 8
    let start = if RESUME { load_checkpoint(PATH) } else { 0 }
    for epoch in range(start, epochs) {
        let total = 0.0
        for i in range(4) {
            let xb = X[i * 8:(i + 1) * 8]
            let loss = mse_loss(matmul(dropout(relu(matmul(xb, W)), 0.3), W2), Y[i * 8:(i + 1) * 8])
            backward(loss)
            total = total + item(loss)
        }
        if PLATEAU { plateau.step(total) }
        if epoch == STOP { save_checkpoint(PATH) }
    }
}
"""


@pytest.mark.parametrize("optimizer, scheduler, plateau", [
    ("adam(lr = 0.01, amsgrad = true)", "cosine_lr(t_max = 8)", False),
    ("adamw(lr = 0.01, groups = [param_group([W2], lr = 0.03, weight_decay = 0.0)])", "linear_lr()", False),
    ("sgd(lr = 0.05, momentum = 0.9, dampening = 0.1)", "plateau", True),
    ("rmsprop(lr = 0.01, momentum = 0.5)", "multistep_lr([2, 5])", False),
    ("adagrad(lr = 0.1)", "exponential_lr(0.9)", False),
])
def test_a_resumed_run_equals_the_uninterrupted_one_bitwise(tmp_path, optimizer, scheduler, plateau):
    path = str(tmp_path / "ckpt.npz")

    def program(resume, stop):
        return (CHECKPOINTED.replace("OPTIMIZER", optimizer).replace("SCHEDULER", scheduler)
                .replace("PLATEAU", "true" if plateau else "false").replace("RESUME", "true" if resume else "false")
                .replace("STOP", str(stop)).replace("PATH", repr(path).replace("'", '"')))
    whole = weights(program(False, 3))
    resumed = weights(program(True, -1))
    fresh = weights(DATA)
    for name in ("W", "W2"):
        a, b = whole[name], resumed[name]
        assert a.tobytes() == b.tobytes(), f"{name} differs after resuming ({np.abs(a - b).max()})"
        assert np.abs(a - fresh[name]).max() > 1e-3


def test_checkpoint_errors_are_one_line():
    bad = tensorlogic.run('let w = learnable([1.0])\nload_checkpoint("/nonexistent/x.npz")', filename="<test>")
    assert "cannot read checkpoint /nonexistent/x.npz" in bad.error_text
    bad = tensorlogic.run('let w = learnable([1.0])\nsave_checkpoint("x.ckpt")', filename="<test>")
    assert "must end in .npz" in bad.error_text


def test_a_checkpoint_of_another_program_is_refused(tmp_path):
    path = str(tmp_path / "c.npz")
    gc.collect()
    run(f'let w = learnable([1.0, 2.0])\nsave_checkpoint("{path}")')
    text = tensorlogic.run(f'let w = learnable([1.0, 2.0, 3.0])\nload_checkpoint("{path}")', filename="<t>").error_text
    assert "learnable 0 is f32[2] there, f32[3] here" in text
    text = tensorlogic.run(f'let w = learnable([1.0, 2.0])\nlearn {{ lr: 0.1\n epochs: 1\n load_checkpoint("{path}") }}',
                           filename="<t>").error_text
    assert "saved outside a learn block" in text
    out = run(f'let w = learnable([5.0, 6.0])\nprintln(load_checkpoint("{path}"))\nprintln(w)')
    assert out.output.split("\n")[:2] == ["0", "[1., 2.]"]


def test_randperm_and_minibatches_cover_the_data_and_follow_the_seed():
    out = run("""
    seed(7)
    println(to_list(randperm(6)))
    let bs = minibatches(10, 4)
    println(len(bs), to_list(bs[2]))
    let all = []
    for ids in bs { for i in to_list(ids) { all = append(all, i) } }
    println(all)
    println(len(minibatches(10, 4, drop_last = true)), to_list(minibatches(5, 2, shuffle = false)[2]))
    """)
    lines = out.output.strip().split("\n")
    perm = eval(lines[0])  # noqa: S307
    assert sorted(perm) == list(range(6))
    rng = np.random.default_rng(7)
    assert perm == list(rng.permutation(6))  # the run's generator, as seeded
    assert lines[1].split()[0] == "3" and len(eval(lines[1].split(" ", 1)[1])) == 2  # noqa: S307
    assert sorted(eval(lines[2])) == list(range(10))  # noqa: S307
    assert lines[3] == "2 [4]"
