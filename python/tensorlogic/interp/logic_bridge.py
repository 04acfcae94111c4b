"""Compiling the logic statements (facts, rules, queries, tensor equations) into calls on the
program's LogicEngine.

Invariants: the engine only ever sees its own terms (`Name`, `Const`, `Atom`, `Rule`) built from
constants that are names, strings or integers; rules wait in `interp.pending_rules` until something
reads the relations; every engine error becomes a TLError at the statement that caused it.
`LogicCompiler` is the Compiler's part, `ProgramLogic` the Interpreter's (the run's engine).
"""
from __future__ import annotations

import functools
import math
from typing import Callable

from .. import logic
from ..builtins import registry
from ..builtins.convert import Tensor, is_program_error, type_name
from ..builtins.logic import device_ops, host_set_ops
from ..lang import ast
from ..lang.errors import SourceSpan, TLError, TLRuntimeError
from ..logic.tensor_equation import evaluate_tensor_equation
from .control import CompileError
from .scope import Scope
from .values import BuiltinValue


class LogicCompiler:
    """The logic half of the Compiler (compiler.py mixes the halves together)."""

    def _terms(self, atom: ast.Atom, scope: Scope):
        """Closures producing the engine's terms for an atom's arguments."""
        makers = []
        for arg in atom.args:
            pos = self.span(arg)
            if isinstance(arg, ast.Name) and not self._is_bound(arg, scope):
                makers.append(lambda f, n=arg.id, p=pos: self.interp.logic_terms().Name(n, p))
            elif self._is_aggregate(arg, scope):
                inner = self._arith_maker(arg.args[0], scope)
                makers.append(lambda f, op=arg.func.id, inner=inner, p=pos: logic.Aggregate(op, inner(f), p))
            elif self._mentions_logic_variable(arg, scope):
                makers.append(self._arith_maker(arg, scope))
            else:
                ev = self.compile_expr(arg, scope)

                def make(f, ev=ev, p=pos, node=arg):
                    v = ev(f)
                    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                        raise self.error(f"a logic constant must be a name, string or number, got {type_name(v)}",
                                         node)
                    if isinstance(v, float) and not math.isfinite(v):
                        raise self.error(f"a logic constant must be a finite number, got {v!r}", node)
                    if isinstance(v, float) and v.is_integer():
                        v = int(v)  # 2.0 and 2 are one constant
                    return self.interp.logic_terms().Const(v, p)
                makers.append(make)
        return makers

    def _mentions_logic_variable(self, expr, scope: Scope) -> bool:
        """Does an arithmetic expression use an unbound capitalised name (a logic variable)?"""
        if isinstance(expr, ast.Name):
            return (expr.id[:1].isupper() or expr.id[:1] == "_") and not self._is_bound(expr, scope) \
                and expr.id not in self.interp.functions and expr.id not in registry.BUILTINS
        if isinstance(expr, ast.BinOp):
            return self._mentions_logic_variable(expr.left, scope) or self._mentions_logic_variable(expr.right, scope)
        if isinstance(expr, ast.UnaryOp):
            return self._mentions_logic_variable(expr.operand, scope)
        return False

    def _is_aggregate(self, expr, scope: Scope) -> bool:
        """`count(Y)`, `sum(V)`, `min(V)`, `max(V)` over a logic variable (else the builtin)."""
        return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
                and expr.func.id in logic.AGGREGATE_OPS and len(expr.args) == 1
                and self._mentions_logic_variable(expr.args[0], scope))

    def _arith_maker(self, expr, scope: Scope):
        """A closure building the engine's Arith term for `N + 1`-style arguments of rules."""
        pos = self.span(expr)
        if isinstance(expr, ast.Name) and not self._is_bound(expr, scope):
            return lambda f, n=expr.id: logic.Name(n, pos)
        if not self._mentions_logic_variable(expr, scope):
            value = self.compile_expr(expr, scope)

            def make_const(f):
                v = value(f)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise self.error(f"arithmetic in a rule works on numbers, got {type_name(v)}", expr)
                return logic.Const(v, pos)
            return make_const
        if isinstance(expr, ast.UnaryOp) and expr.op == "-":
            operand = self._arith_maker(expr.operand, scope)
            return lambda f: logic.Arith("neg", operand(f), None, pos)
        if isinstance(expr, ast.BinOp) and expr.op in logic.ARITH_OPS:
            left, right = self._arith_maker(expr.left, scope), self._arith_maker(expr.right, scope)
            op = expr.op
            return lambda f: logic.Arith(op, left(f), right(f), pos)
        raise self.error("arithmetic in a rule uses + - * / % on numbers and logic variables", expr, CompileError)

    def _is_bound(self, node: ast.Name, scope: Scope) -> bool:
        """Is `name` in an atom a program variable (its value is the term)? A bound variable means
        its value; an unbound name is a logic variable (capitalised) or a constant. A capitalised
        name that is also a program variable could mean either: that is an error, not a guess."""
        name = node.id
        if scope.lookup(name) is None and name not in self.interp.global_names:
            return False
        if name[:1].isupper() or name[:1] == "_":
            raise self.error(f"'{name}' is a program variable, but a capitalised name in a fact, rule "
                             f"or query reads as a logic variable: rename one of them", node,
                             CompileError)
        return True

    def _static_rule(self, stmt: ast.Rule, scope: Scope):
        """The rule as the engine's terms without running anything (for `tl check`): a name is a
        logic Name, any other argument an opaque constant."""
        terms = self.interp.logic_terms()

        def term(arg):
            if isinstance(arg, ast.Name) and scope.lookup(arg.id) is None \
                    and arg.id not in self.interp.global_names:
                return terms.Name(arg.id, self.span(arg))
            if isinstance(arg, ast.BinOp) and arg.op in terms.ARITH_OPS:
                return terms.Arith(arg.op, term(arg.left), term(arg.right), self.span(arg))
            if isinstance(arg, ast.UnaryOp) and arg.op == "-":
                return terms.Arith("neg", term(arg.operand), None, self.span(arg))
            if self._is_aggregate(arg, scope):
                return terms.Aggregate(arg.func.id, term(arg.args[0]), self.span(arg))
            return terms.Const(f"<{type(arg).__name__}>", self.span(arg))

        def atom(a: ast.Atom, negated=False):
            return terms.Atom(a.relation, tuple(term(x) for x in a.args), negated, self.span(a))

        body = []
        for lit in stmt.body:
            if lit.atom is not None:
                body.append(atom(lit.atom, lit.negated))
            elif isinstance(lit.expr, ast.BinOp):
                body.append(terms.Comparison(lit.expr.op, term(lit.expr.left), term(lit.expr.right),
                                             self.span(lit.expr)))
        return terms.Rule(atom(stmt.head), tuple(body), None, self.span(stmt))

    def _atom_builder(self, atom: ast.Atom, scope: Scope, negated: bool = False):
        makers = self._terms(atom, scope)
        pos = self.span(atom)
        relation = atom.relation

        def build(f):
            return self.interp.logic_terms().Atom(relation, tuple(m(f) for m in makers), negated, pos)
        return build

    def _logic_call(self, node, fn):
        try:
            return fn()
        except TLError:
            raise
        except Exception as e:
            if not is_program_error(e):  # a bug in the engine, not in the program
                raise self.convert(e, node) from None
            pos = getattr(e, "pos", None)
            if isinstance(pos, tuple) and len(pos) == 2 and isinstance(pos[0], int):
                e.pos = self.span(ast.Node(pos[0], pos[1] or 1))
            raise self.interp.logic_error(e, self.span(node)) from None

    def stmt_Fact(self, stmt: ast.Fact, scope: Scope):
        build = self._atom_builder(stmt.atom, scope)
        weight = self.compile_expr(stmt.weight, scope) if stmt.weight is not None else None
        interp = self.interp

        def ex_fact(f):
            atom = build(f)
            w = 1.0
            if weight is not None:
                wv = weight(f)
                try:
                    w = float(wv) if not isinstance(wv, Tensor) else float(wv.item())
                except Exception:
                    raise self.error(f"a fact's weight must be a number, got {type_name(wv)}", stmt) from None
            engine = interp.logic_engine(self.span(stmt), flush=False)
            self._logic_call(stmt, lambda: engine.add_fact(atom, weight=w, pos=atom.pos))
        return ex_fact

    def _comparison_builder(self, lit: ast.BodyLiteral, scope: Scope):
        """`X != Y`, `X < 3` in a rule body: the engine's Comparison of two terms."""
        expr = lit.expr
        if lit.negated or not (isinstance(expr, ast.BinOp) and expr.op in ("==", "!=", "<", "<=", ">", ">=")):
            raise self.error("a rule body is a list of atoms like Parent(X, Y), 'not Q(X)' and comparisons "
                             "like X != Y", lit, CompileError)
        left, right = self._terms(ast.Atom(expr.line, expr.column, "", (expr.left, expr.right)), scope)
        pos, op = self.span(expr), expr.op
        return lambda f: self.interp.logic_terms().Comparison(op, left(f), right(f), pos)

    def stmt_Rule(self, stmt: ast.Rule, scope: Scope):
        head = self._atom_builder(stmt.head, scope)
        body = []
        for lit in stmt.body:
            if lit.atom is None:
                body.append(self._comparison_builder(lit, scope))
                continue
            body.append(self._atom_builder(lit.atom, scope, negated=lit.negated))
        temperature = None
        evaluation = None
        for ann in stmt.annotations:
            if ann.name in ("dense", "sparse") and not ann.args:
                if evaluation not in (None, ann.name):
                    raise self.error("a rule takes @dense or @sparse, not both", ann, CompileError)
                evaluation = ann.name
                continue
            if ann.name != "temperature" or len(ann.args) != 1:
                raise self.error(f"unknown annotation @{ann.name} (rules take @temperature(T), @dense, "
                                 f"@sparse)", ann, CompileError)
            temperature = self.compile_expr(ann.args[0], scope)
        interp = self.interp
        pos = self.span(stmt)
        interp.static_rules.append(self._static_rule(stmt, scope))

        def ex_rule(f):
            t = None
            if temperature is not None:
                tv = temperature(f)
                if isinstance(tv, bool) or not isinstance(tv, (int, float)):
                    raise self.error(f"@temperature takes a number, got {type_name(tv)}", stmt)
                t = float(tv)
            rule = interp.logic_terms().Rule(head(f), tuple(b(f) for b in body), t, pos, evaluation)
            engine = interp.logic_engine(pos, flush=False)
            self._logic_call(stmt, lambda: engine.check_rule(rule, interp.pending_rules))
            interp.pending_rules.append(rule)  # added before the next query (facts may come later)
        return ex_rule

    def _query(self, expr: ast.Query, scope: Scope, print_answers: bool):
        build = self._atom_builder(expr.atom, scope)
        interp = self.interp

        def ev_query(f):
            atom = build(f)
            result = self._logic_call(expr, lambda: interp.logic_engine(self.span(expr), needed=atom.relation)
                                      .query(atom))
            if print_answers:
                interp.ctx.write(result.text() + "\n")
                return None
            return result.value
        return ev_query

    def stmt_TensorEquation(self, stmt: ast.TensorEquation, scope: Scope):
        store = self._store(stmt.name, scope, stmt, declare=False, warn_undeclared=False)
        interp = self.interp
        readers: dict[str, Callable] = {}
        for name in _indexed_names(stmt.value):
            readers[name] = self.compile_expr(ast.Name(stmt.line, stmt.column, name), scope)

        def ex_equation(f):
            def lookup(name: str):
                reader = readers.get(name)
                if reader is None:
                    raise self.error(f"tensor equation uses unknown tensor '{name}'", stmt)
                return reader(f)
            def call(name: str, argv: list):
                target = interp.functions.get(name)
                if target is None:
                    b = registry.BUILTINS.get(name)
                    if b is None:
                        raise self.error(f"undefined function '{name}' in tensor equation", stmt)
                    target = BuiltinValue(b)
                return interp.call_value(target, list(argv))
            evaluate = interp.tensor_equation_evaluator(self.span(stmt))
            result = self._logic_call(stmt, lambda: evaluate(stmt, lookup, call))
            store(f, result)
        return ex_equation

    def expr_Query(self, e: ast.Query, scope: Scope):
        return self._query(e, scope, print_answers=False)



