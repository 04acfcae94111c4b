"""Every program in examples/ (except the model demos) runs and prints exactly its expected output
(tests/examples/expected/NAME.out), and leaves no device memory live."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tensorlogic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXPECTED = os.path.join(os.path.dirname(__file__), "expected")
EXAMPLES = ["hello", "tensors", "functions_structs", "control_flow", "transformer_block", "memory",
            "compiled_step"]


# the subprocess imports the same tensorlogic as this process (the source tree or the installed one)
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))
ENV = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_prints_expected_output(name):
    with open(os.path.join(EXPECTED, f"{name}.out"), encoding="utf-8") as f:
        expected = f.read()
    if name == "memory":  # reservations are per process: run it in a fresh one
        proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", os.path.join(ROOT, "examples", "memory.tl")],
                              capture_output=True, text=True, env=ENV, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == expected
        return
    result = tensorlogic.run(os.path.join(ROOT, "examples", f"{name}.tl"))
    assert result.error is None, result.error_text
    assert result.output == expected


def test_hello_through_the_tl_command_with_memory_check():
    env = ENV
    proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", "--memory-check",
                           os.path.join(ROOT, "examples", "hello.tl")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Hello, TensorLogic!\n")
    assert "memory check passed: 0 live bytes" in proc.stdout


def test_compiled_step_leaves_no_device_memory_with_memory_check():
    # the recording of `step` owns buffers while the program runs; teardown must free them all
    proc = subprocess.run([sys.executable, "-m", "tensorlogic", "run", "--memory-check",
                           os.path.join(ROOT, "examples", "compiled_step.tl")], capture_output=True, text=True,
                          env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "memory check passed: 0 live bytes" in proc.stdout
