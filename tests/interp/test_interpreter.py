"""Interpreter semantics: scopes and shadowing, assignment, functions and recursion, loops, structs,
imports (with cycles), tensor declarations, and TL errors that point at the right line."""
from __future__ import annotations

import gc
import os
import textwrap

import pytest

import tensorlogic
from tensorlogic import _core


def out(src: str, **kw) -> str:
    result = tensorlogic.run(textwrap.dedent(src), **kw)
    assert result.error is None, result.error_text
    return result.output


def err(src: str):
    result = tensorlogic.run(textwrap.dedent(src), filename="prog.tl")
    assert result.error is not None, f"expected an error, got output {result.output!r}"
    return result.error


# ---------------------------------------------------------------- scopes

def test_let_shadowing_in_the_same_and_inner_scopes():
    assert out("""
        main {
            let x = 1
            let x = x + 1
            if true { let x = 100  print(x) }
            print(x)
        }""") == "100\n2\n"


def test_assignment_rebinds_the_outer_binding_from_a_block():
    assert out("main { let n = 0  for i in range(4) { n = n + i }  print(n) }") == "6\n"


def test_assignment_to_an_undeclared_name_declares_it():
    assert out("main { if true { y = 5 } else { y = 6 }  print(y) }") == "5\n"


def test_reading_a_name_assigned_only_on_a_path_not_taken_is_an_error():
    e = err("main { if false { y = 5 }\n print(y) }")
    assert "'y' is used before it is assigned" in e.message and e.span.line == 2


def test_block_scoped_let_is_not_visible_after_the_block():
    e = err("main {\n if true { let inner = 1 }\n print(inner)\n}")
    assert e.message == "undefined name 'inner'" and (e.span.line, e.span.column) == (3, 8)


def test_loop_variable_is_fresh_per_iteration_and_gone_after_the_loop():
    assert out("main { let xs = [] for i in range(3) { append(xs, i * 10) } print(xs) }") == "[0, 10, 20]\n"
    e = err("main { for i in range(2) { }\n print(i) }")
    assert "undefined name 'i'" in e.message


def test_top_level_bindings_are_globals_visible_in_functions():
    assert out("let scale = 3\nfn f(x) { x * scale }\nmain { print(f(2)) }") == "6\n"


def test_compound_assignment():
    assert out("main { let a = 10  a += 5  a -= 3  a *= 2  a /= 4  print(a) }") == "6\n"


# ---------------------------------------------------------------- functions

def test_recursion_and_implicit_return_of_the_last_expression():
    assert out("fn fib(n: int) -> int { if n < 2 { n } else { fib(n - 1) + fib(n - 2) } }\n"
               "main { print(fib(20)) }") == "6765\n"


def test_explicit_return_inside_loops():
    assert out("fn first_over(xs, t) { for x in xs { if x > t { return x } } -1 }\n"
               "main { print(first_over([1, 5, 9], 4), first_over([1], 4)) }") == "5 -1\n"


def test_return_inside_an_if_used_as_a_value():
    assert out("fn f(c) { let v = if c { return 1 } else { 2 }  v * 10 }\nmain { print(f(true), f(false)) }") \
        == "1 20\n"


def test_user_function_wins_over_a_builtin_of_the_same_name():
    assert out("fn silu(x) { 42 }\nmain { print(silu(1.0)) }") == "42\n"


def test_functions_are_values():
    assert out("fn twice(f, x) { f(f(x)) }\nfn inc(x) { x + 1 }\nmain { print(twice(inc, 1), twice(abs, -3)) }") \
        == "3 3\n"


def test_unbounded_recursion_is_a_tl_error():
    e = err("fn down(n) { down(n + 1) }\nmain { down(0) }")
    assert "maximum call depth" in e.message or "recursion" in e.message
    text = e.format()
    assert "more times]" in text and len(text.splitlines()) < 15  # repeated frames are folded


def test_deep_but_finite_recursion_works():
    assert out("fn depth(n) { if n == 0 { 0 } else { 1 + depth(n - 1) } }\nmain { print(depth(800)) }") == "800\n"


def test_arity_error_names_the_function_and_parameters():
    e = err("fn f(a, b) { a }\nmain {\n f(1) }")
    assert "f(a, b) takes 2 arguments, got 1" in e.message and e.span.line == 3


def test_typed_parameters_check_rank_and_fixed_dims():
    e = err("fn f(x: float32[?, 3]) { x }\nmain { f(ones([2, 4])) }")
    assert "f: parameter 'x' expects float32[?, 3], got tensor [2, 4]" in e.message
    e = err("fn f(x: float16[?, ?]) { x }\nmain { f(ones([2])) }")
    assert "(rank 2)" in e.message and "rank 1" in e.message


