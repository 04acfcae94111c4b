"""A compiled training step (`@compile fn` whose body calls `backward` inside a learn block): the
forward pass, the backward ops and the fused optimizer update are recorded once per signature and
replayed; every replay equals the eager step bitwise on the CPU (losses and parameters), the learning
rate of a schedule and the step number of Adam's bias corrections are inputs of each replay, a new
signature records again, and what a replay could not reproduce is refused with a reason (the call
still runs eagerly and correctly)."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

from tensorlogic.builtins.autograd import session as learn_session  # noqa: E402
from tensorlogic.builtins.autograd import tape  # noqa: E402
from tensorlogic.builtins.autograd.optimizers import SGD, Adam, AdamW, LRScheduler  # noqa: E402
from tensorlogic.interp.interpreter import Interpreter  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

MLP = """
seed(4)
let W1 = learnable(randn([12, 24]) * 0.3)
let b1 = learnable(zeros([24]))
let W2 = learnable(randn([24, 3]) * 0.3)
let b2 = learnable(zeros([3]))

@compile
fn step(x, y) {
    let h = relu(matmul(x, W1) + b1)
    let err = matmul(h, W2) + b2 - y
    let loss = mean(err * err)
    backward(loss)
    loss
}
"""


def _load(source: str) -> Interpreter:
    interp = Interpreter(out=io.StringIO())
    interp.run_top_level(interp.load_source(source, "t.tl"))
    return interp


def _grad(interp: Interpreter, name: str) -> np.ndarray:
    """The gradient of the learnable global `name`, read from that run's tape."""
    with interp.ctx.entered():
        return tape.grad_of(interp.globals[name]).numpy()


def _bits(t) -> np.ndarray:
    return t.numpy().view(np.uint32).copy()


def _data(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 12)).astype(np.float32)
    y = np.tanh(x[:, :3] * 2.0).astype(np.float32)
    return core.from_numpy(x), core.from_numpy(y)


def _train(compiled: bool, make_opt, steps: int, clip=None, scheduler=None, batches=(8,)):
    """Losses and final parameters (as bits) of `steps` steps; the step function is `@compile` or not."""
    interp = _load(MLP if compiled else MLP.replace("@compile\n", ""))
    sess = learn_session.LearnSession(make_opt(), steps, clip, scheduler)
    losses = []
    with interp.ctx.entered(), learn_session.running(sess):
        for epoch in range(steps):
            sess.begin_epoch(epoch)
            x, y = _data(batches[epoch % len(batches)], epoch % 3)
            losses.append(_bits(interp.call_value(interp.functions["step"], [x, y])))
    params = [_bits(interp.globals[n]) for n in ("W1", "b1", "W2", "b2")]
    impl = interp.functions["step"].impl
    stats = (impl.records, impl.replays) if compiled else None
    interp.close()
    return losses, params, stats


CASES = [
    ("adam", lambda: Adam(0.01), None),
    ("adam l2 + clip", lambda: Adam(0.01, weight_decay=0.05), 0.5),
    ("adamw", lambda: AdamW(0.02, weight_decay=0.1), None),
    ("sgd nesterov + clip", lambda: SGD(0.05, momentum=0.9, nesterov=True, weight_decay=0.01), 1.0),
]


@pytest.mark.parametrize("name,make_opt,clip", CASES, ids=[c[0] for c in CASES])
def test_compiled_training_step_equals_the_eager_step_bitwise(name, make_opt, clip):
    steps = 25
    losses, params, stats = _train(True, make_opt, steps, clip)
    e_losses, e_params, _ = _train(False, make_opt, steps, clip)
    assert stats == (1, steps - 1)  # recorded once, replayed every later step
    for i, (a, b) in enumerate(zip(losses, e_losses)):
        assert np.array_equal(a, b), f"{name}: loss of step {i + 1} differs"
    for a, b in zip(params, e_params):
        assert np.array_equal(a, b), f"{name}: parameters differ after {steps} steps"
    assert losses[-1].view(np.float32) < losses[0].view(np.float32)  # it trains


def test_a_schedule_and_the_step_number_are_inputs_of_each_replay():
    sched = LRScheduler("cosine_lr", t_max=20, eta_min=0.0)
    losses, params, stats = _train(True, lambda: Adam(0.05), 20, scheduler=sched)
    e_losses, e_params, _ = _train(False, lambda: Adam(0.05), 20, scheduler=sched)
    assert stats == (1, 19)
    assert all(np.array_equal(a, b) for a, b in zip(losses, e_losses))
    assert all(np.array_equal(a, b) for a, b in zip(params, e_params))
    # a constant rate gives other parameters: the replays did not bake the first step's rate
    _, const_params, _ = _train(True, lambda: Adam(0.05), 20)
    assert not all(np.array_equal(a, b) for a, b in zip(params, const_params))


def test_a_new_batch_shape_records_again_and_both_signatures_replay():
    losses, params, stats = _train(True, lambda: Adam(0.01), 12, batches=(8, 5))
    e_losses, e_params, _ = _train(False, lambda: Adam(0.01), 12, batches=(8, 5))
    assert stats == (2, 10)
    assert all(np.array_equal(a, b) for a, b in zip(losses, e_losses))
    assert all(np.array_equal(a, b) for a, b in zip(params, e_params))


