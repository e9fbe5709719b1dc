"""The catalog contract's shape and the conformance package's mechanics (the specs
themselves run against SQLite in examples/store_backend/test_sqlite_conformance.py):
every method of the contract belongs to exactly one capability, the SQLite catalog
implements them all, and a backend outside this repository that declares only some
capabilities runs the suite unchanged with the others skipped by name."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import snapstate.testing as conformance
from snapstate._errors import StaleWriter
from snapstate.serializers import _catalog
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._store import Owner, SnapshotRow
from snapstate.testing import BASE_CAPABILITIES, Capability, CatalogBackend

# The capability ABC each Capability member stands for.
PARTS = {
    Capability.JOBS: _catalog.JobCatalog,
    Capability.LEASES: _catalog.LeaseCatalog,
    Capability.SNAPSHOTS: _catalog.SnapshotCatalog,
    Capability.EVENTS: _catalog.EventCatalog,
    Capability.LEDGER: _catalog.LedgerCatalog,
    Capability.APPROVALS: _catalog.ApprovalCatalog,
    Capability.WAITS: _catalog.WaitCatalog,
    Capability.WORKER: _catalog.WorkerCatalog,
    Capability.ADMIN: _catalog.AdminCatalog,
    Capability.CHUNKS: _catalog.ChunkCatalog,
}


def test_every_catalog_method_belongs_to_one_capability() -> None:
    """Catalog is exactly its capability classes: each abstract method is declared by
    one of them, no two declare the same method, and each capability has its spec
    class in snapstate.testing."""
    assert set(PARTS) == set(Capability)
    assert set(Catalog.__bases__) == set(PARTS.values())
    owners: dict[str, list[str]] = {}
    for part in PARTS.values():
        for name, member in vars(part).items():
            if getattr(member, "__isabstractmethod__", False):
                owners.setdefault(name, []).append(part.__name__)
    assert set(owners) == set(Catalog.__abstractmethods__)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    specs = {
        cls.capability
        for cls in inspect.getmro(conformance.CatalogConformance)[1:]
        if "capability" in vars(cls)
    }
    assert specs == set(Capability)


@pytest.mark.smoke
def test_sqlite_catalog_implements_the_whole_contract(tmp_path: Path) -> None:
    """SqliteCatalog is a Catalog with no abstract method left; a fenced commit goes
    through it and a stale one does not (the whole suite: examples/store_backend)."""
    assert issubclass(SqliteCatalog, Catalog)
    assert not getattr(SqliteCatalog, "__abstractmethods__", None)
    catalog = SqliteCatalog(str(tmp_path / "store"))
    try:
        catalog.create_job("job", {"module": "agent", "function": "main"}, [])
        epoch = catalog.acquire_lease("job", Owner.me(), 30)
        first = SnapshotRow("job", 1, "one", "snapshots/job/1.snap", 10, 1.0, epoch)
        catalog.commit_snapshot(first)
        with pytest.raises(StaleWriter):
            catalog.commit_snapshot(dataclasses.replace(first, seq=2, epoch=epoch + 1))
        assert catalog.snapshots("job") == [first]
    finally:
        catalog.close()


def test_a_backend_must_declare_the_base_capabilities() -> None:
    """A declaration without the base capabilities, or with a factory that is not
    "module:Class", is refused by name."""
    with pytest.raises(ValueError, match="declares no leases"):
        CatalogBackend(
            "snapstate.serializers._sqlite:SqliteCatalog",
            "/nowhere",
            frozenset({Capability.JOBS, Capability.SNAPSHOTS, Capability.EVENTS}),
        )
    with pytest.raises(ValueError, match="'module:Class'"):
        CatalogBackend("SqliteCatalog", "/nowhere")


# A backend of another package, in a folder of its own (no conftest.py of this
# repository): the SQLite catalog declared with the base capabilities only.
_OUTSIDE = """
import pytest

from snapstate.testing import BASE_CAPABILITIES, CatalogBackend, CatalogConformance


class TestPartialCatalog(CatalogConformance):
    @pytest.fixture
    def make_catalog_backend(self):
        def make(scratch):
            return CatalogBackend(
                factory="snapstate.serializers._sqlite:SqliteCatalog",
                location=str(scratch / "store"),
                capabilities=BASE_CAPABILITIES,
            )

        return make
"""


def test_a_backend_outside_the_repository_runs_the_suite_unchanged(tmp_path: Path) -> None:
    """pytest run in a folder outside this repository on a module that declares only
    the base capabilities: every spec of the base passes, and every spec that needs
    another capability is skipped with a reason naming it, none errors."""
    (tmp_path / "test_partial.py").write_text(textwrap.dedent(_OUTSIDE))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rs",
            "-q",
            "-k",
            "not processes",  # the base specs that race processes: they run in examples/
            "test_partial.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    optional = sorted(set(Capability) - BASE_CAPABILITIES)
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    # the specs of each optional capability, and the base specs that also need one
    for capability in optional:
        assert any(f"does not declare {capability}" in line for line in skipped), (
            capability,
            out,
        )
    assert "does not declare jobs" not in out and "error" not in out.lower()
    counts = re.search(r"(\d+) passed, (\d+) skipped", out)
    assert counts is not None and int(counts[1]) >= 25 and int(counts[2]) >= 15, out


def test_snapstate_never_loads_the_conformance_suite_or_pytest() -> None:
    """Importing snapstate and every layer (as snaprun does) loads neither
    snapstate.testing nor pytest: a user needs no test dependency (the import-linter
    contracts check the imports statically; this checks what actually loads)."""
    script = (
        "import sys, snapstate, snapstate.runtime._cli, snapstate.serializers._sqlite\n"
        "print(sorted(m for m in sys.modules if m == 'pytest' or m.startswith('snapstate.testing')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
