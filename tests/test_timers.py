"""Durable timers: sleep() and sleep_until() through the clock seam.

A long sleep snapshots the job at the call and hibernates it (exit 3, status waiting,
a wait row with its due time); `snaprun resume` before it is due hibernates it again
without a new snapshot; once due (SNAPSTATE_CLOCK_OFFSET moves the subprocesses' clock)
the job continues right after the call, and what it printed across its runs is what an
uninterrupted run prints. A short sleep is slept in the process (FakeClock in-process,
so no test sleeps). Bad arguments are refused with clear errors."""

from __future__ import annotations

import datetime
import math
import re

import pytest
from helpers import AGENTS, snaprun
from stored import stored_state

import snapstate
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._clock import FakeClock, set_clock
from snapstate.runtime._job import Job
from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SqliteCatalog

TIMER = AGENTS / "timer_agent.py"
UNINTERRUPTED = "step 1\nstep 2 slept enough: True\ndone\n"


@pytest.fixture
def fake_clock():
    clock = FakeClock(1_800_000_000.0)
    old = set_clock(clock)
    yield clock
    set_clock(old)


def _run_in_process(tmp_path, function="main", job_id="t"):
    home = Home(str(tmp_path / "store"))
    try:
        job = Job.create(home, EntryPoint("timer_agent", function, str(TIMER)), [], job_id)
        result = job.run()
        row = home.catalog.get_job(job_id)
        seqs = [r.seq for r in home.catalog.snapshots(job_id)]
        return result, row.status, seqs
    finally:
        home.close()


def _status(store, job):
    catalog = SqliteCatalog(str(store))
    try:
        return catalog.get_job(job).status, catalog.get_wait(job)
    finally:
        catalog.close()


# ------------------------------------------------------------------------ in process
def test_uninterrupted_long_sleep_in_process(tmp_path, fake_clock, monkeypatch, capsys):
    """With SNAPSTATE_HIBERNATE_AFTER above the sleep, a 2-hour sleep is slept in the
    process, through the clock: the FakeClock moved 7200 s, no wait snapshot."""
    monkeypatch.setenv("SNAPSTATE_HIBERNATE_AFTER", "100000")
    result, status, seqs = _run_in_process(tmp_path)
    assert (result, status, seqs) == ("woke", "done", [1, 2])
    assert fake_clock.slept == [pytest.approx(7200.0)]
    assert capsys.readouterr().out == UNINTERRUPTED


def test_short_sleep_is_slept_in_process(tmp_path, fake_clock, monkeypatch, capsys):
    """A sleep within the default threshold (60 s) never hibernates: slept through the
    FakeClock, the job finishes in the same call."""
    monkeypatch.delenv("SNAPSTATE_HIBERNATE_AFTER", raising=False)
    monkeypatch.setenv("SLEEP", "30")
    result, status, seqs = _run_in_process(tmp_path)
    assert (result, status, seqs) == ("woke", "done", [1, 2])
    assert fake_clock.slept == [pytest.approx(30.0)]
    assert capsys.readouterr().out == UNINTERRUPTED


