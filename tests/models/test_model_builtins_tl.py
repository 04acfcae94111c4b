"""The model builtins used from TL source, as programs use them (tensorlogic.run API)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorlogic._core")

import tensorlogic.api as api  # noqa: E402

STDLIB = Path(__file__).resolve().parents[2] / "python" / "tensorlogic" / "stdlib" / "generate.tl"


def _run(source: str, tmp_path) -> api.Result:
    program = tmp_path / "prog.tl"
    program.write_text(source)
    return api.run(str(program))


def test_model_values_from_tl(tiny_bpe_path, tmp_path):
    r = _run(f'''
main {{
    let model = load_model("{tiny_bpe_path}")
    print(model.config.n_layers, model.config.d_model, model.config.tied_output)
    let w = model.blk[1].attn_q.weight
    print(shape(w))
    print(shape(get_tensor(model, "token_embd.weight")))
    print(model.has_tensor("output.weight"))
    let tok = load_tokenizer(model)
    let ids = tokenize(tok, "Hello, world!", true)
    print(detokenize(tok, ids, false))
    print(tok.detokenize(tok.tokenize("<|im_start|>x", false), false))
    print(apply_chat_template(tok, [["user", "Hi"]], true))
    model.close()
    print(model.closed)
}}
''', tmp_path)
    assert r.ok, r.error_text
    lines = r.output.splitlines()
    assert lines[0] == "2 64 true"
    assert lines[1] == "[64, 64]"
    assert lines[3] == "false"
    assert lines[4] == "Hello, world!"
    assert lines[5] == "<|im_start|>x"
    assert lines[6:9] == ["<|im_start|>user", "Hi<|im_end|>", "<|im_start|>assistant"]
    assert lines[-1] == "true"


def test_generation_loop_from_tl(tiny_bpe_path, tmp_path):
    r = _run(f'''
import "{STDLIB}"
main {{
    let model = load_model("{tiny_bpe_path}")
    let tok = load_tokenizer(model)
    let cache = llama_kv_cache(model, 32)
    let ids = tokenize(tok, "The capital of France is", false)
    let stream = text_stream(tok)
    let out = generate(model, cache, ids, 0, 5, token_sampler(0.0), [], stream)
    stream.finish()
    print()
    print(len(out), cache.length == len(ids) + 4)
    let again = generate(model, cache, ids, 0, 5, token_sampler(0.0), [], text_stream(tok))
    print()
    print(again == out)
}}
''', tmp_path)
    assert r.ok, r.error_text
    lines = r.output.splitlines()
    assert "5 true" in lines and lines[-1] == "true"


def test_model_errors_name_the_builtin_and_line(tmp_path):
    r = _run('main {\n    let m = load_model("/no/such/model.gguf")\n}\n', tmp_path)
    assert not r.ok
    assert "no such model file" in r.error_text and ("line 2" in r.error_text or ":2:" in r.error_text)
    r = _run('main {\n    let c = llama_kv_cache(3, 10)\n}\n', tmp_path)
    assert not r.ok and "must be a model" in r.error_text


def test_fused_builtins_from_tl_equal_the_unfused_forms(tiny_bpe_path, tmp_path):
    # rms_norm_linear, swiglu_linear, linear with a residual and rope_kv_write / cache.write_rope,
    # against rms_norm + linear, swiglu + linear + add, rope + cache.write (exact on the CPU).
    r = _run(f'''
main {{
    let model = load_model("{tiny_bpe_path}")
    let cfg = model.config
    let layer = model.blk[0]
    let x = embedding(model.token_embd.weight, [5, 9, 11]) as f32
    let a = rms_norm_linear(x, layer.attn_norm.weight, layer.attn_q.weight, cfg.rms_eps)
    let b = linear(rms_norm(x, layer.attn_norm.weight, cfg.rms_eps), layer.attn_q.weight)
    print(max(abs(a - b)) == 0.0)
    let gu = concat(linear(x, layer.ffn_gate.weight), linear(x, layer.ffn_up.weight), 1)
    let c = swiglu_linear(gu, layer.ffn_down.weight, x)
    let d = linear(silu(linear(x, layer.ffn_gate.weight)) * linear(x, layer.ffn_up.weight), layer.ffn_down.weight) + x
    print(max(abs(c - d)) == 0.0)
    let q = reshape(linear(x, layer.attn_q.weight), [3, cfg.n_heads, cfg.head_dim])
    let k = reshape(linear(x, layer.attn_k.weight), [3, cfg.n_kv_heads, cfg.head_dim])
    let v = reshape(linear(x, layer.attn_v.weight), [3, cfg.n_kv_heads, cfg.head_dim])
    let fused = llama_kv_cache(model, 8)
    let plain = llama_kv_cache(model, 8)
    let rq0 = rope_kv_write(fused, 0, 0, q, k, v, cfg.rope_base)
    let rq = rope_kv_write(fused, 0, 3, q, k, v, cfg.rope_base)
    plain.write(0, 0, rope(k, 0, cfg.rope_base), v)
    plain.write(0, 3, rope(k, 3, cfg.rope_base), v)
    print(max(abs(rq - rope(q, 3, cfg.rope_base))) == 0.0, fused.length)
    print(max(abs(fused.keys(0, 6) - plain.keys(0, 6))) == 0.0, max(abs(fused.values(0, 6) - plain.values(0, 6))) == 0.0)
    let rq2 = fused.write_rope(1, 0, q, k, v, cfg.rope_base)
    print(max(abs(rq2 - rope(q, 0, cfg.rope_base))) == 0.0)
}}
''', tmp_path)
    assert r.ok, r.error_text
    assert r.output.splitlines() == ["true", "true", "true 6", "true true", "true"]


def test_generate_with_a_json_schema_sampler_from_tl(tiny_bpe_path, tmp_path):
    # constrained decoding in TL: json_sampler wraps a token_sampler; generate's loop is unchanged.
    # The tiny model's weights are random, so only the mask makes its output JSON.
    import json

    schema = ('{"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 30]}}, '
              '"required": ["ok", "n"], "additionalProperties": false}')
    outputs = []
    for seed in (1, 2, 3):
        r = _run(f'''
import "{STDLIB}"
main {{
    let model = load_model("{tiny_bpe_path}")
    let tok = load_tokenizer(model)
    let cache = llama_kv_cache(model, 256)
    let ids = tokenize(tok, "Answer:", false)
    let sampler = json_sampler(token_sampler(1.0, 0, 1.0, {seed}), tok, {json.dumps(schema)})
    let stream = text_stream(tok)
    let out = generate(model, cache, ids, 0, 200, sampler, tok.eog_ids, stream)
    stream.finish()
    print()
    print(sampler.done)
}}
''', tmp_path)
        assert r.ok, r.error_text
        text, done = r.output.rstrip("\n").rsplit("\n", 1)
        assert done == "true"
        value = json.loads(text)
        assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and value["n"] in (1, 2, 30)
        outputs.append(text)
    plain = _run(f'''
import "{STDLIB}"
main {{
    let model = load_model("{tiny_bpe_path}")
    let tok = load_tokenizer(model)
    let out = generate(model, llama_kv_cache(model, 64), tokenize(tok, "Answer:", false), 0, 20,
                       token_sampler(1.0, 0, 1.0, 1), [], text_stream(tok))
}}
''', tmp_path)
    with pytest.raises(ValueError):
        json.loads(plain.output)  # without the mask: not JSON
    bad = _run(f'''
main {{
    let tok = load_tokenizer(load_model("{tiny_bpe_path}"))
    json_sampler(token_sampler(0.0), tok, "{{\\"type\\": \\"string\\", \\"format\\": \\"date\\"}}")
}}
''', tmp_path)
    assert not bad.ok and "'format' is not supported" in bad.error_text


def test_generate_with_a_relation_as_the_constraint(tiny_bpe_path, tmp_path):
    # tokens allowed where a logic query holds: after id A only ids B with Next(A, B); the chain
    # must end at 30, which has no successor (then only the end of generation may come)
    outs = []
    for seed in (1, 2, 3):
        r = _run(f'''
import "{STDLIB}"
relation Step(a: tok)
relation Next(a: tok, b: tok)
for i in range(20, 31) {{ Step(i) }}
Next(-1, 20)
Next(A, B) <- Step(A), Step(B), B == A + 1
Next(A, B) <- Step(A), Step(B), B == A + 3
main {{
    let model = load_model("{tiny_bpe_path}")
    let tok = load_tokenizer(model)
    let sampler = relation_sampler(token_sampler(1.0, 0, 1.0, {seed}), tok, "Next", -1)
    let out = generate(model, llama_kv_cache(model, 64), tokenize(tok, "Go:", false), 0, 40, sampler,
                       tok.eog_ids, text_stream(tok))
    print()
    print(out)
    print(sampler.done)
}}
''', tmp_path)
        assert r.ok, r.error_text
        lines = r.output.strip().splitlines()
        ids = [int(x) for x in lines[-2].strip("[]").split(",")]
        assert lines[-1] == "true"
        chain, end = ids[:-1], ids[-1]
        assert chain[0] == 20 and end not in range(20, 31)  # then the end of generation
        assert all(b - a in (1, 3) for a, b in zip(chain, chain[1:])), ids
        assert chain[-1] == 30
        outs.append(ids)
    assert len({tuple(o) for o in outs}) > 1  # sampled: different chains, all of them allowed
    bad = _run(f'''
relation Next(a: tok, b: tok, c: tok)
Next(1, 2, 3)
main {{
    relation_sampler(token_sampler(0.0), load_tokenizer(load_model("{tiny_bpe_path}")), "Next", 1)
}}
''', tmp_path)
    assert not bad.ok and "must relate two token ids" in bad.error_text
