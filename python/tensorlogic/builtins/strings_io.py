"""Strings and I/O: print, str, format, env, input, string helpers.

Invariant: output goes only through `ctx.write` (so `tensorlogic.run` can capture it) and input only
through `ctx.stdin` (or the process's stdin); `input()` at end of input returns "" instead of failing.
"""
from __future__ import annotations

import os
import sys
import time

from .convert import BuiltinArgError, to_int, to_str
from .formatting import format_print_args, format_template, format_value
from .registry import builtin

C = "strings"


@builtin("print", "print(fmt_or_value, ...)",
         "print values separated by spaces, or fill {} placeholders: print(\"x = {}\", x)", min_args=0,
         max_args=None, needs_ctx=True, category=C)
def print_(ctx, *args):
    ctx.write(format_print_args(list(args)) + "\n")
    return None


@builtin("println", "println(...)", "same as print", min_args=0, max_args=None, needs_ctx=True, category=C)
def println(ctx, *args):
    return print_(ctx, *args)


@builtin("format", "format(fmt, ...)", "the string print would print (without the newline)", min_args=1,
         max_args=None, category=C)
def format_(fmt, *args):
    return format_template(to_str(fmt, "fmt"), list(args))


@builtin("str", "str(x)", "x as a string", min_args=1, max_args=1, category=C)
def str_(x):
    return format_value(x)


@builtin("env", "env(name, [default])", "an environment variable (default, else \"\", when unset)",
         min_args=1, max_args=2, category=C)
def env(name, default=""):
    return os.environ.get(to_str(name, "name"), default)


@builtin("clock", "clock()", "seconds since an arbitrary start, as a float (for timing: end - start)",
         min_args=0, max_args=0, category=C)
def clock():
    return time.perf_counter()


@builtin("args", "args()", "the arguments after the program's file name in `tl run FILE ARGS...` (strings)",
         min_args=0, max_args=0, needs_ctx=True, category=C)
def args_(ctx):
    return list(getattr(ctx, "args", []))


@builtin("input", "input([prompt])", "read one line from standard input (\"\" at end of input)",
         min_args=0, max_args=1, needs_ctx=True, category=C)
def input_(ctx, prompt=None):
    if prompt is not None:
        ctx.write(format_value(prompt))
    out = getattr(ctx.out, "flush", None)
    if out is not None:
        out()
    stream = ctx.stdin if ctx.stdin is not None else sys.stdin
    line = stream.readline()
    return line.rstrip("\n").rstrip("\r")


@builtin("upper", "upper(s)", "s in upper case", min_args=1, max_args=1, category=C)
def upper(s):
    return to_str(s, "s").upper()


@builtin("lower", "lower(s)", "s in lower case", min_args=1, max_args=1, category=C)
def lower(s):
    return to_str(s, "s").lower()


@builtin("trim", "trim(s)", "s without leading and trailing whitespace", min_args=1, max_args=1, category=C)
def trim(s):
    return to_str(s, "s").strip()


@builtin("starts_with", "starts_with(s, prefix)", "whether s starts with prefix", min_args=2, max_args=2,
         category=C)
def starts_with(s, prefix):
    return to_str(s, "s").startswith(to_str(prefix, "prefix"))


@builtin("ends_with", "ends_with(s, suffix)", "whether s ends with suffix", min_args=2, max_args=2, category=C)
def ends_with(s, suffix):
    return to_str(s, "s").endswith(to_str(suffix, "suffix"))


@builtin("replace", "replace(s, old, new)", "s with every old replaced by new", min_args=3, max_args=3,
         category=C)
def replace(s, old, new):
    return to_str(s, "s").replace(to_str(old, "old"), to_str(new, "new"))


@builtin("substring", "substring(s, start, end)", "characters start..end (exclusive) of s", min_args=3,
         max_args=3, category=C)
def substring(s, start, end):
    return to_str(s, "s")[to_int(start, "start"):to_int(end, "end")]


@builtin("split_string", "split_string(s, [sep])", "the parts of s split at sep (whitespace by default)",
         min_args=1, max_args=2, category=C)
def split_string(s, sep=None):
    text = to_str(s, "s")
    if sep is None:
        return text.split()
    sep = to_str(sep, "sep")
    if not sep:
        raise BuiltinArgError("sep must not be empty")
    return text.split(sep)
