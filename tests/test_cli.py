"""The snaprun commands around a job: ls, inspect, log, export, verify, fork, prune,
resume --at, and the exit codes and streams of the CLI contract."""

from __future__ import annotations

import json
import shutil

import pytest
from chunked import chunk_rows, manifest, snapshot_seqs
from helpers import AGENTS, clean_refusal, snaprun

LOOPS = AGENTS / "loops.py"


@pytest.fixture(scope="module")
def _killed_store(tmp_path_factory):
    """One loops.py job SIGKILLed right after its snapshot 3 (of 6), for the module:
    never changed, tests work on copies."""
    root = tmp_path_factory.mktemp("killed")
    store = root / "store"
    run = snaprun(
        "run", "--store", store, "--job", "job", LOOPS, cwd=root, fault="after-snapshot:3"
    )
    assert run.returncode == -9
    return store, run


@pytest.fixture
def killed_job(_killed_store, tmp_path):
    """A loops.py job SIGKILLed right after its snapshot 3 (of 6): a copy of the module's
    killed store (catalog, WAL, snapshot files, the dead runner's lease) in tmp_path."""
    pristine, run = _killed_store
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    return store, tmp_path, run


def _json(run):
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.smoke
def test_ls_shows_a_killed_job_as_interrupted(killed_job):
    """Crash window: SIGKILL after snapshot 3; `ls` shows the job interrupted at 3."""
    store, cwd, _ = killed_job
    rows = _json(snaprun("ls", "--store", store, "--json", cwd=cwd))
    assert [(r["job"], r["status"], r["snapshots"], r["latest"]) for r in rows] == [
        ("job", "interrupted", 3, 3)
    ]
    table = snaprun("ls", "--store", store, cwd=cwd)
    assert "interrupted" in table.stdout and table.stderr == ""


def test_inspect_shows_frames_source_and_locals(killed_job):
    """inspect JOB@SEQ lists the frames with file:line, source line and locals."""
    store, cwd, _ = killed_job
    report = _json(snaprun("inspect", "--store", store, "--json", "job@2", cwd=cwd))
    assert report["seq"] == 2 and report["label"] == "while-4"
    (frame,) = report["tasks"][0]["frames"]
    assert frame["function"] == "main" and frame["file"] == str(LOOPS)
    assert frame["source"] == 'snapshot("while-4")'
    assert frame["locals"]["n"] == "4" and frame["locals"]["out"] == "[0, 2, 3, 4]"
    text = snaprun("inspect", "--store", store, "job", cwd=cwd)
    assert f"main()  {LOOPS}:" in text.stdout and "seen = [2, 4, 6, 8, 'else']" in text.stdout


def test_log_is_the_jobs_timeline(killed_job):
    """log shows creation, the lease, each snapshot and, after resume, the outcome."""
    store, cwd, _ = killed_job
    assert snaprun("resume", "--store", store, "job", cwd=cwd).returncode == 0
    events = [
        (e["kind"], e["detail"])
        for e in _json(snaprun("log", "--store", store, "--json", "job", cwd=cwd))
    ]
    kinds = [k for k, _ in events]
    assert kinds[:2] == ["created", "lease"] and kinds[-1] == "done"
    assert ("resumed", "from snapshot 3") in events
    assert [d for k, d in events if k == "snapshot"] == [
        "1 (for-3)",
        "2 (while-4)",
        "3 (nested-x0)",
        "4 (nested-x1)",
        "5 (nested-y0)",
        "6 (nested-y1)",
    ]


