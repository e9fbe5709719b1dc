"""Write the golden snapshot files of this snapstate release for the running interpreter.

    python scripts/make_golden.py        (with the snapstate of this checkout installed)

recreates tests/golden/<snapstate version>/py3.<minor>/ from scratch: run it once under
each supported CPython (3.11, 3.12, 3.13) at every release, and commit the folders.
Snapshots are refused across CPython minors by design, hence one folder per minor;
tests/test_golden.py replays every golden folder of the running minor, so every later
release must load these files (or refuse them with the documented message, see
CHANGELOG.md "Versions and compatibility"). Never edit or regenerate the folder of an
older release: it is the proof that old files still load.

What it does:
  1. copies tests/golden/agents/*.py into a fixed folder, /tmp/snapstate-golden-py3.X
     (a job resumes in the directory it started in, so the test recreates that folder
     at the same path), and runs them there, as
     `snaprun run --store STORE --job ID module:main`, each killed at a named fault
     point (SNAPSTATE_FAULT) so its store holds a resumable job:
        state    golden_state.py, killed right after snapshot 2 (locals, a loop, an
                 instance, a function default, a closure cell, a generator, a resource)
        effects  golden_effects.py, killed after sending its third effect (two committed
                 effects, one ambiguous)
  2. copies the store (catalog.db, keys, snapshot files) and the agents (with the files
     they wrote) into the golden folder;
  3. replays the checks on a copy of the golden folder at that fixed path, exactly as
     tests/test_golden.py will (snaprun verify of every snapshot file, inspect of every snapshot, resume of
     each job, then the files the agents wrote), and records the commands with their
     exit codes and outputs in expected.json.

Commands run with TZ=UTC, no SNAPSTATE_* variables, the agents' folder as the working
directory and on PYTHONPATH. `{root}` in expected.json stands for the fixed folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "golden")
AGENTS = os.path.join(GOLDEN, "agents")

# (job id, module, fault point of the first run)
JOBS = [
    ("state", "golden_state", "after-snapshot:2"),
    ("effects", "golden_effects", "effect-after-send:3"),
]
# Files the agents write, checked after the resumes (at most once: one line per call).
WRITTEN = ["agents/notes.txt", "agents/provider.log"]


def snaprun_command() -> list[str]:
    """snaprun of the running interpreter (its venv's script, else the module)."""
    script = os.path.join(os.path.dirname(sys.executable), "snaprun")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-m", "snapstate.runtime._cli"]


def environment(root: str, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSTATE_")}
    env.update(TZ="UTC", PYTHONUNBUFFERED="1", PYTHONPATH=os.path.join(root, "agents"))
    env.update(extra or {})
    return env


def run(args: list[str], root: str, extra_env: dict | None = None):
    expanded = [a.replace("{root}", root) for a in args]
    return subprocess.run(
        snaprun_command() + expanded,
        cwd=os.path.join(root, "agents"),
        env=environment(root, extra_env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def snapshot_files(root: str) -> list[tuple[str, int, str]]:
    """(job, seq, file relative to the store) of every snapshot in the catalog."""
    db = sqlite3.connect(f"file:{os.path.join(root, 'store', 'catalog.db')}?mode=ro", uri=True)
    try:
        return list(db.execute("SELECT job_id, seq, file FROM snapshots ORDER BY job_id, seq"))
    finally:
        db.close()


def checks(root: str) -> list[list[str]]:
    """The commands a golden folder is checked with, in order (resumes last)."""
    commands = []
    snapshots = snapshot_files(root)
    for _, _, file in snapshots:
        commands.append(["verify", "--store", "{root}/store", f"{{root}}/store/{file}"])
    for job, seq, _ in snapshots:
        commands.append(["inspect", "--store", "{root}/store", f"{job}@{seq}"])
    for job, _, _ in JOBS:
        commands.append(["resume", "--store", "{root}/store", job])
    return commands


def fixed_root(minor: str) -> str:
    """Where a golden job runs and is replayed: a job resumes in the working directory
    it was started in, so that directory must exist again at the same path."""
    return f"/tmp/snapstate-golden-{minor}"  # the same on every machine


@contextlib.contextmanager
def exclusive(root: str):
    """The fixed folder, emptied, for one user at a time (parallel test runs)."""
    with open(root + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(root, ignore_errors=True)
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def private_store(root: str) -> None:
    """A store's folder and key files as snapstate makes them (0700, 0600): git keeps
    neither mode, and snaprun refuses a key file others can read."""
    store = os.path.join(root, "store")
    os.chmod(store, 0o700)
    for name in ("keys.json", "store.json"):
        os.chmod(os.path.join(store, name), 0o600)


def replay(golden: str, root: str) -> tuple[list[dict], dict[str, str]]:
    """Copy a golden folder to `root` and run its checks there: (commands with exit code
    and outputs, the files the agents wrote)."""
    shutil.copytree(golden, root, ignore=shutil.ignore_patterns("expected.json"))
    private_store(root)
    recorded = []
    for args in checks(root):
        result = run(args, root)
        recorded.append(
            {
                "args": args,
                "exit": result.returncode,
                "stdout": result.stdout.replace(root, "{root}"),
                "stderr": result.stderr.replace(root, "{root}"),
            }
        )
    files = {}
    for name in WRITTEN:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            files[name] = f.read()
    return recorded, files


def main() -> int:
    import snapstate

    minor = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    out = os.path.join(GOLDEN, snapstate.__version__, minor)
    root = fixed_root(minor)
    with exclusive(root):
        shutil.copytree(AGENTS, os.path.join(root, "agents"))
        for job, module, fault in JOBS:
            first = run(
                ["run", "--store", "{root}/store", "--job", job, f"{module}:main"],
                root,
                {"SNAPSTATE_FAULT": fault},
            )
            if first.returncode != -9:
                sys.stderr.write(first.stdout + first.stderr)
                raise SystemExit(f"{job}: the first run was not killed at {fault}")
        catalog = sqlite3.connect(os.path.join(root, "store", "catalog.db"))
        try:  # everything into catalog.db itself: the folder holds no -wal file
            catalog.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            catalog.close()
        if os.path.exists(out):
            shutil.rmtree(out)
        os.makedirs(out)
        for part in ("store", "agents"):
            shutil.copytree(
                os.path.join(root, part),
                os.path.join(out, part),
                ignore=shutil.ignore_patterns("__pycache__", "*-shm", "*-wal", "*.lock"),
            )
    with exclusive(root):  # replayed from the golden folder, as the test does
        recorded, files = replay(out, root)
    expected = {
        "snapstate": snapstate.__version__,
        "python": sys.version.split()[0],
        "root": root,
        "commands": recorded,
        "files_after": files,
    }
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(out) for n in names)
    print(f"wrote {out} ({size // 1024} KiB, {len(recorded)} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
