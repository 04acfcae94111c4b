"""Files a program reads and writes: text (`read_text`, `write_text`), tensors as `.npy` (NumPy's
format) and `.safetensors` (`save`, `load`); the formats themselves are in tensor_formats.py.

Invariants: paths are relative to the working directory; only regular files are read or replaced (a
device, FIFO or socket is refused before any read, so /dev/zero or a FIFO cannot exhaust memory or
block); a file is written completely or an error says why (a failed write leaves no half-written
file at the path); every problem, a malformed file included, is one BuiltinArgError line with the path.
"""
from __future__ import annotations

import os
import stat

import numpy as np

from . import tensor_formats as formats
from .convert import BuiltinArgError, Tensor, core, to_str, to_tensor, type_name
from .dtypes import dtype_of
from .registry import builtin

C = "files"


def _path(path) -> str:
    return os.path.expanduser(to_str(path, "path"))


def _not_regular(path: str, mode: int) -> BuiltinArgError:
    what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    return BuiltinArgError(f"{path} is {what}, not a regular file")


def _write_atomically(path: str, write) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None   # no file there yet (or unreachable: the write below says why)
    if mode is not None and not stat.S_ISREG(mode):
        # os.replace would put a regular file in place of the device or FIFO itself.
        raise _not_regular(path, mode)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise BuiltinArgError(f"cannot write {path}: {e.strerror or e}") from None


def _read_bytes(path: str) -> bytes:
    """The whole regular file at path. Opened non-blocking, so a FIFO with no writer opens at once
    and is refused by the fstat check, never waited on; a device is refused before its first read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise BuiltinArgError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError as e:
        raise BuiltinArgError(f"cannot read {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)


@builtin("read_text", "read_text(path)", "the whole text file at path (UTF-8) as a string", min_args=1,
         max_args=1, category=C)
def read_text(path):
    p = _path(path)
    data = _read_bytes(p)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BuiltinArgError(f"{p} is not UTF-8 text (bad byte at offset {e.start})") from None


@builtin("write_text", "write_text(path, text)", "write text (UTF-8) to path, replacing the file", min_args=2,
         max_args=2, category=C)
def write_text(path, text):
    data = to_str(text, "text").encode("utf-8")
    _write_atomically(_path(path), lambda f: f.write(data))
    return None


def _host(t) -> tuple[np.ndarray, str]:
    """A tensor's values on the host (C-ordered, 0-d kept 0-d) and its dtype; bf16 comes as f32 values."""
    if not isinstance(t, Tensor):
        t = to_tensor(t, "tensor")
    if t.dtype.startswith("q"):
        raise BuiltinArgError(f"cannot save a {t.dtype} tensor (convert it with astype(t, \"f32\") first)")
    arr = t.numpy()
    return (arr if arr.flags.c_contiguous else arr.copy(order="C")), t.dtype


def _upload(arr: np.ndarray, dtype: str, path: str):
    try:
        return core.from_numpy(arr, dtype)
    except core.TLRuntimeError as e:   # e.g. a size over TL_MAX_ALLOC_MB
        raise BuiltinArgError(f"{path}: {e}") from None


@builtin("save", "save(value, path)",
         "write a tensor to a .npy file, or a tensor or map of name -> tensor to a .safetensors file",
         min_args=2, max_args=2, category=C)
def save(value, path):
    p = _path(path)
    if p.endswith(".npy"):
        arr, dtype = _host(value)
        if dtype == "bf16":
            raise BuiltinArgError("cannot save a bf16 tensor to .npy, which has no bf16 (use .safetensors, "
                                  "or astype(t, \"f32\") first)")
        _write_atomically(p, lambda f: np.save(f, arr, allow_pickle=False))
        return None
    if not p.endswith(".safetensors"):
        raise BuiltinArgError(f"{p}: the file name must end in .npy or .safetensors")
    named = value if isinstance(value, dict) else {"tensor": value}
    host = {}
    for name, t in named.items():
        if not isinstance(name, str):
            raise BuiltinArgError(f"tensor names must be strings, got {type_name(name)}")
        host[name] = _host(t)
    try:
        pieces = formats.write_safetensors(host)
    except formats.Unsupported as e:
        raise BuiltinArgError(f"cannot save {p}: {e}") from None

    def write(f):
        for piece in pieces:
            f.write(piece)
    _write_atomically(p, write)
    return None


@builtin("load", "load(path, [floats])",
         "a tensor from a .npy file, or a map of name -> tensor from a .safetensors file; floats (\"f32\", "
         "\"f16\" or \"bf16\") rounds every float tensor to that dtype (how 64-bit float data loads)",
         min_args=1, max_args=2, category=C)
def load(path, floats=None):
    p = _path(path)
    if floats is not None:
        floats = dtype_of(floats)
        if floats not in formats.FLOAT_DTYPES:
            raise BuiltinArgError(f"floats must be a float dtype (f32, f16 or bf16), got {floats!r}")
    if not p.endswith((".npy", ".safetensors")):
        raise BuiltinArgError(f"{p}: the file name must end in .npy or .safetensors")
    npy = p.endswith(".npy")
    data = _read_bytes(p)
    try:
        if npy:
            return _upload(*formats.read_npy(data, floats), p)
        return {name: _upload(arr, dtype, p)
                for name, (arr, dtype) in formats.read_safetensors(data, floats).items()}
    except formats.NotValid as e:
        raise BuiltinArgError(f"{p} is not a valid {'.npy' if npy else '.safetensors'} file: {e}") from None
    except formats.Unsupported as e:
        raise BuiltinArgError(f"{p}: {e}") from None