def test_a_new_learn_block_records_again():
    interp = _load(MLP)
    fn = interp.functions["step"]
    x, y = _data(8)
    for _ in range(2):
        sess = learn_session.LearnSession(Adam(0.01), 3, None, None)
        with interp.ctx.entered(), learn_session.running(sess):
            for _ in range(3):
                interp.call_value(fn, [x, y])
        assert sess.steps == 3 and sess.optimizer.steps == 3
    assert (fn.impl.records, fn.impl.replays) == (2, 4)
    interp.close()


def _reason(interp: Interpreter) -> str:
    entries = list(interp.functions["step"].impl.entries.values())
    assert len(entries) == 1
    return getattr(entries[0], "reason", "")


def test_backward_outside_a_learn_block_is_refused_and_still_correct():
    interp = _load(MLP)
    eager = _load(MLP.replace("@compile\n", ""))
    x, y = _data(8)
    for it in (interp, eager):
        it.call_value(it.functions["step"], [x, y])
    assert "kept outside" in _reason(interp)  # the gradients outlive the call
    for n in ("W1", "b2"):
        assert np.array_equal(_grad(interp, n), _grad(eager, n))
    # a second call adds to gradients made before it: runs eagerly, accumulating like eager
    interp.call_value(interp.functions["step"], [x, y])
    eager.call_value(eager.functions["step"], [x, y])
    assert np.array_equal(_grad(interp, "W1"), _grad(eager, "W1"))
    interp.close()
    eager.close()


def test_gradients_pending_before_the_first_call_are_refused():
    interp = _load(MLP + """
fn pending(x, y) {
    let h = relu(matmul(x, W1) + b1)
    backward(mean(matmul(h, W2) + b2 - y))
}
""")
    x, y = _data(8)
    interp.call_value(interp.functions["pending"], [x, y])
    sess = learn_session.LearnSession(Adam(0.01), 3, None, None)
    with interp.ctx.entered(), learn_session.running(sess):
        interp.call_value(interp.functions["step"], [x, y])
    assert "accumulated before the call" in _reason(interp)
    interp.close()


def test_a_learnable_passed_as_an_argument_is_refused():
    interp = _load("""
let W = learnable(ones([4, 2]))
@compile
fn step(w, x) {
    let loss = sum(matmul(x, w))
    backward(loss)
    loss
}
""")
    sess = learn_session.LearnSession(SGD(0.1), 2, None, None)
    with interp.ctx.entered(), learn_session.running(sess):
        interp.call_value(interp.functions["step"], [interp.globals["W"], core.ones([3, 4], "f32")])
    assert "passed as an argument" in _reason(interp)
    np.testing.assert_allclose(interp.globals["W"].numpy(), np.full((4, 2), 1.0 - 0.1 * 3.0), rtol=1e-6)
    interp.close()


def test_the_compiled_training_example_ends_with_zero_live_bytes(package_pythonpath):
    env = dict(os.environ, PYTHONPATH=package_pythonpath)
    path = os.path.join(ROOT, "examples", "learning", "compiled_training_step.tl")
    proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", "--memory-check", "--debug", path],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "memory check passed: 0 live bytes" in proc.stdout
    assert "train_step: recorded" in proc.stderr and "runs eagerly" not in proc.stderr


def test_the_compiled_training_example_under_poison_delay_and_one_op_per_command_buffer(package_pythonpath):
    """Replays write parameters and optimizer state in place while the host queues the next step:
    with recycled buffers poisoned, random kernel delays and every recorded op in its own command
    buffer while recording, the printed losses are the normal run's."""
    path = os.path.join(ROOT, "examples", "learning", "compiled_training_step.tl")
    outs = []
    for extra in ({}, {"TL_DEBUG_POISON": "1", "TL_DEBUG_DELAY_US": "50", "TL_OPS_PER_COMMAND_BUFFER": "1"}):
        env = dict(os.environ, PYTHONPATH=package_pythonpath, **extra)
        proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", path], capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]


EMBED = """
seed(6)
let E = learnable(randn([50, 8]) * 0.5)
let W = learnable(randn([8, 2]) * 0.5)

@compile
fn step(ids, y) {
    let err = matmul(embedding(E, ids), W) - y
    let loss = mean(err * err)
    backward(loss)
    loss
}
"""


def test_an_embedding_step_compiles_with_its_scatter_add_gradient_and_equals_eager():
    rng = np.random.default_rng(3)
    batches = [(core.from_numpy(rng.integers(0, 50, 16).astype(np.int64)),
                core.from_numpy(rng.standard_normal((16, 2)).astype(np.float32))) for _ in range(4)]
    results = []
    for source in (EMBED, EMBED.replace("@compile\n", "")):
        interp = _load(source)
        sess = learn_session.LearnSession(AdamW(0.05, weight_decay=0.01), 12, None, None)
        with interp.ctx.entered(), learn_session.running(sess):
            losses = [_bits(interp.call_value(interp.functions["step"], list(batches[i % 4]))) for i in range(12)]
        results.append((losses, _bits(interp.globals["E"]), _bits(interp.globals["W"]),
                        interp.functions["step"].impl))
        interp.close()
    (lc, ec, wc, impl), (le, ee, we, _) = results
    assert (impl.records, impl.replays) == (1, 11)
    assert all(np.array_equal(a, b) for a, b in zip(lc, le))
    assert np.array_equal(ec, ee) and np.array_equal(wc, we)
