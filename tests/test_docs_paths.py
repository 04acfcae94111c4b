"""Paths named in the repository's code comments and docs exist, and nothing cites notes kept
outside the repository (docs/runtime.md holds the runtime's rules R1-R7).

Invariant: every token that looks like a repository path -- it has a directory part that starts
with a top-level folder (`cpp/`, `python/`, `tests/`, `docs/`, ...), a package folder
(`builtins/`, `interp/`, ...) or a C++ include root (`runtime/`, `backends/`, `bindings/`), and a
file extension -- names a file (or, with `*`, matches one) relative to the repository root, the
citing file's folder, `python/tensorlogic/`, `cpp/` or `tests/`. Paths with placeholders (`<name>`,
`{x}`, `$VAR`), URLs, build outputs (`.so`) and paths that climb out of the repository
(`../shared/reference/`: the reference data, see tests/models/reference_paths.py) are skipped.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

SCANNED_SUFFIXES = {".py", ".md", ".h", ".cpp", ".cu", ".cuh", ".mm", ".metal", ".tl", ".sh", ".cmake",
                    ".toml", ".lark", ".txt"}
SKIPPED_DIRS = {".git", "build", "__pycache__", ".pytest_cache", "dist", ".venv", "venv"}
FIRST_COMPONENTS = {
    # top-level folders of the repository
    "cpp", "python", "tests", "docs", "objc", "shaders", "bench", "examples",
    # python/tensorlogic/ packages
    "tensorlogic", "lang", "logic", "models", "builtins", "interp", "apps", "stdlib", "autograd",
    # cpp/ include roots
    "runtime", "backends", "bindings",
}
EXTENSIONS = "py|md|h|cpp|cu|cuh|mm|metal|tl|sh|cmake|txt|json|lark|toml|gguf"
PATH_TOKEN = re.compile(r"(?<![\w./$<{-])((?:\.\./)*(?:[\w.*-]+/)+[\w.*-]+\.(?:" + EXTENSIONS + r"))(?![\w/])")
# Citations of the design notes that live outside the repository.
EXTERNAL_NOTE_CASE = re.compile(r"\b(?:RUNTIME|ARCHITECTURE|LANGUAGE|MODELS|STYLE)\.md\b")


def _scanned_files(root: Path):
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.startswith("build") for part in rel.parts[:-1]):
            continue
        if path.is_file() and (path.suffix in SCANNED_SUFFIXES or path.name == "CMakeLists.txt"):
            if path.resolve() != THIS:
                yield path


def _exists(token: str, citing: Path, root: Path) -> bool:
    bases = [root, citing.parent, root / "python", root / "python" / "tensorlogic", root / "cpp", root / "tests"]
    for base in bases:
        if "*" in token:
            if any(base.glob(token)):
                return True
        elif (base / token).exists():
            return True
    return False


def _inside(token: str, citing: Path, root: Path) -> bool:
    """False for a relative path that climbs out of the repository (../shared/reference: data)."""
    if not token.startswith("../"):
        return True
    return (citing.parent / token).resolve().is_relative_to(root.resolve())


def stale_paths(root: Path) -> list[str]:
    bad = []
    for path in _scanned_files(root):
        text = path.read_text(errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in PATH_TOKEN.finditer(line):
                token = m.group(1)
                first = [p for p in token.split("/") if p not in ("..", ".")][0]
                known = first in FIRST_COMPONENTS or (path.parent / first).is_dir()
                if not known or not _inside(token, path, root):
                    continue
                if not _exists(token, path, root):
                    bad.append(f"{path.relative_to(root)}:{lineno}: {token}")
    return bad


def external_citations(root: Path) -> list[str]:
    bad = []
    for path in _scanned_files(root):
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if EXTERNAL_NOTE_CASE.search(line) or re.search(r"shared/design|\bdesign notes?\b", line, re.I):
                bad.append(f"{path.relative_to(root)}:{lineno}: {line.strip()[:120]}")
    return bad


def test_every_repository_path_named_in_code_and_docs_exists():
    bad = stale_paths(ROOT)
    assert not bad, "paths that name no file of the repository:\n  " + "\n  ".join(bad)


def test_nothing_cites_notes_kept_outside_the_repository():
    bad = external_citations(ROOT)
    assert not bad, "cite the repository's docs (docs/runtime.md, docs/language.md, ...) instead:\n  " + \
        "\n  ".join(bad)


def test_every_rule_r1_to_r7_is_documented_with_its_tests():
    """Comments cite R1..R7 by number; docs/runtime.md defines each and names what tests it."""
    text = (ROOT / "docs" / "runtime.md").read_text()
    for n in range(1, 8):
        section = re.search(rf"^## R{n}\. .*?(?=^## )", text, re.M | re.S)
        assert section, f"docs/runtime.md has no section for R{n}"
        assert "**Tested by:**" in section.group(0) and "**Kept in:**" in section.group(0), f"R{n}"


def test_the_checks_fail_on_a_planted_stale_path_and_citation(tmp_path):
    (tmp_path / "cpp" / "runtime").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "cpp" / "runtime" / "queue.h").write_text(
        "// Invariants (docs/runtime.md R2); the driver is python/tensorlogic/runtime/compiled.py.\n"
        "// See cpp/runtime/*.h and kernels_*.cpp; https://example.com/cpp/missing.h is a URL.\n")
    (tmp_path / "docs" / "runtime.md").write_text("# rules\nSee RUNTIME.md R1 and `cpp/runtime/queue.h:12`.\n")
    (tmp_path / "docs" / "other.md").write_text("Data: `../shared/reference/x.json`; `build/<name>/x.so`.\n")
    assert stale_paths(tmp_path) == ["cpp/runtime/queue.h:1: python/tensorlogic/runtime/compiled.py"]
    assert external_citations(tmp_path) == ["docs/runtime.md:2: See RUNTIME.md R1 and `cpp/runtime/queue.h:12`."]