class ProgramLogic:
    """The Interpreter's side of the bridge: the run's LogicEngine, created on first use with the
    declared relations and entities, computing on the device."""

    def is_relation(self, name: str) -> bool:
        return name in self.relations

    def logic_terms(self):
        """The logic package, whose term classes (Name, Const, Atom, Rule) the compiled code builds."""
        return logic

    def logic_engine(self, span: SourceSpan | None = None, flush: bool = True, needed: str | None = None):
        """The run's LogicEngine. Rules wait in `pending_rules` until something reads the relations
        (a query, relation_tensor, infer), so facts asserted after a rule can still define the
        relations its body uses. A rule whose body names a relation nobody has defined yet stays
        pending; it is an error only when the relation read (`needed`, or all for None) depends on it."""
        engine = self._engine(span)
        if flush and self.pending_rules:
            pending = self.pending_rules
            heads = {rule.head.relation for rule in pending}
            ready, waiting = [], []
            for rule in pending:
                known = all(engine.has_relation(a.relation) or a.relation in heads
                            for a in rule.body if hasattr(a, "relation"))  # not comparisons
                (ready if known or needed is None or rule.head.relation == needed else waiting).append(rule)
            self.pending_rules = waiting
            for rule in ready:
                try:
                    engine.add_rule(rule)
                except TLError:
                    raise
                except Exception as e:
                    raise self.logic_error(e, getattr(rule, "pos", None) or span) from None
        return engine

    def _engine(self, span: SourceSpan | None):
        if self._logic is None:
            engine = logic.LogicEngine(dense_evaluator=device_ops(), set_ops=host_set_ops())
            for declare in self._logic_decls:
                try:
                    declare(engine)
                except Exception as e:
                    raise self.logic_error(e, span) from None
            self._logic = engine
        return self._logic

    def logic_error(self, exc: BaseException, span: SourceSpan | None) -> TLError:
        pos = getattr(exc, "pos", None)
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        err = TLRuntimeError(message, pos if isinstance(pos, SourceSpan) else span)
        exc.__traceback__ = None
        return err

    def tensor_equation_evaluator(self, span: SourceSpan | None):
        """`evaluate(equation_ast, lookup, call) -> tensor` on the device."""
        return functools.partial(evaluate_tensor_equation, ops=device_ops())

    def _run_logic_decls(self) -> None:
        if self._logic_decls and self._logic is None:
            self._engine(None)


def _indexed_names(expr) -> list[str]:
    names: list[str] = []
    stack = [expr]
    while stack:
        x = stack.pop()
        if isinstance(x, ast.IndexedTensor):
            names.append(x.name)
        elif isinstance(x, ast.Index) and isinstance(x.obj, ast.Name):
            names.append(x.obj.id)
            stack.extend(i for i in x.indices if not isinstance(i, (ast.Slice, ast.Name)))  # letters are no tensors
        elif isinstance(x, ast.Name):
            names.append(x.id)
        elif isinstance(x, ast.JuxtProduct):
            stack.extend(x.factors)
        elif isinstance(x, ast.BinOp):
            stack += [x.left, x.right]
        elif isinstance(x, ast.UnaryOp):
            stack.append(x.operand)
        elif isinstance(x, ast.Call):
            stack.extend(x.args)
    return names
