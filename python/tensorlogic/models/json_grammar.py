"""Constrained decoding for JSON: which token ids keep the generated text a prefix of JSON that
parses and validates against a JSON schema (a subset; `compile_schema` refuses the rest by name).

Three parts:
- `compile_schema(schema)` -> a tree of `Node`s. The subset: `type` (a name or a list of them:
  object, array, string, number, integer, boolean, null), `properties`, `required`,
  `additionalProperties` (true or false), `items` (one schema, or false: no items), tuples
  (`prefixItems`: a schema per position, then `items` for the rest; or the older form, `items` as a
  list of schemas and `additionalItems` for the rest; the rest is free unless given or false; an
  array may stop before the last position, as JSON Schema allows), `enum`, `const`, and the annotations
  `title`, `description`, `$schema`, `$id`, `$comment`, `default`, `examples`. Any other keyword
  raises SchemaError naming it (a 400 in `tl serve`), never ignored.
- `Automaton`: a character-level pushdown automaton over JSON text for one schema. A state is a
  stack of frames (tuples), interned to an int; `step(state, char)` is memoized. Objects with
  `properties` are written in the schema's order: each optional property may be left out, a required
  one may not, so the closing `}` comes only after every required property. At most MAX_WS
  whitespace characters in a row between tokens of JSON; none after the value ends; at most
  MAX_DIGITS digits in a number's integer part and in its fraction, MAX_EXP_DIGITS in its exponent.
- `JsonConstraint(automaton, index)`: the per-generation state. `allowed()` is a bool mask over
  the vocabulary: ids whose whole text (precomputed by `TokenIndex`: special ids and ids that are
  not whole UTF-8 on their own are never allowed) steps the automaton without dying; the
  end-of-generation ids only once the text is a complete value. Masks are cached per state (the
  same state recurs: inside every string, at each array element), and computed by walking the
  vocabulary in sorted order so that a shared prefix is stepped once (a trie walk over a flat array).

Invariant: every prefix the masks allow can be completed to a valid document, because each frame
only accepts characters after which the value can still be finished (a string can always close,
a number always has a digit next, required properties can always be written). A generation that
ends at end-of-generation therefore parses and validates; one cut by max_tokens is a prefix.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

MAX_WS = 16  # whitespace characters in a row between JSON tokens (bounds a run of blank tokens)
MAX_DIGITS = 16  # digits of a number's integer part, and of its fraction
MAX_EXP_DIGITS = 3  # digits of its exponent
MASK_CACHE = 512  # masks kept per automaton (each one bit per vocabulary id)
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
ANNOTATIONS = {"title", "description", "$schema", "$id", "$comment", "default", "examples"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
            "enum", "const"} | ANNOTATIONS
WS = " \t\n\r"
DIGITS = "0123456789"


class SchemaError(ValueError):
    """A schema outside the supported subset; `keyword` is the offending keyword's path below the
    schema's root (e.g. "properties.name.minLength"; "" for the root)."""

    def __init__(self, message: str, keyword: str | None = None):
        super().__init__(message)
        self.keyword = keyword


class Node:
    """One schema position. kinds: set of the allowed types (for "any": all of them); literals:
    the JSON texts an enum/const allows (then only those); props: [(name, Node, required)] in order
    (None: free keys with values of `any`); prefix: the Nodes of an array's first elements, one per
    position (a tuple); items: the Node of the elements after them (None: any value), unless closed
    (no elements after the prefix)."""

    __slots__ = ("kinds", "literals", "props", "items", "one", "prefix", "closed")

    def __init__(self, kinds: frozenset, literals: tuple | None = None, props: list | None = None,
                 items: "Node | None" = None, one: bool = False):
        self.kinds, self.literals, self.props, self.items = kinds, literals, props, items
        self.one = one  # an object with exactly one of `props`, any of them (see one_property_object)
        self.prefix: tuple = ()
        self.closed = False


def one_property_object(alternatives: list[tuple[str, Node]]) -> Node:
    """An object with exactly one property, one of `alternatives` (name, value): how `tl serve` lets a
    reply be either a tool call or an answer (JSON Schema would need oneOf, outside the subset)."""
    return Node(frozenset({"object"}), props=[(name, node, False) for name, node in alternatives], one=True)


ANY_KINDS = frozenset(TYPES) - {"integer"}  # number covers integers


def any_node() -> Node:
    n = Node(ANY_KINDS)
    n.items = n
    return n