def test_long_sleep_hibernates_in_process(tmp_path, fake_clock, monkeypatch):
    """A sleep past the threshold raises JobWaiting from run(): kind timer, due 2 h on,
    one snapshot at the wait; the message names the call and the due time once."""
    monkeypatch.delenv("SNAPSTATE_HIBERNATE_AFTER", raising=False)
    start = fake_clock.now
    with pytest.raises(snapstate.JobWaiting) as caught:
        _run_in_process(tmp_path)
    assert caught.value.kind == "timer"
    assert caught.value.due == pytest.approx(start + 7200)
    message = str(caught.value)
    assert "sleep at " in message and "timer_agent.py:" in message
    assert len(re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d", message)) == 1, message
    assert fake_clock.slept == []


@pytest.mark.parametrize("zone_hours", [0, 5, -8])
def test_sleep_until_aware_datetime(tmp_path, fake_clock, monkeypatch, zone_hours):
    """sleep_until() with an aware datetime in any time zone waits until that moment
    (45 s after the fake now: slept in process)."""
    zone = datetime.timezone(datetime.timedelta(hours=zone_hours))
    target = datetime.datetime.fromtimestamp(fake_clock.now + 45, zone)
    monkeypatch.setenv("UNTIL", target.isoformat())
    result, status, _ = _run_in_process(tmp_path, "until_main")
    assert status == "done"
    assert result == pytest.approx(45.0)
    assert fake_clock.slept == [pytest.approx(45.0)]


def test_sleep_until_a_past_moment_returns_at_once(tmp_path, fake_clock, monkeypatch):
    """A POSIX timestamp already past: no wait at all."""
    monkeypatch.setenv("UNTIL", str(fake_clock.now - 3600))
    result, status, _ = _run_in_process(tmp_path, "until_main")
    assert (status, result) == ("done", 0.0)
    assert sum(fake_clock.slept) == 0.0


def test_bad_sleep_in_a_job_is_raised_at_the_call(tmp_path, fake_clock):
    """sleep("soon") in a job raises TypeError at the agent's call; the job fails."""
    with pytest.raises(TypeError, match="sleep\\(\\)'s seconds must be a number of seconds"):
        _run_in_process(tmp_path, "bad_main")


@pytest.mark.parametrize(
    ("call", "error", "needle"),
    [
        (lambda: snapstate.sleep(-1), ValueError, "0 or more"),
        (lambda: snapstate.sleep(math.nan), ValueError, "finite"),
        (lambda: snapstate.sleep(math.inf), ValueError, "finite"),
        (lambda: snapstate.sleep("5"), TypeError, "not str"),
        (lambda: snapstate.sleep(True), TypeError, "not bool"),
        (lambda: snapstate.sleep(None), TypeError, "not NoneType"),
        (lambda: snapstate.sleep_until(datetime.datetime(2030, 1, 1)), ValueError, "aware"),
        (lambda: snapstate.sleep_until("2030-01-01T00:00:00Z"), TypeError, "aware datetime"),
        (lambda: snapstate.sleep_until(math.inf), TypeError, "POSIX timestamp"),
        (lambda: snapstate.sleep_until(datetime.date(2030, 1, 1)), TypeError, "aware datetime"),
    ],
)
def test_bad_arguments_are_clear_errors(fake_clock, call, error, needle):
    """Wrong arguments raise at once (in plain Python too), saying what is expected."""
    with pytest.raises(error, match=needle):
        call()
    assert fake_clock.slept == []


def test_plain_python_sleeps_through_the_clock(fake_clock):
    """Outside a job sleep() and sleep_until() just sleep, through the clock seam."""
    snapstate.sleep(12.5)
    aware = datetime.datetime.fromtimestamp(fake_clock.now + 30, datetime.UTC)
    snapstate.sleep_until(aware)
    assert fake_clock.slept == [12.5, pytest.approx(30.0)]


# ------------------------------------------------------------------------ subprocesses
@pytest.mark.smoke
def test_two_hour_sleep_hibernates_and_completes_later(tmp_path):
    """The whole life of a 2-hour sleep through the CLI: run -> exit 3 (waiting, a timer
    row due 2 h later, snapshot 2 taken at the call); resume early -> exit 3 again, no
    new snapshot; resume 7300 s later (clock offset) -> done, and the stdout of the runs
    together is the uninterrupted run's."""
    store = tmp_path / "store"
    first = snaprun("run", "--store", store, "--job", "t", TIMER, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    assert "waits: sleep at" in first.stderr and "snaprun resume t" in first.stderr
    assert "Traceback" not in first.stderr
    status, wait = _status(store, "t")
    assert status == "waiting"
    assert wait is not None and wait.kind == "timer" and wait.seq == 2
    assert wait.due == pytest.approx(wait.since + 7200, abs=5)
    files = stored_state(store, "t")
    assert [r[0] for r in files[0]] == [1, 2]

    early = snaprun("resume", "--store", store, "t", cwd=tmp_path)
    assert early.returncode == 3, early.stderr
    assert early.stdout == ""
    assert stored_state(store, "t") == files
    assert _status(store, "t")[0] == "waiting"

    later = snaprun(
        "resume", "--store", store, "t", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "7300"}
    )
    assert later.returncode == 0, later.stderr
    assert later.result == "'woke'"
    assert first.stdout + early.stdout + later.stdout == UNINTERRUPTED
    assert _status(store, "t") == ("done", None)


def test_killed_after_the_hibernation_snapshot(tmp_path):
    """Crash window: SIGKILL right after the snapshot taken at the sleep is committed,
    before the wait row is recorded. The resume restores that snapshot and polls the
    wait: not due -> hibernates (exit 3) without a new snapshot; due -> done, output as
    uninterrupted."""
    store = tmp_path / "store"
    killed = snaprun(
        "run", "--store", store, "--job", "k", TIMER, cwd=tmp_path, fault="after-snapshot:2"
    )
    assert killed.returncode == -9, killed.stderr
    files = stored_state(store, "k")
    assert [r[0] for r in files[0]] == [1, 2]
    early = snaprun("resume", "--store", store, "k", cwd=tmp_path)
    assert early.returncode == 3, early.stderr
    assert stored_state(store, "k") == files
    status, wait = _status(store, "k")
    assert status == "waiting" and wait is not None and wait.seq == 2
    later = snaprun(
        "resume", "--store", store, "k", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "7300"}
    )
    assert later.returncode == 0, later.stderr
    assert killed.stdout + early.stdout + later.stdout == UNINTERRUPTED
