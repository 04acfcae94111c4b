"""Constrained JSON decoding (models/json_grammar.py): every walk the token masks allow ends in text
that parses and validates (checked by json.loads and an independent validator written here), the
masks equal a brute-force check of every token, and schemas outside the subset are refused by name."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensorlogic.models.json_grammar import (MAX_WS, Automaton, JsonConstraint, SchemaError, TokenIndex,
                                             compile_schema, compute_mask)


class ToyTokenizer:
    """A vocabulary of multi-character pieces (JSON punctuation glued to words and digits), single
    letters and digits, one piece that is half a UTF-8 character, and an end-of-generation id."""

    def __init__(self):
        pieces = ['{', '}', '[', ']', ',', ':', '"', ' ', '\n', '  ', '{"', '"}', '":', '",', '", "', '"]', '["',
                  'true', 'false', 'null', 'tr', 'ue', 'nu', 'll', '0', '1', '2', '12', '-', '.', '5', 'e', 'E+',
                  '3.', '.25', 'name', 'age', 'na', 'me', 'tags', 'a', 'b', 'bb', '\\', '\\n', '\\u00', 'e9',
                  'é', '"name": "', '"age": ', 'x', 'hello world', '}}', ']]', '\t', '1,', '],', '},']
        # every character on its own too: the masks are exact per character, so a text can always be
        # finished only when each character it may need is some token (true of real vocabularies)
        pieces += [c for c in "abcdefghijklmnopqrstuvwxyz0123456789" if c not in pieces]
        self.data = [p.encode() for p in pieces] + [b"\xc3", b"<eos>"]
        self.vocab_size = len(self.data)
        self.eog_ids = frozenset({self.vocab_size - 1})

    def is_special(self, tid: int) -> bool:
        return tid == self.vocab_size - 1

    def token_bytes(self, tid: int) -> bytes:
        return self.data[tid]


def validate(value, schema) -> bool:
    """The schema subset's meaning, written independently of the automaton."""
    if schema in ({}, True):
        return True
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and not any(value == e and type(value) is type(e) for e in schema["enum"]):
        return False
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        ok = {"object": isinstance(value, dict), "array": isinstance(value, list),
              "string": isinstance(value, str), "boolean": isinstance(value, bool), "null": value is None,
              "number": isinstance(value, (int, float)) and not isinstance(value, bool),
              "integer": isinstance(value, int) and not isinstance(value, bool)}
        if not any(ok[t] for t in types):
            return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(r not in value for r in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(k not in props for k in value):
            return False
        return all(validate(v, props.get(k, {})) for k, v in value.items())
    if isinstance(value, list):
        items = schema.get("items", {})
        if isinstance(items, list):  # the older tuple form: items per position, additionalItems after
            prefix, rest = items, schema.get("additionalItems", {})
        else:
            prefix, rest = schema.get("prefixItems", []), items
        if rest is False and len(value) > len(prefix):
            return False
        return all(validate(v, prefix[i] if i < len(prefix) else rest) for i, v in enumerate(value))
    return True


SCHEMAS = [
    {"type": "object"},
    {},
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                      "tags": {"type": "array", "items": {"type": "string"}}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"type": "number"}},
    {"type": "object", "properties": {"a": {"enum": [1, 12, "x", None, True]}, "b": {"type": ["boolean", "null"]}},
     "required": ["b"], "additionalProperties": False},
    {"type": "object", "properties": {"nested": {"type": "object", "properties": {"x": {"type": "number"}},
                                                 "required": ["x"]}}, "required": ["nested"]},
    {"type": "integer"},
    {"const": "hello world"},
    {"type": "string"},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"enum": ["a", "bb"]}], "items": {"type": "boolean"}},
    {"items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False},
    {"type": "array", "prefixItems": [{"const": 12}], "items": False},
    {"type": "array", "items": False},
    {"items": [{"type": "null"}]},
]


def _walk(constraint: JsonConstraint, index: TokenIndex, tok, rng, steps: int = 120) -> tuple[str, bool]:
    """A random walk through the allowed ids: half the time any allowed id, half the time one
    that ends something (the end of generation when allowed). The mask is never empty."""
    for _ in range(steps):
        mask = constraint.allowed()
        allowed = np.nonzero(mask)[0]
        assert allowed.size, constraint.text
        eog = [t for t in allowed if t in tok.eog_ids]
        if eog and rng.random() < 0.5:
            return constraint.text, True
        closers = [t for t in allowed if t not in tok.eog_ids and tok.token_bytes(int(t))[-1:] in b'"]}0123456789el']
        pool = closers if closers and rng.random() < 0.6 else [t for t in allowed if t not in tok.eog_ids] or eog
        tid = int(rng.choice(pool))
        if tid in tok.eog_ids:
            return constraint.text, True
        constraint.advance(tid)
    return constraint.text, False


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:40] for s in SCHEMAS])
def test_random_walks_always_parse_and_validate(schema):
    tok = ToyTokenizer()
    index = TokenIndex(tok)
    automaton = Automaton(compile_schema(schema if schema else {}))
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(40):
        text, done = _walk(JsonConstraint(automaton, index), index, tok, rng)
        if done:
            finished += 1
            value = json.loads(text)
            assert validate(value, schema), (text, schema)
    assert finished >= 10


