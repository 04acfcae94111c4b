"""A range prints its values (it printed `<range>`); a long one prints its bounds."""
from __future__ import annotations

import tensorlogic


def test_ranges_print_their_values():
    r = tensorlogic.run("print(range(3))\nprint(range(1, 10, 3), len(range(1, 10, 3)))\nprint(str(range(0)))\n"
                        "print([range(2)])\nprint(range(5000))\nprint(range(0, 9000, 2))\n")
    assert r.error is None, r.error_text
    assert r.output == "[0, 1, 2]\n[1, 4, 7] 3\n[]\n[[0, 1]]\nrange(0, 5000)\nrange(0, 9000, 2)\n"
