"""Tokenizers from GGUF metadata: ids equal the reference tokenizer for every string, decoding
round-trips, streaming never splits a UTF-8 character, SentencePiece follows llama.cpp."""
from __future__ import annotations

import numpy as np
import pytest

from tensorlogic.models.errors import ModelError
from tensorlogic.models.gguf_file import GGUFFile
from tensorlogic.models.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def smollm2_tok(smollm2_path) -> Tokenizer:
    return Tokenizer.from_file(smollm2_path)


def test_smollm2_ids_equal_reference_for_every_string(smollm2_tok, tokenizer_reference):
    strings = tokenizer_reference["strings"]
    assert len(strings) == tokenizer_reference["n_strings"] == 12
    for s in strings:
        assert smollm2_tok.encode(s["text"], add_special=True) == s["ids"], s["name"]
        assert [smollm2_tok.token_text(i) for i in s["ids"]] == s["tokens"], s["name"]
        assert smollm2_tok.decode(s["ids"]) == s["text"], s["name"]


def test_smollm2_prompt_ids_equal_reference(smollm2_tok, reference):
    for p in reference["prompts"]:
        assert smollm2_tok.encode(p["prompt_text"]) == p["prompt_ids"], p["name"]


def test_smollm2_special_tokens(smollm2_tok, reference):
    tok = smollm2_tok
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)
    assert set(reference["llamacpp_eog_ids"]) >= tok.eog_ids >= {reference["eos_token_id"]}
    literal = tok.encode("<|im_start|>user", parse_special=False)
    assert 1 not in literal and tok.decode(literal) == "<|im_start|>user"
    assert tok.encode("<|im_start|>user")[0] == 1
    ids = tok.encode("<|im_start|>hi<|im_end|>")
    assert tok.decode(ids, skip_special=True) == "hi"
    assert tok.decode(ids) == "<|im_start|>hi<|im_end|>"


def test_greedy_text_decodes_like_reference(smollm2_tok, reference):
    for p in reference["prompts"]:
        assert smollm2_tok.decode(p["greedy_ids"]) == p["greedy_text"]
        n = p["first_eos_index"]
        assert smollm2_tok.decode(p["greedy_ids"][:n], skip_special=True) == p["greedy_text_up_to_eos"]


def test_stream_decoder_holds_back_incomplete_utf8(smollm2_tok):
    tok = smollm2_tok
    text = "Emoji: 😀 🎉 and 你好 café"
    ids = tok.encode(text)
    split_chars = [i for i in ids if _incomplete(tok.token_bytes(i))]
    assert split_chars, "the test string should contain tokens that end inside a UTF-8 character"
    dec = tok.stream_decoder()
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    # the token that starts 😀 (b"\xf0\x9f") prints nothing until the character is complete
    assert any(p == "" for p in pieces[:-1])


