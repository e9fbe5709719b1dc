"""The effect path does no per-call work that grows with the number of loaded modules
(issue 20): the agent's modules are found by scanning sys.modules only when it changed
(runtime/_agent.py, agent_modules), not on every effect. Counted, never timed: the
function calls (Python and C) that 20 effects make with 100 and with 5,000 more
modules loaded are the same."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import snapstate
from snapstate.runtime import _agent

AGENT = """\
import sys

import snapstate


@snapstate.effect(idempotency="key")
def place(n, *, idempotency_key):
    return {"n": n, "key": idempotency_key[:6]}


def main():
    for i in range(3):  # warm: the first effects scan the modules loaded since the start
        place(i)
    counts = {"call": 0, "c_call": 0}

    def count(frame, event, arg):
        if event in counts:
            counts[event] += 1

    sys.setprofile(count)
    try:
        for i in range(3, 23):
            place(i)
    finally:
        sys.setprofile(None)
    return counts
"""


@pytest.fixture
def dummies(tmp_path: Path) -> Iterator[list[str]]:
    """Names put into sys.modules for the test (library-like modules outside the
    agent's folder, with a spec and attributes, as imported ones have); removed after."""
    names: list[str] = []
    yield names
    for name in names:
        sys.modules.pop(name, None)


def _load(names: list[str], count: int, lib: Path) -> None:
    for i in range(len(names), len(names) + count):
        name = f"snapstate_cost_dummy_{i}"
        module = types.ModuleType(name)
        module.__file__ = str(lib / f"{name}.py")
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=module.__file__)
        module.CONFIG = {"i": i}  # indexed by serializers/_refs.py: a library's object
        module.helper = len
        sys.modules[name] = module
        names.append(name)


def _calls(store: snapstate.Store, script: Path, job_id: str) -> dict[str, int]:
    outcome = store.start(script, job_id=job_id)
    assert outcome.status == "done", outcome
    counts = outcome.result
    assert isinstance(counts, dict)
    return counts


def test_effect_calls_do_not_grow_with_sys_modules(tmp_path: Path, dummies: list[str]) -> None:
    """20 effects make exactly as many function calls with 5,000 more modules loaded as
    with 100 more (before the cache, each effect walked every sys.modules entry: about
    two C calls per loaded module per effect)."""
    folder = tmp_path / "agent"
    folder.mkdir()
    script = folder / "cost_agent.py"
    script.write_text(AGENT)
    lib = tmp_path / "lib"
    store = snapstate.Store(tmp_path / "store")
    _load(dummies, 100, lib)
    _calls(store, script, "first")  # the first job of this entry point: its key in the cache
    few = _calls(store, script, "job-a")
    _load(dummies, 4_900, lib)
    assert len(sys.modules) > 5_000
    many = _calls(store, script, "job-b")
    assert few["call"] > 20 and few["c_call"] > 20  # the profile saw the effects
    assert many == few, (few, many)


def test_replaced_entry_is_seen_at_the_snapshot_path(tmp_path: Path, dummies: list[str]) -> None:
    """The cheap check (the effect path) may miss an entry replaced in place; the
    snapshot path's check (exact) never does: a module of the agent's folder put in
    place of a library module, with sys.modules' size and last entry unchanged, is
    the agent's at the next snapshot."""
    folder = tmp_path / "agent"
    folder.mkdir()
    entry_file = folder / "entry_mod.py"
    entry_file.write_text("def main():\n    pass\n")
    entry = _agent.EntryPoint.parse(str(entry_file))
    module = types.ModuleType(entry.module)
    module.__file__ = str(entry_file)
    sys.modules[entry.module] = module
    dummies.append(entry.module)
    _load(dummies, 3, tmp_path / "lib")
    _load(dummies, 1, tmp_path / "lib")  # the last entry: left alone below
    first = _agent.agent_modules(entry)
    assert [m.__name__ for m in first] == [entry.module]
    own = types.ModuleType("own_helper")
    own.__file__ = str(folder / "own_helper.py")
    sys.modules[dummies[1]] = own  # in place: same size, same last entry
    # the cheap check misses it (so this test exercises the exact comparison)
    assert [m.__name__ for m in _agent.agent_modules(entry, exact=False)] == [entry.module]
    exact = _agent.agent_modules(entry)
    assert [m.__name__ for m in exact] == [entry.module, "own_helper"]
    # and once the cache was rebuilt, the effect path sees it too
    assert own in _agent.agent_modules(entry, exact=False)


TRACED = """\
import snapstate
from snapstate.runtime._context import active_job

LOG = []
SENT = []


@snapstate.effect(idempotency="key")
def place(n, *, idempotency_key):
    SENT.append(len(LOG))  # the statements made before this call was sent
    return {"n": n}


def main():
    place(0)
    db = active_job().home.catalog._db()
    db.set_trace_callback(LOG.append)
    try:
        snapstate.now()  # a value record, buffered until the next durable write
        place(1)
    finally:
        db.set_trace_callback(None)
    return LOG[: SENT[-1]]
"""


def test_a_dispatch_is_one_transaction(tmp_path: Path) -> None:
    """Before an effect is sent, one write transaction records it: the lease's epoch
    compare-and-swap (a single UPDATE, no read of the lease first), the buffered value
    record and the dispatched row, then COMMIT. Before, the value record was flushed in
    a transaction of its own and the fence read the lease twice before renewing it."""
    folder = tmp_path / "agent"
    folder.mkdir()
    script = folder / "traced_agent.py"
    script.write_text(TRACED)
    outcome = snapstate.Store(tmp_path / "store").start(script, job_id="traced")
    assert outcome.status == "done", outcome
    statements = outcome.result
    assert isinstance(statements, list)
    verbs = [" ".join(s.split()[:3]) for s in statements]
    first = verbs.index("BEGIN IMMEDIATE")
    assert all(v.startswith("SELECT") for v in verbs[:first]), verbs  # lookups only
    tx = verbs[first:]
    assert tx == [
        "BEGIN IMMEDIATE",
        "UPDATE leases SET",
        "INSERT INTO effects",  # the now() value
        "INSERT INTO effects",  # the effect, state dispatched
        "COMMIT",
    ], verbs
    assert "AND epoch = " in statements[first + 1], statements[first + 1]
    assert "'snapstate.now'" in statements[first + 2] and "'dispatched'" in statements[first + 3]
