"""GGUF parsing: agreement with the `gguf` package's reader, and one clear ModelError for every
kind of broken file (never another exception, never a large allocation)."""
from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from tensorlogic.models.errors import ModelError
from tensorlogic.models.gguf_file import GGUFFile
from tensorlogic.models.model_config import model_config
from tensorlogic.models.testing import write_tiny_llama

T = gguf.GGUFValueType


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def build_gguf(kvs=(), tensors=(), *, magic=b"GGUF", version=3, n_tensors=None, n_kv=None,
               alignment=32, data=b"") -> bytes:
    """GGUF bytes by hand: kvs [(key, type, raw value bytes)], tensors [(name, dims, type, offset)]."""
    out = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    for key, vtype, raw in kvs:
        out += _str(key) + struct.pack("<I", vtype) + raw
    for name, dims, ttype, offset in tensors:
        out += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def _write(tmp_path, raw: bytes, name="m.gguf"):
    p = tmp_path / name
    p.write_bytes(raw)
    return p


def _error(path) -> str:
    with pytest.raises(ModelError) as e:
        g = GGUFFile(path)
        g.check_supported()
        model_config(g)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


ARCH = ("general.architecture", T.STRING, _str("llama"))


def test_parse_matches_gguf_reader(tiny_bpe_path):
    g = GGUFFile(tiny_bpe_path)
    r = gguf.GGUFReader(tiny_bpe_path)
    assert [t.name for t in r.tensors] == list(g.tensors)
    for t in r.tensors:
        info = g.tensors[t.name]
        assert info.offset == t.data_offset and info.nbytes == t.n_bytes
        assert list(info.ggml_shape) == [int(d) for d in t.shape]
        np.testing.assert_array_equal(g.tensor_bytes(t.name).reshape(-1),
                                      np.asarray(t.data).reshape(-1).view(np.uint8))
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        ours = g.metadata[key]
        ours = ours.tolist() if isinstance(ours, np.ndarray) else ours
        theirs = field.contents()
        assert ours == pytest.approx(theirs) if isinstance(theirs, float) else ours == theirs, key


