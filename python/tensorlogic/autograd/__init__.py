"""Reverse-mode autograd over the tensor runtime: the tape (`tape.py`), the backward rules
(`rules.py`), the traced `core` every builtin calls (`traced_core.py`) and the optimizers
(`optimizers.py`). TL reaches it through `builtins/learning.py` and the `learn` block."""
