"""Property test: random token soups run through `tensorlogic.run` only ever produce TL errors (syntax
or runtime) or a result — never an internal error (a Python exception inside TensorLogic, which the
interpreter reports as TLInternalError), never a hang (no loop tokens here)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlogic

TOKENS = ["let", "x", "y", "=", "1", "2.5", '"s"', "[", "]", "(", ")", "{", "}", ",", "+", "-", "*", "/", "%",
          "@", "**", "==", "<", "&&", "||", "!", "as", "int", "float", "f16", "if", "else", "return", "fn", "f",
          "struct", "S", ":", "::", ".", "sum", "ones", "shape", "print", "len", "reshape", "softmax", "true",
          "main", "\n", "tensor", "float32", "?", "<-", "P", "X", "append", "str", "einsum", '"ij->ji"']


@settings(max_examples=120, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_random_programs_fail_only_with_tl_errors(tokens):
    result = tensorlogic.run(" ".join(tokens), filename="fuzz.tl")
    assert not result.internal_error, result.error_text


SNIPPETS = ["let x = ones([2, 3])", "let y = [1.0, 2.0]", "let s = \"abc\"", "x = x @ x", "y = y + x",
            "print(x[5])", "print(s[10])", "reshape(x, [7])", "let z = x[:, -1]", "z = z / 0",
            "fn f(a: float32[?, ?]) { a }", "f(y)", "f(1)", "struct S { a: int }", "let q = S { a: 1 }",
            "q.b", "q.a = s", "s + x", "x + s", "let n = 5 / 0", "len(1)", "einsum(\"ij,jk->ik\", x, x)",
            "softmax(s)", "x as string", "s as int", "-s", "!x", "y[1.5]", "append(s, 1)", "sum(x, 9)",
            "assert(x)", "if x { }", "P(a, b)", "P(X, b)?", "let t = from_array([[1], [2, 3]])",
            "concat(x, y, 0)", "rope(x, 1)", "embedding(x, [9])", "attention(x, x, x)", "top_k(y, 0)",
            "KVCache::new_f32(0)", "buffer_reserve([2], -1)", "f32::zeros([-3])", "x[0] = s", "range(\"a\")"]


@settings(max_examples=150, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SNIPPETS), min_size=1, max_size=8))
def test_random_statement_sequences_fail_only_with_tl_errors(snippets):
    result = tensorlogic.run("\n".join(snippets), filename="fuzz.tl")
    assert not result.internal_error, result.error_text