def test_real_model_metadata_and_config(smollm2_path):
    g = GGUFFile(smollm2_path)
    cfg = model_config(g)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff) == (30, 576, 9, 3, 64, 1536)
    assert cfg.vocab_size == 49152 and cfg.tied_output and cfg.rope_base == 100000.0
    assert abs(cfg.rms_eps - 1e-5) < 1e-9
    types = {t.type_name for t in g.tensors.values()}
    assert types == {"Q4_1", "Q8_0", "F32"}
    assert g.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
    assert g.tensors["blk.0.ffn_down.weight"].matrix_shape == (576, 1536)
    assert g.tensor_bytes("token_embd.weight").shape == (49152, 576 // 32 * 34)


def test_dequantize_matches_gguf_package(tmp_path):
    p = write_tiny_llama(tmp_path / "q.gguf", weight_type="Q4_1")
    g = GGUFFile(p)
    r = gguf.GGUFReader(p)
    t = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight")
    expected = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
    np.testing.assert_array_equal(g.tensor_array("blk.0.attn_q.weight"), expected)


def test_truncated_at_every_cut_point(tmp_path, tiny_bpe_path):
    raw = tiny_bpe_path.read_bytes()
    g = GGUFFile(tiny_bpe_path)
    end_of_data = max(t.offset + t.nbytes for t in g.tensors.values())
    header_end = g.data_start
    cuts = sorted(set(list(range(0, min(header_end, 400))) + list(range(400, header_end, 97))
                      + list(range(header_end, end_of_data, 4099)) + [header_end - 1, end_of_data - 1]))
    p = tmp_path / "cut.gguf"
    for cut in cuts:
        p.write_bytes(raw[:cut])
        msg = _error(p)
        assert any(w in msg for w in ("truncated", "only", "past the end", "remain")), (cut, msg)


def test_bad_magic(tmp_path):
    msg = _error(_write(tmp_path, build_gguf(magic=b"GGML", kvs=[ARCH])))
    assert "bad magic" in msg


def test_not_a_gguf_at_all(tmp_path):
    assert "bad magic" in _error(_write(tmp_path, b"hello, this is a text file, not a model" * 3))
    assert "only 5 bytes" in _error(_write(tmp_path, b"GGUF\3"))
    assert "only 0 bytes" in _error(_write(tmp_path, b""))


def test_missing_file_and_directory(tmp_path):
    assert "no such file" in _error(tmp_path / "absent.gguf")
    with pytest.raises(ModelError, match="not a file"):
        GGUFFile(tmp_path)


@pytest.mark.parametrize("version,needle", [(1, "unsupported GGUF version 1"), (4, "unsupported GGUF version 4"),
                                            (3 << 16, "big-endian")])
def test_wrong_version(tmp_path, version, needle):
    assert needle in _error(_write(tmp_path, build_gguf(version=version, kvs=[ARCH])))


def test_absurd_counts_fail_before_allocating(tmp_path):
    assert "claims 1152921504606846976 tensors" in _error(
        _write(tmp_path, build_gguf(kvs=[ARCH], n_tensors=1 << 60)))
    assert "metadata entries" in _error(_write(tmp_path, build_gguf(kvs=[ARCH], n_kv=1 << 62)))
    huge_string = ("general.name", T.STRING, struct.pack("<Q", 1 << 61) + b"x")
    assert "truncated" in _error(_write(tmp_path, build_gguf(kvs=[ARCH, huge_string])))
    huge_array = ("tokenizer.ggml.tokens", T.ARRAY, struct.pack("<IQ", T.STRING, 1 << 50))
    assert "claims 1125899906842624 elements" in _error(_write(tmp_path, build_gguf(kvs=[ARCH, huge_array])))
    huge_f32 = ("tokenizer.ggml.scores", T.ARRAY, struct.pack("<IQ", T.FLOAT32, 1 << 40))
    assert "elements" in _error(_write(tmp_path, build_gguf(kvs=[ARCH, huge_f32])))


def test_deeply_nested_arrays_are_refused(tmp_path):
    raw = b"".join(struct.pack("<IQ", T.ARRAY, 1) for _ in range(200)) + struct.pack("<IQ", T.UINT8, 0)
    assert "nests arrays" in _error(_write(tmp_path, build_gguf(kvs=[ARCH, ("x", T.ARRAY, raw[4 + 8:])]) + b"\0" * 64))


def test_unknown_value_type(tmp_path):
    assert "unknown value type 77" in _error(_write(tmp_path, build_gguf(kvs=[("k", 77, b"\0" * 8)])))


def test_duplicate_key_and_tensor(tmp_path):
    assert "appears twice" in _error(_write(tmp_path, build_gguf(kvs=[ARCH, ARCH])))
    t = ("w", (32,), 0, 0)
    assert "appears twice" in _error(_write(tmp_path, build_gguf(kvs=[ARCH], tensors=[t, t], data=b"\0" * 256)))


@pytest.mark.parametrize("dims,needle", [((), "0 dimensions"), ((2, 2, 2, 2, 2), "5 dimensions"),
                                         ((0, 4), "dimension 0"), ((1 << 40, 1 << 40), "absurd shape")])
def test_bad_dimensions(tmp_path, dims, needle):
    raw = build_gguf(kvs=[ARCH], tensors=[("w", dims, 0, 0)], data=b"\0" * 64)
    assert needle in _error(_write(tmp_path, raw))


def test_unknown_tensor_type_names_tensor(tmp_path):
    msg = _error(_write(tmp_path, build_gguf(kvs=[ARCH], tensors=[("blk.0.w", (32,), 99, 0)], data=b"\0" * 64)))
    assert "'blk.0.w'" in msg and "unknown type code 99" in msg


def test_unsupported_tensor_type_names_tensor_and_type(tmp_path):
    qt = gguf.GGMLQuantizationType.IQ2_XXS
    block, size = gguf.GGML_QUANT_SIZES[qt]
    raw = build_gguf(kvs=[ARCH], tensors=[("blk.3.ffn_up.weight", (block,), qt, 0)], data=b"\0" * size)
    msg = _error(_write(tmp_path, raw))
    assert "'blk.3.ffn_up.weight'" in msg and "IQ2_XXS" in msg and "not supported" in msg


def test_row_not_multiple_of_block(tmp_path):
    raw = build_gguf(kvs=[ARCH], tensors=[("w", (20, 2), gguf.GGMLQuantizationType.Q8_0, 0)], data=b"\0" * 64)
    assert "not a multiple of the block size 32" in _error(_write(tmp_path, raw))


def test_data_offsets(tmp_path):
    past = build_gguf(kvs=[ARCH], tensors=[("w", (64,), 0, 1 << 20)], data=b"\0" * 256)
    assert "runs past the end" in _error(_write(tmp_path, past))
    misaligned = build_gguf(kvs=[ARCH], tensors=[("w", (8,), 0, 4)], data=b"\0" * 256)
    assert "not aligned" in _error(_write(tmp_path, misaligned))
    overlap = build_gguf(kvs=[ARCH], tensors=[("a", (16,), 0, 0), ("b", (16,), 0, 32)], data=b"\0" * 256)
    assert "overlap" in _error(_write(tmp_path, overlap))
    bad_align = build_gguf(kvs=[ARCH, ("general.alignment", T.UINT32, struct.pack("<I", 24))])
    assert "power of two" in _error(_write(tmp_path, bad_align))


def test_missing_required_metadata(tmp_path):
    assert "missing metadata key general.architecture" in _error(_write(tmp_path, build_gguf()))
    assert "missing metadata key llama.embedding_length" in _error(_write(tmp_path, build_gguf(kvs=[ARCH])))
    wrong_type = ("general.architecture", T.UINT32, struct.pack("<I", 7))
    assert "should be a string" in _error(_write(tmp_path, build_gguf(kvs=[wrong_type])))
    other = ("general.architecture", T.STRING, _str("mamba"))
    assert ("architecture 'mamba' is not supported (supported: gemma2, gemma3, granite, llama, olmo2, phi3, "
            "qwen2, qwen2moe, qwen3, qwen3moe, smollm3, stablelm)") in _error(_write(tmp_path, build_gguf(kvs=[other])))


def test_missing_or_misshapen_tensor(tmp_path):
    from tensorlogic.models.testing import TinyLlamaSpec

    good = write_tiny_llama(tmp_path / "good.gguf")
    g = GGUFFile(good)
    raw = bytearray(good.read_bytes())
    # rename blk.1.ffn_up.weight to blk.1.ffn_XX.weight (same length): "missing tensor"
    i = raw.find(b"blk.1.ffn_up.weight")
    raw[i:i + 19] = b"blk.1.ffn_XX.weight"
    assert "missing tensor blk.1.ffn_up.weight" in _error(_write(tmp_path, bytes(raw), "renamed.gguf"))
    bad = write_tiny_llama(tmp_path / "bad.gguf", TinyLlamaSpec(), n_kv_heads=4)
    raw = bytearray(bad.read_bytes())
    # claim 2 KV heads while the K/V weights have 4: a shape mismatch that names the tensor
    key = b"llama.attention.head_count_kv"
    i = raw.find(key) + len(key) + 4
    raw[i:i + 4] = struct.pack("<I", 2)
    msg = _error(_write(tmp_path, bytes(raw), "heads.gguf"))
    assert "blk.0.attn_k.weight has shape [64, 64], expected [32, 64]" in msg
    assert g.tensors  # the good file parsed


def test_inconsistent_heads(tmp_path):
    p = write_tiny_llama(tmp_path / "h.gguf", n_heads=4, n_kv_heads=2)
    raw = bytearray(p.read_bytes())
    key = b"llama.attention.head_count_kv"
    i = raw.find(key) + len(key) + 4
    raw[i:i + 4] = struct.pack("<I", 3)
    assert "3 KV heads do not divide 4 query heads" in _error(_write(tmp_path, bytes(raw), "h3.gguf"))


def test_closed_file_refuses_access(tiny_bpe_path):
    g = GGUFFile(tiny_bpe_path)
    view = g.tensor_bytes("output_norm.weight")
    g.close()
    assert view.sum() > 0  # earlier views stay valid
    with pytest.raises(ModelError, match="closed"):
        g.tensor_bytes("output_norm.weight")


def test_random_header_corruption_gives_model_error_or_loads(tmp_path, tiny_bpe_path):
    """Flip random bytes of the header: opening the file, reading its config and building its
    tokenizer either works or raises ModelError, never anything else."""
    from tensorlogic.models.tokenizer import Tokenizer

    raw = tiny_bpe_path.read_bytes()
    header_end = GGUFFile(tiny_bpe_path).data_start
    rng = np.random.default_rng(1234)
    p = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        data = bytearray(raw)
        for pos in rng.integers(0, header_end, size=rng.integers(1, 4)):
            data[pos] = int(rng.integers(0, 256))
        p.write_bytes(bytes(data))
        try:
            g = GGUFFile(p)
            g.check_supported()
            model_config(g)
            Tokenizer.from_gguf(g)
            outcomes["ok"] += 1
        except ModelError as e:
            assert "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0
