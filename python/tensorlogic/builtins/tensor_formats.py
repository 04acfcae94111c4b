"""The two tensor file formats TL reads and writes, as bytes: NumPy's `.npy` (format versions 1.0, 2.0,
3.0) and Hugging Face's `.safetensors`. Readers return C-ordered, native-endian NumPy arrays in a
dtype TL has, each with the TL dtype name to upload it as.

Invariants: a reader checks every size a header claims against the bytes present before it slices,
and either returns arrays equal to the file's values (a dtype TL lacks is widened losslessly:
int8/uint8/int16/uint16 -> i32, uint32 -> i64; floats are rounded only to a float dtype the caller
names) or raises NotValid (the bytes break the format) or Unsupported (a valid file holding a dtype
TL cannot represent without loss, such as float64); nothing here opens files or touches the runtime.
A 0-d array stays 0-d both ways.
"""
from __future__ import annotations

import ast
import json
import math
import struct
from typing import Any

import numpy as np

from ..models import bounded_json


class NotValid(Exception):
    """The bytes break the file format; the message is the reason, one line."""


class Unsupported(Exception):
    """A valid file whose data TL cannot hold without changing it; the message says what and why."""


# ----------------------------------------------------------------------------- shared by both formats

# The runtime's kMaxDims (cpp/runtime/kernels.h); tests/builtins/test_tensor_files.py keeps them equal.
MAX_RANK = 8


_FLOAT64_ADVICE = ("TL tensors have no 64-bit floats and load never narrows silently: "
                   "load(path, \"f32\") narrows it, or save it as float32")
FLOAT_DTYPES = ("f32", "f16", "bf16")


def to_tl(arr: np.ndarray, where: str, floats: str | None = None) -> tuple[np.ndarray, str]:
    """`arr` (any byte order, any layout) as a C-ordered native array in a dtype TL has, and that dtype's
    TL name; every conversion is exact, except that `floats` (one of FLOAT_DTYPES), when given, is
    the dtype every float array becomes (the caller asked to round; bf16 arrives as f32 values)."""
    if arr.dtype.byteorder not in "=|":   # stored big-endian on a little-endian host (or the reverse)
        arr = arr.astype(arr.dtype.newbyteorder("="))
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if kind == "f" and floats is not None:
        with np.errstate(over="ignore"):   # values beyond the dtype's range round to inf, as in NumPy
            return arr.astype(np.float16 if floats == "f16" else np.float32, order="C"), floats
    if kind == "f" and size == 4:
        return _c_order(arr), "f32"
    if kind == "f" and size == 2:
        return _c_order(arr), "f16"
    if kind == "f" and size == 8:
        raise Unsupported(f"{where} holds float64 data; {_FLOAT64_ADVICE}")
    if kind == "b":
        return _c_order(arr.view(np.uint8) != 0), "bool"   # any nonzero byte is true, as NumPy reads it
    if kind in "iu" and size <= 2:
        return arr.astype(np.int32, order="C"), "i32"
    if kind == "i" and size == 4:
        return _c_order(arr), "i32"
    if kind == "i" and size == 8:
        return _c_order(arr), "i64"
    if kind == "u" and size == 8 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise Unsupported(f"{where} holds uint64 values above 2^63-1, which no TL integer type holds")
    if kind == "u":
        return arr.astype(np.int64, order="C"), "i64"
    raise Unsupported(f"{where} has dtype {arr.dtype} (TL loads float32, float16, bool and 8- to 64-bit integers)")


