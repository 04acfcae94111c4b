"""Compiling statements and blocks into closures `ex(frame) -> signal` (see control.py).

Invariants: block exit clears the slots the block declared, so a finished block holds no values;
`x = e` on an undeclared name declares it for the rest of the function (reads before the first
assignment are errors, not UNSET leaks); assignment targets (index, field) go through the value
semantics of builtins/operators.py.
"""
from __future__ import annotations

from ..builtins import dtypes, operators, registry, symbolic
from ..builtins.convert import type_name
from ..lang import ast
from ..lang.errors import TLWarning
from .control import BREAK, CONTINUE, CompileError, Ret, Val
from .scope import Scope
from . import static_dtypes
from .type_check import type_checker
from .values import UNSET, StructValue


class StatementCompiler:
    """The statement half of the Compiler (compiler.py mixes the halves together)."""

    def compile_block(self, block: ast.Block, scope: Scope, tail: bool = False, new_scope: bool = True):
        inner = scope.child() if new_scope else scope
        stmts = [s for s in block.stmts]
        closures = []
        for i, stmt in enumerate(stmts):
            is_tail = tail and i == len(stmts) - 1
            try:
                closures.append(self.compile_stmt(stmt, inner, is_tail))
            except CompileError as e:
                if not self.interp.collect_errors:
                    raise
                self.interp.static_errors.append(e)  # `tl check`: note it and check the rest
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
        if tail and isinstance(stmt, (ast.ExprStmt, ast.IfStmt, ast.BlockStmt)):
            return method(stmt, scope, tail=True)
        return method(stmt, scope)

    def _store(self, name: str, scope: Scope, node, declare: bool, warn_undeclared: bool = True):
        """A closure `store(frame, value)` binding `name` (a `let` when declare=True). `x = e` on a
        name no `let` declared declares it (as the earlier TL did); `tl check` warns about it."""
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
            if slot is None and name not in interp.global_names and warn_undeclared:
                interp.warnings.append(TLWarning(
                    f"'{name} = ...' assigns a name that no 'let' declared, which declares it here (a typo "
                    f"of another name?); write 'let {name} = ...' to declare it", self.span(node)))
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
            self.check_declared_type(stmt.type, scope.fn.generics)
            value = self._checked(value, stmt.type, f"let {stmt.name}", stmt)
            self._check_let_dtype(stmt, scope)
        store = self._store(stmt.name, scope, stmt, declare=True)
        slot = getattr(store, "slot", None)
        if slot is not None:
            def ex_let(f):
                f[slot] = value(f)
            return ex_let

        def ex_let_global(f):
            store(f, value(f))
        return ex_let_global

    def _check_let_dtype(self, stmt: ast.Let, scope: Scope) -> None:
        """`tl check`: `let x: T[...] = e` where e's element type is certainly not T
        (static_dtypes.py); a declared let the function never reassigns is known from here on."""
        want = static_dtypes.declared_dtype(stmt.type)
        if want is None:
            return
        info = scope.fn
        if info.reassigned is not None and stmt.name not in info.reassigned:
            info.static_dtypes[stmt.name] = want
        if not self.interp.collect_errors:
            return
        have = static_dtypes.static_dtype(stmt.value, info.static_dtypes, self.interp.functions)
        if static_dtypes.mismatch(want, have):
            self.interp.static_errors.append(self.error(
                f"let {stmt.name} is declared {stmt.type.name}[...] ({dtypes.KIND[want]} elements) but the "
                f"value is a tensor of {have} (convert it with `as {stmt.type.name}`)", stmt))

    def _checked(self, value, typ: ast.TypeRef, what: str, node):
        check = type_checker(typ, what, self.interp.structs)
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

    def _one_factor_equation(self, stmt: ast.Assign, scope: Scope):
        """`T[j, i] = A[i, j]` (a transpose) or `S[i] = A[i, j]` (a sum) as a tensor equation: when
        T is not a variable yet and every index on both sides is a name that is not a variable."""
        target, value = stmt.target, stmt.value
        if stmt.op is not None or not isinstance(target, ast.Index) or not isinstance(target.obj, ast.Name):
            return None
        if not isinstance(value, ast.Index) or not isinstance(value.obj, ast.Name):
            return None

        def free(name: str) -> bool:
            return scope.lookup(name) is None and name not in self.interp.global_names

        indices = list(target.indices) + list(value.indices)
        if not free(target.obj.id) or not all(isinstance(i, ast.Name) and free(i.id) for i in indices):
            return None
        return ast.TensorEquation(stmt.line, stmt.column, target.obj.id, tuple(i.id for i in target.indices),
                                  value)

    def stmt_Assign(self, stmt: ast.Assign, scope: Scope):
        equation = self._one_factor_equation(stmt, scope)
        if equation is not None:
            return self.stmt_TensorEquation(equation, scope)
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
                    return operators.binary(op, a, b)
                except TypeError:  # as for `a op b`: operands the operator does not take
                    raise self.error(f"cannot apply '{op}=' to {type_name(a)} and {type_name(b)}",
                                     node) from None
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
                mirror = None
                if symbolic.current() is not None and not operators.is_tensor(container):
                    symbolic.abandon("it assigns into an array (host state a replay would not update)")
                    mirror = symbolic.note_mutation(container, "an array")
                try:
                    operators.set_item(container, key, v)
                    if mirror is not None:  # the body's copy of an argument: the caller's changes too
                        operators.set_item(mirror[0], [mirror[1](k) for k in key], mirror[1](v))
                except Exception as e:
                    raise self.convert(e, target, "index assignment") from None
            return ex_setitem
        if isinstance(target, ast.Field):
            obj = self.compile_expr(target.obj, scope)
            name = target.name

            def ex_setfield(f):
                o = obj(f)
                v = value(f)
                if symbolic.current() is not None:
                    symbolic.abandon(f"it assigns the field '{name}' (host state a replay would not update)")
                if o.__class__ is StructValue:
                    if name not in o.fields:
                        raise self.error(f"struct {o.type.name} has no field '{name}'", target)
                    o.fields[name] = v
                    mirror = symbolic.note_mutation(o, "a struct") if symbolic.current() is not None else None
                    if mirror is not None:  # the body's copy of an argument: the caller's changes too
                        mirror[0].fields[name] = mirror[1](v)
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
                if c is True or (c is not False and self.truth_at(c, stmt)):
                    return body(f)
                if else_body is not None:
                    return else_body(f)
                return None
            return ex_if
        pairs = tuple(zip(conds, bodies))

        def ex_if_chain(f):
            for cond, body in pairs:
                c = cond(f)
                if c is True or (c is not False and self.truth_at(c, stmt)):
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
                if not (c is True or (c is not False and self.truth_at(c, stmt))):
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
                items = operators.iterate(it)
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

    def stmt_BlockStmt(self, stmt: ast.BlockStmt, scope: Scope, tail: bool = False):
        return self.compile_block(stmt.body, scope, tail=tail)

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
        self.check_declared_type(stmt.type, scope.fn.generics)
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
