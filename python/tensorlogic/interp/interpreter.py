"""The TL interpreter: loads a program with its imports, compiles it once, runs top-level code,
`main`, `test` and `bench` blocks, and owns what the program created (globals, the logic engine).

Invariants: imports load each file once, in dependency order; a file that imports itself through
any chain is a TLImportError naming the chain; `close()` drops every program value (globals,
frames, functions, the logic engine) so the runtime's ledger can reach zero afterwards.
"""
from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from .. import builtins as _builtins_pkg  # noqa: F401 - registers every builtin
from ..builtins.run_context import RunContext
from ..lang import ast
from ..lang.errors import SourceSpan, TLError, TLImportError, TLRuntimeError
from ..lang.parser import parse, read_source
from .compiler import Compiler
from .control import CompileError, NonLocalReturn
from .deep_stack import run_deep
from .logic_bridge import ProgramLogic
from .scope import FunctionScopeInfo, Scope
from .values import UNSET, FunctionValue, StructType


@dataclass
class TestOutcome:
    name: str
    passed: bool
    error: TLError | None = None
    seconds: float = 0.0


@dataclass
class LoadedProgram:
    filename: str
    top_level: list[Callable] = field(default_factory=list)
    main: Callable | None = None
    main_info: FunctionScopeInfo | None = None
    tests: list[tuple[str, Callable, FunctionScopeInfo]] = field(default_factory=list)
    benches: list[tuple[str, Callable, FunctionScopeInfo]] = field(default_factory=list)


