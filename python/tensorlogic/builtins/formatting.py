"""How TL values print: `print`, `str`, `{}` placeholders and the REPL all go through here.

Invariant: formatting never changes a value and never raises for any TL value (unknown host objects
print as `<type>`); floats print like Python (`0.1`, `1e-05`, `nan`, `inf`) and
f32 scalars (0-d tensors) with the shortest digits that read back as the same f32; bools as `true`/`false`.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from .convert import BuiltinArgError, Tensor

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(:[^{}]*)?\}")


def _format_float(x: float) -> str:
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def format_tensor(t: Any) -> str:
    if t.dtype.startswith("q"):  # quantized weights: the raw blocks mean nothing printed
        return f"<tensor {list(t.shape)} {t.dtype}>"
    arr = t.numpy()
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    if arr.ndim == 0:
        if arr.dtype == np.float32:  # the shortest text that reads back as this f32, as tensors print
            return _format_float(float(str(arr[()])))
        return format_value(arr.item())
    if arr.dtype == np.bool_:
        body = np.array2string(arr, separator=", ", threshold=1000,
                               formatter={"bool": lambda b: "true" if b else "false"})
    else:
        body = np.array2string(arr, separator=", ", threshold=1000, max_line_width=100)
    return body


def format_value(v: Any, nested: bool = False, _open: frozenset = frozenset()) -> str:
    """The text of a TL value. `_open` holds the containers being printed around this one, so a
    value that contains itself prints `<cycle>` there instead of recursing without end."""
    if isinstance(v, str):
        return repr_string(v) if nested else v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _format_float(v)
    if v is None:
        return "()"
    if isinstance(v, Tensor):
        return format_tensor(v)
    if isinstance(v, np.ndarray):
        return np.array2string(v, separator=", ", threshold=1000)
    if isinstance(v, np.generic):
        return format_value(v.item(), nested)
    if id(v) in _open:
        return "<cycle>"
    inner_open = _open | {id(v)}
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x, True, inner_open) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{format_value(k, True)}: {format_value(x, True, inner_open)}"
                               for k, x in v.items()) + "}"
    if isinstance(v, tuple):
        return "(" + ", ".join(format_value(x, True, inner_open) for x in v) + ")"
    tl_repr = getattr(v, "tl_repr", None)
    if tl_repr is not None:
        return tl_repr()
    struct_type = getattr(v, "type", None)
    if struct_type is not None and hasattr(struct_type, "field_names"):
        inner = ", ".join(f"{k}: {format_value(x, True, inner_open)}" for k, x in v.fields.items())
        return f"{struct_type.name} {{ {inner} }}"
    name = getattr(v, "tl_type_name", None) or type(v).__name__
    return f"<{name}>"


def repr_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _format_with_spec(v: Any, spec: str) -> str:
    if spec in ("", ":"):
        return format_value(v)
    if spec == ":?":
        return format_value(v, True)
    m = re.fullmatch(r":\.(\d+)f?", spec)
    if m:
        digits = int(m.group(1))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return f"{float(v):.{digits}f}"
        if isinstance(v, Tensor):
            arr = v.numpy().astype(np.float64)
            if arr.ndim == 0:
                return f"{float(arr):.{digits}f}"
            return np.array2string(arr, separator=", ", precision=digits, floatmode="fixed")
        return format_value(v)
    m = re.fullmatch(r":(>|<)?(\d+)", spec)
    if m:
        text = format_value(v)
        width = int(m.group(2))
        return text.ljust(width) if m.group(1) == "<" else text.rjust(width)
    raise BuiltinArgError(f"unknown format spec '{{{spec}}}' (use {{}}, {{:?}}, {{:.N}} or {{:N}})")


def format_template(template: str, args: list) -> str:
    """Fill `{}` placeholders left to right; `{{`/`}}` are literal braces. Arguments beyond the
    placeholders are appended, separated by spaces; missing ones are an error."""
    out: list[str] = []
    pos = 0
    used = 0
    for m in _PLACEHOLDER.finditer(template):
        out.append(template[pos:m.start()])
        pos = m.end()
        tok = m.group(0)
        if tok == "{{":
            out.append("{")
        elif tok == "}}":
            out.append("}")
        else:
            if used >= len(args):
                raise BuiltinArgError(f"format string has more {{}} placeholders than values ({len(args)})")
            out.append(_format_with_spec(args[used], m.group(1) or ""))
            used += 1
    out.append(template[pos:])
    text = "".join(out)
    if used < len(args):
        text = " ".join([text] + [format_value(a) for a in args[used:]])
    return text


def has_placeholders(template: str) -> bool:
    return any(m.group(0) not in ("{{", "}}") for m in _PLACEHOLDER.finditer(template))


def format_print_args(args: list) -> str:
    """`print("x = {}", x)` formats; `print("a", x)` joins with spaces; `print()` is empty."""
    if not args:
        return ""
    first = args[0]
    if isinstance(first, str) and len(args) > 1 and has_placeholders(first):
        return format_template(first, list(args[1:]))
    if isinstance(first, str) and len(args) == 1:
        return first
    return " ".join(format_value(a) for a in args)
