"""What a program declares is checked: every type name must be known (parameters, return types,
struct fields, `let` types, tensor element types), return values match their declared type, and
`tl check` reports every problem (errors and the warning for `x = e` without a `let`)."""
from __future__ import annotations

import textwrap

import tensorlogic
from tensorlogic.interp.static_check import check_file
from tensorlogic.lang.errors import TLWarning


def problems(tmp_path, src: str):
    path = tmp_path / "p.tl"
    path.write_text(textwrap.dedent(src))
    return check_file(str(path))


def test_unknown_type_names_are_errors_in_tl_check(tmp_path):
    found = problems(tmp_path, """\
        struct P { a: Nonexistent, b: int }
        fn f(x: Strng) -> flaot { x }
        fn g<T>(x: T) -> T { x }
        main { let y: flaot32[?] = [1.0] }
        """)
    assert [(e.span.line, e.span.column) for e in found] == [(1, 15), (2, 9), (2, 19), (4, 15)]
    assert "unknown type 'Nonexistent'" in found[0].message
    assert "did you mean 'float'" in found[2].message
    assert "unknown tensor element type 'flaot32'" in found[3].message and "did you mean 'float32'" in found[3].message


def test_an_unknown_type_stops_tl_run_before_anything_runs():
    result = tensorlogic.run('print("ran")\nfn f(x: Strng) { x }\n', filename="p.tl")
    assert result.output == "" and "unknown type 'Strng'" in result.error.message


def test_a_return_value_is_checked_against_the_declared_type():
    result = tensorlogic.run("fn h() -> int { 2.5 }\nprint(h())\n", filename="p.tl")
    assert "h: return value expects an int, got float" in result.error.message
    ok = tensorlogic.run("fn h() -> float { 2 }\nfn t() -> float32[?] { [1.0, 2.0] }\nprint(h(), t())\n")
    assert ok.error is None and ok.output == "2.0 [1., 2.]\n"


def test_tl_check_reports_every_compile_error_not_only_the_first(tmp_path):
    found = problems(tmp_path, "fn f() { break }\nlet a = 1 as strng\nbreak\nfn g() { continue }\n")
    assert [e.span.line for e in found] == [1, 2, 3, 4]


def test_assigning_an_undeclared_name_runs_and_tl_check_warns(tmp_path):
    src = "main {\n let total = 0\n for i in range(3) { totl = total + i }\n print(total)\n}\n"
    assert tensorlogic.run(src).output == "0\n"  # the earlier TL's implicit declaration is kept
    (warning,) = problems(tmp_path, src)
    assert isinstance(warning, TLWarning) and "'totl = ...'" in warning.message and warning.span.line == 3
    assert warning.format().startswith(f"{warning.span.filename}:3:22: warning:")
