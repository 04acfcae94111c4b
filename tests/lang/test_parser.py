"""The grammar accepts every TL construct and builds the right AST nodes with positions; every form
of syntax error names file:line:col, shows the line with a caret and says what was expected."""
from __future__ import annotations

import pytest

from tensorlogic.lang import ast
from tensorlogic.lang.errors import TLSyntaxError
from tensorlogic.lang.parser import parse


def items(src):
    return parse(src, "t.tl").items


def expr(src):
    (stmt,) = items(src)
    assert isinstance(stmt, ast.ExprStmt)
    return stmt.expr


def syntax_error(src) -> TLSyntaxError:
    with pytest.raises(TLSyntaxError) as info:
        parse(src, "t.tl")
    return info.value


# ---------------------------------------------------------------- declarations

def test_fn_with_typed_params_and_return_type():
    (fn,) = items("fn silu(x: float16[?, ?], n: int) -> float16[?, ?] { x * sigmoid(x) }")
    assert isinstance(fn, ast.FnDecl) and fn.name == "silu"
    assert [p.name for p in fn.params] == ["x", "n"]
    assert fn.params[0].type == ast.TypeRef(1, 12, "float16", (), (None, None))
    assert fn.params[1].type.dims is None and fn.params[1].type.name == "int"
    assert fn.return_type.dims == (None, None)
    assert isinstance(fn.body.stmts[0], ast.ExprStmt)


def test_generic_fn_struct_and_impl():
    fn, st, impl = items("fn id<T>(x: T) -> T { x }\nstruct Box<T> { value: T }\n"
                         "impl Box { fn get(self) -> int { self.value } }")
    assert fn.generics == ("T",)
    assert st.generics == ("T",) and st.fields[0].name == "value"
    assert isinstance(impl, ast.ImplDecl) and impl.type_name == "Box"
    assert impl.methods[0].params[0].name == "self"


def test_struct_fields_with_named_and_fixed_dims():
    (st,) = items("struct Block { wq: float32[?, 576], wk: f32[seq, d], n: int }")
    assert st.fields[0].type.dims == (None, 576)
    assert st.fields[1].type.dims == ("seq", "d")


def test_import_main_test_bench_blocks():
    imp, m, t, b = items('import "lib/other.tl"\nmain { }\ntest adds { }\nbench "fast path" { }')
    assert imp == ast.Import(1, 1, "lib/other.tl")
    assert isinstance(m, ast.MainBlock)
    assert (t.name, b.name) == ("adds", "fast path")


def test_tensor_declarations():
    a, b, c = items("tensor w: float16[10, 20] learnable = rand([10, 20])\n"
                    "tensor f: float32[2] frozen = [1.0, 2.0]\ntensor z: int32[3]")
    assert (a.name, a.mode, a.type.dims) == ("w", "learnable", (10, 20))
    assert b.mode == "frozen" and c.value is None and c.mode is None


def test_tensor_declaration_needs_a_shape():
    err = syntax_error("tensor w: float32 = 1")
    assert "needs a shape" in err.message


# ---------------------------------------------------------------- statements

def test_let_assign_and_compound_assign():
    let, typed, mut, assign, aug, idx, fld = items(
        "let x = 1\nlet y: int = 2\nlet mut z = 3\nx = 4\nx += 5\nt[0, 1] = 2.0\np.x = 1")
    assert isinstance(let, ast.Let) and let.type is None
    assert typed.type.name == "int" and mut.name == "z"
    assert isinstance(assign, ast.Assign) and assign.op is None
    assert aug.op == "+"
    assert isinstance(idx.target, ast.Index) and isinstance(fld.target, ast.Field)


def test_if_else_if_else_chain():
    (stmt,) = items("if a { x } else if b { y } else if c { z } else { w }")
    assert isinstance(stmt, ast.IfStmt)
    assert len(stmt.branches) == 3 and stmt.else_block is not None


