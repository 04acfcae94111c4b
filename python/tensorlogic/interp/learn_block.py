"""Compiles `learn { ... }` blocks (the training loop of TL) into closures.

Form A (no `objective:`): the settings are evaluated once, `epochs` and `optimizer` are bound in the
block, the statements run once and every `backward(loss)` in them is one training step; the block's
outermost `for` loops count epochs for the learning-rate schedule. Form B (`objective: EXPR`): the
statements and the objective are evaluated once per epoch (with `epoch` bound) and the optimizer
steps after each. Invariant: the block's bindings and the optimizer state end with the block, however
it ends (`builtins.learning.running_learn_block`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..builtins import learning, operators
from ..builtins.convert import BuiltinArgError
from ..builtins.registry import KeywordArg
from ..lang import ast
from .control import CompileError
from .values import UNSET

SETTINGS = learning.LEARN_SETTINGS

LEARN_HELP = """learn { SETTINGS and STATEMENTS }   (docs/learning.md; examples/learning/)

Form A, an explicit loop; each backward(loss) is one step (gradients, clipping, update, zero):
    learn {
        optimizer: adam(lr = 0.05)
        epochs: 600
        for epoch in range(epochs) { backward(mean((matmul(X, W) - Y) ** 2)) }
    }
Form B, declarative; statements and objective evaluated once per epoch, then one step:
    learn { let p = matmul(X, W)  objective: mean((p - Y) ** 2), optimizer: sgd(lr: 0.1), epochs: 100 }

settings: optimizer (sgd/adam/adamw/rmsprop/adagrad), lr, epochs, clip_grad_norm, clip_grad_value,
accumulation_steps (a step every N backwards, on their mean gradient), scheduler (step_lr/exponential_lr/
cosine_lr/multistep_lr/linear_lr/one_cycle_lr/reduce_lr_on_plateau), objective. Inside the block `epochs`
and `optimizer` are bound, dropout(x, p) is active, set_lr(optimizer, lr) changes the rate;
`eval { }` runs validation with dropout off and nothing recorded, `no_grad { }` records nothing;
save_checkpoint(path) / load_checkpoint(path) resume training exactly. Learnables: learnable(t) or `tensor w: f32[n] learnable = ...`.
Outside learn blocks: backward(loss), grad(W), zero_grad(), detach(x), clip_grad_norm(max).
Compiled step: a `@compile fn` that calls backward(loss) inside the block records the whole step
once and replays it (examples/learning/compiled_training_step.tl); read learnables as globals.
See `tl help builtins` (category learning)."""


@dataclass(frozen=True)
class LearnEpochs(ast.Expr):
    """The iterable of a learn block's outer `for`: iterating it advances the block's epoch."""
    iterable: ast.Expr


class LearnCompiler:
    """Mixin of the Compiler: `learn { }` blocks, their epoch loops and named call arguments."""

    def expr_LearnEpochs(self, e: LearnEpochs, scope):
        inner = self.compile_expr(e.iterable, scope)

        def ev_epochs(f):
            v = inner(f)
            try:
                return learning.EpochCounter(operators.iterate(v))
            except BuiltinArgError as exc:
                raise self.convert(exc, e.iterable, "for") from None
        return ev_epochs

    def expr_NamedArg(self, e: ast.NamedArg, scope):
        value = self.compile_expr(e.value, scope)
        name = e.name

        def ev_named(f):
            return KeywordArg(name, value(f))
        return ev_named

    def stmt_ModeBlock(self, stmt: ast.ModeBlock, scope, tail: bool = False):
        """`no_grad { }` / `eval { }`: the block runs inside learning.grad_mode (restored however it ends)."""
        body = self.compile_block(stmt.body, scope, tail=tail)
        mode = stmt.mode

        def ex_mode(f):
            with learning.grad_mode(mode):
                return body(f)
        return ex_mode

    def stmt_LearnBlock(self, stmt: ast.LearnBlock, scope):
        settings: dict[str, ast.LearnSetting] = {}
        for s in stmt.settings:
            if s.name not in SETTINGS:
                raise self.error(f"unknown learn setting '{s.name}' (use {', '.join(SETTINGS)})", s, CompileError)
            if s.name in settings:
                raise self.error(f"learn setting '{s.name}' is given twice", s, CompileError)
            settings[s.name] = s
        form_b = "objective" in settings
        if form_b and "epochs" not in settings:
            raise self.error("a learn block with `objective:` needs `epochs: N`", stmt, CompileError)
        evaluators = [(name, self.compile_expr(s.value, scope)) for name, s in settings.items() if name != "objective"]
        block_scope = scope.child()
        epochs_slot = block_scope.declare("epochs") if "epochs" in settings else None
        opt_slot = block_scope.declare("optimizer")
        if form_b:
            epoch_scope = block_scope.child()
            epoch_slot = epoch_scope.declare("epoch")
            body = self.compile_block(stmt.body, epoch_scope, new_scope=False)
            objective_node = settings["objective"].value
            objective = self.compile_expr(objective_node, epoch_scope)
            per_epoch = tuple(epoch_scope.declared)
        else:
            stmts = tuple(ast.For(s.line, s.column, s.var, LearnEpochs(s.iterable.line, s.iterable.column, s.iterable),
                                  s.body) if isinstance(s, ast.For) else s for s in stmt.body.stmts)
            body = self.compile_block(ast.Block(stmt.line, stmt.column, stmts), block_scope, new_scope=False)
        block_slots = tuple(block_scope.declared)

        def run_epochs(f, session):
            for epoch in range(session.epochs):
                session.begin_epoch(epoch)
                f[epoch_slot] = epoch
                try:
                    sig = body(f)
                    if sig is not None:
                        return sig
                    loss = objective(f)
                    try:
                        learning.learn_step(session, loss)
                    except BuiltinArgError as exc:
                        raise self.convert(exc, objective_node, "learn") from None
                finally:
                    for slot in per_epoch:
                        f[slot] = UNSET
            return None

        def ex_learn(f):
            values = {name: ev(f) for name, ev in evaluators}
            try:
                session = learning.start_learn(values)
            except BuiltinArgError as exc:
                raise self.convert(exc, stmt, "learn") from None
            try:
                if epochs_slot is not None:
                    f[epochs_slot] = session.epochs
                f[opt_slot] = session.optimizer
                try:
                    with learning.running_learn_block(session):
                        return run_epochs(f, session) if form_b else body(f)
                except BuiltinArgError as exc:
                    raise self.convert(exc, stmt, "learn") from None
            finally:
                for slot in block_slots:
                    f[slot] = UNSET
        return ex_learn