def test_masks_equal_a_brute_force_check_of_every_token():
    tok = ToyTokenizer()
    index = TokenIndex(tok)
    automaton = Automaton(compile_schema(SCHEMAS[2]))
    rng = np.random.default_rng(1)
    for _ in range(10):
        c = JsonConstraint(automaton, index)
        for _ in range(30):
            mask = compute_mask(automaton, index, c.state)
            for tid in range(tok.vocab_size):
                if tok.is_special(tid):
                    assert mask[tid] == automaton.complete(c.state)
                    continue
                try:
                    text = tok.token_bytes(tid).decode()
                except UnicodeDecodeError:
                    assert not mask[tid]  # half a character: never
                    continue
                s = c.state
                for ch in text:
                    s = automaton.step(s, ch)
                    if s < 0:
                        break
                assert mask[tid] == (s >= 0), (c.text, text)
            allowed = [t for t in np.nonzero(c.allowed())[0] if not tok.is_special(t)]
            if not allowed:
                break
            c.advance(int(rng.choice(allowed)))


def _text_ok(automaton: Automaton, text: str) -> bool:
    s = automaton.start
    for ch in text:
        s = automaton.step(s, ch)
        if s < 0:
            return False
    return True


def test_the_automaton_accepts_exactly_what_the_schema_allows():
    a = Automaton(compile_schema(SCHEMAS[2]))
    assert _text_ok(a, '{"name": "x", "age": -12}') and a.complete(_state(a, '{"name":"x","age":0}'))
    assert _text_ok(a, '{"name":"a\\n\\u00e9","age":3,"tags":["q"]}')
    assert not _text_ok(a, '{"name": "x"}')  # age is required: no "}" before it
    assert not _text_ok(a, '{"age": 1')  # name first (the schema's order), and it is required
    assert not _text_ok(a, '{"name": "x", "age": 1.5')  # an integer has no fraction
    assert not _text_ok(a, '{"name": "x", "age": 01')  # no leading zeros
    assert not _text_ok(a, '{"nam": ')  # only the schema's names
    assert not _text_ok(a, '{"name": "x\x01')  # a raw control character in a string
    assert not a.complete(_state(a, '{"name": "x", "age": 1'))
    assert not _text_ok(a, '{"name":"x","age":1} ')  # nothing after the value
    ws = Automaton(compile_schema({"type": "object"}))
    assert _text_ok(ws, "{" + " " * MAX_WS) and not _text_ok(ws, "{" + " " * (MAX_WS + 1))
    enum = Automaton(compile_schema(SCHEMAS[4]))
    assert enum.complete(_state(enum, '{"a":12,"b":null}')) and enum.complete(_state(enum, '{"b":true}'))
    assert not _text_ok(enum, '{"a":13') and not _text_ok(enum, '{"a":"y"')
    tup = Automaton(compile_schema(SCHEMAS[9]))  # [integer, "a" | "bb", boolean...]
    assert tup.complete(_state(tup, '[-3000]')) and tup.complete(_state(tup, '[1, "bb", true, false]'))
    assert tup.complete(_state(tup, '[]')) and tup.complete(_state(tup, '[ 7 ,"a" ]'))
    assert not _text_ok(tup, '["a"') and not _text_ok(tup, '[1, 2') and not _text_ok(tup, '[1, "a", "a"')
    closed = Automaton(compile_schema(SCHEMAS[10]))  # [integer, string], nothing after
    assert closed.complete(_state(closed, '[1,"x"]')) and not _text_ok(closed, '[1,"x",')
    assert not _text_ok(Automaton(compile_schema(SCHEMAS[12])), '[1') and \
        _text_ok(Automaton(compile_schema(SCHEMAS[12])), '[]')
    n = Automaton(compile_schema({"type": "integer"}))
    assert n.complete(_state(n, "-120")) and not n.complete(_state(n, "-"))