def _incomplete(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_stream_decoder_flushes_broken_tail_as_replacement(smollm2_tok):
    tok = smollm2_tok
    first_half = next(i for i in range(tok.vocab_size) if tok.token_bytes(i) == b"\xf0\x9f")
    dec = tok.stream_decoder()
    assert dec.push(first_half) == ""
    assert dec.flush() == "\ufffd"


def test_decode_rejects_bad_ids(smollm2_tok):
    with pytest.raises(ModelError, match="outside the vocabulary"):
        smollm2_tok.decode([5, 49152])
    with pytest.raises(ModelError, match="outside the vocabulary"):
        smollm2_tok.decode([-1])
    with pytest.raises(ModelError, match="expected a string"):
        smollm2_tok.encode(42)


def test_tiny_bpe_round_trips(tiny_bpe_path):
    tok = Tokenizer.from_file(tiny_bpe_path)
    for text in ["The capital of France is Paris.", "  spaces\tand\nlines  ", "😀 你好 naïve 12345",
                 "<|im_start|>user\nhi<|im_end|>", ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    assert tok.encode("12345") == [tok.token_id(c) for c in "12345"]  # smollm splits digits


def test_tiny_spm_round_trips_and_prefixes_space(tiny_spm_path):
    tok = Tokenizer.from_file(tiny_spm_path)
    assert tok.kind == "llama" and tok.add_bos and tok.add_space_prefix
    for text in ["The capital of France is Paris.", "Hello, world!", "naïve façade 😀 你好 Ωmega",
                 "tabs\tand\nnewlines", "x"]:
        ids = tok.encode(text)
        assert ids[0] == tok.bos_id
        assert tok.decode(ids, skip_special=True) == text
        assert tok.decode(ids[1:]) == text
    # characters outside the vocabulary fall back to byte tokens
    ids = tok.encode("Ω", add_special=False)
    assert [tok.token_text(i) for i in ids] == ["\u2581", "<0xCE>", "<0xA9>"]


def test_spm_merges_by_score_like_llama_cpp(tmp_path):
    # vocabulary where greedy-longest and score order disagree: "▁ab" + "c" wins over "▁a" + "bc"
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "c", "\u2581a", "bc", "\u2581ab", "ab"]
    types = [2, 3, 3] + [1] * 8
    scores = [0, 0, 0, -10, -11, -12, -13, -5, -1, -3, -2]
    tok = Tokenizer("llama", tokens, np.array(types), scores=np.array(scores, dtype=np.float32),
                    bos_id=1, eos_id=2, unk_id=0, add_bos=False, add_space_prefix=True)
    # bigrams of ▁ a b c: "▁a"(-5) "ab"(-2) "bc"(-1) → merge b+c first (-1); then ▁ a bc:
    # "▁a"(-5), "abc" absent → ▁a; then ▁a bc: "▁abc" absent → [▁a, bc]
    assert [tok.token_text(i) for i in tok.encode("abc", add_special=False)] == ["\u2581a", "bc"]
    # "ab": a+b (-2) then ▁+ab = "▁ab" (-3) → [▁ab]
    assert [tok.token_text(i) for i in tok.encode("ab", add_special=False)] == ["\u2581ab"]
    # unknown character without byte tokens → <unk>
    assert tok.encode("z", add_special=False) == [3, 0]


def test_spm_special_tokens_in_text(tiny_spm_path):
    tok = Tokenizer.from_file(tiny_spm_path)
    ids = tok.encode("Hello</s>world", add_special=False)
    assert tok.eos_id in ids
    assert tok.eos_id not in tok.encode("Hello</s>world", add_special=False, parse_special=False)


def test_unsupported_tokenizer_and_pre(tmp_path):
    from tensorlogic.models.testing import TinyLlamaSpec, write_tiny_llama
    import gguf

    p = write_tiny_llama(tmp_path / "pre.gguf", TinyLlamaSpec(),
                         extra_metadata={"tokenizer.ggml.pre2": ("x", gguf.GGUFValueType.STRING)})
    raw = bytearray(p.read_bytes())
    i = raw.find(b"smollm")
    raw[i:i + 6] = b"klingo"
    (tmp_path / "klingon.gguf").write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="pre-tokenizer 'klingo'"):
        Tokenizer.from_gguf(GGUFFile(tmp_path / "klingon.gguf"))
    with pytest.raises(ModelError, match="tokenizer model 'wordpiece' is not supported"):
        Tokenizer("wordpiece", ["a"], None)
    with pytest.raises(ModelError, match="needs tokenizer.ggml.scores"):
        Tokenizer("llama", ["a", "b"], None, scores=None)
    with pytest.raises(ModelError, match="eos token id 9 is outside"):
        Tokenizer("gpt2", ["a"], None, merges=[], eos_id=9)


from hypothesis import given, settings, strategies as st  # noqa: E402

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@pytest.fixture(scope="module")
def tiny_tokenizers(tiny_bpe_path, tiny_spm_path):
    return Tokenizer.from_file(tiny_bpe_path), Tokenizer.from_file(tiny_spm_path)


@settings(max_examples=150, deadline=None)
@given(text=_TEXT)
def test_any_text_round_trips_and_streams_whole(tiny_tokenizers, text):
    for tok in tiny_tokenizers:
        ids = tok.encode(text, add_special=False, parse_special=False)
        assert all(0 <= i < tok.vocab_size for i in ids)
        if tok.kind == "gpt2":
            assert tok.decode(ids) == text
        else:  # SentencePiece puts one space in front, decode takes it away
            assert tok.decode(ids) == text
        dec = tok.stream_decoder(skip_special=False)
        streamed = "".join(dec.push(i) for i in ids) + dec.flush()
        assert streamed == (" " + text if tok.kind == "llama" and text else text)


def test_sentencepiece_matches_the_sentencepiece_library():
    """Our llama.cpp-style SentencePiece against Google's library, on a BPE model with byte fallback
    trained here (the kind Llama 2 / TinyLlama ship)."""
    import io
    import random

    spm = pytest.importorskip("sentencepiece")
    from tensorlogic.models.testing import SAMPLE_TEXT

    lines = (SAMPLE_TEXT + "\n").splitlines() * 3 + ["the cat sat on the mat", "naïve café résumé",
                                                       "1234 5678 90", "Über straße"] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=600,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   add_dummy_prefix=True, remove_extra_whitespaces=False,
                                   normalization_rule_name="identity", bos_id=1, eos_id=2, unk_id=0,
                                   pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.get_piece_size()
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)]
    tok = Tokenizer("llama", [sp.id_to_piece(i) for i in range(n)], np.array(types),
                    scores=np.array([sp.get_score(i) for i in range(n)], dtype=np.float32),
                    bos_id=1, eos_id=2, unk_id=0, add_bos=True, add_space_prefix=True)
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEF.,!?'0123456789éïüß😀你\n\t"
    words = " ".join(lines).split()
    texts = ["The capital of France is Paris.", "  two  spaces", "😀 emoji", "x", ""]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(400)]
    texts += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 8))) for _ in range(400)]
    for text in texts:
        assert tok.encode(text, add_special=False) == sp.encode(text), repr(text)
        assert tok.encode(text)[0] == 1
        assert tok.decode(sp.encode(text)) == sp.decode(sp.encode(text))
