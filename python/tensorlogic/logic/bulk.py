"""Relations in bulk: reading tuples from .csv / .tsv / .npy files or arrays, and writing them out.

Invariant: no per-tuple Python work on the success path. Files are parsed by NumPy's C reader,
integer columns stay int64 arrays end to end, and names are mapped to entity indices once per
distinct value (engine side). Only an error path scans the file line by line, to name the line.

Text format: one tuple per line, fields separated by `,` (.csv) or a tab (.tsv), no header line;
blank lines and lines starting with `#` are skipped; a field may be quoted with `"`. A field that
reads as an integer is an integer constant, any other a name (both may share an entity type).
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from .errors import LogicError

SUFFIXES = (".csv", ".tsv", ".npy")


def delimiter_of(path: str) -> str | None:
    """`,` / tab for text files, None for .npy; an error for any other suffix."""
    lower = path.lower()
    if lower.endswith(".csv"):
        return ","
    if lower.endswith(".tsv"):
        return "\t"
    if lower.endswith(".npy"):
        return None
    raise LogicError(f"{path}: a relation file must end in .csv, .tsv or .npy")


def _data_lines(path: str):
    """(file line number, text) of each data line, as the reader counts them (error paths only)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            text = line.rstrip("\r\n")
            if text.strip() and not text.lstrip().startswith("#"):
                yield number, text


def line_of(path: str, data_row: int) -> int:
    for row, (number, _) in enumerate(_data_lines(path)):
        if row == data_row:
            return number
    return 0


def _shape_error(path: str, arity: int, delimiter: str) -> LogicError:
    """The first line whose field count is not `arity` (the reader refused the file)."""
    for number, text in _data_lines(path):
        fields = len(text.split(delimiter))
        if fields != arity:
            return LogicError(f"{path}:{number}: expected {arity} field{'s' * (arity != 1)}, got {fields}")
        if any(not field.strip() for field in text.split(delimiter)):
            return LogicError(f"{path}:{number}: empty field")
    return LogicError(f"{path}: not a {'CSV' if delimiter == ',' else 'TSV'} file of {arity} columns")


