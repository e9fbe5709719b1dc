"""Running the processes of `snaprun crashtest`: the --setup command (the agent's stub
providers), one `snaprun run`/`resume` process, and a whole sequence of them (the
uninterrupted baseline, or a trial killed at one fault point) in a scratch working
directory and a scratch store, until the job ends.

Between the runs of a sequence the job is continued as the truth says:

- killed (SIGKILL at the fault point): `snaprun resume`, without the fault;
- waiting (exit 3): an approval is decided (granted, or rejected with
  approvals="reject"); a timer or a rate limit is fast-forwarded: the next runs get
  SNAPSTATE_CLOCK_OFFSET (runtime/_clock.py) so that snapstate's clock is past the
  wait's due time. Every run has SNAPSTATE_HIBERNATE_AFTER=0, so every wait hibernates
  and nothing sleeps in real time;
- parked (exit 4): each ambiguous effect is reconciled with what happened, which the
  fault trace (SNAPSTATE_FAULT_TRACE) of the killed run says: its request went out
  (the kill was after `effect-after-send`) -> committed, with the result the baseline
  recorded for the same call; it did not (killed at `effect-after-prepare` or
  `effect-before-send`) -> not committed.

All runs of one crashtest share one random SNAPSTATE_KEY, so a result sealed in the
baseline's store verifies in a trial's store and is copied there as it is, never
unpickled here."""

from __future__ import annotations

import hashlib
import os
import queue
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import SnapstateError
from ..serializers._home import Home, open_store
from ..serializers._store import EffectKind, EffectRow, EffectState
from . import _approvals
from ._clock import OFFSET_VARIABLE
from ._crashtest_report import Problem, RunRecord, Sequence, TracePoint, printable, short
from ._effect_spec import TASK_ORDINAL_BASE
from ._faults import TRACE_VARIABLE, VALUES_VARIABLE

__all__ = [
    "JOB",
    "Settings",
    "Setup",
    "run_sequence",
    "point_of",
    "write_values",
    "links_out",
    "CONTROLLED",
]

