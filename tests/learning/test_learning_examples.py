"""Every program in examples/learning/ runs, passes its own assertions (losses below thresholds, learned
values near the truth) and prints its expected output (tests/learning/expected/NAME.out); numbers are
compared with a tolerance (float32 sums may round differently with another thread count or backend)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import tensorlogic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples", "learning")
EXPECTED = os.path.join(os.path.dirname(__file__), "expected")
NAMES = sorted(f[:-3] for f in os.listdir(EXAMPLES) if f.endswith(".tl"))
NUMBER = re.compile(r"-?\d+\.?\d*(?:e[-+]?\d+)?")


def same_up_to_rounding(got: str, want: str) -> bool:
    if NUMBER.sub("#", got) != NUMBER.sub("#", want):
        return False
    for a, b in zip(NUMBER.findall(got), NUMBER.findall(want)):
        x, y = float(a), float(b)
        if abs(x - y) > 0.02 * max(abs(x), abs(y)) + 2e-3:
            return False
    return True


def test_the_learning_section_has_the_classic_examples():
    assert len(NAMES) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_learning_example(name):
    with open(os.path.join(EXPECTED, f"{name}.out"), encoding="utf-8") as f:
        expected = f.read()
    result = tensorlogic.run(os.path.join(EXAMPLES, f"{name}.tl"))
    assert result.error is None, result.error_text
    assert same_up_to_rounding(result.output, expected), result.output


def test_training_under_poison_and_delay_injection_gives_the_same_result(package_pythonpath):
    """Parameters are written in place while earlier reads may still be queued: with recycled buffers
    poisoned and random kernel delays, XOR still trains to the same predictions."""
    env = dict(os.environ, TL_DEBUG_POISON="1", TL_DEBUG_DELAY_US="50", PYTHONPATH=package_pythonpath)
    proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", os.path.join(EXAMPLES, "mlp_xor.tl")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(EXPECTED, "mlp_xor.out"), encoding="utf-8") as f:
        assert same_up_to_rounding(proc.stdout, f.read()), proc.stdout
