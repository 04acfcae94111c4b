#!/usr/bin/env python3
"""Lint for docs/runtime.md rule R5: every entry from C++ into Objective-C runs inside @autoreleasepool.

Scans Objective-C++ sources (default: objc/*.mm and objc/*.h) and fails when an Objective-C
"touch" is not lexically inside an `@autoreleasepool { }` that opens within the same innermost
function, C++ lambda or block (a pool around a lambda or block literal does not cover the code
inside it, which runs later). Touches are: message sends `[receiver selector...]`, block literals,
other `@` directives and literals, calls of Objective-C-returning C functions (MTLCreate*,
dispatch_*, objc_*, CF*), and any mention of a member that owns an Objective-C object (declared
with a strong `id<...>` type, or a container of a struct that holds one) inside a method of the
class that declares it (assigning or erasing such a member releases an object). A block body must
also begin with @autoreleasepool, even when it only calls C++ (completion handlers, R5).

It is a lexical check, not a compiler: it understands the subset of C++ that objc/ is written in
and reports constructs it does not understand (e.g. @implementation) instead of guessing.
Usage: check_autoreleasepool.py [--list] [FILE...]; exit status 0 when clean, 1 on violations
(--list prints every touch found and whether a pool covers it).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

CONTROL_KEYWORDS = {"if", "for", "while", "switch", "catch", "constexpr"}
STATEMENT_KEYWORDS = {"return", "case", "throw", "else", "do", "co_return", "co_yield"}
SCOPE_KEYWORDS = {"class", "struct", "namespace", "enum", "union"}
OBJC_C_FUNCTION = re.compile(r"\b(MTLCreate\w*|dispatch_\w+|objc_\w+|CF[A-Z]\w*)\s*\(")
IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass
class Scope:
    kind: str          # "pool", "function", "lambda", "block", "class", "other"
    start: int         # offset of the "{"
    name: str = ""     # function name (qualified when written so) or class name
    owner: str = ""    # class whose members a function may touch


@dataclass
class Violation:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Report:
    files: int = 0
    functions: int = 0
    touches: int = 0
    violations: list[Violation] = field(default_factory=list)


def strip_comments_and_literals(text: str) -> str:
    """Blanks out comments, string and character literals (keeping offsets and newlines)."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 1, end)
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))  # keep the opening quote so '@"' stays visible
            i = j + 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n" or text[:i].rstrip(" \t").endswith("\n")):
            j = i
            while True:  # a preprocessor line, with continuations
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] != "\\":
                    break
                j = k + 1
            blank(i, k)
            i = k
        else:
            i += 1
    return "".join(out)


def matching(text: str, open_at: int, open_ch: str, close_ch: str) -> int:
    """Offset of the bracket closing the one at open_at (same kind), or -1."""
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == open_ch:
            depth += 1
        elif text[k] == close_ch:
            depth -= 1
            if depth == 0:
                return k
    return -1


