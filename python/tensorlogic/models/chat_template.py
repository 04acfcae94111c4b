"""Chat prompts from a model's own template (`tokenizer.chat_template`, Jinja).

Templates come from model files, so they are untrusted: they render in Jinja2's immutable
sandbox with the variables Hugging Face's `apply_chat_template` provides (messages,
add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now, tools...). Any template
error becomes one `ModelError` line. A model without a template gets ChatML when its vocabulary has
the ChatML tokens, else a plain "role: text" transcript.
"""
from __future__ import annotations

import datetime
import json
from typing import Any, Iterable

from .errors import ModelError

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
PLAIN_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] | capitalize + ': ' + message['content'] + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
ROLES = ("system", "user", "assistant", "tool")


class _TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template plus the special-token strings it is rendered with."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "",
                 has_chatml_tokens: bool = False, label: str = "model"):
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.label = label
        self.from_model = bool(source)
        if not source:
            source = CHATML_TEMPLATE if has_chatml_tokens else PLAIN_TEMPLATE
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as e:
            raise ModelError(f"{label}: the chat template does not compile: {_one_line(e)}") from None

    def render(self, messages: Iterable[Any], add_generation_prompt: bool = True, **extra: Any) -> str:
        import jinja2

        msgs = normalize_messages(messages)
        variables = dict(messages=msgs, add_generation_prompt=bool(add_generation_prompt),
                         bos_token=self.bos_token, eos_token=self.eos_token, tools=None,
                         documents=None, date_string=datetime.date.today().strftime("%d %b %Y"))
        variables.update(extra)
        try:
            return self._template.render(**variables)
        except _TemplateRaised as e:
            raise ModelError(f"{self.label}: the chat template refused the messages: {e}") from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise ModelError(f"{self.label}: the chat template failed: {_one_line(e)}") from None


def normalize_messages(messages: Iterable[Any]) -> list[dict[str, str]]:
    """Messages as [{"role", "content"}]. Accepts dicts, (role, content) pairs and objects with
    `role`/`content` fields (TL structs)."""
    out = []
    if isinstance(messages, (str, bytes)):
        raise ModelError("apply_chat_template: messages must be a list of (role, content) messages")
    for i, m in enumerate(messages):
        role = content = None
        if isinstance(m, dict):
            role, content = m.get("role"), m.get("content")
        elif isinstance(m, (list, tuple)) and len(m) == 2:
            role, content = m
        else:
            getter = getattr(m, "tl_get_field", None)
            try:
                if getter is not None:
                    role, content = getter("role"), getter("content")
                else:
                    role, content = getattr(m, "role", None), getattr(m, "content", None)
            except (AttributeError, KeyError):
                role = content = None
        if not isinstance(role, str) or not isinstance(content, str):
            raise ModelError(f"apply_chat_template: message {i} is not a (role, content) pair of strings")
        out.append({"role": role, "content": content})
    return out


def _one_line(e: Exception) -> str:
    lineno = getattr(e, "lineno", None)
    msg = " ".join(str(e).split())
    return f"{msg} (template line {lineno})" if lineno else msg


def template_for(tokenizer, metadata_template: str | None, label: str) -> ChatTemplate:
    """The chat template of a model: its own, or the fallback for its vocabulary."""
    has_chatml = tokenizer.token_id("<|im_start|>") is not None and tokenizer.token_id("<|im_end|>") is not None
    if metadata_template is not None and not isinstance(metadata_template, str):
        raise ModelError(f"{label}: tokenizer.chat_template is not a string")
    return ChatTemplate(metadata_template, tokenizer.bos_token, tokenizer.eos_token, has_chatml, label)
