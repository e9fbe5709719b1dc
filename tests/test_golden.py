"""Golden files: the stores written by every release (tests/golden/<version>/py3.X/, made
by scripts/make_golden.py) still verify, inspect and resume with this snapstate exactly
as they did with the release that wrote them, and files of a format or catalog schema
newer than this snapstate's are refused with the documented message and exit code 2
(CHANGELOG.md, "Versions and compatibility").

Snapshots are refused across CPython minors by design, so each release has one folder
per minor and the running interpreter replays its own."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickletools
import runpy
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SNAPRUN, clean_refusal, snaprun

import snapstate
from snapstate import _abi
from snapstate.serializers import _keys, _snapfile, _sqlite

GOLDEN = Path(__file__).parent / "golden"
MINOR = f"py{sys.version_info[0]}.{sys.version_info[1]}"
MINORS = ("py3.11", "py3.12", "py3.13")
RELEASES = sorted(
    (p for p in GOLDEN.iterdir() if p.is_dir() and p.name[:1].isdigit()),
    key=lambda p: tuple(int(x) for x in p.name.split(".")),
)
FOLDERS = [p / MINOR for p in RELEASES]
NO_SNAPSTATE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSTATE_")}
# The store's folder and key files get snapstate's modes back after a copy (git keeps
# neither 0700 nor 0600), as scripts/make_golden.py does.
_private_store = runpy.run_path(str(Path(__file__).parents[1] / "scripts" / "make_golden.py"))[
    "private_store"
]


def _expected(folder: Path) -> dict:
    return json.loads((folder / "expected.json").read_text(encoding="utf-8"))


@contextlib.contextmanager
def _at_recorded_root(folder: Path, root: str):
    """The golden folder copied to the path it was recorded at (a job resumes in the
    working directory it started in), for one test process at a time."""
    with open(root + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(folder, root, ignore=shutil.ignore_patterns("expected.json"))
            _private_store(root)
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(args: list[str], root: str) -> subprocess.CompletedProcess:
    """snaprun as scripts/make_golden.py ran it: a fresh interpreter (PYTHONPATH and TZ
    are read at start), the agents' folder as working directory and import path."""
    env = dict(NO_SNAPSTATE_ENV, TZ="UTC", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.path.join(root, "agents")
    return subprocess.run(
        [SNAPRUN, *(a.replace("{root}", root) for a in args)],
        cwd=os.path.join(root, "agents"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_release_has_every_minor():
    """Each release's golden folder holds a store for each supported CPython minor, and
    the newest is this version's (scripts/make_golden.py was run for this release)."""
    assert RELEASES, "no golden release folder"
    for release in RELEASES:
        assert sorted(p.name for p in release.iterdir() if p.is_dir()) == list(MINORS), release
    assert RELEASES[-1].name == snapstate.__version__


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.parent.name for p in FOLDERS])
def test_golden_store_replays(folder):
    """Every recorded check of a release's golden store gives the recorded exit code and
    output with this snapstate: `verify` of each snapshot file, `inspect` of each
    snapshot (frames, locals, the writer's version line), `resume` of each job (the
    state job finishes with the same output; the effects job replays its committed
    effect from the ledger and parks on the ambiguous one), and the files the agents
    wrote after the resumes (each effect happened once)."""
    expected = _expected(folder)
    with _at_recorded_root(folder, expected["root"]) as root:
        for check in expected["commands"]:
            result = _run(check["args"], root)
            got = {
                "exit": result.returncode,
                "stdout": result.stdout.replace(root, "{root}"),
                "stderr": result.stderr.replace(root, "{root}"),
            }
            want = {k: check[k] for k in ("exit", "stdout", "stderr")}
            assert got == want, f"snaprun {' '.join(check['args'])}"
        for name, text in expected["files_after"].items():
            assert Path(root, name).read_text(encoding="utf-8") == text, name


def _snapshot_files(store: Path) -> list[Path]:
    return sorted(store.glob("snapshots/*/*.snap"))


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.parent.name for p in FOLDERS])
def test_golden_payloads_name_only_pinned_globals(folder, tmp_path):
    """Every snapstate function or class a golden payload names is a public one
    (snapstate.*) or a pinned one (snapstate._abi.*), and the pinned ones resolve."""
    folder = _copy(folder, tmp_path)
    ring = _keys.KeyRing(str(folder / "store"), create=False)
    named = set()
    for path in _snapshot_files(folder / "store"):
        _, payload = _snapfile.read_payload(str(path), ring)
        named |= _snapstate_globals(bytes(payload))
    assert any(module == "snapstate._abi" for module, _ in named)
    for module, name in named:
        assert _abi.is_pinned_global(module, name), f"{module}.{name}"
        if module == "snapstate._abi":
            assert getattr(_abi, name) is not None


