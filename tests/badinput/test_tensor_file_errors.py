"""Malformed and hostile files given to `load`, `read_text`, `save` and `write_text`: each is one error
line (`... is not a valid .npy file: reason`, `... is a FIFO, not a regular file`), exit status 1,
never an internal error (exit 4), a traceback, a silently wrong tensor, a read of /dev/zero until
memory runs out or a read of a FIFO that blocks forever. Ends with a bounded fuzz of truncated and
bit-flipped valid files."""
from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorlogic
from tensorlogic.builtins.convert import BuiltinArgError
from tensorlogic.builtins.files import load


def st_file(header, data: bytes = b"") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def f32(name="a", shape=(2,), offsets=(0, 8)) -> dict:
    return {name: {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}}


def npy_file(header: str, data: bytes = b"", version=(1, 0)) -> bytes:
    text = header.encode("latin1")
    length = struct.pack("<H" if version == (1, 0) else "<I", len(text))
    return b"\x93NUMPY" + bytes(version) + length + text + data


NPY_OK = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n"

# name -> (file bytes, the reason the error line must give)
BAD_SAFETENSORS = {
    "empty": (b"", "the file is empty"),
    "short": (b"\x10\0\0", "only 3 bytes"),
    "header past the end": (struct.pack("<Q", 1000) + b"{}", "the header length 1000 runs past the end"),
    "header length 2^64-1": (struct.pack("<Q", 2**64 - 1) + b"{}", "runs past the end of the file"),
    "list header": (st_file([1, 2]), "the header is not a JSON object"),
    "null header": (st_file(b"null"), "the header is not a JSON object"),
    "string header": (st_file(b'"x"'), "the header is not a JSON object"),
    "not json": (st_file(b"{'a': 1}"), "the header is not JSON"),
    "not utf-8": (st_file(b'{"\xff": 1}'), "the header is not UTF-8"),
    "repeated name": (st_file(b'{"a": {}, "a": {}}'), "the header names 'a' twice"),
    "lone surrogate name": (st_file(b'{"\\ud800": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'),
                            "tensor '\\ud800' is not valid Unicode"),
    "entry not an object": (st_file({"a": 3}), "tensor 'a' is not a JSON object"),
    "no dtype": (st_file({"a": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "tensor 'a' has no 'dtype'"),
    "unknown dtype": (st_file({"a": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
                      "unknown dtype 'F31'"),
    "negative offsets": (st_file(f32(offsets=(-8, -4)), b"\0" * 8), "data_offsets [-8, -4] outside the data"),
    "offsets past the data": (st_file(f32(offsets=(4, 12)), b"\0" * 8), "data_offsets [4, 12] outside"),
    "reversed offsets": (st_file(f32(offsets=(8, 0)), b"\0" * 8), "data_offsets [8, 0] outside"),
    "three offsets": (st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}}, b"\0" * 8),
                      "not a list of two integers"),
    "float offsets": (st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]}}, b"\0" * 8),
                      "not a list of two integers"),
    "negative shape": (st_file(f32(shape=(-1,)), b"\0" * 8), "shape [-1], not a list of non-negative integers"),
    "bool shape": (st_file({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4),
                   "not a list of non-negative integers"),
    "shape too small": (st_file(f32(shape=(1,)), b"\0" * 8), "shape [1] of F32 is 4 bytes, data_offsets [0, 8] hold 8"),
    "shape too big": (st_file(f32(shape=(3,)), b"\0" * 8), "shape [3] of F32 is 12 bytes"),
    "huge shape": (st_file(f32(shape=(2**62, 2**62)), b"\0" * 8), f"is {2**126} bytes"),
    "overlap": (st_file({**f32("a", (2,), (0, 8)), **f32("b", (2,), (4, 12))}, b"\0" * 12), "tensors 'a' and 'b' overlap"),
    "same bytes twice": (st_file({**f32("a", (2,), (0, 8)), **f32("b", (2,), (0, 8))}, b"\0" * 8), "overlap"),
    "gap": (st_file({**f32("a", (1,), (0, 4)), **f32("b", (1,), (8, 12))}, b"\0" * 12),
            "bytes 4..8 of the data belong to no tensor"),
    "trailing bytes": (st_file(f32(), b"\0" * 12), "4 bytes follow the last tensor's data"),
    "metadata not strings": (st_file({"__metadata__": {"n": 1}}), "'__metadata__' is not a map of strings to strings"),
}

