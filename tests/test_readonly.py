"""Read-only commands are read-only (issue 8, item 7).

inspect, inspect --json, verify, export, ls, log, effects and stats of a killed and a
finished job that hold an append-mode file, a sqlite3 database and a
NamedTemporaryFile change no byte (nor mtime) of the agent's files or the store, never
import the agent's module (it prints and creates a sentinel file at import), and a
hostile payload signed with the store's own key runs nothing under inspect. replay
runs on scratch copies and writes nothing. verify streams in constant memory.
"""

from __future__ import annotations

import json
import os
import pickle
import runpy
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from chunked import export_file
from helpers import AGENTS, SNAPRUN, snaprun

from snapstate.serializers import _keys, _snapfile

AGENT = AGENTS / "ro_agent.py"
IMPORTED = "ro_agent module imported"
MIB = 1 << 20


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """A store with job `killed` (SIGKILLed after writing past its snapshot 1, holding
    a NamedTemporaryFile) and job `done` (finished), each run in its own folder."""
    root = tmp_path_factory.mktemp("readonly")
    store = root / "store"
    for job, env in (("killed", {"RO_TEMPFILE": "1", "RO_KILL": "1"}), ("done", {})):
        (root / job).mkdir()
        run = snaprun("run", "--store", store, "--job", job, AGENT, cwd=root / job, env=env)
        assert run.returncode == (-9 if job == "killed" else 0), run.stderr
    held = list((root / "killed").glob("held-*.tmp"))
    assert len(held) == 1 and held[0].read_bytes() == b"temporary data"
    assert (root / "killed" / "journal.txt").read_text().endswith("after the snapshot\n")
    # the jobs' first snapshots as snapshot files (exported; a job's are chunked)
    (root / "files").mkdir()
    for job in ("killed", "done"):
        export_file(store, job, 1, root / "files" / f"{job}-1.snap")
    return root


def _file_of(root: Path, job: str) -> Path:
    """Snapshot 1 of `job`, exported to a snapshot file (by the fixture)."""
    return root / "files" / f"{job}-1.snap"


