"""GGUF metadata with the wrong value type (issue 14.7): `llama.attention.key_length = "xx"` or
`rope.scaling.factor = "abc"` gave a Python traceback in `tl model info`. Every key the loader
reads, set to a value of every wrong type, is one ModelError line naming the file (a fuzzer over
keys x values), and the CLI prints one line."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gguf import GGUFValueType

from tensorlogic.models.errors import ModelError
from tensorlogic.models.gguf_file import GGUFFile
from tensorlogic.models.info import model_info
from tensorlogic.models.model_config import LlamaConfig
from tensorlogic.models.testing import TinyLlamaSpec, write_tiny_llama
from tensorlogic.models.tokenizer import Tokenizer

KEYS = ["general.architecture", "general.name", "llama.block_count", "llama.embedding_length",
        "llama.attention.head_count", "llama.feed_forward_length", "llama.context_length",
        "llama.attention.head_count_kv", "llama.attention.key_length", "llama.rope.dimension_count",
        "llama.rope.scaling.type", "llama.rope.scaling.factor", "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon", "llama.vocab_size", "tokenizer.ggml.model",
        "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.token_type",
        "tokenizer.ggml.scores", "tokenizer.chat_template"]
BAD_VALUES = ["xx", "", 3.5, -7, 0, True, [1, 2], ["a", "b"], np.array([1.5, 2.5]), None, 2**40]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("meta") / "tiny.gguf")


def _load_everything(g: GGUFFile):
    from tensorlogic.models import info as info_mod
    real = info_mod.GGUFFile
    info_mod.GGUFFile = lambda path: g  # model_info on this very (mutated) file
    try:
        text = info_mod.format_info(info_mod.model_info(g.path))
        assert "\n" in text
    finally:
        info_mod.GGUFFile = real
    cfg = LlamaConfig.from_gguf(g)
    tok = Tokenizer.from_gguf(g)
    from tensorlogic.models.chat_template import template_for
    template_for(tok, g.get("tokenizer.chat_template"), str(g.path)).render([("user", "hi")])
    return cfg


@pytest.mark.parametrize("key", KEYS)
def test_every_wrong_value_type_is_one_model_error(tiny, key):
    for value in BAD_VALUES:
        with GGUFFile(tiny) as g:
            if value is None:
                g.metadata.pop(key, None)
            else:
                g.metadata[key] = value
            try:
                _load_everything(g)
            except ModelError as e:
                assert str(tiny) in str(e) and "\n" not in str(e), (key, value, str(e))


@pytest.mark.parametrize("key,value,vtype", [
    ("llama.attention.key_length", "xx", GGUFValueType.STRING),
    ("llama.rope.scaling.factor", "abc", GGUFValueType.STRING),
])
def test_model_info_on_a_wrong_value_type_is_one_line(tmp_path, key, value, vtype):
    path = write_tiny_llama(tmp_path / "bad.gguf", TinyLlamaSpec(extra_metadata={key: (value, vtype)}))
    with pytest.raises(ModelError, match=key.replace(".", r"\.")):
        LlamaConfig.from_gguf(GGUFFile(path))
    r = subprocess.run([sys.executable, "-m", "tensorlogic", "model", "info", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr and not r.stderr, r.stderr
    assert "not loadable:" in r.stdout and key in r.stdout, r.stdout
