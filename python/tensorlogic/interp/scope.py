"""Compile-time scopes: each `let`, parameter and loop variable gets a numbered slot in its
function's frame (a Python list), so running code never looks names up in dictionaries.

Invariants: a slot belongs to exactly one lexical scope; leaving a block clears the slots it
declared (so a tensor is released when its last binding goes out of scope); names declared at the
top level of a program live in the interpreter's globals dict, not in slots.
"""
from __future__ import annotations


class FunctionScopeInfo:
    """Per-function (or per main/test/bench block, or top-level code) compile state."""

    def __init__(self, name: str):
        self.name = name
        self.nslots = 0
        self.loop_depth = 0
        self.generics: tuple[str, ...] = ()  # type parameters in scope (`fn f<T>`, `impl Box<T>`)
        self.maybe_unset: set[int] = set()  # slots declared by assignment (may be read before set)
        # names whose tensor element type is certain in this function (static_dtypes.py): declared
        # parameters and lets it never reassigns; and the names it reassigns anywhere
        self.static_dtypes: dict[str, str] = {}
        self.reassigned: set[str] | None = None  # None: not computed (top-level code): trust no let

    def new_slot(self) -> int:
        slot = self.nslots
        self.nslots += 1
        return slot


class Scope:
    """One lexical block. `is_global` marks the program's top level, whose names are globals."""

    def __init__(self, parent: "Scope | None", fn: FunctionScopeInfo, is_global: bool = False):
        self.parent = parent
        self.fn = fn
        self.is_global = is_global
        self.names: dict[str, int] = {}
        self.declared: list[int] = []  # slots to clear when the block ends

    def child(self) -> "Scope":
        return Scope(self, self.fn)

    def lookup(self, name: str) -> int | None:
        """The slot of `name` in this function's scopes (None: not a local)."""
        scope: Scope | None = self
        while scope is not None and scope.fn is self.fn:
            slot = scope.names.get(name)
            if slot is not None:
                return slot
            scope = scope.parent
        return None

    def declare(self, name: str) -> int:
        slot = self.names.get(name)
        if slot is None:  # shadowing in the same block reuses the slot: the old value is dropped
            slot = self.fn.new_slot()
            self.names[name] = slot
            self.declared.append(slot)
        return slot

    def function_root(self) -> "Scope":
        scope = self
        while scope.parent is not None and scope.parent.fn is self.fn:
            scope = scope.parent
        return scope

    def reaches_global(self) -> bool:
        scope: Scope | None = self
        while scope is not None:
            if scope.is_global:
                return True
            scope = scope.parent
        return False