BAD_NPY = {
    "empty": (b"", "the file is empty"),
    "no magic": (b"PK\x03\x04" + b"\0" * 60, "does not start with the .npy magic"),
    "magic only": (b"\x93NUMPY", "too short for the format version"),
    "version 9.9": (b"\x93NUMPY\x09\x09\x00\x00", "format version 9.9"),
    "no header length": (b"\x93NUMPY\x01\x00\x40", "too short for the header length"),
    "header past the end": (b"\x93NUMPY\x01\x00\x40\x00{'descr'", "the file ends inside the header"),
    "huge header": (b"\x93NUMPY\x02\x00\xff\xff\xff\x7f{", "a header of 2147483647 bytes"),
    "not a literal": (npy_file("__import__('os').system('true')\n"), "the header is not a Python dict literal"),
    "deep nesting": (npy_file("(" * 5000 + ")" * 5000), "the header is not a Python dict literal"),
    "a list": (npy_file("[1, 2]\n"), "not a dict of exactly 'descr', 'fortran_order' and 'shape'"),
    "missing key": (npy_file("{'descr': '<f4', 'shape': (2,)}\n"), "not a dict of exactly"),
    "extra key": (npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}\n"), "not a dict of exactly"),
    "negative shape": (npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n"),
                       "'shape' is (-1,), not a tuple of non-negative integers"),
    "list shape": (npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }\n", b"\0" * 8), "'shape' is [2]"),
    "fortran order 1": (npy_file("{'descr': '<f4', 'fortran_order': 1, 'shape': (2,), }\n", b"\0" * 8),
                        "'fortran_order' is 1, not True or False"),
    "bad descr": (npy_file("{'descr': '<f3', 'fortran_order': False, 'shape': (2,), }\n", b"\0" * 8),
                  "'descr' '<f3' is no NumPy dtype"),
    "truncated data": (npy_file(NPY_OK, b"\0" * 5), "the data is truncated (shape [2] of float32 needs 8 bytes, the file has 5)"),
    "no data": (npy_file(NPY_OK), "the data is truncated"),
    "trailing bytes": (npy_file(NPY_OK, b"\0" * 9), "1 bytes follow the data"),
    "an expression": (npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2**62,), }\n"),
                   "the header is not a Python dict literal"),
    "shape overflow": (npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n"),
                       "needs 147573952589676412928 bytes"),
}


def load_error(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    result = tensorlogic.run(f'let t = load("{path}")\n', filename="p.tl")
    assert result.error is not None, f"{path.name} loaded: {result.env.get('t')}"
    assert not result.internal_error, result.error_text
    message = result.error.message
    assert "\n" not in message and "Traceback" not in message, message
    return message


@pytest.mark.parametrize("case", list(BAD_SAFETENSORS))
def test_a_malformed_safetensors_file_is_one_error_line(tmp_path, case):
    data, reason = BAD_SAFETENSORS[case]
    path = tmp_path / "w.safetensors"
    message = load_error(path, data)
    assert message.startswith(f"load: {path} is not a valid .safetensors file: "), message
    assert reason in message, message


@pytest.mark.parametrize("case", list(BAD_NPY))
def test_a_malformed_npy_file_is_one_error_line(tmp_path, case):
    data, reason = BAD_NPY[case]
    path = tmp_path / "x.npy"
    message = load_error(path, data)
    assert message.startswith(f"load: {path} is not a valid .npy file: "), message
    assert reason in message, message


def test_a_pickled_npy_is_refused_unread(tmp_path):
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "holds Python objects (pickled)" in load_error(path, path.read_bytes())


# ----------------------------------------------------------------------------- the tl command

def tl_run(tmp_path: Path, source: str, timeout: float = 60):
    import tensorlogic as pkg

    program = tmp_path / "p.tl"
    program.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(Path(pkg.__file__).resolve().parent.parent))
    return subprocess.run([sys.executable, "-m", "tensorlogic", "run", str(program)], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=tmp_path, stdin=subprocess.DEVNULL)


