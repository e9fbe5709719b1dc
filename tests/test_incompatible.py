"""Incompatible snapshots: a snapshot taken under another Python minor version or
another greenlet/cloudpickle major.minor version, or whose agent code has changed
(a body edited, a function moved or removed, a file gone), is refused by
`snaprun resume` with exit 2 and a message naming every difference, before anything
is unpickled; the snapshot and the job's other snapshots are left intact, so it
resumes once the original environment or source is back.

Snapshots "taken under" another version are legitimately signed ones: the header is
rewritten and the snapshot's manifest (or an exported file) re-signed with the store's
own key (the manifest and format v2 sign the header), as if snaprun had written it
under that version."""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cloudpickle
import greenlet
import pytest
from chunked import chunk_rows, export_file, manifest, set_manifest, snapshot_seqs
from helpers import AGENTS, Run, snaprun

from snapstate.serializers import _keys, _manifest, _snapfile
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._store import CHUNKED

NO_ENV_KEY = {"SNAPSTATE_KEY": ""}  # the store's own keys.json signs and verifies
NO_PYC = dict(NO_ENV_KEY, PYTHONDONTWRITEBYTECODE="1")  # edits never hidden by a stale .pyc
_ADDED = ("key_id", "chunk_size", "codecs", "nonce_prefix")  # set by _snapfile.write
_MANIFEST_ADDED = ("key_id", "codecs", "size", "chunker")  # set by _manifest.build

# What the compat agent prints after a resume from its snapshot 2, and returns.
CONTINUATION = (
    "step 1 seq 2 resumed True label step-1 frozen float True\n"
    "step 2 seq 3 resumed False label step-2 frozen float True\n"
    "results [0, 10, 20]\n"
)
RESULT = "30"


@pytest.fixture(autouse=True)
def _no_inherited_env_key(monkeypatch):
    """In-process key rings must use their store's keys.json, not an inherited key."""
    monkeypatch.delenv("SNAPSTATE_KEY", raising=False)


def _refused(run: Run, *needles: str) -> None:
    """exit 2, a single `snaprun: error:` line on stderr containing every needle, no
    traceback, and nothing from the agent on stdout."""
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stdout == "", run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert len(errors) == 1, run.stderr
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"


@dataclass
class Snap:
    """Snapshot `seq` of job `job` in `store` (a chunked snapshot: a manifest in the
    catalog over the store's chunks)."""

    store: Path
    job: str
    seq: int

    @property
    def where(self) -> str:
        """How snaprun's messages name it."""
        return f"snapshot {self.seq} of job {self.job}"

    def resume(self, cwd: Path, **kwargs) -> Run:
        """`snaprun resume --at SEQ JOB`: the job, continued from this snapshot."""
        return snaprun(
            "resume", "--store", self.store, "--at", self.seq, self.job, cwd=cwd, **kwargs
        )


def _state(snap: Snap) -> tuple:
    """Everything that holds the job's snapshots: its catalog rows, every manifest, every
    chunk row and every pack file's bytes."""
    catalog = SqliteCatalog(str(snap.store))
    try:
        rows = catalog.snapshots(snap.job)
    finally:
        catalog.close()
    packs = snap.store / "chunks"
    return (
        rows,
        [manifest(snap.store, snap.job, r.seq) for r in rows],
        sorted(
            (c.chunk_id, c.size, c.data, c.pack, c.offset, c.length, c.base)
            for c in chunk_rows(snap.store)
        ),
        sorted((p.name, p.read_bytes()) for p in packs.iterdir()) if packs.is_dir() else [],
    )


# ------------------------------------------------------------------ runtime versions
@pytest.fixture(scope="module")
def loops_store(tmp_path_factory) -> Path:
    """A store with tests/agents/loops.py run by snaprun (6 snapshots) and killed right
    after its last one: resumable (a done job never resumes)."""
    root = tmp_path_factory.mktemp("loops")
    run = snaprun(
        "run",
        "--store",
        root / "store",
        "--job",
        "job",
        AGENTS / "loops.py",
        cwd=root,
        env=NO_ENV_KEY,
        fault="after-snapshot:6",
    )
    assert run.returncode == -9, run.stderr
    assert snapshot_seqs(root / "store", "job") == [1, 2, 3, 4, 5, 6]
    return root / "store"


@pytest.fixture
def loops_snapshot(loops_store, tmp_path) -> Snap:
    """Snapshot 2 of loops.py, in a private copy of the store."""
    shutil.copytree(loops_store, tmp_path / "store")
    return Snap(tmp_path / "store", "job", 2)


