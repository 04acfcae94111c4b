"""Files a program reads and writes: text (`read_text`, `write_text`), tensors as `.npy` (NumPy's
format) and `.safetensors` (`save`, `load`).

Invariants: paths are relative to the working directory; a file is written completely or an error
says why (a failed write leaves no half-written file at the path); every problem is a
BuiltinArgError with the path in it. The safetensors layout (8-byte little-endian header length,
JSON header, raw little-endian data) is written and read here with NumPy, no extra dependency.
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np

from ..models import bounded_json
from .convert import BuiltinArgError, Tensor, core, to_str, to_tensor, type_name
from .registry import builtin

C = "files"

_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_,
                       "F64": np.float64, "I16": np.int16, "I8": np.int8, "U8": np.uint8}
_DTYPE_NAMES = {np.dtype(v).str: k for k, v in _SAFETENSORS_DTYPES.items()}
_LOADABLE = {np.float32: "f32", np.float16: "f16", np.int32: "i32", np.int64: "i64", np.bool_: "bool",
             np.int16: "i16"}


def _path(path) -> str:
    return os.path.expanduser(to_str(path, "path"))


def _write_atomically(path: str, write) -> None:
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
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise BuiltinArgError(f"cannot read {path}: {e.strerror or e}") from None


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


def _host(t):
    if not isinstance(t, Tensor):
        t = to_tensor(t, "tensor")
    if t.dtype.startswith("q") or t.dtype == "bf16":
        raise BuiltinArgError(f"cannot save a {t.dtype} tensor (convert it with astype(t, \"f32\") first)")
    return np.ascontiguousarray(t.numpy())


def _tensor(arr: np.ndarray, where: str):
    for np_type, name in _LOADABLE.items():
        if arr.dtype == np_type:
            return core.from_numpy(np.ascontiguousarray(arr), name)
    if arr.dtype == np.float64:
        return core.from_numpy(np.ascontiguousarray(arr.astype(np.float32)), "f32")
    raise BuiltinArgError(f"{where}: dtype {arr.dtype} has no TL tensor type")


@builtin("save", "save(value, path)",
         "write a tensor to a .npy file, or a tensor or map of name -> tensor to a .safetensors file",
         min_args=2, max_args=2, category=C)
def save(value, path):
    p = _path(path)
    if p.endswith(".npy"):
        arr = _host(value)
        _write_atomically(p, lambda f: np.save(f, arr, allow_pickle=False))
        return None
    if not p.endswith(".safetensors"):
        raise BuiltinArgError(f"{p}: the file name must end in .npy or .safetensors")
    named = value if isinstance(value, dict) else {"tensor": value}
    header, chunks, offset = {}, [], 0
    for name, t in named.items():
        arr = _host(t)
        if not isinstance(name, str):
            raise BuiltinArgError(f"tensor names must be strings, got {type_name(name)}")
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPE_NAMES[arr.dtype.str.replace(">", "<")], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)

    def write(f):
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)
    _write_atomically(p, write)
    return None


@builtin("load", "load(path)", "a tensor from a .npy file, or a map of name -> tensor from a .safetensors file",
         min_args=1, max_args=1, category=C)
def load(path):
    p = _path(path)
    if p.endswith(".npy"):
        try:
            arr = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise BuiltinArgError(f"cannot read {p}: {e}") from None
        return _tensor(arr, p)
    if not p.endswith(".safetensors"):
        raise BuiltinArgError(f"{p}: the file name must end in .npy or .safetensors")
    data = _read_bytes(p)
    try:
        (size,) = struct.unpack("<Q", data[:8])
        header = bounded_json.loads(data[8:8 + size].decode("utf-8"))
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            dtype = np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<")
            arr = np.frombuffer(data[8 + size + start:8 + size + end], dtype=dtype).reshape(info["shape"])
            out[name] = _tensor(arr.astype(arr.dtype.newbyteorder("=")), p)
        return out
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise BuiltinArgError(f"{p} is not a valid safetensors file ({type(e).__name__}: {e})") from None
