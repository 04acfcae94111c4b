"""The compiled decode step of stdlib/generate.tl (`@compile fn model_decode_step`) on the real SmolLM2:
every replayed step's logits equal the eager step's bitwise and the greedy ids equal the reference,
also with poison, delay and no caching, and with one op per command buffer; a replay after the model
was closed or the KV cache reallocated is refused, never run on released memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

core = pytest.importorskip("tensorlogic._core")

import tensorlogic  # noqa: E402
from tensorlogic.builtins.kvcache import KVCache  # noqa: E402
from tensorlogic.apps.llm_session import LlmSession  # noqa: E402

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__)))

# Runs `steps` decode steps twice from one prefill, compiled and eager, on two caches; prints the
# greedy ids and whether every step's logits were bitwise equal.
SCRIPT = r"""
import json, sys
import numpy as np
from tensorlogic.builtins.kvcache import KVCache
from tensorlogic.apps.llm_session import LlmSession

path, prompt, steps = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
with LlmSession(path, context=128) as s:
    cfg = s.config
    fns = s.interp.functions
    caches = [KVCache(cfg.n_layers, 128, cfg.n_kv_heads, cfg.head_dim, "f32") for _ in range(2)]
    call = s.interp.call_value
    logits = [call(fns["llama_last_logits"], [s.model, call(fns["llama_forward"], [s.model, c, prompt, 0])])
              for c in caches]
    ids, equal = [], True
    pos = len(prompt)
    for _ in range(steps):
        tok = int(np.argmax(logits[0].numpy().reshape(-1)))
        ids.append(tok)
        logits = [call(fns["model_decode_step"], [s.model, caches[0], tok, pos]),
                  call(fns["llama_last_logits"], [s.model, call(fns["llama_forward"], [s.model, caches[1], [tok], pos])])]
        a, b = (l.numpy() for l in logits)
        equal = equal and a.tobytes() == b.tobytes()
        pos += 1
    cf = fns["model_decode_step"].impl
    print(json.dumps({"ids": ids, "equal": equal, "records": cf.records, "replays": cf.replays}))
    for c in caches:
        c.release()
"""


def _run(smollm2_path, prompt: list[int], steps: int, **env) -> dict:
    e = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(smollm2_path), json.dumps(prompt), str(steps)],
                          capture_output=True, text=True, env=e, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _prompt(reference, name="raw_capital"):
    return next(p for p in reference["prompts"] if p["name"] == name)


def test_replayed_decode_equals_eager_bitwise_and_the_reference(smollm2_path, reference):
    p = _prompt(reference)
    n = 24
    r = _run(smollm2_path, p["prompt_ids"], n)
    assert r["equal"]
    assert r["ids"] == p["greedy_ids"][:n]
    assert r["records"] == 1 and r["replays"] == n - 1


@pytest.mark.parametrize("env", [
    dict(TL_DEBUG_POISON="1", TL_DEBUG_DELAY_US="200", TL_NO_CACHE="1"),
    dict(TL_OPS_PER_COMMAND_BUFFER="1"),
], ids=["poison-delay-nocache", "one-op-per-command-buffer"])
def test_replayed_decode_under_debug_modes(smollm2_path, reference, env):
    p = _prompt(reference)
    n = 8
    r = _run(smollm2_path, p["prompt_ids"], n, **env)
    assert r["equal"] and r["ids"] == p["greedy_ids"][:n] and r["replays"] == n - 1


def _decode_recording(session: LlmSession):
    """The recording of greedy generation's step (generate.tl's model_decode_greedy: the position
    is its scalar input, the id a tensor [1] input)."""
    cf = session.interp.functions["model_decode_greedy"].impl
    entries = [e for e in cf.entries.values() if hasattr(e, "recording")]
    assert len(entries) == 1
    return cf, entries[0].recording


def _id_tensor(i: int):
    return core.from_numpy(np.array([i], dtype=np.int64))


def test_replay_is_refused_after_the_kv_cache_is_reallocated(smollm2_path, reference):
    p = _prompt(reference)
    with LlmSession(smollm2_path, context=64) as s:
        first = s.generate(p["prompt_ids"], 4, stop_at_eog=False)
        cf, rec = _decode_recording(s)
        assert cf.replays >= 2
        cfg = s.config
        s.cache.release()
        for i in range(cfg.n_layers):  # the same cache object on new buffers
            s.cache._allocate(i, 64, (cfg.n_kv_heads, cfg.head_dim))
        with pytest.raises(core.ReplayRefused, match="released"):
            rec.replay([float(len(p["prompt_ids"]))], [_id_tensor(first.ids[-1])])
        s.cached_ids = []
        again = s.generate(p["prompt_ids"], 4, stop_at_eog=False)  # records anew, right ids
        assert again.ids == first.ids == p["greedy_ids"][:4]
        assert cf.records == 2


def test_replay_is_refused_after_the_model_is_closed(smollm2_path, reference):
    p = _prompt(reference)
    s = LlmSession(smollm2_path, context=64)
    s.generate(p["prompt_ids"], 3, stop_at_eog=False)
    _, rec = _decode_recording(s)
    cache = s.cache
    s.model.close()
    with pytest.raises(core.ReplayRefused, match="released"):
        rec.replay([float(len(p["prompt_ids"]))], [_id_tensor(1)])
    cache.release()
    s.close()
    s.interp.close()
    core.synchronize()
    assert isinstance(cache, KVCache)
