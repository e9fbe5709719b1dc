"""Damaged-store inputs give a clear message and the documented exit code, never a
traceback, and change nothing: every damaged kind x every command.

Kinds: the catalog zeroed, filled with random bytes, truncated; keys.json truncated;
the latest snapshot's header replaced by deeply nested JSON (json.loads raises
RecursionError): the manifest of the latest snapshot in catalog.db, and, for the file
format, an exported snapshot file's header. The store is built once per module by a real job (killed right after
its snapshot 2, so it is resumable and has a ledger) and copied for each case.

Each command runs in a process of its own, forked from the test with snapstate
already imported (the CLI's real `main()`, real exit code, its stderr captured):
65 `snaprun` starts would cost ~30 s; forks cost a few ms each. A few real `snaprun`
starts check the console entry point too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import sys
import traceback
import warnings
from pathlib import Path

import pytest
from chunked import export_file, manifest, set_manifest
from helpers import snaprun

from snapstate._errors import CorruptSnapshot
from snapstate.serializers import _snapfile

BASE_AGENT = """\
from snapstate import effect, snapshot

@effect
def note(x):
    return x * 2

def main():
    a = note(1)
    snapshot("one")
    b = note(2)
    snapshot("two")
    return a + b + note(3)
"""

NEW_AGENT = """\
import os
open(os.path.join(os.path.dirname(__file__), "agent-ran"), "a").write("ran\\n")

def main():
    return 1
"""

COMMANDS = {
    "ls": ["ls"],
    "inspect": ["inspect", "base"],
    "log": ["log", "base"],
    "effects": ["effects", "base"],
    "stats": ["stats"],
    "verify": ["verify", "base@2"],
    "export": ["export", "base@2", "-o", "{tmp}/exported.snap"],
    "resume": ["resume", "base"],
    "run": ["run", "--job", "new", "{tmp}/new_agent.py"],
    "fork": ["fork", "base@2", "--as", "forked"],
    "prune": ["prune", "--finished"],
    "reconcile": ["reconcile", "base", "3", "--not-committed"],
    "keys list": ["keys", "list"],
}

KINDS = ["zeroed-catalog", "random-catalog", "truncated-catalog", "corrupt-keys", "nested-header"]

# A snapshot's header (its manifest's) is only read by the commands that open the file; the others
# work as usual.
HEADER_READERS = {"inspect", "verify", "export", "resume", "fork"}


def expected_code(kind: str, command: str) -> int:
    if kind == "nested-header" and command not in HEADER_READERS:
        return 0
    return 2


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    """A store holding job `base`: snapshots 1 and 2, effects 1 and 2 confirmed, and
    effect 3 sent but not confirmed (killed right after sending it: reconcilable)."""
    root = tmp_path_factory.mktemp("base")
    (root / "base_agent.py").write_text(BASE_AGENT)
    killed = snaprun(
        "run", "--job", "base", root / "base_agent.py", cwd=root, fault="effect-after-send:3"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = root / ".snapstate"
    db = sqlite3.connect(store / "catalog.db")  # fold the WAL into catalog.db
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    assert not (store / "catalog.db-wal").exists()
    return store


NESTED = b"[" * 200_000 + b"]" * 200_000


def nest_manifest(store: Path) -> None:
    """Replace the header of snapshot base@2's manifest by deeply nested JSON (its
    length field, chunk list and signature kept as they were)."""
    import struct

    data = manifest(store, "base", 2)
    (length,) = struct.unpack_from("<I", data, 12)
    set_manifest(
        store, "base", 2, data[:12] + struct.pack("<I", len(NESTED)) + NESTED + data[16 + length :]
    )


def nest_file(snap: Path) -> Path:
    """Replace a snapshot file's header by deeply nested JSON (nothing after it)."""
    data = snap.read_bytes()
    # magic, (format version, header length) as the file has them, then the header
    fixed, magic = _snapfile._FIXED, _snapfile.MAGIC
    version, _ = fixed.unpack(data[len(magic) : len(magic) + fixed.size])
    snap.write_bytes(magic + fixed.pack(version, len(NESTED)) + NESTED)
    return snap


