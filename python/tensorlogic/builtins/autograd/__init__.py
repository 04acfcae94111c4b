"""Reverse-mode autograd over the tensor runtime: the tape (`tape.py`), the backward rules
(`rules.py`), the taping of builtins/core.py's `core` (`traced_core.py`), the optimizers and
schedules (`optimizers.py`) and a running learn block (`session.py`). TL reaches it through
builtins/learning.py; the interpreter's learn block calls only that module."""