def test_if_as_a_value_on_the_right_of_let_and_return():
    let, ret = items("let v = if c { 1 } else { 2 }\nreturn if c { 1 } else { 2 }")
    assert isinstance(let.value, ast.IfExpr)
    assert isinstance(ret.value, ast.IfExpr)


def test_loops_break_continue_return():
    w, lp, f1, f2 = items("while x < 3 { break }\nloop { continue }\nfor i in range(50) { return }\n"
                          "for v in [1, 2] { return v }")
    assert isinstance(w, ast.While) and isinstance(w.body.stmts[0], ast.Break)
    assert isinstance(lp.body.stmts[0], ast.Continue)
    assert f1.var == "i" and isinstance(f1.iterable, ast.Call)
    assert f2.body.stmts[0].value == ast.Name(4, 26, "v")


def test_statements_need_no_separator_and_semicolons_are_ignored():
    stmts = items("let a = 1; let b = 2;;\nf(a) g(b)")
    assert [type(s).__name__ for s in stmts] == ["Let", "Let", "ExprStmt", "ExprStmt"]


def test_comments_line_and_block():
    stmts = items("// line\nlet a = 1 /* block\n spanning */ let b = 2 // tail")
    assert len(stmts) == 2 and (stmts[1].line, stmts[1].column) == (3, 14)


# ---------------------------------------------------------------- expressions

def test_precedence_low_to_high():
    e = expr("a || b && c == d < e + f * g ** h")
    assert e.op == "||"
    assert e.right.op == "&&"
    assert e.right.right.op == "=="
    assert e.right.right.right.op == "<"
    plus = e.right.right.right.right
    assert plus.op == "+" and plus.right.op == "*" and plus.right.right.op == "**"


def test_power_is_right_associative_and_binds_tighter_than_unary_minus():
    e = expr("-x ** 2 ** 3")
    assert isinstance(e, ast.UnaryOp) and e.operand.op == "**"
    assert e.operand.right.op == "**"


def test_cast_binds_looser_than_plus_but_x_as_int_plus_one_works():
    assert isinstance(expr("a + b as int"), ast.Cast)
    e = expr("x as int + 1")
    assert e.op == "+" and isinstance(e.left, ast.Cast)


def test_matmul_and_odot_are_multiplicative():
    e = expr("a @ b ⊙ c + d")
    assert e.op == "+" and e.left.op == "⊙" and e.left.left.op == "@"


def test_postfix_call_field_method_index_slices():
    e = expr("model.blk[i].attn_q.weight")
    assert isinstance(e, ast.Field) and e.name == "weight"
    m = expr("t.sum().argmax()")
    assert isinstance(m, ast.MethodCall) and m.method == "argmax"
    assert isinstance(m.receiver, ast.MethodCall)
    s = expr("x[2:5, :, -1, ::2, 1:]")
    a, b, c, d, f = s.indices
    assert (a.start.value, a.stop.value, a.step) == (2, 5, None)
    assert (b.start, b.stop, b.step) == (None, None, None)
    assert isinstance(c, ast.UnaryOp)
    assert d.step.value == 2 and f.start.value == 1 and f.stop is None


def test_paths_and_struct_literals():
    p = expr("KVCache::new_f16(12)")
    assert isinstance(p.func, ast.Path) and p.func.parts == ("KVCache", "new_f16")
    s = expr("Block { wq: a, wk: b }")
    assert isinstance(s, ast.StructLit) and [f for f, _ in s.fields] == ["wq", "wk"]


def test_if_condition_followed_by_block_is_not_a_struct_literal():
    (stmt,) = items("if ready { go() }")
    assert isinstance(stmt.branches[0][0], ast.Name)


def test_literals_and_string_escapes():
    lits = items('1 2.5 1e-3 true false "a\\n\\t\\\\\\"b" "héllo ⊙"')
    values = [s.expr.value for s in lits]
    assert values == [1, 2.5, 1e-3, True, False, 'a\n\t\\"b', "héllo ⊙"]


