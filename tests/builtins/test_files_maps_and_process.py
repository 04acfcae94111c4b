"""Files (text, .npy, .safetensors), map values, clock() and args(), and printing values that
contain themselves."""
from __future__ import annotations

import json
import struct
import textwrap

import numpy as np

import tensorlogic


def run(src: str, **kw):
    result = tensorlogic.run(textwrap.dedent(src), filename="p.tl", **kw)
    assert result.error is None, result.error_text
    return result


def test_text_files_round_trip(tmp_path):
    path = tmp_path / "t.txt"
    result = run(f'write_text("{path}", "héllo\\nworld")\nprint(read_text("{path}"))\n')
    assert result.output == "héllo\nworld\n" and path.read_text(encoding="utf-8") == "héllo\nworld"


def test_npy_files_are_numpy_files(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.arange(6, dtype=np.int64).reshape(2, 3))
    out = tmp_path / "out.npy"
    run(f'let t = load("{path}")\nsave(t * 2, "{out}")\n')
    np.testing.assert_array_equal(np.load(out), np.arange(6).reshape(2, 3) * 2)


def test_safetensors_files_follow_the_format(tmp_path):
    path = tmp_path / "w.safetensors"
    result = run(f'save(map(["w", "b"], [eye(2), [1.0, 2.0]]), "{path}")\n'
                 f'let back = load("{path}")\nprint(keys(back), back["b"])\n')
    assert result.output == '["w", "b"] [1., 2.]\n'
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    assert header["w"] == {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    w = np.frombuffer(data[8 + size:8 + size + 16], "<f4").reshape(2, 2)
    np.testing.assert_array_equal(w, np.eye(2))


def test_file_errors_are_one_line_errors(tmp_path):
    for src in (f'read_text("{tmp_path}/missing.txt")', f'load("{tmp_path}/x.bin")', f'save(1.0, "{tmp_path}/x.txt")'):
        result = tensorlogic.run(src, filename="p.tl")
        assert result.error is not None and "\n" not in result.error.message, src


def test_maps_read_write_iterate_and_print():
    result = run("""
        let m = map()
        m["a"] = 1
        m[2] = "two"
        for k in m { print(k) }
        print(m, len(m), has_key(m, "a"), m["a"], values(m))
        print(remove(m, "a"), m)""")
    assert result.output == 'a\n2\n{"a": 1, 2: "two"} 2 true 1 [1, "two"]\n1 {2: "two"}\n'
    missing = tensorlogic.run('let m = map()\nprint(m["x"])\n', filename="p.tl")
    assert 'no key "x" in the map' in missing.error.message


def test_clock_measures_elapsed_seconds():
    result = run("let t0 = clock()\nlet x = sum(ones([100, 100]))\nlet dt = clock() - t0\nprint(dt >= 0.0, dt < 60.0)\n")
    assert result.output == "true true\n"


def test_a_struct_or_array_that_contains_itself_prints_a_marker():
    result = run("""
        struct Node { name: string, next: any }
        let n = Node { name: "x", next: 0 }
        n.next = n
        let xs = [1]
        append(xs, xs)
        print(n, xs)""")
    assert result.output == 'Node { name: "x", next: <cycle> } [1, <cycle>]\n'


def test_format_specs_positions_scientific_hex_zero_padding_and_array_precision():
    result = run("""
        print("{0} {1} {0}", "a", "b")
        print("{:e} {:x} {:08.3} {:.2} {:>6}|{:<4}|", 1234.5, 255, 3.14159, [1.0, 2.5], "ab", 7)
        print("{:.3}", [[1.0, 2.0], [3.0, 4.0]])
        print("{:+.1e} {:X} {:b} {:5}", 0.00012, 255, 5, 1.5)""")
    assert result.output == ("a b a\n1.234500e+03 ff 0003.142 [1.00, 2.50]     ab|7   |\n"
                             "[[1.000, 2.000],\n [3.000, 4.000]]\n+1.2e-04 FF 101   1.5\n")
    bad = tensorlogic.run('print("{:x}", 2.5)', filename="p.tl")
    assert "needs an integer" in bad.error.message
