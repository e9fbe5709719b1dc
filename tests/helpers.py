"""Shared test helpers (`from helpers import ...`): run snaprun in a real process, with
fault points, and check its output.

snaprun() starts each `snaprun` as a child forked from a fork server that has already
imported snapstate (tests/forkserver.py, tests/forkserver_main.py): a real process
with its own pid, SIGKILLed by itself at a fault point, made into what an exec'd
`snaprun` would be (argv, cwd, environment, stdio, process group, random state,
__main__, sys.modules), which saves the ~0.5 s an interpreter start and the imports
cost. `SNAPSTATE_TEST_FORK=0 pytest` exec's every run, as before. The session's
summary line (tests/conftest.py) counts the runs forked and exec'd.

These still exec a fresh interpreter:
  - snaprun(..., fresh=True), and every snaprun() of a test marked
    @pytest.mark.fresh or listed in EXEC_TESTS below: at least one crash test per
    fault-point family keeps the exec path covered
      after-snapshot        test_fidelity.py::test_module_function_entry_point
      before-commit         test_effects.py::test_a_bare_write_that_failed_in_transit_...
      effect-before-prepare test_effects.py::test_values_not_yet_durable_are_drawn_...
      effect-after-prepare, -after-send, -after-confirm
                            test_effects.py::test_now_random_uuid4_are_the_same_after_...
      effect-before-send    test_fencing.py (its own subprocess.Popen, :stop)
    and the start-up refusal of a bad SNAPSTATE_LEASE_TTL
    (test_fencing.py::test_lease_ttl_is_validated);
  - snaprun(..., python=...): another interpreter (test_incompatible.py);
  - a run whose environment changes a variable read while an interpreter starts or
    while the server imported (PYTHONHASHSEED, PYTHONDONTWRITEBYTECODE, TMPDIR, locale,
    TZ...: see tests/forkserver.py), e.g. the hash-seed tests of
    test_effect_arguments.py;
  - tests that start processes with subprocess themselves (Ctrl-C and SIGTERM of
    test_lifecycle.py, the lease races of test_leases.py and test_fencing.py,
    test_writer_crash.py's writer, `python -c` checks).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import forkserver

__all__ = [
    "AGENTS",
    "EXEC_TESTS",
    "SNAPRUN",
    "Run",
    "clean_refusal",
    "set_fresh",
    "snaprun",
    "snapshot_files",
]

AGENTS = Path(__file__).parent / "agents"
SNAPRUN = forkserver.SNAPRUN

# Tests whose snaprun() runs all exec (see the docstring): file::name, every
# parametrization of it.
EXEC_TESTS = frozenset(
    {
        "test_fidelity.py::test_module_function_entry_point",
        "test_effects.py::test_a_bare_write_that_failed_in_transit_is_not_sent_again",
        "test_effects.py::test_values_not_yet_durable_are_drawn_again_consistently",
        "test_effects.py::test_now_random_uuid4_are_the_same_after_a_restore",
        "test_fencing.py::test_lease_ttl_is_validated",
    }
)
_FRESH = [False]  # the running test is marked fresh or listed in EXEC_TESTS


def set_fresh(fresh: bool) -> None:
    """conftest.py, before each test: whether its snaprun() runs all exec."""
    _FRESH[0] = fresh


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> str | None:
        """What main() returned, as snaprun reported it on stderr."""
        for line in self.stderr.splitlines():
            if "main() returned " in line:
                return line.split("main() returned ", 1)[1]
        return None


def snaprun(
    *args,
    cwd,
    fault: str | None = None,
    env: dict | None = None,
    python: str | None = None,
    timeout: float = 120,
    fresh: bool = False,
) -> Run:
    """Run `snaprun ARGS...` in a new process (SIGKILLed by itself at `fault`): forked
    from the fork server, or exec'd with `python`, `fresh=True` or in a fresh test."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.pop("SNAPSTATE_FAULT", None)
    if fault:
        full_env["SNAPSTATE_FAULT"] = fault
    full_env.update(env or {})
    if python is not None:
        forkserver.stats["exec: python="] += 1
    elif fresh or _FRESH[0]:
        forkserver.stats["exec: fresh"] += 1
    argv = [str(a) for a in args]
    preload = forkserver.preload_for(argv, cwd, full_env)
    if python is None and not fresh and not _FRESH[0]:
        forked = forkserver.run(argv, cwd=cwd, env=full_env, timeout=timeout, preload=preload)
        if forked is not None:
            forkserver.note_run(argv, cwd, full_env, preload, forked[2])
            return Run(*forked)
    exe = [SNAPRUN] if python is None else [python, "-m", "snapstate.runtime._cli"]
    proc = subprocess.run(
        exe + argv,
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    forkserver.note_run(argv, cwd, full_env, preload, proc.stderr)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def clean_refusal(run: Run, *needles: str) -> str:
    """exit 2, exactly one `snaprun: error:` line holding every needle, no traceback,
    nothing on stdout; returns the error line."""
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stdout == "", run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert len(errors) == 1, run.stderr
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


def snapshot_files(store: Path, job: str) -> list[Path]:
    """The job's snapshot files in the store, by sequence number."""
    return sorted((Path(store) / "snapshots" / job).glob("*.snap"))


# ------------------------------------------------------------------ worker processes
def child_pids(pid: int) -> list[int]:
    """The pids whose parent is `pid` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def cmdline_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def worker_runners(worker: int) -> list[int]:
    """The worker's job runners: forked from its fork server (a child of the worker),
    or its own children when exec'd; never the fork server or multiprocessing's
    resource tracker themselves."""
    out = []
    for child in child_pids(worker):
        line = cmdline_of(child)
        if "forkserver" in line:
            out.extend(child_pids(child))
        elif "resource_tracker" not in line:
            out.append(child)
    return out
