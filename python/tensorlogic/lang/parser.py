"""Parse TL source into `ast.Program` (grammar.lark, lark LALR(1), basic lexer).

Invariants: `parse` either returns a Program or raises TLSyntaxError — every other exception
(lark's, RecursionError, a bad escape) is turned into one, so no input crashes the caller. The
token filter below is the only place tokens are retyped; grammar.lark documents its rules.
The lark parser is built once per process (and cached on disk by lark between processes).
"""
from __future__ import annotations

import os
import re
from typing import Iterator

import lark
from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import ast
from .errors import SourceSpan, TLSyntaxError

_GRAMMAR_PATH = os.path.join(os.path.dirname(__file__), "grammar.lark")

_OPEN_TO_CLOSE = {"_LPAR": ")", "_LSQB": "]", "_ARRAY_LSQB": "]", "_LBRACE": "}", "STRUCT_LBRACE": "}"}
_BRACES = {"_LBRACE", "STRUCT_LBRACE"}
_CLOSERS = {"_RPAR", "_RSQB", "_RBRACE"}


class _TokenFilter(lark.lark.PostLex):
    """Retypes struct-literal braces, index-notation product names and annotations (see grammar.lark)
    and records open brackets so a premature end of file can name the bracket left open."""

    always_accept = ()

    def __init__(self) -> None:
        self.open_brackets: list[Token] = []

    @staticmethod
    def _is_index_notation_factor(peek) -> bool:
        """After `]`, does `NAME[a, b]` follow (index names only, not followed by `=`)? Then NAME
        continues an index-notation product rather than starting a new statement."""
        tok = peek(1)
        if tok is None or tok.type != "_LSQB":
            return False
        n = 2
        while True:
            name = peek(n)
            if name is None or name.type != "NAME":
                return False
            sep = peek(n + 1)
            if sep is None:
                return False
            if sep.type == "_RSQB":
                after = peek(n + 2)
                return after is None or after.type not in ("_EQUAL", "AUG_ASSIGN")
            if sep.type != "_COMMA":
                return False
            n += 2
            if n > 40:
                return False

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        self.open_brackets = []
        prev: Token | None = None
        prev2: Token | None = None
        pending: list[Token] = []
        it = iter(stream)

        def pull() -> Token | None:
            if pending:
                return pending.pop(0)
            return next(it, None)

        def peek(n: int) -> Token | None:
            while len(pending) < n:
                tok = next(it, None)
                if tok is None:
                    return None
                pending.append(tok)
            return pending[n - 1]

        while True:
            tok = pull()
            if tok is None:
                return
            ttype = tok.type
            if ttype == "_LBRACE" and prev is not None and prev.type == "NAME" and (
                    prev2 is None or prev2.type != "_STRUCT"):
                nxt, nxt2 = peek(1), peek(2)
                if nxt is not None and nxt2 is not None and nxt.type == "NAME" and nxt2.type == "_COLON":
                    tok = Token.new_borrow_pos("STRUCT_LBRACE", tok.value, tok)
            elif ttype == "NAME" and prev is not None and prev.type == "_RSQB" and prev.end_line == tok.line:
                if self._is_index_notation_factor(peek):
                    tok = Token.new_borrow_pos("JUXT_NAME", tok.value, tok)
            elif (ttype == "_LSQB" and prev is not None and prev.end_line < tok.line
                  and (not self.open_brackets or self.open_brackets[-1].type in _BRACES)):
                # At statement level a `[` that starts a line begins an array literal, never an
                # index into the previous line's value: `let h = 1` NEWLINE `[h, 2]` is two statements.
                tok = Token.new_borrow_pos("_ARRAY_LSQB", tok.value, tok)
            elif (ttype == "MINUS" and prev is not None and prev.end_line < tok.line
                  and (not self.open_brackets or self.open_brackets[-1].type in _BRACES)):
                # At statement level a `-` that starts a line begins a new statement (a negation),
                # never a subtraction from the previous line: `let a = 5` NEWLINE `-3` leaves a = 5.
                tok = Token.new_borrow_pos("LINE_MINUS", tok.value, tok)
            elif ttype == "ANNOTATION" and prev is not None and prev.end_line == tok.line:
                at = Token("AT", "@", tok.start_pos, tok.line, tok.column, tok.line, tok.column + 1,
                           tok.start_pos + 1)
                name = Token("NAME", tok.value[1:], tok.start_pos + 1, tok.line, tok.column + 1,
                             tok.end_line, tok.end_column, tok.end_pos)
                prev2, prev = at, name
                yield at
                yield name
                continue
            if tok.type in _OPEN_TO_CLOSE:
                self.open_brackets.append(tok)
            elif tok.type in _CLOSERS and self.open_brackets:
                self.open_brackets.pop()
            prev2, prev = prev, tok
            yield tok