def test_f16_and_f32_are_interchangeable_and_int_params_take_integral_floats():
    assert out("fn f(x: float16[?, ?], n: int) { shape(x)[0] + n }\nmain { print(f(ones([2, 2]), 3.0)) }") \
        == "5\n"


def test_named_dims_must_agree_across_parameters():
    e = err("fn f(a: f32[n, k], b: f32[k, m]) { a @ b }\nmain { f(ones([2, 3]), ones([4, 5])) }")
    assert "with k = 3" in e.message


# ---------------------------------------------------------------- control flow

def test_if_else_if_else_and_while_loop_break_continue():
    assert out("""
        fn sign(n) { if n < 0 { -1 } else if n == 0 { 0 } else { 1 } }
        main {
            print(sign(-5), sign(0), sign(7))
            let i = 0
            let evens = []
            while true {
                i += 1
                if i > 8 { break }
                if i % 2 == 1 { continue }
                append(evens, i)
            }
            let n = 0
            loop { n += 1  if n == 3 { break } }
            print(evens, n)
        }""") == "-1 0 1\n[2, 4, 6, 8] 3\n"


def test_for_over_ranges_arrays_strings_and_tensor_rows():
    assert out("""
        main {
            for i in range(2, 5) { print(i) }
            for i in range_i(2) { print(i) }
            for s in ["a", "b"] { print(s) }
            for c in "hi" { print(c) }
            for row in reshape(arange(4), [2, 2]) { print(row) }
        }""") == "2\n3\n4\n0\n1\na\nb\nh\ni\n[0., 1.]\n[2., 3.]\n"


def test_nested_loops_break_only_the_inner_one():
    assert out("main { for i in range(3) { for j in range(3) { if j == 1 { break } print(i, j) } } }") \
        == "0 0\n1 0\n2 0\n"


def test_values_computed_before_a_loop_are_not_affected_by_it():
    assert out("""
        main {
            let x = ones([4]) * 2.0
            for i in range(50) { let y = x * 3.0  let z = y + 1.0 }
            print(x)
        }""") == "[2., 2., 2., 2.]\n"


# ---------------------------------------------------------------- structs

def test_structs_methods_associated_functions_and_field_assignment():
    assert out("""
        struct Counter { n: int }
        impl Counter {
            fn new() -> Counter { Counter { n: 0 } }
            fn bump(self, by: int) { self.n = self.n + by  self }
        }
        main { let c = Counter::new()  c.bump(2).bump(3)  print(c.n, c) }""") == "5 Counter { n: 5 }\n"


def test_generic_struct():
    assert out("struct Box<T> { v: T }\nimpl Box { fn get(self) { self.v } }\n"
               "main { print(Box { v: 1 }.get(), Box { v: \"s\" }.get()) }") == "1 s\n"


def test_struct_literal_errors():
    assert "missing field(s): b" in err("struct P { a: int, b: int }\nmain { P { a: 1 } }").message
    assert "has no field 'c'" in err("struct P { a: int }\nmain { P { a: 1, c: 2 } }").message
    assert "has no method 'nope'" in err("struct P { a: int }\nmain { P { a: 1 }.nope() }").message


# ---------------------------------------------------------------- values and operators

def test_scalar_arithmetic_strings_and_casts():
    assert out('main { print(7 / 2, 6 / 2, -7 % 3, 2 ** 10, 3.7 as int, "12" as int + 1, 2 as float, '
               '"ab" + "cd", "=" * 3, "a" < "b", 1 == 1.0) }') == "3.5 3 2 1024 3 13 2.0 abcd === true true\n"


def test_division_by_zero_is_a_tl_error():
    e = err("main {\n let z = 1 / 0 }")
    assert "division by zero" in e.message and e.span.line == 2


def test_print_formatting_forms():
    assert out('main { print()\n print("x = {}, y = {}", 1, 2.5)\n print("a", [1, 2], true)\n'
               ' print("{:.2}", 3.14159)\n print("{{}} literal") }') == "\nx = 1, y = 2.5\na [1, 2] true\n3.14\n{{}} literal\n"


def test_list_indexing_negative_and_slices():
    assert out("main { let xs = [1, 2, 3, 4]  print(xs[-1], xs[1:3], xs[:-1], len(xs)) }") == "4 [2, 3] [1, 2, 3] 4\n"
    assert "out of range" in err("main { [1, 2][5] }").message


def test_tensor_slices_are_views():
    assert out("main { let t = zeros([2, 3])  let row = t[1]  row[0] = 7.0  print(t[1, 0], t[-1, :]) }") \
        == "7.0 [7., 0., 0.]\n"


