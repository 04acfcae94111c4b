"""TL model builtins at the Python level: weights upload byte for byte, model values expose
config and tensors and release them on close, the KV cache writes in place, samplers behave."""
from __future__ import annotations

import gc

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

from tensorlogic.builtins import models as mb  # noqa: E402
from tensorlogic.builtins import tokenizers as tb  # noqa: E402
from tensorlogic.builtins.convert import BuiltinArgError  # noqa: E402
from tensorlogic.builtins.kvcache import KVCache  # noqa: E402
from tensorlogic.builtins.sampling import SamplerValue  # noqa: E402
from tensorlogic.models.gguf_file import GGUFFile  # noqa: E402
from tensorlogic.models.testing import write_tiny_llama  # noqa: E402

WEIGHT_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("weights")
    out = {}
    for wt in WEIGHT_TYPES:
        k_quant = wt.endswith("_K")
        out[wt] = write_tiny_llama(d / f"{wt}.gguf", weight_type=wt, d_model=256 if k_quant else 64,
                                   d_ff=512 if k_quant else 128, embedding_type="Q8_0" if k_quant else None)
    return out


@pytest.mark.parametrize("wt", WEIGHT_TYPES)
def test_weights_upload_as_stored(tiny_models, wt):
    path = tiny_models[wt]
    model = mb.load_model_value(str(path))
    g = GGUFFile(path)
    assert model.fused_groups == ["attn_qkv", "ffn_gate_up"]
    # ffn_down is uploaded alone; attn_k and ffn_up are row views of the stacked matrices
    for name in ("blk.1.ffn_down.weight", "blk.1.attn_k.weight", "blk.0.ffn_up.weight"):
        t = model.get_tensor(name)
        info = g.tensors[name]
        assert tuple(t.shape) == info.shape
        if wt == "F32":
            assert t.dtype == "f32"
            np.testing.assert_array_equal(t.numpy(), g.tensor_array(name))
        elif wt == "F16":
            assert t.dtype == "f16"
            np.testing.assert_array_equal(t.numpy(), g.tensor_array(name))
        elif wt == "BF16":
            assert t.dtype == "bf16"
            np.testing.assert_array_equal(t.numpy(), g.dequantize(name))
        else:
            assert t.dtype == wt.lower()
            np.testing.assert_array_equal(t.numpy(), np.asarray(g.tensor_bytes(name)))  # byte for byte
    qkv = model.get_tensor("blk.1.attn_qkv.weight")
    assert qkv.shape[0] == sum(g.tensors[f"blk.1.attn_{p}.weight"].shape[0] for p in "qkv")
    assert model.get_tensor("output_norm.weight").dtype == "f32"
    model.close()


def test_f32_and_f16_modes_dequantize(tiny_models):
    g = GGUFFile(tiny_models["Q4_1"])
    expected = g.dequantize("blk.0.attn_q.weight")
    m32 = mb.load_model_value(str(tiny_models["Q4_1"]), "f32")
    t = m32.get_tensor("blk.0.attn_q.weight")
    assert t.dtype == "f32"
    np.testing.assert_array_equal(t.numpy(), expected)
    m16 = mb.load_model_value(str(tiny_models["Q4_1"]), "f16")
    t16 = m16.get_tensor("blk.0.attn_q.weight")
    assert t16.dtype == "f16"
    np.testing.assert_array_equal(t16.numpy(), expected.astype(np.float16))


def test_model_fields_and_close_releases_memory(tiny_bpe_path):
    gc.collect()
    core.synchronize()
    before = core.memory_stats()["live_bytes"]
    model = mb.load_model_value(str(tiny_bpe_path))
    assert core.memory_stats()["live_bytes"] > before
    cfg = model.tl_get_field("config")
    assert (cfg.tl_get_field("n_layers"), cfg.tl_get_field("d_model"), cfg.tl_get_field("n_kv_heads")) == (2, 64, 2)
    assert cfg.tl_get_field("tied_output") is True
    blk = model.tl_get_field("blk")
    assert isinstance(blk, list) and len(blk) == 2
    w = blk[1].tl_get_field("attn_q").tl_get_field("weight")
    assert w is model.get_tensor("blk.1.attn_q.weight")
    assert model.tl_get_field("token_embd").tl_get_field("weight") is model.get_tensor("token_embd.weight")
    assert model.get_tensor("output.weight") is model.get_tensor("token_embd.weight")  # tied
    with pytest.raises(BuiltinArgError, match="has no tensor 'nope'"):
        model.get_tensor("nope")
    with pytest.raises(AttributeError):
        blk[0].tl_get_field("attn_zz")
    del w
    model.close()
    assert model.tl_get_field("closed") is True
    with pytest.raises(BuiltinArgError, match="closed"):
        model.get_tensor("token_embd.weight")
    with pytest.raises(BuiltinArgError, match="closed"):
        blk[0].tl_get_field("attn_q")
    del blk, cfg
    gc.collect()
    core.synchronize()
    assert core.memory_stats()["live_bytes"] == before


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(BuiltinArgError, match="no such model file"):
        mb.load_model_value(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 16)
    with pytest.raises(BuiltinArgError) as e:
        mb.load_model_value(str(bad))
    assert "\n" not in str(e.value) and "bad.gguf" in str(e.value)


