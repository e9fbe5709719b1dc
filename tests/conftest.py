"""Shared test helpers: run snaprun in a real subprocess, with fault points."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

AGENTS = Path(__file__).parent / "agents"
SNAPRUN = str(Path(sys.executable).with_name("snaprun"))


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow", action="store_true", default=False, help="run long sweeps marked slow"
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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
) -> Run:
    """Run `snaprun ARGS...` in a fresh process (SIGKILLed by itself at `fault`)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.pop("SNAPSTATE_FAULT", None)
    if fault:
        full_env["SNAPSTATE_FAULT"] = fault
    full_env.update(env or {})
    exe = [SNAPRUN] if python is None else [python, "-m", "snapstate.runtime._cli"]
    proc = subprocess.run(
        exe + [str(a) for a in args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
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


@pytest.fixture
def workdir(tmp_path):
    """A working directory holding a copy-free view of the test agents."""
    return tmp_path
