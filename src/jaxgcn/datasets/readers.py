"""Reading untrusted files: UTF-8 text tables, NumPy ``.npy`` arrays and ``.npz`` archives.

The loaders of :mod:`jaxgcn.datasets` read every file through here, so each problem is reported
the same way: one ValueError naming the file, the line (counted from 1, as editors do), the value
and the fix, never a bare codec error, a NumPy ``usecols`` hint, a traceback or a crash. Sizes are
checked against the file and the available memory before anything is allocated.
"""

from __future__ import annotations

import io
import math
import warnings
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from jaxgcn.core.validate import check_allocation, check_compressed, check_coordinates, check_graph_size, check_shape

GZIP_MAGIC, ZIP_MAGIC, NPY_MAGIC = b"\x1f\x8b", b"PK\x03\x04", b"\x93NUMPY"
_CHUNK = 64 * 2**20  # bytes scanned at a time when measuring the widest cell


def check_file(path: Path, what: str) -> None:
    """Refuse a path that is missing, a directory or not a regular file, naming which."""
    if path.is_dir():
        raise ValueError(f"{what} file {path}: is a directory; give the file itself")
    if not path.exists():
        raise ValueError(f"{what} file {path}: not found")
    if not path.is_file():
        raise ValueError(f"{what} file {path}: not a regular file; give a file on disk")


def read_bytes(path: Path, what: str) -> bytes:
    """The bytes of a regular file; a missing file, a directory or an unreadable file is a ValueError."""
    check_file(path, what)
    try:
        return path.read_bytes()
    except OSError as err:
        raise ValueError(f"{what} file {path}: cannot be read ({err.strerror or err}); check its permissions") from None


def decode_text(data: bytes, path: Path, what: str) -> str:
    """UTF-8 text without a byte-order mark and with ``\\n`` line ends, or a ValueError that says
    what the bytes are instead (gzip, zip, binary, another encoding) and what to do."""
    if data.startswith(GZIP_MAGIC):
        raise ValueError(f"{what} file {path}: is gzip-compressed, not text; decompress it first "
                         f"(gunzip -k {path}) and pass the uncompressed file")
    if data.startswith(ZIP_MAGIC) or data.startswith(NPY_MAGIC):
        kind = "a zip archive (e.g. .npz)" if data.startswith(ZIP_MAGIC) else "a NumPy .npy array"
        raise ValueError(f"{what} file {path}: is {kind}, not a text table; give a CSV or whitespace-separated "
                         "text file (only features may be .npy/.npz, named so)")
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise ValueError(f"{what} file {path}: is binary, not UTF-8 text (a NUL byte on line {line}); give a CSV or "
                         "whitespace-separated text file (re-save UTF-16 text as UTF-8)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(f"{what} file {path}: is not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}, "
                         f"column {column}); re-save it as UTF-8, e.g. iconv -f latin1 -t utf-8 {path.name} > "
                         f"{path.stem}.utf8{path.suffix}") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write before the header
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def read_text(path: Path, what: str) -> str:
    """A UTF-8 text file's contents (see :func:`decode_text`)."""
    return decode_text(read_bytes(path, what), path, what)


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _split(line: str, delimiter: str | None) -> list[str]:
    cells = line.split(delimiter) if delimiter else line.split()
    return [c.strip().strip('"').strip() for c in cells]


class Table(NamedTuple):
    """A text table read by :func:`read_table`.

    Attributes:
        path, what: the file and what it is ("edges", "labels", ...), for messages.
        header: the header's cell names (None when the first line is data).
        cells: [rows, columns] str array, cells stripped of spaces and quotes.
        skip: lines before the first data row (blank lines and the header).
        dense: no blank line between data rows, so row ``i`` is line ``skip + i + 1``.
    """

    path: Path
    what: str
    header: list[str] | None
    cells: np.ndarray
    skip: int
    dense: bool = True

    @property
    def name(self) -> str:
        return f"{self.what} file {self.path}"

    def line(self, row: int) -> int:
        """The file's line number (from 1) of data row ``row``; blank lines hold no row."""
        if self.dense:
            return self.skip + row + 1
        seen = -1
        for number, line in enumerate(io.StringIO(read_text(self.path, self.what)), start=1):
            if number > self.skip and line.strip():
                seen += 1
                if seen == row:
                    return number
        return self.skip + row + 1


