"""Integer modulo edge cases (issue 14.2): INT64_MIN % -1 used to kill the process with SIGFPE.
Defined results, the same on every backend: x % -1 is 0 and x % 0 is 0 (`/` of integers is true
division to f32, so INT64_MIN / -1 is 2**63 as a float; the kernels' integer floor division, used
by no op today, wraps INT_MIN / -1 to INT_MIN). Each case runs in a child process so that a trap
fails the test instead of ending the run."""
import subprocess
import sys

import numpy as np
import pytest

from tensorlogic import _core as c

I64_MIN, I32_MIN = -2**63, -2**31


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("dtype,lo", [("i64", I64_MIN), ("i32", I32_MIN)])
@pytest.mark.parametrize("env", ["", "TL_DEBUG_POISON=1", "TL_DEBUG_DELAY_US=200", "TL_NO_CACHE=1"])
def test_int_min_div_and_mod_by_minus_one_are_defined(dtype, lo, env):
    prefix = f"import os; os.environ.update(dict([{env!r}.split('=')])); " if env else ""
    code = prefix + (
        "from tensorlogic import _core as c; import numpy as np\n"
        f"a = c.from_numpy(np.array([{lo}, {lo}, 9, -9, 5]), dtype='{dtype}')\n"
        f"m1 = c.from_numpy(np.array([-1, -1, -1, -1, 0]), dtype='{dtype}')\n"
        "print(c.mod(a, m1).numpy().tolist(), c.mod(a, -1).numpy().tolist(),"
        " c.div(a, m1).numpy().tolist()[:2])\n")
    r = _child(code)
    assert r.returncode == 0, r.stderr
    assert eval(r.stdout.replace("] [", "], [")) == ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [-lo, -lo])


def test_tl_int64_min_mod_minus_one_is_zero():
    src = "main { let x = [-9223372036854775807 - 1] % -1\nprint(x)\nprint([-9223372036854775807 - 1] / -1) }"
    r = _child(f"import tensorlogic; r = tensorlogic.run({src!r}, filename='m.tl'); print(r.error); print(r.output)")
    assert r.returncode == 0, r.stderr
    assert "None" in r.stdout.splitlines()[0], r.stdout
    assert "[0]" in r.stdout and "9.223372e+18" in r.stdout, r.stdout