def error_line(r) -> str:
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if ": error: " in line]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_the_attack_files_exit_1_with_one_line(tmp_path):
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "list.safetensors").write_bytes(st_file([1]))
    (tmp_path / "neg.safetensors").write_bytes(st_file(f32(offsets=(-8, -4)), b"\0" * 8))
    for name, reason in [("empty.npy", "not a valid .npy file: the file is empty"),
                         ("list.safetensors", "not a valid .safetensors file: the header is not a JSON object"),
                         ("neg.safetensors", "not a valid .safetensors file: tensor 'a' has data_offsets [-8, -4]")]:
        r = tl_run(tmp_path, f'print(load("{name}"))\n')
        assert r.returncode == 1 and reason in error_line(r), (name, r.stderr)


@pytest.mark.parametrize("call", ['read_text("/dev/zero")', 'load("zero.npy")', 'load("zero.safetensors")'])
def test_a_device_is_refused_before_any_read(tmp_path, call):
    os.symlink("/dev/zero", tmp_path / "zero.npy")
    os.symlink("/dev/zero", tmp_path / "zero.safetensors")
    r = tl_run(tmp_path, f"print({call})\n", timeout=30)
    assert r.returncode == 1 and "is a device, not a regular file" in error_line(r)


@pytest.mark.parametrize("call", ['read_text("fifo")', 'load("fifo.npy")', 'load("fifo.safetensors")',
                                  'write_text("fifo", "x")', 'save([1.0], "fifo.npy")'])
def test_a_fifo_is_refused_not_waited_on(tmp_path, call):
    for name in ("fifo", "fifo.npy", "fifo.safetensors"):
        os.mkfifo(tmp_path / name)
    r = tl_run(tmp_path, f"{call}\n", timeout=30)   # no writer ever opens the FIFO: a wait is a hang
    assert r.returncode == 1 and "is a FIFO, not a regular file" in error_line(r)
    assert all((tmp_path / name).is_fifo() for name in ("fifo", "fifo.npy", "fifo.safetensors"))


def test_a_fifo_given_as_tokenizer_json_is_refused(tmp_path):
    os.mkfifo(tmp_path / "tokenizer.json")
    r = tl_run(tmp_path, 'let t = load_tokenizer("tokenizer.json")\n', timeout=30)
    assert r.returncode == 1 and "tokenizer.json: not a file" in error_line(r)


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "d.npy").mkdir()
    result = tensorlogic.run(f'let t = load("{tmp_path / "d.npy"}")\n', filename="p.tl")
    assert not result.internal_error and "is a directory, not a regular file" in result.error.message


# ----------------------------------------------------------------------------- fuzz

def _valid_files(tmp_path: Path) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    files = {}
    for i, arr in enumerate([rng.standard_normal((3, 4)).astype(np.float32), np.arange(5, dtype=">i8"),
                             np.array(2.5, np.float16), np.array([[True, False]]), np.zeros((0, 3), np.int32),
                             np.arange(6, dtype=np.uint8).reshape(2, 3)]):
        path = tmp_path / f"v{i}.npy"
        np.save(path, arr)
        files[f"v{i}.npy"] = path.read_bytes()
    b = np.float32([1, 2]).tobytes()
    files["w.safetensors"] = st_file({"__metadata__": {"format": "pt"}, **f32("a", (2,), (0, 8)),
                                      "b": {"dtype": "I32", "shape": [2, 1], "data_offsets": [8, 16]},
                                      "c": {"dtype": "BF16", "shape": [], "data_offsets": [16, 18]}},
                                     b + np.int32([3, 4]).tobytes() + b"\x80\x3f")
    files["z.safetensors"] = st_file({}, b"")
    return files


