"""Guided sampling: a `sampler` value (`.sample(logits)`, as `token_sampler`'s) that adds a logit
bias, masks the tokens a constraint forbids, and records each step's log probabilities.

`GuidedSampler` serves `tl serve`'s `logit_bias`, `logprobs` / `top_logprobs` and `response_format`,
and TL's `json_sampler(sampler, tok, schema)` (constrained decoding in `generate`).

Invariants: each `.sample(logits)` reads the logits once to the host and then
- records (chosen id, its log probability, the `top` most likely ids and theirs), all from
  log_softmax of the model's logits as given (before the bias, the mask and the temperature: what
  the model says, as OpenAI's and llama-server's logprobs);
- chooses with the inner sampler's settings (`choose_token`, its generator; its repeat penalty) among
  the ids the constraint allows, after adding the bias (a bias of -100 or less bans the id outright)
  and OpenAI's presence and frequency penalties (over the ids this sampler chose);
- tells the constraint the chosen id. A constraint that is complete allows only end-of-generation
  ids, so `generate`'s loop ends there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .convert import BuiltinArgError, Tensor, type_name
from .registry import TLObject, builtin
from .sampling import REPEAT_LAST_N, SamplerValue, apply_repeat_penalty, choose_token

BAN = -100.0  # a logit bias at or below this bans the id (OpenAI: "-100 should result in a ban")


@dataclass
class StepRecord:
    """One generated id with its log probability and the most likely alternatives (best first)."""
    id: int
    logprob: float
    top: list[tuple[int, float]]


class GuidedSampler(TLObject):
    tl_type_name = "sampler"

    def __init__(self, inner: SamplerValue, vocab: int, bias: dict[int, float] | None = None,
                 constraint: Any = None, record_top: int | None = None, presence: float = 0.0,
                 frequency: float = 0.0):
        """`constraint`: an object with `allowed() -> bool array [vocab]` and `advance(id)` (e.g.
        models/json_grammar.JsonConstraint); `record_top`: None records nothing, k >= 0 records each
        step with its k most likely alternatives."""
        self.inner, self.vocab, self.constraint, self.record_top = inner, vocab, constraint, record_top
        self.bias = np.zeros(vocab, dtype=np.float64)
        for tid, b in (bias or {}).items():
            if not 0 <= tid < vocab:
                raise BuiltinArgError(f"logit bias: token id {tid} is outside the vocabulary (0..{vocab - 1})")
            self.bias[tid] = -np.inf if b <= BAN else b
        self.records: list[StepRecord] = []
        # OpenAI's penalties: each id chosen so far loses presence (once) + frequency x its count
        self.presence, self.frequency = float(presence), float(frequency)
        self.counts = np.zeros(vocab, dtype=np.float64)

    def sample(self, logits: Any) -> int:
        if not isinstance(logits, Tensor):
            raise BuiltinArgError(f"sample expects a logits tensor, got {type_name(logits)}")
        raw = np.asarray(logits.numpy(), dtype=np.float64).reshape(-1)
        if raw.size != self.vocab:
            raise BuiltinArgError(f"sample: logits have {raw.size} entries, the vocabulary {self.vocab}")
        s = self.inner
        x = apply_repeat_penalty(raw, s.recent, s.repeat_penalty) if s.repeat_penalty != 1.0 else raw.copy()
        x += self.bias
        if self.presence or self.frequency:
            x -= self.presence * (self.counts > 0) + self.frequency * self.counts
        if self.constraint is not None:
            x[~self.constraint.allowed()] = -np.inf
        if np.isneginf(x).all():
            raise BuiltinArgError("cannot sample: the logit bias and the constraint forbid every token")
        tid = choose_token(x, s.temperature, s.top_k, s.top_p, s.rng(), s.min_p)
        if s.repeat_penalty != 1.0:
            s.recent = (s.recent + [tid])[-REPEAT_LAST_N:]
        if self.constraint is not None:
            self.constraint.advance(tid)
        self.counts[tid] += 1
        if self.record_top is not None:
            self.records.append(_record(raw, tid, self.record_top))
        return tid

    def tl_get_field(self, name: str) -> Any:
        if name in ("temperature", "top_k", "top_p", "repeat_penalty", "min_p"):
            return getattr(self.inner, name)
        if name == "done":
            return bool(self.constraint is not None and self.constraint.done)
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "sample" and len(args) == 1:
            return self.sample(args[0])
        raise AttributeError(name)


def log_softmax(x: np.ndarray) -> np.ndarray:
    finite = x[np.isfinite(x)]
    m = finite.max() if finite.size else 0.0
    return x - (m + np.log(np.exp(x - m).sum()))


def _record(raw: np.ndarray, tid: int, top: int) -> StepRecord:
    lp = log_softmax(raw)
    best = np.argsort(-lp, kind="stable")[:top] if top > 0 else np.zeros(0, dtype=np.int64)
    return StepRecord(int(tid), float(lp[tid]), [(int(i), float(lp[i])) for i in best])


@builtin("json_sampler", "json_sampler(sampler, tok, schema)",
         "a sampler whose ids always spell JSON that validates against `schema` (a JSON schema, as a string; "
         "\"{}\": any JSON object): each step masks the ids that "
         "would break it, and once the value is complete only end-of-generation ids remain "
         "(docs/models.md, Constrained decoding)",
         min_args=3, max_args=3, category="models")
def json_sampler(sampler, tok, schema):
    from ..models.json_grammar import JsonConstraint, SchemaError, compile_schema, token_index

    if not isinstance(sampler, SamplerValue):
        raise BuiltinArgError(f"json_sampler: the first argument must be a token_sampler, got {type_name(sampler)}")
    tokenizer = getattr(tok, "tok", None)
    if tokenizer is None:
        raise BuiltinArgError(f"json_sampler: the second argument must be a tokenizer, got {type_name(tok)}")
    if not isinstance(schema, str):
        raise BuiltinArgError(f"json_sampler: the schema must be a string of JSON, got {type_name(schema)}")
    import json

    try:
        schema = json.loads(schema) if schema.strip() else {}
    except ValueError as e:
        raise BuiltinArgError(f"json_sampler: the schema is not JSON: {e}") from None
    try:
        root = compile_schema(schema if schema != {} else {"type": "object"})
    except SchemaError as e:
        raise BuiltinArgError(f"json_sampler: {e}") from None
    constraint = JsonConstraint(root, token_index(tokenizer))
    return GuidedSampler(sampler, tokenizer.vocab_size, constraint=constraint)


class RelationConstraint:
    """Token ids allowed where a logic relation holds: after id p, the ids y with R(p, y) (before
    the first one, R(start, y)). An id with no successor may only be followed by the end of
    generation. The relation is read once, after inference, when the sampler is made."""

    def __init__(self, successors: dict[int, np.ndarray], start: int, vocab: int, eog: list[int]):
        self.successors, self.last, self.vocab, self.eog = successors, start, vocab, eog
        self._masks: dict[int, np.ndarray] = {}

    def allowed(self) -> np.ndarray:
        mask = self._masks.get(self.last)
        if mask is None:
            mask = np.zeros(self.vocab, dtype=bool)
            nxt = self.successors.get(self.last)
            if nxt is None or nxt.size == 0:
                mask[self.eog] = True
            else:
                mask[nxt] = True
            self._masks[self.last] = mask
        return mask

    def advance(self, tid: int) -> None:
        self.last = tid

    @property
    def done(self) -> bool:
        return self.last not in self.successors


@builtin("relation_sampler", "relation_sampler(sampler, tok, R, start)",
         "a sampler whose next id y must satisfy R(previous id, y) for the logic relation R(a, b) over token ids "
         "(integers, or strings that are one token's text); the first id follows `start`; an id with no successor "
         "ends the generation (docs/models.md, Constrained decoding)",
         min_args=4, max_args=4, needs_ctx=True, category="models")
def relation_sampler(ctx, sampler, tok, relation, start):
    from .logic import _engine, _relation_name

    if not isinstance(sampler, SamplerValue):
        raise BuiltinArgError(f"relation_sampler: the first argument must be a token_sampler, got {type_name(sampler)}")
    tokenizer = getattr(tok, "tok", None)
    if tokenizer is None:
        raise BuiltinArgError(f"relation_sampler: the second argument must be a tokenizer, got {type_name(tok)}")
    engine = _engine(ctx)
    name = _relation_name(relation)
    table = engine.relation_tensor(name)
    axes = engine.relation_axes(name)
    if len(axes) != 2:
        raise BuiltinArgError(f"relation_sampler: {name} must relate two token ids, it has {len(axes)} arguments")
    vocab = tokenizer.vocab_size

    def token_of(c: Any) -> int:
        if isinstance(c, str):
            ids = tokenizer.encode(c, add_special=False)
            if len(ids) != 1:
                raise BuiltinArgError(f"relation_sampler: {c!r} in {name} is {len(ids)} tokens, not one")
            return ids[0]
        if isinstance(c, bool) or not isinstance(c, int):
            raise BuiltinArgError(f"relation_sampler: {name} holds {type_name(c)}, not token ids")
        return c

    held = np.asarray(table) > 0
    rows = [token_of(c) for c in axes[0]]
    cols = np.array([token_of(c) if held[:, j].any() else 0 for j, c in enumerate(axes[1])], dtype=np.int64)
    if cols.size and (cols.min() < 0 or cols.max() >= vocab):
        raise BuiltinArgError(f"relation_sampler: {name}(_, Y) holds a Y outside the token ids 0..{vocab - 1}")
    successors = {p: cols[held[i]] for i, p in enumerate(rows) if held[i].any()}
    first = token_of(start)
    constraint = RelationConstraint(successors, first, vocab, sorted(tokenizer.eog_ids))
    return GuidedSampler(sampler, vocab, constraint=constraint)