_PARSER: lark.Lark | None = None
_FILTER = _TokenFilter()


def _lark_parser() -> lark.Lark:
    global _PARSER
    if _PARSER is None:
        with open(_GRAMMAR_PATH, encoding="utf-8") as f:
            grammar = f.read()
        kwargs = dict(parser="lalr", lexer="basic", postlex=_FILTER, maybe_placeholders=True,
                      keep_all_tokens=True, transformer=_CALLBACKS)
        try:
            _PARSER = lark.Lark(grammar, cache=True, **kwargs)
        except (OSError, PermissionError):
            _PARSER = lark.Lark(grammar, **kwargs)
    return _PARSER


# ---------------------------------------------------------------- error messages

_TERMINAL_WORDS = {
    "NAME": "a name", "JUXT_NAME": "a name", "INT": "an integer", "FLOAT": "a number",
    "STRING": "a string", "ANNOTATION": "an annotation like @temperature",
    "STRUCT_LBRACE": "'{'", "_ARRAY_LSQB": "'['", "LINE_MINUS": "'-'", "$END": "end of file", "EQ_OP": "'==' or '!='", "CMP_OP": "'<=' or '>='",
    "AUG_ASSIGN": "'+=', '-=', '*=' or '/='",
}
_EXPR_START = {"NAME", "INT", "FLOAT", "STRING", "_LPAR", "_LSQB", "_ARRAY_LSQB", "MINUS", "LINE_MINUS", "BANG", "TRUE",
               "FALSE", "LEARNABLE"}
_STMT_START = {"_LET", "_IF", "_WHILE", "_FOR", "_LOOP", "_RETURN", "_BREAK", "_CONTINUE", "_TENSOR", "_LEARN"}
_DECL_START = {"_FN", "_STRUCT", "_IMPL", "_IMPORT", "_MAIN", "_TEST", "_BENCH", "_RELATION", "ENTITY"}
_BINARY_OPS = {"PLUS", "MINUS", "STAR", "SLASH", "PERCENT", "AT", "ODOT", "STARSTAR", "EQ_OP", "CMP_OP",
               "LT", "GT", "ANDAND", "OROR"}


def _terminal_word(name: str, parser: lark.Lark) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    for term in parser.terminals:
        if term.name == name:
            pattern = term.pattern
            if isinstance(pattern, lark.lexer.PatternStr):
                return f"'{pattern.value}'"
    return name.strip("_").lower()


def _expected_words(expected: set[str], parser: lark.Lark) -> list[str]:
    expected = set(expected)
    words: list[str] = []
    if _DECL_START <= expected:
        expected -= _DECL_START
        words.append("a declaration")
    if _STMT_START <= expected:
        expected -= _STMT_START | _EXPR_START | {"_SEMI", "ANNOTATION"}
        words.append("a statement")
    elif _EXPR_START <= expected:
        expected -= _EXPR_START
        words.append("an expression")
    if len(expected & _BINARY_OPS) >= 6:
        expected -= _BINARY_OPS
        words.append("an operator")
    for skip in ("JUXT_NAME", "STRUCT_LBRACE", "QMARK", "_DOT", "_AS"):
        if len(expected) > 4:
            expected.discard(skip)
    words.extend(sorted(_terminal_word(t, parser) for t in expected))
    return words


def _describe_token(tok: Token, parser: lark.Lark) -> str:
    if tok.type == "$END":
        return "end of file"
    if tok.type in ("NAME", "JUXT_NAME"):
        return f"name '{tok.value}'"
    if tok.type in ("INT", "FLOAT"):
        return f"number {tok.value}"
    if tok.type == "STRING":
        return f"string {tok.value}"
    return f"'{tok.value}'"


def _join_words(words: list[str]) -> str:
    if len(words) > 8:
        words = words[:8] + ["..."]
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _source_line(source: str, line: int) -> str:
    lines = source.split("\n")
    if 1 <= line <= len(lines):
        return lines[line - 1]
    return ""