def _files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _catalog(store: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def _state(root: Path) -> dict:
    """Every byte and mtime of the agents' folders and of the store's snapshot files,
    pack files, key and config files, and the catalog's content (all tables: jobs,
    snapshots, manifests, chunks, events, metrics, effects, leases)."""
    store = root / "store"
    return {
        "agents": {job: _files(root / job) for job in ("killed", "done")},
        "snapshots": _files(store / "snapshots"),
        "packs": _files(store / "chunks") if (store / "chunks").exists() else {},
        "store files": {
            n: (store / n).read_bytes()
            for n in ("keys.json", "config.json")
            if (store / n).exists()
        },
        "catalog": _catalog(store),
    }


def _assert_unchanged(before: dict, after: dict) -> None:
    for part in before:
        assert after[part] == before[part], f"{part} changed"


def _untouched(root: Path, sentinel: Path, *args, cwd=None):
    """Run snaprun ARGS (the agent's import would create `sentinel`); assert it changed
    nothing, printed nothing of the module and created no sentinel. Returns the run."""
    before = _state(root)
    run = snaprun(*args, cwd=cwd or root, env={"RO_SENTINEL": str(sentinel)})
    _assert_unchanged(before, _state(root))
    assert IMPORTED not in run.stdout + run.stderr, "the agent's module was imported"
    assert not sentinel.exists(), "the agent's module-level code ran"
    assert "Traceback" not in run.stderr, run.stderr
    return run


@pytest.mark.parametrize("job", ["killed", "done"])
def test_inspect_changes_nothing_and_imports_nothing(jobs, job):
    """`inspect JOB@1` and `inspect --json JOB@1` of a killed job (its journal grew past
    the snapshot, it holds a NamedTemporaryFile) and of a finished one: the journal is
    not truncated, the temp file not deleted, the database untouched, no byte or mtime
    anywhere changes, the module is not imported (no print, no sentinel). The locals
    are shown anyway: the object with its attributes, the resources by kind and path."""
    sentinel = jobs / f"sentinel-inspect-{job}"
    run = _untouched(jobs, sentinel, "inspect", "--store", jobs / "store", f"{job}@1")
    assert run.returncode == 0, run.stderr
    assert "notebook = Notebook(title='draft', pages=['intro'])" in run.stdout, run.stdout
    assert (
        f"journal = open file '{jobs / job / 'journal.txt'}' (mode 'a', at byte 20)" in run.stdout
    ), run.stdout
    assert f"db = sqlite3 connection '{jobs / job / 'data.db'}'" in run.stdout
    assert "locals unavailable" not in run.stdout
    if job == "killed":
        assert "held = named temporary file '" in run.stdout, run.stdout
    run = _untouched(jobs, sentinel, "inspect", "--store", jobs / "store", "--json", f"{job}@1")
    assert run.returncode == 0, run.stderr
    frame = json.loads(run.stdout)["tasks"][0]["frames"][-1]
    assert frame["function"] == "main"
    assert frame["locals"]["notebook"] == "Notebook(title='draft', pages=['intro'])"


def test_diff_and_inspect_path_change_nothing_and_import_nothing(jobs):
    """`diff` of two jobs' snapshots and `inspect --path`: no byte or mtime of the store
    or of the agents' folders changes, the agents' module is not imported."""
    sentinel = jobs / "sentinel-diff"
    run = _untouched(jobs, sentinel, "diff", "--store", jobs / "store", "killed@1", "done@1")
    assert run.returncode == 0, run.stderr
    assert "share no history" in run.stdout
    path = "frame[-1].locals.notebook.title"
    run = _untouched(jobs, sentinel, "inspect", "--store", jobs / "store", "done@1", "--path", path)
    assert run.returncode == 0 and "'draft'" in run.stdout, run.stderr


def test_other_readonly_commands_change_nothing(jobs, tmp_path):
    """verify, export, ls, log, effects and stats change no byte or mtime of the agent's files or the store and run no agent code.
    (A guard: these did not write before either; inspect and replay, tested above and
    below, did.)"""
    store = jobs / "store"
    snap = _file_of(jobs, "killed")
    commands = [
        ("verify", "--store", store, snap),
        ("verify", "--store", store, "killed@1"),
        ("export", "--store", store, "-o", tmp_path / "out.snap", "killed@1"),
        ("ls", "--store", store),
        ("log", "--store", store, "killed"),
        ("effects", "--store", store, "--json", "killed"),
        ("stats", "--store", store),
    ]
    for args in commands:
        run = _untouched(jobs, tmp_path / f"sentinel-{args[0]}", *args)
        assert run.returncode == 0, (args, run.stderr)
    assert (tmp_path / "out.snap").read_bytes() == snap.read_bytes()


def test_replay_uses_scratch_copies_and_writes_nothing(jobs, tmp_path):
    """`replay done@1` re-runs the agent after its snapshot (it appends to its journal
    and inserts into its database): the originals keep every byte and mtime, the store
    (snapshot files, catalog: snapshots, events, metrics, effects) is unchanged, and
    the scratch copies are gone afterwards."""
    before_tmp = set(os.listdir(tmp_path))
    before = _state(jobs)
    run = snaprun(
        "replay",
        "--store",
        jobs / "store",
        "done@1",
        cwd=jobs / "done",
        env={"TMPDIR": str(tmp_path)},
    )
    assert run.returncode == 0, run.stderr
    assert "finished: main() returned 2" in run.stderr, run.stderr
    _assert_unchanged(before, _state(jobs))
    assert set(os.listdir(tmp_path)) == before_tmp, "the scratch directory was left behind"


def test_hostile_payload_signed_with_the_store_key_runs_nothing(jobs, tmp_path, short_tmp_path):
    """A snapshot whose body would run a shell command and the agent's module when
    unpickled, signed with the store's own key (as an attacker who can write the store
    and read its key could): `inspect` decodes it into placeholders, runs nothing
    (no sentinel, no import) and shows what it would have called. Positive control:
    pickle.loads of the same body creates the sentinels."""
    # a short folder: inspect's rendering of the command is cut at 80 characters
    sentinel, imported = short_tmp_path / "shell-ran", short_tmp_path / "module-ran"

    class Shell:
        def __reduce__(self):
            return (os.system, (f"touch {sentinel}",))

    class RunModule:
        def __reduce__(self):
            return (runpy.run_path, (str(AGENT),))

    body = pickle.dumps(
        {
            "frames": [],
            "globals": {"agent": {"shell": Shell(), "module": RunModule()}},
            "handled": None,
            "label": None,
            "effects": 0,
        },
        protocol=5,
    )
    real = _file_of(jobs, "done")
    header = {
        k: v
        for k, v in _snapfile.peek_header(str(real)).items()
        if k not in ("key_id", "chunk_size", "codecs", "nonce_prefix")
    }
    header["frames"] = []
    evil = tmp_path / "evil.snap"
    _snapfile.write(str(evil), header, body, _keys.KeyRing(str(jobs / "store")))

    old = os.environ.get("RO_SENTINEL")
    os.environ["RO_SENTINEL"] = str(imported)
    try:
        pickle.loads(body)  # positive control: this payload runs code
    finally:
        os.environ.pop("RO_SENTINEL") if old is None else os.environ.update(RO_SENTINEL=old)
    assert sentinel.exists() and imported.exists()
    sentinel.unlink()
    imported.unlink()

    run = snaprun(
        "inspect", "--store", jobs / "store", evil, cwd=tmp_path, env={"RO_SENTINEL": str(imported)}
    )
    assert run.returncode == 0, run.stderr
    assert not sentinel.exists() and not imported.exists()
    assert IMPORTED not in run.stdout + run.stderr
    assert f"shell = posix.system('touch {sentinel}')" in run.stdout, run.stdout
    assert "module = runpy.run_path(" in run.stdout, run.stdout


# ------------------------------------------------------------------------ memory
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[2:], stdout=open(sys.argv[1], 'w'))\n"
    "os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped\n"
    "with open(f'/proc/{proc.pid}/io') as io:\n"
    "    read = dict(line.split(': ') for line in io.read().splitlines())['rchar']\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, read)"
)