def test_tensor_declarations_reshape_flat_literals_and_check_shapes():
    assert out("main { tensor w: float16[2, 2] learnable = [1, 2, 3, 4]  print(shape(w), dtype(w)) }") \
        == "[2, 2] f16\n"
    e = err("main {\n tensor w: float32[2, 3] = ones([3, 2]) }")
    assert "declared float32[2, 3] but the value is [3, 2]" in e.message and e.span.line == 2


def test_integral_floats_are_accepted_as_ints():
    assert out("main { print(shape(reshape(zeros([2.0, 3.0]), [3, 2.0])), shape(concat(ones([1, 2]), "
               "ones([1, 2]), 0.0))) }") == "[3, 2] [2, 2]\n"


# ---------------------------------------------------------------- errors and tracebacks

def test_runtime_error_has_position_caret_and_tl_traceback():
    e = err("fn inner(x) {\n  x @ ones([5, 5])\n}\nfn outer(x) { inner(x) }\nmain {\n  outer(ones([2, 3]))\n}")
    text = e.format()
    assert text.splitlines()[0].startswith("prog.tl:2:3: error: matmul")
    assert "[2, 3]" in text and "[5, 5]" in text
    assert "TL traceback (most recent call last):" in text
    trace = text.split("TL traceback (most recent call last):\n")[1].splitlines()
    assert trace[0].strip().startswith("prog.tl:6: in main, calling outer")
    assert trace[1].strip().startswith("prog.tl:4: in outer, calling inner")
    assert trace[2].strip().startswith("prog.tl:2: in inner")
    assert "Traceback (most recent call last)" not in text  # never a Python traceback


def test_builtin_error_names_the_builtin():
    e = err("main { reshape(ones([2, 3]), [4, 4]) }")
    assert e.message.startswith("reshape: cannot reshape [2, 3]") and "[4, 4]" in e.message


def test_wrong_builtin_arity_shows_usage():
    e = err("main { softmax() }")
    assert "softmax takes 1 to 2 arguments, got 0 (usage: softmax(x, [dim]))" == e.message


def test_break_outside_loop_is_reported_before_running():
    result = tensorlogic.run("print(\"ran\")\nfn f() { break }", filename="prog.tl")
    assert result.output == "" and "'break' outside a loop" in result.error.message


# ---------------------------------------------------------------- imports

def test_imports_relative_paths_once_and_cycles(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "math.tl").write_text('import "../shared.tl"\nfn double(x) { x * 2 }\n')
    (tmp_path / "shared.tl").write_text('print("shared loaded")\nlet K = 10\n')
    main = tmp_path / "main.tl"
    main.write_text('import "lib/math.tl"\nimport "shared.tl"\nmain { print(double(K)) }\n')
    result = tensorlogic.run(main)
    assert result.error is None, result.error_text
    assert result.output == "shared loaded\n20\n"

    (tmp_path / "a.tl").write_text('import "b.tl"\n')
    (tmp_path / "b.tl").write_text('import "c.tl"\n')
    (tmp_path / "c.tl").write_text('\nimport "a.tl"\n')
    result = tensorlogic.run(tmp_path / "a.tl")
    assert "circular import: a.tl -> b.tl -> c.tl -> a.tl" in result.error.message
    assert result.error.span.line == 2 and result.error.span.filename.endswith("c.tl")

    (tmp_path / "m.tl").write_text('import "missing.tl"\n')
    result = tensorlogic.run(tmp_path / "m.tl")
    assert 'cannot import "missing.tl"' in result.error.message


# ---------------------------------------------------------------- tests blocks and API

def test_test_blocks_and_result_counts():
    result = tensorlogic.run("test good { assert_eq(1 + 1, 2) }\ntest bad { assert_eq([1.0, 2.0], [1.0, 3.0]) }",
                             test=True)
    assert (result.tests_passed, result.tests_failed) == (1, 1)
    assert "assert_eq failed" in result.error.message


def test_run_returns_the_final_environment():
    result = tensorlogic.run("let a = 2\nlet b = a * 21\n")
    assert result.env["b"] == 42 and result.ok


# ---------------------------------------------------------------- memory (R6)

def test_tensors_are_released_when_their_binding_goes_out_of_scope():
    gc.collect()
    _core.synchronize()
    base = _core.memory_stats()["live_bytes"]
    probe = {}

    def measure():
        _core.synchronize()
        return _core.memory_stats()["live_bytes"] - base

    result = tensorlogic.run("""
        fn work() { let big = ones([256, 256])  sum(big) }
        main {
            for i in range(3) { let t = ones([128, 128]) }
            let s = work()
        }""")
    assert result.error is None
    gc.collect()
    probe["after"] = measure()
    assert probe["after"] == 0


