"""`snaprun crashtest` and its pytest plugin, over the agents in tests/crash_agents/.

A correct agent (two keyed orders, a snapshot after each) passes, and its --setup stub
provider (tests/crash_agents/counting_provider.py, a real HTTP server on 127.0.0.1 started
fresh for every run) carried out each order exactly once in every trial. Deliberately
broken agents are each reported with a clear line and exit 1:

    plain_agent.py    a plain effect (no key, no lookup) re-executed after a kill: parks
    lookup_agent.py   a lookup that never finds: sent again after a kill (a duplicate)
    clock_agent.py    reads time.time() outside snapstate.now(): nondeterministic
    file_agent.py     appends to a file outside a tracked handle: written twice
    moving_agent.py   moves its own file away: the resume is refused (exit 2)

Each crash window is reached by a real SIGKILL at a named fault point (SNAPSTATE_FAULT),
chosen from what the uninterrupted run reached (SNAPSTATE_FAULT_TRACE). The default run
tries a few kill points per agent (--point, --max-kills); --run-slow sweeps every one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from helpers import SNAPRUN

from snapstate.runtime._crashtest import select

AGENTS = Path(__file__).parent / "crash_agents"
PROVIDER = AGENTS / "counting_provider.py"


def crashtest(
    *args: str, counts: Path | None = None, cwd: Path = AGENTS, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`snaprun crashtest ARGS...`, with the counting provider as --setup when `counts`
    names the file its per-run counts go to."""
    setup = ["--setup", f"{sys.executable} {PROVIDER} {counts}"] if counts else []
    return subprocess.run(
        [SNAPRUN, "crashtest", *setup, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def counted(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def problem_lines(run: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in run.stderr, run.stderr
    return run.stdout.splitlines()


@pytest.mark.smoke
def test_a_correct_agent_passes_and_each_order_is_carried_out_once_per_run(tmp_path):
    """Kills before the first keyed order's request, while snapshot 1 is written, after
    the second order's request, and right after the last snapshot (four points spread
    by --max-kills over the ten the uninterrupted run reached): every resumed job
    prints, returns and leaves what the uninterrupted run did, exit 0, nothing on
    stdout but the JSON report; each run's fresh provider carried out each order once
    (the --setup's PROVIDER_URL wins over one inherited from crashtest's environment)."""
    counts = tmp_path / "counts"
    stale = {"PROVIDER_URL": "http://127.0.0.1:9"}  # nothing listens there
    run = crashtest("--json", "--max-kills", "4", "shop_agent.py", counts=counts, env=stale)
    assert run.returncode == 0, (run.stdout, run.stderr)
    report = json.loads(run.stdout)
    assert report["ok"] is True and report["problems"] == []
    tried = [t["point"] for t in report["trials"]]
    assert tried == [
        "effect-before-send:1",
        "before-commit:1",
        "effect-after-send:2",
        "after-snapshot:2",
    ]
    for trial in report["trials"]:  # each was killed where asked, then resumed to the end
        assert trial["runs"][0]["exit_code"] == -9, trial
        assert [r["exit_code"] for r in trial["runs"][1:]] == [0], trial
    assert set(report["not_tried"].values()) == {"--max-kills"} and len(report["not_tried"]) == 6
    assert report["baseline"]["ending"] == "returned ['paper-1', 'ink-1']"
    # two uninterrupted runs and four trials, each with its own provider
    assert counted(counts) == [{"paper": 1, "ink": 1}] * 6
    assert "4 kill point(s) tried: no problem found" in run.stderr


@pytest.mark.slow
def test_a_correct_agent_passes_every_kill_point(tmp_path):
    """The whole sweep of the correct agent: every kill point of both orders and both
    snapshots (10) passes, and every run's provider carried out each order once."""
    counts = tmp_path / "counts"
    run = crashtest("shop_agent.py", counts=counts)
    assert run.returncode == 0 and run.stdout == "", (run.stdout, run.stderr)
    assert "10 kill point(s) tried: no problem found" in run.stderr
    assert counted(counts) == [{"paper": 1, "ink": 1}] * 12


def test_a_plain_effect_that_parks_is_reported_and_reconciled_with_the_truth(tmp_path):
    """plain_agent.py's effect has neither an idempotency key nor a lookup: killed before
    its request or after it, the resume re-executes it, its outcome is unknown and the
    job parks. Each park is one problem line naming the effect and how crashtest
    reconciled it (the kill point says whether the request went out); with
    --allow-parks the same kills pass, and the truthful reconcile means the provider
    carried the notification out exactly once in every run and the result is the
    baseline's."""
    counts = tmp_path / "counts"
    points = ["--point", "effect-before-send:1", "--point", "effect-after-send:1"]
    run = crashtest(*points, "plain_agent.py", counts=counts)
    assert run.returncode == 1, run.stderr
    lines = problem_lines(run)
    assert len(lines) == 2, lines
    before, after = lines
    assert before.startswith("effect-before-send:1: parked: plain_agent.notify('hello') at ")
    assert "reconciled it as not committed" in before and "snaprun reconcile" in before
    assert after.startswith("effect-after-send:1: parked: plain_agent.notify('hello') at ")
    assert "reconciled it as committed" in after
    assert counted(counts) == [{"hello": 1}] * 4

    counts.unlink()
    run = crashtest("--allow-parks", *points[2:], "plain_agent.py", counts=counts)
    assert run.returncode == 0 and run.stdout == "", (run.stdout, run.stderr)
    assert counted(counts) == [{"hello": 1}] * 3


def test_an_effect_sent_again_after_a_kill_is_a_duplicate(tmp_path):
    """lookup_agent.py's lookup= never finds the notification, so after a kill between
    the request and its recorded answer the resume sends it again: an ambiguous effect
    that did not park. crashtest counts the requests (the trace's effect-before-send)
    and reports the duplicate, and the other answer it got."""
    counts = tmp_path / "counts"
    run = crashtest("--point", "effect-after-send:1", "lookup_agent.py", counts=counts)
    assert run.returncode == 1, run.stderr
    lines = problem_lines(run)
    assert (
        "effect-after-send:1: duplicate: lookup_agent.notify('hello') at lookup_agent.py:29 "
        "was sent 2 times (1 in the uninterrupted run)"
    ) in "\n".join(lines)
    assert any(line.startswith("effect-after-send:1: result: ") for line in lines), lines
    assert counted(counts)[-1] == {"hello": 2}  # the provider did act twice


def test_reading_the_clock_outside_now_is_nondeterministic_and_the_budget_is_kept():
    """clock_agent.py prints time.time(): the two uninterrupted runs differ, which is
    reported once, on the baseline, with the line that differs and the fix. With a
    --budget spent by the uninterrupted run no trial starts, each kill point is named as
    not tried, and that nothing was killed is a problem too (never "no problem found")."""
    run = crashtest("--json", "--budget", "0.001", "clock_agent.py")
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    problem, untested = report["problems"]
    assert untested == {
        "kind": "untested",
        "point": "baseline",
        "message": "the --budget of 0.001s ran out before the first trial: none of the 2 "
        "kill point(s) was tried, so nothing was tested; give a larger --budget, or fewer "
        "kill points (--max-kills, --point)",
    }
    assert problem["kind"] == "nondeterministic" and problem["point"] == "baseline"
    assert problem["message"].startswith(
        "two uninterrupted runs printed different stdout (line 1 is 'started at "
    ), problem
    assert "snapstate.now()" in problem["message"]
    assert report["kills"] == 0
    assert report["not_tried"] == dict.fromkeys(report["baseline"]["points"], "--budget")
    assert len(report["not_tried"]) == 2
    assert "the --budget ran out: 2 kill point(s) not tried" in run.stderr


def test_a_file_written_outside_a_tracked_handle_is_written_twice():
    """file_agent.py appends a line, then snapshots: killed while snapshot 2 is written,
    the resume starts from snapshot 1 and appends "step 1" again."""
    run = crashtest("--point", "before-commit:2", "file_agent.py")
    assert run.returncode == 1, run.stderr
    assert problem_lines(run) == [
        "before-commit:2: files: file 'journal.txt' differs: an extra line 3: 'step 1' "
        "(a line written again after the kill)"
    ]
    assert not (AGENTS / "journal.txt").exists()  # the agent's own folder is untouched


def test_a_refused_resume_is_reported_and_the_json_report_has_its_shape():
    """moving_agent.py moves its own file away after snapshot 1: a kill after snapshot 2
    leaves a job whose resume is refused (exit 2). The refusal, the missing output and
    the other ending are problems; --json holds them with the baseline, the trials and
    their runs."""
    run = crashtest("--json", "--point", "after-snapshot:2", "moving_agent.py")
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    assert set(report) == {
        "agent",
        "args",
        "ok",
        "baseline",
        "kills",
        "trials",
        "problems",
        "not_tried",
        "scratch",
    }
    assert report["ok"] is False and report["kills"] == 1 and report["scratch"] is None
    assert report["baseline"]["points"] == [
        "before-commit:1",
        "after-snapshot:1",
        "before-commit:2",
        "after-snapshot:2",
    ]
    assert report["not_tried"] == {
        "before-commit:1": "--point",
        "after-snapshot:1": "--point",
        "before-commit:2": "--point",
    }
    (trial,) = report["trials"]
    assert [r["command"] for r in trial["runs"]] == ["run", "resume"]
    assert [r["exit_code"] for r in trial["runs"]] == [-9, 2]
    kinds = [(p["kind"], p["point"]) for p in report["problems"]]
    assert kinds == [
        ("refusal", "after-snapshot:2"),
        ("stdout", "after-snapshot:2"),
        ("result", "after-snapshot:2"),
    ]
    refusal = report["problems"][0]["message"]
    assert "`snaprun resume` was refused (exit 2)" in refusal and "no longer exists" in refusal
    assert (AGENTS / "moving_agent.py").exists()


def test_usage_errors_exit_2():
    """No such agent file, and a --setup that exits before `ready`: exit 2, one error line
    naming what to fix, no traceback."""
    run = crashtest("missing_agent.py")
    assert run.returncode == 2 and "no agent file at missing_agent.py" in run.stderr
    run = crashtest("--setup", "echo starting; exit 3", "shop_agent.py")
    assert run.returncode == 2, run.stderr
    assert (
        "the --setup command 'echo starting; exit 3' exited with 3 before it printed `ready`"
        in (run.stderr)
    )
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_select_spreads_the_kill_points():
    points = [f"p{i}" for i in range(10)]
    assert select(points, None) == points and select(points, 20) == points
    assert select(points, 0) == [] and select(points, 1) == ["p5"]
    assert select(points, 3) == ["p0", "p4", "p9"]


def test_the_pytest_plugin_crashtests_an_agent_that_waits(tmp_path):
    """A user's test enables the plugin with `-p snapstate.testing.pytest_plugin` and
    gets the `crashtest` fixture; waiting_agent.py requests an approval (approved) and
    sleeps an hour (fast-forwarded through SNAPSTATE_CLOCK_OFFSET), killed right after
    the approval is requested: the resume waits for the approval again (exit 3), then
    for the timer (exit 3), then ends as the uninterrupted run did. The plugin is not
    loaded by an entry point."""
    test = tmp_path / "test_user_agent.py"
    test.write_text(
        "def test_agent(crashtest):\n"
        f"    report = crashtest({str(AGENTS / 'waiting_agent.py')!r},"
        " points=['approval-after-request:1'])\n"
        "    report.assert_ok()\n"
        "    assert report.baseline['ending'] == \"returned 'published'\"\n"
        "    assert [t.point for t in report.trials] == ['approval-after-request:1']\n"
        "    assert [r['exit_code'] for r in report.trials[0].runs] == [-9, 3, 3, 0]\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "snapstate.testing.pytest_plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            str(test),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert not any(ep.value.startswith("snapstate") for ep in entry_points(group="pytest11"))
