"""Sampling: `temperature_sample`, `top_k`, `top_p`, `multinomial`, `random`, `seed`, and the
next-token chooser `token_sampler` (a `sampler` value with `.sample(logits)`).

Invariants: every draw goes through `choose_token` (softmax(logits / T), restricted to the top-k,
then to the top-p mass) or `multinomial`; all randomness comes from the run's generator (`ctx.rng`,
seeded by `tl run --seed N` or `seed(n)`), looked up at each draw so that `seed(n)` affects samplers
made before it; only `token_sampler(..., seed=s)` with s >= 0 owns a generator of its own. So a
seeded program samples the same tokens every run. Every sampler returns an int id.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .convert import BuiltinArgError, Tensor, core, to_float, to_int, to_tensor, type_name
from .registry import TLObject, builtin

C = "sampling"


def choose_token(logits: np.ndarray, temperature: float, top_k: int, top_p: float,
                 rng: np.random.Generator, min_p: float = 0.0) -> int:
    """One id from softmax(logits / T) restricted to the k largest (0: all), then to the smallest
    set of the most likely whose mass reaches top_p, then (min_p > 0) to those whose probability is
    at least min_p times the most likely one's (as llama.cpp, on the logits before T); argmax at
    T = 0. -inf logits are never drawn."""
    src = np.asarray(logits).reshape(-1)
    x = np.asarray(src, dtype=np.float64)
    if x.size == 0:
        raise BuiltinArgError("logits are empty")
    if np.isnan(x).any() or np.isposinf(x).any() or np.isneginf(x).all():
        raise BuiltinArgError("cannot sample: the logits contain NaN or +infinity (or are all -infinity)")
    if temperature < 0:
        raise BuiltinArgError(f"temperature must be >= 0, got {temperature}")
    if top_k < 0:
        raise BuiltinArgError(f"top_k must be >= 0, got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise BuiltinArgError(f"top_p must be in (0, 1], got {top_p}")
    if not 0.0 <= min_p <= 1.0:
        raise BuiltinArgError(f"min_p must be in [0, 1], got {min_p}")
    if temperature == 0:
        return int(np.argmax(x))
    order = _most_likely_first(x, src)
    order = order[np.isfinite(x[order])]
    if top_k > 0:
        order = order[:top_k]
    z = x[order] / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    if min_p > 0.0:  # order is most likely first: the kept ids are a prefix of it
        keep = max(1, int(np.count_nonzero(x[order] >= x[order[0]] + math.log(min_p))))
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[rng.choice(len(order), p=p)])


def _most_likely_first(x: np.ndarray, src: np.ndarray) -> np.ndarray:
    """np.argsort(-x, kind="stable"): the ids by logit, largest first, equal logits in id order.
    Logits that came as float32 (a model's) are sorted by their bits mapped to an order-preserving
    uint32 key, as two stable passes over its 16-bit halves (numpy sorts 16-bit ints by radix): low
    half first, then high, so equal keys keep id order; the same permutation (-0.0 counts as 0.0,
    as in the comparison). 0.7 ms for 49,152 ids where the float sort took 4.5, most of a sampled
    token's host time."""
    if src.dtype != np.float32:
        return np.argsort(-x, kind="stable")
    bits = (-src + np.float32(0.0)).view(np.uint32)  # + 0.0 turns -0.0 into 0.0
    key = np.where(bits >= 0x80000000, ~bits, bits | np.uint32(0x80000000))  # ascending with -x
    by_low = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
    return by_low[np.argsort((key[by_low] >> 16).astype(np.uint16), kind="stable")]


REPEAT_LAST_N = 64  # ids the repeat penalty looks back over (llama.cpp's default penalty_last_n)


def apply_repeat_penalty(logits: np.ndarray, recent, penalty: float) -> np.ndarray:
    """llama.cpp's repeat penalty: the logit of every id among `recent` is divided by `penalty`
    where positive and multiplied by it where negative (each id once, however often it occurred)."""
    x = np.array(logits, dtype=np.float64).reshape(-1)
    ids = np.unique(np.asarray([t for t in recent if 0 <= t < x.size], dtype=np.int64))
    if ids.size and penalty != 1.0:
        v = x[ids]
        x[ids] = np.where(v > 0, v / penalty, v * penalty)
    return x


def _logits(x) -> np.ndarray:
    return to_tensor(x, "logits").numpy().astype(np.float64).reshape(-1)


class SamplerValue(TLObject):
    """Chooses the next token from logits: greedy (argmax on the device) at temperature 0, else
    `choose_token` on the host with the generator `rng()` returns. Either way one host read per token.
    With a repeat penalty other than 1 the sampler remembers the ids it chose (the last
    REPEAT_LAST_N) and penalizes them on the host before choosing, greedy included; at 1 (the
    default) nothing changes, bit for bit."""

    tl_type_name = "sampler"

    def __init__(self, temperature: float, top_k: int, top_p: float, rng: Callable[[], np.random.Generator],
                 repeat_penalty: float = 1.0, min_p: float = 0.0):
        # validates the settings
        choose_token(np.zeros(1), temperature, top_k, top_p, np.random.default_rng(0), min_p)
        if not (repeat_penalty > 0 and math.isfinite(repeat_penalty)):
            raise BuiltinArgError(f"repeat_penalty must be a positive number, got {repeat_penalty}")
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.repeat_penalty, self.min_p = float(repeat_penalty), float(min_p)
        self.recent: list[int] = []
        self.rng = rng

    @classmethod
    def seeded(cls, temperature: float, top_k: int, top_p: float, seed: int | None,
               repeat_penalty: float = 1.0, min_p: float = 0.0) -> "SamplerValue":
        """A sampler with a generator of its own (`seed` None: seeded from the OS)."""
        generator = np.random.default_rng(seed)
        return cls(temperature, top_k, top_p, lambda: generator, repeat_penalty, min_p)

    def sample(self, logits: Any) -> int:
        if not isinstance(logits, Tensor):
            raise BuiltinArgError(f"sample expects a logits tensor, got {type_name(logits)}")
        if self.temperature == 0.0 and self.repeat_penalty == 1.0:
            flat = logits.reshape([-1])
            return self._read_greedy(core.argmax(flat), core.sum(flat.astype("f32")), flat)
        return self.sample_host(logits.numpy())

    def on_device(self) -> bool:
        """Whether the choice is made on the device (greedy without a repeat penalty): generate's
        loop then queues each next step before reading the id (generate_greedy_ahead). Not for a
        subclass that overrides `sample` alone: its `sample` must see every token."""
        if type(self).sample is not SamplerValue.sample and type(self).take is SamplerValue.take:
            return False
        return self.temperature == 0.0 and self.repeat_penalty == 1.0

    def take(self, picked: Any) -> int:
        """The id of `picked` = [logits, id tensor, sum of the logits] (generate.tl's greedy_pick),
        read back with the checks `sample` makes."""
        if not self.on_device():
            raise BuiltinArgError("take: this sampler chooses on the host (use sample(logits))")
        if not (isinstance(picked, list) and len(picked) == 3 and all(isinstance(v, Tensor) for v in picked)):
            raise BuiltinArgError(f"take expects [logits, id, sum] tensors, got {type_name(picked)}")
        return self._read_greedy(picked[1], picked[2], picked[0])

    @staticmethod
    def _read_greedy(best: Tensor, total: Tensor, logits: Tensor) -> int:
        # Greedy checks the logits as sampling does: a device-side sum is finite exactly when no
        # logit is NaN or infinite, so the whole vector is read back only when it is not.
        if not math.isfinite(float(total.item())):
            choose_token(logits.numpy().reshape(-1), 0.0, 0, 1.0, None)  # raises on NaN, +inf, all -inf
        return int(best.reshape([-1]).item())

    def sample_host(self, logits: np.ndarray) -> int:
        """What `sample` chooses for the same logits, read already (one [vocab] row of a batched
        step's logits, which the batch scheduler reads once for all its rows): the same id, the
        same generator draws and repeat-penalty memory. Greedy takes the first largest logit, as the
        device's argmax, after choose_token's checks (NaN, +inf, all -inf raise)."""
        if self.repeat_penalty != 1.0:
            x = apply_repeat_penalty(logits, self.recent, self.repeat_penalty)
            tid = choose_token(x, self.temperature, self.top_k, self.top_p, self.rng(), self.min_p)
            self.recent = (self.recent + [tid])[-REPEAT_LAST_N:]
            return tid
        if self.temperature == 0.0:
            # one pass over the f32 row (choose_token's f64 copy and four checks cost 14x more, per
            # row of every batched step): argmax picks the first NaN or +inf where there is one, and
            # a finite largest logit means neither is there and not all are -inf; else choose_token
            # raises as always
            row = np.asarray(logits).reshape(-1)
            if row.size:
                best = int(np.argmax(row))
                if math.isfinite(row[best]):
                    return best
            return choose_token(logits, 0.0, 0, 1.0, None)
        return choose_token(logits, self.temperature, self.top_k, self.top_p, self.rng(), self.min_p)

    def tl_get_field(self, name: str) -> Any:
        if name in ("temperature", "top_k", "top_p", "repeat_penalty", "min_p"):
            return getattr(self, name)
        raise AttributeError(name)

    def tl_call_method(self, name: str, args: list[Any]) -> Any:
        if name == "sample" and len(args) == 1:
            return self.sample(args[0])
        if name == "take" and len(args) == 1:
            return self.take(args[0])
        raise AttributeError(name)


@builtin("token_sampler", "token_sampler(temperature=0, top_k=0, top_p=1, seed=-1, min_p=0, repeat_penalty=1)",
         "a next-token chooser (`.sample(logits)`): greedy at temperature 0, else top-k/top-p/min-p sampling from "
         "the program's generator (or, with seed >= 0, a generator of its own); repeat_penalty != 1 penalizes "
         "the last 64 ids it chose (as llama.cpp)",
         min_args=0, max_args=6, needs_ctx=True, category="models")
def token_sampler(ctx, temperature=0.0, top_k=0, top_p=1.0, seed=-1, min_p=0.0, repeat_penalty=1.0):
    t, k, p = to_float(temperature, "temperature"), to_int(top_k, "top_k"), to_float(top_p, "top_p")
    s = to_int(seed, "seed")
    mp, rp = to_float(min_p, "min_p"), to_float(repeat_penalty, "repeat_penalty")
    if s >= 0:
        return SamplerValue.seeded(t, k, p, s, rp, mp)
    return SamplerValue(t, k, p, lambda: ctx.rng, rp, mp)


@builtin("chooses_on_device", "chooses_on_device(sampler)",
         "whether `sampler` picks ids on the device (token_sampler's greedy without a repeat penalty): then "
         "`sampler.take([logits, id, sum])` reads an id picked ahead (generate.tl's greedy loop)",
         min_args=1, max_args=1, category="models")
def chooses_on_device(sampler):
    return isinstance(sampler, SamplerValue) and sampler.on_device()


@builtin("temperature_sample", "temperature_sample(logits, T)",
         "sample an id from softmax(logits / T); T = 0 is argmax", min_args=2, max_args=2, needs_ctx=True,
         category=C)
def temperature_sample(ctx, logits, temperature):
    return choose_token(_logits(logits), to_float(temperature, "T"), 0, 1.0, ctx.rng)


@builtin("top_k", "top_k(logits, k, [T])", "sample an id among the k largest logits (temperature T, default 1)",
         min_args=2, max_args=3, needs_ctx=True, category=C)
def top_k(ctx, logits, k, temperature=1.0):
    kk = to_int(k, "k")
    if kk <= 0:
        raise BuiltinArgError(f"k must be positive, got {kk}")
    return choose_token(_logits(logits), to_float(temperature, "T"), kk, 1.0, ctx.rng)


@builtin("top_p", "top_p(logits, p, [T])",
         "sample an id from the smallest set of top logits whose probability reaches p (temperature T)",
         min_args=2, max_args=3, needs_ctx=True, category=C)
def top_p(ctx, logits, p, temperature=1.0):
    pp = to_float(p, "p")
    if not 0 < pp <= 1:
        raise BuiltinArgError(f"p must be in (0, 1], got {pp}")
    return choose_token(_logits(logits), to_float(temperature, "T"), 0, pp, ctx.rng)


@builtin("seed", "seed(n)", "reseed the program's random generator (rand, sampling)", min_args=1, max_args=1,
         needs_ctx=True, category=C)
def seed(ctx, n):
    value = to_int(n, "n")
    if value < 0:
        raise BuiltinArgError(f"a seed must be >= 0, got {value}")
    ctx.reseed(value)
    return None


@builtin("random", "random()", "a uniform float in [0, 1) from the program's generator", min_args=0, max_args=0,
         needs_ctx=True, category=C)
def random(ctx):
    return float(ctx.rng.random())


@builtin("multinomial", "multinomial(probs)", "sample an id with the given probabilities", min_args=1, max_args=1,
         needs_ctx=True, category=C)
def multinomial(ctx, probs):
    p = to_tensor(probs, "probs").numpy().astype(np.float64).reshape(-1)
    if p.size == 0 or (p < 0).any() or not np.isfinite(p).all() or p.sum() <= 0:
        raise BuiltinArgError("probs must be non-negative, finite and not all zero")
    return int(ctx.rng.choice(p.size, p=p / p.sum()))
