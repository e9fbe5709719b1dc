"""The per-version frame layout tables: selected by version, self-checked at import,
and a clear error naming the version when they do not fit."""

from __future__ import annotations

import ctypes
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


def test_task_cancel_count_offset_matches_asyncio():
    """The table's offset of Task's cancellation count reads what cancelling() says, and
    setting it on a task not started yet leaves no cancellation pending."""
    import asyncio

    from snapstate.runtime._layout import LAYOUT, set_task_cancelling

    async def idle():
        return "ran"

    async def probe():
        loop = asyncio.get_running_loop()
        task = loop.create_task(idle())
        field = ctypes.c_int.from_address(id(task) + LAYOUT.TASK_NUM_CANCELS_OFFSET)
        assert field.value == task.cancelling() == 0
        set_task_cancelling(task, 2)
        assert task.cancelling() == 2 and not task._must_cancel
        assert await task == "ran"  # not cancelled
        assert task.uncancel() == 1

    asyncio.run(probe())
