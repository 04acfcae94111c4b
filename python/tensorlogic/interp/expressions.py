"""Compiling expressions into closures `ev(frame) -> value`.

Invariants: names resolve at compile time to a frame slot, a global, a function, a struct, a
relation or a builtin (late names are looked up when run, for the REPL); what an operator, index,
cast or array literal does to values is builtins/operators.py's business, this file only wires
closures and turns failures into TLErrors pointing at the expression.
"""
from __future__ import annotations

from ..builtins import dtypes, operators, registry, symbolic
from ..builtins.convert import type_name
from ..lang import ast
from ..lang.errors import TLError
from .control import CompileError, NonLocalReturn, Ret, Val
from .scope import Scope
from .values import UNSET, BuiltinValue, RelationRef, StructValue


class ExpressionCompiler:
    """The expression half of the Compiler (compiler.py mixes the halves together)."""

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

        state = interp.ctx.state  # the run's state (run_state.py): this code runs only in its run

        def ev_global(f):
            v = g.get(name, UNSET)
            trace = state.trace  # symbolic.current(), read directly: every global read passes here
            if trace is not None and v is not UNSET:
                trace.global_reads[name] = v  # a compiled function's replay checks it is still v
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

    def expr_ArrayLit(self, e: ast.ArrayLit, scope: Scope, inner: bool = False):
        # Inner literals of a nested literal return plain lists; the outermost converts once.
        items = tuple(self.expr_ArrayLit(x, scope, inner=True) if x.__class__ is ast.ArrayLit
                      else self.compile_expr(x, scope) for x in e.items)
        if inner:
            return lambda f: [it(f) for it in items]

        def ev_array(f):
            vals = [it(f) for it in items]
            try:
                return operators.array_value(vals)
            except Exception as exc:
                raise self.convert(exc, e, "array literal") from None
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
            checks = field_checks.get(st)
            if checks is None:
                checks = field_checks[st] = self._field_checks(st)
            named: dict = {}
            for n, check in checks:
                try:
                    values[n] = check(values[n], named)
                except TLError as exc:
                    raise self.error(exc.message, e) from None
            return StructValue(st, {n: values[n] for n in st.field_names})
        field_checks: dict = {}  # struct type -> [(field, check)], made at the first evaluation
        return ev_struct

    def _field_checks(self, st) -> list:
        """The declared type checks of a struct's fields (generic ones aside)."""
        from .type_check import type_checker
        out = []
        for n, typ in zip(st.field_names, st.field_types):
            if typ is None or (typ.dims is None and typ.name in st.generics):
                continue
            check = type_checker(typ, f"struct {st.name}: field '{n}'", self.interp.structs)
            if check is not None:
                out.append((n, check))
        return out

    def expr_BinOp(self, e: ast.BinOp, scope: Scope):
        op = e.op
        left = self.compile_expr(e.left, scope)
        right = self.compile_expr(e.right, scope)
        if op == "&&":
            def ev_and(f):
                a = left(f)
                if not (a is True or (a is not False and self.truth_at(a, e.left))):
                    return False
                b = right(f)
                return b is True or (b is not False and self.truth_at(b, e.right))
            return ev_and
        if op == "||":
            def ev_or(f):
                a = left(f)
                if a is True or (a is not False and self.truth_at(a, e.left)):
                    return True
                b = right(f)
                return b is True or (b is not False and self.truth_at(b, e.right))
            return ev_or
        pyop = operators.PY_BINARY[op]
        opname = f"'{op}'"

        def fail(a, b, exc):
            try:
                return operators.binary(op, a, b)
            except TLError:
                raise
            except Exception as exc2:
                if isinstance(exc2, TypeError):
                    raise self.error(f"cannot apply {opname} to {type_name(a)} and {type_name(b)}", e) from None
                raise self.convert(exc2, e, opname) from None

        if op in ("+", "-", "*", "⊙", "<", "<=", ">", ">=", "==", "!=", "**", "%"):
            # Python's own operator is right for numbers, strings and tensors; lists (numeric arrays
            # act as tensors) and failures (str + int, shape errors) take the slow path.
            taped = operators.TAPED_BINARY.get(op)
            if taped is not None:
                return self._taped_binop(e, left, right, pyop, fail, taped)
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

    def _taped_binop(self, e, left, right, pyop, fail, taped: str):
        """The fast path of an arithmetic operator: Python's operator, then a tensor result is handed
        to the run's tape (operators.note, inlined: taped when an operand is tracked)."""
        tensor_cls = operators.Tensor
        state = self.interp.ctx.state  # the run's state: this code runs only in its run
        if isinstance(e.right, (ast.IntLit, ast.FloatLit)):
            const = e.right.value

            def ev_binop_const(f):
                a = left(f)
                if a.__class__ is list:
                    return fail(a, const, None)
                try:
                    out = pyop(a, const)
                except Exception as exc:
                    return fail(a, const, exc)
                if out.__class__ is tensor_cls:
                    tape = state.tape
                    if tape is not None:
                        tape.note(taped, (a, const), {}, out)
                return out
            return ev_binop_const

        def ev_binop(f):
            a = left(f)
            b = right(f)
            if a.__class__ is list or b.__class__ is list:
                return fail(a, b, None)
            try:
                out = pyop(a, b)
            except Exception as exc:
                return fail(a, b, exc)
            if out.__class__ is tensor_cls:
                tape = state.tape
                if tape is not None:
                    tape.note(taped, (a, b), {}, out)
            return out
        return ev_binop

    def expr_UnaryOp(self, e: ast.UnaryOp, scope: Scope):
        operand = self.compile_expr(e.operand, scope)
        if e.op == "-":
            def ev_neg(f):
                v = operand(f)
                try:
                    return operators.negate(v)
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
            if operators.is_elementwise_not(v):
                try:
                    return operators.logical_not(v)
                except Exception as exc:
                    raise self.convert(exc, e, "'!'") from None
            return not self.truth_at(v, e)
        return ev_not

    def expr_Cast(self, e: ast.Cast, scope: Scope):
        operand = self.compile_expr(e.operand, scope)
        tname = e.type_name
        if not operators.is_cast_type(tname):
            raise self.error(f"unknown type '{tname}' in cast ({dtypes.explain(tname)}, or string)", e,
                             CompileError)

        def ev_cast(f):
            v = operand(f)
            try:
                return operators.cast(v, tname)
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
            if symbolic.current() is not None and name in getattr(o, "tl_volatile_fields", ()):
                symbolic.abandon(f"it reads {type_name(o)}.{name}, which changes between calls")
            try:
                return operators.get_field(o, name)
            except AttributeError as exc:
                if not operators.is_missing_member(exc, name):
                    raise self.convert(exc, e, f".{name}") from None
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
                    return operators.get_item(o, (k,))
                except Exception as exc:
                    raise self.convert(exc, e, "index") from None
            return ev_index1

        def ev_index(f):
            o = obj(f)
            keys = tuple(p(f) for p in parts)
            try:
                return operators.get_item(o, keys)
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
                raise NonLocalReturn(sig.value)
            raise self.error(f"'{sig.name}' cannot leave an 'if' used as a value", e)
        return ev_if

    def expr_IndexedTensor(self, e, scope):
        raise self.error("index notation like W[i, j] X[j] is only allowed in a tensor equation "
                         "('Y[i] = W[i, j] X[j]')", e, CompileError)

    expr_JuxtProduct = expr_IndexedTensor


def _opt_int(ev, f):
    if ev is None:
        return None
    return operators.slice_bound(ev(f))
