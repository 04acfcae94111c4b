"""Struct literals are checked against the declared field types, as docs/language.md says
(parameters, return values and `let` already were): before, `P { x: 1.5 }` with `x: int` and even
`P { x: "s" }` were accepted silently. TL's usual conversions apply (an int in a float field
becomes a float, a numeric list in a tensor field a tensor); generic fields are not checked."""
from __future__ import annotations

import pytest

import tensorlogic

DECL = "struct P { x: int, y: float, t: f32[?] }\nstruct Box<T> { v: T }\n"


@pytest.mark.parametrize("literal, message", [
    ('P { x: 1.5, y: 2.0, t: [1.0] }', "struct P: field 'x' expects an int, got float"),
    ('P { x: "s", y: 2.0, t: [1.0] }', "struct P: field 'x' expects an int, got string"),
    ('P { x: 1, y: "no", t: [1.0] }', "struct P: field 'y' expects a float, got string"),
    ('P { x: 1, y: 2.0, t: 3 }', "struct P: field 't' expects f32[?], got int"),
])
def test_a_wrong_field_type_is_an_error(literal, message):
    r = tensorlogic.run(DECL + f"let p = {literal}\n", filename="p.tl")
    assert r.error is not None, "expected an error"
    assert r.error.message == message
    assert r.error_text.startswith("p.tl:3:9: error: ")


def test_fields_convert_as_declared_and_generics_pass():
    r = tensorlogic.run(DECL + 'let p = P { x: 2.0, y: 2, t: [1.0, 2.0] }\nlet b = Box { v: "any" }\nprint(p)\n')
    assert r.error is None, r.error_text
    p = r.env["p"]
    assert p.fields["x"] == 2 and type(p.fields["x"]) is int
    assert p.fields["y"] == 2.0 and type(p.fields["y"]) is float
    assert p.fields["t"].numpy().tolist() == [1.0, 2.0]
    assert r.env["b"].fields["v"] == "any"