JOB = "crashtest"
MAX_ROUNDS = 40  # runs of one sequence before it counts as stuck
SKIPPED_DIRS = frozenset(
    {
        ".snapstate",
        "__pycache__",
        ".git",
        ".hg",
        ".venv",
        "venv",
        "node_modules",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
# The variables crashtest sets itself for every run (the user's values are not used).
CONTROLLED = (
    "SNAPSTATE_STORE",
    "SNAPSTATE_HOME",
    "SNAPSTATE_FAULT",
    TRACE_VARIABLE,
    VALUES_VARIABLE,
    "SNAPSTATE_KEY",
    "SNAPSTATE_KEY_FILE",
    OFFSET_VARIABLE,
    "SNAPSTATE_HIBERNATE_AFTER",
)
_KEEP_BYTES = 1 << 20  # files larger than this are compared by their digest
_NAME_VALUE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)")
_TASK_LABEL = re.compile(r"\(task (\S+#\d+)\)$")


@dataclass(frozen=True)
class Settings:
    """What every sequence of one crashtest shares."""

    python: str
    agent: Path  # relative to the working directory copy
    args: tuple[str, ...]
    pristine: Path  # the copy of the agent's folder every sequence starts from
    scratch: Path
    env: Mapping[str, str]  # the agent's environment, CONTROLLED ones set
    setup: str | None
    setup_cwd: str
    timeout: float
    approvals: str  # "approve" or "reject"
    say: Callable[[str], None]
    values: Path | None = None  # the baseline's recorded values (SNAPSTATE_FAULT_VALUES)
    run_options: tuple[str, ...] = ()  # `snaprun run`'s own (--record-http, --http-read)
    stop: threading.Event = field(default_factory=threading.Event)  # Ctrl-C: no new run
    live: set[subprocess.Popen[bytes]] = field(default_factory=set)  # killed on stop

    def kill_live(self) -> None:
        """Stop now (Ctrl-C): SIGKILL every run's process group."""
        self.stop.set()
        for proc in list(self.live):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ------------------------------------------------------------------------ --setup
class Setup:
    """The --setup command of one sequence: started in a session of its own, its
    stdout read until a line `ready` (the NAME=VALUE lines before it are the agent's
    environment; other lines are ignored), stopped with SIGTERM to its process group
    (SIGKILL 5 s later)."""

    def __init__(self, command: str, cwd: str, log: Path, timeout: float) -> None:
        self.command, self.env = command, dict[str, str]()
        self._log = open(log, "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            command,
            shell=True,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        lines: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._read, args=(lines,), daemon=True).start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise self._failed(f"did not print `ready` within {timeout:g}s") from None
                if line is None:
                    code = self.proc.wait()
                    raise self._failed(f"exited with {code} before it printed `ready`")
                text = line.decode(errors="replace").strip()
                if text == "ready":
                    return
                match = _NAME_VALUE.fullmatch(text)
                if match:
                    self.env[match[1]] = match[2]
        except BaseException:
            self.stop()
            raise

    def _read(self, lines: queue.Queue[bytes | None]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # read to the end: the command never blocks on us
            lines.put(line)
        lines.put(None)

    def _failed(self, what: str) -> SnapstateError:
        self._log.flush()
        tail = printable(Path(self._log.name).read_bytes()[-600:].decode(errors="replace").strip())
        said = f"; its stderr ends with: {tail}" if tail else ""
        return SnapstateError(
            f"the --setup command {self.command!r} {what}{said}. It must print NAME=VALUE "
            "lines and then a line `ready` on its stdout, and keep running until SIGTERM"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                self.proc.wait()
        self._log.close()


# ------------------------------------------------------------------------ one process
def _run_once(
    settings: Settings,
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    fault: str | None,
    trace: Path,
    out: Path,
) -> RunRecord:
    argv = [settings.python, "-m", "snapstate.runtime._cli", *command]
    env = dict(env, **{TRACE_VARIABLE: str(trace)})
    if fault:
        env["SNAPSTATE_FAULT"] = fault
    start = time.monotonic()
    timed_out = False
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches crashtest, which stops the runs
        )
        settings.live.add(proc)
        try:
            _, err = proc.communicate(timeout=settings.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        finally:
            settings.live.discard(proc)
    points = []
    if trace.exists():
        for line in trace.read_text().splitlines():
            name, seq, offset = line.split(" ")
            points.append(TracePoint(name, seq, int(offset)))
    return RunRecord(
        command=command[0],
        exit_code=proc.returncode,
        stdout=out.read_bytes(),
        stderr=err.decode(errors="replace"),
        trace=points,
        seconds=time.monotonic() - start,
        timed_out=timed_out,
        fault=fault,
    )


# ------------------------------------------------------------------------ the ledger
def point_of(row: EffectRow) -> str:
    """How fault points name an effect: its ordinal, or "<task>#<n>" in a task."""
    if row.ordinal >= TASK_ORDINAL_BASE:
        match = _TASK_LABEL.search(row.call_site)
        if match:
            return match[1]
    return str(row.ordinal)


_ENV_LOCK = threading.Lock()


def _open(store: Path, key: str, *, writable: bool = True) -> Home:
    """A scratch store opened here with the crashtest's SNAPSTATE_KEY, which signed its
    rows. The key store reads the variable when the store is opened (and only then),
    so it is set in this process for that moment alone, under a lock, and put back."""
    with _ENV_LOCK:
        before = os.environ.get("SNAPSTATE_KEY")
        os.environ["SNAPSTATE_KEY"] = key
        try:
            return open_store(str(store), writable=writable)
        finally:
            if before is None:
                del os.environ["SNAPSTATE_KEY"]
            else:
                os.environ["SNAPSTATE_KEY"] = before


def _ledger(store: Path, key: str) -> list[EffectRow]:
    home = _open(store, key, writable=False)
    try:
        return home.catalog.effects(JOB)
    finally:
        home.close()


def _shown(row: EffectRow, work: Path) -> str:
    """An effect as a problem line names it: its call site relative to the copy."""
    site = row.call_site.replace(str(work) + os.sep, "")
    return f"{row.name}({row.args_repr}) at {site}"


def _identity(row: EffectRow, setup: Mapping[str, str]) -> tuple[str, str]:
    """What tells one effect from another across runs: its name and arguments. A value
    the --setup command gave (a provider's URL, whose port changes with every run) is
    read as its variable's name: the same request to each run's own provider is the
    same effect (record_http's requests always name their URL)."""
    shown = row.args_repr
    for name, value in sorted(setup.items(), key=lambda item: -len(item[1])):
        if len(value) >= 4:
            shown = shown.replace(value, f"${name}")
    return (row.name, row.args_digest if shown == row.args_repr else "repr:" + shown)


def _count_sends(
    seq: Sequence, rows: list[EffectRow], work: Path, setup: Mapping[str, str]
) -> None:
    """Requests sent per effect (name, arguments): `effect-before-send` reached, less a
    kill right there (nothing went out)."""
    by_point = {point_of(r): r for r in rows if r.kind != EffectKind.VALUE}
    for run in seq.runs:
        for i, t in enumerate(run.trace):
            row = by_point.get(t.seq)
            if t.name != "effect-before-send" or row is None:
                continue
            killed_here = (
                i == len(run.trace) - 1
                and run.exit_code == -signal.SIGKILL
                and (run.fault == t.point)
            )
            ident = _identity(row, setup)
            seq.shown[ident] = _shown(row, work)
            if row.kind == EffectKind.READ:
                seq.reads.add(ident)
            if "same idempotency key" in row.note:
                seq.keyed.add(ident)
            if not killed_here:
                seq.sends[ident] = seq.sends.get(ident, 0) + 1


def _went_out(seq: Sequence, point: str) -> bool | None:
    """Whether the last attempt of effect `point` reached its provider: True after
    `effect-after-send`, False when the run was killed before the request, None when
    the trace cannot say."""
    for run in reversed(seq.runs):
        for i in range(len(run.trace) - 1, -1, -1):
            t = run.trace[i]
            if t.seq != point or not t.name.startswith("effect-"):
                continue
            if t.name in ("effect-after-send", "effect-after-confirm"):
                return True
            last = i == len(run.trace) - 1 and run.exit_code == -signal.SIGKILL
            if t.name in ("effect-after-prepare", "effect-before-send") and last:
                return False
            return None
    return None


def _reconcile(
    seq: Sequence,
    dirs: SequenceDirs,
    key: str,
    baseline: list[EffectRow] | None,
    allow_parks: bool,
) -> bool:
    """Reconcile every ambiguous effect with the truth; False when one cannot be."""
    home, work = _open(dirs.store, key), dirs.work
    try:
        for row in home.catalog.effects(JOB):
            if row.state != EffectState.AMBIGUOUS:
                continue
            point = point_of(row)
            sent = _went_out(seq, point)
            shown = _shown(row, work)
            if sent is None:
                seq.problems.append(
                    Problem(
                        "parked",
                        seq.name,
                        f"{shown} parked the job and the trace does not say whether its "
                        "request went out: crashtest cannot reconcile it; the trial stops",
                    )
                )
                return False
            result: bytes | None = None
            if sent:
                match = [
                    r
                    for r in baseline or []
                    if point_of(r) == point
                    and r.args_digest == row.args_digest
                    and r.state == EffectState.CONFIRMED
                ]
                result = match[0].result if match else None
                if result is None:
                    seq.notes.append(f"{shown} reconciled committed without its result (None)")
            truth = "committed" if sent else "not committed"
            if not allow_parks:
                seq.problems.append(
                    Problem(
                        "parked",
                        seq.name,
                        f"{shown} parked the job: its outcome was unknown after the kill "
                        "(no idempotency key, no lookup), so in production someone must run "
                        f"`snaprun reconcile`; crashtest reconciled it as {truth} (the "
                        "truth) and resumed. Give it idempotency='key' or lookup= if the "
                        "provider allows (--allow-parks accepts parks)",
                    )
                )
            home.catalog.reconcile_effect(
                JOB,
                row.ordinal,
                state=EffectState.CONFIRMED if sent else EffectState.NOT_COMMITTED,
                result=result,
                note=f"reconciled: {truth} by crashtest",
            )
            seq.notes.append(f"{shown} parked; reconciled as {truth}")
    finally:
        home.close()
    return True


def _continue_wait(seq: Sequence, store: Path, key: str, approvals: str, offset: float) -> float:
    """Decide a waiting job's approval; the clock offset past its due time."""
    home = _open(store, key)
    try:
        wait = home.catalog.get_wait(JOB)
        if wait is None:
            return offset
        if wait.approval_id is not None:
            try:
                row = home.catalog.get_approval(JOB, wait.approval_id)
                # Decided as one of its approvers when it names them (anyone else is refused).
                by = row.approvers[0] if row is not None and row.approvers else "crashtest"
                _approvals.decide(
                    home, JOB, wait.approval_id, granted=approvals == "approve", by=by
                )
                seq.notes.append(f"approval {wait.approval_id}: {approvals}d")
            except SnapstateError as exc:  # decided already, or expired: the job goes on
                seq.notes.append(f"approval {wait.approval_id}: {exc}")
        if wait.due is not None and wait.approval_id is None:
            # An approval wait's due time is its expiry: past it, the decision just made
            # would expire. Only timers and rate limits are fast-forwarded.
            offset = max(offset, wait.due - time.time() + 1.0)
            seq.notes.append(f"{wait.kind} wait fast-forwarded ({offset:.0f}s clock offset)")
    finally:
        home.close()
    return offset


# ------------------------------------------------------------------------ a sequence
@dataclass
class SequenceDirs:
    root: Path
    work: Path = field(init=False)
    store: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work, self.store = self.root / "work", self.root / "store"


def _files(work: Path, dirs: SequenceDirs) -> dict[str, bytes]:
    found = {}
    for folder, subdirs, names in os.walk(work):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        databases = {n for n in names if _is_sqlite(Path(folder) / n)}
        for name in names:
            path = Path(folder) / name
            if any(name == db + suffix for db in databases for suffix in _SQLITE_SIDECARS):
                continue  # its database's content is compared, with it applied
            try:
                if name in databases:
                    data = _normalize(_sqlite_content(path), dirs)
                else:
                    data = _normalize(path.read_bytes(), dirs)
            except OSError as exc:  # a dangling link, a FIFO...
                data = f"<unreadable: {exc.strerror}>".encode()
            if len(data) > _KEEP_BYTES:  # compared by digest, not kept
                data = b"<sha256 " + hashlib.sha256(data).hexdigest().encode() + b">"
            found[str(path.relative_to(work))] = data
    return found


def _normalize(data: bytes, dirs: SequenceDirs) -> bytes:
    for path, token in ((dirs.work, b"$WORKDIR"), (dirs.store, b"$STORE")):
        data = data.replace(os.fsencode(path), token)
    # An object's default repr names its memory address, which no two processes share.
    return _ADDRESS.sub(rb" at 0x$ADDRESS>", data)


_ADDRESS = re.compile(rb" at 0x[0-9a-fA-F]{6,16}>")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_SIDECARS = ("-journal", "-wal", "-shm")


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _sqlite_content(path: Path) -> bytes:
    """A SQLite database the agent left, as its content (one SQL statement a line):
    its bytes differ with every transaction (the header's change counter, free pages)
    even when the rows are the same. Read from a copy with its journal or WAL, so a
    transaction a kill left unfinished is rolled back or applied as SQLite would."""
    with tempfile.TemporaryDirectory(prefix="snapstate-crashtest-db-") as tmp:
        copy = Path(tmp) / "db"
        shutil.copyfile(path, copy)
        for suffix in _SQLITE_SIDECARS:
            if path.with_name(path.name + suffix).exists():
                shutil.copyfile(path.with_name(path.name + suffix), Path(tmp) / f"db{suffix}")
        try:
            con = sqlite3.connect(copy)
            try:
                lines = "\n".join(con.iterdump())
            finally:
                con.close()
        except sqlite3.Error as exc:  # damaged: compared by its bytes
            return path.read_bytes() + f"\n<sqlite: {exc}>".encode()
    return b"<SQLite database, its content:>\n" + lines.encode() + b"\n"


def run_sequence(
    settings: Settings,
    name: str,
    fault: str | None,
    *,
    baseline_rows: list[EffectRow] | None = None,
    allow_parks: bool = False,
) -> tuple[Sequence, list[EffectRow]]:
    """The baseline (fault None) or a trial: run, then resume until the job ends.
    Returns the sequence and its final ledger."""
    seq = Sequence(name)
    key = settings.env["SNAPSTATE_KEY"]
    dirs = SequenceDirs(settings.scratch / _dirname(name))
    shutil.copytree(settings.pristine, dirs.work, symlinks=True)
    started = time.monotonic()
    setup = (
        Setup(settings.setup, settings.setup_cwd, dirs.root / "setup.log", settings.timeout)
        if settings.setup
        else None
    )
    try:
        # The setup's variables win over the inherited ones, never over crashtest's own.
        given = {k: v for k, v in (setup.env if setup else {}).items() if k not in CONTROLLED}
        env = {**settings.env, **given}
        for variable in CONTROLLED + ("PYTHONUNBUFFERED",):
            if variable in settings.env:
                env[variable] = settings.env[variable]
        if settings.values is not None:
            env[VALUES_VARIABLE] = str(settings.values)
        offset = 0.0
        command = [
            "run",
            "--store",
            str(dirs.store),
            "--job",
            JOB,
            *settings.run_options,
            str(settings.agent),
            *settings.args,
        ]
        pending_fault = fault
        for round_ in range(MAX_ROUNDS):
            if settings.stop.is_set():
                raise KeyboardInterrupt
            if offset:
                env[OFFSET_VARIABLE] = f"{offset:.3f}"
            run = _run_once(
                settings,
                command,
                dirs.work,
                env,
                pending_fault,
                dirs.root / f"trace-{round_}",
                dirs.root / f"stdout-{round_}",
            )
            run.stdout = _normalize(run.stdout, dirs)
            run.stderr = _normalize(run.stderr.encode(), dirs).decode()
            seq.runs.append(run)
            command = ["resume", "--store", str(dirs.store), JOB]
            code = run.exit_code
            if run.timed_out:
                seq.problems.append(
                    Problem(
                        "stuck",
                        name,
                        f"a run took over {settings.timeout:g}s (--timeout); it was killed",
                    )
                )
                break
            if (
                pending_fault
                and code == -signal.SIGKILL
                and run.trace
                and (run.trace[-1].point == pending_fault)
            ):
                pending_fault = None  # killed where asked: the resumes run without it
                continue
            if code < 0:
                seq.problems.append(
                    Problem(
                        "stuck",
                        name,
                        f"a {run.command} died of signal {-code} ({short(run.stderr[-300:])})",
                    )
                )
                break
            if code == 3:
                offset = _continue_wait(seq, dirs.store, key, settings.approvals, offset)
                continue
            if code == 4:
                if not _reconcile(seq, dirs, key, baseline_rows, allow_parks):
                    break
                continue
            if code in (2, 5):
                what = "was refused" if code == 2 else "met a conflict"
                seq.problems.append(
                    Problem(
                        "refusal",
                        name,
                        f"`snaprun {run.command}` {what} (exit {code}): {short(run.error_line(), 300)}",
                    )
                )
            break
        else:
            last = f"; the last step: {seq.notes[-1]}" if seq.notes else ""
            seq.problems.append(
                Problem("stuck", name, f"the job did not end in {MAX_ROUNDS} runs{last}")
            )
        if pending_fault and fault is not None:
            seq.problems.append(
                Problem(
                    "unreached",
                    name,
                    "the trial's runs never reached this fault point, "
                    "which the uninterrupted run reached: the agent does not take the same "
                    "path twice (see the nondeterministic problems, if any)",
                )
            )
        seq.files = _files(dirs.work, dirs)
        rows = _ledger(dirs.store, key) if (dirs.store / "catalog.db").exists() else []
        _count_sends(seq, rows, dirs.work, given)
    finally:
        if setup is not None:
            setup.stop()
        seq.seconds = time.monotonic() - started
    return seq, rows


def write_values(rows: list[EffectRow], path: Path, approvals: frozenset[str] = frozenset()) -> int:
    """The values of snapstate.now(), random() and uuid4() the baseline recorded, as
    SNAPSTATE_FAULT_VALUES reads them (runtime/_faults.py): every later run gets the
    same values at the same positions, so the second uninterrupted run and every trial
    differ from the first only where the ledger cannot explain it. Returns how many.

    Left out: the time of each approval request (`approvals`: the baseline's approval
    ids, named after that value's ordinal). Its expiry counts from it, and crashtest
    decides the approval when the trial runs, minutes later: an approval that expires
    within minutes would have expired."""
    lines = [
        f"{point_of(r)} {r.name} {r.result.hex()}\n"
        for r in rows
        if r.kind == EffectKind.VALUE and r.result is not None and f"a{r.ordinal}" not in approvals
    ]
    path.write_text("".join(lines))
    return len(lines)


def approval_ids(store: Path, key: str) -> frozenset[str]:
    """The ids of the approvals the job of a scratch store requested."""
    home = _open(store, key, writable=False)
    try:
        return frozenset(a.approval_id for a in home.catalog.approvals(JOB))
    finally:
        home.close()


def store_of(settings: Settings, name: str) -> Path:
    """The scratch store of sequence `name`."""
    return SequenceDirs(settings.scratch / _dirname(name)).store


def _dirname(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def copy_sources(source: Path, target: Path, limit_files: int = 20000) -> None:
    """The agent's folder, copied once (every sequence starts from this copy)."""
    count = 0

    def ignore(folder: str, names: list[str]) -> set[str]:
        nonlocal count
        count += len(names)
        if count > limit_files:
            raise SnapstateError(
                f"{source} holds more than {limit_files} files: crashtest copies the agent's "
                "folder for every run; give a smaller one with --workdir"
            )
        return {n for n in names if n in SKIPPED_DIRS}

    shutil.copytree(source, target, symlinks=True, ignore=ignore)


def links_out(copy: Path) -> list[str]:
    """The symbolic links of the copied folder that lead out of it: the runs read and
    write through them, in the user's own files."""
    found = []
    for folder, subdirs, names in os.walk(copy):
        for name in subdirs + names:
            path = Path(folder) / name
            if path.is_symlink() and not path.resolve().is_relative_to(copy.resolve()):
                found.append(str(path.relative_to(copy)))
    return sorted(found)