def read_columns(path: str, arity: int) -> list:
    """One entry per column: an int64 array where every field of the column is an integer, else a
    factorized column (distinct values as a list of ints and strs, int64 index of each row into
    it). Raises LogicError naming file:line for a bad row."""
    delimiter = delimiter_of(path)
    if not os.path.isfile(path):
        raise LogicError(f"{path}: no such file")
    if delimiter is None:
        return columns_of_array(_load_npy(path), arity, path)
    if os.path.getsize(path) == 0:
        return [np.zeros(0, np.int64) for _ in range(arity)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's note on blank lines not counting as rows
        try:
            table = np.loadtxt(path, delimiter=delimiter, dtype=np.int64, ndmin=2, comments="#",
                               quotechar='"', encoding="utf-8")
            texts = None
        except ValueError:
            try:
                texts = np.loadtxt(path, delimiter=delimiter, dtype=str, ndmin=2, comments="#",
                                   quotechar='"', encoding="utf-8")
            except ValueError:
                raise _shape_error(path, arity, delimiter) from None
            table = None
        except UnicodeDecodeError as error:
            raise LogicError(f"{path}: not UTF-8 text ({error.reason})") from None
    rows = (table if table is not None else texts).shape
    if rows[0] == 0:
        return [np.zeros(0, np.int64) for _ in range(arity)]
    if rows[1] != arity:
        raise LogicError(f"{path}:{line_of(path, 0)}: expected {arity} field{'s' * (arity != 1)}, "
                         f"got {rows[1]}")
    if table is not None:
        return [np.ascontiguousarray(table[:, i]) for i in range(arity)]
    columns = []
    for i in range(arity):
        column = np.char.strip(texts[:, i])
        empty = np.flatnonzero(np.char.str_len(column) == 0)
        if len(empty):
            raise LogicError(f"{path}:{line_of(path, int(empty[0]))}: empty field {i + 1}")
        try:
            columns.append(column.astype(np.int64))
            continue
        except (ValueError, OverflowError):
            pass
        uniques, inverse = np.unique(column, return_inverse=True)
        columns.append(([_int_or_name(text) for text in uniques.tolist()],  # once per distinct value
                        inverse.astype(np.int64).reshape(-1)))
    return columns


def factorize(column: np.ndarray) -> tuple[list, np.ndarray]:
    """(distinct values ascending as Python ints, index of each row into them) of an int64 column:
    by a presence table when the values span a range not much larger than the column (linear
    time), else by sorting."""
    if len(column) == 0:
        return [], np.zeros(0, np.int64)
    low, high = int(column.min()), int(column.max())
    span = high - low + 1
    if span <= 4 * len(column) + 1024:
        present = np.zeros(span, bool)
        shifted = column - low
        present[shifted] = True
        distinct = np.flatnonzero(present)
        position = np.zeros(span, np.int64)
        position[distinct] = np.arange(len(distinct))
        return (distinct + low).tolist(), position[shifted]
    uniques, inverse = np.unique(column, return_inverse=True)
    return uniques.tolist(), inverse.reshape(-1).astype(np.int64)


def _int_or_name(text: str):
    body = text[1:] if text[:1] in "+-" else text
    return int(text) if body.isdigit() and body.isascii() else text


def _load_npy(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise LogicError(f"{path}: not a valid .npy file ({str(error).splitlines()[0]})") from None


def columns_of_array(array, arity: int, where: str) -> list[np.ndarray]:
    """Columns of an (n, arity) integer array (or (n,) for arity 1); floats must hold integers."""
    array = np.asarray(array)
    if array.ndim == 1 and arity == 1:
        array = array.reshape(-1, 1)
    if array.ndim != 2 or array.shape[1] != arity:
        raise LogicError(f"{where}: expected rows of {arity} column{'s' * (arity != 1)} (shape [n, {arity}]), "
                         f"got shape {list(array.shape)}")
    if array.dtype == np.bool_ or not (np.issubdtype(array.dtype, np.integer)
                                       or np.issubdtype(array.dtype, np.floating)):
        raise LogicError(f"{where}: expected integers, got {array.dtype} values")
    if np.issubdtype(array.dtype, np.floating):
        bad = np.flatnonzero(~np.all(np.isfinite(array) & (array == np.round(array)), axis=1))
        if len(bad):
            raise LogicError(f"{where}: row {int(bad[0])} holds a value that is not an integer "
                             f"({array[bad[0]].tolist()})")
    if array.dtype == np.uint64 and len(array) and array.max() > np.iinfo(np.int64).max:
        raise LogicError(f"{where}: a value does not fit in 64 bits")
    array = array.astype(np.int64)
    return [np.ascontiguousarray(array[:, i]) for i in range(arity)]


def write_rows(path: str, columns: list, value_lists: list) -> None:
    """Write tuples: `columns[i]` are entity indices into `value_lists[i]` (a domain's constants).
    .npy needs integer constants; text fields holding the separator, a quote or a newline are
    refused (names are identifiers in practice)."""
    delimiter = delimiter_of(path)
    arity = len(columns)
    rows = len(columns[0]) if columns else 0
    if delimiter is None:
        out = np.empty((rows, arity), np.int64)
        for i, (column, values) in enumerate(zip(columns, value_lists)):
            lookup = _int_lookup(values)
            if lookup is None:
                raise LogicError(f"{path}: column {i + 1} holds names; .npy holds integers only "
                                 f"(save to .csv or .tsv)")
            out[:, i] = lookup[column]
        _write_atomically(path, lambda f: np.save(f, out, allow_pickle=False))
        return
    fields = []  # per column: (bytes of every constant back to back, start of each, length of each)
    for column, values in zip(columns, value_lists):
        used = np.zeros(len(values), bool)
        used[column] = True
        for value in (values[k] for k in np.flatnonzero(used).tolist()):  # once per constant
            if isinstance(value, str) and any(c in value for c in (delimiter, '"', "\n", "\r", "#")):
                raise LogicError(f"{path}: the name {value!r} holds a separator, quote, newline or "
                                 f"'#' and cannot be written as a field")
        encoded = [str(v).encode("utf-8") for v in values]
        lengths = np.array([len(e) for e in encoded], np.int64)
        fields.append((np.frombuffer(b"".join(encoded) or b" ", np.uint8), np.cumsum(lengths) - lengths,
                       lengths))

    def write(handle):
        for start in range(0, rows, TEXT_ROWS_PER_PIECE):
            handle.write(_text_piece([np.asarray(c[start:start + TEXT_ROWS_PER_PIECE]) for c in columns],
                                     fields, delimiter))
    _write_atomically(path, write)


TEXT_ROWS_PER_PIECE = 1 << 20


def _text_piece(columns: list, fields: list, delimiter: str) -> bytes:
    """The text lines of some rows, assembled with array copies: each row's fields are byte ranges
    of the per-column constant blobs, scattered into one output buffer."""
    rows = len(columns[0]) if columns else 0
    if not columns:
        return b"\n" * rows
    lengths = [length[column] for column, (_, _, length) in zip(columns, fields)]
    row_length = sum(lengths) + len(columns)  # separators and the newline
    position = np.cumsum(row_length) - row_length
    out = np.empty(int(row_length.sum()), np.uint8)
    separator = ord(delimiter)
    for i, (column, (blob, starts, _)) in enumerate(zip(columns, fields)):
        length = lengths[i]
        total = int(length.sum())
        within = np.arange(total) - np.repeat(np.cumsum(length) - length, length)
        out[np.repeat(position, length) + within] = blob[np.repeat(starts[column], length) + within]
        position = position + length
        out[position] = separator if i + 1 < len(columns) else ord("\n")
        position = position + 1
    return out.tobytes()


def _int_lookup(values: list) -> np.ndarray | None:
    if not all(isinstance(v, int) for v in values):
        return None
    return np.array(values, dtype=np.int64)


def _write_atomically(path: str, write) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise LogicError(f"{path}: no such directory")
    temporary = path + ".tmp"
    try:
        with open(temporary, "wb") as handle:
            write(handle)
        os.replace(temporary, path)
    except OSError as error:
        raise LogicError(f"cannot write {path}: {error.strerror}") from None
