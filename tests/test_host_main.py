"""A host program that runs jobs through the Python API from the agent's own folder:
its `__main__` and the modules it loaded before the agent are not the job's, so no
snapshot holds them and a resume in the host's process leaves their globals alone
(runtime/_agent.py, agent_modules). Modules the agent imported, and a host module the
agent shares an object with, are the job's and come back in a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

AGENT = """\
import agent_helper
import snapstate
from settings import CONFIG


def main():
    agent_helper.STEPS.append("one")
    CONFIG["seen"] = CONFIG.get("seen", 0) + 1
    snapstate.snapshot("one")
    snapstate.sleep(7200)
    agent_helper.STEPS.append("two")
    return {"steps": list(agent_helper.STEPS), "config": dict(CONFIG)}
"""

HOST = """\
import json, os, sys
import host_helper  # the host's own module, in the agent's folder, loaded first
import settings  # loaded first too, but the agent shares its CONFIG dict
import snapstate
from snapstate.runtime._clock import FakeClock, set_clock

HOST_STATE = ["host"]
clock = FakeClock()
set_clock(clock)
store = snapstate.Store(sys.argv[1])
import agent  # the host imports the agent's script itself before starting it
first = store.start(agent.__file__, job_id="j")
HOST_STATE.append("after")
host_helper.VALUE = "changed by the host"
if sys.argv[2] == "resume-here":
    clock.advance(7201)
    second = store.resume("j")
    result = second.result
else:
    result = None
print(json.dumps({
    "first": first.status,
    "result": result,
    "host_state": HOST_STATE,
    "host_helper": host_helper.VALUE,
}))
"""


def _write(folder: Path) -> None:
    (folder / "agent.py").write_text(AGENT)
    (folder / "agent_helper.py").write_text("STEPS = []\n")
    (folder / "host_helper.py").write_text('VALUE = "host helper"\n')
    (folder / "settings.py").write_text("CONFIG = {}\n")
    (folder / "host.py").write_text(HOST)


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSTATE_")}
    environ.update(env)
    return subprocess.run(args, cwd=cwd, env=environ, capture_output=True, text=True, timeout=120)


def _snaprun(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "snapstate.runtime._cli", *args], cwd, **env)


def test_a_host_in_the_agents_folder_keeps_its_globals(tmp_path):
    folder = tmp_path / "agent"
    folder.mkdir()
    _write(folder)
    store = tmp_path / "store"
    out = _run([sys.executable, "host.py", str(store), "resume-here"], folder)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["first"] == "waiting"
    # The resume in the host's process put the job's state back, not the host's.
    assert seen["result"] == {"steps": ["one", "two"], "config": {"seen": 1}}
    assert seen["host_state"] == ["host", "after"]
    assert seen["host_helper"] == "changed by the host"


def test_no_snapshot_holds_the_hosts_modules_and_a_new_process_gets_the_agents(tmp_path):
    folder = tmp_path / "agent"
    folder.mkdir()
    _write(folder)
    store = tmp_path / "store"
    out = _run([sys.executable, "host.py", str(store), "stop"], folder)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["first"] == "waiting"

    shown = _snaprun("inspect", "j", "--json", cwd=tmp_path, SNAPSTATE_HOME=str(store))
    assert shown.returncode == 0, shown.stderr
    held = set(json.loads(shown.stdout)["globals"])
    assert "__main__" not in held and "host_helper" not in held
    assert {"agent", "agent_helper", "settings"} <= held

    resumed = _snaprun(
        "resume", "j", cwd=tmp_path, SNAPSTATE_HOME=str(store), SNAPSTATE_CLOCK_OFFSET="7201"
    )
    assert resumed.returncode == 0, resumed.stderr
    said = resumed.stdout + resumed.stderr
    assert "main() returned {'steps': ['one', 'two'], 'config': {'seen': 1}}" in said
