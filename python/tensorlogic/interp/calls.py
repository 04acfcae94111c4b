"""Compiling calls: user functions, builtins (resolved once per call site), methods of structs
and host objects, calls through values; and compiling function bodies.

Invariants: every call of a user function goes through `_invoke`, which keeps the call depth under
MAX_CALL_DEPTH and adds one trace line per TL frame to an error passing through; a builtin's
arity is checked when the call site compiles (a static error `tl check` reports) and again when run.
"""
from __future__ import annotations

from ..builtins import dtypes, operators, registry, symbolic
from ..builtins.convert import type_name
from ..lang import ast
from ..lang.errors import TLError, TLRuntimeError
from .control import MAX_CALL_DEPTH, CompileError, NonLocalReturn, Ret, Val
from .scope import FunctionScopeInfo, Scope
from . import static_dtypes
from .type_check import type_checker
from .values import UNSET, BoundMethod, BuiltinValue, FunctionValue, StructValue


class CallCompiler:
    """The call half of the Compiler (compiler.py mixes the halves together)."""

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
        """Call any function value: the one path for user functions, methods and builtins, with the
        depth limit and the error trace (`e` is None when a builtin calls back into the program)."""
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
                             "(a function calls itself without end? TL_MAX_CALL_DEPTH sets the limit)", e)
        interp.depth += 1
        try:
            return fv.impl(argv)
        except TLError as err:
            self._add_trace(err, fv, e, caller)
            raise
        except NonLocalReturn:
            raise
        except Exception as exc:
            err = self.convert(exc, e, fv.qualified_name)
            raise err from None
        finally:
            interp.depth -= 1

    def _add_trace(self, err: TLError, fv: FunctionValue, e, caller: str):
        call_span = self.span(e)
        if call_span is None:  # called back by a builtin: the builtin's call site adds its own line
            if err.span is not None and not err.trace:
                err.trace.append((f"in {fv.qualified_name}", err.span))
            return
        if err.span is None:
            err.span = call_span
        elif not err.trace and err.span != call_span:
            err.trace.append((f"in {fv.qualified_name}", err.span))
        err.trace.append((f"in {caller}, calling {fv.qualified_name}", call_span))

    def _user_call(self, fv: FunctionValue, args, e, scope: Scope):
        caller = scope.fn.name
        nparams = len(fv.decl.params) - (1 if fv.is_method and fv.owner is not None and isinstance(
            e.func, ast.Name) else 0)
        named = next((a for a in getattr(e, "args", ()) if isinstance(a, ast.NamedArg)), None)
        if named is not None:
            raise self.error(f"{fv.qualified_name} is a TL function: pass '{named.name}' by position "
                             "(named arguments are for builtins such as adam(lr = 0.01))", named, CompileError)
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
                if symbolic.current() is not None and name not in getattr(r, "tl_recordable_methods", ()):
                    symbolic.abandon(f"it calls {type_name(r)}.{name}, which a recording cannot replay")
                try:
                    return call_method(name, argv)
                except AttributeError as exc:
                    if not operators.is_missing_member(exc, name):
                        raise self.convert(exc, e, f"{type_name(r)}.{name}") from None
                except Exception as exc:
                    raise self.convert(exc, e, f"{type_name(r)}.{name}") from None
            b = registry.BUILTINS.get(name)
            if b is None:
                raise self.error(f"{type_name(r)} has no method '{name}'", e)
            return self._invoke_builtin(b, [r] + argv, e)
        return ev_method

    def _check_return_dtype(self, decl: ast.FnDecl, info, qname: str) -> None:
        """`tl check`: a declared `-> T[...]` that the function's tail value or a `return` certainly
        misses (static_dtypes.py); at run time the return check catches every case."""
        want = static_dtypes.declared_dtype(decl.return_type)
        if want is None or not self.interp.collect_errors:
            return
        values = [s.value for s in static_dtypes.returns(decl.body)]
        if decl.body.stmts and decl.body.stmts[-1].__class__ is ast.ExprStmt:
            values.append(decl.body.stmts[-1].expr)
        for v in values:
            have = static_dtypes.static_dtype(v, info.static_dtypes, self.interp.functions)
            if static_dtypes.mismatch(want, have):
                self.interp.static_errors.append(self.error(
                    f"{qname}: the return value is declared {decl.return_type.name}[...] "
                    f"({dtypes.KIND[want]} elements) but is a tensor of {have} here", v))

    def compile_function(self, fv: FunctionValue, decl: ast.FnDecl):
        info = FunctionScopeInfo(fv.qualified_name)
        info.generics = tuple(decl.generics) + tuple(fv.owner.generics if fv.owner is not None else ())
        root = Scope(None, info)
        params = decl.params
        checks = []
        info.reassigned = static_dtypes.assigned_names(decl.body)
        for p in params:
            dt = static_dtypes.declared_dtype(p.type)
            if dt is not None and p.name not in info.reassigned:
                info.static_dtypes[p.name] = dt
        for p in params:
            root.declare(p.name)
            if p.type is not None:
                self.check_declared_type(p.type, info.generics)
                checks.append(type_checker(p.type, f"{fv.qualified_name}: parameter '{p.name}'",
                                           self.interp.structs))
            else:
                checks.append(None)
        body = self.compile_block(decl.body, root, tail=True, new_scope=False)
        returns = None
        if decl.return_type is not None:
            self.check_declared_type(decl.return_type, info.generics)
            returns = type_checker(decl.return_type, f"{fv.qualified_name}: return value", self.interp.structs)
            self._check_return_dtype(decl, info, fv.qualified_name)
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
            except NonLocalReturn as r:
                sig = Ret(r.value)
            result = sig.value if sig is not None and sig.__class__ in (Ret, Val) else None
            if returns is not None and result is not None:
                result = returns(result, {})
            return result
        fv.impl = impl
        if any(a.name == "compile" for a in decl.annotations):
            from .compiled import CompiledFunction

            fv.impl = CompiledFunction(qname, impl, self.interp)



def _arity_message(b: registry.Builtin, n: int) -> str:
    if b.max_args is None:
        want = f"at least {b.min_args}"
    elif b.min_args == b.max_args:
        want = str(b.min_args)
    else:
        want = f"{b.min_args} to {b.max_args}"
    return f"{b.name} takes {want} argument{'s' if want != '1' else ''}, got {n} (usage: {b.signature})"