def compile_schema(schema: Any, path: str = "schema", depth: int = 0) -> Node:
    if depth > 32:
        raise SchemaError(f"{path}: the schema nests more than 32 levels", _rel(path, ""))
    if schema is True or schema == {}:
        return any_node()
    if not isinstance(schema, dict):
        raise SchemaError(f"{path} must be an object (a JSON schema)", _rel(path, ""))
    for key in schema:
        if key not in KEYWORDS:
            raise SchemaError(f"{path}: the JSON schema keyword '{key}' is not supported (supported: "
                              f"{', '.join(sorted(KEYWORDS - ANNOTATIONS))})", _rel(path, key))
    kinds = _types(schema, path)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{path}.enum must be a non-empty list", _rel(path, "enum"))
        if "const" in schema and "enum" in schema:
            values = [v for v in values if v in schema["enum"]]
        kept = [v for v in values if kinds is None or _type_of(v) in kinds
                or (_type_of(v) == "integer" and "number" in kinds)]
        if not kept:
            raise SchemaError(f"{path}: no value of enum/const has the schema's type", _rel(path, "enum"))
        texts = tuple(dict.fromkeys(json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in kept))
        return Node(frozenset(), literals=texts)
    if kinds is None:
        kinds = {"object"} if "properties" in schema or "required" in schema else \
            {"array"} if {"items", "prefixItems", "additionalItems"} & set(schema) else set(ANY_KINDS)
    if "integer" in kinds and "number" in kinds:
        kinds.discard("integer")
    node = Node(frozenset(kinds))
    if "object" in kinds:
        node.props = _properties(schema, path, depth)
    if "array" in kinds:
        _array_items(node, schema, path, depth)
    return node


def _array_items(node: Node, schema: dict, path: str, depth: int) -> None:
    """An array's element schemas: `items` for all of them, or a tuple: `prefixItems` (then `items`
    for the rest) or, the older form, `items` as a list (then `additionalItems` for the rest)."""
    items, prefix = schema.get("items", {}), schema.get("prefixItems")
    if isinstance(items, list):
        if prefix is not None:
            raise SchemaError(f"{path}: prefixItems and a list of items cannot be combined", _rel(path, "prefixItems"))
        prefix, rest, rest_key = items, schema.get("additionalItems", {}), "additionalItems"
        prefix_key = "items"
    else:
        if "additionalItems" in schema:  # JSON Schema ignores it here: refused rather than ignored
            raise SchemaError(f"{path}.additionalItems applies only after a list of items",
                              _rel(path, "additionalItems"))
        rest, rest_key, prefix_key = items, "items", "prefixItems"
    if prefix is not None and not isinstance(prefix, list):
        raise SchemaError(f"{path}.{prefix_key} must be a list of schemas", _rel(path, prefix_key))
    node.prefix = tuple(compile_schema(p, f"{path}.{prefix_key}.{i}", depth + 1) for i, p in enumerate(prefix or []))
    if rest is False:
        node.closed = True
    else:
        node.items = compile_schema(rest, f"{path}.{rest_key}", depth + 1)


def _rel(path: str, key: str) -> str:
    """The path of `key` below the schema's root ("" for the root itself)."""
    return ".".join(p for p in (path[len("schema"):].lstrip("."), key) if p)


def _types(schema: dict, path: str) -> set | None:
    t = schema.get("type")
    if t is None:
        return None
    names = [t] if isinstance(t, str) else t
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise SchemaError(f"{path}.type must be a type name or a list of them", _rel(path, "type"))
    for n in names:
        if n not in TYPES:
            raise SchemaError(f"{path}.type: unknown type {n!r} (known: {', '.join(TYPES)})", _rel(path, "type"))
    return set(names)


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _properties(schema: dict, path: str, depth: int) -> list | None:
    props = schema.get("properties")
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, bool):
        raise SchemaError(f"{path}.additionalProperties: only true or false is supported",
                          _rel(path, "additionalProperties"))
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError(f"{path}.required must be a list of property names", _rel(path, "required"))
    if props is None and not required:
        return None if extra else []  # free keys, or (additionalProperties: false) only {}
    if props is not None and not isinstance(props, dict):
        raise SchemaError(f"{path}.properties must be an object", _rel(path, "properties"))
    props = dict(props or {})
    for r in required:
        if r not in props:
            if not extra:
                raise SchemaError(f"{path}: required property {r!r} is not in properties and "
                                  "additionalProperties is false", _rel(path, "required"))
            props[r] = {}
    out = []
    for name, sub in props.items():
        if any(c in name for c in '"\\') or any(ord(c) < 0x20 for c in name):
            raise SchemaError(f"{path}.properties: the name {name!r} needs escaping in JSON (not supported)",
                              _rel(path, "properties"))
        out.append((name, compile_schema(sub, f"{path}.properties.{name}", depth + 1), name in required))
    return out


