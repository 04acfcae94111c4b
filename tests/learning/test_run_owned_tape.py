"""Autograd and tracing state belong to the run (builtins/run_state.py), not to modules: no module holds
a tape, a trace or a learn block; two runs on two threads keep separate tapes; running a learn block
and a compiled training step patches neither the runtime's functions, `core`, nor `Tensor`.
"""
from __future__ import annotations

import io
import subprocess
import sys
import threading
import types

import numpy as np

import tensorlogic
from tensorlogic.interp.interpreter import Interpreter


LEARN_AND_COMPILE = """
let X = randn([6, 3])
let W = learnable(randn([3, 2]))
learn {
    optimizer: adam(lr = 0.01)
    epochs: 3
    for epoch in range(epochs) { backward(mean(matmul(X, W) * matmul(X, W))) }
}
@compile
fn step(x) {
    let loss = sum(matmul(x, W) * 2.0 - W[0])
    backward(loss)
    loss
}
learn {
    optimizer: sgd(lr = 0.1)
    epochs: 3
    for epoch in range(epochs) { step(X) }
}
let g = grad(W)
print(sum(g))
"""


def _tensorlogic_modules() -> dict[str, types.ModuleType]:
    return {n: m for n, m in sys.modules.items() if n.startswith("tensorlogic") and isinstance(m, types.ModuleType)}


