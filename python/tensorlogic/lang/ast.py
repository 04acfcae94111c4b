"""AST of TL programs: frozen dataclasses, one per construct in grammar.lark.

Invariant: every node carries the 1-based `line` and `column` of its first token (and the file it
came from lives on the `Program`), so every later error can point at source. Nodes are immutable;
the interpreter compiles them once into closures and never mutates them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass(frozen=True)
class Node:
    line: int
    column: int


# ---------------------------------------------------------------- types

@dataclass(frozen=True)
class TypeRef(Node):
    """`int`, `Block`, `Box<T>`, `float16[?, 576]`. `dims` is None for non-tensor types; a dim is an
    int (fixed), a str (named) or None (`?`)."""
    name: str
    args: tuple["TypeRef", ...] = ()
    dims: Optional[tuple[Union[int, str, None], ...]] = None


# ---------------------------------------------------------------- expressions

@dataclass(frozen=True)
class Expr(Node):
    pass


@dataclass(frozen=True)
class NamedArg(Expr):
    """`name = value` (or `name: value`) as a call argument: `adam(lr = 0.01)`."""
    name: str
    value: Expr


@dataclass(frozen=True)
class IntLit(Expr):
    value: int


@dataclass(frozen=True)
class FloatLit(Expr):
    value: float


@dataclass(frozen=True)
class StringLit(Expr):
    value: str


@dataclass(frozen=True)
class BoolLit(Expr):
    value: bool


@dataclass(frozen=True)
class Name(Expr):
    id: str


@dataclass(frozen=True)
class Path(Expr):
    """`Type::member` (associated function, typed constructor such as `f32::zeros`)."""
    parts: tuple[str, ...]


@dataclass(frozen=True)
class ArrayLit(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class StructLit(Expr):
    type_name: str
    fields: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class BinOp(Expr):
    op: str  # one of + - * / % @ ⊙ ** == != < <= > >= && ||
    left: Expr
    right: Expr


@dataclass(frozen=True)
class UnaryOp(Expr):
    op: str  # "-" or "!"
    operand: Expr


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    type_name: str


@dataclass(frozen=True)
class Call(Expr):
    func: Expr
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class MethodCall(Expr):
    receiver: Expr
    method: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Field(Expr):
    obj: Expr
    name: str


@dataclass(frozen=True)
class Slice(Node):
    start: Optional[Expr]
    stop: Optional[Expr]
    step: Optional[Expr]


@dataclass(frozen=True)
class Index(Expr):
    obj: Expr
    indices: tuple[Union[Expr, Slice], ...]


@dataclass(frozen=True)
class IfExpr(Expr):
    """`if` used as a value (`let y = if c { a } else { b }`); same shape as IfStmt."""
    branches: tuple[tuple[Expr, "Block"], ...]
    else_block: Optional["Block"]


# ---------------------------------------------------------------- logic (Tensor Logic proper)

@dataclass(frozen=True)
class Atom(Node):
    """`Parent(X, alice)`: a relation applied to terms. A term is a Name (a logic variable or a
    symbolic constant, the logic engine decides) or any other expression (evaluated to a value)."""
    relation: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class IndexedTensor(Expr):
    """`W[i, j]` inside a tensor equation: a tensor named with index variables."""
    name: str
    indices: tuple[str, ...]


@dataclass(frozen=True)
class JuxtProduct(Expr):
    """`W[i, j] X[j]`: product of indexed tensors, summing repeated indices (einsum)."""
    factors: tuple[Expr, ...]


@dataclass(frozen=True)
class Query(Expr):
    """`Ancestor(X, dave)?` — prints and returns the answers."""
    atom: Atom


# ---------------------------------------------------------------- statements

@dataclass(frozen=True)
class Stmt(Node):
    pass


@dataclass(frozen=True)
class Block(Node):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class Let(Stmt):
    name: str
    type: Optional[TypeRef]
    value: Expr


@dataclass(frozen=True)
class Assign(Stmt):
    """`target = value` or `target op= value`; target is a Name, Index or Field."""
    target: Expr
    op: Optional[str]  # None for `=`, else "+", "-", "*", "/"
    value: Expr


@dataclass(frozen=True)
class ExprStmt(Stmt):
    expr: Expr


@dataclass(frozen=True)
class IfStmt(Stmt):
    branches: tuple[tuple[Expr, Block], ...]
    else_block: Optional[Block]


@dataclass(frozen=True)
class While(Stmt):
    cond: Expr
    body: Block


@dataclass(frozen=True)
class Loop(Stmt):
    body: Block


@dataclass(frozen=True)
class BlockStmt(Stmt):
    """`{ ... }` standing as a statement: a scope of its own."""
    body: Block


@dataclass(frozen=True)
class For(Stmt):
    var: str
    iterable: Expr
    body: Block


@dataclass(frozen=True)
class Break(Stmt):
    pass


@dataclass(frozen=True)
class Continue(Stmt):
    pass


@dataclass(frozen=True)
class Return(Stmt):
    value: Optional[Expr]


@dataclass(frozen=True)
class TensorDecl(Stmt):
    name: str
    type: TypeRef
    mode: Optional[str]  # "learnable", "frozen" or None
    value: Optional[Expr]


@dataclass(frozen=True)
class Annotation(Node):
    name: str  # without the "@"
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class BodyLiteral(Node):
    """One conjunct of a rule body: an atom (possibly negated) or a comparison/expression."""
    negated: bool
    atom: Optional[Atom]
    expr: Optional[Expr]  # set when the conjunct is not an atom (e.g. `X != Y`)


@dataclass(frozen=True)
class Rule(Stmt):
    head: Atom
    body: tuple[BodyLiteral, ...]
    annotations: tuple[Annotation, ...]


@dataclass(frozen=True)
class Fact(Stmt):
    """`Parent(alice, bob)` (weight None) or `Parent(alice, bob) = 0.9`."""
    atom: Atom
    weight: Optional[Expr]


@dataclass(frozen=True)
class LearnSetting(Node):
    """`name: value` inside a learn block (optimizer, lr, epochs, objective, clip_grad_norm, scheduler)."""
    name: str
    value: Expr


@dataclass(frozen=True)
class LearnBlock(Stmt):
    """`learn { settings and statements }`: form A when there is no `objective`, else form B."""
    settings: tuple[LearnSetting, ...]
    body: Block


@dataclass(frozen=True)
class ModeBlock(BlockStmt):
    """`no_grad { ... }` or `eval { ... }` (mode "no_grad" / "eval"): a scope run with gradient
    recording off (and, for eval, training behaviour off); walkers treat it as the BlockStmt it is."""
    mode: str = "no_grad"


@dataclass(frozen=True)
class TensorEquation(Stmt):
    """`Y[i] = W[i, j] X[j]`: defines tensor `name` over `indices` (index notation)."""
    name: str
    indices: tuple[str, ...]
    value: Expr


# ---------------------------------------------------------------- declarations

@dataclass(frozen=True)
class Param(Node):
    name: str
    type: Optional[TypeRef]


@dataclass(frozen=True)
class FnDecl(Node):
    name: str
    generics: tuple[str, ...]
    params: tuple[Param, ...]
    return_type: Optional[TypeRef]
    body: Block
    annotations: tuple["Annotation", ...] = ()  # `@compile`


@dataclass(frozen=True)
class StructField(Node):
    name: str
    type: TypeRef


@dataclass(frozen=True)
class StructDecl(Node):
    name: str
    generics: tuple[str, ...]
    fields: tuple[StructField, ...]


@dataclass(frozen=True)
class ImplDecl(Node):
    type_name: str
    methods: tuple[FnDecl, ...]


@dataclass(frozen=True)
class Import(Node):
    path: str


@dataclass(frozen=True)
class MainBlock(Node):
    body: Block


@dataclass(frozen=True)
class TestBlock(Node):
    name: str
    body: Block


@dataclass(frozen=True)
class BenchBlock(Node):
    name: str
    body: Block


@dataclass(frozen=True)
class RelationDecl(Node):
    name: str
    params: tuple[tuple[str, Optional[str]], ...]  # (argument name, entity type or None)


@dataclass(frozen=True)
class EntityDecl(Node):
    name: str
    members: tuple[str, ...]


Item = Union[FnDecl, StructDecl, ImplDecl, Import, MainBlock, TestBlock, BenchBlock, RelationDecl,
             EntityDecl, Stmt]


@dataclass(frozen=True)
class Program:
    """A parsed file: its items in source order, the file name and the source (for error carets)."""
    items: tuple[Item, ...]
    filename: str
    source: str = field(repr=False, default="")