# ---------------------------------------------------------------------- the automaton
#
# Frames (tuples; the state is a tuple of frames, the top last):
#   ("D",)                      the document is complete: nothing more
#   ("V", node, ws)             a value of `node` comes next (ws: whitespace seen)
#   ("S", esc)                  inside a string: esc 0, "\\" after a backslash, 1..4 hex digits to go
#   ("L", texts, typed)         one of the literal texts (enum, true/false/null), `typed` so far
#   ("N", int_only, sub, k)     a number; sub: "-", "0", "int", ".", "frac", "e", "esign", "exp"; k: digits
#                               in the current run (at most MAX_DIGITS, MAX_EXP_DIGITS in the exponent)
#   ("O", node, phase, idx, typed, ws)  an object; phase "open" (after "{"), "key" (after ","),
#                               "name" (typing a key: `typed`), "colon", "after"; idx: the next
#                               property that may come (objects with properties)
#   ("A", node, phase, ws, k)   an array; phase "open" (after "["), "next" (after ","), "after"; k: the
#                               elements begun, counted up to the length of the node's prefix (a tuple)

_NUM_DONE = {"0", "int", "frac", "exp"}


class Automaton:
    def __init__(self, root: Node):
        self.root = root
        self.frames: list[tuple] = []
        self.ids: dict[tuple, int] = {}
        self.trans: dict[tuple[int, str], int] = {}
        self.masks: dict[int, np.ndarray] = {}
        self.start = self.intern((("D",), ("V", root, 0)))

    def intern(self, state: tuple) -> int:
        sid = self.ids.get(state)
        if sid is None:
            sid = self.ids[state] = len(self.frames)
            self.frames.append(state)
        return sid

    def step(self, sid: int, ch: str) -> int:
        """The state after `ch`, or -1 when `ch` cannot come next."""
        key = (sid, ch)
        out = self.trans.get(key)
        if out is None:
            nxt = _step(self.frames[sid], ch)
            out = self.trans[key] = -1 if nxt is None else self.intern(nxt)
        return out

    def complete(self, sid: int) -> bool:
        """Whether the text so far is a whole valid document (end of input may come here)."""
        stack = self.frames[sid]
        while True:
            top = stack[-1]
            if top[0] == "D":
                return True
            if top[0] == "N" and top[2] in _NUM_DONE or top[0] == "L" and top[2] in top[1]:
                stack = stack[:-1]
                continue
            return False

    def finished(self, sid: int) -> bool:
        """Whether nothing but the end may come (the value closed)."""
        return self.frames[sid][-1][0] == "D"


def _step(stack: tuple, ch: str) -> tuple | None:
    while True:
        top, rest = stack[-1], stack[:-1]
        kind = top[0]
        if kind == "D":
            return None
        if kind == "V":
            node, ws = top[1], top[2]
            if ch in WS:
                return rest + (("V", node, ws + 1),) if ws < MAX_WS else None
            return _start_value(rest, node, ch)
        if kind == "S":
            esc = top[1]
            if esc == 0:
                if ch == '"':
                    return rest
                if ch == "\\":
                    return rest + (("S", "\\"),)
                return None if ord(ch) < 0x20 else stack
            if esc == "\\":
                if ch in '"\\/bfnrt':
                    return rest + (("S", 0),)
                return rest + (("S", 4),) if ch == "u" else None
            if ch in "0123456789abcdefABCDEF":
                return rest + (("S", esc - 1 if esc > 1 else 0),)
            return None
        if kind == "L":
            texts, typed = top[1], top[2]
            t2 = typed + ch
            left = tuple(t for t in texts if t.startswith(t2))
            if left:
                if left == (t2,):
                    return rest  # the one text it can be is complete
                return rest + (("L", left, t2),)
            if typed in texts:
                stack = rest  # complete (a number literal); the character belongs to what follows
                continue
            return None
        if kind == "N":
            nxt = _number(top[1], top[2], top[3], ch)
            if nxt is not None:
                return rest + (("N", top[1]) + nxt,)
            if top[2] in _NUM_DONE:
                stack = rest
                continue
            return None
        if kind == "O":
            return _object(rest, top, ch)
        if kind == "A":
            return _array(rest, top, ch)
        raise AssertionError(kind)