def _measured(args: list, cwd: Path) -> tuple[int, float, int, str]:
    """(exit code, peak RSS in MiB, bytes read, stderr) of one child process, its RSS
    measured by the kernel for that very child (wait4) and the bytes it read by the
    kernel's I/O accounting (/proc/PID/io rchar: every read(), its interpreter's and
    imports' too). A small launcher starts it: a child forked straight from pytest would
    inherit pytest's own peak RSS."""
    python = Path(SNAPRUN).with_name("python")
    proc = subprocess.run(
        [str(python), "-c", _LAUNCHER, str(cwd / "child.out"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        timeout=120,
    )
    code, rss, read = proc.stdout.split()
    return int(code), int(rss) / 1024, int(read), proc.stderr


@pytest.fixture(scope="module")
def large(jobs):
    """A genuine 96 MiB snapshot (incompressible payload) signed by the store's key."""
    real = _file_of(jobs, "done")
    header = {
        k: v
        for k, v in _snapfile.peek_header(str(real)).items()
        if k not in ("key_id", "chunk_size", "codecs", "nonce_prefix")
    }
    path = jobs / "large.snap"
    _snapfile.write(str(path), header, os.urandom(96 * MIB), _keys.KeyRing(str(jobs / "store")))
    return path


def test_verify_of_a_large_file_runs_in_constant_memory(jobs, large):
    """`snaprun verify` of a genuine 96 MiB snapshot succeeds within 64 MiB of peak
    RSS (the whole process, measured by the kernel): it never holds the body."""
    code, rss, _, err = _measured([SNAPRUN, "verify", "--store", jobs / "store", large], jobs)
    assert code == 0, err
    assert rss <= 64, f"verify peaked at {rss:.0f} MiB"


def test_verify_refuses_a_tiny_chunk_file_fast_in_constant_memory(jobs, tmp_path):
    """A crafted 100 MB file of 1-byte chunks (20 million of them) naming the store's
    key is refused with exit 2 as damaged, within 64 MiB of peak RSS and after reading a
    few bytes of its body: every chunk but the last must have the writer's chunk size,
    so the second chunk ends the read."""
    ring = _keys.KeyRing(str(jobs / "store"))
    header = json.dumps(
        {
            "key_id": ring.current.key_id,
            "chunk_size": _snapfile.CHUNK_SIZE,
            "codecs": ["pickle-5", "zstd"],
        }
    ).encode()
    path = tmp_path / "tiny.snap"
    with open(path, "wb") as f:
        f.write(
            _snapfile.MAGIC + struct.pack("<HI", _snapfile.FORMAT_VERSION, len(header)) + header
        )
        piece = struct.pack("<I", 1) + b"x"
        for _ in range(20):
            f.write(piece * 1_000_000)
        f.write(struct.pack("<I", 0) + bytes(64))
    assert path.stat().st_size > 100_000_000
    code, rss, read, err = _measured([SNAPRUN, "verify", "--store", jobs / "store", path], tmp_path)
    assert code == 2 and "Traceback" not in err, err
    assert "chunk" in err and str(path) in err, err
    assert rss <= 64, f"verify peaked at {rss:.0f} MiB"
    # the interpreter and its imports read a few MB; the 20 million chunks were not read
    assert read < 50_000_000, f"verify read {read} bytes of a {path.stat().st_size}-byte file"


def test_read_payload_holds_the_body_once(jobs, large, tmp_path):
    """Decoding a 96 MiB body peaks at about one copy of it (not the compressed
    chunks, the decompressed body and a copy of it at once): peak RSS of a process
    that only reads the payload stays under 64 MiB + the payload size."""
    script = (
        "import sys; from snapstate.serializers import _snapfile, _keys; "
        "h, p = _snapfile.read_payload(sys.argv[1], _keys.KeyRing(sys.argv[2])); "
        "print(len(p))"
    )
    python = Path(SNAPRUN).with_name("python")
    code, rss, _, err = _measured([python, "-c", script, large, jobs / "store"], tmp_path)
    assert code == 0, err
    assert (tmp_path / "child.out").read_text().strip() == str(96 * MIB)
    assert rss <= 64 + 96, f"read_payload peaked at {rss:.0f} MiB for a 96 MiB body"


def test_inspect_of_a_snapshot_without_local_names_shows_slots(jobs):
    """A snapshot taken before headers recorded local names (its header frames lack
    them) still shows every local, by slot number, without importing anything."""
    from snapstate.runtime import _inspect
    from snapstate.serializers._home import Home

    home = Home(str(jobs / "store"))
    try:
        header, payload = home.read_row(home.catalog.snapshot("done", 1))
    finally:
        home.close()
    assert header["frames"][0]["locals"][0] == "notebook"
    header["frames"] = [{k: v for k, v in f.items() if k != "locals"} for f in header["frames"]]
    frame = _inspect.describe(header, payload)["tasks"][0]["frames"][-1]
    assert frame["locals"]["slot 0"] == "Notebook(title='draft', pages=['intro'])"
    assert "ro_agent" not in sys.modules


LARGE_AGENT = """\
import os
from snapstate import snapshot

def main():
    body = os.urandom(96 << 20)
    snapshot("large")
    return len(body)
"""


@pytest.fixture(scope="module")
def large_job(tmp_path_factory):
    """A store holding job `large`, whose one snapshot is a 96 MiB incompressible
    bytes object: its chunks lie in a pack file."""
    root = tmp_path_factory.mktemp("large")
    (root / "large_agent.py").write_text(LARGE_AGENT)
    run = snaprun(
        "run", "--store", root / "store", "--job", "large", root / "large_agent.py", cwd=root
    )
    assert run.returncode == 0 and run.result == str(96 * MIB), run.stderr
    packs = list((root / "store" / "chunks").glob("*.pack"))
    assert len(packs) == 1 and packs[0].stat().st_size > 96 * MIB
    return root


def test_verify_of_a_large_chunked_snapshot_runs_in_constant_memory(large_job):
    """`snaprun verify JOB@SEQ` of a 96 MiB chunked snapshot (every chunk read from its
    pack, decoded and checked) succeeds within 64 MiB of peak RSS (the whole process,
    measured by the kernel): it checks one chunk at a time, never holding the body."""
    code, rss, read, err = _measured(
        [SNAPRUN, "verify", "--store", large_job / "store", "large@1"], large_job
    )
    assert code == 0, err
    assert read > 96 * MIB  # every chunk was read
    assert rss <= 64, f"verify peaked at {rss:.0f} MiB"