def _c_order(arr: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _check_shape(shape, where: str) -> None:
    """A shape whose data size already matched the bytes present, checked for what a tensor can be."""
    if len(shape) > MAX_RANK:
        raise Unsupported(f"{where} has {len(shape)} dimensions; TL tensors have at most {MAX_RANK}")
    # (0, 2**62) is 0 bytes, but NumPy and the runtime need its strides in 64 bits, at the widest
    # element a conversion can make (8 bytes: uint32 -> i64).
    if math.prod(n for n in shape if n) * 8 > np.iinfo(np.int64).max:
        raise Unsupported(f"{where} has shape {_fmt(shape)}, too large for a tensor")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- .npy

NPY_MAGIC = b"\x93NUMPY"
# NumPy's own reader refuses longer headers by default (np.load's max_header_size); a real header
# (dtype, order, shape of at most 8 dims) is under 200 bytes.
NPY_MAX_HEADER = 10000


def read_npy(data: bytes | memoryview, floats: str | None = None) -> tuple[np.ndarray, str]:
    """The array a `.npy` file holds, as `to_tl` gives it."""
    data = memoryview(data)
    if len(data) == 0:
        raise NotValid("the file is empty")
    if len(data) < 6 or bytes(data[:6]) != NPY_MAGIC:
        raise NotValid("it does not start with the .npy magic \\x93NUMPY")
    if len(data) < 8:
        raise NotValid(f"only {len(data)} bytes, too short for the format version")
    version = (data[6], data[7])
    if version == (1, 0):
        start, length_format, encoding = 10, "<H", "latin1"
    elif version in ((2, 0), (3, 0)):
        start, length_format, encoding = 12, "<I", "latin1" if version == (2, 0) else "utf-8"
    else:
        raise NotValid(f"format version {version[0]}.{version[1]} (NumPy writes 1.0, 2.0 and 3.0)")
    if len(data) < start:
        raise NotValid(f"only {len(data)} bytes, too short for the header length")
    (hlen,) = struct.unpack(length_format, data[8:start])
    if hlen > NPY_MAX_HEADER:
        raise NotValid(f"a header of {hlen} bytes (more than {NPY_MAX_HEADER})")
    if start + hlen > len(data):
        raise NotValid(f"the file ends inside the header ({hlen} bytes claimed, {len(data) - start} present)")
    try:
        text = bytes(data[start:start + hlen]).decode(encoding)
    except UnicodeDecodeError as e:
        raise NotValid(f"the header is not {encoding} text (bad byte at offset {start + e.start})") from None
    dtype, fortran, shape = _npy_header(text)
    body = len(data) - start - hlen
    need = math.prod(shape) * dtype.itemsize
    if body < need:
        raise NotValid(f"the data is truncated (shape {_fmt(shape)} of {dtype} needs {need} bytes, "
                       f"the file has {body})")
    if body > need:
        raise NotValid(f"{body - need} bytes follow the data (shape {_fmt(shape)} of {dtype} is {need} bytes)")
    _check_shape(shape, "the array")
    arr = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=start + hlen)
    return to_tl(arr.reshape(shape, order="F" if fortran else "C"), "the array", floats)


def _npy_header(text: str) -> tuple[np.dtype, bool, tuple[int, ...]]:
    try:
        # A Python literal, as NumPy writes and reads it; literal_eval runs no code, and the parser
        # refuses nesting deeper than ~200, so a hostile header cannot recurse far.
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise NotValid("the header is not a Python dict literal") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise NotValid("the header is not a dict of exactly 'descr', 'fortran_order' and 'shape'")
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if not isinstance(fortran, bool):
        raise NotValid(f"'fortran_order' is {_short(fortran)}, not True or False")
    if not isinstance(shape, tuple) or not all(_is_int(n) and n >= 0 for n in shape):
        raise NotValid(f"'shape' is {_short(shape)}, not a tuple of non-negative integers")
    if not isinstance(descr, str):
        raise Unsupported(f"the array has a structured dtype {_short(descr)} (TL loads plain numeric arrays)")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError, SyntaxError):
        raise NotValid(f"'descr' {_short(descr)} is no NumPy dtype") from None
    if dtype.hasobject:
        raise Unsupported("the array holds Python objects (pickled), which load never reads")
    if dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in "biuf":
        raise Unsupported(f"the array has dtype {dtype.name} ({_short(descr)}; TL loads float32, float16, bool and "
                          "8- to 64-bit integers)")
    return dtype, fortran, shape


# ----------------------------------------------------------------------------- .safetensors

# name -> NumPy dtype of the stored bytes (little-endian); BF16 is read as its raw 16 bits.
_ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
              "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "|b1"}
# Valid in the format, but TL has no type that holds them exactly: refused with a reason.
_ST_REFUSED = ("F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64")
_TL_TO_ST = {"f32": "F32", "f16": "F16", "bf16": "BF16", "i32": "I32", "i64": "I64", "bool": "BOOL"}
# The format's own limit on the header (the reference implementation's MAX_HEADER_SIZE).
ST_MAX_HEADER = 100_000_000
ST_METADATA = "__metadata__"


