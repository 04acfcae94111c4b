"""Bad input to the tensor runtime, as a TL user meets it: every op family's shape mismatch names both
shapes; a tensor larger than memory is an out-of-memory error after which the next op works; dtype
misuse, scalar division by zero and integer overflow in shapes are one-line TL errors. Invariant: the
program ends with a TLError (never another exception), and the message names what was wrong."""
from __future__ import annotations

import re

import pytest

import tensorlogic

pytest.importorskip("tensorlogic._core")


def tl_error(expr: str) -> str:
    r = tensorlogic.run("main { print(" + expr + ") }", filename="bad.tl")
    assert r.error is not None, f"{expr} ran: {r.output!r}"
    assert not r.internal_error, r.error_text
    return r.error.format().splitlines()[0]


A, B = "ones([2, 3])", "ones([4, 5])"
SHAPE_MISMATCH = {   # op family -> an expression whose two shapes do not fit
    "elementwise": f"{A} + {B}",
    "elementwise (function)": f"maximum({A}, {B})",
    "comparison": f"{A} < {B}",
    "where": f"where({A} > 0, {B}, 1.0)",
    "matmul": f"{A} @ {B}",
    "linear": f"linear({A}, {B})",
    "concat": f"concat({A}, {B}, 0)",
    "stack": f"stack([{A}, {B}], 0)",
    "copy_": f"copy_({A}, {B})",
    "broadcast": f"broadcast_to({A}, [4, 5])",
}


@pytest.mark.parametrize("family", list(SHAPE_MISMATCH))
def test_shape_mismatch_names_both_shapes(family):
    line = tl_error(SHAPE_MISMATCH[family])
    assert "[2, 3]" in line and "[4, 5]" in line, line


@pytest.mark.parametrize("expr, needles", [
    ("reshape(ones([2, 3]), [7])", ["[2, 3]", "[7]"]),
    ("rms_norm(ones([2, 3]), ones([4]))", ["[2, 3]", "[4]"]),
    ("layer_norm(ones([2, 3]), ones([4]))", ["[2, 3]", "[4]"]),
    ("attention(ones([2, 3, 4]), ones([2, 3, 5]), ones([2, 3, 5]))", ["[2, 3, 4]", "[2, 3, 5]"]),
    ("rope(ones([2, 3]), 0)", ["[2, 3]"]),
    # einsum names the letter and its two sizes, not the shapes (reported to the language helper)
    ('einsum("ij,jk->ik", ones([2, 3]), ones([4, 5]))', ["'j'", "3 and 4"]),
    ("softmax(ones([2, 3]), 5)", ["dim 5", "rank 2"]),
    ("sum(ones([2, 3]), 4)", ["dim 4", "rank 2"]),
])
def test_nn_and_shape_ops_name_the_shapes(expr, needles):
    line = tl_error(expr)
    for needle in needles:
        assert needle in line, line


def test_tensor_larger_than_memory_is_out_of_memory_and_the_next_op_works():
    r = tensorlogic.run("main {\n let big = zeros([200000, 200000])\n}", filename="oom.tl")
    assert r.error is not None and not r.internal_error and "out of memory" in r.error.format()
    assert "[200000, 200000]" in r.error.format()
    ok = tensorlogic.run("main { print(to_float(sum(ones([1000, 1000]) * 2.0))) }")
    assert ok.error is None and float(ok.output) == 2000000.0


def test_out_of_memory_in_core_is_its_own_exception_type_and_the_process_goes_on():
    from tensorlogic import _core as core

    before = core.memory_stats()["live_bytes"]
    with pytest.raises(core.OutOfMemoryError, match=r"\[200000, 200000\]"):
        core.zeros([200000, 200000])
    assert core.memory_stats()["live_bytes"] == before
    assert (core.add(core.ones([3]), 1).numpy() == 2).all()


@pytest.mark.parametrize("expr, needle", [
    ('ones([3], "q4_0")', "unknown dtype 'q4_0'"),
    ('ones([3], "f64")', "unknown dtype 'f64'"),
    ("ones([3]) as q4_0", "unknown type 'q4_0'"),
    ('argmax("abc")', "must be a tensor, got string"),
    ('linear(ones([2, 3]), ones([3], "i64"))', "2-D"),
    ("ones([2, 3]) && true", "tensor [2, 3]"),
])
def test_dtype_misuse(expr, needle):
    assert needle in tl_error(expr)