def test_an_error_does_not_keep_tensors_alive():
    gc.collect()
    _core.synchronize()
    base = _core.memory_stats()["live_bytes"]
    result = tensorlogic.run("fn f() { let big = ones([512, 512])  big @ ones([3, 3]) }\nmain { f() }")
    assert result.error is not None
    del result
    gc.collect()
    _core.synchronize()
    assert _core.memory_stats()["live_bytes"] == base


# ---------------------------------------------------------------- logic hooks

def test_logic_statements_run_through_the_logic_engine():
    assert out("""
        relation Parent(x: person, y: person)
        Ancestor(X, Y) <- Parent(X, Y)
        Ancestor(X, Z) <- Ancestor(X, Y), Parent(Y, Z)
        main {
            Parent(alice, bob)  Parent(bob, carol)
            Ancestor(X, carol)?
            let a = Ancestor(alice, Y)?
            print(len(a))
        }""") == "Ancestor(X, carol): alice, bob\n2\n"


def test_env_input_and_seeded_sampling(monkeypatch):
    monkeypatch.setenv("TL_TEST_VALUE", "hello")
    assert out('main { print(env("TL_TEST_VALUE"), env("TL_UNSET_X", "dflt"), input(), input()) }',
               stdin="line one\n") == "hello dflt line one \n"
    a = out("main { print(temperature_sample([1.0, 1.0, 1.0, 1.0], 1.0), rand([2])) }", seed=7)
    b = out("main { print(temperature_sample([1.0, 1.0, 1.0, 1.0], 1.0), rand([2])) }", seed=7)
    assert a == b


@pytest.mark.parametrize("src", ["main { let x = }", "fn (", "\x00\x01"])
def test_syntax_errors_come_back_as_results(src):
    result = tensorlogic.run(src)
    assert result.error is not None and result.error.span is not None


def test_cwd_independent_file_run(tmp_path):
    p = tmp_path / "p.tl"
    p.write_text('main { print("ok") }')
    cwd = os.getcwd()
    try:
        os.chdir("/")
        assert tensorlogic.run(str(p)).output == "ok\n"
    finally:
        os.chdir(cwd)


def test_facts_may_follow_rules_and_capitalized_calls_assert_implied_relations():
    assert out("""
        Anc(X, Y) <- Par(X, Y)
        Anc(X, Z) <- Anc(X, Y), Par(Y, Z)
        main {
            Likes(alice, tea)  Likes(bob, coffee)
            Likes(X, tea)?
            Par(a, b)  Par(b, c)
            Anc(a, Y)?
        }""") == "Likes(X, tea): alice\nAnc(a, Y): b, c\n"


def test_weighted_facts_and_tensor_equations_reach_the_logic_package():
    text = out("""
        main {
            Edge(a, b) = 0.5
            Edge(a, X)?
            let W = [[1.0, 2.0], [3.0, 4.0]]
            let X = [1.0, 1.0]
            Y[i] = W[i, j] X[j]
            print(Y)
        }""")
    assert text.startswith("Edge(a, X): b") and text.endswith("[3., 7.]\n")


def test_call_value_takes_the_compiled_call_path():
    """A builtin (or the LLM session) calling a TL function gets the same depth limit, arity check
    and error trace as a call in TL code."""
    import io

    from tensorlogic.builtins.registry import BUILTINS
    from tensorlogic.interp.control import MAX_CALL_DEPTH
    from tensorlogic.interp.interpreter import Interpreter
    from tensorlogic.interp.values import BuiltinValue
    from tensorlogic.lang.errors import TLRuntimeError

    interp = Interpreter(out=io.StringIO())
    interp.load_source("fn inner(x) { return x @ x }\nfn outer(x) { return inner(x) }\n"
                       "fn one() { return 1 }", "calls.tl")
    with pytest.raises(TLRuntimeError) as caught:
        interp.call_value(interp.functions["outer"], [1])
    trace = [desc for desc, _ in caught.value.trace]
    assert trace == ["in inner", "in outer, calling inner"], trace
    with pytest.raises(TLRuntimeError, match="relu takes 1 argument, got 0"):
        interp.call_value(BuiltinValue(BUILTINS["relu"]), [])
    interp.depth = MAX_CALL_DEPTH
    with pytest.raises(TLRuntimeError, match="maximum call depth"):
        interp.call_value(interp.functions["one"], [])
    interp.depth = 0
    assert interp.call_value(interp.functions["one"], []) == 1
    interp.close()

