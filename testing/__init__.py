"""The catalog conformance suite: what every catalog backend (serializers/_catalog.py's
`Catalog`) must do, so the runtime can rely on it, as pytest specs a backend runs
unchanged against itself. One spec module per capability (`Capability`): spec_jobs,
spec_leases, spec_snapshots, spec_events (the base every backend implements), spec_ledger,
spec_approvals, spec_waits, spec_worker, spec_admin, spec_chunks; spec_rows (signed
rows: a row written without the store's key is refused, per capability);
spec_concurrency races threads and real processes over the base. It needs pytest; nothing in snapstate imports it.

A backend runs it from a test module of its own (pytest collects the inherited specs):

    import pytest
    from snapstate.testing import Capability, CatalogBackend, CatalogConformance

    class TestPostgresCatalog(CatalogConformance):
        @pytest.fixture
        def make_catalog_backend(self):
            def make(scratch):                   # a pathlib.Path, fresh per call
                dsn = create_empty_database()    # the backend's own
                return CatalogBackend(
                    factory="mypackage.catalog:PostgresCatalog",
                    location=dsn,
                    capabilities=frozenset(Capability),   # what it implements
                    cleanup=lambda: drop_database(dsn),
                )
            return make

`make_catalog_backend` (the fixture, defined in the class or in a conftest.py) returns
a function that makes the backend of a fresh, empty catalog: `factory` is
"module:Class", importable in another process, and `Class(location)` and
`Class(location, clock=callable)` open the catalog there (the specs inject a clock, so
lease expiry is tested without sleeping). `capabilities` must hold BASE_CAPABILITIES;
the specs of a capability it leaves out are skipped, saying which. To run a part,
subclass the spec classes you want (`class TestMine(JobsSpec, LeasesSpec)`) instead.

Lease owners in the specs are real processes of this host (a live `sleep` and a
finished one), so "live" and "dead" come from the operating system, not from a flag.
examples/store_backend/test_sqlite_conformance.py runs the suite against SQLite.

It also holds the crash test of a user's own agent (`snaprun crashtest`, docs/crashtest.md)
for Python and pytest: `crashtest(agent, args, ...)` returns a `CrashReport`, and the
pytest plugin `snapstate.testing.pytest_plugin` (enabled with `-p
snapstate.testing.pytest_plugin` or `pytest_plugins = ["snapstate.testing.pytest_plugin"]`;
never loaded by itself) gives tests a `crashtest` fixture:

    def test_my_agent_survives_kill_9(crashtest):
        report = crashtest("agent.py", "--fast", setup="python stubs.py", max_kills=20)
        report.assert_ok()                     # AssertionError: one line per problem
"""

from __future__ import annotations

from snapstate.runtime._crashtest import crashtest
from snapstate.runtime._crashtest_report import CrashReport, Problem, TrialSummary

from ._support import (
    ALL_CAPABILITIES,
    BASE_CAPABILITIES,
    BackendMaker,
    Capability,
    CatalogBackend,
    FakeClock,
    Spec,
)
from .spec_admin import AdminSpec
from .spec_approvals import ApprovalsSpec
from .spec_chunks import ChunksSpec
from .spec_concurrency import ConcurrencySpec
from .spec_events import EventsSpec
from .spec_jobs import JobsSpec
from .spec_leases import LeasesSpec
from .spec_ledger import LedgerSpec
from .spec_rows import SignedRowsSpec
from .spec_snapshots import SnapshotsSpec
from .spec_waits import WaitsSpec
from .spec_worker import WorkerSpec

__all__ = [
    "crashtest",
    "CrashReport",
    "Problem",
    "TrialSummary",
    "ALL_CAPABILITIES",
    "BASE_CAPABILITIES",
    "BackendMaker",
    "Capability",
    "CatalogBackend",
    "CatalogConformance",
    "FakeClock",
    "Spec",
    "AdminSpec",
    "ApprovalsSpec",
    "ChunksSpec",
    "ConcurrencySpec",
    "EventsSpec",
    "JobsSpec",
    "LeasesSpec",
    "LedgerSpec",
    "SignedRowsSpec",
    "SnapshotsSpec",
    "WaitsSpec",
    "WorkerSpec",
]


class CatalogConformance(
    JobsSpec,
    LeasesSpec,
    SnapshotsSpec,
    EventsSpec,
    LedgerSpec,
    ApprovalsSpec,
    WaitsSpec,
    WorkerSpec,
    AdminSpec,
    ChunksSpec,
    SignedRowsSpec,
    ConcurrencySpec,
):
    """Every spec. Subclass it as `Test...` and define the `make_catalog_backend`
    fixture; each spec runs under its own capability (see the module docstring)."""
