"""The public API: exactly the names in snapstate.__all__, all living under the public
module path `snapstate` (snapshots store class paths, so that path is the promise),
and snapshot() as a no-op outside a job."""

from __future__ import annotations

import dataclasses
import pickle
import pickletools
import subprocess
import sys

import pytest
from helpers import AGENTS

import snapstate

PUBLIC = [
    "snapshot",
    "SnapshotInfo",
    "effect",
    "call_effect",
    "Retry",
    "Secret",
    "now",
    "random",
    "uuid4",
    "effect_time_left",
    "record_http",
    "sleep",
    "sleep_until",
    "request_approval",
    "Approval",
    "spawn",
    "gather",
    "Task",
    "resource",
    "register_adapter",
    "credential",
    "pin",
    "pins",
    "Store",
    "JobResult",
    "JobStatus",
    "JobView",
    "WaitInfo",
    "SnapshotView",
    "EffectView",
    "ApprovalView",
    "SnapstateError",
    "SnapshotError",
    "SnapshotWriteError",
    "RestoreError",
    "IncompatibleSnapshot",
    "CorruptSnapshot",
    "TruncatedSnapshot",
    "SnapshotRejected",
    "TamperedSnapshot",
    "HeaderMismatch",
    "UnknownKey",
    "RetiredKey",
    "PlaintextRefused",
    "StoreError",
    "JobNotFound",
    "JobExists",
    "SnapshotNotFound",
    "LeaseHeld",
    "StaleWriter",
    "ChunksMissing",
    "DivergenceError",
    "EffectRefused",
    "SecretUnavailable",
    "JobParked",
    "JobWaiting",
    "RateLimited",
    "ResourceReopenError",
    "EffectOutsideJob",
    "StoreFailure",
    "InvalidJobId",
    "StoreDamaged",
    "JobFinished",
    "ApprovalError",
    "ApprovalRejected",
    "ApprovalExpired",
    "ApprovalScopeError",
]


@pytest.mark.smoke
def test_all_is_pinned():
    """snapstate.__all__ is exactly the documented list, in order, each name once."""
    assert list(snapstate.__all__) == PUBLIC
    assert len(set(snapstate.__all__)) == len(snapstate.__all__)


@pytest.mark.parametrize("name", PUBLIC)
def test_each_name_is_an_attribute(name):
    """Every name in __all__ is an attribute of the snapstate package."""
    assert hasattr(snapstate, name)
    assert getattr(snapstate, name) is not None


def test_star_import_gives_exactly_all():
    """`from snapstate import *` binds exactly the names of __all__ and nothing else."""
    namespace: dict = {}
    exec("from snapstate import *", namespace)
    namespace.pop("__builtins__", None)
    assert sorted(namespace) == sorted(PUBLIC)
    for name in PUBLIC:
        assert namespace[name] is getattr(snapstate, name)


@pytest.mark.parametrize("name", PUBLIC)
def test_public_module_path(name):
    """Every public class and function reports `snapstate` as its module and its own
    name as its qualname, so pickles and tracebacks use the public path."""
    obj = getattr(snapstate, name)
    assert obj.__module__ == "snapstate"
    assert obj.__qualname__ == name
    assert obj.__name__ == name


def _pickled_globals(data: bytes) -> set[str]:
    """Module names the pickle's GLOBAL/STACK_GLOBAL opcodes refer to."""
    modules, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            modules.add(strings[-2])
        elif op.name == "GLOBAL":
            modules.add(arg.split(" ", 1)[0])
    return modules


@pytest.mark.parametrize("name", PUBLIC)
def test_pickles_by_public_path(name):
    """A public class or function pickles by reference to `snapstate`, never to the
    private engine module it is defined in, and unpickles to the same object."""
    obj = getattr(snapstate, name)
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    assert _pickled_globals(data) == {"snapstate"}
    assert b"snapstate.runtime" not in data
    assert pickle.loads(data) is obj


def test_snapshot_info_pickles_by_public_path():
    """A SnapshotInfo instance pickles with the public class path and round-trips."""
    info = snapstate.SnapshotInfo(True, 1.5, 7, "label")
    data = pickle.dumps(info, protocol=pickle.HIGHEST_PROTOCOL)
    assert "snapstate" in _pickled_globals(data)
    assert b"snapstate.runtime" not in data
    assert pickle.loads(data) == info


def test_snapshot_info_fields():
    """SnapshotInfo is a frozen record of (resumed, frozen_for, seq, label, meta, pins), in
    order; meta and pins have defaults (records pickled before they existed read them)."""
    fields = [f.name for f in dataclasses.fields(snapstate.SnapshotInfo)]
    assert fields == ["resumed", "frozen_for", "seq", "label", "meta", "pins"]
    info = snapstate.SnapshotInfo(False, 0.0, 3, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.seq = 4  # type: ignore[misc]


@pytest.mark.parametrize("label", ["checkpoint", None])
def test_snapshot_outside_a_job(label):
    """snapshot() outside a job does nothing and returns resumed=False, frozen_for=0.0,
    seq=None and the label it was given."""
    info = snapstate.snapshot(label) if label is not None else snapstate.snapshot()
    assert type(info) is snapstate.SnapshotInfo
    assert info == snapstate.SnapshotInfo(resumed=False, frozen_for=0.0, seq=None, label=label)
    assert info.frozen_for == 0.0 and type(info.frozen_for) is float


def test_snapshot_outside_a_job_repeatedly():
    """Repeated snapshot() calls outside a job keep returning seq=None (no counter)."""
    infos = [snapstate.snapshot(f"n{i}") for i in range(3)]
    assert [i.seq for i in infos] == [None, None, None]
    assert [i.label for i in infos] == ["n0", "n1", "n2"]
    assert not any(i.resumed for i in infos)


@pytest.mark.smoke
def test_agent_runs_under_plain_python(tmp_path):
    """An agent run by plain `python agent.py` (no snaprun) runs to the end, every
    snapshot() returning seq=None, resumed=False and its label, writing no snapshot."""
    proc = subprocess.run(
        [sys.executable, str(AGENTS / "compat_agent.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "step 0 seq None resumed False label step-0 frozen float True",
        "step 1 seq None resumed False label step-1 frozen float True",
        "step 2 seq None resumed False label step-2 frozen float True",
        "results [0, 10, 20]",
        "returned 30",
    ]
    assert list(tmp_path.iterdir()) == []
