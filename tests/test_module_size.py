"""No library module over LIMIT lines without a stated reason: one module, one job.

A module may pass the bound only when its docstring says why, in a paragraph starting
"Why this module is long:" (the reason a reader needs before splitting it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("snapstate", "runtime", "resources", "serializers", "testing")
LIMIT = 800
REASON = "Why this module is long:"


def _modules() -> list[Path]:
    return sorted(p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py"))


def test_the_library_is_where_this_test_looks():
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"snapstate/__init__.py", "runtime/_job.py", "serializers/_pickler.py"} <= names


def test_no_library_module_is_long_without_a_reason():
    long_ones = []
    for path in _modules():
        text = path.read_text()
        lines = text.count("\n")
        if lines <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if REASON not in doc:
            long_ones.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long_ones, (
        f"modules over {LIMIT} lines with no {REASON!r} paragraph in their docstring "
        "(split them by job, or say why not): " + "; ".join(long_ones)
    )