def test_arrays_nested_and_empty():
    e = expr("[[1, 2], [3, 4], []]")
    assert isinstance(e, ast.ArrayLit) and len(e.items) == 3 and e.items[2].items == ()


def test_unicode_identifiers():
    (let,) = items("let α = 1")
    assert let.name == "α"


# ---------------------------------------------------------------- logic

def test_relation_entity_rules_facts_queries():
    rel, ent, r1, r2, fact, wfact, q = items(
        "relation Parent(x: person, y: person)\nentity person { alice, bob }\n"
        "Ancestor(X, Y) <- Parent(X, Y)\n"
        "@temperature(0.5)\nAncestor(X, Z) <- Ancestor(X, Y), Parent(Y, Z), not Blocked(Z)\n"
        "Parent(alice, bob)\nParent(a, b) = 0.9\nAncestor(X, dave)?")
    assert rel.params == (("x", "person"), ("y", "person"))
    assert ent.members == ("alice", "bob")
    assert isinstance(r1, ast.Rule) and r1.head.relation == "Ancestor" and len(r1.body) == 1
    assert r2.annotations[0].name == "temperature" and r2.annotations[0].args[0].value == 0.5
    assert r2.body[2].negated and r2.body[2].atom.relation == "Blocked"
    assert isinstance(fact, ast.ExprStmt)  # a plain fact parses as a call; the interpreter knows relations
    assert isinstance(wfact, ast.Fact) and wfact.weight.value == 0.9
    assert isinstance(q.expr, ast.Query) and q.expr.atom.relation == "Ancestor"


def test_several_facts_and_queries_on_one_line():
    (m,) = items("main { Parent(Alice, Bob)  Parent(Bob, Charlie)  Ancestor(X, Charlie)?  Ancestor(Alice, Y)? }")
    kinds = [type(s.expr).__name__ for s in m.body.stmts]
    assert kinds == ["Call", "Call", "Query", "Query"]


def test_tensor_equation_in_index_notation():
    (eq,) = items("Y[i] = W[i, j] X[j]")
    assert isinstance(eq, ast.TensorEquation) and eq.name == "Y" and eq.indices == ("i",)
    assert isinstance(eq.value, ast.JuxtProduct)
    assert [f.name for f in eq.value.factors] == ["W", "X"]
    (eq2,) = items("H[i] = relu(W[i, j] X[j] + b[i])")
    assert isinstance(eq2, ast.TensorEquation)


def test_indexing_on_the_next_line_is_not_a_product():
    a, b = items("let v = x[0]\ny[1] = 2")
    assert isinstance(a, ast.Let) and isinstance(b, ast.Assign)


def test_annotation_not_first_on_its_line_is_matmul():
    e = expr("a @b")
    assert e.op == "@" and e.right == ast.Name(1, 4, "b")


# ---------------------------------------------------------------- positions

def test_nodes_carry_line_and_column():
    (fn,) = items("\n\n  fn f() {\n    let x = 1 +  y\n  }")
    assert (fn.line, fn.column) == (3, 3)
    let = fn.body.stmts[0]
    assert (let.line, let.column) == (4, 5)
    assert (let.value.right.line, let.value.right.column) == (4, 18)


# ---------------------------------------------------------------- syntax errors

def test_error_format_has_position_source_line_caret_and_expected_words():
    err = syntax_error("let x = (1 + 2\nlet y = 3")
    text = err.format()
    first, line, caret = text.splitlines()[:3]
    assert first.startswith("t.tl:2:1: error: unexpected 'let'; expected")
    assert "')'" in first
    assert line.strip() == "let y = 3"
    assert caret.index("^") == line.index("let")


