"""Compiles AST nodes once into Python closures; running a program only calls closures.

An expression compiles to `ev(frame) -> value`, a statement to `ex(frame) -> signal` where the
signal is None (go on), BREAK, CONTINUE or a `Ret`/`Val` carrying a value. Builtins, user
functions and local variable slots are resolved at compile time.

Invariants: closures capture AST nodes and compile-time facts only, never runtime values, so a
finished frame (a list) is the only owner of the values it held; every Python exception leaving a
call or operator closure is turned into a TLError that points at the node (no Python traceback
reaches a TL user); block exit clears the slots the block declared.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

from ..builtins import registry
from ..builtins.convert import BuiltinArgError, Tensor, core, dtype_of, is_numeric_list, list_to_numpy
from ..builtins.convert import to_bool, to_int, type_name
from ..builtins.formatting import format_value
from ..lang import ast
from ..lang.errors import SourceSpan, TLError, TLRuntimeError
from .learn_block import compile_epochs, compile_learn_block, compile_named_arg
from .scope import FunctionScopeInfo, Scope
from .values import UNSET, BoundMethod, BuiltinValue, FunctionValue, RelationRef, StructValue


class _Signal:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


BREAK = _Signal("break")
CONTINUE = _Signal("continue")


class Ret:
    """`return value` leaving a function."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Val:
    """The value of a block's last expression (function bodies, if-expressions)."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _NonLocalReturn(Exception):
    """`return` inside an `if` used as a value: unwinds to the enclosing function call."""

    def __init__(self, value):
        super().__init__()
        self.value = value


class CompileError(TLError):
    """A static error found while compiling (e.g. `break` outside a loop)."""


MAX_CALL_DEPTH = 900
_SCALAR_INT_TYPES = {"int", "i32", "i64", "int32", "int64", "usize", "isize", "i16", "int16"}
_SCALAR_FLOAT_TYPES = {"float", "f32", "f64", "f16", "float32", "float64", "float16", "bf16", "bfloat16"}
_TENSOR_TYPE_NAMES = {"float32", "float16", "bfloat16", "int32", "int64", "int16", "bool", "f32", "f16", "bf16",
                      "i32", "i64", "Tensor", "tensor", "float", "int"}
_CAST_DTYPES = {"f32": "f32", "float32": "f32", "float": "f32", "f16": "f16", "float16": "f16",
                "bf16": "bf16", "bfloat16": "bf16", "i32": "i32", "int32": "i32", "i64": "i64",
                "int64": "i64", "int": "i64", "bool": "bool", "f64": "f32", "float64": "f32"}


def _apply_binary(op: str, a, b):
    """Slow path of binary operators: lists become tensors, strings concatenate, ints divide exactly."""
    if a.__class__ is list or b.__class__ is list:
        if op == "+" and a.__class__ is list and b.__class__ is list and not (
                is_numeric_list(a) and is_numeric_list(b)):
            return a + b
        if op in ("==", "!=") and a.__class__ is list and b.__class__ is list:
            return (a == b) if op == "==" else (a != b)
        a = _list_operand(a)
        b = _list_operand(b)
    if op == "+" and (a.__class__ is str or b.__class__ is str):
        return (a if a.__class__ is str else format_value(a)) + (b if b.__class__ is str else format_value(b))
    fn = _PY_BINARY[op]
    return fn(a, b)


def _list_operand(v):
    if v.__class__ is list:
        if not is_numeric_list(v):
            raise BuiltinArgError("only numeric arrays take part in arithmetic")
        return core.from_numpy(list_to_numpy(v))
    return v


def _div(a, b):
    if a.__class__ is int and b.__class__ is int:
        if b == 0:
            raise ZeroDivisionError
        q, r = divmod(a, b)
        return q if r == 0 else a / b
    try:
        return a / b
    except ZeroDivisionError:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if a == 0 or a != a:
                return math.nan
            return math.copysign(math.inf, a) * math.copysign(1.0, b)
        raise


def _mod(a, b):
    return a % b


def _matmul(a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise BuiltinArgError(f"'@' multiplies tensors, got {type_name(a)} and {type_name(b)}")
    return a @ b


def _pow(a, b):
    return a ** b


_PY_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "⊙": operator.mul,
    "/": _div,
    "%": operator.mod,
    "@": _matmul,
    "**": operator.pow,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _truth(v) -> bool:
    if v is True:
        return True
    if v is False:
        return False
    try:
        return to_bool(v)
    except BuiltinArgError as e:
        raise TLRuntimeError(str(e)) from None


def _index_key(v):
    """Turn a TL index value into a Python index (int, slice)."""
    if v.__class__ is int:
        return v
    if v.__class__ is slice:
        return v
    return to_int(v, "index")


class Compiler:
    """Compiles the items of one source file; shares program state with the Interpreter."""

    def __init__(self, interp, filename: str, source: str):
        self.interp = interp
        self.filename = filename
        self.lines = source.split("\n")

    # ------------------------------------------------------------ positions and errors

    def span(self, node) -> SourceSpan:
        line = getattr(node, "line", 0)
        column = getattr(node, "column", 0)
        text = self.lines[line - 1] if 1 <= line <= len(self.lines) else ""
        return SourceSpan(self.filename, line, column, text)

    def error(self, message: str, node, cls=TLRuntimeError) -> TLError:
        return cls(message, self.span(node))

    def convert(self, exc: BaseException, node, what: str | None = None) -> TLError:
        """Any exception raised while running `node` as a TLError pointing at it."""
        if isinstance(exc, TLError):
            exc.with_span(self.span(node))
            exc.__traceback__ = None
            return exc
        prefix = f"{what}: " if what else ""
        if isinstance(exc, BuiltinArgError):
            msg = prefix + str(exc)
        elif isinstance(exc, ZeroDivisionError):
            msg = prefix + "division by zero"
        elif isinstance(exc, RecursionError):
            msg = "maximum recursion depth exceeded (a function calls itself without end?)"
        elif isinstance(exc, MemoryError):
            msg = prefix + "out of host memory"
        elif isinstance(exc, (KeyboardInterrupt, BrokenPipeError)):
            raise exc  # not the program's fault: the CLI handles both
        else:
            text = str(exc) or type(exc).__name__
            head = text.split(":", 1)[0]
            if what and (text.startswith(what + ":") or (what.startswith("'") and head.isidentifier()
                                                          and ":" in text)):
                msg = text
            else:
                msg = prefix + text
        err = TLRuntimeError(msg, self.span(node))
        exc.__traceback__ = None
        return err

    # ------------------------------------------------------------ blocks and statements

    def compile_block(self, block: ast.Block, scope: Scope, tail: bool = False, new_scope: bool = True):
        inner = scope.child() if new_scope else scope
        stmts = [s for s in block.stmts]
        closures = []
        for i, stmt in enumerate(stmts):
            is_tail = tail and i == len(stmts) - 1
            closures.append(self.compile_stmt(stmt, inner, is_tail))
        return self._block_runner(closures, inner.declared if new_scope else [])

    @staticmethod
    def _block_runner(closures, declared):
        closures = tuple(closures)
        declared = tuple(declared)
        if not declared:
            if len(closures) == 1:
                return closures[0]

            def run(f):
                for s in closures:
                    sig = s(f)
                    if sig is not None:
                        return sig
                return None
            return run

        def run_and_release(f):
            try:
                for s in closures:
                    sig = s(f)
                    if sig is not None:
                        return sig
                return None
            finally:
                for slot in declared:
                    f[slot] = UNSET
        return run_and_release

    def compile_stmt(self, stmt, scope: Scope, tail: bool = False):
        method = getattr(self, "stmt_" + type(stmt).__name__, None)
        if method is None:
            raise self.error(f"{type(stmt).__name__} is not allowed here", stmt, CompileError)
        if tail and isinstance(stmt, (ast.ExprStmt, ast.IfStmt)):
            return method(stmt, scope, tail=True)
        return method(stmt, scope)

    def _store(self, name: str, scope: Scope, node, declare: bool):
        """A closure `store(frame, value)` binding `name` (a `let` when declare=True)."""
        interp = self.interp
        if declare:
            if scope.is_global:
                g = interp.globals
                interp.global_names.add(name)

                def store_global(f, v):
                    g[name] = v
                return store_global
            slot = scope.declare(name)
        else:
            slot = scope.lookup(name)
            if slot is None:
                if scope.reaches_global() and scope.function_root().is_global or name in interp.global_names:
                    g = interp.globals
                    interp.global_names.add(name)

                    def store_global(f, v):
                        g[name] = v
                    return store_global
                # `x = e` on an undeclared name declares it for the rest of the function
                root = scope.function_root()
                slot = root.declare(name)
                scope.fn.maybe_unset.add(slot)

        def store_slot(f, v):
            f[slot] = v
        store_slot.slot = slot  # type: ignore[attr-defined]
        return store_slot

    def stmt_Let(self, stmt: ast.Let, scope: Scope):
        value = self.compile_rhs(stmt.value, scope)
        if stmt.type is not None:
            value = self._checked(value, stmt.type, f"let {stmt.name}", stmt)
        store = self._store(stmt.name, scope, stmt, declare=True)
        slot = getattr(store, "slot", None)
        if slot is not None:
            def ex_let(f):
                f[slot] = value(f)
            return ex_let

        def ex_let_global(f):
            store(f, value(f))
        return ex_let_global

    def _checked(self, value, typ: ast.TypeRef, what: str, node):
        check = self.type_checker(typ, what)
        if check is None:
            return value

        def ev(f):
            try:
                return check(value(f), {})
            except Exception as e:
                raise self.convert(e, node) from None
        return ev

    def compile_rhs(self, expr, scope: Scope):
        if isinstance(expr, ast.IfExpr):
            return self.expr_IfExpr(expr, scope)
        return self.compile_expr(expr, scope)

    def stmt_Assign(self, stmt: ast.Assign, scope: Scope):
        target = stmt.target
        value = self.compile_rhs(stmt.value, scope)
        if stmt.op is not None:
            current = self.compile_expr(target, scope)
            op = stmt.op
            rhs = value
            node = stmt

            def value(f):  # noqa: F811 - the combined value of `x op= e`
                a = current(f)
                b = rhs(f)
                try:
                    return _apply_binary(op, a, b)
                except Exception as e:
                    raise self.convert(e, node, f"'{op}='") from None
        if isinstance(target, ast.Name):
            if self.interp.is_relation(target.id):
                raise self.error(f"'{target.id}' is a relation; facts are written {target.id}(a, b)", target,
                                 CompileError)
            store = self._store(target.id, scope, stmt, declare=False)
            slot = getattr(store, "slot", None)
            if slot is not None:
                def ex_assign(f):
                    f[slot] = value(f)
                return ex_assign

            def ex_assign_global(f):
                store(f, value(f))
            return ex_assign_global
        if isinstance(target, ast.Index):
            obj = self.compile_expr(target.obj, scope)
            keys = [self._index_part(i, scope) for i in target.indices]

            def ex_setitem(f):
                container = obj(f)
                key = [k(f) for k in keys]
                v = value(f)
                try:
                    self._setitem(container, key, v)
                except Exception as e:
                    raise self.convert(e, target, "index assignment") from None
            return ex_setitem
        if isinstance(target, ast.Field):
            obj = self.compile_expr(target.obj, scope)
            name = target.name

            def ex_setfield(f):
                o = obj(f)
                v = value(f)
                if o.__class__ is StructValue:
                    if name not in o.fields:
                        raise self.error(f"struct {o.type.name} has no field '{name}'", target)
                    o.fields[name] = v
                    return None
                setter = getattr(o, "tl_set_field", None)
                if setter is None:
                    raise self.error(f"cannot set field '{name}' on {type_name(o)}", target)
                try:
                    setter(name, v)
                except Exception as e:
                    raise self.convert(e, target) from None
                return None
            return ex_setfield
        raise self.error("cannot assign to this expression", target, CompileError)

    @staticmethod
    def _setitem(container, key: list, v):
        if isinstance(container, Tensor):
            k = tuple(_index_key(x) for x in key)
            if isinstance(v, list):
                v = core.from_numpy(list_to_numpy(v))
            elif not isinstance(v, (Tensor, int, float)):
                raise BuiltinArgError(f"cannot store {type_name(v)} into a tensor")
            container[k if len(k) != 1 else k[0]] = v
            return
        if isinstance(container, list):
            target = container
            for x in key[:-1]:
                target = target[_index_key(x)]
            target[_index_key(key[-1])] = v
            return
        raise BuiltinArgError(f"cannot assign into {type_name(container)}")

    def stmt_ExprStmt(self, stmt: ast.ExprStmt, scope: Scope, tail: bool = False):
        expr = stmt.expr
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and self._is_fact_call(expr.func.id, scope):
            return self.stmt_Fact(ast.Fact(stmt.line, stmt.column,
                                           ast.Atom(expr.line, expr.column, expr.func.id, expr.args), None), scope)
        if isinstance(expr, ast.Query):
            return self._query(expr, scope, print_answers=True)
        ev = self.compile_expr(expr, scope)
        if tail:
            def ex_tail(f):
                return Val(ev(f))
            return ex_tail

        def ex_expr(f):
            ev(f)
        return ex_expr

    def _is_fact_call(self, name: str, scope: Scope) -> bool:
        """`R(a, b)` as a statement asserts a fact when R is a relation of the program, or when R is
        capitalized and names no function, builtin or variable (a relation implied by its facts)."""
        interp = self.interp
        if name in interp.functions or scope.lookup(name) is not None or name in interp.global_names:
            return False
        if interp.is_relation(name):
            return True
        if name[:1].isupper() and name not in registry.BUILTINS and "::" not in name:
            interp.relations.add(name)
            return True
        return False

    def stmt_IfStmt(self, stmt: ast.IfStmt, scope: Scope, tail: bool = False):
        conds = [self.compile_expr(c, scope) for c, _ in stmt.branches]
        bodies = [self.compile_block(b, scope, tail=tail) for _, b in stmt.branches]
        else_body = self.compile_block(stmt.else_block, scope, tail=tail) if stmt.else_block else None
        if len(conds) == 1:
            cond, body = conds[0], bodies[0]

            def ex_if(f):
                c = cond(f)
                if c is True or (c is not False and _truth_at(c, self, stmt)):
                    return body(f)
                if else_body is not None:
                    return else_body(f)
                return None
            return ex_if
        pairs = tuple(zip(conds, bodies))

        def ex_if_chain(f):
            for cond, body in pairs:
                c = cond(f)
                if c is True or (c is not False and _truth_at(c, self, stmt)):
                    return body(f)
            if else_body is not None:
                return else_body(f)
            return None
        return ex_if_chain

    def _loop_body(self, body: ast.Block, scope: Scope):
        scope.fn.loop_depth += 1
        try:
            return self.compile_block(body, scope)
        finally:
            scope.fn.loop_depth -= 1

    def stmt_While(self, stmt: ast.While, scope: Scope):
        cond = self.compile_expr(stmt.cond, scope)
        body = self._loop_body(stmt.body, scope)

        def ex_while(f):
            while True:
                c = cond(f)
                if not (c is True or (c is not False and _truth_at(c, self, stmt))):
                    return None
                sig = body(f)
                if sig is not None:
                    if sig is BREAK:
                        return None
                    if sig is CONTINUE:
                        continue
                    return sig
        return ex_while

    def stmt_Loop(self, stmt: ast.Loop, scope: Scope):
        body = self._loop_body(stmt.body, scope)

        def ex_loop(f):
            while True:
                sig = body(f)
                if sig is not None:
                    if sig is BREAK:
                        return None
                    if sig is CONTINUE:
                        continue
                    return sig
        return ex_loop

    def stmt_For(self, stmt: ast.For, scope: Scope):
        iterable = self.compile_expr(stmt.iterable, scope)
        loop_scope = scope.child()
        slot = loop_scope.declare(stmt.var)
        scope.fn.loop_depth += 1
        try:
            inner = self.compile_block(stmt.body, loop_scope)
        finally:
            scope.fn.loop_depth -= 1
        node = stmt

        def ex_for(f):
            it = iterable(f)
            try:
                items = _iterate(it)
            except Exception as e:
                raise self.convert(e, node.iterable, "for") from None
            try:
                for v in items:
                    f[slot] = v
                    sig = inner(f)
                    if sig is not None:
                        if sig is BREAK:
                            return None
                        if sig is CONTINUE:
                            continue
                        return sig
                return None
            finally:
                f[slot] = UNSET
        return ex_for

    def stmt_Break(self, stmt, scope: Scope):
        if scope.fn.loop_depth == 0:
            raise self.error("'break' outside a loop", stmt, CompileError)
        return lambda f: BREAK

    def stmt_Continue(self, stmt, scope: Scope):
        if scope.fn.loop_depth == 0:
            raise self.error("'continue' outside a loop", stmt, CompileError)
        return lambda f: CONTINUE

    def stmt_Return(self, stmt: ast.Return, scope: Scope):
        if stmt.value is None:
            return lambda f: Ret(None)
        value = self.compile_rhs(stmt.value, scope)

        def ex_return(f):
            return Ret(value(f))
        return ex_return

    def stmt_TensorDecl(self, stmt: ast.TensorDecl, scope: Scope):
        from ..builtins.tensor_decl import declare_tensor
        value = self.compile_rhs(stmt.value, scope) if stmt.value is not None else None
        store = self._store(stmt.name, scope, stmt, declare=True)
        typ = stmt.type
        interp = self.interp

        def ex_tensor(f):
            v = value(f) if value is not None else None
            try:
                t = declare_tensor(stmt.name, typ.name, typ.dims, v, stmt.mode)
            except Exception as e:
                raise self.convert(e, stmt, f"tensor {stmt.name}") from None
            if stmt.mode == "learnable":
                interp.learnable.add(stmt.name)
            store(f, t)
        return ex_tensor

    # ------------------------------------------------------------ logic statements

    def _terms(self, atom: ast.Atom, scope: Scope):
        """Closures producing the engine's terms for an atom's arguments."""
        makers = []
        for arg in atom.args:
            pos = self.span(arg)
            if isinstance(arg, ast.Name):
                makers.append(lambda f, n=arg.id, p=pos: self.interp.logic_terms().Name(n, p))
            else:
                ev = self.compile_expr(arg, scope)

                def make(f, ev=ev, p=pos, node=arg):
                    v = ev(f)
                    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                        raise self.error(f"a logic constant must be a name, string or integer, got {type_name(v)}",
                                         node)
                    if isinstance(v, float):
                        if v != int(v):
                            raise self.error(f"a logic constant must be an integer, got {v!r}", node)
                        v = int(v)
                    return self.interp.logic_terms().Const(v, p)
                makers.append(make)
        return makers

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
            pos = getattr(e, "pos", None)
            if isinstance(pos, tuple) and len(pos) == 2 and isinstance(pos[0], int):
                e.pos = self.span(ast.Node(pos[0], pos[1] or 1))
            raise self.interp.logic_error(e, self.span(node)) from None

    def stmt_Fact(self, stmt: ast.Fact, scope: Scope):
        self.interp.require_logic(self.span(stmt))
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
        self.interp.require_logic(self.span(stmt))
        head = self._atom_builder(stmt.head, scope)
        body = []
        for lit in stmt.body:
            if lit.atom is None:
                body.append(self._comparison_builder(lit, scope))
                continue
            body.append(self._atom_builder(lit.atom, scope, negated=lit.negated))
        temperature = None
        for ann in stmt.annotations:
            if ann.name != "temperature" or len(ann.args) != 1:
                raise self.error(f"unknown annotation @{ann.name} (rules take @temperature(T))", ann, CompileError)
            temperature = self.compile_expr(ann.args[0], scope)
        interp = self.interp
        pos = self.span(stmt)

        def ex_rule(f):
            t = None
            if temperature is not None:
                tv = temperature(f)
                if isinstance(tv, bool) or not isinstance(tv, (int, float)):
                    raise self.error(f"@temperature takes a number, got {type_name(tv)}", stmt)
                t = float(tv)
            rule = interp.logic_terms().Rule(head(f), tuple(b(f) for b in body), t, pos)
            interp.logic_engine(pos, flush=False)
            interp.pending_rules.append(rule)  # added before the next query (facts may come later)
        return ex_rule

    def _query(self, expr: ast.Query, scope: Scope, print_answers: bool):
        self.interp.require_logic(self.span(expr))
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
        self.interp.require_logic(self.span(stmt))
        store = self._store(stmt.name, scope, stmt, declare=False)
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

    def stmt_LearnBlock(self, stmt: ast.LearnBlock, scope: Scope):
        return compile_learn_block(self, stmt, scope)

    def expr_LearnEpochs(self, e, scope: Scope):
        return compile_epochs(self, e, scope)

    def expr_NamedArg(self, e: ast.NamedArg, scope: Scope):
        return compile_named_arg(self, e, scope)

    # ------------------------------------------------------------ expressions

    def compile_expr(self, expr, scope: Scope):
        method = getattr(self, "expr_" + type(expr).__name__, None)
        if method is None:
            raise self.error(f"{type(expr).__name__} is not allowed here", expr, CompileError)
        return method(expr, scope)

    def expr_IntLit(self, e, scope):
        v = e.value
        return lambda f: v

    expr_FloatLit = expr_IntLit
    expr_StringLit = expr_IntLit
    expr_BoolLit = expr_IntLit

    def expr_Name(self, e: ast.Name, scope: Scope):
        name = e.id
        slot = scope.lookup(name)
        if slot is not None:
            if slot in scope.fn.maybe_unset:
                def ev_maybe(f):
                    v = f[slot]
                    if v is UNSET:
                        raise self.error(f"'{name}' is used before it is assigned", e)
                    return v
                return ev_maybe
            return lambda f: f[slot]
        interp = self.interp
        g = interp.globals
        fallback = None
        if name in interp.functions:
            fallback = interp.functions[name]
        elif name in interp.structs:
            fallback = interp.structs[name]
        elif interp.is_relation(name):
            fallback = RelationRef(name)
        elif name in registry.BUILTINS:
            fallback = BuiltinValue(registry.BUILTINS[name])

        if fallback is not None and name not in interp.global_names:
            return lambda f: fallback
        if fallback is None and name not in interp.global_names:
            interp.unresolved_names.append((name, self.span(e)))

        def ev_global(f):
            v = g.get(name, UNSET)
            if v is UNSET:
                if fallback is not None:
                    return fallback
                late = interp.functions.get(name)
                if late is not None:
                    return late
                raise self.error(f"undefined name '{name}'", e)
            return v
        return ev_global

    def expr_Path(self, e: ast.Path, scope: Scope):
        target = self._resolve_path(e)

        def ev(f):
            return target()
        return ev

    def _resolve_path(self, e: ast.Path):
        """A thunk returning what `A::b` names (a function or builtin value)."""
        interp = self.interp
        full = "::".join(e.parts)

        def resolve():
            if len(e.parts) == 2:
                struct = interp.structs.get(e.parts[0])
                if struct is not None and e.parts[1] in struct.methods:
                    return struct.methods[e.parts[1]]
            b = registry.BUILTINS.get(full)
            if b is not None:
                return BuiltinValue(b)
            if len(e.parts) == 2 and e.parts[0] in interp.structs:
                raise self.error(f"struct {e.parts[0]} has no function '{e.parts[1]}'", e)
            raise self.error(f"undefined name '{full}'", e)
        return resolve

    def expr_ArrayLit(self, e: ast.ArrayLit, scope: Scope):
        items = tuple(self.compile_expr(x, scope) for x in e.items)

        def ev_array(f):
            vals = [it(f) for it in items]
            for v in vals:
                if v.__class__ is list and v and is_numeric_list(vals):
                    try:
                        return core.from_numpy(list_to_numpy(vals))
                    except Exception as exc:
                        raise self.convert(exc, e, "array literal") from None
            return vals
        return ev_array

    def expr_StructLit(self, e: ast.StructLit, scope: Scope):
        fields = tuple((name, self.compile_expr(x, scope)) for name, x in e.fields)
        interp = self.interp

        def ev_struct(f):
            st = interp.structs.get(e.type_name)
            if st is None:
                raise self.error(f"unknown struct '{e.type_name}'", e)
            values = {name: ev(f) for name, ev in fields}
            for name in values:
                if name not in st.field_names:
                    raise self.error(f"struct {st.name} has no field '{name}' (fields: {', '.join(st.field_names)})", e)
            missing = [n for n in st.field_names if n not in values]
            if missing:
                raise self.error(f"struct {st.name} literal is missing field(s): {', '.join(missing)}", e)
            return StructValue(st, {n: values[n] for n in st.field_names})
        return ev_struct

    def expr_BinOp(self, e: ast.BinOp, scope: Scope):
        op = e.op
        left = self.compile_expr(e.left, scope)
        right = self.compile_expr(e.right, scope)
        if op == "&&":
            def ev_and(f):
                a = left(f)
                if not (a is True or (a is not False and _truth_at(a, self, e.left))):
                    return False
                b = right(f)
                return b is True or (b is not False and _truth_at(b, self, e.right))
            return ev_and
        if op == "||":
            def ev_or(f):
                a = left(f)
                if a is True or (a is not False and _truth_at(a, self, e.left)):
                    return True
                b = right(f)
                return b is True or (b is not False and _truth_at(b, self, e.right))
            return ev_or
        pyop = _PY_BINARY[op]
        opname = f"'{op}'"

        def fail(a, b, exc):
            try:
                return _apply_binary(op, a, b)
            except TLError:
                raise
            except Exception as exc2:
                if isinstance(exc2, TypeError):
                    raise self.error(f"cannot apply {opname} to {type_name(a)} and {type_name(b)}", e) from None
                raise self.convert(exc2, e, opname) from None

        if op in ("+", "-", "*", "⊙", "<", "<=", ">", ">=", "==", "!=", "**", "%"):
            # Python's own operator is right for numbers, strings and tensors; lists (numeric arrays
            # act as tensors) and failures (str + int, shape errors) take the slow path.
            if isinstance(e.right, (ast.IntLit, ast.FloatLit)):
                const = e.right.value

                def ev_binop_const(f):
                    a = left(f)
                    if a.__class__ is list:
                        return fail(a, const, None)
                    try:
                        return pyop(a, const)
                    except Exception as exc:
                        return fail(a, const, exc)
                return ev_binop_const

            def ev_binop(f):
                a = left(f)
                b = right(f)
                if a.__class__ is list or b.__class__ is list:
                    return fail(a, b, None)
                try:
                    return pyop(a, b)
                except Exception as exc:
                    return fail(a, b, exc)
            return ev_binop

        def ev_binop_slow(f):
            a = left(f)
            b = right(f)
            return fail(a, b, None)
        return ev_binop_slow

    def expr_UnaryOp(self, e: ast.UnaryOp, scope: Scope):
        operand = self.compile_expr(e.operand, scope)
        if e.op == "-":
            def ev_neg(f):
                v = operand(f)
                try:
                    if v.__class__ is list:
                        v = _list_operand(v)
                    if isinstance(v, (str, bool)):
                        raise TypeError
                    return -v
                except Exception as exc:
                    if isinstance(exc, TypeError):
                        raise self.error(f"cannot negate {type_name(v)}", e) from None
                    raise self.convert(exc, e, "'-'") from None
            return ev_neg

        def ev_not(f):
            v = operand(f)
            if v is True:
                return False
            if v is False:
                return True
            if isinstance(v, Tensor) and v.numel != 1:
                try:
                    return core.logical_not(v)
                except Exception as exc:
                    raise self.convert(exc, e, "'!'") from None
            return not _truth_at(v, self, e)
        return ev_not

    def expr_Cast(self, e: ast.Cast, scope: Scope):
        operand = self.compile_expr(e.operand, scope)
        tname = e.type_name
        if tname not in _CAST_DTYPES and tname not in ("string", "str", "String"):
            raise self.error(f"unknown type '{tname}' in cast (use int, float, bool, string, f32, f16, i32, i64...)",
                             e, CompileError)

        def ev_cast(f):
            v = operand(f)
            try:
                return _cast(v, tname)
            except Exception as exc:
                raise self.convert(exc, e, f"'as {tname}'") from None
        return ev_cast

    def expr_Field(self, e: ast.Field, scope: Scope):
        obj = self.compile_expr(e.obj, scope)
        name = e.name

        def ev_field(f):
            o = obj(f)
            if o.__class__ is StructValue:
                try:
                    return o.fields[name]
                except KeyError:
                    raise self.error(f"struct {o.type.name} has no field '{name}'", e) from None
            try:
                return _get_field(o, name)
            except AttributeError:
                raise self.error(f"{type_name(o)} has no field '{name}'", e) from None
            except Exception as exc:
                raise self.convert(exc, e, f".{name}") from None
        return ev_field

    def _index_part(self, part, scope: Scope):
        if isinstance(part, ast.Slice):
            start = self.compile_expr(part.start, scope) if part.start is not None else None
            stop = self.compile_expr(part.stop, scope) if part.stop is not None else None
            step = self.compile_expr(part.step, scope) if part.step is not None else None

            def ev_slice(f):
                return slice(_opt_int(start, f), _opt_int(stop, f), _opt_int(step, f))
            return ev_slice
        return self.compile_expr(part, scope)

    def expr_Index(self, e: ast.Index, scope: Scope):
        obj = self.compile_expr(e.obj, scope)
        parts = tuple(self._index_part(p, scope) for p in e.indices)
        if len(parts) == 1:
            part = parts[0]

            def ev_index1(f):
                o = obj(f)
                k = part(f)
                try:
                    return _getitem(o, (k,))
                except Exception as exc:
                    raise self.convert(exc, e, "index") from None
            return ev_index1

        def ev_index(f):
            o = obj(f)
            keys = tuple(p(f) for p in parts)
            try:
                return _getitem(o, keys)
            except Exception as exc:
                raise self.convert(exc, e, "index") from None
        return ev_index

    def expr_IfExpr(self, e: ast.IfExpr, scope: Scope):
        stmt = ast.IfStmt(e.line, e.column, e.branches, e.else_block)
        run = self.stmt_IfStmt(stmt, scope, tail=True)

        def ev_if(f):
            sig = run(f)
            if sig is None:
                return None
            if sig.__class__ is Val:
                return sig.value
            if sig.__class__ is Ret:
                raise _NonLocalReturn(sig.value)
            raise self.error(f"'{sig.name}' cannot leave an 'if' used as a value", e)
        return ev_if

    def expr_Query(self, e: ast.Query, scope: Scope):
        return self._query(e, scope, print_answers=False)

    def expr_IndexedTensor(self, e, scope):
        raise self.error("index notation like W[i, j] X[j] is only allowed in a tensor equation "
                         "('Y[i] = W[i, j] X[j]')", e, CompileError)

    expr_JuxtProduct = expr_IndexedTensor

    # ------------------------------------------------------------ calls

    def _args(self, args, scope):
        return tuple(self.compile_expr(a, scope) for a in args)

    def expr_Call(self, e: ast.Call, scope: Scope):
        func = e.func
        args = self._args(e.args, scope)
        interp = self.interp
        if isinstance(func, ast.Name):
            name = func.id
            if scope.lookup(name) is None and name not in interp.global_names:
                if name in interp.functions:
                    return self._user_call(interp.functions[name], args, e, scope)
                if name in interp.structs:
                    raise self.error(f"'{name}' is a struct; build it with {name} {{ field: value }}", e,
                                     CompileError)
                if interp.is_relation(name):
                    raise self.error(f"'{name}' is a relation: assert a fact as a statement or ask '{name}(...)?'",
                                     e, CompileError)
                b = registry.BUILTINS.get(name)
                if b is not None:
                    return self._builtin_call(b, args, e)
                return self._late_call(name, args, e, scope)
        if isinstance(func, ast.Path):
            resolve = self._resolve_path(func)
            if len(func.parts) == 2:
                st = interp.structs.get(func.parts[0])
                if st is not None and func.parts[1] in st.methods:
                    return self._user_call(st.methods[func.parts[1]], args, e, scope)
            b = registry.BUILTINS.get("::".join(func.parts))
            if b is not None:
                return self._builtin_call(b, args, e)

            def ev_path_call(f):
                target = resolve()
                return self._call_value(target, [a(f) for a in args], e, scope.fn.name)
            return ev_path_call
        callee = self.compile_expr(func, scope)
        fn_name = scope.fn.name

        def ev_dynamic_call(f):
            target = callee(f)
            return self._call_value(target, [a(f) for a in args], e, fn_name)
        return ev_dynamic_call

    def _late_call(self, name, args, e, scope):
        """A call to a name unknown at compile time (defined later in the REPL, or a global value)."""
        interp = self.interp
        fn_name = scope.fn.name
        interp.unresolved_calls.append((name, self.span(e)))

        def ev_late_call(f):
            target = interp.globals.get(name, UNSET)
            if target is UNSET:
                target = interp.functions.get(name)
                if target is None:
                    b = registry.BUILTINS.get(name)
                    if b is None:
                        raise self.error(f"undefined function '{name}'", e)
                    target = BuiltinValue(b)
            return self._call_value(target, [a(f) for a in args], e, fn_name)
        return ev_late_call

    def _call_value(self, target, argv: list, e, caller: str):
        cls = target.__class__
        if cls is FunctionValue:
            return self._invoke(target, argv, e, caller)
        if cls is BoundMethod:
            return self._invoke(target.function, [target.receiver] + argv, e, caller)
        if cls is BuiltinValue:
            return self._invoke_builtin(target.builtin, argv, e)
        raise self.error(f"{type_name(target)} is not a function", e)

    def _invoke(self, fv: FunctionValue, argv: list, e, caller: str):
        interp = self.interp
        if interp.depth >= MAX_CALL_DEPTH:
            raise self.error(f"maximum call depth ({MAX_CALL_DEPTH}) exceeded in '{fv.qualified_name}' "
                             "(a function calls itself without end?)", e)
        interp.depth += 1
        try:
            return fv.impl(argv)
        except TLError as err:
            self._add_trace(err, fv, e, caller)
            raise
        except _NonLocalReturn:
            raise
        except Exception as exc:
            err = self.convert(exc, e, fv.qualified_name)
            raise err from None
        finally:
            interp.depth -= 1

    def _add_trace(self, err: TLError, fv: FunctionValue, e, caller: str):
        call_span = self.span(e)
        if err.span is None:
            err.span = call_span
        elif not err.trace and err.span != call_span:
            err.trace.append((f"in {fv.qualified_name}", err.span))
        err.trace.append((f"in {caller}, calling {fv.qualified_name}", call_span))

    def _user_call(self, fv: FunctionValue, args, e, scope: Scope):
        caller = scope.fn.name
        nparams = len(fv.decl.params) - (1 if fv.is_method and fv.owner is not None and isinstance(
            e.func, ast.Name) else 0)
        if len(args) != nparams:
            self.interp.static_errors.append(self.error(
                f"{fv.qualified_name} takes {nparams} argument{'s' if nparams != 1 else ''}, got {len(args)}", e))
        invoke = self._invoke
        n = len(args)
        if n == 0:
            return lambda f: invoke(fv, [], e, caller)
        if n == 1:
            a0 = args[0]
            return lambda f: invoke(fv, [a0(f)], e, caller)
        if n == 2:
            a0, a1 = args
            return lambda f: invoke(fv, [a0(f), a1(f)], e, caller)
        return lambda f: invoke(fv, [a(f) for a in args], e, caller)

    def _invoke_builtin(self, b: registry.Builtin, argv: list, e):
        n = len(argv)
        if n < b.min_args or (b.max_args is not None and n > b.max_args):
            raise self.error(_arity_message(b, n), e)
        try:
            if b.needs_ctx:
                return b.fn(self.interp.ctx, *argv)
            return b.fn(*argv)
        except Exception as exc:
            raise self.convert(exc, e, b.name) from None

    def _builtin_call(self, b: registry.Builtin, args, e):
        n = len(args)
        fn = b.fn
        if n < b.min_args or (b.max_args is not None and n > b.max_args):
            msg = _arity_message(b, n)
            self.interp.static_errors.append(self.error(msg, e))

            def ev_bad_arity(f):
                raise self.error(msg, e)
            return ev_bad_arity
        convert = self.convert
        name = b.name
        if b.needs_ctx:
            ctx = self.interp.ctx
            if n == 1:
                a0 = args[0]

                def ev_ctx1(f):
                    try:
                        return fn(ctx, a0(f))
                    except Exception as exc:
                        raise convert(exc, e, name) from None
                return ev_ctx1

            def ev_ctx(f):
                argv = [a(f) for a in args]
                try:
                    return fn(ctx, *argv)
                except Exception as exc:
                    raise convert(exc, e, name) from None
            return ev_ctx
        if n == 0:
            def ev0(f):
                try:
                    return fn()
                except Exception as exc:
                    raise convert(exc, e, name) from None
            return ev0
        if n == 1:
            a0 = args[0]

            def ev1(f):
                x = a0(f)
                try:
                    return fn(x)
                except Exception as exc:
                    raise convert(exc, e, name) from None
            return ev1
        if n == 2:
            a0, a1 = args

            def ev2(f):
                x = a0(f)
                y = a1(f)
                try:
                    return fn(x, y)
                except Exception as exc:
                    raise convert(exc, e, name) from None
            return ev2
        if n == 3:
            a0, a1, a2 = args

            def ev3(f):
                x = a0(f)
                y = a1(f)
                z = a2(f)
                try:
                    return fn(x, y, z)
                except Exception as exc:
                    raise convert(exc, e, name) from None
            return ev3

        def evn(f):
            argv = [a(f) for a in args]
            try:
                return fn(*argv)
            except Exception as exc:
                raise convert(exc, e, name) from None
        return evn

    def expr_MethodCall(self, e: ast.MethodCall, scope: Scope):
        receiver = self.compile_expr(e.receiver, scope)
        args = self._args(e.args, scope)
        name = e.method
        caller = scope.fn.name

        def ev_method(f):
            r = receiver(f)
            argv = [a(f) for a in args]
            cls = r.__class__
            if cls is StructValue:
                m = r.type.methods.get(name)
                if m is None:
                    field = r.fields.get(name)
                    if field is not None and field.__class__ in (FunctionValue, BuiltinValue, BoundMethod):
                        return self._call_value(field, argv, e, caller)
                    raise self.error(f"struct {r.type.name} has no method '{name}'", e)
                if m.is_method:
                    return self._invoke(m, [r] + argv, e, caller)
                return self._invoke(m, argv, e, caller)
            call_method = getattr(r, "tl_call_method", None)
            if call_method is not None:
                try:
                    return call_method(name, argv)
                except AttributeError:
                    pass
                except Exception as exc:
                    raise self.convert(exc, e, f"{type_name(r)}.{name}") from None
            b = registry.BUILTINS.get(name)
            if b is None:
                raise self.error(f"{type_name(r)} has no method '{name}'", e)
            return self._invoke_builtin(b, [r] + argv, e)
        return ev_method

    # ------------------------------------------------------------ types

    def type_checker(self, typ: ast.TypeRef, what: str):
        """A function `check(value, named_dims) -> value` for a declared type, or None (no check)."""
        name = typ.name
        if typ.dims is not None:
            dims = typ.dims

            def check_tensor(v, named):
                if v.__class__ is list:
                    v = core.from_numpy(list_to_numpy(v))
                if not isinstance(v, Tensor):
                    raise TLRuntimeError(f"{what} expects {_type_text(typ)}, got {type_name(v)}")
                shape = v.shape
                if len(shape) != len(dims):
                    raise TLRuntimeError(f"{what} expects {_type_text(typ)} (rank {len(dims)}), "
                                         f"got tensor {list(shape)} (rank {len(shape)})")
                for d, s in zip(dims, shape):
                    if d is None:
                        continue
                    if d.__class__ is int:
                        if d != s:
                            raise TLRuntimeError(f"{what} expects {_type_text(typ)}, got tensor {list(shape)}")
                    else:
                        seen = named.get(d)
                        if seen is None:
                            named[d] = s
                        elif seen != s:
                            raise TLRuntimeError(f"{what} expects {_type_text(typ)} with {d} = {seen} "
                                                 f"(from an earlier argument), got tensor {list(shape)}")
                return v
            return check_tensor
        if name in _SCALAR_INT_TYPES:
            def check_int(v, named):
                if v.__class__ is int:
                    return v
                if isinstance(v, float) and v == int(v) or isinstance(v, Tensor) and v.numel == 1:
                    return to_int(v)
                if isinstance(v, bool):
                    return int(v)
                raise TLRuntimeError(f"{what} expects an int, got {type_name(v)}")
            return check_int
        if name in _SCALAR_FLOAT_TYPES:
            def check_float(v, named):
                if v.__class__ is float or isinstance(v, Tensor):
                    return v
                if isinstance(v, int) and not isinstance(v, bool):
                    return float(v)
                raise TLRuntimeError(f"{what} expects a float, got {type_name(v)}")
            return check_float
        if name == "bool":
            def check_bool(v, named):
                if isinstance(v, bool) or isinstance(v, Tensor):
                    return v
                raise TLRuntimeError(f"{what} expects a bool, got {type_name(v)}")
            return check_bool
        if name in ("string", "str", "String"):
            def check_str(v, named):
                if isinstance(v, str):
                    return v
                raise TLRuntimeError(f"{what} expects a string, got {type_name(v)}")
            return check_str
        if name in ("Tensor", "tensor"):
            def check_any_tensor(v, named):
                if v.__class__ is list:
                    return core.from_numpy(list_to_numpy(v))
                if isinstance(v, Tensor):
                    return v
                raise TLRuntimeError(f"{what} expects a tensor, got {type_name(v)}")
            return check_any_tensor
        interp = self.interp

        def check_struct(v, named):
            st = interp.structs.get(name)
            if st is None:
                return v  # generic parameter or host type: not checked
            if v.__class__ is StructValue and v.type is st:
                return v
            raise TLRuntimeError(f"{what} expects a {name}, got {type_name(v)}")
        if name in interp.structs:
            return check_struct
        return None

    # ------------------------------------------------------------ functions

    def compile_function(self, fv: FunctionValue, decl: ast.FnDecl):
        info = FunctionScopeInfo(fv.qualified_name)
        root = Scope(None, info)
        params = decl.params
        checks = []
        for p in params:
            root.declare(p.name)
            if p.type is not None:
                checks.append(self.type_checker(p.type, f"{fv.qualified_name}: parameter '{p.name}'"))
            else:
                checks.append(None)
        body = self.compile_block(decl.body, root, tail=True, new_scope=False)
        nparams = len(params)
        nslots_ref = info
        has_checks = any(c is not None for c in checks)
        checks_t = tuple(checks)
        param_list = ", ".join(p.name for p in params)
        qname = fv.qualified_name

        padding = [UNSET] * (nslots_ref.nslots - nparams)  # the body is compiled: its slot count is final

        def impl(argv):
            if len(argv) != nparams:
                raise TLRuntimeError(f"{qname}({param_list}) takes {nparams} argument{'s' if nparams != 1 else ''}, "
                                     f"got {len(argv)}")
            frame = argv + padding
            if has_checks:
                named: dict = {}
                for i, c in enumerate(checks_t):
                    if c is not None:
                        frame[i] = c(frame[i], named)
            try:
                sig = body(frame)
            except _NonLocalReturn as r:
                return r.value
            if sig is None:
                return None
            cls = sig.__class__
            if cls is Ret or cls is Val:
                return sig.value
            return None
        fv.impl = impl


def _truth_at(v, compiler: Compiler, node) -> bool:
    try:
        return to_bool(v)
    except BuiltinArgError as e:
        raise compiler.error(str(e), node) from None


def _opt_int(ev, f):
    if ev is None:
        return None
    v = ev(f)
    if v.__class__ is int:
        return v
    return to_int(v, "slice bound")


def _iterate(v):
    if isinstance(v, (list, range, str, tuple)):
        return list(v) if isinstance(v, list) else v
    if isinstance(v, Tensor):
        if v.ndim == 0:
            raise BuiltinArgError("cannot iterate over a 0-d tensor")
        return (v[i] for i in range(v.shape[0]))
    it = getattr(v, "tl_iter", None)
    if it is not None:
        return it()
    if isinstance(v, int):
        raise BuiltinArgError(f"cannot iterate over int {v} (use range({v}))")
    raise BuiltinArgError(f"cannot iterate over {type_name(v)}")


def _getitem(o, keys: tuple):
    if isinstance(o, Tensor):
        k = tuple(_index_key(x) for x in keys)
        return o[k[0]] if len(k) == 1 else o[k]
    if isinstance(o, (list, str, range, tuple)):
        v = o
        for x in keys:
            if isinstance(v, Tensor):
                return _getitem(v, (x,))
            if not isinstance(v, (list, str, range, tuple)):
                raise BuiltinArgError(f"cannot index {type_name(v)}")
            k = _index_key(x)
            if k.__class__ is int and not -len(v) <= k < len(v):
                raise BuiltinArgError(f"index {k} is out of range for {type_name(v)} of length {len(v)}")
            v = v[k]
            if isinstance(v, range):
                v = list(v)
        return v
    if len(keys) == 1 and isinstance(keys[0], str):
        key = keys[0]
        if o.__class__ is StructValue:
            if key in o.fields:
                return o.fields[key]
            raise BuiltinArgError(f"struct {o.type.name} has no field '{key}'")
        if isinstance(o, dict):
            if key in o:
                return o[key]
            raise BuiltinArgError(f"no key '{key}'")
        try:
            return _get_field(o, key)
        except AttributeError:
            raise BuiltinArgError(f"{type_name(o)} has no entry '{key}'") from None
    index = getattr(o, "tl_index", None)
    if index is not None:
        v = o
        for x in keys:
            v = v.tl_index(x) if hasattr(v, "tl_index") else _getitem(v, (x,))
        return v
    raise BuiltinArgError(f"cannot index {type_name(o)}")


def _get_field(o, name: str):
    getter = getattr(o, "tl_get_field", None)
    if getter is not None:
        return getter(name)
    if isinstance(o, Tensor):
        if name == "shape":
            return list(o.shape)
        if name == "dtype":
            return o.dtype
        if name == "ndim":
            return o.ndim
        if name == "numel":
            return o.numel
    if isinstance(o, dict):
        if name in o:
            return o[name]
    raise AttributeError(name)


def _cast(v, tname: str):
    if tname in ("string", "str", "String"):
        return format_value(v)
    if isinstance(v, Tensor):
        return v.astype(_CAST_DTYPES[tname])
    if v.__class__ is list:
        return core.from_numpy(list_to_numpy(v)).astype(_CAST_DTYPES[tname])
    if tname in _SCALAR_INT_TYPES:
        if isinstance(v, str):
            try:
                return int(v.strip())
            except ValueError:
                raise BuiltinArgError(f"cannot convert string {v!r} to int") from None
        if isinstance(v, float):
            if not math.isfinite(v):
                raise BuiltinArgError(f"cannot convert {v} to int")
        return int(v)
    if tname in _SCALAR_FLOAT_TYPES:
        if isinstance(v, str):
            try:
                return float(v.strip())
            except ValueError:
                raise BuiltinArgError(f"cannot convert string {v!r} to float") from None
        return float(v)
    if tname == "bool":
        if isinstance(v, str):
            raise BuiltinArgError("cannot convert a string to bool")
        return bool(v)
    dtype_of(tname)
    return v


def _arity_message(b: registry.Builtin, n: int) -> str:
    if b.max_args is None:
        want = f"at least {b.min_args}"
    elif b.min_args == b.max_args:
        want = str(b.min_args)
    else:
        want = f"{b.min_args} to {b.max_args}"
    return f"{b.name} takes {want} argument{'s' if want != '1' else ''}, got {n} (usage: {b.signature})"


def _type_text(typ: ast.TypeRef) -> str:
    if typ.dims is None:
        return typ.name
    dims = ", ".join("?" if d is None else str(d) for d in typ.dims)
    return f"{typ.name}[{dims}]"


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
