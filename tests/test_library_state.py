"""Library objects saved by reference keep what the job did to them
(serializers/_libstate.py): state the job put into a library's object comes back on
the new process's object (identity kept), an object the job installed into a library
module is installed again, and the plain reference stays for sentinels and for objects
whose state cannot be saved. Module-level library objects are simulated with a fresh
module object in sys.modules, as a new process would have (tests/test_review_engine.py
does the same for the reviewer's two cases)."""

from __future__ import annotations

import datetime
import decimal
import importlib.machinery
import os
import re
import sys
import threading
import types

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

from snapstate._errors import ResourceReopenError
from snapstate.serializers import _inert, _pickler, _refs


@pytest.fixture(autouse=True)
def no_agent_modules():
    _refs.bind([])
    yield
    for name in [n for n in sys.modules if n.startswith("libstate_")]:
        del sys.modules[name]


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


class Hooks(list):
    """A library's list subclass registry."""


class Table(dict):
    """A library's dict subclass registry with an attribute."""


class Slotted:
    __slots__ = ("level",)

    def __init__(self):
        self.level = 1


class Guarded:
    """A library object whose state holds a held lock (cannot be saved)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lock.acquire()
        self.count = 0


def test_containers_and_slots_come_back_exactly_on_the_fresh_objects():
    """A list subclass, a dict subclass (items and attributes) and a slotted object of
    a library module the job changed: after the restore they are the new process's
    objects holding exactly the job's items (an import-time item the job removed stays
    removed) and attributes; `snaprun inspect`'s reader (runs nothing) shows them as
    module.name."""
    lib = _module("libstate_a", HOOKS=Hooks(["import-time"]), TABLE=Table(a=1), LEVEL=Slotted())
    lib.HOOKS.remove("import-time")
    lib.HOOKS.append("job's")
    lib.TABLE.pop("a")
    lib.TABLE["b"] = 2
    lib.TABLE.note = "job"
    lib.LEVEL.level = 7
    data = _pickler.dumps([lib.HOOKS, lib.TABLE, lib.LEVEL])
    shown = _inert.render(_inert.loads(data))
    assert "<libstate_a.HOOKS>" in shown and "<libstate_a.TABLE>" in shown
    fresh = _module("libstate_a", HOOKS=Hooks(["import-time"]), TABLE=Table(a=1), LEVEL=Slotted())
    hooks, table, level = _pickler.loads(data)
    assert hooks is fresh.HOOKS and hooks == ["job's"]
    assert table is fresh.TABLE and table == {"b": 2} and table.note == "job"
    assert level is fresh.LEVEL and level.level == 7


def test_decimal_default_context_keeps_its_identity_and_settings():
    """decimal.DefaultContext changed in place (prec, traps) is decimal's own object
    after the restore (new threads' contexts copy it) with the job's settings."""
    ctx = decimal.DefaultContext
    saved = (ctx.prec, ctx.traps[decimal.Inexact])
    try:
        ctx.prec, ctx.traps[decimal.Inexact] = 5, True
        data = _pickler.dumps({"ctx": ctx})
        ctx.prec, ctx.traps[decimal.Inexact] = 28, False  # the new process's import
        back = _pickler.loads(data)["ctx"]
        assert back is decimal.DefaultContext
        assert back.prec == 5 and back.traps[decimal.Inexact]
    finally:
        ctx.prec, ctx.traps[decimal.Inexact] = saved


def test_identity_kept_where_state_is_not_saved_or_unchanged():
    """Guard for the state path (these came back by identity before it too, and must
    still): objects with no state of their own stay plain references (no state in the
    payload); value objects reducing to the same constructor call
    (datetime.timezone.utc, re.IGNORECASE) are the library's own objects, not rebuilt
    copies; os.environ stays the process's own mapping; a library object whose state
    holds a held lock is neither refused nor copied (its state belongs to a live
    process)."""
    lib = _module("libstate_b", _sentinel=object(), GUARD=Guarded())
    try:
        data = _pickler.dumps([lib._sentinel, datetime.UTC, re.IGNORECASE, os.environ, lib.GUARD])
        assert b"module_object" not in _pickler.dumps([lib._sentinel])
        back = _pickler.loads(data)
    finally:
        lib.GUARD.lock.release()
    assert back[0] is lib._sentinel
    assert back[1] is datetime.UTC
    assert back[2] is re.IGNORECASE
    assert back[3] is os.environ
    assert back[4] is lib.GUARD


def test_installed_object_whose_state_cannot_be_saved_is_refused_at_the_restore():
    """An object the job installed into a library module whose state cannot be saved
    (urllib.request.install_opener with a real opener: its HTTPS handler holds an
    ssl.SSLContext): where the new process's module holds something else (None) the
    restore is refused naming the attribute, never handing the job None for its
    opener."""
    import ssl
    import urllib.request

    # An explicit context: 3.11's default HTTPSHandler holds None, 3.12's a context.
    https = urllib.request.HTTPSHandler(context=ssl.create_default_context())
    opener = urllib.request.build_opener(https)
    opener.addheaders = [("User-agent", "libstate")]
    lib = _module("libstate_e", _opener=opener)
    data = _pickler.dumps({"opener": opener})
    lib._opener = None  # the new process's import-time value
    with pytest.raises(ResourceReopenError, match=r"libstate_e\._opener.*OpenerDirector"):
        _pickler.loads(data)


def test_killed_after_each_snapshot_and_resumed_matches_a_plain_run(tmp_path):
    """tests/agents/libstate_agent.py (decimal.DefaultContext changed in place, an
    opener the job installed with urllib.request.install_opener, os.environ held in a
    local) SIGKILLed right after each snapshot and resumed in a new process prints
    what an uninterrupted run prints: decimal's own context with the job's precision,
    the job's opener installed with its headers and handlers."""
    agent = AGENTS / "libstate_agent.py"
    base = snaprun("run", "--store", tmp_path / "base", "--job", "j", agent, cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    assert base.stdout.startswith("0 True 5 True [('User-agent', 'libstate/0')]")
    for k in (1, 2):
        store = tmp_path / f"kill{k}"
        killed = snaprun(
            "run", "--store", store, "--job", "j", agent, cwd=tmp_path, fault=f"after-snapshot:{k}"
        )
        assert killed.returncode == -9, killed.stderr
        assert snapshot_seqs(store, "j") == list(range(1, k + 1))
        resumed = snaprun("resume", "--store", store, "j", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout, f"diverged after snapshot {k}"
