"""A catalog row is hostile input: a job whose entry point in catalog.db is not one (an
edited `jobs.entry`) is shown as damaged by `ls`, and refused by `resume` with one clear
line and exit 2, nothing run; the other jobs are listed as before."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import pytest
from helpers import AGENTS, clean_refusal, snaprun

LOOPS = AGENTS / "loops.py"


@pytest.mark.parametrize(
    "entry",
    [{"module": 5}, {"function": "main"}, [1, 2], "x", {"module": "m", "function": ["f"]}],
    ids=["module-int", "no-module", "a-list", "a-string", "function-list"],
)
def test_a_damaged_entry_point_is_shown_and_refused(tmp_path, entry):
    store = tmp_path / "store"
    for job in ("good", "bad"):
        run = snaprun(
            "run", "--store", store, "--job", job, LOOPS, cwd=tmp_path, fault="after-snapshot:1"
        )
        assert run.returncode == -9, run.stderr
    with closing(sqlite3.connect(store / "catalog.db", isolation_level=None)) as db:
        db.execute("UPDATE jobs SET entry = ? WHERE job_id = 'bad'", (json.dumps(entry),))
    listed = snaprun("ls", "--store", store, "--wide", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:] if line.strip()}
    assert "damaged entry point" in lines["bad"] and str(LOOPS) in lines["good"]
    refused = snaprun("resume", "--store", store, "bad", cwd=tmp_path)
    assert refused.returncode == 2
    clean_refusal(refused, "catalog row jobs (job bad", "entry point", "nothing was run")
