"""The batch scheduler's sampling from a host row (SamplerValue.sample_host: a step's logits are read
once for all its rows) chooses what SamplerValue.sample chooses from the same logits on the device:
the same ids, draw for draw, with or without temperature, top-k/top-p/min-p and the repeat penalty;
bad logits are the same error. choose_token's ordering of float32 logits (one sort of unique integer
keys) is np.argsort(-x, kind="stable") exactly: ties in id order, -0.0 equal to 0.0, -inf last."""
from __future__ import annotations

import numpy as np
import pytest

from tensorlogic import _core as core
from tensorlogic.builtins.convert import BuiltinArgError
from tensorlogic.builtins.sampling import SamplerValue, _most_likely_first


def _awkward_logits(rng, n: int) -> np.ndarray:
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 50.0])).astype(np.float32)
    x[rng.integers(0, n, size=n // 3)] = x[rng.integers(0, n)]  # many equal logits
    for v in (-np.inf, 0.0, -0.0, 1e-45, -1e-45, np.finfo(np.float32).max, -np.finfo(np.float32).max):
        x[rng.integers(0, n)] = v
    return x


def test_float32_order_is_the_stable_argsort():
    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 17, 1000, 49152, 65537]:
        x = _awkward_logits(rng, n) if n > 16 else rng.standard_normal(n).astype(np.float32)
        xd = x.astype(np.float64)
        assert np.array_equal(_most_likely_first(xd, x), np.argsort(-xd, kind="stable")), n
    zeros = np.array([0.0, -0.0, 0.0, -0.0], np.float32)  # all equal: id order
    assert _most_likely_first(zeros.astype(np.float64), zeros).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("settings", [
    dict(temperature=0.0), dict(temperature=0.8), dict(temperature=1.3, top_k=40),
    dict(temperature=0.7, top_p=0.9, min_p=0.05), dict(temperature=0.0, repeat_penalty=1.3),
    dict(temperature=0.9, top_k=5, repeat_penalty=1.2)])
def test_host_rows_choose_what_device_logits_choose(settings):
    s = dict(temperature=0.0, top_k=0, top_p=1.0, repeat_penalty=1.0, min_p=0.0) | settings
    args = (s["temperature"], s["top_k"], s["top_p"], 1234, s["repeat_penalty"], s["min_p"])
    device, host = SamplerValue.seeded(*args), SamplerValue.seeded(*args)
    rng = np.random.default_rng(1)
    base = rng.standard_normal(4096).astype(np.float32) * 3
    for step in range(40):
        row = base + rng.standard_normal(4096).astype(np.float32) * 0.5
        row[rng.integers(0, 4096, size=50)] = row[7]  # ties
        want = device.sample(core.from_numpy(row.reshape(1, -1)))
        assert host.sample_host(row) == want, step
    assert host.recent == device.recent


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_host_rows_refuse_bad_logits_as_the_device_path_does(temperature):
    for bad in ("nan", "inf", "all -inf"):
        x = np.linspace(-3, 3, 50).astype(np.float32)
        if bad == "all -inf":
            x[:] = -np.inf
        else:
            x[11] = np.nan if bad == "nan" else np.inf
        with pytest.raises(BuiltinArgError, match="logits contain NaN"):
            SamplerValue.seeded(temperature, 0, 1.0, 1).sample_host(x)


def test_host_greedy_row_with_some_minus_infinity_takes_the_first_largest():
    """The greedy host path (one argmax over the f32 row) against choose_token's checked one:
    banned (-inf) ids are skipped, ties go to the lowest id, a row with one finite logit works."""
    x = np.full(64, -np.inf, np.float32)
    x[40] = -1e30
    assert SamplerValue.seeded(0.0, 0, 1.0, 1).sample_host(x) == 40
    x[[5, 9, 33]] = np.float32(2.5)
    x[[1, 2]] = -np.inf
    assert SamplerValue.seeded(0.0, 0, 1.0, 1).sample_host(x) == 5
