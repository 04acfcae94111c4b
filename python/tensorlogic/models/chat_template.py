"""Chat prompts from a model's own template (`tokenizer.chat_template`, Jinja).

Templates come from model files, so they are untrusted: they render in Jinja2's immutable
sandbox with the variables Hugging Face's `apply_chat_template` provides (messages,
add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now, tools...) and under
limits: RENDER_SECONDS of run time, MAX_OUTPUT_CHARS of output (also for any one string a `*` or
`+` builds), Jinja's own range() bound, and TEMPLATE_RECURSION frames of macro recursion. Any template
error, limit included, becomes one `ModelError` line naming the model file. A model without a
template gets ChatML when its vocabulary has the ChatML tokens, else a plain "role: text" transcript.
"""
from __future__ import annotations

import datetime
import json
import operator
import re
import sys
import time
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
RENDER_SECONDS = 5.0
MAX_OUTPUT_CHARS = 4 << 20
TEMPLATE_RECURSION = 2000  # Python frames a render may add (a macro call takes a few)


class _TemplateRaised(Exception):
    pass


class _TemplateLimit(Exception):
    pass


_BINOPS = {"*": operator.mul, "+": operator.add, "**": operator.pow, "%": operator.mod}
_HUGE_WIDTH = re.compile(r"\d{7,}")


def _check_format(what: str, fmt: Any) -> None:
    """printf- and format-style strings: no field width of a million or more."""
    if isinstance(fmt, str) and _HUGE_WIDTH.search(fmt):
        raise _TemplateLimit(f"{what} with a huge field width")


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _limited_binop(env, context, op: str, left: Any, right: Any) -> Any:
    """`*`, `+` and `**` with their result size checked before it is built."""
    if op == "*":
        seq, count = (left, right) if _sized(left) else (right, left)
        if _sized(seq) and isinstance(count, int) and _sized(seq) * max(count, 0) > MAX_OUTPUT_CHARS:
            raise _TemplateLimit(f"a string or list longer than {MAX_OUTPUT_CHARS} characters")
    elif op == "+" and _sized(left) + _sized(right) > MAX_OUTPUT_CHARS:
        raise _TemplateLimit(f"a string or list longer than {MAX_OUTPUT_CHARS} characters")
    elif op == "**" and isinstance(left, int) and isinstance(right, int) and abs(right) > 4096:
        raise _TemplateLimit("an exponent larger than 4096")
    elif op == "%":
        _check_format("'%'", left)
    return _BINOPS[op](left, right)


def _check_args(what: str, args: tuple, kwargs: dict) -> None:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and a > MAX_OUTPUT_CHARS:
            raise _TemplateLimit(f"{what} with a size argument of {a}")


def _check_result(what: str, value: Any) -> Any:
    if _sized(value) > MAX_OUTPUT_CHARS:
        raise _TemplateLimit(f"{what} built more than {MAX_OUTPUT_CHARS} characters")
    return value


def _limited_call(env, context, obj, *args, **kwargs):
    """Method and function calls: no size argument beyond the output limit, no str.replace
    that could grow past it (checked before the call), and no result beyond it."""
    what = getattr(obj, "__name__", "a call")
    _check_args(what, args, kwargs)
    if what in ("format", "format_map"):
        _check_format(what + "()", getattr(obj, "__self__", None))
    if what == "replace" and isinstance(getattr(obj, "__self__", None), str) and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        if len(obj.__self__) * max(len(new), 1) // max(len(old), 1) > MAX_OUTPUT_CHARS:
            raise _TemplateLimit("replace() could build more than the output limit")
    return _check_result(what, _sandbox_call()(env, context, obj, *args, **kwargs))


def _limited_filter(name: str, fn):
    import functools

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        _check_args(f"the {name} filter", args, kwargs)
        if name == "format" and args:
            _check_format("the format filter", args[0])
        return _check_result(f"the {name} filter", fn(*args, **kwargs))
    return wrapped


