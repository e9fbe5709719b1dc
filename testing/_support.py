"""What every spec module shares: the capabilities, how a backend is declared and
opened, the injectable clock, the fixtures and the row helpers."""

from __future__ import annotations

import enum
import importlib
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

from snapstate.serializers._catalog import Catalog
from snapstate.serializers._fs import pid_alive, process_start
from snapstate.serializers._keys import KeyRing
from snapstate.serializers._manifest import MANIFEST_FORMAT
from snapstate.serializers._sealing import Sealer
from snapstate.serializers._snapfile import MAGIC
from snapstate.serializers._store import (
    CHUNKED,
    EffectKind,
    EffectRow,
    EffectState,
    EventRow,
    JobRow,
    LeaseRow,
    Owner,
    SnapshotBody,
    SnapshotRow,
    StoredChunk,
)

__all__ = [
    "Capability",
    "BASE_CAPABILITIES",
    "ALL_CAPABILITIES",
    "CatalogBackend",
    "BackendMaker",
    "FakeClock",
    "Spec",
    "requires",
    "keyed",
]


class Capability(enum.StrEnum):
    """A part of the catalog contract (serializers/_catalog.py), one spec module each."""

    JOBS = "jobs"  # JobCatalog
    LEASES = "leases"  # LeaseCatalog
    SNAPSHOTS = "snapshots"  # SnapshotCatalog
    EVENTS = "events"  # EventCatalog: the timeline and metrics
    LEDGER = "ledger"  # LedgerCatalog: effect rows
    APPROVALS = "approvals"  # ApprovalCatalog
    WAITS = "waits"  # WaitCatalog
    WORKER = "worker"  # WorkerCatalog: runnable jobs, claims, giving up
    ADMIN = "admin"  # AdminCatalog: fork, import, prune, rebuild
    CHUNKS = "chunks"  # ChunkCatalog: chunked snapshot bodies (manifests and chunks)


# What every spec relies on to set up and to check that nothing changed: a backend
# declares at least these. The others are declared as a backend implements them; the
# specs of an undeclared capability are skipped, saying which.
BASE_CAPABILITIES = frozenset(
    {Capability.JOBS, Capability.LEASES, Capability.SNAPSHOTS, Capability.EVENTS}
)
ALL_CAPABILITIES = frozenset(Capability)


@dataclass
class CatalogBackend:
    """How to open one catalog backend. `factory` is "module:Class", importable in
    another process (the concurrency specs race real processes); `Class(location)`
    and `Class(location, clock=callable)` open the catalog at `location` (a directory,
    a DSN), creating it empty on first use. `capabilities`: what the backend
    implements (at least BASE_CAPABILITIES). `cleanup` runs once the test is done
    (drop a database)."""

    factory: str
    location: str
    capabilities: frozenset[Capability] = ALL_CAPABILITIES
    cleanup: Callable[[], None] | None = None
    opened: list[Catalog] = field(default_factory=list)

    def __post_init__(self) -> None:
        missing = BASE_CAPABILITIES - self.capabilities
        if missing:
            raise ValueError(
                f"catalog backend {self.factory}: every backend implements "
                f"{', '.join(sorted(BASE_CAPABILITIES))}; it declares no "
                f"{', '.join(sorted(missing))}"
            )
        module, _, name = self.factory.partition(":")
        if not module or not name:
            raise ValueError(f"catalog backend factory {self.factory!r}: give it as 'module:Class'")

    def open(self, clock: Callable[[], float] | None = None) -> Catalog:
        """A new connection to the catalog (closed by close_all)."""
        module, _, name = self.factory.partition(":")
        cls = getattr(importlib.import_module(module), name)
        catalog: Catalog = cls(self.location) if clock is None else cls(self.location, clock=clock)
        self.opened.append(catalog)
        return catalog

    def close_all(self) -> None:
        """Close every catalog opened, then clean up."""
        for catalog in self.opened:
            catalog.close()
        self.opened.clear()
        if self.cleanup is not None:
            self.cleanup()


# A backend's declaration: given a fresh scratch folder, the backend of a fresh, empty
# catalog (a new database for a server backend).
BackendMaker = Callable[[Path], CatalogBackend]

_F = TypeVar("_F", bound=Callable[..., Any])


def requires(*capabilities: Capability) -> Callable[[_F], _F]:
    """Mark a spec that also exercises other capabilities than its class's."""

    def mark(fn: _F) -> _F:
        fn.__dict__["snapstate_requires"] = frozenset(capabilities)
        return fn

    return mark


