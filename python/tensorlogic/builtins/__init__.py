"""TL builtins, one module per topic; importing this package registers all of them in
`registry.BUILTINS`. Modules owned by other parts of the project (models, logic) are loaded when
present, so the language works before they exist.
"""
from __future__ import annotations

import importlib

from . import registry  # noqa: F401
from . import (assertions, einsum, kvcache, learning, math_ops, memory, nn, sampling,  # noqa: F401
               sequences, strings_io, tensors)

OPTIONAL_MODULES = ("tensorlogic.builtins.models", "tensorlogic.logic.builtins")
OPTIONAL_LOAD_ERRORS: dict[str, str] = {}

for _name in OPTIONAL_MODULES:
    try:
        importlib.import_module(_name)
    except ImportError as _err:  # not in this build: its builtins are absent (`tl help` says why)
        OPTIONAL_LOAD_ERRORS[_name] = str(_err)
