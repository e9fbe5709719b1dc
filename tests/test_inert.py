"""The inert unpickler (serializers/_inert.py) that `snaprun inspect` decodes with:
it never imports a module nor calls anything a pickle names, and renders what it
decoded readably. Every hostile case has a positive control: pickle.loads of the
same bytes does run the code."""

from __future__ import annotations

import os
import pickle
import sqlite3
import sys
import tempfile

import cloudpickle
from helpers import AGENTS

from snapstate import resource
from snapstate.serializers import _inert, _pickler

CALLS: list[str] = []


def _record(what):
    CALLS.append(what)
    return what


class Stateful:
    """Unpickling it normally runs its __new__ and its __setstate__."""

    def __new__(cls, *args):
        CALLS.append("__new__")
        return super().__new__(cls)

    def __init__(self, title):
        self.title = title
        self.pages = ["intro", {"n": 1}]

    def __setstate__(self, state):
        CALLS.append("__setstate__")
        self.__dict__.update(state)


class Reducing:
    def __reduce__(self):
        return (_record, ("reduce target",))


def test_no_module_named_by_the_pickle_is_imported(tmp_path, monkeypatch):
    """A pickle naming a function of a module that is not imported yet (its import
    creates a sentinel): the inert unpickler does not import it and shows the call.
    Positive control: pickle.loads imports it (the sentinel appears)."""
    sentinel = tmp_path / "imported"
    (tmp_path / "ro_import_trap.py").write_text(
        f"open({str(sentinel)!r}, 'w').close()\ndef hello(x):\n    return x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = (
        b"\x80\x05\x8c\x0ero_import_trap\x94\x8c\x05hello\x94\x93\x94\x8c\x02hi\x94\x85\x94R\x94."
    )
    shown = _inert.render(_inert.loads(data))
    assert shown == "ro_import_trap.hello('hi')"
    assert not sentinel.exists() and "ro_import_trap" not in sys.modules
    try:
        assert pickle.loads(data) == "hi"  # positive control
        assert sentinel.exists()
    finally:
        sys.modules.pop("ro_import_trap", None)


def test_no_reducer_new_or_setstate_runs():
    """An object whose class runs code in __new__ and __setstate__, and a __reduce__
    target, decode without running any of it; the object keeps its attributes.
    Positive control: pickle.loads runs all three."""
    data = pickle.dumps([Stateful("draft"), Reducing()], protocol=5)
    CALLS.clear()
    decoded = _inert.loads(data)
    assert CALLS == []
    assert _inert.render(decoded) == (
        "[Stateful(title='draft', pages=['intro', {'n': 1}]), "
        f"{__name__}._record('reduce target')]"
    )
    assert _inert.attributes(decoded[0])["title"] == "draft"
    pickle.loads(data)
    assert CALLS == ["__new__", "__setstate__", "reduce target"]


def test_functions_and_classes_pickled_by_value_are_not_rebuilt():
    """cloudpickle's dynamic functions and classes (a closure and a local class) show
    as `<function module.qualname>` and `Class(attrs)` and are not callable code:
    their bodies never run. Positive control: cloudpickle rebuilds and runs them."""

    def make():
        secret = "closure value"

        class Local:
            def __init__(self):
                self.size = 3

        def step():
            return _record(secret)

        return step, Local()

    step, local = make()
    data = cloudpickle.dumps({"step": step, "local": local}, protocol=5)
    CALLS.clear()
    decoded = _inert.loads(data)
    assert _inert.render(decoded["step"]) == (
        f"<function {__name__}.test_functions_and_classes_pickled_by_value_are_not_rebuilt"
        ".<locals>.make.<locals>.step>"
    )
    assert _inert.render(decoded["local"]) == "Local(size=3)"
    assert _inert.is_code_object(decoded["step"])
    decoded["step"]()  # calling the placeholder only records a call
    assert CALLS == []
    assert pickle.loads(data)["step"]() == "closure value"  # positive control
    assert CALLS == ["closure value"]