def matching_backward(text: str, close_at: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for k in range(close_at, -1, -1):
        if text[k] == close_ch:
            depth += 1
        elif text[k] == open_ch:
            depth -= 1
            if depth == 0:
                return k
    return -1


def prev_significant(text: str, at: int) -> int:
    k = at - 1
    while k >= 0 and text[k].isspace():
        k -= 1
    return k


def word_before(text: str, at: int) -> tuple[str, int]:
    """The identifier (possibly qualified with ::, or ~dtor) ending just before `at`."""
    k = prev_significant(text, at)
    end = k + 1
    while k >= 0 and (text[k].isalnum() or text[k] in "_:~"):
        k -= 1
    return text[k + 1:end], k + 1


def classify_brace(text: str, at: int, in_function: bool) -> Scope:
    k = prev_significant(text, at)
    before = text[:k + 1]
    if before.endswith("@autoreleasepool"):
        return Scope("pool", at)
    if k < 0:
        return Scope("other", at)
    ch = text[k]
    if ch == "^":
        return Scope("block", at)
    if ch == "]":
        return Scope("lambda", at)
    # Skip trailing specifiers between ")" and "{".
    probe = k
    while True:
        word, word_start = word_before(text, probe + 1)
        if word in {"const", "override", "noexcept", "final", "mutable"}:
            probe = prev_significant(text, word_start)
            continue
        break
    if text[probe] == ")":
        open_paren = matching_backward(text, probe, "(", ")")
        if open_paren < 0:
            return Scope("other", at)
        j = prev_significant(text, open_paren)
        if j >= 0 and text[j] == "^":
            return Scope("block", at)
        if j >= 0 and text[j] == "]":
            return Scope("lambda", at)
        name, _ = word_before(text, open_paren)
        if name in CONTROL_KEYWORDS or not name:
            return Scope("other", at)
        if in_function:
            return Scope("other", at)  # e.g. a constructor call followed by a block statement
        return Scope("function", at, name=name)
    # "class Name {", "struct Name : Base {", "namespace x {", "enum ... {"
    statement_start = max(before.rfind(";"), before.rfind("{"), before.rfind("}")) + 1
    head = before[statement_start:]
    head_words = IDENT.findall(head)
    if head_words and head_words[0] in SCOPE_KEYWORDS | {"template"}:
        kind_index = next((i for i, w in enumerate(head_words) if w in {"class", "struct"}), -1)
        if kind_index >= 0 and kind_index + 1 < len(head_words):
            return Scope("class", at, name=head_words[kind_index + 1])
        return Scope("other", at)
    return Scope("other", at)


def owning_members(clean: str) -> dict[str, set[str]]:
    """Per class: members that own an Objective-C object (strong id<...> or a container of a
    struct that holds a strong id)."""
    owning_structs: set[str] = set()
    members: dict[str, set[str]] = {}
    for m in re.finditer(r"\b(class|struct)\s+(\w+)[^;{]*\{", clean):
        body_end = matching(clean, m.end() - 1, "{", "}")
        if body_end < 0:
            continue
        body = clean[m.end():body_end]
        for d in re.finditer(r"([^;{}]*?)\bid<\w+>\s*\w+\s*(=[^;]*)?;", body):
            if "__unsafe_unretained" not in d.group(1):
                owning_structs.add(m.group(2))
    for m in re.finditer(r"\b(class|struct)\s+(\w+)[^;{]*\{", clean):
        body_end = matching(clean, m.end() - 1, "{", "}")
        if body_end < 0:
            continue
        body = clean[m.end():body_end]
        names: set[str] = set()
        for decl in re.finditer(r"([^;{}()]*?)\b(\w+_)\s*(=[^;]*)?;", body):
            type_text = decl.group(1)
            if "__unsafe_unretained" in type_text:
                continue
            if re.search(r"\bid<\w+>", type_text) or any(
                re.search(rf"\b{s}\b", type_text) for s in owning_structs
            ):
                names.add(decl.group(2))
        if names:
            members.setdefault(m.group(2), set()).update(names)
    return members


def is_attribute(text: str, at: int) -> int:
    """If text[at:] starts a C++ [[attribute]], returns the offset after it, else -1."""
    m = re.match(r"\[\[\s*[\w:]+(\([^()]*\))?\s*(,\s*[\w:]+(\([^()]*\))?\s*)*\]\]", text[at:])
    return at + m.end() if m else -1


def flatten(content: str) -> str:
    """Replaces nested (), [] and {} groups by placeholders so top-level structure is visible."""
    out, depth = [], 0
    for ch in content:
        if ch in "([{":
            if depth == 0:
                out.append(ch)
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


MESSAGE = re.compile(r"^\s*(\S(?:.*\S)?)\s+([A-Za-z_]\w*)\s*(:.*)?$", re.S)


def message_sends(clean: str) -> list[int]:
    found = []
    i = 0
    while i < len(clean):
        if clean[i] != "[":
            i += 1
            continue
        after_attr = is_attribute(clean, i)
        if after_attr >= 0:
            i = after_attr
            continue
        k = prev_significant(clean, i)
        if k >= 0 and (clean[k].isalnum() or clean[k] in "_)]"):
            word, _ = word_before(clean, k + 1)
            if word not in STATEMENT_KEYWORDS:
                i += 1  # a subscript or an array declarator
                continue
        close = matching(clean, i, "[", "]")
        if close < 0:
            i += 1
            continue
        m = MESSAGE.match(flatten(clean[i + 1:close]))
        if m and (m.group(1)[-1].isalnum() or m.group(1)[-1] in "_)]\""):
            found.append(i)
        i += 1
    return found


def other_touches(clean: str) -> list[tuple[int, str]]:
    touches = []
    for m in re.finditer(r"@(\w*)", clean):
        if m.group(1) != "autoreleasepool":
            touches.append((m.start(), "@" + (m.group(1) or "literal")))
    for m in re.finditer(r"\^\s*(\([^()]*\)\s*)?\{", clean):
        touches.append((m.start(), "block literal"))
    for m in OBJC_C_FUNCTION.finditer(clean):
        touches.append((m.start(), m.group(1) + "()"))
    return touches


def check_file(path: Path, members: dict[str, set[str]], report: Report,
               listing: bool = False) -> None:
    text = path.read_text(encoding="utf-8")
    clean = strip_comments_and_literals(text)
    line_of = lambda offset: text.count("\n", 0, offset) + 1  # noqa: E731
    if re.search(r"@(implementation|interface)\b", clean):
        report.violations.append(Violation(
            str(path), line_of(clean.find("@")),
            "@implementation/@interface is not understood by this lint; extend it first"))
        return

    # Walk the braces once, recording the scope stack at every offset of interest.
    touches: list[tuple[int, str]] = [(p, "message send") for p in message_sends(clean)]
    touches += other_touches(clean)
    for cls, names in members.items():
        for name in names:
            for m in re.finditer(rf"(?<![\w.>]){re.escape(name)}\b", clean):
                touches.append((m.start(), f"owning member {name}"))
    touches.sort()

    stack: list[Scope] = []
    events = sorted([(i, c) for i, c in enumerate(clean) if c in "{}"] +
                    [(p, t) for p, t in touches], key=lambda e: e[0])
    for offset, what in events:
        if what == "{":
            in_function = any(s.kind in {"function", "lambda", "block"} for s in stack)
            scope = classify_brace(clean, offset, in_function)
            if scope.kind == "function":
                report.functions += 1
                qualified = scope.name
                if "::" in qualified:
                    scope.owner = qualified.split("::")[-2]
                else:
                    enclosing = next((s for s in reversed(stack) if s.kind == "class"), None)
                    scope.owner = enclosing.name if enclosing else ""
            elif scope.kind in {"lambda", "block"}:
                report.functions += 1
                parent = next((s for s in reversed(stack) if s.kind == "function"), None)
                scope.owner = parent.owner if parent else ""
            if scope.kind == "block":
                first = clean[offset + 1:].lstrip()
                if not first.startswith("@autoreleasepool"):
                    report.violations.append(Violation(
                        str(path), line_of(offset),
                        "a block body must begin with @autoreleasepool (it runs on another thread later)"))
            stack.append(scope)
            continue
        if what == "}":
            if stack:
                stack.pop()
            continue
        # A touch: find the innermost function-like scope and a pool above it.
        callable_index = next((i for i in range(len(stack) - 1, -1, -1)
                               if stack[i].kind in {"function", "lambda", "block"}), -1)
        if callable_index < 0:
            continue  # a declaration at namespace or class scope
        scope = stack[callable_index]
        if what.startswith("owning member "):
            member = what[len("owning member "):]
            if member not in members.get(scope.owner, set()):
                continue  # same name in another class
        report.touches += 1
        inside_pool = any(s.kind == "pool" for s in stack[callable_index + 1:])
        if listing:
            print(f"{path}:{line_of(offset)}: {what} in {scope.name or scope.kind}: "
                  f"{'pool' if inside_pool else 'NO POOL'}")
        if not inside_pool:
            where = scope.name or scope.kind
            report.violations.append(Violation(
                str(path), line_of(offset), f"{what} outside @autoreleasepool in {where}"))


def main(argv: list[str]) -> int:
    listing = "--list" in argv
    argv = [a for a in argv if a != "--list"]
    root = Path(__file__).resolve().parent
    paths = [Path(a) for a in argv] or sorted(root.glob("*.mm")) + sorted(root.glob("*.h"))
    # Classes are declared in headers and defined in .mm files: collect owners from every file.
    members: dict[str, set[str]] = {}
    for path in paths:
        for cls, names in owning_members(strip_comments_and_literals(path.read_text("utf-8"))).items():
            members.setdefault(cls, set()).update(names)
    report = Report()
    for path in paths:
        report.files += 1
        check_file(path, members, report, listing)
    for violation in report.violations:
        print(violation)
    status = "FAILED" if report.violations else "ok"
    print(f"check_autoreleasepool: {status}: {report.files} files, {report.functions} functions/"
          f"lambdas/blocks, {report.touches} Objective-C touches, "
          f"{len(report.violations)} violations")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
