"""TL builtins, one module per topic; importing this package registers all of them in
`registry.BUILTINS`. This layer is the only one that talks to the native runtime (through
`core.py`); the interpreter above it calls builtins and the value semantics in `operators.py`.
"""
from __future__ import annotations

from . import registry  # noqa: F401
# (tokenizers and attention right after models, whose builtins they were: the table keeps its order)
from . import (assertions, einsum, files, kvcache, learning, logic, math_ops, memory, models,  # noqa: F401
               tokenizers, attention, nn, sampling, sequences, strings_io, tensors, losses, checkpoints, conv, plotting, batching)
from . import guided  # noqa: F401  (constrained and recorded sampling: json_sampler)
