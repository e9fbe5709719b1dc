"""The per-version frame layout tables: selected by version, self-checked at import,
and a clear error naming the version when they do not fit."""

from __future__ import annotations

import sys

import pytest

from snapstate.runtime import _layout


def test_table_matches_running_interpreter():
    """The table for this minor version is chosen and passes its probe-frame check."""
    assert _layout.LAYOUT.VERSION == sys.version_info[:2]
    _layout.verify_layout()


@pytest.mark.parametrize(
    "implementation, version", [("cpython", (3, 10)), ("cpython", (3, 14)), ("pypy", (3, 11))]
)
def test_unsupported_interpreter_is_named(implementation, version):
    """An unknown interpreter or version gets an ImportError naming it."""
    full = ".".join(map(str, version)) + ".0"
    with pytest.raises(
        ImportError, match=f"supports CPython 3.11, 3.12 and 3.13; this is {implementation} {full}"
    ):
        _layout.check_supported(implementation, version, full)


# 3.11 has no FRAME_DATA_OFFSET (greenlet leaves `previous` alone there).
_OFFSETS = [
    (field, wrong)
    for field, wrong in [("GEN_EXC_VALUE_OFFSET", 8), ("FRAME_DATA_OFFSET", 16)]
    if getattr(_layout.LAYOUT, field) is not None
]


@pytest.mark.parametrize("field, wrong", _OFFSETS)
def test_layout_mismatch_is_detected(monkeypatch, field, wrong):
    """A table whose offsets do not fit the interpreter fails its self-check by name."""
    monkeypatch.setattr(_layout.LAYOUT, field, wrong)
    version = "{}.{}".format(*sys.version_info[:2])
    with pytest.raises(ImportError, match=f"CPython {version} frame layout table does not match"):
        _layout.verify_layout()
