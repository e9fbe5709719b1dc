"""The fork server (tests/forkserver.py) gives snaprun() a process that is what an
exec'd `snaprun` is: same argv, environment, stdio, modules, signals, process group,
descriptors, __main__; its own pid, random state and (from one run to the next) hash
seed; SIGKILLed at a fault point and killed at a timeout like an exec'd one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor

import forkserver
import pytest
from helpers import AGENTS, snaprun

PROBE = AGENTS / "fs_probe.py"
NUMPY_PROBE = AGENTS / "fs_probe_numpy.py"


def _probe(tmp_path, job: str, probe=PROBE, **kw) -> dict:
    run = snaprun("run", "--job", job, probe, cwd=tmp_path, **kw)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _same_command_twice(tmp_path, probe=PROBE) -> tuple[dict, dict]:
    """The probe's reports of one command line exec'd, then forked."""
    exec_ = _probe(tmp_path, "same", probe, fresh=True)
    shutil.rmtree(tmp_path / ".snapstate")
    forked = _probe(tmp_path, "same", probe)
    for report in (exec_["report"], forked["report"]):
        report["main"]["__loader__"] = re.sub(" at 0x[0-9a-f]+", "", report["main"]["__loader__"])
    return exec_, forked


def _agent(tmp_path, body: str):
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_forked_snaprun_is_what_an_exec_gives(tmp_path):
    """Everything the probe agent sees of its process is the same, forked or exec'd
    (the lease thread's name holds the job id); only the parent differs."""
    exec_, forked = _same_command_twice(tmp_path)
    assert forked["report"] == exec_["report"]
    assert forked["report"]["pgrp"] == os.getpgrp()  # a Ctrl-C to pytest's group reaches it
    # The servers too: a child's exit never orphans pytest's group (an orphaned group
    # with a stopped member, e.g. a runner paused at a :stop fault, gets SIGHUP).
    for flavour in forkserver._FLAVOURS.values():
        for server in filter(None, flavour.servers):
            assert os.getpgid(server.proc.pid) == os.getpgrp()
    assert exec_["drawn"]["ppid"] == os.getpid()
    assert forked["drawn"]["pid"] not in (os.getpid(), exec_["drawn"]["pid"])


def test_a_library_flavour_child_is_what_an_exec_gives(tmp_path):
    """An agent importing numpy.random at its top is forked from a server that
    imported it already: the process is the same as an exec'd one (the same modules,
    loggers, threads...), and numpy's legacy global RandomState is its own."""
    assert forkserver.preload_for(["run", str(NUMPY_PROBE)], tmp_path, {}) == ("numpy.random",)
    before = forkserver.stats["forked numpy.random"]
    exec_, forked = _same_command_twice(tmp_path, NUMPY_PROBE)
    assert forked["report"] == exec_["report"]
    # three children: two of them of the same server (the servers take turns)
    drawn = [forked["drawn"]] + [_probe(tmp_path, f"n{i}", NUMPY_PROBE)["drawn"] for i in (1, 2)]
    assert len({d["numpy_random"] for d in [exec_["drawn"], *drawn]}) == 4, drawn
    if forkserver.enabled():
        assert forkserver.stats["forked numpy.random"] == before + 3


def test_forked_runs_draw_their_own_random_values(tmp_path):
    """random, snapstate.random() and uuid4 differ in every run; the hash seed differs
    from one run to the next (unless PYTHONHASHSEED pins it for all)."""
    drawn = [_probe(tmp_path, f"r{i}")["drawn"] for i in range(3)]
    for key in ("random", "snapstate_random", "uuid4", "pid"):
        assert len({d[key] for d in drawn}) == 3, (key, drawn)
    if "PYTHONHASHSEED" not in os.environ:
        assert drawn[0]["hash"] != drawn[1]["hash"] != drawn[2]["hash"], drawn


def test_concurrent_runs_each_get_their_own_process(tmp_path):
    """snaprun() from several threads at once (as the kill sweeps run): each run has
    its own stdio and exit status."""
    agent = _agent(tmp_path, "import sys\n\ndef main():\n    print(sys.argv[1])\n    return 1\n")

    def one(i: int):
        return snaprun("run", "--job", f"j{i}", agent, str(i), cwd=tmp_path)

    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(one, range(8)))
    for i, run in enumerate(runs):
        assert (run.returncode, run.stdout, run.result) == (0, f"{i}\n", "1"), run


@pytest.mark.smoke
def test_a_fault_point_sigkills_the_forked_process(tmp_path):
    """The process that SIGKILLs itself is the run's own (returncode -9, reaped when
    snaprun() returns); what it printed before is all there (write-through stdio)."""
    agent = _agent(
        tmp_path,
        """\
        import os
        from snapstate import snapshot

        def main():
            open("pid", "w").write(str(os.getpid()))
            print("before the kill")
            snapshot("one")
            print("never")
        """,
    )
    run = snaprun("run", "--job", "k", agent, cwd=tmp_path, fault="after-snapshot:1")
    assert run.returncode == -9, run.stderr
    assert run.stdout == "before the kill\n"
    pid = int((tmp_path / "pid").read_text())
    assert pid != os.getpid() and not os.path.exists(f"/proc/{pid}")
    resumed = snaprun("resume", "k", cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stdout == "never\n", resumed.stderr


def test_a_timeout_kills_the_forked_process(tmp_path):
    agent = _agent(
        tmp_path,
        """\
        import os, time

        def main():
            open("pid", "w").write(str(os.getpid()))
            print("waiting", flush=True)
            time.sleep(600)
        """,
    )
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        snaprun("run", "--job", "t", agent, cwd=tmp_path, timeout=5)
    pid = int((tmp_path / "pid").read_text())
    assert not os.path.exists(f"/proc/{pid}")
    if forkserver.enabled():
        assert caught.value.output == b"waiting\n"


def test_startup_variables_and_the_switch_exec(tmp_path, monkeypatch):
    """A run that sets a variable an interpreter reads at start is exec'd, and so is
    every run with SNAPSTATE_TEST_FORK=0."""
    before = forkserver.stats.copy()
    _probe(tmp_path, "h", env={"PYTHONHASHSEED": "3"})
    assert forkserver.stats["exec: sets PYTHONHASHSEED"] == before["exec: sets PYTHONHASHSEED"] + 1
    monkeypatch.setenv("SNAPSTATE_TEST_FORK", "0")
    _probe(tmp_path, "off")
    assert (
        forkserver.stats["exec: SNAPSTATE_TEST_FORK=0"] == before["exec: SNAPSTATE_TEST_FORK=0"] + 1
    )


def test_an_uncaught_error_ends_the_forked_process_as_an_exec(tmp_path):
    """snaprun's own exit codes and messages come through unchanged: a usage error."""
    forked = snaprun("resume", "no-such-job", cwd=tmp_path)
    exec_ = snaprun("resume", "no-such-job", cwd=tmp_path, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        exec_.returncode,
        exec_.stdout,
        exec_.stderr,
    )