def _limited_concat(parts) -> str:
    texts = [str(p) for p in parts]
    if sum(map(len, texts)) > MAX_OUTPUT_CHARS:
        raise _TemplateLimit(f"a string longer than {MAX_OUTPUT_CHARS} characters")
    return "".join(texts)


def _code_generator():
    """Jinja's code generator with `~` routed through _limited_concat (the sandbox intercepts
    `+ * **` and calls, not `~`)."""
    from jinja2.compiler import CodeGenerator

    class LimitedCodeGenerator(CodeGenerator):
        def visit_Concat(self, node, frame):
            self.write("environment.tl_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")
    return LimitedCodeGenerator


def _sandbox_call():
    from jinja2.sandbox import SandboxedEnvironment
    return SandboxedEnvironment.call


def _stack_depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


class _Deadline:
    """A trace function that stops template code (compiled by Jinja under the file name
    "<template>") once RENDER_SECONDS have passed; pure loops yield nothing and cannot be
    stopped from outside the generator."""

    def __init__(self, seconds: float):
        self.until = time.monotonic() + seconds
        self.ticks = 0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            return None
        return self._line

    def _line(self, frame, event, arg):
        self.ticks += 1
        if self.ticks & 1023 == 0 and time.monotonic() > self.until:
            raise _TemplateLimit(f"it ran longer than {RENDER_SECONDS:g} s")
        return self._line


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
        env_class = type("LimitedSandbox", (ImmutableSandboxedEnvironment,),
                         {"code_generator_class": _code_generator(),
                          "intercepted_binops": frozenset(_BINOPS),
                          "call_binop": _limited_binop, "call": _limited_call,
                          "tl_concat": staticmethod(_limited_concat)})
        env = env_class(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        for fname in list(env.filters):
            env.filters[fname] = _limited_filter(fname, env.filters[fname])
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
        previous = sys.gettrace()
        old_limit = sys.getrecursionlimit()
        # Macro recursion is bounded here, not by whatever limit the process runs with.
        sys.setrecursionlimit(min(old_limit, _stack_depth() + TEMPLATE_RECURSION))
        sys.settrace(_Deadline(RENDER_SECONDS))
        try:
            return self._render_limited(variables)
        except _TemplateRaised as e:
            raise ModelError(f"{self.label}: the chat template refused the messages: {e}") from None
        except _TemplateLimit as e:
            raise ModelError(f"{self.label}: the chat template was stopped: {e}") from None
        except RecursionError:
            raise ModelError(f"{self.label}: the chat template was stopped: it recursed too deeply") from None
        except MemoryError:
            raise ModelError(f"{self.label}: the chat template was stopped: out of memory") from None
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                ArithmeticError, LookupError) as e:
            raise ModelError(f"{self.label}: the chat template failed: {_one_line(e)}") from None
        finally:
            sys.settrace(previous)
            sys.setrecursionlimit(old_limit)

    def _render_limited(self, variables: dict) -> str:
        parts, size = [], 0
        stream = self._template.generate(**variables)
        try:
            for part in stream:
                size += len(part)
                if size > MAX_OUTPUT_CHARS:
                    raise _TemplateLimit(f"its output passed {MAX_OUTPUT_CHARS} characters")
                parts.append(part)
        finally:
            stream.close()
        return "".join(parts)


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
    msg = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, ArithmeticError):
        msg = f"{type(e).__name__}: {msg}"
    return f"{msg} (template line {lineno})" if lineno else msg


def template_for(tokenizer, metadata_template: str | None, label: str) -> ChatTemplate:
    """The chat template of a model: its own, or the fallback for its vocabulary."""
    has_chatml = tokenizer.token_id("<|im_start|>") is not None and tokenizer.token_id("<|im_end|>") is not None
    if metadata_template is not None and not isinstance(metadata_template, str):
        raise ModelError(f"{label}: tokenizer.chat_template is not a string")
    return ChatTemplate(metadata_template, tokenizer.bos_token, tokenizer.eos_token, has_chatml, label)