def test_error_expected_words_are_not_raw_token_names():
    err = syntax_error("fn f( { }")
    assert "expected ')' or a name" in err.message
    for raw in ("_RPAR", "NAME", "__ANON", "$END"):
        assert raw not in err.message


def test_unexpected_end_of_file_names_the_open_bracket():
    err = syntax_error("main {\n  let x = 1\n")
    assert err.message.startswith("unexpected end of file")
    assert "'{' opened at line 1, column 6 is not closed with '}'" in err.note


def test_unexpected_end_inside_an_expression():
    err = syntax_error("let x =")
    assert err.message == "unexpected end of file; expected an expression or 'if'"


def test_unterminated_string():
    err = syntax_error('print("abc)\nlet y = 1')
    assert err.message.startswith("unterminated string")
    assert (err.span.line, err.span.column) == (1, 7)


def test_unterminated_block_comment():
    assert syntax_error("let a = 1 /* never closed").message.startswith("unterminated block comment")


def test_unknown_escape():
    err = syntax_error('let s = "a\\qb"')
    assert "unknown escape '\\q'" in err.message and err.span.column == 11


def test_unexpected_character():
    err = syntax_error("let x = 3 $ 4")
    assert err.message == "unexpected character '$'" and err.span.column == 11


def test_rule_arrow_without_spaces_gets_a_note():
    err = syntax_error("if x<-1 { }")
    assert "'<-'" in err.message and "rule arrow" in err.note


def test_bad_assignment_target():
    assert "cannot assign" in syntax_error('"s" = 3').message
    assert syntax_error("1 + 2 = 3").message.startswith("unexpected '='")


def test_query_of_a_non_atom():
    assert "relation applied to arguments" in syntax_error("x?").message


def test_not_without_an_atom():
    assert "'not' must be followed by an atom" in syntax_error("A(X) <- not X").message


def test_deep_nesting_is_a_syntax_error_not_a_crash():
    src = "let x = " + "(" * 3000 + "1" + ")" * 3000
    try:
        parse(src, "t.tl")
    except TLSyntaxError as e:
        assert "nested too deeply" in e.message


def test_shebang_line_and_byte_order_mark_are_ignored():
    (stmt,) = items("#!/usr/bin/env tl\nlet a = 1")
    assert (stmt.line, stmt.column) == (2, 1)
    assert len(items("\ufefflet a = 1")) == 1


# ---------------------------------------------------------------- line-leading '['


def test_bracket_starting_a_line_begins_an_array_not_an_index():
    (fn,) = items("fn f() {\n    let h = 1\n    [h, 2]\n}\n")
    stmts = fn.body.stmts if hasattr(fn.body, "stmts") else fn.body
    kinds = [type(s).__name__ for s in stmts]
    assert len(kinds) == 2, kinds
    assert "Array" in type(stmts[1].expr).__name__


def test_bracket_on_a_new_line_inside_parentheses_still_indexes():
    e = expr("(x\n[0])")
    assert "Index" in type(e).__name__


def test_multiline_nested_array_literal():
    e = expr("[[1.0, 2.0],\n [3.0, 4.0]]")
    assert "Array" in type(e).__name__ and len(e.items) == 2


# ---------------------------------------------------------------- line-leading '-'


def test_minus_starting_a_line_begins_a_new_statement():
    let, neg = items("let a = 5\n-3")
    assert isinstance(let, ast.Let) and isinstance(let.value, ast.IntLit) and let.value.value == 5
    assert isinstance(neg.expr, ast.UnaryOp) and neg.expr.op == "-"


def test_minus_on_a_new_line_inside_parentheses_still_subtracts():
    e = expr("(5\n- 3)")
    assert isinstance(e, ast.BinOp) and e.op == "-"


def test_a_bare_block_is_a_statement():
    let, block, call = items("let x = 1\n{ let x = 2 }\nprint(x)")
    assert isinstance(block, ast.BlockStmt) and isinstance(block.body.stmts[0], ast.Let)
