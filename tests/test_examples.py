"""The README's example agents run as documented, on the embedded default store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import snaprun

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_purchase_example_waits_is_approved_and_orders_once(tmp_path):
    """examples/purchase_agent.py as the README shows it: run (exit 3, waiting, no
    process), `approvals` lists the exact scope, `approve`, `worker --once` finishes it
    with one order; a second worker pass changes nothing."""
    agent = tmp_path / "purchase_agent.py"
    shutil.copy(EXAMPLES / "purchase_agent.py", agent)
    first = snaprun("run", "--job", "po", agent, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    assert first.stdout == "best quote: acme at 4200 USD\n"
    listed = snaprun("approvals", "--json", cwd=tmp_path)
    (approval,) = json.loads(listed.stdout)
    assert approval["scope"] == {"vendor": "acme", "max_usd": 5000}
    approve = snaprun("approve", "po", approval["id"], "--by", "alice", cwd=tmp_path)
    assert approve.returncode == 0, approve.stderr
    worker = snaprun("worker", "--once", cwd=tmp_path)
    assert worker.returncode == 0, worker.stderr
    assert (tmp_path / "purchase_orders.txt").read_text() == "acme 4200\n"
    again = snaprun("worker", "--once", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "purchase_orders.txt").read_text() == "acme 4200\n"
    ls = json.loads(snaprun("ls", "--json", cwd=tmp_path).stdout)
    assert [(j["job"], j["status"]) for j in ls] == [("po", "done")]


def test_the_async_example_resumes_every_task(tmp_path):
    """Crash window: SIGKILL right after snapshot 1 of examples/async_research_agent.py
    (three asyncio tasks in a TaskGroup, their look-ups in flight while one task asks
    for the snapshot). The resume continues every task; the report and the result are
    the uninterrupted run's, and each look-up is recorded once."""
    agent = tmp_path / "async_research_agent.py"
    shutil.copy(EXAMPLES / "async_research_agent.py", agent)
    base = snaprun("run", "--store", tmp_path / "b", "--job", "r", agent, cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    assert base.result == "6" and base.stdout.startswith("report on durable agents:\n")
    store = tmp_path / "k"
    killed = snaprun(
        "run", "--store", store, "--job", "r", agent, cwd=tmp_path, fault="after-snapshot:1"
    )
    assert killed.returncode == -9, killed.stderr
    resumed = snaprun("resume", "--store", store, "r", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    report = resumed.stdout[resumed.stdout.index("report on") :]
    assert report == base.stdout and resumed.result == "6"
    assert resumed.stdout.count("resumed from snapshot 1") == 3  # one per task
    effects = snaprun("effects", "--store", store, "r", cwd=tmp_path)
    assert effects.stdout.count("look_up(") == 6, effects.stdout
