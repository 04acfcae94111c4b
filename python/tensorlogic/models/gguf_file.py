"""A validated, memory-mapped view of one GGUF file.

Every count, length, dimension and offset in the header is checked against the file's size before
anything is allocated from it, so a corrupt or truncated file fails with one `ModelError` naming
the file and the problem, never with a huge allocation, a crash or a foreign exception. The header
is parsed from a read-only mapping; tensor data is read with pread() into fresh arrays, never through
the mapping, so a file truncated while a model loads is a ModelError, not a SIGBUS from touching a
mapped page past the new end of the file. The `gguf` package supplies
the format's constants (value and quantization types, block sizes) and the test-time `dequantize`;
the header is parsed here because `gguf.GGUFReader` needs seconds for a 50k-token vocabulary.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from .errors import ModelError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_KEY_BYTES = 1 << 16
MAX_ELEMENTS = 1 << 48
MAX_ARRAY_NESTING = 8

# Tensor types the runtime keeps on the device as they are stored (names match `_core` dtypes).
SUPPORTED_TENSOR_TYPES: dict[GGMLQuantizationType, str] = {
    GGMLQuantizationType.F32: "f32",
    GGMLQuantizationType.F16: "f16",
    GGMLQuantizationType.BF16: "bf16",
    GGMLQuantizationType.Q4_0: "q4_0",
    GGMLQuantizationType.Q4_1: "q4_1",
    GGMLQuantizationType.Q5_0: "q5_0",
    GGMLQuantizationType.Q5_1: "q5_1",
    GGMLQuantizationType.Q8_0: "q8_0",
    GGMLQuantizationType.Q4_K: "q4_k",
    GGMLQuantizationType.Q5_K: "q5_k",
    GGMLQuantizationType.Q6_K: "q6_k",
}

_SCALAR_FORMATS: dict[GGUFValueType, tuple[str, int]] = {
    GGUFValueType.UINT8: ("<B", 1), GGUFValueType.INT8: ("<b", 1),
    GGUFValueType.UINT16: ("<H", 2), GGUFValueType.INT16: ("<h", 2),
    GGUFValueType.UINT32: ("<I", 4), GGUFValueType.INT32: ("<i", 4),
    GGUFValueType.FLOAT32: ("<f", 4), GGUFValueType.BOOL: ("<?", 1),
    GGUFValueType.UINT64: ("<Q", 8), GGUFValueType.INT64: ("<q", 8),
    GGUFValueType.FLOAT64: ("<d", 8),
}
_NUMPY_TYPES: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "?", GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry. `ggml_shape` is GGUF order (fastest dim first); `shape` is row-major
    NumPy order. `offset` is absolute in the file."""

    name: str
    ggml_shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    offset: int
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.ggml_shape))

    @property
    def type_name(self) -> str:
        return self.ggml_type.name

    @property
    def dtype(self) -> str | None:
        """The runtime dtype name, or None when the runtime cannot hold this type."""
        return SUPPORTED_TENSOR_TYPES.get(self.ggml_type)

    @property
    def is_quantized(self) -> bool:
        return self.ggml_type not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16,
                                      GGMLQuantizationType.BF16)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ggml_shape:
            n *= d
        return n

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """[rows, cols] with cols the fastest dim: how a quantized tensor is stored and uploaded."""
        cols = self.ggml_shape[0]
        return (self.n_elements // cols, cols)


class _Cursor:
    """Bounds-checked little-endian reads from the mapped header."""

    def __init__(self, buf: memoryview, path: str):
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.path = path

    def fail(self, what: str) -> ModelError:
        return ModelError(f"{self.path}: not a valid GGUF file: {what}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"truncated while reading {what} at byte {self.pos} "
                            f"(needs {n} bytes, file has {self.size})")

    def scalar(self, vtype: GGUFValueType, what: str) -> Any:
        fmt, n = _SCALAR_FORMATS[vtype]
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.scalar(GGUFValueType.UINT32, what)

    def u64(self, what: str) -> int:
        return self.scalar(GGUFValueType.UINT64, what)

    def string(self, what: str, max_len: int | None = None) -> str:
        n = self.u64(f"length of {what}")
        if max_len is not None and n > max_len:
            raise self.fail(f"{what} is {n} bytes long (limit {max_len})")
        self.need(n, what)
        s = str(self.buf[self.pos:self.pos + n], "utf-8", "replace")
        self.pos += n
        return s

    def value_type(self, what: str) -> GGUFValueType:
        code = self.u32(f"type of {what}")
        try:
            return GGUFValueType(code)
        except ValueError:
            raise self.fail(f"{what} has unknown value type {code}") from None

    def value(self, vtype: GGUFValueType, what: str) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype == GGUFValueType.ARRAY:
            return self.array(what, 1)
        return self.scalar(vtype, what)

    def array(self, what: str, depth: int) -> Any:
        if depth > MAX_ARRAY_NESTING:
            raise self.fail(f"{what} nests arrays more than {MAX_ARRAY_NESTING} deep")
        etype = self.value_type(f"elements of {what}")
        count = self.u64(f"element count of {what}")
        min_elem = 8 if etype in (GGUFValueType.STRING, GGUFValueType.ARRAY) else _SCALAR_FORMATS[etype][1]
        if count * min_elem > self.size - self.pos:
            raise self.fail(f"{what} claims {count} elements but only {self.size - self.pos} bytes remain")
        if etype in _NUMPY_TYPES:
            n = count * _SCALAR_FORMATS[etype][1]
            arr = np.frombuffer(self.buf, dtype=_NUMPY_TYPES[etype], count=count, offset=self.pos).copy()
            self.pos += n
            return arr
        if etype == GGUFValueType.STRING:
            out = []
            buf, size, unpack = self.buf, self.size, struct.unpack_from
            pos = self.pos
            for i in range(count):
                if pos + 8 > size:
                    self.pos = pos
                    self.need(8, f"length of {what}[{i}]")
                (n,) = unpack("<Q", buf, pos)
                pos += 8
                if pos + n > size:
                    self.pos = pos
                    self.need(n, f"{what}[{i}]")
                out.append(str(buf[pos:pos + n], "utf-8", "replace"))
                pos += n
            self.pos = pos
            return out
        return [self.array(f"{what}[{i}]", depth + 1) for i in range(count)]


class GGUFFile:
    """An open GGUF file: `metadata` (key → Python value; numeric arrays as NumPy arrays),
    `tensors` (name → TensorInfo, in file order) and zero-copy access to tensor data."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._label = str(self.path)
        try:
            size = self.path.stat().st_size
            if not self.path.is_file():
                raise ModelError(f"{self._label}: not a file")
        except FileNotFoundError:
            raise ModelError(f"{self._label}: no such file") from None
        except OSError as e:
            raise ModelError(f"{self._label}: cannot open: {e.strerror or e}") from None
        if size < 24:
            raise ModelError(f"{self._label}: not a valid GGUF file: only {size} bytes")
        self._fd: int | None = None
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
            self._mmap: mmap.mmap | None = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            self.close()
            raise ModelError(f"{self._label}: cannot map the file: {e}") from None
        self._map: np.ndarray | None = np.frombuffer(self._mmap, dtype=np.uint8)
        self.file_size = size
        self.metadata: dict[str, Any] = {}
        self.metadata_types: dict[str, GGUFValueType] = {}
        self.tensors: dict[str, TensorInfo] = {}
        try:
            self._parse(memoryview(self._map))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ parsing
    def _parse(self, buf: memoryview) -> None:
        c = _Cursor(buf, self._label)
        magic = bytes(buf[:4])
        if magic != GGUF_MAGIC:
            raise c.fail(f"bad magic {magic!r} (expected b'GGUF')")
        c.pos = 4
        self.version = c.u32("version")
        if self.version not in SUPPORTED_VERSIONS:
            if self.version & 0xFFFF == 0 and (self.version >> 16) in SUPPORTED_VERSIONS:
                raise ModelError(f"{self._label}: big-endian GGUF files are not supported")
            raise ModelError(f"{self._label}: unsupported GGUF version {self.version} "
                             f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("metadata count")
        remaining = c.size - c.pos
        if n_kv * 13 > remaining:
            raise c.fail(f"header claims {n_kv} metadata entries but only {remaining} bytes remain")
        if n_tensors * 32 > remaining:
            raise c.fail(f"header claims {n_tensors} tensors but only {remaining} bytes remain")
        for i in range(n_kv):
            key = c.string(f"metadata key #{i}", MAX_KEY_BYTES)
            if key in self.metadata:
                raise c.fail(f"metadata key {key!r} appears twice")
            vtype = c.value_type(f"metadata {key!r}")
            self.metadata[key] = c.value(vtype, f"metadata {key!r}")
            self.metadata_types[key] = vtype
        if n_tensors * 32 > c.size - c.pos:
            raise c.fail(f"header claims {n_tensors} tensors but only {c.size - c.pos} bytes remain")
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 \
                or alignment & (alignment - 1):
            raise c.fail(f"general.alignment {alignment!r} is not a power of two")
        self.alignment = alignment
        raw: list[tuple[str, tuple[int, ...], GGMLQuantizationType, int]] = []
        seen: set[str] = set()
        for i in range(n_tensors):
            name = c.string(f"name of tensor #{i}", MAX_KEY_BYTES)
            if name in seen:
                raise c.fail(f"tensor {name!r} appears twice")
            seen.add(name)
            n_dims = c.u32(f"dimension count of tensor {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise c.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
            dims = tuple(c.u64(f"dimensions of tensor {name!r}") for _ in range(n_dims))
            n_elements = 1
            for d in dims:
                if d == 0 or d > MAX_ELEMENTS:
                    raise c.fail(f"tensor {name!r} has dimension {d}")
                n_elements *= d
                if n_elements > MAX_ELEMENTS:
                    raise c.fail(f"tensor {name!r} has an absurd shape {list(dims)}")
            code = c.u32(f"type of tensor {name!r}")
            try:
                ttype = GGMLQuantizationType(code)
            except ValueError:
                raise ModelError(f"{self._label}: tensor {name!r} has unknown type code {code}") from None
            if ttype not in GGML_QUANT_SIZES:
                raise ModelError(f"{self._label}: tensor {name!r} has type {ttype.name} of unknown size")
            offset = c.u64(f"data offset of tensor {name!r}")
            raw.append((name, dims, ttype, offset))
        self.data_start = (c.pos + alignment - 1) // alignment * alignment
        for name, dims, ttype, offset in raw:
            block_elems, block_bytes = GGML_QUANT_SIZES[ttype]
            if dims[0] % block_elems:
                raise c.fail(f"tensor {name!r} of type {ttype.name} has a row of {dims[0]} elements, "
                             f"not a multiple of the block size {block_elems}")
            n_elements = 1
            for d in dims:
                n_elements *= d
            nbytes = n_elements // block_elems * block_bytes
            if offset % alignment:
                raise c.fail(f"tensor {name!r} data offset {offset} is not aligned to {alignment}")
            start = self.data_start + offset
            if start + nbytes > self.file_size:
                raise c.fail(f"tensor {name!r} data ({nbytes} bytes at {start}) runs past the end of the "
                             f"file ({self.file_size} bytes): truncated?")
            self.tensors[name] = TensorInfo(name, dims, ttype, start, nbytes)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            if start < end:
                raise c.fail(f"tensors {a!r} and {b!r} overlap")

    # ------------------------------------------------------------------ access
    @property
    def closed(self) -> bool:
        return self._map is None

    def close(self) -> None:
        """Drop this file's mapping. Views returned earlier stay valid until they are dropped
        (the mapping is unmapped when the last of them goes)."""
        self._map = None
        self._mmap = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def release_pages(self, name: str) -> None:
        """Tell the OS the pages of tensor `name` are not needed any more (after uploading it), so a
        model's bytes are not resident twice. The mapping is read-only and file-backed: a later
        read simply faults the pages back in."""
        if self._mmap is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        info = self.tensor_info(name)
        page = mmap.PAGESIZE
        start = (info.offset + page - 1) // page * page
        end = (info.offset + info.nbytes) // page * page
        if end > start:
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (OSError, ValueError):
                pass  # advice only

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tensor_info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"{self._label}: no tensor named {name!r}") from None

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The tensor's stored bytes as a fresh uint8 array `[rows, row_bytes]`, read with pread()
        (a short read -- the file shrank since it was opened -- is a ModelError)."""
        if self._map is None or self._fd is None:
            raise ModelError(f"{self._label}: the model file is closed")
        info = self.tensor_info(name)
        rows, _ = info.matrix_shape
        out = np.empty(info.nbytes, dtype=np.uint8)
        view, done = memoryview(out), 0
        try:
            while done < info.nbytes:
                n = os.preadv(self._fd, [view[done:]], info.offset + done)
                if n <= 0:
                    break
                done += n
        except OSError as e:
            raise ModelError(f"{self._label}: cannot read tensor {name!r}: {e.strerror or e}") from None
        if done < info.nbytes:
            size = os.fstat(self._fd).st_size
            raise ModelError(f"{self._label}: the file was truncated while loading (now {size} bytes; "
                             f"tensor {name!r} ends at byte {info.offset + info.nbytes})")
        return out.reshape(rows, info.nbytes // rows)

    def tensor_array(self, name: str) -> np.ndarray:
        """F32/F16 tensors as typed read-only views in NumPy shape order (no copy); BF16 and
        quantized tensors are dequantized to float32 (a copy; for tests and small tensors)."""
        info = self.tensor_info(name)
        raw = self.tensor_bytes(name)
        if info.ggml_type == GGMLQuantizationType.F32:
            return raw.reshape(-1).view("<f4").reshape(info.shape)
        if info.ggml_type == GGMLQuantizationType.F16:
            return raw.reshape(-1).view("<f2").reshape(info.shape)
        return self.dequantize(name)

    def dequantize(self, name: str) -> np.ndarray:
        """float32 values of any tensor, through `gguf.quants.dequantize` (a full copy)."""
        from gguf.quants import dequantize

        info = self.tensor_info(name)
        try:
            values = dequantize(np.asarray(self.tensor_bytes(name)), info.ggml_type)
        except NotImplementedError:
            raise ModelError(f"{self._label}: tensor {name!r}: cannot dequantize type {info.type_name}") from None
        return np.asarray(values, dtype=np.float32).reshape(info.shape)

    def unsupported_tensors(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.dtype is None]

    def check_supported(self) -> None:
        """Raise naming the first tensor whose type the runtime cannot hold."""
        for t in self.tensors.values():
            if t.dtype is None:
                supported = ", ".join(ty.name for ty in SUPPORTED_TENSOR_TYPES)
                raise ModelError(f"{self._label}: tensor {t.name!r} has type {t.type_name}, which is not "
                                 f"supported (supported: {supported})")

    # ------------------------------------------------------------------ metadata helpers
    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def optional(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        """A metadata value of `kind`, or `default` when the key is absent; a value of another type
        is a one-line ModelError naming the key (files in the wild carry strings in number keys)."""
        if key not in self.metadata:
            return default
        return self.require(key, kind)

    def require(self, key: str, kind: type | tuple[type, ...]) -> Any:
        """A metadata value that must exist and be of `kind` (int also accepts unsigned widths)."""
        if key not in self.metadata:
            raise ModelError(f"{self._label}: missing metadata key {key}")
        value = self.metadata[key]
        if not _is_kind(value, kind):
            raise ModelError(f"{self._label}: metadata {key} should be {_kind_name(kind)}, "
                             f"found {type(value).__name__} {_short(value)}")
        return value


def _is_kind(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if k is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if k is bool and isinstance(value, bool):
            return True
        if k is str and isinstance(value, str):
            return True
        if k is list and isinstance(value, (list, np.ndarray)):
            return True
    return False


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({int: "an integer", float: "a number", bool: "a boolean", str: "a string",
                        list: "an array"}.get(k, k.__name__) for k in kinds)


def _short(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    return GGUFFile(path)
