"""Compiles `learn { ... }` blocks (the training loop of TL) into closures.

Form A (no `objective:`): the settings are evaluated once, `epochs` and `optimizer` are bound in the
block, the statements run once and every `backward(loss)` in them is one training step; the block's
outermost `for` loops count epochs for the learning-rate schedule. Form B (`objective: EXPR`): the
statements and the objective are evaluated once per epoch (with `epoch` bound) and the optimizer
steps after each. Invariant: the block's bindings and the optimizer state end with the block, however
it ends (`autograd.session.running`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..autograd.optimizers import SGD, LRScheduler, Optimizer
from ..autograd.session import LearnSession, current, running
from ..autograd.tape import AutogradError
from ..builtins.convert import BuiltinArgError, to_float, to_int, type_name
from ..builtins.registry import KeywordArg
from ..lang import ast
from .values import UNSET

SETTINGS = ("optimizer", "lr", "epochs", "clip_grad_norm", "scheduler", "objective")

LEARN_HELP = """learn { SETTINGS and STATEMENTS }   (docs/learning.md; examples/learning/)

Form A, an explicit loop; each backward(loss) is one step (gradients, clipping, update, zero):
    learn {
        optimizer: adam(lr = 0.05)
        epochs: 600
        for epoch in range(epochs) { backward(mean((matmul(X, W) - Y) ** 2)) }
    }
Form B, declarative; statements and objective evaluated once per epoch, then one step:
    learn { let p = matmul(X, W)  objective: mean((p - Y) ** 2), optimizer: sgd(lr: 0.1), epochs: 100 }

settings: optimizer (sgd/adam/adamw), lr, epochs, clip_grad_norm, scheduler (step_lr/exponential_lr/
cosine_lr), objective. Inside the block `epochs` and `optimizer` are bound, dropout(x, p) is active,
set_lr(optimizer, lr) changes the rate. Learnables: learnable(t) or `tensor w: f32[n] learnable = ...`.
Outside learn blocks: backward(loss), grad(W), zero_grad(), detach(x), clip_grad_norm(max).
See `tl help builtins` (category learning)."""


@dataclass(frozen=True)
class LearnEpochs(ast.Expr):
    """The iterable of a learn block's outer `for`: iterating it advances the block's epoch."""
    iterable: ast.Expr


class _EpochIterable:
    def __init__(self, items):
        self.items = items

    def tl_iter(self):
        session = current()
        for epoch, item in enumerate(self.items):
            if session is not None:
                session.begin_epoch(epoch)
            yield item


def compile_epochs(compiler, e: LearnEpochs, scope):
    from .compiler import _iterate  # noqa: PLC0415 - the for loop's own rules for what is iterable
    inner = compiler.compile_expr(e.iterable, scope)

    def ev_epochs(f):
        v = inner(f)
        try:
            return _EpochIterable(_iterate(v))
        except BuiltinArgError as exc:
            raise compiler.convert(exc, e.iterable, "for") from None
    return ev_epochs


def compile_named_arg(compiler, e: ast.NamedArg, scope):
    value = compiler.compile_expr(e.value, scope)
    name = e.name

    def ev_named(f):
        return KeywordArg(name, value(f))
    return ev_named


def _session(values: dict) -> LearnSession:
    opt = values.get("optimizer")
    if opt is None:
        if "lr" not in values:
            raise BuiltinArgError("a learn block needs `optimizer: sgd(...)/adam(...)/adamw(...)` or `lr: RATE`")
        opt = SGD(lr=_positive(values["lr"], "lr"))
    elif not isinstance(opt, Optimizer):
        raise BuiltinArgError(f"optimizer must be sgd(...), adam(...) or adamw(...), got {type_name(opt)}")
    elif "lr" in values:
        opt.lr = opt.base_lr = _positive(values["lr"], "lr")
    epochs = values.get("epochs")
    if epochs is not None:
        epochs = to_int(epochs, "epochs")
        if epochs < 0:
            raise BuiltinArgError(f"epochs must be >= 0, got {epochs}")
    clip = values.get("clip_grad_norm")
    if clip is not None:
        clip = _positive(clip, "clip_grad_norm")
    sched = values.get("scheduler")
    if sched is not None and not isinstance(sched, LRScheduler):
        raise BuiltinArgError(f"scheduler must be step_lr(...), exponential_lr(...) or cosine_lr(...), "
                              f"got {type_name(sched)}")
    opt.steps = 0
    return LearnSession(opt, epochs, clip, sched)


def _positive(v, what):
    f = to_float(v, what)
    if not f > 0:
        raise BuiltinArgError(f"{what} must be positive, got {f}")
    return f


def compile_learn_block(compiler, stmt: ast.LearnBlock, scope):
    from .compiler import CompileError  # noqa: PLC0415
    settings: dict[str, ast.LearnSetting] = {}
    for s in stmt.settings:
        if s.name not in SETTINGS:
            raise compiler.error(f"unknown learn setting '{s.name}' (use {', '.join(SETTINGS)})", s, CompileError)
        if s.name in settings:
            raise compiler.error(f"learn setting '{s.name}' is given twice", s, CompileError)
        settings[s.name] = s
    form_b = "objective" in settings
    if form_b and "epochs" not in settings:
        raise compiler.error("a learn block with `objective:` needs `epochs: N`", stmt, CompileError)
    evaluators = [(name, s, compiler.compile_expr(s.value, scope)) for name, s in settings.items()
                  if name != "objective"]
    block_scope = scope.child()
    epochs_slot = block_scope.declare("epochs") if "epochs" in settings else None
    opt_slot = block_scope.declare("optimizer")
    if form_b:
        epoch_scope = block_scope.child()
        epoch_slot = epoch_scope.declare("epoch")
        body = compiler.compile_block(stmt.body, epoch_scope, new_scope=False)
        objective_node = settings["objective"].value
        objective = compiler.compile_expr(objective_node, epoch_scope)
        per_epoch = tuple(epoch_scope.declared)
    else:
        stmts = tuple(ast.For(s.line, s.column, s.var, LearnEpochs(s.iterable.line, s.iterable.column, s.iterable),
                              s.body) if isinstance(s, ast.For) else s for s in stmt.body.stmts)
        body = compiler.compile_block(ast.Block(stmt.line, stmt.column, stmts), block_scope, new_scope=False)
    block_slots = tuple(block_scope.declared)

    def ex_learn(f):
        values = {}
        for name, node, ev in evaluators:
            values[name] = ev(f)
        try:
            session = _session(values)
        except BuiltinArgError as exc:
            raise compiler.convert(exc, stmt, "learn") from None
        try:
            if epochs_slot is not None:
                f[epochs_slot] = session.epochs
            f[opt_slot] = session.optimizer
            try:
                with running(session):
                    if not form_b:
                        return body(f)
                    for epoch in range(session.epochs):
                        session.begin_epoch(epoch)
                        f[epoch_slot] = epoch
                        try:
                            sig = body(f)
                            if sig is not None:
                                return sig
                            loss = objective(f)
                            session.step(loss)
                        finally:
                            for slot in per_epoch:
                                f[slot] = UNSET
                    return None
            except AutogradError as exc:
                raise compiler.convert(exc, objective_node if form_b else stmt, "learn") from None
        finally:
            for slot in block_slots:
                f[slot] = UNSET
    return ex_learn