def damage(store: Path, kind: str) -> Path:
    """Damage the store; returns the damaged file (catalog.db for a nested manifest
    header: fingerprint() then looks at that manifest only)."""
    catalog = store / "catalog.db"
    if kind == "zeroed-catalog":
        catalog.write_bytes(b"\0" * catalog.stat().st_size)
        return catalog
    if kind == "random-catalog":
        catalog.write_bytes(os.urandom(catalog.stat().st_size))
        return catalog
    if kind == "truncated-catalog":
        os.truncate(catalog, catalog.stat().st_size // 2)
        return catalog
    if kind == "corrupt-keys":
        keys = store / "keys.json"
        keys.write_bytes(keys.read_bytes()[:40])
        return keys
    assert kind == "nested-header"
    nest_manifest(store)
    return catalog


def fingerprint(store: Path, kind: str, damaged: Path) -> str:
    """What must not change: the damaged file's bytes, or the damaged manifest (the
    catalog around it may change: a `run` of another job writes it)."""
    if kind == "nested-header":
        return hashlib.sha256(manifest(store, "base", 2)).hexdigest()
    return _sha(damaged)


def run_cli(args: list[str], cwd: Path, home: Path) -> tuple[int, str]:
    """`snaprun ARGS` in a forked process: (exit code, stderr)."""
    err_path = cwd / f"stderr-{os.getpid()}-{len(args)}.txt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded pytest
        pid = os.fork()
    if pid == 0:  # the child: snaprun's process
        code = 70
        try:
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            os.chdir(cwd)
            os.environ["SNAPSTATE_HOME"] = str(home)
            os.environ.pop("SNAPSTATE_FAULT", None)
            warnings.resetwarnings()
            warnings.simplefilter("default")
            sys.argv = ["snaprun", *args]
            from snapstate.runtime._cli import main

            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()  # what the interpreter would print
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    stderr = err_path.read_text()
    err_path.unlink()
    return os.waitstatus_to_exitcode(status), stderr


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", KINDS)
def test_damaged_store_gives_a_clear_error_and_changes_nothing(base_store, tmp_path, kind, command):
    """`snaprun COMMAND` over a store with damage KIND: no traceback on stderr, the
    documented exit code, a message naming the store or the file, and the damaged file
    byte-identical afterwards (nothing re-created over it)."""
    store = tmp_path / "store"
    shutil.copytree(base_store, store)
    (tmp_path / "new_agent.py").write_text(NEW_AGENT)
    damaged = damage(store, kind)
    before = fingerprint(store, kind, damaged)
    args = [a.format(tmp=tmp_path) for a in COMMANDS[command]]
    code, stderr = run_cli(args, tmp_path, store)
    assert "Traceback" not in stderr, stderr
    assert code == expected_code(kind, command), stderr
    if code == 2:
        assert "snaprun: error:" in stderr, stderr
        if kind == "nested-header":  # the damaged snapshot, by its job and seq
            assert "snapshot 2 of job base" in stderr, stderr
        else:
            assert str(store) in stderr or str(damaged) in stderr, stderr
    assert damaged.exists() and fingerprint(store, kind, damaged) == before, (
        f"{damaged} was changed"
    )
    if kind != "nested-header":
        assert not (tmp_path / "agent-ran").exists(), "agent code ran on a damaged store"


@pytest.mark.parametrize("kind", KINDS)
def test_real_snaprun_reports_damage_without_traceback(base_store, tmp_path, kind):
    """The console entry point itself (a real `snaprun` process): `inspect base` over
    each damaged store exits 2 with a message and no traceback."""
    store = tmp_path / "store"
    shutil.copytree(base_store, store)
    damaged = damage(store, kind)
    before = fingerprint(store, kind, damaged)
    result = snaprun("inspect", "--store", store, "base", cwd=tmp_path)
    assert (result.returncode, "Traceback" in result.stderr) == (2, False), result.stderr
    assert "snaprun: error:" in result.stderr
    assert fingerprint(store, kind, damaged) == before


def test_nested_json_header_is_a_corrupt_snapshot(base_store, tmp_path):
    """The file format layer: a header of deeply nested JSON is CorruptSnapshot (json
    raises RecursionError, which is no ValueError), nothing unpickled."""
    store = tmp_path / "store"
    shutil.copytree(base_store, store)
    snap = nest_file(export_file(store, "base", 2, tmp_path / "base-2.snap"))
    with pytest.raises(CorruptSnapshot, match="nested too deeply"):
        _snapfile.peek_header(str(snap))