def test_resume_at_rewinds_and_drops_later_snapshots(killed_job):
    """resume --at 1 continues from snapshot 1; snapshots 2 and 3 are replaced."""
    store, cwd, killed = killed_job
    base = snaprun("run", "--store", cwd / "base", "--job", "b", LOOPS, cwd=cwd)
    dropped = [manifest(store, "job", seq) for seq in (2, 3)]
    resumed = snaprun("resume", "--store", store, "--at", "1", "job", cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    assert killed.stdout.startswith("for ")  # printed after snapshot 1...
    assert resumed.stdout == base.stdout  # ...so it is printed again
    assert snapshot_seqs(store, "job") == [1, 2, 3, 4, 5, 6]
    # 2 and 3 were written again (under the new lease epoch: other manifests)
    assert all(manifest(store, "job", seq) != old for seq, old in zip((2, 3), dropped))


def test_export_verify_and_resume_the_exported_file(killed_job):
    """export writes a self-contained file; verify accepts it; resume --as runs it."""
    store, cwd, killed = killed_job
    out = cwd / "exported.snap"
    assert snaprun("export", "--store", store, "job@3", "-o", out, cwd=cwd).returncode == 0
    ok = snaprun("verify", "--store", store, out, cwd=cwd)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: job job snapshot 3 (nested-x0)")
    taken = snaprun("resume", "--store", store, out, cwd=cwd)
    assert taken.returncode == 2 and "--as NEW_ID" in taken.stderr
    run = snaprun("resume", "--store", store, "--as", "copy", out, cwd=cwd)
    assert run.returncode == 0, run.stderr
    assert run.stdout == snaprun("resume", "--store", store, "job", cwd=cwd).stdout


def test_fork_runs_a_copy_and_leaves_the_original(killed_job):
    """fork JOB@2 makes a new job resumable from 2; the original still resumes from 3."""
    store, cwd, killed = killed_job
    fork = snaprun("fork", "--store", store, "--as", "twin", "job@2", cwd=cwd)
    assert fork.returncode == 0 and fork.stdout.strip() == "twin"
    twin = snaprun("resume", "--store", store, "twin", cwd=cwd)
    original = snaprun("resume", "--store", store, "job", cwd=cwd)
    assert twin.returncode == original.returncode == 0
    assert "resumed from snapshot 2" in twin.stderr and "resumed from snapshot 3" in original.stderr
    assert twin.stdout.endswith(original.stdout)
    rows = {r["job"]: r for r in _json(snaprun("ls", "--store", store, "--json", cwd=cwd))}
    assert rows["twin"]["parent"] == "job" and rows["twin"]["status"] == "done"


def test_prune_keeps_what_resuming_needs(killed_job):
    """prune --keep-last 1 keeps an interrupted job's latest; --finished drops done jobs."""
    store, cwd, _ = killed_job
    snaprun("run", "--store", store, "--job", "done-job", LOOPS, cwd=cwd)
    assert snaprun("prune", "--store", store, "--keep-last", "1", cwd=cwd).returncode == 0
    assert snapshot_seqs(store, "job") == [3]
    assert snaprun("resume", "--store", store, "job", cwd=cwd).returncode == 0
    pruned = snaprun("prune", "--store", store, "--finished", cwd=cwd)
    assert "2 finished job(s)" in pruned.stdout
    assert _json(snaprun("ls", "--store", store, "--json", cwd=cwd)) == []
    assert snapshot_seqs(store, "job") == []
    assert chunk_rows(store) == []  # no snapshot left: every chunk was swept


def test_prune_older_than_keeps_the_latest(killed_job):
    """--older-than drops old snapshots but never an unfinished job's latest."""
    store, cwd, _ = killed_job
    assert snaprun("prune", "--store", store, "--older-than", "0s", cwd=cwd).returncode == 0
    assert snapshot_seqs(store, "job") == [3]
    assert snaprun("verify", "--store", store, "job@3", cwd=cwd).returncode == 0
    bad = snaprun("prune", "--store", store, "--older-than", "soon", cwd=cwd)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["resume", "nope"], "no job 'nope'"),
        (["inspect", "job@99"], "has no snapshot 99"),
        (["log", "nope"], "no job 'nope'"),
        (["run", "--job", "job", str(LOOPS)], "already exists"),
        (["export", "job", "-o", "x.snap"], "name a snapshot"),
    ],
)
def test_invalid_input_exits_2_without_traceback(killed_job, args, message):
    """Unknown jobs and snapshots, a taken id, a missing @SEQ: exit 2, message, no traceback."""
    store, cwd, _ = killed_job
    run = snaprun(args[0], "--store", store, *args[1:], cwd=cwd)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr and run.stdout == ""


def test_resuming_a_done_job_is_refused(killed_job):
    """A finished job is not run again; the message points to fork."""
    store, cwd, _ = killed_job
    assert snaprun("resume", "--store", store, "job", cwd=cwd).returncode == 0
    again = snaprun("resume", "--store", store, "job", cwd=cwd)
    assert again.returncode == 2 and "snaprun fork job@SEQ" in again.stderr