def _first_line(text: str, what: str, path: Path) -> tuple[str, int, int]:
    """The first non-blank line, the number of blank lines before it and the offset after it."""
    start = skip = 0
    while True:
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip():
            return line, skip, len(text) if end < 0 else end + 1
        if end < 0:
            raise ValueError(f"{what} file {path}: empty (no rows)")
        start, skip = end + 1, skip + 1


def _is_header(cells: list[str], delimiter: str | None, text: str, after: int) -> bool:
    """A CSV's first line is a header when a cell is not a number. A whitespace edge list's is when
    it names src and dst, or a node column, or when it is all words above a line of numbers ("from to"
    over "1 2")."""
    words = [c for c in cells if not is_number(c)]
    if delimiter is not None:
        return bool(words)
    if {"src", "dst"} <= {c.lower() for c in cells} or "node" in {c.lower() for c in cells}:
        return True  # an edge list's header, or a labels or features file's (node,...)
    if len(words) != len(cells):
        return False
    try:
        second, _, _ = _first_line(text[after:], "", Path())
    except ValueError:
        return False
    return all(is_number(c) for c in _split(second, None))


def _widest_cell(data: bytes, separators: bytes) -> tuple[int, int]:
    """``(bytes, offset)`` of the longest run of bytes between separators, scanned in chunks so
    the scan never holds more than a chunk's positions."""
    table = np.zeros(256, bool)
    table[list(separators)] = True
    buf = np.frombuffer(data, np.uint8)
    best, at, last = 0, 0, -1
    for start in range(0, buf.size, _CHUNK):
        pos = np.flatnonzero(table[buf[start:start + _CHUNK]]) + start
        if pos.size == 0:
            continue
        gaps = np.diff(pos, prepend=last) - 1
        k = int(np.argmax(gaps))
        if gaps[k] > best:
            best, at = int(gaps[k]), (last if k == 0 else int(pos[k - 1])) + 1
        last = int(pos[-1])
    if buf.size - 1 - last > best:
        best, at = buf.size - 1 - last, last + 1
    return best, at


def _check_width(data: bytes, n_columns: int, delimiter: str | None, path: Path, what: str) -> None:
    """NumPy stores a text table at its widest cell's width (4 bytes a character): one 5 MB id in
    a file of short lines asks for tens of GiB. Refuse that before parsing."""
    lines = data.count(b"\n") + 1
    width, at = _widest_cell(data, b",\n\r" if delimiter else b" \t\n\r\v\f")
    need = 2 * lines * n_columns * max(width, 1) * 4  # the table and its stripped copy
    line = data.count(b"\n", 0, at) + 1
    check_allocation(need, f"{what} file {path}",
                     f"reading {lines:,} lines x {n_columns} columns as text, with a {width:,}-character cell "
                     f"on line {line}",
                     "NumPy stores every cell at the widest cell's width; shorten that value (ids and labels "
                     "should be short names)")


def _empty_tab_cell(line: str, number: int) -> str:
    """Where a tab-separated line has an empty cell (two tabs in a row, or one at an end), which
    whitespace splitting drops: that is why its row is short."""
    empty = [k for k, cell in enumerate(line.split("\t")) if not cell.strip()] if "\t" in line else []
    if not empty:
        return ""
    return (f" (line {number}, column {empty[0] + 1} is empty: tabs with nothing between them; fill the cell, or give "
            "every line the same tabs, as many as the first line's, so each empty cell keeps its column)")


def _ragged(text: str, delimiter: str | None, skip: int, path: Path, what: str) -> str:
    """The message for rows of different lengths: the first line that differs, by line number."""
    first = None
    for number, line in enumerate(text.split("\n")[skip:], start=skip + 1):
        if not line.strip():
            continue
        n = len(_split(line, delimiter))
        if first is None:
            first = (number, n)
        elif n != first[1]:
            return (f"{what} file {path}: line {number} has {n} column(s) but line {first[0]} has {first[1]}"
                    f"{_empty_tab_cell(line, number)}; every row needs the same number of columns")
    return f"{what} file {path}: rows have different numbers of columns; every row needs the same number of columns"


def _load_cells(text: str, delimiter: str | None, skip: int, lines: int) -> np.ndarray:
    """NumPy's C reader over the text, told how many rows there can be: without ``max_rows`` it
    reads str cells in blocks of 50,000 rows of Python objects, allocated whole (20,000 columns of
    an 8 MB file asked for 7.45 GiB), so the block is bounded by the lines the file has."""
    with warnings.catch_warnings():  # "input contained no data": reported by the caller, as an error
        warnings.simplefilter("ignore", UserWarning)
        return np.loadtxt(io.StringIO(text), dtype=str, delimiter=delimiter, skiprows=skip, ndmin=2,
                          comments=None, max_rows=max(lines - skip, 1))


