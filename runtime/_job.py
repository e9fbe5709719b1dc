"""Jobs: an entry function running in a greenlet, frozen at each snapshot().

snapshot() switches from the agent's greenlet to the hub (the greenlet that started
the job). With the agent paused, the hub captures its stack and the agent's module
globals, pickles them in one pass, writes the snapshot file durably, and switches
back. A snapshot that cannot be taken is thrown into the agent as SnapshotError at
the snapshot() call; the job carries on and earlier snapshots stay valid.

Restoring imports the agent's modules, checks the interpreter, the libraries and
every frame's code against the snapshot's header before a byte is unpickled, then
builds the chain of morph frames and runs it in a fresh agent greenlet.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from dataclasses import dataclass

import cloudpickle
import greenlet

from ..serializers import _pickler, _snapfile
from . import _agent
from ._capture import capture_stack
from ._codeid import CodeRef, find_code
from ._errors import (CorruptSnapshot, IncompatibleSnapshot, RestoreError, SnapshotError,
                      SnapstateError)
from ._faults import fault_point
from ._frames import FrameRecord
from ._layout import nlocalsplus
from ._morph import build_resume_chain

__all__ = ["SnapshotInfo", "snapshot", "Job", "runtime_versions"]


@dataclass(frozen=True)
class SnapshotInfo:
    """What snapshot() returns.

    resumed:    True when execution just continued from this snapshot in a restore
    frozen_for: seconds between taking the snapshot and resuming it (0.0 when live)
    seq:        the snapshot's sequence number (None outside a job)
    label:      the label given to snapshot()
    """

    resumed: bool
    frozen_for: float
    seq: int | None
    label: str | None


@dataclass(frozen=True)
class _FreezeRequest:
    label: str | None
    handled: BaseException | None


@dataclass(frozen=True)
class _Done:
    value: object


_ACTIVE: "Job | None" = None


def snapshot(label: str | None = None) -> SnapshotInfo:
    """Declare a snapshot point: freeze the whole job here, durably, and continue.

    Outside a job (the agent run by plain Python) it does nothing and returns a
    record with seq None. Raises SnapshotError when this point cannot be frozen."""
    job = _ACTIVE
    if job is None:
        return SnapshotInfo(False, 0.0, None, label)
    if greenlet.getcurrent() is not job._agent:
        raise SnapshotError("snapshot() was called from a greenlet or thread the job did not "
                            "start; call it from the agent's own code")
    return job._hub.switch(_FreezeRequest(label, sys.exception()))


def _bootstrap(fn, args, kwargs):
    return _Done(fn(*args, **kwargs))


def runtime_versions() -> dict[str, str]:
    return {
        "python": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
        "python_full": sys.version.split()[0],
        "greenlet": greenlet.__version__,
        "cloudpickle": cloudpickle.__version__,
    }


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_versions(header: dict, where: str) -> None:
    """IncompatibleSnapshot listing every runtime difference, if any."""
    now = runtime_versions()
    then = header.get("versions", {})
    changes = []
    if then.get("python") != now["python"]:
        changes.append(f"Python {then.get('python_full') or then.get('python')} -> "
                       f"{now['python_full']}")
    for lib in ("greenlet", "cloudpickle"):
        if _minor(then.get(lib, "?")) != _minor(now[lib]):
            changes.append(f"{lib} {then.get(lib)} -> {now[lib]}")
    if changes:
        raise IncompatibleSnapshot(
            f"{where} was taken under another runtime: {'; '.join(changes)}. Resume it with "
            f"the interpreter and library versions it was taken with "
            f"(Python {then.get('python_full')}).")


_HEADER_FIELDS = frozenset({"job_id", "seq", "label", "created_at", "versions", "entry", "argv",
                            "frames", "modules"})


def _local_names(code) -> list[str]:
    names = list(code.co_varnames) + [c for c in code.co_cellvars if c not in code.co_varnames]
    names += list(code.co_freevars)
    return names[:nlocalsplus(code)]


class Job:
    """One agent run: the entry point, where its snapshots go, its sequence counter."""

    def __init__(self, entry: _agent.EntryPoint, directory: str, job_id: str | None = None,
                 argv: list[str] | None = None):
        self.entry = entry
        self.job_id = job_id or f"{entry.module.split('.')[-1]}-{secrets.token_hex(4)}"
        self.directory = directory
        self.argv = list(argv or [])
        self.seq = 0
        self.last_snapshot: str | None = None
        self._resumed: dict | None = None
        self._hub = self._agent = None

    # ------------------------------------------------------------------ running
    def run(self):
        """Run the entry function from the start; returns its result."""
        return self._loop(self.prepare(), (), {})

    def prepare(self):
        """Load the entry point; returns the function to run."""
        sys.argv = [self.entry.path or self.entry.module, *self.argv]
        return self.entry.load()

    def _loop(self, fn, args, kwargs):
        global _ACTIVE
        outer = _ACTIVE
        self._hub = greenlet.getcurrent()
        self._agent = greenlet.greenlet(_bootstrap, parent=self._hub)
        _ACTIVE = self
        try:
            message = self._agent.switch(fn, args, kwargs)
            while isinstance(message, _FreezeRequest):
                message = self._take_snapshot(message)
            return message.value
        finally:
            _ACTIVE = outer

    def _take_snapshot(self, request: _FreezeRequest):
        seq = self.seq + 1
        try:
            data = self._freeze(request, seq)
        except SnapshotError as exc:
            return self._agent.throw(exc)
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"{seq:06d}.snap")
        _snapfile.write_atomic(path, data)
        self.seq, self.last_snapshot = seq, path
        fault_point("after-snapshot", seq)
        return self._agent.switch(SnapshotInfo(False, 0.0, seq, request.label))

    # ------------------------------------------------------------------ freezing
    def _freeze(self, request: _FreezeRequest, seq: int) -> bytes:
        top = self._agent.gr_frame
        if top is None or top.f_code is not snapshot.__code__:
            raise SnapshotError("the job is not paused in snapshot()")
        label = f"snapshot {seq}" + (f" ({request.label})" if request.label else "")
        try:
            frames = capture_stack(top, _bootstrap.__code__, request.handled)
        except SnapshotError as exc:
            raise SnapshotError(f"{label} failed: {exc}") from None
        modules = _agent.agent_modules(self.entry)
        state = {"frames": frames, "globals": _agent.capture_globals(modules),
                 "handled": request.handled, "label": request.label}
        try:
            body = _pickler.dumps(state, roots=lambda: self._roots(state))
        except _pickler.UnpicklableError as exc:
            raise SnapshotError(
                f"{label} failed: {exc}. Keep only picklable values in the agent's locals and "
                "globals at a snapshot point: close or drop the object before snapshot(), or "
                "wrap it with snapstate.resource() so it is reopened after a restore.") from None
        header = {
            "job_id": self.job_id, "seq": seq, "label": request.label,
            "created_at": time.time(), "versions": runtime_versions(),
            "entry": self.entry.as_dict(), "argv": self.argv,
            "frames": [{"module": f.code.module, "qualname": f.code.qualname,
                        "firstlineno": f.code.firstlineno, "digest": f.code.digest,
                        "filename": f.code.filename, "lineno": f.lineno} for f in frames],
            "modules": _agent.module_digests(modules),
        }
        return _snapfile.encode(header, _snapfile.compress(body))

    @staticmethod
    def _roots(state) -> list[tuple[str, object]]:
        """Where every part of the state comes from, for naming an unpicklable object."""
        roots: list[tuple[str, object]] = []
        for rec in state["frames"]:
            try:
                names = _local_names(find_code(rec.code))
            except Exception:
                names = []
            for i, value in enumerate(rec.slots):
                name = names[i] if i < len(names) else f"slot {i}"
                roots.append((f"task main, frame {rec.where}, local {name!r}", value))
            for i, value in enumerate(rec.stack):
                roots.append((f"task main, frame {rec.where}, value stack [{i}]", value))
            if rec.instance is not None:
                roots.append((f"task main, frame {rec.where}, object being constructed",
                              rec.instance))
        for module, values in state["globals"].items():
            for name, value in values.items():
                roots.append((f"module {module}, global {name!r}", value))
        roots.append(("the exception being handled", state["handled"]))
        return roots

    # ------------------------------------------------------------------ restoring
    @classmethod
    def from_snapshot(cls, path: str) -> tuple["Job", dict, bytes]:
        """The job a snapshot file belongs to, its header and compressed body. Checks
        the file's integrity; unpickles nothing."""
        header, body = _snapfile.read(path)
        missing = _HEADER_FIELDS - set(header)
        if missing:
            raise CorruptSnapshot(f"{path} has no snapshot header (missing "
                                  f"{', '.join(sorted(missing))})")
        try:
            entry = _agent.EntryPoint.from_dict(header["entry"])
        except (KeyError, TypeError):
            raise CorruptSnapshot(f"{path} has a damaged header (entry point)") from None
        job = cls(entry, os.path.dirname(os.path.abspath(path)), header["job_id"], header["argv"])
        job.seq = header["seq"]
        return job, header, body

    def resume(self, header: dict, body: bytes, where: str):
        """Continue the job right after the snapshot() that wrote `header`/`body`."""
        return self.run_restored(self.restore(header, body, where))

    def run_restored(self, outer):
        return self._loop(outer, (), {})

    def restore(self, header: dict, body: bytes, where: str):
        """Check and unpickle a snapshot; returns the function that continues it."""
        check_versions(header, where)
        sys.argv = [self.entry.path or self.entry.module, *self.argv]
        try:
            self.entry.import_module()
        except SnapstateError:
            raise
        except Exception as exc:
            raise IncompatibleSnapshot(
                f"{where} cannot be resumed: the agent's code no longer imports "
                f"({type(exc).__name__}: {exc}). Restore the original source to resume this "
                "job.") from None
        self._check_code(header, where)
        data = _snapfile.decompress(body, where)
        try:
            state = _pickler.loads(data)
        except SnapstateError:
            raise
        except (ImportError, AttributeError) as exc:
            raise IncompatibleSnapshot(
                f"{where} refers to code that no longer exists ({type(exc).__name__}: {exc}). "
                "Restore the original source to resume this job.") from None
        except Exception as exc:
            raise RestoreError(f"{where} could not be unpickled ({type(exc).__name__}: {exc}); "
                               "resume from an earlier snapshot of the job.") from None
        _agent.restore_globals(state["globals"])
        frames: list[FrameRecord] = state["frames"]
        self._resumed = header
        return build_resume_chain(frames, self._resume_info)

    def _check_code(self, header: dict, where: str) -> None:
        problems = []
        for f in header["frames"]:
            ref = CodeRef(f["module"], f["qualname"], f["firstlineno"], f["digest"], f["filename"])
            try:
                find_code(ref)
            except IncompatibleSnapshot as exc:
                problems.append(getattr(exc, "change", str(exc)))
        if not problems:
            return
        changed = [name for name, digest in header.get("modules", {}).items()
                   if name in sys.modules and _agent.module_digest(sys.modules[name]) != digest]
        files = f" Changed files: {', '.join(changed)}." if changed else ""
        raise IncompatibleSnapshot(
            f"{where} cannot be resumed: the agent's code changed since it was taken: "
            f"{'; '.join(dict.fromkeys(problems))}.{files} Restore the original source to "
            "resume this job, or start a new job.")

    def _resume_info(self) -> SnapshotInfo:
        header = self._resumed
        return SnapshotInfo(True, max(0.0, time.time() - header["created_at"]), header["seq"],
                            header["label"])
