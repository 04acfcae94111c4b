"""Hostile chat templates (issue 14.3): a template from a model file runs with limits on time,
output size (and any one string it builds), and recursion, and fails with one line naming the
model file. Before: nested range loops grew to 6.6 GB, `'x'*100000000` to 11 GB, `1 // 0` and a
recursive macro were Python tracebacks. Includes a small fuzzer that composes hostile pieces."""
from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from tensorlogic.models import chat_template as ct
from tensorlogic.models.chat_template import ChatTemplate
from tensorlogic.models.errors import ModelError

LABEL = "/models/hostile.gguf"
HOSTILE = {
    "nested loops with output": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "nested loops without output": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "string repetition": "{{ 'x' * 100000000 }}",
    "concatenation": "{% set s = 'x' * 3000000 %}{{ s + s }}",
    "tilde doubling": "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "center filter": "{{ 'x' | center(1000000000) }}",
    "ljust method": "{{ 'x'.ljust(1000000000) }}",
    "replace growth": "{{ ('x' * 100000).replace('x', 'y' * 1000) }}",
    "printf width": "{{ '%999999999s' % 'x' }}",
    "format width": "{{ '{:>999999999}'.format('x') }}",
    "huge power": "{{ 10 ** 100000000 }}",
    "division by zero": "{{ 1 // 0 }}",
    "modulo by zero": "{{ 1 % 0 }}",
    "recursive macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "mutually recursive macros": "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(0) }}",
}


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch):
    monkeypatch.setattr(ct, "RENDER_SECONDS", 1.0, raising=False)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_one_line_naming_the_model(name):
    t0 = time.monotonic()
    with pytest.raises(ModelError) as info:
        ChatTemplate(HOSTILE[name], label=LABEL).render([("user", "hi")])
    msg = str(info.value)
    assert msg.startswith(LABEL + ": the chat template ") and "\n" not in msg, msg
    assert time.monotonic() - t0 < 10


def test_ordinary_templates_still_render_after_the_limits():
    src = ("{% for m in messages %}{{ '<|im_start|>' ~ m['role'] ~ '\\n' + m['content'] | trim }}"
           "{{ '%s' % '<|im_end|>' }}\n{% endfor %}{{ (messages | tojson) | length > 0 }}")
    out = ChatTemplate(src, label=LABEL).render([("user", " hi "), ("assistant", "yo")])
    assert out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\nTrue"


def test_hostile_template_in_a_model_file_is_one_line_in_the_cli(tmp_path):
    from tensorlogic.models.testing import write_tiny_llama

    path = write_tiny_llama(tmp_path / "hostile.gguf", chat_template=HOSTILE["string repetition"])
    r = subprocess.run([sys.executable, "-m", "tensorlogic", "generate", "--model", str(path), "--prompt", "hi",
                        "--max-tokens", "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "chat template" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


PIECES = ["x", "{{ 'ab' * 3 }}", "{{ 7 // 2 }}", "{{ messages[0]['content'] }}",
          "{% for i in range(3) %}{{ i }}{% endfor %}", "{{ 'a' ~ 'b' }}", "{{ 1 // 0 }}",
          "{{ 'x' * 10 ** 9 }}", "{{ 'y' | center(10 ** 8) }}", "{% for i in range(10 ** 5) %}{% for j in range(10 ** 5) %}{% endfor %}{% endfor %}",
          "{{ '%9999999d' % 1 }}", "{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}",
          "{{ undefined_thing.attr }}", "{{ raise_exception('no') }}", "{% if %}", "{{ messages | tojson }}"]


def test_fuzz_composed_templates_render_or_fail_with_one_line():
    rng = random.Random(14)
    for _ in range(60):
        src = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))
        t0 = time.monotonic()
        try:
            out = ChatTemplate(src, label=LABEL).render([("user", "hi")])
            assert len(out) <= ct.MAX_OUTPUT_CHARS
        except ModelError as e:
            assert str(e).startswith(LABEL + ": ") and "\n" not in str(e), (src, str(e))
        assert time.monotonic() - t0 < 10, src


def test_macro_recursion_is_bounded_whatever_the_process_recursion_limit():
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(60000)  # `tl run` raises it for deep TL recursion
    try:
        t0 = time.monotonic()
        with pytest.raises(ModelError, match="recursed too deeply"):
            ChatTemplate(HOSTILE["recursive macro"], label=LABEL).render([("user", "hi")])
        assert time.monotonic() - t0 < 10
        assert sys.getrecursionlimit() == 60000
    finally:
        sys.setrecursionlimit(saved)