def _tab_cells(text: str, first: str, skip: int, lines: int, width: int | None) -> np.ndarray | None:
    """The table split at each tab, when the first line holds tabs and every line as many (``width``
    cells, when given): a tab-separated file with empty cells, which whitespace splitting would
    shift left. None when tabs do not make the rows even."""
    if "\t" not in first or (width is not None and first.count("\t") + 1 != width):
        return None
    try:
        return _load_cells(text, "\t", skip, lines)
    except ValueError:
        return None


def read_table(path: str | Path, what: str) -> Table:
    """A text table: comma-separated when the first line holds a comma, else whitespace-separated.

    The first line is a header when it is not all numbers (CSV) or names ``src`` and ``dst``
    (whitespace). Blank lines are skipped; a byte-order mark is dropped; cells are stripped of
    spaces and of surrounding double quotes (a quoted cell cannot hold the delimiter).
    """
    path = Path(path)
    data = read_bytes(path, what)
    text = decode_text(data, path, what)
    first, blank, after = _first_line(text, what, path)
    delimiter = "," if "," in first else None
    cells = _split(first, delimiter)
    header = cells if _is_header(cells, delimiter, text, after) else None
    _check_width(data, len(cells), delimiter, path, what)
    del data
    skip = blank + (header is not None)
    lines = text.count("\n") + (not text.endswith("\n"))
    try:
        table = _load_cells(text, delimiter, skip, lines)
    except ValueError:
        table = _tab_cells(text, first, skip, lines, None) if delimiter is None else None
        if table is None:
            raise ValueError(_ragged(text, delimiter, skip, path, what)) from None
        delimiter = "\t"
    if table.size == 0:
        raise ValueError(f"{what} file {path}: no data rows below the header")
    if header is not None and table.shape[1] != len(header) and delimiter is None:
        tabbed = _tab_cells(text, first, skip, lines, len(header))  # tab-separated with empty cells
        if tabbed is not None:
            table, delimiter = tabbed, "\t"
    if header is not None and table.shape[1] != len(header):
        raise ValueError(f"{what} file {path}: the header {','.join(header)} names {len(header)} column(s) but "
                         f"line {skip + 1} has {table.shape[1]}; give every line the header's columns")
    dense = table.shape[0] == lines - skip
    table = np.char.strip(table)
    if '"' in text:
        table = np.char.strip(np.char.strip(table, '"'))
    return Table(path, what, header, table, skip, dense)


# ----------------------------------------------------------------------------- NumPy array files

def _array_header(f: Any, name: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data bytes)`` from a .npy header, refusing what cannot be numbers."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f"{name}: .npy format version {version[0]}.{version[1]} is not supported; save it with "
                         "np.save (version 1.0)")
    if dtype.hasobject:
        raise ValueError(f"{name}: holds Python objects (dtype {dtype}); save a numeric array")
    if dtype.names:
        raise ValueError(f"{name}: is a structured array (fields {', '.join(dtype.names)}); save a plain numeric "
                         "array, e.g. np.stack([a[f] for f in a.dtype.names], axis=1)")
    if dtype.kind == "c":
        raise ValueError(f"{name}: holds complex numbers ({dtype}); save the real values (a.real)")
    if dtype.kind not in "biufSU":  # text: the format name of a SciPy .npz
        raise ValueError(f"{name}: dtype {dtype} is not numeric; save integers or floats")
    return shape, dtype, math.prod(shape) * dtype.itemsize


def _read_array(f: Any, name: str, size: int) -> np.ndarray:
    """One .npy array from an open file of ``size`` bytes, its header checked against the size first."""
    shape, dtype, n_bytes = _array_header(f, name)
    remaining = size - f.tell()
    if remaining != n_bytes:
        raise ValueError(f"{name}: its header announces shape {shape} of {dtype} ({n_bytes:,} bytes) but "
                         f"{remaining:,} bytes follow; the file is truncated or not written by np.save")
    f.seek(0)
    return np.lib.format.read_array(f, allow_pickle=False)