def _snapstate_globals(data: bytes) -> set[tuple[str, str]]:
    """(module, name) of each GLOBAL / STACK_GLOBAL of a snapstate module in a payload
    (its preamble runs into the state pickle: one stream of opcodes up to STOP)."""
    found, pushed, memo = set(), [], {}
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            pushed.append(arg)
        elif name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = pushed[-1] if pushed else None
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            pushed.append(memo.get(arg))
        elif name == "GLOBAL":
            found.add(tuple(arg.split(" ", 1)))
            pushed.append(None)
        elif name == "STACK_GLOBAL":
            found.add((pushed[-2], pushed[-1]))
            pushed.append(None)
        else:
            pushed.append(None)
    return {
        (m, n)
        for m, n in found
        if isinstance(m, str) and (m == "snapstate" or m.startswith("snapstate."))
    }


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "golden"
    shutil.copytree(folder, target)
    _private_store(str(target))
    return target


def test_newer_format_is_refused(tmp_path):
    """A snapshot file of a format newer than this snapstate's (the u16 after the magic,
    checked before the signature) is refused by verify, inspect and resume: exit 2, one
    error line saying its format, the supported one and to use a newer snapstate."""
    folder = _copy(FOLDERS[-1], tmp_path)
    store = folder / "store"
    future = _snapfile.FORMAT_VERSION + 1
    for path in _snapshot_files(store):
        data = bytearray(path.read_bytes())
        struct.pack_into("<H", data, len(_snapfile.MAGIC), future)
        path.write_bytes(bytes(data))
    needles = (
        f"uses snapshot format {future}, newer than this snapstate ({snapstate.__version__}) "
        f"reads (format {_snapfile.FORMAT_VERSION})",
        "Resume it with the snapstate release that wrote it, or a later one.",
    )
    latest = _snapshot_files(store)[-1]  # state@2
    env = dict(TZ="UTC")
    for args in (
        ["verify", "--store", store, latest],
        ["inspect", "--store", store, "state"],
        ["resume", "--store", store, "state"],
    ):
        run = snaprun(*args, cwd=tmp_path, env=env)
        clean_refusal(run, *needles)


@pytest.mark.smoke
def test_newer_catalog_schema_is_refused(tmp_path):
    """A store whose catalog has a schema newer than this snapstate's is refused by any
    command that opens it: exit 2, naming both schema versions and what to do."""
    folder = _copy(FOLDERS[-1], tmp_path)
    future = _sqlite.SCHEMA_VERSION + 1
    db = sqlite3.connect(folder / "store" / "catalog.db")
    db.execute(f"PRAGMA user_version = {future}")
    db.commit()
    db.close()
    for args in (["ls"], ["inspect", "state"], ["resume", "state"]):
        run = snaprun(args[0], "--store", folder / "store", *args[1:], cwd=tmp_path)
        clean_refusal(
            run,
            f"has schema version {future}; this snapstate uses {_sqlite.SCHEMA_VERSION}",
            "Use the snapstate release that created it",
        )