def _syntax_error(message: str, source: str, filename: str, line: int, column: int,
                  note: str | None = None) -> TLSyntaxError:
    return TLSyntaxError(message, SourceSpan(filename, line, column, _source_line(source, line)), note)


def _unclosed_block_comment(source: str, before: int | None) -> int | None:
    """Offset of a `/*` at or before `before` that is never closed (outside strings and // comments)."""
    start = source.rfind("/*", 0, (before or 0) + 2)
    if start < 0 or source.find("*/", start + 2) >= 0:
        return None
    line_start = source.rfind("\n", 0, start) + 1
    prefix = source[line_start:start]
    if "//" in prefix or prefix.count('"') % 2:
        return None
    return start


def _convert_lark_error(err: UnexpectedInput, source: str, filename: str, parser: lark.Lark) -> TLSyntaxError:
    if isinstance(err, UnexpectedCharacters):
        line, col = err.line, err.column
        rest = source[err.pos_in_stream:err.pos_in_stream + 2]
        if rest.startswith('"'):
            end = source.find("\n", err.pos_in_stream)
            text = source[err.pos_in_stream:end if end >= 0 else len(source)]
            if re.match(r'"([^"\\\n]|\\.)*$', text) or not text.endswith('"'):
                return _syntax_error("unterminated string (strings end with '\"' on the same line)",
                                     source, filename, line, col)
            return _syntax_error("bad escape in string", source, filename, line, col)
        if rest == "/*":
            return _syntax_error("unterminated block comment (missing '*/')", source, filename, line, col)
        char = source[err.pos_in_stream] if err.pos_in_stream < len(source) else ""
        return _syntax_error(f"unexpected character {char!r}", source, filename, line, col)
    if isinstance(err, UnexpectedToken):
        tok = err.token
        opened = _unclosed_block_comment(source, tok.start_pos if tok.type != "$END" else len(source))
        if opened is not None:
            line = source.count("\n", 0, opened) + 1
            col = opened - (source.rfind("\n", 0, opened) + 1) + 1
            return _syntax_error("unterminated block comment (missing '*/')", source, filename, line, col)
        expected_terms = set(err.expected)
        try:  # exact set (LALR's own may include lookaheads of reductions that would fail later)
            if err.interactive_parser is not None:
                expected_terms = set(err.interactive_parser.accepts()) or expected_terms
        except Exception:  # noqa: BLE001 - best effort; the LALR set is still right, only looser
            pass
        expected = _expected_words(expected_terms, parser)
        if tok.type == "$END":
            lines = source.rstrip().split("\n")
            line, col = len(lines), len(lines[-1]) + 1
            note = None
            if _FILTER.open_brackets:
                opened = _FILTER.open_brackets[-1]
                closer = _OPEN_TO_CLOSE[opened.type]
                note = f"'{opened.value}' opened at line {opened.line}, column {opened.column} is not closed with '{closer}'"
            msg = "unexpected end of file"
            if expected:
                msg += f"; expected {_join_words(expected)}"
            return _syntax_error(msg, source, filename, line, col, note)
        if tok.value == "/" and source[tok.start_pos:tok.start_pos + 2] == "/*":
            return _syntax_error("unterminated block comment (missing '*/')", source, filename,
                                 tok.line, tok.column)
        msg = f"unexpected {_describe_token(tok, parser)}"
        if expected:
            msg += f"; expected {_join_words(expected)}"
        note = None
        if tok.type == "_LARROW":
            note = "'<-' is the rule arrow; write 'x < -1' with a space for a comparison"
        return _syntax_error(msg, source, filename, tok.line, tok.column, note)
    if isinstance(err, UnexpectedEOF):
        lines = source.split("\n")
        return _syntax_error("unexpected end of file", source, filename, len(lines), len(lines[-1]) + 1)
    return _syntax_error(str(err).splitlines()[0], source, filename, 1, 1)


# ---------------------------------------------------------------- tree -> AST

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "{": "\\{", "}": "\\}"}


class _EscapeError(Exception):
    def __init__(self, offset: int, char: str):
        self.offset, self.char = offset, char