class FakeClock:
    """An injectable catalog clock: time moves only when a test moves it."""

    def __init__(self, now: float = 1_000_000.0):
        self.now: float = now

    def __call__(self) -> float:
        """The current time."""
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the time by `seconds` (backwards if negative) and return it."""
        self.now += seconds
        return self.now


HOST = socket.gethostname()
ENTRY: dict[str, Any] = {
    "module": "agent",
    "function": "main",
    "path": "/agents/agent.py",
    "search_path": None,
}
T0 = 1_000_000.0


class Spec:
    """The base of every spec class: its capability and the fixtures it uses. The
    backend comes from the fixture `make_catalog_backend` (a BackendMaker), which the
    test class that runs the specs (or its conftest.py) defines."""

    capability: ClassVar[Capability]

    @pytest.fixture
    def catalog_backend(
        self, make_catalog_backend: BackendMaker, tmp_path: Path
    ) -> Iterator[CatalogBackend]:
        """The backend of a fresh, empty catalog for this test (closed after it)."""
        backend = make_catalog_backend(tmp_path / "catalog")
        try:
            yield backend
        finally:
            backend.close_all()

    @pytest.fixture(autouse=True)
    def _declared(self, request: pytest.FixtureRequest, catalog_backend: CatalogBackend) -> None:
        """Skip a spec whose capabilities the backend does not declare: its class's
        (the spec class that defines the test, not the class that runs them all) and
        those it `requires`."""
        name = request.function.__name__
        owner = next(c for c in type(self).__mro__ if name in vars(c))
        needed = {getattr(owner, "capability", self.capability)}
        needed |= set(getattr(request.function, "snapstate_requires", ()))
        missing = needed - catalog_backend.capabilities
        if missing:
            pytest.skip(
                f"{catalog_backend.factory} does not declare "
                f"{', '.join(sorted(missing))} (CatalogBackend.capabilities)"
            )

    @pytest.fixture
    def clock(self) -> FakeClock:
        """The injectable clock the `catalog` fixture is opened with, at T0."""
        return FakeClock(T0)

    @pytest.fixture
    def catalog(self, catalog_backend: CatalogBackend, clock: FakeClock) -> Catalog:
        """A fresh, empty catalog of the backend, on the injectable clock."""
        return catalog_backend.open(clock=clock)

    @pytest.fixture(scope="class")
    @classmethod
    def live_pid(cls) -> Iterator[int]:
        """A live process on this host (a lease owner that is still running)."""
        proc = subprocess.Popen(["sleep", "600"])
        try:
            yield proc.pid
        finally:
            proc.kill()
            proc.wait()

    @pytest.fixture(scope="class")
    @classmethod
    def dead_pid(cls) -> int:
        """The pid of a process of this host that finished (and was reaped)."""
        proc = subprocess.Popen(["true"])
        proc.wait()
        assert not pid_alive(proc.pid)
        return proc.pid


def keyed(catalog: Catalog, directory: Path, *, encrypt: bool = False) -> Sealer:
    """Give the catalog a store key (a new key ring in `directory`), as a store does
    (serializers/_home.py): the rows it writes from then on are signed, and the rows it
    reads are checked. Returns the sealer (set it back to read as that store again)."""
    sealer = Sealer(KeyRing(str(directory)), encrypt)
    catalog.sealer = sealer  # type: ignore[attr-defined]  # every catalog backend has one
    return sealer


def live_owner(pid: int) -> Owner:
    return Owner(HOST, pid, process_start(pid))


def make_job(catalog: Catalog, job_id: str = "job", **kw: Any) -> JobRow:
    return catalog.create_job(job_id, ENTRY, ["--x", "1"], **kw)


def row(
    seq: int, epoch: int, job_id: str = "job", label: str | None = None, created: float = T0
) -> SnapshotRow:
    return SnapshotRow(
        job_id, seq, label, f"snapshots/{job_id}/{seq:06d}-e{epoch}.snap", 100 + seq, created, epoch
    )


def chunked_row(
    seq: int, epoch: int, job_id: str = "job", label: str | None = None, created: float = T0
) -> SnapshotRow:
    """A chunked snapshot's row (its body is in the catalog: file CHUNKED)."""
    return SnapshotRow(job_id, seq, label, CHUNKED, 100 + seq, created, epoch, f"{seq:064x}")


def manifest_of(ids: list[bytes]) -> bytes:
    """Manifest bytes listing `ids` in order, in the layout a catalog reads to mark
    chunks (serializers/_manifest.py); its signature is not checked by a catalog."""
    header = b'{"spec":true}'
    return (
        MAGIC
        + struct.pack("<HI", MANIFEST_FORMAT, len(header))
        + header
        + struct.pack("<I", len(ids))
        + b"".join(struct.pack("<16sI", i, 1000) for i in ids)
        + bytes(32)
    )


def chunk_id(n: int) -> bytes:
    return n.to_bytes(16, "big")


def body(ids: list[bytes], new: list[StoredChunk] | None = None) -> SnapshotBody:
    return SnapshotBody(manifest_of(ids), frozenset(ids), tuple(new or ()))


def effect(ordinal: int, job_id: str = "job", state: str = "dispatched", **kw: Any) -> EffectRow:
    values: dict[str, Any] = {
        "result": b"\x00signed",
        "attempts": 1,
        "created": T0,
        "updated": T0,
        **kw,
    }
    return EffectRow(
        job_id,
        ordinal,
        f"key-{ordinal}",
        "agent.charge",
        "agent.py:12",
        f"digest-{ordinal}",
        "(amount=5)",
        EffectKind.WRITE,
        EffectState(state),
        **values,
    )


def lease(catalog: Catalog, job_id: str = "job") -> LeaseRow:
    """The job's lease, which the test expects to exist."""
    found = catalog.get_lease(job_id)
    assert found is not None, f"job {job_id} has no lease"
    return found


State = tuple[JobRow, list[SnapshotRow], list[EventRow], LeaseRow | None]


def state(catalog: Catalog, job_id: str = "job") -> State:
    """Everything the base capabilities hold about a job (to prove nothing changed)."""
    return (
        catalog.get_job(job_id),
        catalog.snapshots(job_id),
        catalog.events(job_id),
        catalog.get_lease(job_id),
    )
