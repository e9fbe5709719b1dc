"""snapstate's exceptions: their documented hierarchy, and that each one survives
pickle and cloudpickle (exceptions are stored inside snapshots) with its type, its
message, its args and any extra attributes."""

from __future__ import annotations

import itertools
import pickle
import pickletools
import subprocess
import sys

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import snapstate
import snapstate.runtime._cli  # noqa: F401  (imports every engine module defining errors)
from snapstate import (
    CorruptSnapshot,
    IncompatibleSnapshot,
    RestoreError,
    SnapshotError,
    SnapstateError,
)

PUBLIC_ERRORS = [
    getattr(snapstate, name)
    for name in snapstate.__all__
    if isinstance(getattr(snapstate, name), type)
    and issubclass(getattr(snapstate, name), BaseException)
]


def _all_subclasses(cls):
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


ALL_ERRORS = list(dict.fromkeys([SnapstateError, *_all_subclasses(SnapstateError)]))

# The picklers errors are stored with: (name, dump(error, protocol) -> bytes).
DUMPERS = [
    ("pickle", lambda e, p: pickle.dumps(e, protocol=p)),
    ("cloudpickle", lambda e, p: cloudpickle.dumps(e, protocol=p)),
]
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
ARG_SHAPES = {
    "no-args": (),
    "one-arg": ("one",),
    "two-args": ("two", 2),
    "three-args": ("three", None, {"k": [1]}),
}

# What an error's args and extra attributes hold in the property tests: the plain data
# snapstate puts there (paths, messages, numbers, None, nested lists/tuples/dicts).
_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_attr_names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True).filter(
    lambda n: not any(hasattr(cls, n) for cls in ALL_ERRORS)  # not args, add_note, ...
)


def test_public_errors_are_the_whole_tree():
    """Every SnapstateError subclass users can meet is public, except internal ones."""
    internal = {"EntryPointError"}
    assert set(PUBLIC_ERRORS) == {c for c in ALL_ERRORS if c.__name__ not in internal}


@pytest.mark.smoke
def test_hierarchy():
    """IncompatibleSnapshot < RestoreError < SnapstateError < Exception; SnapshotError and
    CorruptSnapshot derive directly from SnapstateError, and from nothing else."""
    assert IncompatibleSnapshot.__mro__ == (
        IncompatibleSnapshot,
        RestoreError,
        SnapstateError,
        Exception,
        BaseException,
        object,
    )
    assert RestoreError.__mro__ == (RestoreError, SnapstateError, Exception, BaseException, object)
    assert SnapshotError.__mro__ == (
        SnapshotError,
        SnapstateError,
        Exception,
        BaseException,
        object,
    )
    assert CorruptSnapshot.__mro__ == (
        CorruptSnapshot,
        SnapstateError,
        Exception,
        BaseException,
        object,
    )
    assert SnapstateError.__mro__ == (SnapstateError, Exception, BaseException, object)
    assert not issubclass(CorruptSnapshot, RestoreError)
    assert not issubclass(SnapshotError, RestoreError)
    for leaf, parent in [
        (snapstate.TruncatedSnapshot, CorruptSnapshot),
        (snapstate.TamperedSnapshot, snapstate.SnapshotRejected),
        (snapstate.HeaderMismatch, snapstate.SnapshotRejected),
        (snapstate.UnknownKey, snapstate.SnapshotRejected),
        (snapstate.RetiredKey, snapstate.SnapshotRejected),
        (snapstate.PlaintextRefused, snapstate.SnapshotRejected),
        (snapstate.JobNotFound, snapstate.StoreError),
        (snapstate.JobExists, snapstate.StoreError),
        (snapstate.SnapshotNotFound, snapstate.StoreError),
        (snapstate.LeaseHeld, snapstate.StoreError),
        (snapstate.StaleWriter, snapstate.StoreError),
    ]:
        assert leaf.__mro__[1] is parent, leaf
    for top in (snapstate.SnapshotRejected, snapstate.StoreError, snapstate.SnapshotWriteError):
        assert top.__mro__[1] is SnapstateError


def test_every_error_is_an_exception():
    """Every snapstate error (public or internal) is caught by `except Exception` and by
    `except SnapstateError`."""
    for cls in ALL_ERRORS:
        assert issubclass(cls, Exception), cls
        with pytest.raises(Exception) as info:
            raise cls("boom")
        assert isinstance(info.value, SnapstateError), cls


def _roundtrip_checks(original, restored, case=""):
    assert type(restored) is type(original), case
    assert str(restored) == str(original), case
    assert restored.args == original.args, case
    assert restored.__dict__ == original.__dict__, case


