"""Objects that are attributes of imported modules outside the agent (sentinels,
singletons) are saved by reference and come back as the new process's objects, so
identity comparisons behave after a restore (serializers/_refs.py)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.machinery
import io
import logging
import pickle
import sys
import types
from pathlib import Path

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

from snapstate.runtime._layout import NULL
from snapstate.serializers import _inert, _pickler, _refs

LIB = Path(__file__).parent / "ident_lib"


@pytest.fixture(autouse=True)
def no_agent_modules():
    """In-process round trips: no module is the agent's (as before any job)."""
    _refs.bind([])
    yield
    _refs.bind([])
    for name in [n for n in sys.modules if n.startswith("ident_")]:
        del sys.modules[name]


def _module(name: str, *, spec: bool = True, **attrs) -> types.ModuleType:
    """A module in sys.modules; with a spec, as the import system makes them."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None) if spec else None
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


class Marker:
    """A class of a non-agent module (this test file)."""


def test_argparse_parser_parses_the_same_after_a_round_trip():
    """argparse compares defaults with `is not SUPPRESS` (a str): the str comes back
    as argparse's own object, so a copied parser adds no 'help===SUPPRESS==' entries."""
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--name", default="x")
    parser.add_argument("--level", default=argparse.SUPPRESS)
    copy = _pickler.loads(_pickler.dumps({"parser": parser}))["parser"]
    assert copy is not parser
    assert vars(copy.parse_args([])) == {"name": "x"}
    assert vars(copy.parse_args(["--level", "2"])) == {"name": "x", "level": "2"}


def test_sentinels_and_singletons_keep_their_identity():
    """dataclasses.MISSING, logging.root, sys.__stdout__ and a library's object()
    marker come back as themselves; a str sentinel inside a container too, while an
    equal str stays a separate copy; snapstate's NULL keeps its own by-name form."""
    lib = _module("ident_lib_a", _sentinel=object(), SUPPRESS="==HIDE==")
    state = {
        "missing": dataclasses.MISSING,
        "field": dataclasses.field(),
        "root": logging.root,
        "out": sys.__stdout__,
        "marker": lib._sentinel,
        "hidden": [lib.SUPPRESS],
        "equal": "".join(["==HIDE", "=="]),
    }
    back = _pickler.loads(_pickler.dumps(state))
    assert back["missing"] is dataclasses.MISSING
    assert back["field"].default is dataclasses.MISSING
    assert back["root"] is logging.root
    assert back["out"] is sys.__stdout__
    assert back["marker"] is lib._sentinel
    assert back["hidden"][0] is lib.SUPPRESS
    assert back["equal"] == "==HIDE==" and back["equal"] is not lib.SUPPRESS  # equal, not it
    # objects whose __reduce__ names them keep that form; plain pickle.loads reads
    # any payload (the strings' preamble is part of the pickle stream)
    assert b"module_attribute" not in _pickler.dumps([NULL])
    assert _pickler.loads(_pickler.dumps([NULL]))[0] is NULL
    assert pickle.loads(_pickler.dumps({"a": [1, "x"]})) == {"a": [1, "x"]}


def test_a_gone_attribute_fails_clearly():
    """A reference to a module attribute the loading process no longer has is an
    AttributeError naming it (the job reports it as code that no longer exists), never
    a silent substitute. A str sentinel the module dropped comes back as an equal str
    (sentinel strings are seeded whether used or not, so a missing one is no error)."""
    lib = _module("ident_lib_gone", marker=Marker(), SENTINEL="<gone soon>")
    data = _pickler.dumps({"marker": lib.marker})
    text = _pickler.dumps({"text": lib.SENTINEL})
    del lib.marker, lib.SENTINEL
    with pytest.raises(AttributeError, match=r"ident_lib_gone\.marker"):
        _pickler.loads(data)
    assert _pickler.loads(text) == {"text": "<gone soon>"}


def test_only_current_non_agent_objects_go_by_reference():
    """Saved by value: the agent's modules' objects, objects of the agent's classes
    that a library module holds (a fresh import cannot have them), a module attribute
    rebound since it was indexed (no longer the module's object), a StringIO set as
    sys.stdout (the agent's object) and the object of a module built at run time (no
    spec: a new process could not import it); saved by reference: the library's own
    object, under its module's own name (never under an alias in sys.modules)."""
    agent_cls = type("Job", (), {"__module__": "ident_agent_mod"})
    agent = _module("ident_agent_mod", CONFIG=Marker(), Job=agent_cls)
    lib = _module("ident_lib_b", current=agent_cls(), shared=Marker(), box=Marker())
    built = _module("ident_built_at_run_time", spec=False, thing=Marker())
    sys.modules["ident_alias_of_b"] = lib
    _refs.bind([agent])
    old = lib.box
    _pickler.dumps(old)  # indexed as ident_lib_b.box
    lib.box = Marker()
    buffer = io.StringIO()
    buffer.write("kept")
    saved, sys.stdout = sys.stdout, buffer
    try:
        data = _pickler.dumps([agent.CONFIG, lib.current, lib.shared, old, buffer, built.thing])
    finally:
        sys.stdout = saved
    back = _pickler.loads(data)
    assert back[0] is not agent.CONFIG and type(back[0]) is Marker
    assert back[1] is not lib.current and type(back[1]) is agent_cls
    assert back[2] is lib.shared
    assert back[3] is not old and back[3] is not lib.box
    assert back[4] is not buffer and back[4].getvalue() == "kept"
    assert back[5] is not built.thing and type(back[5]) is Marker
    assert b"ident_alias_of_b" not in data


def test_inert_reader_shows_references_by_name():
    """`snaprun inspect`'s reader (runs nothing) shows references as module.name."""
    lib = _module("ident_lib_d", _sentinel=object())
    text = _inert.render(
        _inert.loads(
            _pickler.dumps({"m": dataclasses.MISSING, "s": argparse.SUPPRESS, "x": lib._sentinel})
        )
    )
    assert "<dataclasses.MISSING>" in text
    assert "<argparse.SUPPRESS>" in text
    assert "<ident_lib_d._sentinel>" in text


def test_kill_after_each_snapshot_keeps_identities(tmp_path):
    """SIGKILL right after each snapshot, resume in a new process: the output (parser
    results and `is` checks for argparse, dataclasses, enum, logging, sys.stdout and a
    library's sentinel on PYTHONPATH outside the agent's directory) equals an
    uninterrupted run's."""
    env = {"PYTHONPATH": str(LIB)}
    program = AGENTS / "ident_objects.py"
    base = snaprun(
        "run", "--store", tmp_path / "base", "--job", "job", program, cwd=tmp_path, env=env
    )
    assert base.returncode == 0, base.stderr
    checks = [line for line in base.stdout.splitlines() if " parse " not in line]
    assert len(checks) == 10 and not any("False" in line for line in checks), base.stdout
    assert "SUPPRESS" not in base.stdout
    count = len(snapshot_seqs(tmp_path / "base", "job"))
    assert count == 2
    for k in range(1, count + 1):
        store = tmp_path / f"kill{k}"
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            program,
            cwd=tmp_path,
            env=env,
            fault=f"after-snapshot:{k}",
        )
        assert killed.returncode == -9, killed.stderr
        assert snapshot_seqs(store, "job") == list(range(1, k + 1))
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout, f"diverged after snapshot {k}"
        assert resumed.result == base.result
