"""Issue 14.8: an AttributeError raised inside a TL object's method (a bug in it, or a failed
lookup it makes) is that method's failure. It used to be taken for "no such method" and the call
re-dispatched to a builtin of the same name, which then complained about its arguments
("append: xs must be an array, got KVCache")."""
from __future__ import annotations

import pytest

import tensorlogic
from tensorlogic.builtins.kvcache import KVCache


@pytest.fixture
def broken_append(monkeypatch):
    def append(self, layer, k, v):
        return None.write_rows  # an internal fault: AttributeError from a failed lookup
    monkeypatch.setattr(KVCache, "append", append)


def test_attribute_error_inside_a_method_is_not_redispatched_to_a_builtin(broken_append):
    src = "main { let kv = KVCache::new_f32(2)\nkv.append(0, ones([1, 2]), ones([1, 2])) }"
    r = tensorlogic.run(src, filename="m.tl")
    assert r.error is not None
    text = r.error.format()
    assert "write_rows" in text, text
    assert "must be an array" not in text and "append: xs" not in text, text


def test_a_missing_method_still_falls_back_to_the_builtin_of_that_name():
    src = "main { let kv = KVCache::new_f32(2)\nprint(kv.len())\nprint(kv.no_such_thing()) }"
    r = tensorlogic.run(src, filename="m.tl")
    assert r.output.strip().splitlines()[0] == "0"
    assert r.error is not None and "has no method 'no_such_thing'" in r.error.format()


def test_attribute_error_inside_a_field_getter_is_not_no_such_field(monkeypatch):
    monkeypatch.setattr(KVCache, "tl_get_field", lambda self, name: None.capacity_rows)
    r = tensorlogic.run("main { let kv = KVCache::new_f32(2)\nprint(kv.capacity) }", filename="m.tl")
    assert r.error is not None and "capacity_rows" in r.error.format(), r.error.format()
    assert "has no field" not in r.error.format()