@pytest.mark.parametrize("expr, op", [("1 / 0", "/"), ("5 % 0", "%"), ("7 / (3 - 3)", "/")])
def test_scalar_integer_division_by_zero(expr, op):  # a float divisor of zero is IEEE, as for tensors
    assert f"'{op}': division by zero" in tl_error(expr)


def test_float_division_by_zero_of_tensors_is_ieee():
    r = tensorlogic.run("main { print(ones([2]) / 0) }")
    assert r.error is None and r.output.strip() == "[inf, inf]"


@pytest.mark.parametrize("expr", [
    "zeros([9223372036854775807, 4])", "zeros([4611686018427387904, 4])", "zeros([100000000000, 100000000000])",
    "reshape(ones([6]), [4611686018427387904, 4])", "ones([3037000500, 3037000500])",
])
def test_integer_overflow_in_shapes(expr):
    line = tl_error(expr)
    assert re.search(r"too large|out of memory", line), line


@pytest.mark.parametrize("expr, needle", [("zeros([-1])", "negative dimension"),
                                          ("reshape(ones([6]), [-1, -1])", "more than one -1")])
def test_negative_shapes(expr, needle):
    assert needle in tl_error(expr)


def test_a_value_skipped_after_a_failing_kernel_raises_on_every_read_in_tl():
    """Issue 14.1: after a kernel fails, values whose ops were skipped raise the failing op's
    error on every read (the second read used to print uninitialised memory)."""
    import io

    from tensorlogic.repl import run_repl

    lines = ["let t = ones([2, 3])", "let ids = arange(100, 101) as i64",
             "let bad = embedding(t, ids)", "let good = t * 2.0",
             "print(good)", "print(good)", "print(good + 1.0)", "print(t)"]
    out = io.StringIO()
    run_repl(stdin=io.StringIO("\n".join(lines) + "\n"), out=out)
    errors = [l for l in out.getvalue().splitlines() if "error:" in l]
    assert len(errors) == 3, out.getvalue()
    assert all("embedding: id 100 is out of range" in e for e in errors), errors
    assert "[[1., 1., 1.]," in out.getvalue()


@pytest.mark.parametrize("expr, message", [
    ('einsum("ij,jk->ik", ones([2, 3]), ones([2, 3]))', "einsum: letter 'j' has sizes 3 and 2"),
    ("zeros([-1, 2])", "zeros: negative dimension in shape [-1, 2]"),
    ("ones([2, 3])[5]", "index 5 is out of range"),
    ("item(ones([3]))", "item: needs one element, got tensor [3]"),
])
def test_messages_say_their_prefix_once(expr, message):
    line = tl_error(expr)
    assert line.endswith(message) or message in line
    head = line.split(": error: ", 1)[1]
    words = [w.rstrip(":") for w in head.split()[:3]]
    assert len(set(words[:2])) == 2, line  # never "einsum: einsum:" or "index: index"
    assert "full:" not in line


@pytest.mark.parametrize("stmt", ["f += 1", "let g = f + 1", "f *= [1.0]"])
def test_operators_on_a_function_value_are_tl_errors(stmt):
    # `classify += 1` on a function was an internal error (a Python TypeError) found by the fuzzer
    r = tensorlogic.run("fn f(n: int) -> int { n }\nmain {\n" + stmt + "\n}", filename="bad.tl")
    assert r.error is not None and not r.internal_error, r.error_text
    assert "cannot apply" in r.error_text and "to function and" in r.error_text, r.error_text


@pytest.mark.parametrize("expr", ["zeros([2, 1e308])", "ones([1e30])", "reshape(ones([2]), [1e30])"])
def test_a_dimension_beyond_int64_is_a_tl_error(expr):
    # zeros([n, 1e308]) was an internal error (pybind11 could not cast the int), found by the fuzzer
    assert "too large for a tensor" in tl_error(expr)