def test_roundtrip_message():
    """An error pickled at any protocol comes back with its type, message and args: every
    error x every protocol x pickle and cloudpickle."""
    for cls, protocol, (name, dump) in itertools.product(ALL_ERRORS, PROTOCOLS, DUMPERS):
        exc = cls("/store/jobs/j/000003.snap is damaged: its checksum does not match")
        case = f"{cls.__name__}, protocol {protocol}, {name}"
        _roundtrip_checks(exc, pickle.loads(dump(exc, protocol)), case)


def test_roundtrip_extra_attributes():
    """Extra attributes set on an error (in its __dict__), including notes, survive: every
    error x pickle and cloudpickle."""
    for cls, (name, dump) in itertools.product(ALL_ERRORS, DUMPERS):
        case = f"{cls.__name__}, {name}"
        exc = cls("frame main() at agent.py:12: cannot freeze")
        exc.path = "/store/jobs/j/000001.snap"
        exc.frames = [("main", 12), ("step", 30)]
        exc.details = {"python": ("3.11", "3.12")}
        exc.add_note("resume with the original interpreter")
        restored = pickle.loads(dump(exc, pickle.HIGHEST_PROTOCOL))
        _roundtrip_checks(exc, restored, case)
        assert restored.path == "/store/jobs/j/000001.snap", case
        assert restored.frames == [("main", 12), ("step", 30)], case
        assert restored.__notes__ == ["resume with the original interpreter"], case


def test_roundtrip_any_args():
    """Errors built with zero, one or several arguments keep all of them: every error x
    each of the four argument shapes x pickle and cloudpickle."""
    for cls, (shape, args), (name, dump) in itertools.product(
        ALL_ERRORS, ARG_SHAPES.items(), DUMPERS
    ):
        exc = cls(*args)
        case = f"{cls.__name__}, {shape}, {name}"
        _roundtrip_checks(exc, pickle.loads(dump(exc, pickle.HIGHEST_PROTOCOL)), case)


@settings(max_examples=150, deadline=None)
@given(
    cls=st.sampled_from(ALL_ERRORS),
    protocol=st.sampled_from(PROTOCOLS),
    dumper=st.sampled_from(DUMPERS),
    args=st.lists(_values, max_size=4).map(tuple),
    attributes=st.dictionaries(_attr_names, _values, max_size=4),
    notes=st.lists(st.text(max_size=20), max_size=2),
)
def test_roundtrip_property(cls, protocol, dumper, args, attributes, notes):
    """Property: any error, built with any plain-data arguments, carrying any extra
    attributes and notes, pickled at any protocol by pickle or cloudpickle, comes back
    with its type, message, args, attributes and notes."""
    name, dump = dumper
    exc = cls(*args)
    for attr, value in attributes.items():
        setattr(exc, attr, value)
    for note in notes:
        exc.add_note(note)
    restored = pickle.loads(dump(exc, protocol))
    _roundtrip_checks(exc, restored, f"{cls.__name__}, protocol {protocol}, {name}")
    assert getattr(restored, "__notes__", []) == notes


def test_pickled_by_public_path():
    """A public error pickles by reference to `snapstate.<Name>`, not to the engine
    module it is defined in, so stored errors survive engine refactors: every public
    error."""
    for cls in PUBLIC_ERRORS:
        data = pickle.dumps(cls("msg"), protocol=pickle.HIGHEST_PROTOCOL)
        assert b"snapstate.runtime" not in data, cls
        strings, globals_ = [], []
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE"):
                strings.append(arg)
            elif op.name == "STACK_GLOBAL":
                globals_.append(tuple(strings[-2:]))
        assert globals_ == [("snapstate", cls.__name__)], cls


def test_roundtrip_in_a_fresh_process():
    """Errors pickled here unpickle in a new interpreter (which has imported nothing
    but pickle) with their type, message and attributes."""
    excs = []
    for cls in PUBLIC_ERRORS:
        exc = cls(f"{cls.__name__} message")
        exc.where = cls.__name__.lower()
        excs.append(exc)
    script = (
        "import pickle, sys\n"
        "for e in pickle.loads(sys.stdin.buffer.read()):\n"
        "    print(type(e).__module__, type(e).__name__, e, e.where,"
        " isinstance(e, Exception))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(excs), capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().splitlines() == [
        f"snapstate {cls.__name__} {cls.__name__} message {cls.__name__.lower()} True"
        for cls in PUBLIC_ERRORS
    ]


def test_chained_error_pickles_inside_a_container():
    """An error stored in agent state (a list holding the same error twice) comes back
    as one object, still the same type with the same message."""
    exc = IncompatibleSnapshot("Python 3.11.7 -> 3.12.1")
    state = {"errors": [exc, exc]}
    restored = pickle.loads(cloudpickle.dumps(state))
    first, second = restored["errors"]
    assert first is second
    _roundtrip_checks(exc, first)