def test_tokenizer_builtins(tiny_bpe_path):
    model = mb.load_model_value(str(tiny_bpe_path))
    tok = tb.load_tokenizer_value(model)
    assert tb.load_tokenizer_value(str(tiny_bpe_path)).tok.tokens == tok.tok.tokens
    ids = tok.tokenize("Hello, world!", True)
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert tok.detokenize(ids) == "Hello, world!"
    assert tok.detokenize(core.from_numpy(np.array(ids, dtype=np.int64))) == "Hello, world!"
    assert tok.tl_call_method("detokenize_single", [ids[0]]) == tok.detokenize(ids[:1])
    prompt = tok.apply_chat_template([["user", "Hi"]], True)
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.tl_get_field("eog_ids") == [0, 2]
    with pytest.raises(BuiltinArgError, match="outside the vocabulary"):
        tok.detokenize([10 ** 6])
    with pytest.raises(BuiltinArgError, match="message 0"):
        tok.apply_chat_template([["user"]], True)


def test_kv_cache_writes_in_place_and_views_prefix():
    cache = KVCache(2, 8, 2, 4, "f32")
    buf = cache.k[1]
    rng = np.random.default_rng(0)
    k1, v1 = rng.standard_normal((3, 2, 4)).astype(np.float32), rng.standard_normal((3, 2, 4)).astype(np.float32)
    cache.write(1, 0, core.from_numpy(k1), core.from_numpy(v1))
    k2, v2 = rng.standard_normal((1, 2, 4)).astype(np.float32), rng.standard_normal((1, 2, 4)).astype(np.float32)
    cache.tl_call_method("append", [1, core.from_numpy(k2), core.from_numpy(v2)])
    assert cache.k[1] is buf  # no reallocation
    np.testing.assert_array_equal(cache.keys(1).numpy(), np.concatenate([k1, k2]))
    np.testing.assert_array_equal(cache.values(1, 2).numpy(), v1[:2])
    # rewriting from position 1 truncates the logical length
    cache.write(1, 1, core.from_numpy(k2), core.from_numpy(v2))
    assert cache.lengths[1] == 2
    np.testing.assert_array_equal(cache.keys(1).numpy(), np.concatenate([k1[:1], k2]))
    with pytest.raises(BuiltinArgError, match="would leave a gap"):
        cache.write(1, 5, core.from_numpy(k2), core.from_numpy(v2))
    with pytest.raises(BuiltinArgError, match="full"):
        cache.write(0, 0, core.from_numpy(np.zeros((9, 2, 4), np.float32)), core.from_numpy(np.zeros((9, 2, 4), np.float32)))
    with pytest.raises(BuiltinArgError, match="layer 2 is out of range"):
        cache.keys(2)
    with pytest.raises(BuiltinArgError, match=r"holds \[\?, 2, 4\]"):
        cache.write(0, 0, core.from_numpy(np.zeros((1, 3, 4), np.float32)), core.from_numpy(np.zeros((1, 3, 4), np.float32)))


def test_growable_kv_cache_keeps_contents():
    cache = KVCache(1, None, dtype="f32")
    rows = []
    for i in range(300):
        k = np.full((1, 1, 2), i, np.float32)
        rows.append(k)
        cache.tl_call_method("append", [0, core.from_numpy(k), core.from_numpy(k)])
    assert cache.k[0].shape[0] >= 300
    np.testing.assert_array_equal(cache.tl_call_method("get_k", [0]).numpy(), np.concatenate(rows))


def test_sampler():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    t = core.from_numpy(logits.reshape(1, -1))
    assert SamplerValue.seeded(0.0, 0, 1.0, None).sample(t) == 1
    assert SamplerValue.seeded(1.0, 1, 1.0, 0).sample(t) == 1  # top-1 is greedy
    assert SamplerValue.seeded(1.0, 0, 0.01, 0).sample(t) == 1  # tiny nucleus is greedy
    draws = [SamplerValue.seeded(1.0, 2, 1.0, 7).sample(t) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same draw
    s = SamplerValue.seeded(1.0, 2, 1.0, 3)
    seen = {s.sample(t) for _ in range(200)}
    assert seen == {1, 2}  # top-k=2 never picks the others
    with pytest.raises(BuiltinArgError, match="top_p"):
        SamplerValue.seeded(1.0, 0, 0.0, None)
    with pytest.raises(BuiltinArgError, match="temperature"):
        SamplerValue.seeded(-1.0, 0, 1.0, None)


def test_load_tokenizer_from_tokenizer_json(tiny_bpe_path, tmp_path):
    import json

    gguf_tok = tb.load_tokenizer_value(str(tiny_bpe_path))
    gguf_tok.tok._hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "chat_template": "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"}))
    tok = tb.load_tokenizer_value(str(tmp_path / "tokenizer.json"))
    text = "Hello, world! 😀 café <|im_end|>"
    assert tok.tokenize(text, False) == gguf_tok.tokenize(text, False)
    ids = tok.tokenize(text, False)
    assert tok.detokenize(ids) == text
    assert tok.tok.eos_id == gguf_tok.tok.eos_id == 2 and 2 in tok.tok.eog_ids
    assert tok.apply_chat_template([["user", "a"], ["assistant", "b"]], False) == "[a][b]"
    dec = tok.tok.stream_decoder(skip_special=True)
    assert "".join(dec.push(i) for i in ids) + dec.flush() == "Hello, world! 😀 café "
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BuiltinArgError, match="not a valid tokenizer.json"):
        tb.load_tokenizer_value(str(tmp_path / "broken.json"))