def _unescape(body: str) -> str:
    if "\\" not in body:
        return body
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise _EscapeError(i, nxt)
            out.append(_ESCAPES[nxt] if nxt not in "{}" else nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _AstError(Exception):
    def __init__(self, message: str, line: int, column: int):
        self.message, self.line, self.column = message, line, column


def _pos(meta) -> tuple[int, int]:
    return getattr(meta, "line", 1), getattr(meta, "column", 1)


def _tok_pos(tok: Token) -> tuple[int, int]:
    return tok.line, tok.column




_AUG_OPS = {"+=": "+", "-=": "-", "*=": "*", "/=": "/"}


def _as_atom(expr: ast.Expr, what: str) -> ast.Atom:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return ast.Atom(expr.line, expr.column, expr.func.id, expr.args)
    raise _AstError(f"{what} must be a relation applied to arguments, like Parent(X, Y)", expr.line, expr.column)


def _contains_juxt(expr) -> bool:
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.JuxtProduct):
            return True
        if isinstance(e, ast.BinOp):
            stack += [e.left, e.right]
        elif isinstance(e, ast.UnaryOp):
            stack.append(e.operand)
        elif isinstance(e, ast.Call):
            stack += list(e.args)
    return False


def _indexed_tensor(expr: ast.Expr) -> ast.IndexedTensor | None:
    if isinstance(expr, ast.Index) and isinstance(expr.obj, ast.Name) and all(
            isinstance(i, ast.Name) for i in expr.indices):
        return ast.IndexedTensor(expr.line, expr.column, expr.obj.id, tuple(i.id for i in expr.indices))
    return None


class _Meta:
    """Position of a reduced rule: its first token or positioned child (AST built during parsing)."""
    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int):
        self.line = line
        self.column = column


def _first_position(children) -> _Meta:
    for c in children:
        if c is None:
            continue
        line = getattr(c, "line", None)
        if line is not None:
            return _Meta(line, c.column)
        if isinstance(c, tuple) and c:
            inner = _first_position(c)
            if inner.line:
                return inner
    return _Meta(0, 0)


def _inline_callback(method):
    def callback(children):
        meta = _first_position(children)
        kept = [c for c in children if not (isinstance(c, Token) and c.type[0] == "_")]
        return method(meta, kept)
    return callback


