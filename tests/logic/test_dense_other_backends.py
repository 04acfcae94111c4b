"""The dense logic evaluator on every other backend the runtime offers (CUDA, Metal) derives exactly
what it derives on NumPy. Each backend runs in a subprocess (TL_BACKEND), so this process's device
is untouched; skipped where only the CPU backend exists."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

core = pytest.importorskip("tensorlogic._core")

import tensorlogic  # noqa: E402

# the subprocess imports tensorlogic from where this process does (installed package in CI,
# the source tree with an in-place _core in development)
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))
PROGRAM = r'''
import json, sys
from tensorlogic.logic import LogicEngine, parse_atom, parse_rule
from tensorlogic.logic.dense_ops import CoreOps, NumpyOps
if sys.argv[1] == "numpy":
    ops = NumpyOps()
else:
    from tensorlogic import _core
    ops = CoreOps(_core)
if sys.argv[1] != "numpy":
    ops.core.init(sys.argv[1])
engine = LogicEngine(dense_limit=1 << 20, dense_evaluator=ops)
engine.add_facts("Edge", [(i, (i * 7 + 3) % 23) for i in range(23)] + [(i, i + 1) for i in range(22)])
engine.add_fact(parse_atom("Trust(0, 1)"), 0.8)
engine.add_fact(parse_atom("Trust(1, 2)"), 0.6)
for rule in ["Path(X, Y) <- Edge(X, Y)", "Path(X, Z) <- Path(X, Y), Path(Y, Z)", "Loop(X) <- Path(X, X)",
             "Far(X, Y) <- Edge(X, _), Edge(_, Y), not Path(X, Y)", "Pair(X, Y) <- Edge(X, Y), X < Y"]:
    engine.add_rule(parse_rule(rule))
engine.add_rule(parse_rule("Belief(Y) <- Trust(X, Y)", temperature=0.5))
engine.add_rule(parse_rule("Belief(Y) <- Belief(X), Trust(X, Y)", temperature=0.5))
out = {q: engine.query(parse_atom(q)).text() for q in ["Path(X, Y)", "Loop(X)", "Far(X, Y)", "Pair(X, Y)", "Belief(X)"]}
assert all(s.mode == "dense" for s in engine.last_stats)
print(json.dumps(out))
'''


def run_on(backend: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(PYTHON_DIR))
    done = subprocess.run([sys.executable, "-c", PROGRAM, backend], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["cpu", "cuda", "metal"])
def test_dense_logic_matches_numpy_on_backend(backend):
    if backend not in core.available_backends():
        pytest.skip(f"{backend} backend not built")
    try:
        on_backend = run_on(backend)
    except AssertionError as error:
        if "BackendUnavailable" in str(error):
            pytest.skip(f"{backend}: no device")
        raise
    assert on_backend == run_on("numpy")
