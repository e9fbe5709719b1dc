"""Reductions the freeze pickler makes of exceptions: one whose __reduce__ names a
global (a module's exception singleton) is saved by that name, as pickle itself does,
never taken apart as if the name were a (callable, args) tuple."""

from __future__ import annotations

from snapstate.serializers import _pickler


class _Singleton(Exception):
    def __reduce__(self) -> str:
        return "SINGLETON"


SINGLETON = _Singleton("the one")


def test_exception_reducing_to_a_global_name_is_saved_by_reference():
    """Loads as the very object, on the ordinary path (not the dill fallback)."""
    data = _pickler.dumps(SINGLETON)
    assert _pickler.loads(data) is SINGLETON
    assert _Singleton not in _pickler._DILL_TYPES
    assert b"dill" not in data


def test_exception_reducing_to_a_global_name_inside_a_graph():
    """Inside a container, with its identity shared across the dump."""
    a, b = _pickler.loads(_pickler.dumps([SINGLETON, {"again": SINGLETON}]))
    assert a is SINGLETON and b["again"] is SINGLETON