def _state_of(value):
    """What of a module global a run could change: the object, and a container's items."""
    if isinstance(value, (list, tuple)):
        return id(value), tuple(id(v) for v in value)
    if isinstance(value, dict):
        return id(value), tuple((k, id(v)) for k, v in value.items())
    if isinstance(value, (set, frozenset)):
        return id(value), frozenset(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return id(value)


def _snapshot() -> dict:
    return {(name, key): _state_of(v) for name, mod in _tensorlogic_modules().items()
            for key, v in list(vars(mod).items()) if not (key.startswith("__") and key.endswith("__"))}


def test_no_module_holds_a_tape_a_trace_or_a_learn_block():
    from tensorlogic.builtins import symbolic
    from tensorlogic.builtins.autograd import session, tape

    for module, names in ((tape, ("TRACKED", "STATE")), (session, ("ACTIVE",)), (symbolic, ("CURRENT",))):
        present = [n for n in names if hasattr(module, n)]
        assert not present, f"{module.__name__} holds autograd/tracing state: {present}"
    assert tensorlogic.run(LEARN_AND_COMPILE, filename="<warm>").error is None  # every module it needs loaded
    before = _snapshot()
    result = tensorlogic.run(LEARN_AND_COMPILE, filename="<test>", seed=3)
    assert result.error is None, result.error_text
    after = _snapshot()
    changed = sorted(f"{module}.{name}" for (module, name), value in before.items() if after.get((module, name)) != value)
    assert not changed, f"running a learn block and a compiled step changed module state: {changed}"


def _numbers(text: str) -> np.ndarray:
    """The numbers of printed tensors, in order."""
    return np.array([float(x) for x in text.replace("[", " ").replace("]", " ").replace(",", " ").split()])


def _two_part_run(parts: list[str], between: threading.Event, resume: threading.Event, out: dict) -> None:
    interp = Interpreter(out=io.StringIO(), seed=0)
    try:
        interp.run_top_level(interp.load_source(parts[0], "<a1>"))
        between.set()
        resume.wait(60)
        interp.run_top_level(interp.load_source(parts[1], "<a2>"))
        out["text"] = interp.ctx.out.getvalue()
        out["W"] = interp.globals["W"].numpy()
    except BaseException as e:  # noqa: BLE001 - reported by the test thread
        out["error"] = e
    finally:
        between.set()
        interp.close()


def test_two_runs_on_two_threads_keep_separate_tapes():
    """Run A takes a gradient, then waits while run B, on another thread, trains its own learnable
    (its learn block steps every learnable of its run and clears their gradients when it ends) and
    calls zero_grad(); A's gradient and weights must be untouched, and B must train as it does alone."""
    a_parts = ["let W = learnable([1.0, 2.0])\nbackward(sum(W * W))",
               "print(grad(W))\nbackward(sum(W * W * W))\nprint(grad(W))"]
    b_source = """
let V = learnable([3.0, -1.0])
learn {
    optimizer: sgd(lr = 0.5)
    epochs: 2
    for epoch in range(epochs) { backward(sum(V * V)) }
}
zero_grad()
print(V)
"""
    alone = tensorlogic.run(b_source, filename="<b>")
    assert alone.error is None, alone.error_text
    a_ready, b_done, a_out, b_out = threading.Event(), threading.Event(), {}, {}

    def run_b():
        try:
            a_ready.wait(60)
            interp = Interpreter(out=io.StringIO())
            interp.run_top_level(interp.load_source(b_source, "<b>"))
            b_out["text"] = interp.ctx.out.getvalue()
            interp.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            b_out["error"] = e
        finally:
            b_done.set()

    a = threading.Thread(target=_two_part_run, args=(a_parts, a_ready, b_done, a_out))
    b = threading.Thread(target=run_b)
    a.start()
    b.start()
    a.join(120)
    b.join(120)
    assert "error" not in a_out and "error" not in b_out, (a_out.get("error"), b_out.get("error"))
    assert b_out["text"] == alone.output  # B trained only its own learnable: [3, -1] -> 0 after one step
    np.testing.assert_allclose(a_out["W"], [1.0, 2.0])  # B's optimizer never saw A's learnable
    lines = [ln for ln in a_out["text"].splitlines() if ln.strip()]
    np.testing.assert_allclose(_numbers(lines[0]), [2.0, 4.0])  # not cleared by B
    np.testing.assert_allclose(_numbers(lines[1]), [2.0 + 3.0, 4.0 + 12.0])


_UNPATCHED = """
import sys, types
import tensorlogic._core as rt
assert not [m for m in sys.modules if "autograd" in m]
def snap(obj):
    return {k: v for k, v in vars(obj).items()}
runtime_before, tensor_before = snap(rt), snap(rt.Tensor)
from tensorlogic.builtins.core import core
core_before = snap(core)
import tensorlogic
result = tensorlogic.run(sys.stdin.read(), filename="<test>", seed=1)
assert result.error is None, result.error_text
assert [m for m in sys.modules if m.endswith("autograd.tape")], "the program did not load the autograd"
for label, before, obj in (("_core", runtime_before, rt), ("Tensor", tensor_before, rt.Tensor),
                           ("core", core_before, core)):
    after = snap(obj)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) is not after.get(k))
    assert not changed, f"{label} was patched: {changed}"
print("unpatched")
"""


def test_core_and_tensor_are_never_patched(package_pythonpath):
    """In a fresh process: the runtime's functions, `core`'s and `Tensor`'s methods are the same
    objects before the autograd is imported and after a learn block and a compiled training step."""
    proc = subprocess.run([sys.executable, "-c", _UNPATCHED], input=LEARN_AND_COMPILE, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": package_pythonpath, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "unpatched", proc.stderr[-3000:]


def test_tl_operators_record_on_the_run_tape():
    """`a + b`, `-x`, `x[i]`, `a @ b` and `x ** 2` in TL reach the gradient (the interpreter's fast path
    and the operators module), with no patched Tensor operator."""
    result = tensorlogic.run("""
let A = learnable([[1.0, 2.0], [3.0, 4.0]])
let b = learnable([0.5, -1.0])
let y = -(A @ b) + A[0] * 2.0 - b ** 2 / 4.0 + 1.0
backward(sum(y))
print(grad(A))
print(grad(b))
""", filename="<test>")
    assert result.error is None, result.error_text
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    bv = np.array([0.5, -1.0])
    # y_i = -(A b)_i + 2 A_0i - b_i^2/4 + 1
    ga = -np.tile(bv, (2, 1)) + np.array([[2.0, 2.0], [0.0, 0.0]])
    gb = -a.sum(0) - bv / 2.0
    got = _numbers(result.output)
    np.testing.assert_allclose(got, np.concatenate([ga.ravel(), gb]), rtol=1e-6)


def test_a_cast_keeps_the_gradient():
    """`x as f16` and back (builtins/operators.py's cast) is taped as astype: the gradient reaches W."""
    result = tensorlogic.run("""
let W = learnable([1.0, -2.0, 3.0])
backward(sum(((W * W) as f16 as f32) * 3.0))
print(grad(W))
""", filename="<test>")
    assert result.error is None, result.error_text
    np.testing.assert_allclose(_numbers(result.output), [6.0, -12.0, 18.0])
    # einsum's diagonal of an f16 operand casts it to f32 first
    result = tensorlogic.run('let W = learnable([[1.0, 2.0], [3.0, 4.0]])\n'
                             'backward(einsum("ii->", W as f16) * 2.0)\nprint(grad(W))', filename="<test>")
    assert result.error is None, result.error_text
    np.testing.assert_allclose(_numbers(result.output), [2.0, 0.0, 0.0, 2.0])
