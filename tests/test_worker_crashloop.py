"""A job whose runner dies right after each snapshot it writes is not restarted at once
forever (issue 21: "55 restarts in 30 s, never backed off and never marked failed").
Before, any new snapshot reset the worker's crash count, and such a job writes one per
run. Now a run counts as progress only when it went on after a snapshot it wrote (a
later snapshot, or an outcome): the job is retried with a growing back-off and marked
failed after --max-crashes runs, with its last error; `snaprun ls` and `snaprun log`
show the count, the back-off and the error. A job that does progress (two snapshots
per run) is not given up on. Real processes: the agent SIGKILLs itself
(tests/agents/wk_crashloop.py); time moves through the clock seam."""

from __future__ import annotations

import json
import os
import re
import signal

from helpers import AGENTS, snaprun
from test_worker import job_row, snapshot_count, start_worker, wait_until, worker_once

AGENT = AGENTS / "wk_crashloop.py"


def _start(tmp_path, job, *args):
    run = snaprun("run", "--job", job, AGENT, *args, cwd=tmp_path)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert run.stdout == ("step 1\nstep 2\n" if args else "step 1\n")


def _ls(tmp_path):
    out = snaprun("ls", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return {row["job"]: row for row in json.loads(out.stdout)}


def test_a_job_dying_after_each_snapshot_backs_off_and_is_given_up(tmp_path):
    """Each worker pass (the clock seam moved past the back-off) restarts the job once;
    each run writes one snapshot and dies. The count grows (crash 1, 2, ...), the
    back-off with it, `ls` shows both and the last error, and at --max-crashes 3 the
    job is failed with its last error, after exactly 3 restarts. A pass before the
    back-off is over starts nothing."""
    _start(tmp_path, "loop")
    env = {"PYTHONUNBUFFERED": "1"}
    offset = 0.0
    for crash in (1, 2):
        run = snaprun(
            "worker", "--once", "--max-crashes", "3", cwd=tmp_path,
            env={**env, "SNAPSTATE_CLOCK_OFFSET": str(offset)},
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stderr.count("job loop: resuming in pid") == 1, run.stderr
        assert f"crash {crash} in a row without progress" in run.stderr, run.stderr
        assert job_row(tmp_path, "loop").status == "interrupted"
        assert snapshot_count(tmp_path, "loop") == crash + 1  # one new snapshot per run
        row = _ls(tmp_path)["loop"]
        assert row["crashes"]["count"] == crash and row["crashes"]["max"] == 3, row
        assert row["crashes"]["gave_up"] is False
        assert "killed by SIGKILL" in row["crashes"]["last_error"], row
        offset += 10.0
    # crash 2 (at offset 10): retried 1 s after it; a pass at an earlier clock starts nothing
    same = snaprun(
        "worker", "--once", "--max-crashes", "3", cwd=tmp_path,
        env={**env, "SNAPSTATE_CLOCK_OFFSET": str(offset - 20.0)},
    )  # fmt: skip
    assert "0 runnable job(s)" in same.stderr, same.stderr
    text = snaprun("ls", "--wide", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": str(offset - 20.0)})
    assert re.search(r"crash 2 of 3 in a row, retry in \d+s: its runner", text.stdout), text.stdout
    last = snaprun(
        "worker", "--once", "--max-crashes", "3", cwd=tmp_path,
        env={**env, "SNAPSTATE_CLOCK_OFFSET": str(offset)},
    )  # fmt: skip
    assert "marked failed" in last.stderr, last.stderr
    row = job_row(tmp_path, "loop")
    assert row.status == "failed", row
    assert "the worker gave up: its runner died 3 times in a row without progress" in row.error
    assert "killed by SIGKILL" in row.error
    listed = _ls(tmp_path)["loop"]["crashes"]
    assert listed["gave_up"] is True and listed["count"] == 3 and listed["retry_at"] is None
    wide = snaprun("ls", cwd=tmp_path, env={"COLUMNS": "1000"}).stdout
    assert "the worker gave up: its runner died 3 times" in wide, wide
    log = snaprun("log", "--wide", "loop", cwd=tmp_path)
    assert log.returncode == 0, log.stderr
    assert log.stdout.count("crash") >= 2 and "retrying in 1s" in log.stdout, log.stdout
    events = json.loads(snaprun("log", "--json", "loop", cwd=tmp_path).stdout)
    assert [e["kind"] for e in events].count("crash") == 2
    assert events[-1]["kind"] == "failed" and "gave up" in events[-1]["detail"]
    again = snaprun("worker", "--once", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "1000"})
    assert "0 runnable job(s)" in again.stderr, again.stderr


def test_a_running_worker_does_not_restart_a_crash_loop_at_once_forever(tmp_path):
    """The report's setting: one worker polling every 0.1 s. Before, it restarted the
    job at once after every crash, forever; now it gives up after --max-crashes 4
    restarts (at once, then after 1 s, 2 s), with the job failed."""
    _start(tmp_path, "busy")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    worker = start_worker(tmp_path, env, "--poll", "0.1", "--max-crashes", "4")
    try:
        wait_until("the job given up", lambda: job_row(tmp_path, "busy").status == "failed", 60)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    log = (tmp_path / "worker.err").read_text()
    assert log.count("job busy: resuming in pid") == 4, log
    assert "retrying now" in log and "retrying in 1s" in log and "retrying in 2s" in log, log
    assert snapshot_count(tmp_path, "busy") == 5


def test_a_job_that_goes_on_after_its_snapshots_is_not_given_up(tmp_path):
    """Each run writes two snapshots, then dies: it went on after the first, so each
    crash counts as a first one (retried at once) and the job is never given up on at
    --max-crashes 2, though it dies on every run."""
    _start(tmp_path, "steady", "two")
    for _ in range(4):
        run = worker_once(tmp_path, dict(os.environ), "--max-crashes", "2")
        assert "crash 1 in a row without progress" in run.stderr, run.stderr
        assert "retrying now" in run.stderr
    assert job_row(tmp_path, "steady").status == "interrupted"
    assert snapshot_count(tmp_path, "steady") == 2 + 4 * 2
