"""Restoring keeps no hidden references: a restored job's values are freed when the
agent drops them, and the morph registry empties when the restored frames finish."""

from __future__ import annotations

import gc

from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

from snapstate.runtime import _morph
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers._home import Home


def test_dropped_local_is_freed_after_restore_in_a_new_process(tmp_path):
    """Crash window: SIGKILL after the snapshot; the resumed agent frees what it drops."""
    killed = snaprun(
        "run",
        "--store",
        tmp_path,
        "--job",
        "job",
        AGENTS / "memory_agent.py",
        cwd=tmp_path,
        fault="after-snapshot:1",
    )
    assert killed.returncode == -9
    assert snapshot_seqs(tmp_path, "job") == [1]
    resumed = snaprun("resume", "--store", tmp_path, "job", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "freed True\n"


def test_registry_empties_after_a_restored_job_finishes(tmp_path):
    """In one process: after the restored job returns, no morph entry remains."""
    home = Home(str(tmp_path))
    job = Job.create(
        home, EntryPoint("memory_agent", "main", str(AGENTS / "memory_agent.py")), [], "job"
    )
    assert job.run() is True
    before = len(_morph._MORPHS)
    home.catalog.set_status("job", "interrupted")  # as a kill leaves it: a done job
    assert Job.open(home, "job").resume(at=1) is True  # never resumes
    gc.collect()
    assert len(_morph._MORPHS) == before
    home.close()