class Interpreter(ProgramLogic):
    def __init__(self, out: TextIO | None = None, stdin: TextIO | None = None, seed: int | None = None):
        self.globals: dict[str, Any] = {}
        self.global_names: set[str] = set()
        self.functions: dict[str, FunctionValue] = {}
        self.compiled_functions: list = []  # CompiledFunction of each `@compile fn` (their recordings)
        self.structs: dict[str, StructType] = {}
        self.relations: set[str] = set()
        self.learnable: set[str] = set()
        self.depth = 0
        self.static_errors: list[TLError] = []
        self.type_errors: list[TLError] = []  # declared types that name nothing: load() raises the first
        self.warnings: list[TLError] = []  # what `tl check` points out but still runs
        self.collect_errors = False  # `tl check`: load() keeps going and leaves every error in the lists
        self.static_rules: list = []  # every rule of the program as logic terms, for `tl check`
        self.unresolved_calls: list[tuple[str, SourceSpan]] = []
        self.unresolved_names: list[tuple[str, SourceSpan]] = []
        self.ctx = RunContext(self, out if out is not None else sys.stdout, stdin, seed)
        self._logic = None
        self._logic_decls: list[Callable[[Any], None]] = []
        self.pending_rules: list = []
        self._loaded_files: set[str] = set()
        self.top_info = FunctionScopeInfo("<top level>")
        self.top_scope = Scope(None, self.top_info, is_global=True)
        self.top_frame: list = []
        self._callback_compiler: Compiler | None = None
        # Parsing, compiling and running recurse once per nesting level and TL call: every public
        # method below runs on a deep thread (deep_stack.py), where Python's recursion limit leaves
        # room for MAX_CALL_DEPTH TL calls and the C stack is large enough for that limit.

    # ------------------------------------------------------------ loading

    def load_source(self, source: str, filename: str = "<input>") -> LoadedProgram:
        return run_deep(self.ctx.run, self._load_source, source, filename)

    def _load_source(self, source: str, filename: str) -> LoadedProgram:
        program = parse(source, filename)
        return self.load(program)

    def load_file(self, path: str, source: str | None = None) -> LoadedProgram:
        """Load the program at `path`; `source` is its text when the caller already read it (a pipe
        can be read only once). A `<name>` path (`<stdin>`) has no directory: imports are relative
        to the working directory."""
        return run_deep(self.ctx.run, self._load_file, path, source)

    def _load_file(self, path: str, source: str | None) -> LoadedProgram:
        if source is None:
            source = read_source(path)
        program = parse(source, path)
        if not path.startswith("<"):
            self.ctx.base_dir = os.path.dirname(os.path.abspath(path))
        return self.load(program)

    def load(self, program: ast.Program) -> LoadedProgram:
        """Resolve imports, declare, compile. Raises TLError (syntax, import, compile) before running."""
        return run_deep(self.ctx.run, self._load_checked, program)

    def _load_checked(self, program: ast.Program) -> LoadedProgram:
        try:
            return self._load(program)
        except RecursionError:
            # The compiler recurses once per nesting level (a 12,000-term `1+1+...` is 12,000 levels).
            raise TLRuntimeError("the program is nested too deeply to compile (an expression or block "
                                 "thousands of levels deep); split it into smaller pieces",
                                 SourceSpan(program.filename, 1, 1)) from None

    def _load(self, program: ast.Program) -> LoadedProgram:
        root_key = _file_key(program.filename)
        if root_key:
            self._loaded_files.add(root_key)
        ordered: list[ast.Program] = []
        self._collect_imports(program, [program.filename], ordered)
        ordered.append(program)
        new_functions: list[tuple[FunctionValue, ast.FnDecl, ast.Program]] = []
        for prog in ordered:
            new_functions += self._declare(prog)
        loaded = LoadedProgram(program.filename)
        for prog in ordered:
            compiler = Compiler(self, prog.filename, prog.source)
            for item in prog.items:
                if isinstance(item, (ast.FnDecl, ast.StructDecl, ast.ImplDecl, ast.Import, ast.RelationDecl,
                                     ast.EntityDecl)):
                    continue
                if isinstance(item, (ast.MainBlock, ast.TestBlock, ast.BenchBlock)):
                    continue
                try:
                    loaded.top_level.append(compiler.compile_stmt(item, self.top_scope))
                except CompileError as e:
                    if not self.collect_errors:
                        raise
                    self.static_errors.append(e)
        for fv, decl, prog in new_functions:
            Compiler(self, prog.filename, prog.source).compile_function(fv, decl)
        compiler = Compiler(self, program.filename, program.source)
        for item in program.items:
            if isinstance(item, ast.MainBlock):
                if loaded.main is not None:
                    raise compiler.error("a program has at most one main block", item, CompileError)
                loaded.main, loaded.main_info = self._compile_block_function(compiler, "main", item.body)
            elif isinstance(item, ast.TestBlock):
                body, info = self._compile_block_function(compiler, f"test {item.name}", item.body)
                loaded.tests.append((item.name, body, info))
            elif isinstance(item, ast.BenchBlock):
                body, info = self._compile_block_function(compiler, f"bench {item.name}", item.body)
                loaded.benches.append((item.name, body, info))
        if len(self.top_frame) < self.top_info.nslots:
            self.top_frame.extend([UNSET] * (self.top_info.nslots - len(self.top_frame)))
        if self.type_errors and not self.collect_errors:
            raise self.type_errors[0]
        return loaded

    def _compile_block_function(self, compiler: Compiler, name: str, body: ast.Block):
        info = FunctionScopeInfo(name)
        scope = Scope(None, info)
        return compiler.compile_block(body, scope, new_scope=False), info

    def _collect_imports(self, program: ast.Program, stack: list[str], ordered: list[ast.Program]) -> None:
        base = os.path.dirname(os.path.abspath(program.filename)) if not program.filename.startswith("<") \
            else os.getcwd()
        for item in program.items:
            if not isinstance(item, ast.Import):
                continue
            path = _import_path(base, item.path)
            span = SourceSpan(program.filename, item.line, item.column,
                              _line_of(program.source, item.line))
            key = _file_key(path)
            if any(_file_key(s) == key for s in stack):
                chain = " -> ".join(os.path.basename(s) for s in stack + [path])
                raise TLImportError(f"circular import: {chain}", span)
            if key in self._loaded_files:
                continue
            try:
                source = read_source(path)
            except TLError as e:
                raise TLImportError(f"cannot import \"{item.path}\": {e.message}", span) from None
            sub = parse(source, path)
            self._loaded_files.add(key)
            self._collect_imports(sub, stack + [path], ordered)
            ordered.append(sub)

    def _declare(self, prog: ast.Program) -> list[tuple[FunctionValue, ast.FnDecl, ast.Program]]:
        out = []
        compiler = Compiler(self, prog.filename, prog.source)
        for item in prog.items:
            if isinstance(item, ast.StructDecl):
                if item.name in self.structs and self.structs[item.name].field_names != tuple(
                        f.name for f in item.fields):
                    raise compiler.error(f"struct '{item.name}' is declared twice", item, CompileError)
                st = self.structs.get(item.name) or StructType(
                    item.name, tuple(f.name for f in item.fields), tuple(f.type for f in item.fields), item.generics)
                self.structs[item.name] = st
        for item in prog.items:
            if isinstance(item, ast.StructDecl):
                for f in item.fields:
                    compiler.check_declared_type(f.type, item.generics)
        for item in prog.items:
            if isinstance(item, ast.FnDecl):
                fv = self.functions.get(item.name)
                if fv is None:
                    fv = FunctionValue(item.name, item, prog.filename)
                    self.functions[item.name] = fv
                else:  # redefinition (REPL): callers holding the value see the new body
                    fv.decl = item
                out.append((fv, item, prog))
            elif isinstance(item, ast.ImplDecl):
                st = self.structs.get(item.type_name)
                if st is None:
                    raise compiler.error(f"impl for unknown struct '{item.type_name}'", item, CompileError)
                for m in item.methods:
                    fv = st.methods.get(m.name)
                    if fv is None:
                        fv = FunctionValue(m.name, m, prog.filename, owner=st)
                        st.methods[m.name] = fv
                    else:
                        fv.decl = m
                    out.append((fv, m, prog))
            elif isinstance(item, ast.RelationDecl):
                self.relations.add(item.name)
                span = compiler.span(item)
                types = [t for _, t in item.params]
                self._logic_decls.append(lambda engine, n=item.name, t=types, s=span: engine.declare_relation(n, t, s))
            elif isinstance(item, ast.EntityDecl):
                span = compiler.span(item)
                members = list(item.members) if item.members else None
                self._logic_decls.append(lambda engine, n=item.name, m=members, s=span: engine.declare_entity(n, m, s))
        for node in _logic_nodes(prog.items):
            if isinstance(node, ast.Fact):
                self.relations.add(node.atom.relation)
                continue
            self.relations.add(node.head.relation)
            for lit in node.body:
                if lit.atom is not None:
                    self.relations.add(lit.atom.relation)
        return out

    # ------------------------------------------------------------ running

    def run_top_level(self, loaded: LoadedProgram) -> None:
        return run_deep(self.ctx.run, self._run_top_level, loaded)

    def _run_top_level(self, loaded: LoadedProgram) -> None:
        self._run_logic_decls()
        frame = self.top_frame
        for stmt in loaded.top_level:
            sig = _run_guarded(stmt, frame, "<top level>")
            if sig is not None and sig.__class__.__name__ == "Ret":
                break

    def run_main(self, loaded: LoadedProgram) -> None:
        return run_deep(self.ctx.run, self._run_main, loaded)

    def _run_main(self, loaded: LoadedProgram) -> None:
        if loaded.main is None:
            return
        frame = [UNSET] * loaded.main_info.nslots
        try:
            _run_guarded(loaded.main, frame, "main")
        finally:
            frame.clear()

    def run_tests(self, loaded: LoadedProgram, report: Callable[[TestOutcome], None] | None = None) -> list[TestOutcome]:
        return run_deep(self.ctx.run, self._run_tests, loaded, report)

    def _run_tests(self, loaded: LoadedProgram, report: Callable[[TestOutcome], None] | None) -> list[TestOutcome]:
        outcomes = []
        for name, body, info in loaded.tests:
            frame = [UNSET] * info.nslots
            start = time.perf_counter()
            try:
                _run_guarded(body, frame, f"test {name}")
                outcome = TestOutcome(name, True)
            except TLError as e:
                outcome = TestOutcome(name, False, e)
            finally:
                frame.clear()
            outcome.seconds = time.perf_counter() - start
            outcomes.append(outcome)
            if report is not None:
                report(outcome)
        return outcomes

    def run_benches(self, loaded: LoadedProgram, report: Callable[[str, int, float, float], None]) -> None:
        return run_deep(self.ctx.run, self._run_benches, loaded, report)

    def _run_benches(self, loaded: LoadedProgram, report: Callable[[str, int, float, float], None]) -> None:
        """Runs each bench block once to warm up, then until 0.5 s or 20 runs; reports mean and min."""
        for name, body, info in loaded.benches:
            times = []
            for i in range(21):
                frame = [UNSET] * info.nslots
                start = time.perf_counter()
                try:
                    _run_guarded(body, frame, f"bench {name}")
                    self.ctx.wait_for_device()
                finally:
                    frame.clear()
                elapsed = time.perf_counter() - start
                if i > 0:
                    times.append(elapsed)
                if sum(times) > 0.5:
                    break
            report(name, len(times), sum(times) / max(len(times), 1), min(times) if times else 0.0)

    def call_value(self, fn, argv: list):
        """Call a TL function value from outside the program's code (builtins, tensor equations, the
        LLM session): the compiled calls' own path, so the depth limit and error trace apply."""
        return run_deep(self.ctx.run, self._call_value, fn, argv)

    def _call_value(self, fn, argv: list):
        if self._callback_compiler is None:
            self._callback_compiler = Compiler(self, "<builtin>", "")
        return self._callback_compiler._call_value(fn, list(argv), None, "a builtin")

    def close(self) -> None:
        """Drop every value the program created (R6): globals, frames, functions, logic engine."""
        for cf in self.compiled_functions:
            cf.clear()
        self.compiled_functions.clear()
        self.globals.clear()
        self.top_frame.clear()
        self.functions.clear()
        self.structs.clear()
        self._callback_compiler = None
        self._logic = None
        self._logic_decls.clear()
        self.pending_rules.clear()
        self.static_errors.clear()
        gc.collect()


