"""How snaprun prints what a store holds: text as text, and tables that fit the terminal.

Everything a user or an agent wrote (ids, labels, arguments, errors, pins, names,
`--by`, meta, paths) reaches the terminal through `visible()`: control characters
(escape sequences, \\r, \\b), bidi overrides and isolates, zero-width and other format
characters, line and paragraph separators and lone surrogates are shown as `\\xNN`,
`\\uNNNN` or `\\UNNNNNNNN`; nothing is ever read as markup (no rich markup is parsed
here: the table is laid out as plain strings). `table()` is the one way a listing
prints: every cell goes through `visible()`, so no command has to remember to.

Width: `--wide` prints every column, every cell whole; otherwise the table fits the
width of the terminal ($COLUMNS when set, else the terminal's, else 80 when stdout is
no terminal), one line per row, no trailing spaces: the `flex` columns (free text)
give way first, cut with an ellipsis, then `optional` columns are left out, then the
others are cut. --json is the form for programs.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import click
from rich.cells import cell_len, set_cell_size

__all__ = [
    "Column",
    "visible",
    "print_text",
    "table",
    "terminal_width",
    "wide_option",
    "ELLIPSIS",
]

ELLIPSIS = "\u2026"
_GAP = "  "  # between two columns
_ASCII_UNSAFE = re.compile("[\x00-\x1f\x7f]")
# Categories shown escaped beyond ASCII: C1 controls (Cc), format characters (Cf: bidi
# embeddings, overrides and isolates, zero-width joiners, the BOM, soft hyphen...),
# line and paragraph separators (Zl, Zp), lone surrogates (Cs).
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(value: object) -> str:
    """`value` as text a terminal shows as written: every character that could move the
    cursor, recolour, retitle, reorder or hide text is shown as its escape."""
    text = value if isinstance(value, str) else str(value)
    if text.isascii():
        return _ASCII_UNSAFE.sub(lambda m: _escape(m.group()), text)
    return "".join(_escape(c) if unicodedata.category(c) in _UNSAFE_CATEGORIES else c for c in text)


def print_text(line: str) -> None:
    """A line of a command's report (not a table) to stdout, as text."""
    click.echo(visible(line))


R = TypeVar("R")


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column of a listing: its header and the cell of a record (any value; shown
    through `visible()`). `flex`: free text that gives way first when the table is too
    wide (down to `min_width`); `keep`: what a user types next (ids, statuses), cut only
    when nothing else is left to cut; `optional`: left out (the last first) when the
    table cannot fit otherwise without cutting free text below its `min_width`;
    `right`: aligned right (counts). An optional column whose every cell is empty is left
    out (but for --wide)."""

    header: str
    cell: Callable[[R], object]
    flex: bool = False
    keep: bool = False
    optional: bool = False
    right: bool = False
    min_width: int = 8


def terminal_width() -> int:
    """$COLUMNS when set, else the terminal's width when stdout is one, else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if sys.stdout.isatty():
            return shutil.get_terminal_size((80, 24)).columns
    except (AttributeError, ValueError, OSError):
        pass
    return 80


def _fit(natural: list[int], floors: list[int], room: int) -> list[int]:
    """Widths no larger than `natural` summing to at most `room` (when the floors
    allow): the widest shrink first, down to a common cap, none below its floor."""
    if sum(natural) <= room:
        return natural
    low, high = 0, max(natural)
    while low < high:  # the largest cap that fits
        cap = (low + high + 1) // 2
        if sum(min(n, max(cap, f)) for n, f in zip(natural, floors, strict=True)) <= room:
            low = cap
        else:
            high = cap - 1
    return [min(n, max(low, f)) for n, f in zip(natural, floors, strict=True)]


def _widths(columns: Sequence[Column[Any]], cells: list[list[str]], width: int) -> list[int]:
    natural = _natural(columns, cells)
    room = width - len(_GAP) * (len(columns) - 1)
    if sum(natural) <= room:
        return natural
    flex = [i for i, c in enumerate(columns) if c.flex]
    fixed = sum(n for i, n in enumerate(natural) if i not in flex)
    widths = list(natural)
    if flex:  # free text first, down to its floor
        floors = [
            min(natural[i], max(columns[i].min_width, cell_len(columns[i].header))) for i in flex
        ]
        for i, w in zip(flex, _fit([natural[i] for i in flex], floors, room - fixed), strict=True):
            widths[i] = w
    if sum(widths) > room:  # then every column but those kept, down to its header
        floors = [
            w if c.keep else min(w, cell_len(c.header))
            for w, c in zip(widths, columns, strict=True)
        ]
        widths = _fit(widths, floors, room)
    if sum(widths) > room:  # a very narrow terminal: headers are cut too
        widths = _fit(widths, [min(w, 2) for w in widths], room)
    return widths


def _cut(text: str, width: int, right: bool) -> str:
    """`text` in exactly `width` cells: cut with an ellipsis, or padded."""
    if cell_len(text) > width:
        text = set_cell_size(text, max(width - 1, 0)) + ELLIPSIS if width > 0 else ""
    pad = " " * (width - cell_len(text))
    return pad + text if right else text + pad


def _natural(columns: Sequence[Column[Any]], cells: list[list[str]]) -> list[int]:
    return [
        max([cell_len(c.header), *(cell_len(row[i]) for row in cells)])
        for i, c in enumerate(columns)
    ]


def _least(column: Column[Any], natural: int) -> int:
    """The width a column takes before optional columns are left out."""
    if column.flex:
        return min(natural, max(column.min_width, cell_len(column.header)))
    return natural


def render(columns: Sequence[Column[R]], records: Iterable[R], *, wide: bool) -> list[str]:
    """The table's lines (headers first); see the module doc for the width."""
    records = list(records)
    cells = [[visible(c.cell(record)) for c in columns] for record in records]
    if wide:
        widths = _natural(columns, cells)
    else:
        width = terminal_width()
        # an optional column with nothing in it (every NOTE empty) gives its room away
        shown = [
            i
            for i, c in enumerate(columns)
            if not (c.optional and cells and not any(row[i] for row in cells))
        ]
        while True:
            natural = _natural([columns[i] for i in shown], [[r[i] for i in shown] for r in cells])
            least = sum(_least(columns[i], n) for i, n in zip(shown, natural, strict=True))
            optional = [i for i in shown if columns[i].optional]
            if least + len(_GAP) * (len(shown) - 1) <= width or not optional:
                break
            shown.remove(optional[-1])
        columns = [columns[i] for i in shown]
        cells = [[row[i] for i in shown] for row in cells]
        widths = _widths(columns, cells, width)
    lines = []
    for row in [[c.header for c in columns], *cells]:
        line = _GAP.join(
            _cut(text, w, c.right) for text, w, c in zip(row, widths, columns, strict=True)
        )
        lines.append(line.rstrip())
    return lines


def table(columns: Sequence[Column[R]], records: Iterable[R], *, wide: bool = False) -> None:
    """Print the table to stdout (see the module doc)."""
    click.echo("\n".join(render(columns, records, wide=wide)))


def _wide_given_first(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    root = ctx.find_root()
    return bool(value or (root is not ctx and root.params.get("wide")))


_F = TypeVar("_F", bound=Callable[..., Any])


def wide_option(fn: _F) -> _F:
    return click.option(
        "--wide",
        is_flag=True,
        callback=_wide_given_first,
        help="Print every cell whole (the table may be wider than the terminal).",
    )(fn)