def parse_header_json(text: str) -> Any:
    """The JSON value of a safetensors header; NotValid for text that is not JSON or repeats a key.
    The one place the header is parsed; depth-bounded, so a deeply nested header is an error, not a crash."""
    def no_repeats(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise NotValid(f"the header names {_short(key)} twice")
            seen[key] = value
        return seen
    try:
        return bounded_json.loads(text, object_pairs_hook=no_repeats)
    except ValueError as e:   # json.JSONDecodeError, and ints longer than Python's digit limit
        raise NotValid(f"the header is not JSON ({str(e).splitlines()[0]})") from None


def read_safetensors(data: bytes | memoryview, floats: str | None = None) -> dict[str, tuple[np.ndarray, str]]:
    """name -> (array, TL dtype) for every tensor in a `.safetensors` file, in header order, as `to_tl`
    gives them."""
    data = memoryview(data)
    if len(data) == 0:
        raise NotValid("the file is empty")
    if len(data) < 8:
        raise NotValid(f"only {len(data)} bytes (the header length alone takes 8)")
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8:
        raise NotValid(f"the header length {hlen} runs past the end of the file ({len(data) - 8} bytes follow it)")
    if hlen > ST_MAX_HEADER:
        raise NotValid(f"a header of {hlen} bytes (the format allows {ST_MAX_HEADER})")
    try:
        text = bytes(data[8:8 + hlen]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotValid(f"the header is not UTF-8 (bad byte at offset {8 + e.start})") from None
    header = parse_header_json(text) if text.startswith("{") else None   # the format: it starts with {
    if not isinstance(header, dict):
        raise NotValid("the header is not a JSON object")
    buffer = data[8 + hlen:]
    entries = []   # (begin, end, name, dtype, shape) in header order
    for name, info in header.items():
        if name == ST_METADATA:
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise NotValid(f"{ST_METADATA!r} is not a map of strings to strings")
            continue
        entries.append(_st_entry(name, info, len(buffer)))
    # The reference implementation's rule: sorted by offset, the tensors tile the data exactly.
    pos, previous = 0, None
    for begin, end, name, _, _ in sorted(entries, key=lambda e: (e[0], e[1])):
        if begin < pos:
            raise NotValid(f"tensors {_short(previous)} and {_short(name)} overlap (bytes {begin}..{pos} of the data)")
        if begin > pos:
            raise NotValid(f"bytes {pos}..{begin} of the data belong to no tensor (before {_short(name)})")
        pos, previous = end, name
    if pos != len(buffer):
        raise NotValid(f"{len(buffer) - pos} bytes follow the last tensor's data")
    out = {}
    for begin, end, name, st_dtype, shape in entries:
        where = f"tensor {_short(name)}"
        stored = np.dtype(_ST_DTYPES[st_dtype])
        arr = np.frombuffer(buffer, dtype=stored, count=math.prod(shape), offset=begin).reshape(shape)
        if st_dtype == "BF16":   # bf16 is the high half of an f32: the f32 values upload as bf16 exactly
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
            out[name] = (arr, "bf16") if floats is None else to_tl(arr, where, floats)
        else:
            out[name] = to_tl(arr, where, floats)
    return out


def _st_entry(name: str, info: Any, buffer_len: int) -> tuple:
    where = f"tensor {_short(name)}"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:   # JSON's \ud800 escapes can spell a lone surrogate; the format is UTF-8
        raise NotValid(f"{where} is not valid Unicode (a lone surrogate)") from None
    if not isinstance(info, dict):
        raise NotValid(f"{where} is not a JSON object")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
    if missing:
        raise NotValid(f"{where} has no {' or '.join(repr(k) for k in missing)}")
    st_dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(st_dtype, str) or (st_dtype not in _ST_DTYPES and st_dtype not in _ST_REFUSED):
        raise NotValid(f"{where} has unknown dtype {_short(st_dtype)}")
    if not isinstance(shape, list) or not all(_is_int(n) and n >= 0 for n in shape):
        raise NotValid(f"{where} has shape {_short(shape)}, not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(n) for n in offsets)):
        raise NotValid(f"{where} has data_offsets {_short(offsets)}, not a list of two integers")
    begin, end = offsets
    if not 0 <= begin <= end <= buffer_len:
        raise NotValid(f"{where} has data_offsets [{begin}, {end}] outside the data's {buffer_len} bytes")
    if st_dtype in _ST_REFUSED:
        raise Unsupported(f"{where} holds {st_dtype} data; TL has no such type (convert it to F32, F16 or "
                          "BF16 before saving)")
    need = math.prod(shape) * np.dtype(_ST_DTYPES[st_dtype]).itemsize
    if end - begin != need:
        raise NotValid(f"{where}: shape {_fmt(shape)} of {st_dtype} is {need} bytes, "
                       f"data_offsets [{begin}, {end}] hold {end - begin}")
    _check_shape(shape, where)
    return begin, end, name, st_dtype, shape


def write_safetensors(named: dict[str, tuple[np.ndarray, str]]) -> list[bytes]:
    """The bytes of a `.safetensors` file, in pieces, for name -> (array, TL dtype) in map order; a
    bf16 tensor comes as its f32 values."""
    header, chunks, offset = {}, [], 0
    for name, (arr, tl_dtype) in named.items():
        if name == ST_METADATA:
            raise Unsupported(f"the name {ST_METADATA!r} is reserved by the safetensors format for "
                              "string metadata; rename that tensor")
        st_dtype = _TL_TO_ST[tl_dtype]
        if st_dtype == "BF16":   # the f32 values are bf16 values: their high halves are the bf16 bits
            raw = (np.asarray(arr, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            raw = np.asarray(arr, _ST_DTYPES[st_dtype]).tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)   # padded with spaces so the data starts 8-byte aligned
    return [struct.pack("<Q", len(text)), text, *chunks]


def _fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