# NumPy's header parser and zipfile raise many types on corrupt bytes (ValueError, EOFError,
# zlib.error, BadZipFile, tokenize.TokenError, SyntaxError, KeyError, ...): for untrusted bytes any of
# them means "not a readable file", reported as one ValueError.
_ARRAY_ERRORS = Exception


def read_npy(path: str | Path, what: str) -> np.ndarray:
    """A numeric ``.npy`` array (``allow_pickle=False``); the header is checked against the file's
    size before the array is allocated."""
    path = Path(path)
    check_file(path, what)
    name = f"{what} file {path}"
    try:
        with open(path, "rb") as f:
            return _read_array(f, name, path.stat().st_size)
    except _ARRAY_ERRORS as err:
        if str(err).startswith(name):
            raise
        raise ValueError(f"{name}: not a NumPy .npy file ({err}); write it with np.save") from None


def read_npz(path: str | Path, what: str, *, keys: set[str] | None = None,
             fix: str = "it is truncated or not a zip file: write it with np.savez or scipy.sparse.save_npz",
             ) -> dict[str, np.ndarray]:
    """The numeric arrays of an ``.npz`` archive (only ``keys`` when given: others, pickled ones
    included, are skipped unread), each header checked against its stored size and the total
    against the available memory before anything is decompressed. ``fix``: what an unreadable
    archive's error tells the user to do."""
    path = Path(path)
    check_file(path, what)
    name = f"{what} file {path}"
    try:
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist()
                       if i.filename.endswith(".npy") and (keys is None or i.filename[:-4] in keys)]
            check_allocation(sum(i.file_size for i in members), name, "its arrays",
                             "the archive announces more data than fits; check that it is the intended file")
            out = {}
            for info in members:
                with zf.open(info) as f:
                    out[info.filename[:-4]] = _read_array(f, f"{name}: array {info.filename[:-4]!r}", info.file_size)
            return out
    except _ARRAY_ERRORS as err:
        if str(err).startswith(name):
            raise
        raise ValueError(f"{name}: not a readable .npz archive ({str(err) or type(err).__name__}); {fix}") from None


def read_sparse_npz(path: str | Path, what: str, *, square: bool = False) -> sp.csr_matrix:
    """A SciPy sparse matrix saved by ``scipy.sparse.save_npz`` (CSR, CSC or COO), as CSR, its
    structure validated (pointers, index ranges, shape) before SciPy touches it.

    With ``square`` (an adjacency) the shape must be square and is sized as nodes only; otherwise
    as ``[nodes, features]``.
    """
    path = Path(path)
    name = f"{what} file {path}"
    arrays = read_npz(path, what)
    missing = [k for k in ("format", "shape", "data") if k not in arrays]
    if missing:
        raise ValueError(f"{name}: lacks the arrays {', '.join(missing)} of a SciPy sparse matrix; write it with "
                         "scipy.sparse.save_npz")
    fmt = arrays["format"].item() if arrays["format"].size == 1 else ""
    fmt = fmt.decode("ascii", "replace") if isinstance(fmt, bytes) else str(fmt)
    shape = check_shape(arrays["shape"].tolist() if arrays["shape"].ndim == 1 else arrays["shape"], name)
    if square and shape[0] != shape[1]:
        raise ValueError(f"{name}: shape {shape} is not square; an adjacency matrix is nodes x nodes")
    check_graph_size(shape[0], 0 if square else shape[1], name, what=f"shape {shape[0]:,} x {shape[1]:,}")
    need = {"csr": ("indices", "indptr"), "csc": ("indices", "indptr"), "coo": ("row", "col")}.get(fmt)
    if need is None:
        raise ValueError(f"{name}: sparse format {fmt!r} is not supported; save it as CSR "
                         f"(scipy.sparse.save_npz({path.name!r}, matrix.tocsr()))")
    if any(k not in arrays for k in need):
        raise ValueError(f"{name}: a {fmt.upper()} matrix needs the arrays {', '.join(need)}; write it with "
                         "scipy.sparse.save_npz")
    data = arrays["data"]
    if fmt == "coo":
        check_coordinates(arrays["row"], arrays["col"], data, shape, name)
        return sp.coo_matrix((data, (arrays["row"], arrays["col"])), shape=shape).tocsr()
    check_compressed(arrays["indptr"], arrays["indices"], data, shape, name, kind=fmt)
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    return sp.csr_matrix(cls((data, arrays["indices"], arrays["indptr"]), shape=shape))
