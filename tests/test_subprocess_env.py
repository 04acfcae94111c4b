"""Tests that start `python -m tensorlogic` in a subprocess must point PYTHONPATH at the package under
test (tensorlogic.__file__'s parent), never at the source tree's python/ folder: CI installs the
package into a venv, and the source tree has no built `_core`, so such a subprocess fails there with
an ImportError while passing on a developer's machine (it broke CI twice)."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SOURCE_TREE_PATH = re.compile(r"""PYTHONPATH.*(["']python["']|/ ?["']python["'])""")


def test_no_subprocess_test_imports_the_source_tree():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SOURCE_TREE_PATH.search(line):
                offenders.append(f"{path.relative_to(TESTS)}:{n}: {line.strip()}")
    assert not offenders, "use the package under test's parent folder instead:\n" + "\n".join(offenders)
