"""Reverse-mode autograd over the tensor runtime: the tape (`tape.py`, one per run, held in the run's
state: builtins/run_state.py), the backward rules (`rules.py`), the table of what each op does with a
gradient (`optable.py`, from which builtins/core.py's `core` wraps the differentiable ops), the
compositions standing for fused ops without a backward kernel (`traced_core.py`), the optimizers and
schedules (`optimizers.py`) and a running learn block (`session.py`). TL reaches it through
builtins/learning.py; the interpreter's learn block calls only that module."""