def _run_guarded(body: Callable, frame: list, where: str):
    try:
        return body(frame)
    except NonLocalReturn:
        return None
    except TLError:
        raise
    except RecursionError:
        raise TLRuntimeError(f"maximum recursion depth exceeded in {where}") from None


def _logic_nodes(items) -> list:
    """Every Rule and weighted Fact anywhere in the items (their relation names are relations)."""
    found = []
    stack = list(items)
    while stack:
        x = stack.pop()
        if isinstance(x, (ast.Rule, ast.Fact)):
            found.append(x)
        elif isinstance(x, (ast.MainBlock, ast.TestBlock, ast.BenchBlock)):
            stack.extend(x.body.stmts)
        elif isinstance(x, ast.FnDecl):
            stack.extend(x.body.stmts)
        elif isinstance(x, ast.Block):
            stack.extend(x.stmts)
        elif isinstance(x, (ast.While, ast.Loop, ast.For, ast.BlockStmt)):
            stack.extend(x.body.stmts)
        elif isinstance(x, ast.IfStmt):
            for _, b in x.branches:
                stack.extend(b.stmts)
            if x.else_block:
                stack.extend(x.else_block.stmts)
    return found


def _file_key(path: str) -> str:
    if path.startswith("<"):
        return ""
    return os.path.realpath(path)


def _line_of(source: str, line: int) -> str:
    lines = source.split("\n")
    return lines[line - 1] if 1 <= line <= len(lines) else ""


STDLIB_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "stdlib")


def _import_path(base: str, name: str) -> str:
    """`import "std/x.tl"` names the standard library shipped in the package (from anywhere); any
    other path is relative to the importing file."""
    if name.startswith("std/"):
        return os.path.join(STDLIB_DIR, name[len("std/"):])
    return os.path.normpath(os.path.join(base, name))
