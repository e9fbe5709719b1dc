"""The freeze pickler: identity kept across one dump, code by reference, closures
with real globals and shared cells, generators paused at the same yield, and dill
only as a fallback for types cloudpickle refuses."""

from __future__ import annotations

import pickle
import sys

import pytest
from helpers import AGENTS

sys.path.insert(0, str(AGENTS))

import pickle_subjects as subjects  # noqa: E402

from snapstate.serializers import _pickler  # noqa: E402


def roundtrip(obj):
    return _pickler.loads(_pickler.dumps(obj))


def test_shared_objects_keep_identity():
    """Objects referenced twice in one dump are one object after loading."""
    shared = [1, 2]
    a, b = roundtrip([shared, {"again": shared}])
    assert a is b["again"]


def test_closures_share_cells_and_use_module_globals():
    """Nested functions come back with the same cell and the module's real globals."""
    push, peek = subjects.make_pair()
    push("a")
    push2, peek2 = roundtrip((push, peek))
    assert push2.__closure__[0] is peek2.__closure__[0]
    assert push2.__globals__ is vars(subjects)
    before = subjects.COUNTER["n"]
    push2("b")
    assert peek2() == ["a", "b"] and subjects.COUNTER["n"] == before + 1
    assert push2.__code__ is push.__code__  # referenced by identity, not rebuilt


def test_recursive_closure():
    """A closure whose cell holds the function itself round-trips and still recurses."""
    countdown = roundtrip(subjects.make_recursive())
    assert countdown(3) == [3, 2, 1]


@pytest.mark.smoke
def test_suspended_generator_resumes_at_same_yield():
    """A suspended generator continues with the same values, send() and throw()."""
    gen = subjects.ticker(5)
    assert next(gen) == 5
    assert gen.send(2) == 7
    copy = roundtrip(gen)
    assert [copy.send(1), copy.send(3)] == [gen.send(1), gen.send(3)]
    assert copy.throw(ValueError) == gen.throw(ValueError) == -100


def test_restored_generator_runs_finally_on_close():
    """close() on a restored generator runs its finally block (the spike's defect)."""
    gen = subjects.ticker(1)
    next(gen)
    copy = roundtrip(gen)
    gen.close()
    before = subjects.COUNTER["n"]
    copy.close()
    assert subjects.COUNTER["n"] == before + 1000


def test_generator_inside_except_keeps_handled_exception():
    """A generator paused in an except body re-raises the same exception after restore."""
    gen = subjects.in_except()
    assert next(gen) == "inside"
    copy = roundtrip(gen)
    with pytest.raises(KeyError, match="held"):
        next(copy)
    gen.close()


def test_unstarted_and_exhausted_generators():
    """A created generator starts from the top; an exhausted one stays exhausted."""
    fresh = subjects.ticker(10)
    done = (x for x in [1])
    list(done)
    fresh2, done2 = roundtrip((fresh, done))
    assert next(fresh2) == 10
    assert list(done2) == []


def test_dill_only_as_fallback():
    """Common values never touch dill; a type cloudpickle refuses goes through dill."""
    import cloudpickle

    before = set(_pickler._DILL_TYPES)
    _pickler.dumps(
        {
            "history": [{"role": "user", "content": "x" * 100}] * 50,
            "push": subjects.make_pair()[0],
            "gen": subjects.ticker(1),
        }
    )
    assert _pickler._DILL_TYPES == before
    obj = subjects.WithSuper().parent()
    with pytest.raises((TypeError, pickle.PicklingError)):
        cloudpickle.dumps(obj)
    copy = roundtrip(obj)
    assert type(copy) is super and type(obj) in _pickler._DILL_TYPES
    assert copy.__thisclass__ is subjects.WithSuper


def test_live_handles_never_use_the_fallback():
    """A held lock is refused with what it is and its path even though dill could
    pickle it; the lock adapter's own error carries the fix (no generic one is added)."""
    import threading

    lock = threading.RLock()
    with (
        lock,
        pytest.raises(
            _pickler.UnpicklableError,
            match=r"value \(a dict\) holds a lock \(threading.RLock\) at "
            r"value\['lock'\], .*value\['lock'\] -> _thread.RLock",
        ) as info,
    ):
        _pickler.dumps({"lock": lock})
    assert info.value.fix is None and "release it" in str(info.value)


def test_unheld_locks_come_back_unheld_and_shared():
    """Locks nobody holds are saved as new unheld locks, one object per lock;
    conditions, semaphores and events keep their state."""
    import threading

    lock, rlock, event, sem = (
        threading.Lock(),
        threading.RLock(),
        threading.Event(),
        threading.Semaphore(3),
    )
    event.set()
    copy = roundtrip(
        {"a": lock, "b": lock, "r": rlock, "c": threading.Condition(rlock), "e": event, "s": sem}
    )
    assert copy["a"] is copy["b"] and not copy["a"].locked()
    assert copy["c"]._lock is copy["r"] and copy["r"].acquire(blocking=False)
    assert copy["e"].is_set() and copy["s"]._value == 3


def test_exception_keeps_cause_context_and_notes():
    """An exception's cause, context and notes survive."""
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise ValueError("outer") from inner
    except ValueError as exc:
        exc.add_note("a note")
        copy = roundtrip(exc)
    assert isinstance(copy.__cause__, KeyError) and copy.__notes__ == ["a note"]
    assert copy.__suppress_context__ is True
    assert pickle.loads(pickle.dumps(copy.args)) == ("outer",)
