"""A weighted relation's truth values come back as the f32 values they are, spelled shortest
(0.7), as f32 scalars print everywhere in TL: `print(R(a)?)` printed 0.699999988079071 and the rows
of `R(X)?` ("a", 0.699999988079071)."""
from __future__ import annotations

import numpy as np

import tensorlogic


def test_weighted_query_values_are_the_shortest_f32_decimals():
    r = tensorlogic.run("R(a) = 0.7\nR(b) = 0.3\nprint(R(a)?)\nprint(R(X)?)\nlet v = R(b)?\n")
    assert r.error is None, r.error_text
    assert r.output == '0.7\n[("a", 0.7), ("b", 0.3)]\n'
    assert np.float32(r.env["v"]) == np.float32(0.3)
