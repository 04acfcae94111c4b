"""`save` / `load` with the files NumPy and other tools write: every dtype NumPy users save loads with
its exact values (big-endian converted, small integers widened, float64 refused rather than narrowed),
0-d tensors stay 0-d both ways, BF16 safetensors load and round-trip, and `__metadata__` is never
written as a tensor. Values are checked against NumPy."""
from __future__ import annotations

import json
import struct
import textwrap

import numpy as np
import pytest

import tensorlogic
from tensorlogic.builtins import tensor_formats
from tensorlogic.builtins.convert import core


def run(src: str):
    return tensorlogic.run(textwrap.dedent(src), filename="p.tl")


def loaded(path) -> tuple[str, np.ndarray]:
    """(TL dtype, values) of load(path) for a .npy file."""
    result = run(f'let t = load("{path}")\n')
    assert result.error is None, result.error_text
    t = result.env["t"]
    return t.dtype, t.numpy()


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]], metadata=None) -> bytes:
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


# ----------------------------------------------------------------------------- 0-d tensors

@pytest.mark.parametrize("ext", ["npy", "safetensors"])
def test_a_0d_tensor_round_trips_as_0d(tmp_path, ext):
    path = tmp_path / f"s.{ext}"
    result = run(f"""
        let s = sum([1.5, 2.0])
        save(s, "{path}")
        let back = load("{path}")
        let t = if "{ext}" == "npy" {{ back }} else {{ back["tensor"] }}
        print(t, shape(t))""")
    assert result.output == "3.5 []\n", result.error_text
    if ext == "npy":
        on_disk = np.load(path)
        assert on_disk.shape == () and on_disk == np.float32(3.5)


def test_a_0d_npy_written_by_numpy_loads_as_0d(tmp_path):
    path = tmp_path / "z.npy"
    np.save(path, np.array(7, dtype=np.int64))
    dtype, values = loaded(path)
    assert (dtype, values.shape, int(values)) == ("i64", (), 7)


def test_a_0d_safetensors_tensor_loads_as_0d(tmp_path):
    path = tmp_path / "z.safetensors"
    path.write_bytes(safetensors_bytes({"x": ("F32", [], np.float32(2.25).tobytes())}))
    result = run(f'let x = load("{path}")["x"]\nprint(x, shape(x))\n')
    assert result.output == "2.25 []\n", result.error_text


# ----------------------------------------------------------------------------- .npy dtypes

@pytest.mark.parametrize("np_dtype, tl_dtype", [
    (">f4", "f32"), (">f2", "f16"), (">i4", "i32"), (">i8", "i64"), (">i2", "i32"), (">u2", "i32"),
    ("u1", "i32"), ("i1", "i32"), ("<i2", "i32"), ("<u2", "i32"), ("<u4", "i64"), ("<u8", "i64"),
    ("<f4", "f32"), ("<f2", "f16"), ("?", "bool"),
])
def test_npy_dtypes_numpy_users_save_load_exactly(tmp_path, np_dtype, tl_dtype):
    dt = np.dtype(np_dtype)
    if dt.kind == "b":
        src = np.array([[True, False, True], [False, False, True]])
    elif dt.kind == "f":
        src = np.array([[0.5, -1.25, 3e4], [65504.0 if dt.itemsize == 2 else 1e30, 0.0, -7.0]], dtype=dt)
    else:
        info = np.iinfo(dt)
        top = min(int(info.max), 2**62)
        src = np.array([[info.min, 0, 1], [top, top - 1, info.min + 1]], dtype=dt)
    path = tmp_path / "x.npy"
    np.save(path, src)
    dtype, values = loaded(path)
    assert dtype == tl_dtype and values.shape == src.shape
    np.testing.assert_array_equal(values, src.astype(values.dtype))
    assert (values.astype(object) == src.astype(object)).all()   # exact, no wrap-around


def test_a_fortran_ordered_npy_keeps_its_element_order(tmp_path):
    src = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    path = tmp_path / "f.npy"
    np.save(path, src)
    dtype, values = loaded(path)
    np.testing.assert_array_equal(values, src)


def test_a_bool_npy_reads_any_nonzero_byte_as_true(tmp_path):
    path = tmp_path / "b.npy"
    np.save(path, np.array([True, False, True]))
    data = bytearray(path.read_bytes())
    data[-1] = 7   # NumPy reads this byte as True
    path.write_bytes(bytes(data))
    result = run(f'let b = load("{path}")\nprint(b, sum(astype(b, "i32")))\n')
    assert result.output == "[true, false, true] 2\n", result.error_text


@pytest.mark.parametrize("src, needle", [
    (np.arange(3, dtype=np.float64), "holds float64 data; TL tensors have no 64-bit floats"),
    (np.array([2**63], dtype=np.uint64), "uint64 values above 2^63-1"),
    (np.array([1 + 2j]), "dtype complex128"),
    (np.array(["a"]), "dtype str32 ('<U1'"),
])
def test_npy_dtypes_tl_cannot_hold_exactly_are_refused_not_narrowed(tmp_path, src, needle):
    path = tmp_path / "x.npy"
    np.save(path, src)
    result = run(f'let t = load("{path}")\n')
    assert result.error is not None and not result.internal_error, result.error_text
    assert needle in result.error.message and "\n" not in result.error.message


# ----------------------------------------------------------------------------- .safetensors dtypes