def _resign(snap: Snap, edit) -> None:
    """Rewrite the snapshot's header with `edit(header)` and sign its manifest again
    with its store's key (over the same chunks): a snapshot legitimately written with
    that header."""
    keys = _keys.KeyRing(str(snap.store))
    found = _manifest.parse(
        manifest(snap.store, snap.job, snap.seq), keys, require_encryption=False, where="test"
    )
    header = {k: v for k, v in found.header.items() if k not in _MANIFEST_ADDED}
    edit(header)
    data, digest = _manifest.build(header, found.refs, found.key, found.sealed)
    set_manifest(snap.store, snap.job, snap.seq, data)
    # ...and committed as such: the catalog binds each row to its manifest's digest
    db = sqlite3.connect(snap.store / "catalog.db")
    db.execute(
        "UPDATE snapshots SET digest = ? WHERE job_id = ? AND seq = ? AND file = ?",
        (digest, snap.job, snap.seq, CHUNKED),
    )
    assert db.total_changes == 1
    db.commit()
    db.close()


def _versions(snap: Snap) -> dict:
    keys = _keys.KeyRing(str(snap.store))
    data = manifest(snap.store, snap.job, snap.seq)
    return dict(
        _manifest.parse(data, keys, require_encryption=False, where="test").header["versions"]
    )


def _rewrite_versions(snap: Snap, **versions: str) -> dict:
    """Rewrite the snapshot's header versions in place (validly re-signed); returns
    the original versions."""
    original = _versions(snap)

    def edit(header):
        header["versions"] = dict(original, **versions)

    _resign(snap, edit)
    return original


def _resign_file(path: Path, keys: _keys.KeyRing, edit) -> None:
    """Rewrite a snapshot file's header with `edit(header)` and sign the file again
    with `keys`: a file legitimately written with that header."""
    header, payload = _snapfile.read_payload(str(path), keys)
    header = {k: v for k, v in header.items() if k not in _ADDED}
    edit(header)
    _snapfile.write_signed(str(path), header, payload, keys)


def _bump(version: str, part: int) -> str:
    """`version` with its major (part 0) or minor (part 1) number increased."""
    numbers = [int(x) for x in version.split(".")[:2]]
    numbers[part] += 1
    if part == 0:
        numbers[1] = 0
    return f"{numbers[0]}.{numbers[1]}.0"


def test_control_unmodified_snapshot_resumes(loops_snapshot, tmp_path):
    """Control: a snapshot whose header was re-signed without changes resumes (so the
    refusals below come from the version fields, not from the re-signing)."""
    before = manifest(loops_snapshot.store, "job", 2)
    _rewrite_versions(loops_snapshot)
    # re-signing reproduces the writer exactly
    assert manifest(loops_snapshot.store, "job", 2) == before
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert run.result == "13"


def test_other_python_minor_refused(loops_snapshot, tmp_path):
    """A snapshot whose header says CPython 3.99 is refused; the message names both
    Python versions, and the file is left intact."""
    _rewrite_versions(loops_snapshot, python="cpython-3.99", python_full="3.99.0")
    before = _state(loops_snapshot)
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    _refused(run, "3.99.0", platform.python_version(), "Python", loops_snapshot.where)
    assert _state(loops_snapshot) == before