def test_help_documents_exit_codes(tmp_path):
    """`snaprun help exit-codes` holds the exit-code table (once); the help of run and
    resume lists the codes they can return and points at the table."""
    text = snaprun("help", "exit-codes", cwd=tmp_path).stdout
    assert "0  done" in text and "5  conflict" in text and "3  waiting" in text
    for args in (["run", "--help"], ["resume", "--help"]):
        text = snaprun(*args, cwd=tmp_path).stdout
        assert "0 done" in text and "5 conflict" in text and "3 waiting" in text
        assert "`snaprun help exit-codes`" in text


@pytest.mark.parametrize(
    "args, needles",
    [
        (["bogus"], ["No such command 'bogus'", "`snaprun help`"]),
        (["ls", "--bogus"], ["No such option '--bogus'", "`snaprun help ls`"]),
        (["prune"], ["say what to prune", "`snaprun help prune`"]),
        (["prune", "--older-than", "soon"], ["'soon'", "e.g. 30m"]),
        (["reconcile", "j", "1"], ["--committed or --not-committed"]),
        (["reconcile", "j", "0", "--committed"], ["EFFECT", "0"]),
        (["run", "no_such_agent.py"], ["no_such_agent.py", "`snaprun help run`"]),
        (["fork", "j"], ["name a snapshot: j@SEQ", "`snaprun log j`"]),
        (["resume"], ["Missing argument 'TARGET'"]),
    ],
)
def test_usage_errors_are_one_error_line_like_every_refusal(tmp_path, args, needles):
    """A bad command, option or argument is refused as any invalid input is: exit 2,
    one `snaprun: error:` line naming the problem and where to look (the command's
    --help, unless the message names a next step already), no usage block, nothing
    on stdout, no traceback; no store is created."""
    run = snaprun(*args, cwd=tmp_path)
    line = clean_refusal(run, *needles)
    assert "Usage:" not in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr
    assert line.count("(see") <= 1
    assert not (tmp_path / ".snapstate").exists()


@pytest.mark.parametrize("args", [[], ["keys"]])
def test_a_group_without_a_command_shows_its_help(tmp_path, args):
    """`snaprun` and `snaprun keys` alone show their help (its commands), not an error
    line and not a traceback; nothing goes to the agent's stdout that click would not
    put there (click 8.1 prints the help to stdout with exit 0, later ones to stderr
    with exit 2)."""
    run = snaprun(*args, cwd=tmp_path)
    assert (run.returncode, run.stdout == "") in ((2, True), (0, False)), run
    shown = run.stdout + run.stderr
    listed = "Reading a store:" if not args else "Commands:"  # snaprun's are grouped
    assert listed in shown and "snaprun: error" not in shown and "Traceback" not in shown


def test_agent_failure_exits_1_and_is_resumable(tmp_path):
    """An agent that raises: exit 1, its traceback on stderr, status failed, resumable."""
    agent = tmp_path / "flaky.py"
    agent.write_text(
        "import os\nfrom snapstate import snapshot\n\ndef main():\n"
        "    snapshot('before')\n"
        "    if not os.path.exists('fixed'):\n"
        "        raise RuntimeError('not fixed yet')\n"
        "    print('fixed', flush=True)\n    return 1\n"
    )
    store = tmp_path / "store"
    run = snaprun("run", "--store", store, "--job", "f", agent, cwd=tmp_path)
    assert run.returncode == 1 and "RuntimeError: not fixed yet" in run.stderr
    assert "raise RuntimeError" in run.stderr and "snapstate/runtime" not in run.stderr
    assert _json(snaprun("ls", "--store", store, "--json", cwd=tmp_path))[0]["status"] == "failed"
    (tmp_path / "fixed").write_text("")
    again = snaprun("resume", "--store", store, "f", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == "fixed\n"


def test_job_killed_before_its_first_snapshot_restarts(tmp_path):
    """Crash window: SIGKILL before any snapshot; resume runs the entry from the start."""
    agent = tmp_path / "slow.py"
    agent.write_text(
        "import os, signal\nfrom snapstate import snapshot\n\ndef main():\n"
        "    print('start', flush=True)\n"
        "    if not os.path.exists('again'):\n"
        "        open('again', 'w').close()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    snapshot('one')\n    return 'ok'\n"
    )
    store = tmp_path / "store"
    assert snaprun("run", "--store", store, "--job", "s", agent, cwd=tmp_path).returncode == -9
    again = snaprun("resume", "--store", store, "s", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == "start\n"
    assert "no snapshot yet" in again.stderr