def _state(a: Automaton, text: str) -> int:
    s = a.start
    for ch in text:
        s = a.step(s, ch)
        assert s >= 0, text
    return s


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "string", "minLength": 3}, "minLength"),
    ({"type": "string", "pattern": "a+"}, "pattern"),
    ({"anyOf": [{"type": "string"}]}, "anyOf"),
    ({"$ref": "#/x"}, "$ref"),
    ({"type": "object", "properties": {"a": {"type": "number", "minimum": 0}}}, "properties.a.minimum"),
    ({"type": "array", "items": {"type": "string"}, "additionalItems": False}, "additionalItems"),
    ({"type": "array", "prefixItems": {"type": "string"}}, "prefixItems"),
    ({"type": "array", "prefixItems": [{}], "items": [{}]}, "prefixItems"),
    ({"type": "array", "prefixItems": [{"type": "string", "maxLength": 2}]}, "prefixItems.0.maxLength"),
    ({"type": "object", "additionalProperties": {"type": "string"}}, "additionalProperties"),
    ({"type": "date"}, "type"),
    ({"enum": []}, "enum"),
    ({"type": "string", "enum": [1, 2]}, "enum"),
    ({"type": "object", "properties": {'a"b': {}}}, "properties"),
    ({"type": "object", "required": ["z"], "additionalProperties": False}, "required"),
    ("string", ""),
])
def test_schemas_outside_the_subset_are_refused_by_name(schema, keyword):
    with pytest.raises(SchemaError) as e:
        compile_schema(schema)
    assert e.value.keyword == keyword
    assert "\n" not in str(e.value)


def test_real_vocabulary_walks_parse_and_validate(smollm2_path):
    from tensorlogic.models.tokenizer import Tokenizer

    tok = Tokenizer.from_file(smollm2_path)
    index = TokenIndex(tok)
    rng = np.random.default_rng(2)
    for schema in (SCHEMAS[2], SCHEMAS[4]):
        automaton = Automaton(compile_schema(schema))
        done = 0
        for _ in range(2):
            text, finished = _walk(JsonConstraint(automaton, index), index, tok, rng, steps=150)
            if finished:
                done += 1
                assert validate(json.loads(text), schema), text
        assert done >= 1, schema


def test_a_one_property_object_is_exactly_one_of_its_alternatives():
    from tensorlogic.models.json_grammar import one_property_object

    node = one_property_object([("tool_call", compile_schema({"type": "object", "properties": {
        "name": {"enum": ["f"]}}, "required": ["name"]})), ("response", compile_schema({"type": "string"}))])
    a = Automaton(node)
    assert a.complete(_state(a, '{"tool_call": {"name": "f"}}')) and a.complete(_state(a, '{"response": "x"}'))
    assert not _text_ok(a, "{}") and not _text_ok(a, '{"response": "x",')
    assert not _text_ok(a, '{"other"')


def test_tl_generate_json_schema(smollm2_path, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import tensorlogic

    # the package under test (the installed one in CI, whose _core the source tree lacks)
    env = dict(os.environ, PYTHONPATH=str(Path(tensorlogic.__file__).resolve().parent.parent))
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    path = tmp_path / "person.json"
    path.write_text(json.dumps(schema))

    def gen(*args):
        return subprocess.run([sys.executable, "-m", "tensorlogic", "generate", "--model", str(smollm2_path),
                               "--prompt", "Give me a person as JSON.", "--max-tokens", "150", *args],
                              capture_output=True, text=True, env=env, timeout=300)

    for args in (["--json-schema", str(path)], ["--json-schema", json.dumps(schema), "--temperature", "0.7",
                                                "--seed", "4"]):
        r = gen(*args)
        assert r.returncode == 0, r.stderr
        assert validate(json.loads(r.stdout), schema), r.stdout
    r = gen("--json-schema", '{"type": "string", "format": "date"}')
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "tl: error: --json-schema: schema: the JSON schema keyword 'format' is not supported (supported: "
        "additionalItems, additionalProperties, const, enum, items, prefixItems, properties, required, type)"]
    r = gen("--json-schema", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_numbers_have_bounded_digit_runs():
    from tensorlogic.models.json_grammar import MAX_DIGITS, MAX_EXP_DIGITS

    a = Automaton(compile_schema({"type": "number"}))
    assert _text_ok(a, "9" * MAX_DIGITS) and not _text_ok(a, "9" * (MAX_DIGITS + 1))
    assert _text_ok(a, "-1." + "0" * MAX_DIGITS + "e+" + "9" * MAX_EXP_DIGITS)
    assert not _text_ok(a, "1e" + "9" * (MAX_EXP_DIGITS + 1))
    assert a.complete(_state(a, "-0.5E-12"))