@pytest.mark.parametrize("st_dtype, np_dtype, tl_dtype", [
    ("I8", "i1", "i32"), ("U8", "u1", "i32"), ("I16", "<i2", "i32"), ("U16", "<u2", "i32"),
    ("U32", "<u4", "i64"), ("U64", "<u8", "i64"), ("I32", "<i4", "i32"), ("I64", "<i8", "i64"),
    ("F16", "<f2", "f16"), ("F32", "<f4", "f32"),
])
def test_safetensors_integer_and_float_dtypes_load_exactly(tmp_path, st_dtype, np_dtype, tl_dtype):
    dt = np.dtype(np_dtype)
    src = (np.array([[-3.5, 0.25], [1.0, 8.0]], dtype=dt) if dt.kind == "f" else
           np.array([[np.iinfo(dt).min, 0], [1, min(int(np.iinfo(dt).max), 2**63 - 1)]], dtype=dt))
    path = tmp_path / "w.safetensors"
    path.write_bytes(safetensors_bytes({"w": (st_dtype, [2, 2], src.tobytes())}))
    result = run(f'let w = load("{path}")["w"]\n')
    assert result.error is None, result.error_text
    w = result.env["w"]
    assert w.dtype == tl_dtype and (w.numpy().astype(object) == src.astype(object)).all()


def test_bf16_safetensors_load_and_round_trip_bit_exactly(tmp_path):
    values = np.array([1.0, -2.5, 3.140625, 1e-3, 65280.0], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    path, out = tmp_path / "b.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(safetensors_bytes({"b": ("BF16", [5], bits.tobytes())}))
    result = run(f'let b = load("{path}")["b"]\nsave(map(["b"], [b]), "{out}")\n')
    assert result.error is None, result.error_text
    b = result.env["b"]
    assert b.dtype == "bf16"
    np.testing.assert_array_equal(b.numpy(), (bits.astype(np.uint32) << 16).view(np.float32))
    data = out.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    assert json.loads(data[8:8 + size])["b"]["dtype"] == "BF16" and data[8 + size:] == bits.tobytes()


@pytest.mark.parametrize("st_dtype, needle", [
    ("F64", "holds float64 data; TL tensors have no 64-bit floats"),
    ("F8_E4M3", "holds F8_E4M3 data; TL has no such type"),
])
def test_safetensors_dtypes_tl_cannot_hold_are_refused(tmp_path, st_dtype, needle):
    size = 8 if st_dtype == "F64" else 1
    path = tmp_path / "w.safetensors"
    path.write_bytes(safetensors_bytes({"w": (st_dtype, [2], b"\0" * 2 * size)}))
    result = run(f'let w = load("{path}")\n')
    assert not result.internal_error and needle in result.error.message, result.error_text


@pytest.mark.parametrize("floats, np_type", [("f32", np.float32), ("f16", np.float16)])
def test_load_rounds_float64_to_the_float_dtype_named(tmp_path, floats, np_type):
    src = np.array([[0.1, 1e-8], [3.0, -1e4]])
    npy, st = tmp_path / "x.npy", tmp_path / "x.safetensors"
    np.save(npy, src)
    ids = np.array([7, 8], np.int64)
    st.write_bytes(safetensors_bytes({"x": ("F64", [2, 2], src.tobytes()), "ids": ("I64", [2], ids.tobytes())}))
    result = run(f'let a = load("{npy}", "{floats}")\nlet m = load("{st}", "{floats}")\n')
    assert result.error is None, result.error_text
    a, m = result.env["a"], result.env["m"]
    assert a.dtype == m["x"].dtype == floats and m["ids"].dtype == "i64"   # integers are left alone
    np.testing.assert_array_equal(a.numpy(), src.astype(np_type))
    np.testing.assert_array_equal(m["x"].numpy(), src.astype(np_type))
    np.testing.assert_array_equal(m["ids"].numpy(), ids)


def test_load_floats_must_be_a_float_dtype(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(2))
    result = run(f'let a = load("{tmp_path / "x.npy"}", "i32")\n')
    assert not result.internal_error and "floats must be a float dtype (f32, f16 or bf16)" in result.error.message


def test_the_rank_limit_of_the_readers_is_the_runtimes(tmp_path):
    core.from_numpy(np.zeros((1,) * tensor_formats.MAX_RANK, np.float32), "f32")
    with pytest.raises(core.TLRuntimeError):
        core.from_numpy(np.zeros((1,) * (tensor_formats.MAX_RANK + 1), np.float32), "f32")
    path = tmp_path / "r.npy"
    np.save(path, np.zeros((1,) * (tensor_formats.MAX_RANK + 1), np.float32))
    result = run(f'let t = load("{path}")\n')
    assert not result.internal_error and "at most 8" in result.error.message


# ----------------------------------------------------------------------------- __metadata__

def test_save_refuses_a_tensor_named_metadata_and_writes_nothing(tmp_path):
    path = tmp_path / "m.safetensors"
    result = run(f"""
        let m = map()
        m["w"] = [1.0]
        m["__metadata__"] = [2.0]
        save(m, "{path}")""")
    assert not result.internal_error and "'__metadata__' is reserved" in result.error.message
    assert not path.exists()


def test_load_accepts_string_metadata_and_skips_it(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(safetensors_bytes({"w": ("F32", [1], np.float32(4).tobytes())}, metadata={"format": "pt"}))
    result = run(f'let m = load("{path}")\nprint(keys(m), m["w"])\n')
    assert result.output == '["w"] [4.]\n', result.error_text
