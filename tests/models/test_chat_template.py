"""Chat templates: the model's own Jinja template renders the reference prompt exactly, in a
sandbox; models without one get a sensible default; template errors are one-line ModelErrors."""
from __future__ import annotations

import pytest

from tensorlogic.models.chat_template import ChatTemplate, normalize_messages, template_for
from tensorlogic.models.errors import ModelError
from tensorlogic.models.gguf_file import GGUFFile
from tensorlogic.models.tokenizer import Tokenizer


def _template(path):
    g = GGUFFile(path)
    tok = Tokenizer.from_gguf(g)
    return tok, template_for(tok, g.get("tokenizer.chat_template"), str(path))


def test_chat_capital_prompt_text_and_ids(smollm2_path, reference):
    tok, tpl = _template(smollm2_path)
    assert tpl.from_model
    p = next(p for p in reference["prompts"] if p["name"] == "chat_capital")
    text = tpl.render(p["messages"], add_generation_prompt=True)
    assert text == p["prompt_text"]
    assert tok.encode(text) == p["prompt_ids"]


def test_multi_turn_and_system_message(smollm2_path):
    _, tpl = _template(smollm2_path)
    msgs = [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye")]
    text = tpl.render(msgs, add_generation_prompt=False)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n")


def test_fallbacks_without_template(tiny_spm_path, tiny_bpe_path, tmp_path):
    tok, tpl = _template(tiny_spm_path)  # no template, no ChatML tokens: plain transcript
    assert not tpl.from_model
    assert tpl.render([("user", "Hi")]) == "<s>User: Hi\nAssistant:"
    from tensorlogic.models.testing import write_tiny_llama
    p = write_tiny_llama(tmp_path / "nochat.gguf", chat_template=None)
    tok, tpl = _template(p)  # ChatML tokens in the vocabulary: ChatML
    assert tpl.render([("user", "Hi")]) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.encode(tpl.render([("user", "Hi")]))[0] == tok.token_id("<|im_start|>")


def test_messages_in_several_forms():
    assert normalize_messages([{"role": "user", "content": "a"}, ["assistant", "b"], ("user", "c")]) == [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]

    class Msg:
        def tl_get_field(self, name):
            return {"role": "user", "content": "x"}[name]

    assert normalize_messages([Msg()]) == [{"role": "user", "content": "x"}]
    with pytest.raises(ModelError, match="message 0 is not"):
        normalize_messages([("user", 3)])
    with pytest.raises(ModelError, match="must be a list"):
        normalize_messages("hello")


def test_template_variables_and_raise_exception():
    tpl = ChatTemplate("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'tool' %}"
                       "{{ raise_exception('no tools here') }}{% endif %}{{ m['content'] | tojson }}"
                       "{% endfor %}{{ eos_token }}", bos_token="<s>", eos_token="</s>")
    assert tpl.render([("user", "héllo")]) == '<s>"héllo"</s>'
    with pytest.raises(ModelError, match="refused the messages: no tools here"):
        tpl.render([("tool", "x")])


def test_template_errors_are_one_line():
    with pytest.raises(ModelError, match="does not compile"):
        ChatTemplate("{% for %}")
    with pytest.raises(ModelError, match="failed"):
        ChatTemplate("{{ messages[5]['content'] }}").render([("user", "a")])


def test_template_is_sandboxed():
    evil = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ModelError):
        evil.render([("user", "a")])
    mutating = ChatTemplate("{% set _ = messages.append({'role': 'x', 'content': 'y'}) %}{{ messages | length }}")
    with pytest.raises(ModelError):
        mutating.render([("user", "a")])