def _start_value(rest: tuple, node: Node, ch: str) -> tuple | None:
    if node.literals is not None:
        return _step(rest + (("L", node.literals, ""),), ch)
    kinds = node.kinds
    if ch == '"' and "string" in kinds:
        return rest + (("S", 0),)
    if ch == "{" and "object" in kinds:
        return rest + (("O", node, "open", 0, "", 0),)
    if ch == "[" and "array" in kinds:
        return rest + (("A", node, "open", 0, 0),)
    if (ch == "-" or ch in DIGITS) and ("number" in kinds or "integer" in kinds):
        int_only = "number" not in kinds
        return rest + (("N", int_only, "-" if ch == "-" else "0" if ch == "0" else "int", 0 if ch == "-" else 1),)
    if ch in "tf" and "boolean" in kinds:
        return _step(rest + (("L", ("true", "false"), ""),), ch)
    if ch == "n" and "null" in kinds:
        return _step(rest + (("L", ("null",), ""),), ch)
    return None


def _number(int_only: bool, sub: str, k: int, ch: str) -> tuple[str, int] | None:
    """(sub, digits in the run) after `ch`, or None. Runs of digits are bounded (as llama.cpp's JSON
    grammar bounds them) so that a model cannot write digits forever."""
    digit = ch in DIGITS
    if sub == "-":
        return (("0" if ch == "0" else "int"), 1) if digit else None
    if sub in ("0", "int", "frac"):
        if digit and sub != "0":
            return (sub, k + 1) if k < MAX_DIGITS else None
        if ch == "." and sub != "frac" and not int_only:
            return ".", 0
        if ch in "eE" and not int_only:
            return "e", 0
        return None
    if sub == ".":
        return ("frac", 1) if digit else None
    if sub == "e":
        return ("esign", 0) if ch in "+-" else ("exp", 1) if digit else None
    if sub in ("esign", "exp"):
        return ("exp", k + 1) if digit and k < MAX_EXP_DIGITS else None
    raise AssertionError(sub)


def _allowed_keys(node: Node, idx: int) -> list[int]:
    """Indexes of the properties that may come next: from idx up to the first required one."""
    if node.one:
        return list(range(len(node.props))) if idx == 0 else []
    out = []
    for i in range(idx, len(node.props)):
        out.append(i)
        if node.props[i][2]:
            break
    return out


def _may_close(node: Node, idx: int) -> bool:
    if node.one:
        return idx > 0
    return node.props is None or not any(req for _, _, req in node.props[idx:])


def _object(rest: tuple, top: tuple, ch: str) -> tuple | None:
    _, node, phase, idx, typed, ws = top
    if phase in ("open", "key", "colon", "after") and ch in WS:
        return rest + (("O", node, phase, idx, typed, ws + 1),) if ws < MAX_WS else None
    if phase in ("open", "key"):
        if ch == "}" and phase == "open" and _may_close(node, idx):
            return rest
        if ch != '"':
            return None
        if node.props is None:  # a free key: any string
            return rest + (("O", node, "colon", idx, "", 0), ("S", 0))
        if not _allowed_keys(node, idx):
            return None
        return rest + (("O", node, "name", idx, "", 0),)
    if phase == "name":
        t2 = typed + ch
        for i in _allowed_keys(node, idx):
            name = node.props[i][0]
            if ch == '"' and typed == name:
                return rest + (("O", node, "colon", i + 1, name, 0),)
            if ch != '"' and name.startswith(t2):
                return rest + (("O", node, "name", idx, t2, 0),)
        return None
    if phase == "colon":
        if ch != ":":
            return None
        if node.props is None:
            value = _FREE_VALUE
        else:
            value = next(n for name, n, _ in node.props if name == typed)
        return rest + (("O", node, "after", idx, "", 0), ("V", value, 0))
    if phase == "after":
        if ch == "}" and _may_close(node, idx):
            return rest
        if ch == "," and (node.props is None or _allowed_keys(node, idx)):
            return rest + (("O", node, "key", idx, "", 0),)
        return None
    raise AssertionError(phase)


def _element(node: Node, k: int) -> Node | None:
    """The schema of an array's element k (from 0), or None when the array may not have it."""
    if k < len(node.prefix):
        return node.prefix[k]
    return None if node.closed else node.items or _FREE_VALUE


