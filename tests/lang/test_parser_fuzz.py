"""Property test: any text (random bytes, random token soups) either parses or raises TLSyntaxError
with a position inside the input — never another exception, never a hang (hypothesis deadline)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorlogic.lang.errors import TLSyntaxError
from tensorlogic.lang.parser import parse

TOKENS = ["fn", "let", "if", "else", "while", "loop", "for", "in", "break", "continue", "return", "struct",
          "impl", "tensor", "learnable", "relation", "entity", "import", "main", "test", "bench", "true", "false",
          "as", "not", "x", "Foo", "W", "i", "j", "0", "1.5", "1e-3", '"s"', '"\\n"', "(", ")", "[", "]", "{", "}",
          ",", ":", "::", ";", ".", "?", "+", "-", "*", "/", "%", "@", "⊙", "**", "==", "!=", "<", "<=", ">",
          ">=", "&&", "||", "!", "=", "+=", "<-", "->", "@temperature", "//c\n", "/*c*/", "\n", " ", "float32",
          "[?, 3]"]

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def check(source: str) -> None:
    try:
        parse(source, "fuzz.tl")
    except TLSyntaxError as e:
        text = e.format()
        assert text  # formatting an error never fails either
        if e.span is not None:
            assert 1 <= e.span.line <= max(source.count("\n") + 1, 1)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_give_only_syntax_errors(data):
    check(data.decode("latin-1"))


@FUZZ
@given(st.text(max_size=200))
def test_random_unicode_text_gives_only_syntax_errors(text):
    check(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_random_token_soups_give_only_syntax_errors(tokens):
    check(" ".join(tokens))


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soups_without_spaces_give_only_syntax_errors(tokens):
    check("".join(tokens))


def test_form_feed_and_crlf_do_not_shift_line_numbers():
    for source in ("\x0c@A", "let a = 1\r\nlet b = (\r\n", "\x0b\x1c\x1d\x85 let"):
        check(source)