def test_other_python_minor_refused_in_a_file(loops_snapshot, tmp_path):
    """The same for a snapshot file (format 2): snapshot 2 exported, its header
    rewritten to CPython 3.99 and validly re-signed, then `resume FILE --as copy`: the
    file is imported (the store's own copy) and refused, naming both Python versions and
    that copy; the user's file and the original job are left intact. Control: the file
    as exported resumes."""
    store = loops_snapshot.store
    path = export_file(store, "job", 2, tmp_path / "two.snap")
    intact = path.read_bytes()
    keys = _keys.KeyRing(str(store))

    def edit(header):
        header["versions"] = dict(header["versions"], python="cpython-3.99", python_full="3.99.0")

    _resign_file(path, keys, edit)
    before, edited = _state(loops_snapshot), path.read_bytes()
    run = snaprun("resume", "--store", store, "--as", "copy", path, cwd=tmp_path, env=NO_ENV_KEY)
    copy = store / "snapshots" / "copy" / "000002-e0.snap"
    _refused(run, "3.99.0", platform.python_version(), "Python", str(copy))
    assert copy.read_bytes() == path.read_bytes() == edited
    assert _state(loops_snapshot) == before
    assert snapshot_seqs(store, "copy") == [2]
    path.write_bytes(intact)
    run = snaprun("resume", "--store", store, "--as", "copy2", path, cwd=tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert run.result == "13"


def test_other_python_implementation_refused(loops_snapshot, tmp_path):
    """Same version numbers but another implementation (pypy) is refused too."""
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    _rewrite_versions(loops_snapshot, python=f"pypy-{minor}", python_full="pypy-" + minor)
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    _refused(run, "Python", f"pypy-{minor}", platform.python_version())


def test_other_python_patch_accepted(loops_snapshot, tmp_path):
    """Only the minor version matters: a snapshot from another patch release of the
    same CPython minor resumes."""
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    patch = sys.version_info[2]
    _rewrite_versions(loops_snapshot, python_full=f"{minor}.{patch + 1 if patch < 50 else 0}")
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert run.result == "13"


@pytest.mark.parametrize("lib,module", [("cloudpickle", cloudpickle), ("greenlet", greenlet)])
@pytest.mark.parametrize("part", [0, 1], ids=["major", "minor"])
def test_other_library_version_refused(loops_snapshot, tmp_path, lib, module, part):
    """A snapshot taken with another cloudpickle/greenlet major or minor version is
    refused; the message names the library and both versions."""
    fake = _bump(module.__version__, part)
    _rewrite_versions(loops_snapshot, **{lib: fake})
    before = _state(loops_snapshot)
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    _refused(run, lib, fake, module.__version__, loops_snapshot.where)
    assert _state(loops_snapshot) == before


def test_every_difference_listed(loops_snapshot, tmp_path):
    """With Python, greenlet and cloudpickle all different, the one message lists all
    three differences."""
    fake_cp, fake_gl = _bump(cloudpickle.__version__, 0), _bump(greenlet.__version__, 0)
    _rewrite_versions(
        loops_snapshot,
        python="cpython-3.99",
        python_full="3.99.0",
        cloudpickle=fake_cp,
        greenlet=fake_gl,
    )
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    _refused(
        run,
        "3.99.0",
        platform.python_version(),
        f"greenlet {fake_gl}",
        f"cloudpickle {fake_cp}",
        greenlet.__version__,
        cloudpickle.__version__,
    )


def test_refused_snapshot_resumes_with_original_versions(loops_snapshot, tmp_path):
    """After a refusal, putting the original header back makes the same snapshot resume:
    the refusal changed nothing."""
    original = _rewrite_versions(loops_snapshot, python="cpython-3.99", python_full="3.99.0")
    _refused(
        loops_snapshot.resume(tmp_path, env=NO_ENV_KEY),
        "3.99.0",
    )
    _rewrite_versions(loops_snapshot, **original)
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert "resumed from snapshot 2" in run.stderr
    assert run.result == "13"


# ------------------------------------------------------------------ changed code
@dataclass
class CompatJob:
    root: Path
    agent: Path
    helper: Path
    agent_source: str
    helper_source: str
    snap: Snap  # snapshot 2 (stack: main -> Worker.step -> checkpoint)

    def resume(self) -> Run:
        return self.snap.resume(self.root, env=NO_PYC)

    def restore_sources(self) -> None:
        self.agent.write_text(self.agent_source)
        self.helper.write_text(self.helper_source)


@pytest.fixture(scope="module")
def _compat_run(tmp_path_factory) -> tuple[Path, Path]:
    """Copies of compat_agent.py and compat_helper.py run to completion by snaprun once
    for the module: (agent folder, pristine store).
    The store is never changed (tests work on copies); the sources are put back before
    and after each test."""
    root = tmp_path_factory.mktemp("compat")
    src = root / "agent"
    src.mkdir()
    for name in ("compat_agent.py", "compat_helper.py"):
        shutil.copy(AGENTS / name, src / name)
    run = snaprun(
        "run",
        "--store",
        root / "store",
        "--job",
        "job",
        src / "compat_agent.py",
        cwd=root,
        env=NO_PYC,
    )
    assert run.returncode == 0, run.stderr
    assert run.result == RESULT
    catalog = SqliteCatalog(str(root / "store"))
    try:
        rows = catalog.snapshots("job")
    finally:
        catalog.close()
    assert [(r.seq, r.epoch, r.file) for r in rows] == [(s, 1, CHUNKED) for s in (1, 2, 3)]
    return src, root / "store"


@pytest.fixture
def compat(_compat_run, tmp_path) -> CompatJob:
    """Copies of compat_agent.py and compat_helper.py run to completion by snaprun,
    then marked interrupted as a kill after the last snapshot leaves it (a done job
    never resumes): a copy of the module's finished store in tmp_path, with the
    agent's original sources in place (restored again after the test)."""
    src, pristine = _compat_run
    shutil.copytree(pristine, tmp_path / "store")
    catalog = SqliteCatalog(str(tmp_path / "store"))
    catalog.set_status("job", "interrupted")
    catalog.close()
    agent, helper = src / "compat_agent.py", src / "compat_helper.py"
    sources = {
        name: (AGENTS / name).read_text() for name in ("compat_agent.py", "compat_helper.py")
    }
    for name, text in sources.items():
        (src / name).write_text(text)
    job = CompatJob(
        tmp_path,
        agent,
        helper,
        sources["compat_agent.py"],
        sources["compat_helper.py"],
        Snap(tmp_path / "store", "job", 2),
    )
    yield job
    job.restore_sources()


def _edit(path: Path, old: str, new: str) -> None:
    source = path.read_text()
    assert source.count(old) == 1, f"{old!r} must occur once in {path}"
    path.write_text(source.replace(old, new))


def _def_line(source: str, definition: str) -> int:
    """1-based line number of the line starting (after indentation) with `definition`."""
    lines = [
        i for i, line in enumerate(source.splitlines(), 1) if line.lstrip().startswith(definition)
    ]
    assert len(lines) == 1
    return lines[0]


def _resumes_unchanged(job: CompatJob) -> None:
    run = job.resume()
    assert run.returncode == 0, run.stderr
    assert "resumed from snapshot 2" in run.stderr
    assert run.stdout == CONTINUATION
    assert run.result == RESULT


def test_control_unchanged_code_resumes(compat):
    """Control: with the source untouched, snapshot 2 of the compat agent resumes."""
    _resumes_unchanged(compat)


def test_method_body_changed(compat):
    """An edited body of a method on the stack (Worker.step) is refused, naming its
    qualname, its file and module and saying to restore the source; the snapshot is
    left intact and resumes once the original source is back."""
    _edit(compat.agent, "return i * self.scale", "return i * self.scale + 1")
    before = _state(compat.snap)
    run = compat.resume()
    _refused(
        run,
        "Worker.step()",
        str(compat.agent),
        "compat_agent",
        "changed",
        "Restore the original source",
        compat.snap.where,
    )
    assert "main()" not in run.stderr and "checkpoint()" not in run.stderr
    assert "compat_helper" not in run.stderr
    assert _state(compat.snap) == before
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_helper_module_body_changed(compat):
    """An edited function of another agent module on the stack is reported against that
    module and file only; restoring it makes the snapshot resume."""
    _edit(compat.helper, "    return info\n", "    print('edited', flush=True)\n    return info\n")
    before = _state(compat.snap)
    run = compat.resume()
    _refused(
        run, "checkpoint()", str(compat.helper), "compat_helper", "Restore the original source"
    )
    assert "Worker.step()" not in run.stderr and "main()" not in run.stderr
    assert "compat_agent" not in run.stderr
    assert _state(compat.snap) == before
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_constant_changed_in_entry_function(compat):
    """Changing only a constant in main()'s body (range(3) -> range(4)) is refused."""
    _edit(compat.agent, "range(3)", "range(4)")
    run = compat.resume()
    _refused(run, "main()", str(compat.agent), "Restore the original source")
    assert "Worker.step()" not in run.stderr
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_several_frames_changed(compat):
    """Every changed frame on the stack is listed in the one message."""
    _edit(compat.agent, "return i * self.scale", "return i * self.scale + 1")
    _edit(compat.agent, "    worker = Worker(10)\n", "    worker = Worker(10)\n    worker.x = 1\n")
    _edit(compat.helper, "    return info\n", "    return info or None\n")
    run = compat.resume()
    _refused(run, "Worker.step()", "main()", "checkpoint()", "compat_agent", "compat_helper")
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_functions_moved(compat):
    """A comment inserted at the top of the file moves every function on the stack one
    line down: refused, reporting each as moved from its old line to its new one."""
    step_line = _def_line(compat.agent_source, "def step(")
    main_line = _def_line(compat.agent_source, "def main(")
    compat.agent.write_text("# a new first line\n" + compat.agent_source)
    before = _state(compat.snap)
    run = compat.resume()
    _refused(
        run,
        "moved",
        str(compat.agent),
        "Restore the original source",
        f"Worker.step() moved from line {step_line} to line {step_line + 1}",
        f"main() moved from line {main_line} to line {main_line + 1}",
    )
    assert "checkpoint()" not in run.stderr
    assert _state(compat.snap) == before
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_function_removed(compat):
    """A method on the stack that no longer exists (renamed) is reported as gone."""
    source = compat.agent_source.replace("def step(", "def advance(").replace(
        "worker.step(", "worker.advance("
    )
    compat.agent.write_text(source)
    run = compat.resume()
    _refused(run, "Worker.step() no longer exists", "compat_agent")
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_entry_script_deleted(compat):
    """A job whose script file is gone is refused, naming the missing script; once the
    file is back the snapshot resumes."""
    compat.agent.unlink()
    run = compat.resume()
    _refused(run, str(compat.agent))
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_helper_module_deleted(compat):
    """A job whose agent module on the stack (compat_helper.py) was deleted is refused
    as changed code (exit 2, a snaprun error naming the module), not crashed."""
    compat.helper.unlink()
    run = compat.resume()
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert errors and "compat_helper" in errors[0], run.stderr
    compat.restore_sources()
    _resumes_unchanged(compat)


def test_agent_source_no_longer_compiles(compat):
    """An agent file edited into a syntax error is refused as changed code (exit 2, a
    snaprun error naming the file), not crashed."""
    compat.agent.write_text(compat.agent_source + "\nbroken = (\n")
    run = compat.resume()
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert errors and "compat_agent" in errors[0], run.stderr
    compat.restore_sources()
    _resumes_unchanged(compat)


# ------------------------------------------------------------------ another interpreter
def _minor_of(python: str) -> tuple[str, str] | None:
    """(major.minor, full version) of an interpreter, or None if it does not run."""
    try:
        proc = subprocess.run(
            [
                python,
                "-c",
                "import platform, sys; "
                "print('%d.%d' % sys.version_info[:2], platform.python_version())",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return None
    if proc.returncode != 0:
        return None
    minor, full = proc.stdout.split()
    return minor, full


def _other_interpreters() -> list[tuple[str, str, str]]:
    """(python, minor, full) for every interpreter SNAPSTATE_TEST_PYTHONS lists (a
    os.pathsep-separated list of CPython executables with snapstate installed, as .ci/run
    sets it) of another minor version than this one. None listed: the test is skipped
    saying so (failed under SNAPSTATE_TEST_REQUIRE_PYTHONS=1, which .ci/run sets)."""
    listed = [p for p in os.environ.get("SNAPSTATE_TEST_PYTHONS", "").split(os.pathsep) if p]
    if not listed:
        why = (
            "needs a CPython of another minor version with snapstate installed: set "
            "SNAPSTATE_TEST_PYTHONS=/path/to/python3.X[:...] (CONTRIBUTING.md)"
        )
        if os.environ.get("SNAPSTATE_TEST_REQUIRE_PYTHONS") == "1":  # .ci/run sets it
            pytest.fail(f"{why}; SNAPSTATE_TEST_REQUIRE_PYTHONS=1 requires it")
        pytest.skip(why)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    others, seen = [], set()
    for python in listed:
        found = _minor_of(python)
        assert found is not None, f"SNAPSTATE_TEST_PYTHONS lists {python}, which does not run"
        minor, full = found
        if minor != here and minor not in seen:
            seen.add(minor)
            others.append((python, minor, full))
    return others


def test_resume_under_another_python(loops_snapshot, tmp_path):
    """A real snapshot taken here and resumed by an interpreter of another minor version
    (a real CPython, no header rewriting) is refused with exit 2, naming both versions,
    leaving the job's snapshots intact; this interpreter then resumes it."""
    others = _other_interpreters()
    assert others, (
        f"SNAPSTATE_TEST_PYTHONS lists no interpreter of another minor version than {sys.version}"
    )
    before = _state(loops_snapshot)
    for python, _minor, full in others:
        run = loops_snapshot.resume(tmp_path, python=python, env=NO_ENV_KEY)
        _refused(run, "Python", platform.python_version(), full, loops_snapshot.where)
        assert _state(loops_snapshot) == before
    run = loops_snapshot.resume(tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert run.result == "13"