class _ToAst:
    """One method per grammar rule, called with (position, children without punctuation) as the
    LALR parser reduces, so no parse tree is built."""

    def primary(self, meta, ch):  # `( expr )`
        return ch[0]

    # ---- declarations
    def start(self, meta, items):
        return tuple(items)

    def fn_decl(self, meta, ch):
        annotations = tuple(c for c in ch if isinstance(c, ast.Annotation))
        ch = [c for c in ch if not isinstance(c, ast.Annotation)]
        for a in annotations:
            if a.name != "compile" or a.args:
                raise _AstError(f"unknown function annotation @{a.name}"
                                f"{'(...)' if a.args else ''} (functions take @compile)", a.line, a.column)
        name = ch[0].value
        generics: tuple[str, ...] = ()
        params: tuple[ast.Param, ...] = ()
        ret = None
        for c in ch[1:-1]:
            if isinstance(c, _Generics):
                generics = c.names
            elif isinstance(c, _Params):
                params = c.items
            elif isinstance(c, ast.TypeRef):
                ret = c
        return ast.FnDecl(*_pos(meta), name, generics, params, ret, ch[-1], annotations)

    def params(self, meta, ch):
        return _Params(tuple(ch))

    def param(self, meta, ch):
        return ast.Param(*_pos(meta), ch[0].value, ch[1] if len(ch) > 1 else None)

    def generic_params(self, meta, ch):
        return _Generics(tuple(t.value for t in ch if isinstance(t, Token) and t.type == "NAME"))

    def struct_decl(self, meta, ch):
        generics = next((c.names for c in ch if isinstance(c, _Generics)), ())
        fields = next((c for c in ch if isinstance(c, tuple)), ())
        return ast.StructDecl(*_pos(meta), ch[0].value, generics, fields)

    def struct_fields(self, meta, ch):
        return tuple(ch)

    def struct_field(self, meta, ch):
        return ast.StructField(*_pos(meta), ch[0].value, ch[1])

    def impl_decl(self, meta, ch):
        name_tok = next(c for c in ch if isinstance(c, Token) and c.type == "NAME")
        methods = tuple(c for c in ch if isinstance(c, ast.FnDecl))
        return ast.ImplDecl(*_pos(meta), name_tok.value, methods)

    def import_decl(self, meta, ch):
        return ast.Import(*_pos(meta), self._string(ch[0]))

    def main_block(self, meta, ch):
        return ast.MainBlock(*_pos(meta), ch[0])

    def test_block(self, meta, ch):
        return ast.TestBlock(*_pos(meta), self._label(ch[0]), ch[1])

    def bench_block(self, meta, ch):
        return ast.BenchBlock(*_pos(meta), self._label(ch[0]), ch[1])

    def _label(self, tok: Token) -> str:
        return self._string(tok) if tok.type == "STRING" else tok.value

    def relation_decl(self, meta, ch):
        params = ch[1] if len(ch) > 1 else ()
        return ast.RelationDecl(*_pos(meta), ch[0].value, params)

    def rel_params(self, meta, ch):
        return tuple(ch)

    def rel_param(self, meta, ch):
        return (ch[0].value, ch[1].value if len(ch) > 1 else None)

    def entity_decl(self, meta, ch):
        members = ch[2] if len(ch) > 2 else ()
        return ast.EntityDecl(*_pos(meta), ch[1].value, members)

    def entity_members(self, meta, ch):
        return tuple(t.value for t in ch)

    # ---- types
    def type(self, meta, ch):
        name = ch[0].value
        args: tuple[ast.TypeRef, ...] = ()
        dims = None
        for c in ch[1:]:
            if isinstance(c, _GenericArgs):
                args = c.types
            elif isinstance(c, _Dims):
                dims = c.dims
        return ast.TypeRef(*_pos(meta), name, args, dims)

    def generic_args(self, meta, ch):
        return _GenericArgs(tuple(c for c in ch if isinstance(c, ast.TypeRef)))

    def dims(self, meta, ch):
        return _Dims(tuple(ch))

    def dim(self, meta, ch):
        tok = ch[0]
        if tok.type == "INT":
            return int(tok.value)
        if tok.type == "QMARK":
            return None
        return tok.value

    # ---- statements
    def block(self, meta, ch):
        return ast.Block(*_pos(meta), tuple(ch))

    def block_stmt(self, meta, ch):
        return ast.BlockStmt(*_pos(meta), ch[0])

    def let_stmt(self, meta, ch):
        ch = [c for c in ch if not (isinstance(c, Token) and c.type == "MUT")]
        name = ch[0].value
        typ = ch[1] if len(ch) == 3 else None
        return ast.Let(*_pos(meta), name, typ, self._rhs(ch[-1]))

    def _rhs(self, value):
        if isinstance(value, ast.IfStmt):
            return ast.IfExpr(value.line, value.column, value.branches, value.else_block)
        return value

    def assign_stmt(self, meta, ch):
        target = ch[0]
        op = None
        if len(ch) == 3:
            op = _AUG_OPS[ch[1].value]
        value = self._rhs(ch[-1])
        line, col = _pos(meta)
        if isinstance(target, ast.Call):
            if op is not None:
                raise _AstError("a weighted fact is written 'Relation(args) = weight'", line, col)
            return ast.Fact(line, col, _as_atom(target, "a weighted fact"), value)
        if isinstance(target, ast.Index) and op is None:
            lhs = _indexed_tensor(target)
            if lhs is not None and _contains_juxt(value):
                return ast.TensorEquation(line, col, lhs.name, lhs.indices, value)
        if not isinstance(target, (ast.Name, ast.Index, ast.Field)):
            raise _AstError("cannot assign to this expression (assign to a name, x[i] or x.field)",
                            target.line, target.column)
        return ast.Assign(line, col, target, op, value)

    def expr_stmt(self, meta, ch):
        return ast.ExprStmt(*_pos(meta), ch[0])

    def if_stmt(self, meta, ch):
        branches = [(ch[0], ch[1])]
        else_block = None
        for c in ch[2:]:
            if isinstance(c, ast.Block):
                else_block = c
            else:
                branches.append(c)
        return ast.IfStmt(*_pos(meta), tuple(branches), else_block)

    def else_if(self, meta, ch):
        return (ch[0], ch[1])

    def else_block(self, meta, ch):
        return ch[0]

    def while_stmt(self, meta, ch):
        return ast.While(*_pos(meta), ch[0], ch[1])

    def loop_stmt(self, meta, ch):
        return ast.Loop(*_pos(meta), ch[0])

    def for_stmt(self, meta, ch):
        return ast.For(*_pos(meta), ch[0].value, ch[1], ch[2])

    def break_stmt(self, meta, ch):
        return ast.Break(*_pos(meta))

    def continue_stmt(self, meta, ch):
        return ast.Continue(*_pos(meta))

    def return_stmt(self, meta, ch):
        return ast.Return(*_pos(meta), self._rhs(ch[0]) if ch else None)

    def tensor_decl(self, meta, ch):
        name = ch[0].value
        typ = ch[1]
        mode = None
        value = None
        for c in ch[2:]:
            if isinstance(c, _Mode):
                mode = c.mode
            else:
                value = self._rhs(c)
        if typ.dims is None:
            raise _AstError(f"tensor '{name}' needs a shape, like float32[2, 3]", typ.line, typ.column)
        return ast.TensorDecl(*_pos(meta), name, typ, mode, value)

    def tensor_mode(self, meta, ch):
        return _Mode(ch[0].value)

    def rule_stmt(self, meta, ch):
        annotations = tuple(c for c in ch if isinstance(c, ast.Annotation))
        rest = [c for c in ch if not isinstance(c, ast.Annotation)]
        head = _as_atom(rest[0], "a rule head")
        return ast.Rule(*_pos(meta), head, rest[1], annotations)

    def annotation(self, meta, ch):
        args = ch[1] if len(ch) > 1 else ()
        return ast.Annotation(*_pos(meta), ch[0].value[1:], args)

    def rule_body(self, meta, ch):
        return tuple(ch)

    def body_item(self, meta, ch):
        negated = isinstance(ch[0], Token) and ch[0].type == "NOT"
        expr = ch[-1]
        line, col = _pos(meta)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            return ast.BodyLiteral(line, col, negated, _as_atom(expr, "a rule body literal"), None)
        if negated:
            raise _AstError("'not' must be followed by an atom like Parent(X, Y)", line, col)
        return ast.BodyLiteral(line, col, False, None, expr)

    # ---- expressions
    def binop(self, meta, ch):
        left, op, right = ch  # positioned at the operator: an error in `a + b` points at the `+`
        return ast.BinOp(op.line, op.column, op.value, left, right)

    def unary(self, meta, ch):
        op, operand = ch
        return ast.UnaryOp(*_pos(meta), op.value, operand)

    def cast(self, meta, ch):
        return ast.Cast(*_pos(meta), ch[0], ch[1].value)

    def cast_then_binop(self, meta, ch):
        """`x as int + 1`: the cast applies to x (as in Rust), though `a + b as int` casts the sum."""
        operand, type_tok, op, right = ch
        line, col = _pos(meta)
        return ast.BinOp(op.line, op.column, op.value, ast.Cast(line, col, operand, type_tok.value), right)

    def juxt(self, meta, ch):
        left, right = ch
        line, col = _pos(meta)
        if isinstance(left, ast.JuxtProduct):
            return ast.JuxtProduct(left.line, left.column, left.factors + (right,))
        lt = _indexed_tensor(left) if isinstance(left, ast.Index) else None
        if lt is None:
            raise _AstError("an index-notation product needs indexed tensors on both sides, like W[i, j] X[j]",
                            line, col)
        return ast.JuxtProduct(line, col, (lt, right))

    def juxt_factor(self, meta, ch):
        name_tok, indices = ch
        if not all(isinstance(i, ast.Name) for i in indices):
            raise _AstError("index notation uses index names, like X[j]", name_tok.line, name_tok.column)
        return ast.IndexedTensor(name_tok.line, name_tok.column, name_tok.value, tuple(i.id for i in indices))

    def call(self, meta, ch):
        func = ch[0]
        args = ch[1] if len(ch) > 1 else ()
        if isinstance(func, ast.Field):
            return ast.MethodCall(func.line, func.column, func.obj, func.name, args)
        return ast.Call(func.line, func.column, func, args)

    def field(self, meta, ch):
        obj, name = ch
        return ast.Field(obj.line, obj.column, obj, name.value)

    def index(self, meta, ch):
        obj, indices = ch
        return ast.Index(obj.line, obj.column, obj, indices)

    def query(self, meta, ch):
        expr = ch[0]
        return ast.Query(expr.line, expr.column, _as_atom(expr, "a query"))

    def args(self, meta, ch):
        return tuple(ch)

    def named_arg(self, meta, ch):
        return ast.NamedArg(*_pos(meta), ch[0].value, ch[1])

    def learn_stmt(self, meta, ch):
        settings = tuple(c for c in ch if isinstance(c, ast.LearnSetting))
        stmts = tuple(c for c in ch if not isinstance(c, ast.LearnSetting))
        line, col = _pos(meta)
        return ast.LearnBlock(line, col, settings, ast.Block(line, col, stmts))

    def mode_block(self, meta, ch):
        return ast.ModeBlock(*_pos(meta), ch[1], ch[0].value)

    def learn_setting(self, meta, ch):
        return ast.LearnSetting(*_pos(meta), ch[0].value, ch[1])

    def index_args(self, meta, ch):
        return tuple(ch)

    def slice(self, meta, ch):
        parts = list(ch) + [None] * (3 - len(ch))
        return ast.Slice(*_pos(meta), parts[0], parts[1], parts[2])

    def slice_step(self, meta, ch):
        return ast.Slice(*_pos(meta), ch[0], None, ch[1])

    def int_lit(self, meta, ch):
        return ast.IntLit(*_tok_pos(ch[0]), int(ch[0].value))

    def float_lit(self, meta, ch):
        return ast.FloatLit(*_tok_pos(ch[0]), float(ch[0].value))

    def string_lit(self, meta, ch):
        return ast.StringLit(*_tok_pos(ch[0]), self._string(ch[0]))

    def _string(self, tok: Token) -> str:
        try:
            return _unescape(tok.value[1:-1])
        except _EscapeError as e:
            raise _AstError(f"unknown escape '\\{e.char}' in string (known: \\n \\t \\r \\0 \\\\ \\\")",
                            tok.line, tok.column + 1 + e.offset)

    def true_lit(self, meta, ch):
        return ast.BoolLit(*_tok_pos(ch[0]), True)

    def false_lit(self, meta, ch):
        return ast.BoolLit(*_tok_pos(ch[0]), False)

    def name(self, meta, ch):
        return ast.Name(*_tok_pos(ch[0]), ch[0].value)

    def path(self, meta, ch):
        return ast.Path(*_tok_pos(ch[0]), tuple(t.value for t in ch))

    def array(self, meta, ch):
        return ast.ArrayLit(*_pos(meta), tuple(ch))

    def struct_lit(self, meta, ch):
        return ast.StructLit(*_tok_pos(ch[0]), ch[0].value, tuple(c for c in ch[2:]))

    def field_init(self, meta, ch):
        return (ch[0].value, ch[1])