def test_truncated_and_bit_flipped_files_load_or_fail_with_one_line(tmp_path):
    """Calls the builtin directly (a TL run per case costs ~0.1 s): any exception but BuiltinArgError
    would be an internal error (exit 4) in a program."""
    rng = random.Random(22)
    files = _valid_files(tmp_path)
    for name, data in files.items():   # the originals load
        path = tmp_path / name
        path.write_bytes(data)
        load(str(path))
    failures = 0
    for i in range(4000):
        name, data = rng.choice(sorted(files.items()))
        mutated = bytearray(data)
        if rng.random() < 0.3:
            mutated = mutated[:rng.randrange(len(mutated))]
        else:
            for _ in range(rng.choice([1, 1, 2, 4])):
                # the header is where the format lives: flip there more often
                at = rng.randrange(min(len(mutated), 140) if rng.random() < 0.7 else len(mutated))
                mutated[at] ^= 1 << rng.randrange(8)
        path = tmp_path / f"m{i}{Path(name).suffix}"
        path.write_bytes(bytes(mutated))
        try:
            load(str(path))
        except BuiltinArgError as e:
            failures += 1
            assert "\n" not in str(e) and str(e).startswith(str(path)), (name, bytes(mutated), str(e))
        path.unlink()
    assert failures > 2000   # the mutations did reach the checks


def test_headers_with_extreme_fields_load_or_fail_with_one_line(tmp_path):
    """Headers built from edge values (zero, huge and negative sizes, odd dtypes and offsets), where bit
    flips rarely reach: each loads or is one BuiltinArgError line."""
    rng = random.Random(21)
    sizes = [0, 1, 2, 3, 8, 2**31, 2**32 + 1, 2**40, 2**61, 2**62, 2**63, 2**64, 10**30, -1]
    descrs = ["<f4", ">f2", "<f8", "|b1", "u1", ">i8", "<u8", "<c8", "|V4", "<M8[s]", "(2,)<f4", "<U2", "f4,i4"]
    st_dtypes = ["F32", "BF16", "BOOL", "U8", "I64", "F64", "F8_E4M3", "F4", "Q4", 7]
    for i in range(600):
        shape = [rng.choice(sizes) for _ in range(rng.choice([0, 1, 2, 3, 9]))]
        data = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 4, 8, 16, 64])))
        if i % 2:
            descr = rng.choice(descrs)
            text = f"{{'descr': {descr!r}, 'fortran_order': {rng.choice([True, False])}, 'shape': {tuple(shape)!r}, }}\n"
            path = tmp_path / f"h{i}.npy"
            path.write_bytes(npy_file(text, data))
        else:
            begin = rng.choice([0, 0, 0, 1, 4, -4, 2**64])
            end = rng.choice([begin, begin + len(data), len(data), 2**63, 3])
            info = {"dtype": rng.choice(st_dtypes), "shape": shape, "data_offsets": [begin, end]}
            path = tmp_path / f"h{i}.safetensors"
            path.write_bytes(st_file({"t": info}, data))
        try:
            load(str(path))
        except BuiltinArgError as e:
            assert "\n" not in str(e) and str(e).startswith(str(path)), str(e)
        path.unlink()


def test_a_shape_too_large_for_a_tensor_is_refused_even_with_no_elements(tmp_path):
    path = tmp_path / "e.npy"
    message = load_error(path, npy_file(f"{{'descr': '<f4', 'fortran_order': False, 'shape': (0, {2**62}), }}\n"))
    assert message == f"load: {path}: the array has shape [0, {2**62}], too large for a tensor"
    st = tmp_path / "e.safetensors"   # 2^62 bytes as BF16, 2^63 once widened to f32 values
    message = load_error(st, st_file({"b": {"dtype": "BF16", "shape": [0, 2**61], "data_offsets": [0, 0]}}))
    assert message == f"load: {st}: tensor 'b' has shape [0, {2**61}], too large for a tensor"
