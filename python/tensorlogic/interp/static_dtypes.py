"""Element types `tl check` knows without running: a declared `let x: i32[2] = ones([2])` or a
`-> int32[?]` function whose result is `x * 2.5` is reported before the program runs (issue 21);
the run-time check (type_check.py) catches every case, this one only those it can be sure of.

Invariant: `static_dtype` returns a runtime dtype only when every run of the expression has it
(a creator without a dtype argument is f32, `as T` is T, a parameter or `let` declared `T[...]`
that the function never reassigns is T, arithmetic follows the runtime's promotion: an int tensor
with a float number is f32, with an int number keeps its type); anything else is None (unknown),
so a program the checker passes is never one it wrongly refuses.
"""
from __future__ import annotations

import dataclasses

from ..builtins import dtypes
from ..lang import ast

_F32_CREATORS = frozenset({"zeros", "ones", "eye"})  # f32 unless a dtype argument says otherwise
_ALWAYS_F32 = frozenset({"rand", "randn", "linspace"})
_ARITH = frozenset({"+", "-", "*"})


def assigned_names(node) -> set[str]:
    """The names `x = ...` / `x op= ...` assigns anywhere under `node` (their type may change)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Assign) and isinstance(n.target, ast.Name):
            found.add(n.target.id)
        if dataclasses.is_dataclass(n):
            for f in dataclasses.fields(n):
                stack.append(getattr(n, f.name))
        elif isinstance(n, (tuple, list)):
            stack.extend(n)
    return found


def returns(node) -> list:
    """The `return e` statements under `node` (with a value)."""
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return) and n.value is not None:
            found.append(n)
        if dataclasses.is_dataclass(n):
            for f in dataclasses.fields(n):
                stack.append(getattr(n, f.name))
        elif isinstance(n, (tuple, list)):
            stack.extend(n)
    return found


def declared_dtype(typ: ast.TypeRef | None) -> str | None:
    """The runtime dtype a declared tensor type names (`i32[2]` -> "i32"), else None."""
    if typ is None or typ.dims is None:
        return None
    return dtypes.DTYPES.get(typ.name)


def static_dtype(e, known: dict[str, str], functions=()):
    """The element type of expression `e` on every run, "int"/"float" for a number literal, or None.
    `known`: the names whose tensor type is certain (declared, never reassigned); `functions`: the
    program's own functions (one may shadow a builtin's name)."""
    cls = e.__class__
    if cls is ast.FloatLit:
        return "float"
    if cls is ast.IntLit:
        return "int"
    if cls is ast.Name:
        return known.get(e.id)
    if cls is ast.Cast:
        return dtypes.DTYPES.get(e.type_name)
    if cls is ast.Call and e.func.__class__ is ast.Name and e.func.id not in known \
            and e.func.id not in functions:
        name, args = e.func.id, e.args
        if any(a.__class__ is ast.NamedArg for a in args):
            return None
        if name in _ALWAYS_F32:
            return "f32"
        if name in _F32_CREATORS:
            extra = 1 if name != "eye" else (2 if len(args) == 3 else 1)
            if len(args) == extra:
                return "f32"
            if len(args) == extra + 1 and args[-1].__class__ is ast.StringLit:
                return dtypes.DTYPES.get(args[-1].value)
        return None
    if cls is ast.BinOp and e.op in _ARITH:
        left, right = static_dtype(e.left, known, functions), static_dtype(e.right, known, functions)
        if left is None or right is None:
            return None
        if left in ("int", "float") and right in ("int", "float"):
            return None  # a number, not a tensor
        tensor, other = (left, right) if left not in ("int", "float") else (right, left)
        if dtypes.KIND.get(tensor) == "bool":
            return None
        if other == "int" or other == tensor:
            return tensor
        if other == "float":
            return tensor if dtypes.KIND.get(tensor) == "float" else "f32"
        return None
    return None


def mismatch(want: str, have: str | None) -> bool:
    """Whether a value of static type `have` certainly fails a slot declared with dtype `want` (the
    run-time check compares kinds: float, int, bool)."""
    return have is not None and have not in ("int", "float") and dtypes.KIND[have] != dtypes.KIND[want]
