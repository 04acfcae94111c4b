"""The chat-template idioms of the newly supported families render through the Jinja sandbox: a
default system turn and tool check (Qwen2.5), namespace() and a reversed scan for the last user
query, reasoning split off '</think>' and `enable_thinking` (Qwen3), `<|user|>`/`<|end|>` turns with
eos at the end (Phi-3), `bos_token`, role alternation enforced by raise_exception and the 'model'
role (Gemma 2), `strftime_now` (Granite). The templates are written here in each family's style
(the real ones are not in the test tree); what matters is that every construct they use works in
the sandbox and gives the exact text."""
from __future__ import annotations

import datetime

import pytest

from tensorlogic.models.chat_template import ChatTemplate
from tensorlogic.models.errors import ModelError

QWEN25 = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- if tools %}{{- 'TOOLS' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

QWEN3 = (
    "{%- set ns = namespace(searching=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.searching and message.role == 'user' %}"
    "{%- set ns.searching = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- set content = message.content if message.content is string else '' %}"
    "{%- if message.role == 'assistant' %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index %}{{- '<|im_start|>assistant\\n<think>\\n</think>\\n\\n' + content }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)

PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

GRANITE = (
    "{%- set today = strftime_now('%B %d, %Y') %}"
    "{{- '<|start_of_role|>system<|end_of_role|>Today is ' + today + '.<|end_of_text|>\\n' }}"
    "{%- for message in messages %}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] "
    "+ '<|end_of_text|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"
)

CHAT = [("user", "Hi"), ("assistant", "<think>\nhmm\n</think>\n\nHello!"), ("user", "Capital of France?")]


def test_qwen25_style_default_system_turn():
    t = ChatTemplate(QWEN25, label="qwen2")
    assert t.render([("user", "Hi")]) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                          "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert t.render([("system", "Be brief."), ("user", "Hi")], add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")


def test_qwen3_style_namespace_reasoning_split_and_enable_thinking():
    t = ChatTemplate(QWEN3, label="qwen3")
    text = t.render(CHAT, enable_thinking=False)
    assert text == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                    "<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert t.render(CHAT).endswith("<|im_start|>assistant\n")  # thinking left to the model


def test_phi3_style_turns_and_eos():
    t = ChatTemplate(PHI3, eos_token="<|endoftext|>", label="phi3")
    assert t.render([("system", "S"), ("user", "Hi")]) == "<|system|>\nS<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"
    assert t.render([("user", "Hi")], add_generation_prompt=False) == "<|user|>\nHi<|end|>\n<|endoftext|>"


def test_gemma2_style_model_role_and_refusals_in_one_line():
    t = ChatTemplate(GEMMA2, bos_token="<bos>", label="gemma2.gguf")
    assert t.render([("user", " Hi "), ("assistant", "Hello")]) == (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(ModelError, match="refused the messages: System role not supported") as e:
        t.render([("system", "S"), ("user", "Hi")])
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match="roles must alternate"):
        t.render([("user", "a"), ("user", "b")])


def test_granite_style_strftime_now():
    t = ChatTemplate(GRANITE, label="granite")
    today = datetime.date.today().strftime("%B %d, %Y")
    assert t.render([("user", "Hi")]) == (
        f"<|start_of_role|>system<|end_of_role|>Today is {today}.<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>")