class _Params:
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items


class _Generics:
    __slots__ = ("names",)

    def __init__(self, names):
        self.names = names


class _GenericArgs:
    __slots__ = ("types",)

    def __init__(self, types):
        self.types = types


class _Dims:
    __slots__ = ("dims",)

    def __init__(self, dims):
        self.dims = dims


class _Mode:
    __slots__ = ("mode",)

    def __init__(self, mode):
        self.mode = mode


_TO_AST = _ToAst()


class _Callbacks:
    pass


_CALLBACKS = _Callbacks()
for _name in dir(_ToAst):
    if not _name.startswith("_"):
        setattr(_CALLBACKS, _name, _inline_callback(getattr(_TO_AST, _name)))


def parse(source: str, filename: str = "<input>") -> ast.Program:
    """Parse TL source text; raise TLSyntaxError (with position, caret and expected tokens) on error."""
    parser = _lark_parser()
    text = "//" + source[2:] if source.startswith("#!") else source  # a shebang line is a comment
    try:
        items = parser.parse(text)
    except UnexpectedInput as err:
        raise _convert_lark_error(err, source, filename, parser) from None
    except _AstError as inner:
        raise _syntax_error(inner.message, source, filename, inner.line, inner.column) from None
    except RecursionError:
        raise _syntax_error("program is nested too deeply", source, filename, 1, 1) from None
    if not isinstance(items, tuple):  # an empty program reduces no `start` rule callback
        items = ()
    return ast.Program(items, filename, source)


def parse_file(path: str) -> ast.Program:
    """Read and parse a .tl file. Unreadable files raise TLSyntaxError with one clear line."""
    source = read_source(path)
    return parse(source, path)


def read_source(path: str) -> str:
    if not os.path.exists(path):
        raise TLSyntaxError(f"{path}: no such file")
    if os.path.isdir(path):
        raise TLSyntaxError(f"{path}: is a directory, not a .tl file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TLSyntaxError(f"{path}: cannot read file ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TLSyntaxError(f"{path}: not UTF-8 text (bad byte at offset {e.start})") from None