def _array(rest: tuple, top: tuple, ch: str) -> tuple | None:
    _, node, phase, ws, k = top
    if ch in WS:
        return rest + (("A", node, phase, ws + 1, k),) if ws < MAX_WS else None
    if phase == "after":
        if ch == "]":
            return rest
        return rest + (("A", node, "next", 0, k),) if ch == "," and _element(node, k) is not None else None
    if phase == "open" and ch == "]":
        return rest
    element = _element(node, k)
    if element is None:
        return None
    return _start_value(rest + (("A", node, "after", 0, min(k + 1, len(node.prefix))),), element, ch)


_FREE_VALUE = any_node()  # the values of free object keys and untyped array items


# ---------------------------------------------------------------------- tokens

class TokenIndex:
    """The vocabulary as text, sorted, with each entry's common prefix length with the previous one
    (so that a walk steps a shared prefix once). Ids that are special, empty, or not whole UTF-8 on
    their own are left out: constrained output never uses them."""

    def __init__(self, tok, vocab: int | None = None):
        self.vocab = vocab or tok.vocab_size
        entries = []
        for tid in range(tok.vocab_size):
            if tok.is_special(tid):
                continue
            try:
                text = tok.token_bytes(tid).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if text:
                entries.append((text, tid))
        entries.sort()
        self.texts = [t for t, _ in entries]
        self.ids = [i for _, i in entries]
        self.lcp = [0] * len(entries)
        for k in range(1, len(entries)):
            a, b = self.texts[k - 1], self.texts[k]
            n = min(len(a), len(b))
            i = 0
            while i < n and a[i] == b[i]:
                i += 1
            self.lcp[k] = i
        self.eog = sorted(t for t in tok.eog_ids if t < self.vocab)


_INDEXES: dict[int, tuple[Any, TokenIndex]] = {}


def token_index(tok, vocab: int | None = None) -> TokenIndex:
    """The TokenIndex of a tokenizer, built once per tokenizer object (about a second for 50,000 ids)."""
    key = id(tok)
    hit = _INDEXES.get(key)
    if hit is None or hit[0] is not tok or (vocab and hit[1].vocab != vocab):
        hit = _INDEXES[key] = (tok, TokenIndex(tok, vocab))
    return hit[1]


def compute_mask(automaton: Automaton, index: TokenIndex, sid: int) -> np.ndarray:
    packed = automaton.masks.get(sid)
    if packed is not None:
        return np.unpackbits(packed, count=index.vocab).view(bool)
    mask = np.zeros(index.vocab, dtype=bool)
    step, trans = automaton.step, automaton.trans  # (the memo read inline: this loop is the hot path)
    states = [sid]
    dead_at = -1  # the length of the shortest dead prefix of the previous text (-1: none)
    texts, ids, lcps = index.texts, index.ids, index.lcp
    for k in range(len(texts)):
        lcp = lcps[k]
        if 0 <= dead_at <= lcp:
            continue  # shares the dead prefix
        dead_at = -1
        del states[lcp + 1:]
        s = states[-1]
        text = texts[k]
        for d in range(lcp, len(text)):
            ch = text[d]
            nxt = trans.get((s, ch))
            s = step(s, ch) if nxt is None else nxt
            if s < 0:
                dead_at = d + 1
                break
            states.append(s)
        else:
            mask[ids[k]] = True
    if automaton.complete(sid):
        mask[index.eog] = True
    if len(automaton.masks) >= MASK_CACHE:
        automaton.masks.clear()
    automaton.masks[sid] = np.packbits(mask)  # (one bit per id: 6 KB for 49,152 ids)
    return mask


class JsonConstraint:
    """One generation's position in the automaton (GuidedSampler's `constraint`)."""

    def __init__(self, automaton: Automaton | Node, index: TokenIndex):
        self.automaton = automaton if isinstance(automaton, Automaton) else Automaton(automaton)
        self.index = index
        self.state = self.automaton.start
        self.text = ""

    def allowed(self) -> np.ndarray:
        if self.automaton.finished(self.state):
            mask = np.zeros(self.index.vocab, dtype=bool)
            mask[self.index.eog] = True
            return mask
        return compute_mask(self.automaton, self.index, self.state)

    def advance(self, tid: int) -> None:
        if tid in self.index.eog:
            return
        k = self._position(tid)
        text = self.index.texts[k]
        for ch in text:
            self.state = self.automaton.step(self.state, ch)
            if self.state < 0:
                raise AssertionError(f"token {tid} ({text!r}) was not allowed here")
        self.text += text

    def _position(self, tid: int) -> int:
        pos = getattr(self.index, "_pos", None)
        if pos is None:
            pos = self.index._pos = {t: k for k, t in enumerate(self.index.ids)}
        return pos[tid]

    @property
    def done(self) -> bool:
        return self.automaton.complete(self.state)
