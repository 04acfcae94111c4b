"""Should-fix items of issue 14 in the runtime: integer environment variables are range-checked
(TL_MAX_ALLOC_MB=2^44 used to become 0 MiB), casts into integer dtypes have one rule on every
backend (float -> int truncates and saturates, NaN -> 0; host data that does not fit is an error:
uint64 max used to become -1), and init() with an unknown backend says so even while tensors
are alive (it said "tensors still alive")."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorlogic import _core as c

I32_MAX, I32_MIN, I64_MAX, I64_MIN = 2**31 - 1, -2**31, 2**63 - 1, -2**63


def _child(code: str, **env) -> subprocess.CompletedProcess:
    environ = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=environ)


@pytest.mark.parametrize("name,value", [
    ("TL_MAX_ALLOC_MB", "17592186044416"), ("TL_MAX_ALLOC_MB", "99999999999999999999999"),
    ("TL_CACHE_LIMIT_MB", "-5"), ("TL_THREADS", "1e3"), ("TL_OPS_PER_COMMAND_BUFFER", "0"),
    ("TL_MAX_MB_IN_FLIGHT", "12abc"), ("TL_MAX_COMMAND_BUFFERS_IN_FLIGHT", "-1"),
    ("TL_DEBUG_DELAY_US", "5000000")])
def test_bad_integer_environment_variable_is_one_line_naming_it(name, value):
    r = _child("from tensorlogic import _core as c\n"
               "try:\n    c.ones([1]).numpy()\nexcept c.TLRuntimeError as e:\n    print('error:', e)\n",
               **{name: value})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"error: {name}={value}: must be a whole number from"), r.stdout


def test_good_integer_environment_variables_still_work():
    r = _child("from tensorlogic import _core as c\nprint(c.ones([2]).numpy().tolist(), c.memory_stats()['cache_limit_bytes'])",
               TL_MAX_ALLOC_MB=" 64 ", TL_CACHE_LIMIT_MB="3", TL_THREADS="1")
    assert r.returncode == 0 and r.stdout.split() == ["[1.0,", "1.0]", str(3 << 20)], r.stdout + r.stderr


def test_from_numpy_refuses_integers_that_do_not_fit():
    with pytest.raises(c.DTypeError, match="18446744073709551615 is out of the range of i64"):
        c.from_numpy(np.array([1, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(c.DTypeError, match="out of the range of i32"):
        c.from_numpy(np.array([2**40]), dtype="i32")
    with pytest.raises(c.DTypeError, match="NaN or infinity"):
        c.from_numpy(np.array([1.0, np.nan]), dtype="i64")
    with pytest.raises(c.DTypeError, match="out of the range of i64"):
        c.from_numpy(np.array([1e300]), dtype="i64")
    assert c.from_numpy(np.array([2**63 - 1], dtype=np.uint64)).numpy().tolist() == [I64_MAX]
    assert c.from_numpy(np.array([-3.7, 3.7]), dtype="i32").numpy().tolist() == [-3, 3]


def test_float_to_int_casts_saturate_the_same_way_for_every_dtype():
    f = c.from_numpy(np.array([1e30, -1e30, np.inf, -np.inf, np.nan, 3.9, -3.9], np.float32))
    assert f.astype("i32").numpy().tolist() == [I32_MAX, I32_MIN, I32_MAX, I32_MIN, 0, 3, -3]
    assert f.astype("i64").numpy().tolist() == [I64_MAX, I64_MIN, I64_MAX, I64_MIN, 0, 3, -3]
    for value, want32, want64 in [(1e30, I32_MAX, I64_MAX), (1e300, I32_MAX, I64_MAX),
                                  (-1e300, I32_MIN, I64_MIN), (float("nan"), 0, 0)]:
        assert c.full([2], value, "i32").numpy().tolist() == [want32] * 2, value
        assert c.full([2], value, "i64").numpy().tolist() == [want64] * 2, value


def test_init_with_an_unknown_backend_says_so_while_tensors_are_alive():
    alive = c.ones([3])
    with pytest.raises(c.BackendUnavailable, match="unknown backend 'tpu'"):
        c.init("tpu")
    assert alive.numpy().tolist() == [1.0, 1.0, 1.0]
