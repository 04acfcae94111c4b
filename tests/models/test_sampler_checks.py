"""Issue 14.5: greedy decoding over NaN logits emitted id 0 silently (empty text, exit 0) while
sampling said "the logits contain NaN". Both paths check the logits the same way; masked logits
(-inf in places) stay valid for both."""
from __future__ import annotations

import numpy as np
import pytest

from tensorlogic import _core as core
from tensorlogic.builtins.convert import BuiltinArgError
from tensorlogic.builtins.sampling import SamplerValue


@pytest.fixture(autouse=True, params=["plain", "poison", "delay", "no_cache"])
def debug_mode(request):
    saved = core.get_debug()
    core.set_debug(poison=request.param == "poison", delay_us=200 if request.param == "delay" else 0,
                   no_cache=request.param == "no_cache")
    yield
    core.set_debug(poison=saved["poison"], delay_us=saved["delay_us"], no_cache=saved["no_cache"])


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("bad", ["all nan", "one nan", "plus inf", "all -inf"])
def test_bad_logits_are_an_error_for_greedy_and_sampling(temperature, bad):
    x = np.linspace(-3, 3, 50).astype(np.float32)
    if bad == "all nan":
        x[:] = np.nan
    elif bad == "one nan":
        x[17] = np.nan
    elif bad == "plus inf":
        x[3] = np.inf
    else:
        x[:] = -np.inf
    with pytest.raises(BuiltinArgError, match="logits contain NaN"):
        SamplerValue.seeded(temperature, 0, 1.0, 1).sample(core.from_numpy(x))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_masked_logits_are_still_fine_for_greedy(dtype):
    x = np.full(64, -np.inf, np.float32)
    x[[5, 9, 40]] = [1.0, 7.5, 2.0]
    assert SamplerValue.seeded(0.0, 0, 1.0, None).sample(core.from_numpy(x, dtype=dtype)) == 9
    y = np.linspace(-60000, 60000, 4096).astype(np.float32)  # sum overflows f16 but not f32
    assert SamplerValue.seeded(0.0, 0, 1.0, None).sample(core.from_numpy(y, dtype=dtype)) == 4095
