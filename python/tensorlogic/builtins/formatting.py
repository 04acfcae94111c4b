"""How TL values print: `print`, `str`, `{}` placeholders and the REPL all go through here.

Invariant: formatting never changes a value and never raises for any TL value (unknown host objects
print as `<type>`); floats print like Python (`0.1`, `1e-05`, `nan`, `inf`) and
f32 scalars (0-d tensors) with the shortest digits that read back as the same f32; bools as `true`/`false`.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from .convert import BuiltinArgError, Tensor, key_value, type_name

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(\d*)(:[^{}]*)?\}")


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
    if isinstance(v, range):  # its values, as the array it stands for; a long one by its bounds
        if len(v) <= 1000:
            return "[" + ", ".join(str(x) for x in v) + "]"
        return f"range({v.start}, {v.stop}" + (f", {v.step})" if v.step != 1 else ")")
    if id(v) in _open:
        return "<cycle>"
    inner_open = _open | {id(v)}
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x, True, inner_open) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{format_value(key_value(k), True)}: {format_value(x, True, inner_open)}"
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


_SPEC = re.compile(r"(?:(?P<fill>[^{}])?(?P<align>[<>^]))?(?P<sign>[+-])?(?P<zero>0)?(?P<width>\d+)?"
                   r"(?:\.(?P<precision>\d+))?(?P<type>[eExXobf])?")


def _format_with_spec(v: Any, spec: str) -> str:
    """One `{:spec}`: `?` (debug form), and `[[fill]align][sign][0][width][.precision][type]` with type
    e E (scientific), x X o b (integers in base 16, 8, 2), f (fixed); a precision alone means fixed
    decimals (`{:.3}`). Tensors and numeric arrays format each element."""
    if spec in ("", ":"):
        return format_value(v)
    if spec == ":?":
        return format_value(v, True)
    m = _SPEC.fullmatch(spec[1:])
    if m is None:
        raise BuiltinArgError(f"unknown format spec '{{{spec}}}' (like {{}}, {{:?}}, {{:.3}}, {{:8}}, {{:<8}}, "
                              f"{{:08.3}}, {{:e}}, {{:x}})")
    g = m.groupdict()
    typ = g["type"] or ""
    precision = f".{g['precision']}" if g["precision"] is not None else ""
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return "[" + ", ".join(_format_number(x, g, typ, precision, spec) for x in v) + "]"
    if isinstance(v, Tensor):
        arr = v.numpy()
        if arr.ndim == 0:
            return _format_number(arr.item(), g, typ, precision, spec)
        kind = "int" if arr.dtype.kind in "iu" else "float_kind"
        one = lambda x: _format_number(x.item(), g, typ, precision, spec)  # noqa: E731
        if not g["width"] and arr.size <= 1000:  # columns line up as NumPy prints: "[ 3.00, -1.00]"
            width = max((len(one(x)) for x in arr.flat), default=0)
            return np.array2string(arr, separator=", ", threshold=1000, max_line_width=100,
                                   formatter={kind: lambda x: one(x).rjust(width)})
        return np.array2string(arr, separator=", ", threshold=1000, max_line_width=100, formatter={kind: one})
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _format_number(v, g, typ, precision, spec)
    if typ:
        raise BuiltinArgError(f"format spec '{{{spec}}}' needs a number, got {type_name(v)}")
    text = format_value(v)
    if g["precision"] is not None:
        text = text[:int(g["precision"])]
    return format(text, f"{g['fill'] or ''}{g['align'] or '<'}{g['width'] or ''}")


def _format_number(x, g: dict, typ: str, precision: str, spec: str) -> str:
    if typ in ("x", "X", "o", "b"):
        if isinstance(x, float):
            if x != int(x):
                raise BuiltinArgError(f"format spec '{{{spec}}}' needs an integer, got {x!r}")
            x = int(x)
        precision = ""
    elif isinstance(x, int) and (precision or typ in ("e", "E", "f")):
        x = float(x)
    if isinstance(x, float) and not typ and precision:
        typ = "f"
    head = f"{g['fill'] or ''}{g['align'] or ''}{g['sign'] or ''}{g['zero'] or ''}{g['width'] or ''}"
    if isinstance(x, float) and not typ and not precision:
        return format(_format_float(x), f"{g['fill'] or ''}{g['align'] or '>'}{g['width'] or ''}")
    return format(x, f"{head}{precision}{typ}")


def format_template(template: str, args: list) -> str:
    """Fill `{}` placeholders left to right; `{{`/`}}` are literal braces. Arguments beyond the
    placeholders are appended, separated by spaces; missing ones are an error."""
    out: list[str] = []
    pos = 0
    used = 0
    positional = False
    for m in _PLACEHOLDER.finditer(template):
        out.append(template[pos:m.start()])
        pos = m.end()
        tok = m.group(0)
        if tok == "{{":
            out.append("{")
        elif tok == "}}":
            out.append("}")
        elif m.group(1):  # `{0}`, `{1:.2}`: an argument by position
            index = int(m.group(1))
            if index >= len(args):
                raise BuiltinArgError(f"format string refers to value {index}, but there are {len(args)}")
            out.append(_format_with_spec(args[index], m.group(2) or ""))
            positional = True
        else:
            if used >= len(args):
                raise BuiltinArgError(f"format string has more {{}} placeholders than values ({len(args)})")
            out.append(_format_with_spec(args[used], m.group(2) or ""))
            used += 1
    out.append(template[pos:])
    text = "".join(out)
    if used < len(args) and not positional:
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