def test_builtin_values_load_as_themselves_and_no_size_bomb_is_built():
    """Scalars, containers, sets and bytearrays load as themselves; a pickle asking
    for bytearray(10**12) gets a placeholder, not a terabyte."""
    value = {
        "a": [1, 2.5, None, True],
        "b": (b"x", "y"),
        "c": {1, 2},
        "d": frozenset({3}),
        "e": bytearray(b"z"),
        "f": 10**40,
        "g": complex(1, 2),
    }
    assert _inert.loads(pickle.dumps(value, protocol=5)) == value
    bomb = b"\x80\x05\x8c\x08builtins\x8c\tbytearray\x93\x8a\x06\x00\x10\xa5\xd4\xe8\x00\x85R."
    assert _inert.render(_inert.loads(bomb)) == "bytearray(1000000000000)"


def test_rendering_is_bounded_and_survives_cycles():
    """Deep nesting is cut after a few levels, long containers after a few items,
    long strings and huge ints are shortened, and a cycle prints as <...>."""
    cyclic: list = [1]
    cyclic.append(cyclic)
    shown = _inert.render(
        _inert.loads(
            pickle.dumps(
                {
                    "deep": [[[[["bottom"]]]]],
                    "long": list(range(100)),
                    "text": "t" * 1000,
                    "big": 7**10000,
                    "cycle": cyclic,
                },
                protocol=5,
            )
        )
    )
    assert "'deep': [[[[...]]]]" in shown
    assert "'long': [0, 1, 2, 3, 4, 5, ...]" in shown
    assert "'cycle': [1, <...>]" in shown
    assert "bits>" in shown and len(shown) <= 400


def test_resources_show_by_kind_and_path_and_are_never_reopened(short_tmp_path):
    """A frozen state holding an append-mode file that grew after the snapshot, a
    sqlite3 connection, a temp directory, a closed file and a resource() handle: the
    inert decoding shows each by kind and path and touches none of them (the file
    keeps its size, the temp directory stays deleted). Positive control: the real
    unpickler truncates the file and recreates the directory."""
    tmp_path = short_tmp_path  # the renderings below are cut at 80 characters
    log = open(tmp_path / "log.txt", "a")
    log.write("x" * 120)
    db = sqlite3.connect(tmp_path / "x.db")
    temp = tempfile.TemporaryDirectory(dir=tmp_path)
    closed = open(tmp_path / "log.txt")
    closed.close()
    handle = resource(lambda: open(tmp_path / "log.txt"), name="the log")
    data = _pickler.dumps({"log": log, "db": db, "temp": temp, "closed": closed, "handle": handle})
    log.write("written after the snapshot\n")
    log.close()
    db.close()
    temp_name = temp.name
    temp.cleanup()
    size = os.path.getsize(tmp_path / "log.txt")

    decoded = _inert.loads(data)
    shown = {k: _inert.render(v) for k, v in decoded.items()}
    assert shown == {
        "log": f"open file '{tmp_path / 'log.txt'}' (mode 'a', at byte 120)",
        "db": f"sqlite3 connection '{tmp_path / 'x.db'}'",
        "temp": f"temporary directory {temp_name!r}",
        "closed": f"closed file '{tmp_path / 'log.txt'}' (mode 'r')",
        "handle": "resource 'the log' (reopened by its factory on first use)",
    }
    assert os.path.getsize(tmp_path / "log.txt") == size
    assert not os.path.exists(temp_name)

    real = _pickler.loads(data)  # positive control
    try:
        assert os.path.getsize(tmp_path / "log.txt") == 120
        assert os.path.isdir(temp_name)
    finally:
        real["log"].close()
        real["db"].close()


def test_exceptions_generators_and_cells_are_shown_not_rebuilt():
    """An exception keeps its message and attributes, a suspended generator shows
    where it is paused, a closure cell shows its content; none is rebuilt (a
    generator would be re-created by running its code). Positive control: the real
    unpickler resumes the generator where it was paused."""
    error = ValueError("boom")
    error.detail = "kept"
    sys.path.insert(0, str(AGENTS))
    import pickle_subjects

    gen = pickle_subjects.ticker(5)
    first = next(gen)
    secret = "in a cell"

    def closure():
        return secret

    data = _pickler.dumps({"error": error, "gen": gen, "cell": closure.__closure__[0]})
    shown = {k: _inert.render(v) for k, v in _inert.loads(data).items()}
    assert shown == {
        "error": "ValueError('boom', detail='kept')",
        "gen": f"<generator ticker() paused at line {gen.gi_frame.f_lineno}>",
        "cell": "<cell: 'in a cell'>",
    }
    assert next(_pickler.loads(data)["gen"]) == next(gen) != first  # positive control
