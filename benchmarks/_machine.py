"""The machine's facts that go with the figures: CPU, cores, memory, OS, each Python with
its SQLite and libraries, the file system under the temporary directory, the load, and
what else was using the CPU.

Standard library only. Processes are named by their command name alone (never their
arguments: a command line can hold a password, such as a database URL's).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import time
from typing import Any

# Run by each benchmarked interpreter: its version, SQLite, whether snapstate imports
# (metadata alone can outlive an uninstalled package) and the libraries the figures
# depend on (None where one is not installed).
_PROBE = r"""
import importlib.metadata, json, sqlite3, sys
def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
names = ("snapstate", "greenlet", "cloudpickle", "zstandard", "pyfastcdc", "numpy",
         "langgraph", "langgraph-checkpoint-sqlite", "dbos", "psycopg")
try:
    import snapstate
    importable = True
except ImportError:
    importable = False
print(json.dumps({"python": sys.version.split()[0], "implementation": sys.implementation.name,
                  "executable": sys.executable, "sqlite": sqlite3.sqlite_version,
                  "snapstate": importable, "libraries": {n: version(n) for n in names}}))
"""


def python_facts(python: str) -> dict[str, Any]:
    """What `python` is: version, SQLite, libraries. Raises OSError/ValueError when it
    cannot be run or answers something else."""
    proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise ValueError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
    facts: dict[str, Any] = json.loads(proc.stdout)
    return facts


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def memory() -> str:
    fields = {}
    for line in _read("/proc/meminfo").splitlines():
        name, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            fields[name] = int(rest.split()[0]) * 1024
    if "MemTotal" not in fields:
        return "?"
    return (
        f"{fields['MemTotal'] / 2**30:.1f} GiB, "
        f"{fields.get('MemAvailable', 0) / 2**30:.1f} GiB available"
    )


def os_name() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return platform.system()


def filesystem(path: str) -> str:
    """The mount point and file system type holding `path` (from /proc/mounts)."""
    real = os.path.realpath(path)
    best = ("?", "?")
    for line in _read("/proc/mounts").splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if real == point or real.startswith(point.rstrip("/") + "/"):
            if best[0] == "?" or len(point) > len(best[0]):
                best = (point, fields[2])
    note = " (tmpfs: an fsync costs nothing there)" if best[1] == "tmpfs" else ""
    return f"{path} on {best[0]} ({best[1]}){note}"


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (command name, user + system clock ticks) of every process."""
    out = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if ")" not in stat:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (name, int(fields[11]) + int(fields[12]))
    return out


def busy_processes(seconds: float = 1.0, top: int = 8) -> list[tuple[str, int, float]]:
    """The processes using the CPU over `seconds`: (command name, pid, % of one core),
    busiest first, those above 1% only. Empty where /proc is missing."""
    before = _cpu_ticks()
    if not before:
        return []
    time.sleep(seconds)
    after = _cpu_ticks()
    hertz = os.sysconf("SC_CLK_TCK")
    own = os.getpid()
    rows = []
    for pid, (name, ticks) in after.items():
        if pid == own or pid not in before:
            continue
        percent = 100.0 * (ticks - before[pid][1]) / hertz / seconds
        if percent >= 1.0:
            rows.append((name, pid, percent))
    return sorted(rows, key=lambda r: -r[2])[:top]


def git_commit(root: str) -> str:
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except OSError:
        return "?"
    if head.returncode != 0:
        return "?"
    return head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def facts(root: str) -> dict[str, Any]:
    """The facts that do not depend on the interpreter, taken before the run."""
    try:
        cores = f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable by this process)"
    except AttributeError:
        cores = str(os.cpu_count())
    return {
        "cpu": cpu_model(),
        "cores": cores,
        "memory": memory(),
        "os": f"{os_name()}, {platform.system()} {platform.release()} {platform.machine()}",
        "tmp": filesystem(tempfile.gettempdir()),
        "checkout": filesystem(root),
        "commit": git_commit(root),
    }
