"""`plot(values, path)`: a line chart of a loss curve (or several) written to a PNG with matplotlib,
an optional extra (`pip install 'tensorlogic[plot]'`).

Invariant: matplotlib is imported only when plot is called, with its non-interactive Agg backend
(no window, no display needed); without it plot is a one-line error naming the extra.
"""
from __future__ import annotations

import os

import numpy as np

from . import symbolic
from .convert import BuiltinArgError, Tensor, to_bool, to_str, type_name
from .registry import REQUIRED, bind_keywords, builtin

C = "learning"
MISSING = "plot needs matplotlib, an optional extra: pip install 'tensorlogic[plot]' (or pip install matplotlib)"


def _curve(v, what) -> np.ndarray:
    if isinstance(v, Tensor):
        arr = v.numpy().astype(np.float64)
    elif isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        arr = np.array(v, dtype=np.float64)
    elif isinstance(v, list) and all(isinstance(x, Tensor) and x.numel == 1 for x in v):
        arr = np.array([float(x.item()) for x in v], dtype=np.float64)
    else:
        raise BuiltinArgError(f"{what} must be a list of numbers or a 1-D tensor, got {type_name(v)}")
    if arr.ndim != 1 or arr.size == 0:
        raise BuiltinArgError(f"{what} must be a non-empty 1-D list or tensor, got shape {list(arr.shape)}")
    return arr


@builtin("plot", "plot(values, path, [title], [xlabel], [ylabel], [log_y])",
         "write a line chart of values (a list or 1-D tensor, or a map name -> values for several curves) "
         "to a PNG file (matplotlib, the 'plot' extra)", min_args=2, max_args=6, category=C)
def plot(*args):
    symbolic.abandon("it calls plot, which writes a file")
    a = bind_keywords_or_error([("values", REQUIRED), ("path", REQUIRED), ("title", ""), ("xlabel", "epoch"),
                                ("ylabel", "loss"), ("log_y", False)], args)
    path = os.path.expanduser(to_str(a["path"], "path"))
    if not path.endswith(".png"):
        raise BuiltinArgError(f"{path}: the file name must end in .png")
    values = a["values"]
    curves = {str(k): _curve(v, f"values[{k!r}]") for k, v in values.items()} if isinstance(values, dict) \
        else {"": _curve(values, "values")}
    try:
        import matplotlib  # noqa: PLC0415 - optional extra, imported when used
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise BuiltinArgError(MISSING) from None
    fig, ax = plt.subplots(figsize=(6, 4))
    try:
        for name, ys in curves.items():
            ax.plot(np.arange(len(ys)), ys, label=name or None)
        if any(curves):
            ax.legend()
        ax.set_title(to_str(a["title"], "title"))
        ax.set_xlabel(to_str(a["xlabel"], "xlabel"))
        ax.set_ylabel(to_str(a["ylabel"], "ylabel"))
        if to_bool(a["log_y"], "log_y"):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        try:
            fig.savefig(path, format="png", dpi=100)
        except OSError as e:
            raise BuiltinArgError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return None


def bind_keywords_or_error(params, args):
    try:
        return bind_keywords(params, args)
    except ValueError as e:
        raise BuiltinArgError(str(e)) from None
