"""Assertions for TL tests: assert, assert_eq, assert_about_eq, panic.

Invariant: a failed assertion raises TLTestFailure with both values printed; tensors compare by
shape and values (assert_eq exactly, assert_about_eq within eps), never by identity.
"""
from __future__ import annotations

import numpy as np

from ..lang.errors import TLTestFailure
from .convert import Tensor, list_to_numpy, to_bool, to_float, to_str
from .formatting import format_template, format_value
from .registry import builtin

C = "assertions"


def _as_array(v):
    if isinstance(v, Tensor):
        arr = v.numpy()
        return arr.astype(np.float64) if arr.dtype.kind == "f" else arr
    if isinstance(v, list):
        try:
            return list_to_numpy(v).astype(np.float64)
        except Exception:  # noqa: BLE001 - not numeric: compared as a plain value
            return None
    return None


def values_equal(a, b) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        x, y = _as_array(a), _as_array(b)
        if x is None:
            x = np.asarray(a, dtype=np.float64)
        if y is None:
            y = np.asarray(b, dtype=np.float64)
        return x.shape == y.shape and bool(np.array_equal(x, y))
    return bool(a == b) if not isinstance(a, bool) or isinstance(b, bool) else a is b


@builtin("assert", "assert(cond, [message])", "fail the test (or stop the program) if cond is false",
         min_args=1, max_args=2, category=C)
def assert_(cond, message=None):
    if not to_bool(cond, "assert condition"):
        raise TLTestFailure(f"assertion failed{': ' + format_value(message) if message is not None else ''}")
    return None


@builtin("assert_eq", "assert_eq(a, b, [message])", "fail unless a equals b (tensors: same shape and values)",
         min_args=2, max_args=3, category=C)
def assert_eq(a, b, message=None):
    if not values_equal(a, b):
        extra = f" ({format_value(message)})" if message is not None else ""
        raise TLTestFailure(f"assert_eq failed{extra}: {format_value(a, True)} != {format_value(b, True)}")
    return None


@builtin("assert_about_eq", "assert_about_eq(a, b, eps)", "fail unless |a - b| <= eps everywhere",
         min_args=2, max_args=3, category=C)
def assert_about_eq(a, b, eps=1e-5):
    tol = to_float(eps, "eps")
    x = _as_array(a) if _as_array(a) is not None else np.asarray(to_float(a, "a"))
    y = _as_array(b) if _as_array(b) is not None else np.asarray(to_float(b, "b"))
    try:
        diff = np.abs(np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64))
    except ValueError:
        raise TLTestFailure(f"assert_about_eq failed: shapes {list(np.shape(x))} and {list(np.shape(y))} "
                            "differ") from None
    if diff.size and not (diff <= tol).all():
        worst = float(np.nanmax(diff)) if not np.isnan(diff).all() else float("nan")
        raise TLTestFailure(f"assert_about_eq failed: {format_value(a, True)} vs {format_value(b, True)} "
                            f"(largest difference {worst:.3g} > {tol:g})")
    return None


@builtin("panic", "panic(fmt, ...)", "stop the program with an error message", min_args=0, max_args=None,
         category=C)
def panic(*args):
    if not args:
        raise TLTestFailure("panic")
    if isinstance(args[0], str):
        raise TLTestFailure(f"panic: {format_template(to_str(args[0]), list(args[1:]))}")
    raise TLTestFailure("panic: " + " ".join(format_value(a) for a in args))
