"""Several tasks in one job: spawn(), gather(), effects in flight on a thread pool,
snapshots and restores of every task (runtime/_tasks.py).

Agents: tests/agents/tasks_orders.py (three tasks placing orders with a real HTTP
provider on 127.0.0.1 that holds each request for the delay the order names, so the
calls overlap; each task snapshots after each order; task a spawns a helper 1.1) and
tests/agents/tasks_basic.py (small shapes chosen by TASK_MODE), run in-process (Job on
a real store) and through `snaprun` in real subprocesses, SIGKILLed at named fault
points (a spawned task's effect is named "<task>#<n>": `effect-after-send:2#1`).
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path

import pytest
from helpers import AGENTS, snaprun
from providers import Provider

import snapstate
from snapstate import gather, spawn
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._effect_spec import TASK_ORDINAL_BASE
from snapstate.runtime._job import Job
from snapstate.runtime._ledger import Ledger
from snapstate.runtime._tasks import Task
from snapstate.serializers._home import Home

ORDERS = AGENTS / "tasks_orders.py"
BASIC = AGENTS / "tasks_basic.py"
ACTIONS = ["a-0", "a-1", "b-0", "b-1", "c-0", "c-1"]
# The identity of every order: task id "<n>" (spawn order of main) and the task's count.
IDENTITIES = {"1#1": "a-0", "1#2": "a-1", "2#1": "b-0", "2#2": "b-1", "3#1": "c-0", "3#2": "c-1"}


HOLD_S = 8  # at most, below the agents' 10 s request timeout


class SlowProvider(Provider):
    """tests/providers.Provider that holds each order for its "delay" seconds (outside
    the provider's lock, so requests overlap) and records when each was served. An
    action listed in `holds` is first held until each of the actions it names has
    arrived too (at most HOLD_S seconds): `held` says, per such action, whether they
    all did while it was held, i.e. were in flight with it."""

    def __init__(self):
        super().__init__()
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self.requests: dict[str, int] = {}
        self.holds: dict[str, tuple[str, ...]] = {}
        self.held: dict[str, bool] = {}
        self._arrived: dict[str, threading.Event] = {}

    def _arrival(self, action: str) -> threading.Event:
        with self.lock:
            return self._arrived.setdefault(action, threading.Event())

    def order(self, path, order, key):
        start = time.monotonic()
        action = order["action"]
        self._arrival(action).set()
        if action in self.holds:
            deadline = time.monotonic() + HOLD_S
            met = all(
                self._arrival(other).wait(max(0.0, deadline - time.monotonic()))
                for other in self.holds[action]
            )
            with self.lock:
                self.held[action] = met
        time.sleep(float(order.get("delay", 0)))
        result = super().order(path, order, key)
        with self.lock:
            self.spans.setdefault(order["action"], []).append((start, time.monotonic()))
            self.requests[order["action"]] = self.requests.get(order["action"], 0) + 1
        return result


@pytest.fixture
def provider():
    with SlowProvider() as p:
        yield p


def _env(provider, **extra):
    return {"PROVIDER_URL": provider.url, **extra}


def _effects(store: Path, job: str) -> list[dict]:
    run = snaprun("effects", "--store", store, "--json", job, cwd=store.parent)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _by_identity(store: Path, job: str) -> dict[str, tuple]:
    """identity "<task>#<n>" -> (name, args, state) of the job's rows, found by the keys
    the ledger derives from identities (rows of spawned tasks are looked up by key)."""
    home = Home(str(store))
    try:
        ledger = Ledger(Job.open(home, job))
        rows = {r.key: r for r in home.catalog.effects(job)}
        found = {}
        for task in ("1", "2", "3", "1.1"):
            for n in range(1, 5):
                row = rows.get(ledger.task_key(f"{task}#{n}"))
                if row is not None:
                    found[f"{task}#{n}"] = (row.name.rsplit(".", 1)[-1], row.args_repr, row.state)
        assert len(found) == len(rows), "every row is a spawned task's, found by its identity"
        assert all(r.ordinal >= TASK_ORDINAL_BASE for r in rows.values())
        return found
    finally:
        home.close()


# ------------------------------------------------------------------------ plain Python
def test_plain_python_spawn_runs_at_once_and_gather_collects():
    """Outside a job spawn() runs the function right away; gather() returns results in
    argument order and raises the first error in argument order; ids are spawn paths."""

    def child():
        return spawn(lambda: "grandchild").id

    def fails(text):
        raise KeyError(text)

    a, b, c = spawn(lambda x: x * 2, 21), spawn(child), spawn(fails, "boom")
    assert [a.id, b.id, c.id] == ["1", "2", "3"]
    assert a.done() and c.done()
    assert gather(a, b) == [42, "2.1"]
    with pytest.raises(KeyError, match="boom"):
        gather(a, c, spawn(fails, "later"))
    assert a.result() == 42
    with pytest.raises(TypeError, match="Task objects"):
        gather(a, 3)  # type: ignore[arg-type]


def test_a_task_pickles_as_its_id():
    """A Task in a snapshot is its id alone, rebuilt by a pinned function."""
    data = pickle.dumps(Task("2.1"))
    assert b"snapstate._abi" in data and b"task_handle" in data
    assert pickle.loads(data) == Task("2.1")


# ------------------------------------------------------------------------ in a job
def _job(tmp_path, monkeypatch, mode: str, job_id: str = "j") -> tuple[Home, Job]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TASK_MODE", mode)
    home = Home(str(tmp_path / "s"))
    entry = EntryPoint("tasks_basic", "main", str(BASIC))
    return home, Job.create(home, entry, [], job_id)


def test_results_ids_and_a_restore_in_process(tmp_path, monkeypatch):
    """spawn/gather/result in a job: results in argument order, ids by spawn path
    (4.1 is task 4's first spawn), done(); the snapshot taken while the tasks' effects
    were in flight restores with every task's result."""
    home, job = _job(tmp_path, monkeypatch, "results")
    expected = {
        "ids": ["1", "2", "3", "4"],
        "results": [1, 3, 5],
        "nested": ["4.1", 11],
        "done": [True, True, True],
        "resumed": False,
        "now": True,
    }
    assert job.run() == expected
    home.catalog.set_status("j", "interrupted")
    assert Job.open(home, "j").resume(at=1) == {**expected, "resumed": True}
    rows = home.catalog.effects("j")
    # three value() tasks, 4.1's double and main's now(): main keeps plain ordinals
    assert sorted(r.ordinal for r in rows if r.ordinal < TASK_ORDINAL_BASE) == [1]
    assert len([r for r in rows if r.ordinal >= TASK_ORDINAL_BASE]) == 4
    home.close()


def test_errors_first_in_argument_order_and_uncollected_reported(tmp_path, monkeypatch):
    """gather() raises the first error in argument order; result() raises the task's
    error; the error of a task nobody collected is reported, the job still done."""
    home, job = _job(tmp_path, monkeypatch, "errors")
    said: list[str] = []
    job.say = said.append
    assert job.run() == ["first", "second", 3]
    assert any("task 4" in s and "never collected" in s for s in said), said
    assert home.catalog.get_job("j").status == "done"
    home.close()


def test_a_cycle_of_joins_is_an_error_in_the_tasks_of_the_cycle(tmp_path, monkeypatch):
    """Tasks waiting for each other cannot go on: each task of the cycle gets a
    RuntimeError at its gather()/result(), the others (main) see it through them."""
    home, job = _job(tmp_path, monkeypatch, "cycle")
    job.say = lambda message: None
    assert (
        job.run()
        == "cycle: task 1 waits for task(s) 2, which wait for it in turn (a cycle of gather()/result())"
    )
    home.close()


def test_a_task_paused_in_c_code_refuses_the_snapshot_naming_it(tmp_path, monkeypatch):
    """A task paused at gather() called by C code (map) cannot be frozen: snapshot()
    raises SnapshotError naming the task and its frame; the job goes on."""
    home, job = _job(tmp_path, monkeypatch, "refuse-frame")
    message, results = job.run()
    assert "failed: task 2:" in message and "sneaky" in message and "C code" in message
    assert results == [[None], 5]
    assert home.catalog.snapshots("j") == []  # nothing was written
    home.close()


def test_tasks_paused_in_result_gather_and_sleep_restore(tmp_path, monkeypatch):
    """A snapshot with tasks paused in result(), in gather() as the task's own function
    (no frame of the agent's) and in sleep(): each restores at its point."""
    home, job = _job(tmp_path, monkeypatch, "joins")
    expected = [["slept", ["slept"], None]]
    assert job.run() == [False, *expected]
    header, _ = home.read_row(home.catalog.snapshot("j", 1))
    assert [(t["id"], t["status"], len(t["frames"])) for t in header["tasks"][1:]] == [
        ("1", "wait", 1),
        ("2", "join", 1),
        ("3", "join", 0),
        ("4", "wait", 0),
    ]
    home.catalog.set_status("j", "interrupted")
    assert Job.open(home, "j").resume(at=1) == [True, *expected]
    home.close()


def test_effect_time_left_answers_on_the_pool_threads(tmp_path, monkeypatch):
    """In a job with tasks, effect calls (of main too) run on the pool's threads, where
    effect_time_left() gives the time left before the lease deadline of that call;
    outside an effect it is None."""
    home, job = _job(tmp_path, monkeypatch, "time-left")
    in_task, in_main, outside = job.run()
    assert job.lease is not None
    for thread, left in (in_task, in_main):
        assert thread.startswith("snapstate-effect")
        assert 0 < left <= job.lease.ttl
    assert outside is None
    home.close()


def test_tasks_run_on_after_main_returned_and_restore_so(tmp_path, monkeypatch):
    """main returns while its task sleeps: the job runs the task to its end (it
    snapshots with main finished); restoring that snapshot runs only the task, and the
    job's result is still main's."""
    home, job = _job(tmp_path, monkeypatch, "orphan")
    assert job.run() == "main returned"
    header, _ = home.read_row(home.catalog.snapshot("j", 1))
    assert header["frames"] == [] and [t["status"] for t in header["tasks"]] == [
        "done",
        "snapshot",
    ]
    home.catalog.set_status("j", "interrupted")
    module = __import__("tasks_basic")
    module.SEEN.clear()
    assert Job.open(home, "j").resume(at=1) == "main returned"
    assert module.SEEN == [True]  # the task resumed at its snapshot(), in its own list
    home.close()


def test_a_snapshot_waits_for_busy_tasks_only_so_long(tmp_path, monkeypatch):
    """A task that keeps starting effects while main's snapshot waits for the calls in
    flight: after 100 of them the snapshot is refused (SnapshotError at main's call,
    nothing written) and the job goes on."""
    home, job = _job(tmp_path, monkeypatch, "busy")
    message, last = job.run()
    assert "kept starting effects" in message and "tasks 1" in message, message
    assert last == 298
    assert home.catalog.snapshots("j") == []
    home.close()


def test_threads_and_raw_greenlets_of_a_task_are_refused(tmp_path, monkeypatch):
    """An effect from a thread a task started, a snapshot() from a raw greenlet: both
    refused (EffectOutsideJob, SnapshotError), nothing sent or written."""
    home, job = _job(tmp_path, monkeypatch, "refuse-outside")
    assert job.run() == ["EffectOutsideJob", "SnapshotError"]
    assert home.catalog.effects("j") == []
    home.close()


# ------------------------------------------------------------------------ subprocesses
def _uninterrupted(tmp_path, provider, name="full", **env):
    store = tmp_path / name
    run = snaprun(
        "run", "--store", store, "--job", "j", ORDERS, cwd=tmp_path, env=_env(provider, **env)
    )
    assert run.returncode == 0, run.stderr
    return store, run


def test_effects_of_three_tasks_overlap_in_time(tmp_path, provider):
    """The three tasks' first orders are in flight at once (the provider holds each
    until the other two have arrived): their request spans overlap; every action
    delivered once; main's output lists each task's orders in task order."""
    firsts = ("a-0", "b-0", "c-0")
    provider.holds = {a: tuple(b for b in firsts if b != a) for a in firsts}
    delays = {"a": [0, 0.1], "b": [0, 0.1], "c": [0, 0.1]}
    store, run = _uninterrupted(tmp_path, provider, TASK_DELAYS=json.dumps(delays))
    assert provider.held == dict.fromkeys(firsts, True)  # all three in flight at once
    spans = [provider.spans[a][0] for a in firsts]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    assert dict(provider.deliveries) == dict.fromkeys(ACTIONS, 1)
    assert run.stdout.splitlines() == [
        "spawned ['1', '2', '3']",
        "task 1 ['a-0:1', 'a-1:11', 'helper:True']",
        "task 2 ['b-0:1', 'b-1:11']",
        "task 3 ['c-0:1', 'c-1:11']",
        "all done 7",
    ]
    # snapshot() in main and in every task: merged into one snapshot per round, labelled
    # by the first task in task order that asked
    assert [s["label"] for s in _snapshots(store)] == ["spawned", "a-1", "gathered"]
    # `snaprun effects` names each row's task and count in its call site
    shown = {e["args"].split(",")[0].strip("'"): e["call_site"] for e in _effects(store, "j")}
    for identity, action in IDENTITIES.items():
        assert shown[action].endswith(f"tasks_orders.py:47 (task {identity})"), shown


def _snapshots(store: Path) -> list[dict]:
    home = Home(str(store))
    try:
        return [{"seq": r.seq, "label": r.label} for r in home.catalog.snapshots("j")]
    finally:
        home.close()


def test_identities_do_not_depend_on_completion_order(tmp_path):
    """Two runs whose provider completes the tasks' calls in opposite orders record the
    same identity -> (effect, arguments) for every row, and the same output."""
    outs, identities, orders = [], [], []
    for name, delays in (
        ("fast-a", {"a": [0.05, 0.05], "b": [0.3, 0.3], "c": [0.6, 0.6]}),
        ("slow-a", {"a": [0.6, 0.6], "b": [0.3, 0.3], "c": [0.05, 0.05]}),
    ):
        with SlowProvider() as p:
            store, run = _uninterrupted(tmp_path, p, name, TASK_DELAYS=json.dumps(delays))
            orders.append(sorted(p.spans, key=lambda a: p.spans[a][0][1]))
        outs.append(run.stdout)
        # (effect, arguments but the delay, which the two runs choose differently)
        identities.append(
            {k: (v[0], v[1].rsplit(", ", 1)[0]) for k, v in _by_identity(store, "j").items()}
        )
    assert orders[0][:3] != orders[1][:3], orders  # the calls did complete in other orders
    assert outs[0] == outs[1]
    assert identities[0] == identities[1]
    assert {k: v[1] for k, v in identities[0].items() if v[0] == "order"} == {
        k: f"'{a}', {10 * int(a[-1]) + 1}" for k, a in IDENTITIES.items()
    }
    assert {k for k, v in identities[0].items() if v[0] == "now"} == {"1.1#1", "1.1#2"}


@pytest.mark.parametrize(
    "fault,restarts",
    [
        # task 2's first order: the provider committed it, its response is not recorded;
        # the other tasks' first orders are in flight; no snapshot yet
        ("effect-after-send:2#1", True),
        # task 1's second order sent, not recorded: after snapshot 1, while task 2 and
        # 3's second orders are in flight
        ("effect-after-send:1#2", False),
        # task 3's second order recorded dispatched, not sent
        ("effect-after-prepare:3#2", False),
        # snapshot 2 (every task at its second snapshot) committed, process dies
        ("after-snapshot:2", False),
    ],
)
def test_sigkill_mid_flight_then_resume_matches_an_uninterrupted_run(
    tmp_path, provider, fault, restarts
):
    """SIGKILL at a fault point while several tasks' effects are in flight, then resume:
    every task resumes at its point, no action is delivered twice (a row recorded
    confirmed is never sent again), stdout and main's result as without the kill."""
    with SlowProvider() as clean:
        _, full = _uninterrupted(tmp_path, clean, "clean")
    store = tmp_path / "s"
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "j",
        ORDERS,
        cwd=tmp_path,
        fault=fault,
        env=_env(provider),
    )
    assert killed.returncode == -9, (killed.returncode, killed.stderr)
    confirmed = {
        IDENTITIES[k]
        for k, v in _by_identity(store, "j").items()
        if v[0] == "order" and v[2] == "confirmed"
    }
    resumed = snaprun("resume", "--store", store, "j", cwd=tmp_path, env=_env(provider))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.result == full.result
    if restarts:  # no snapshot yet: main ran again from its start
        assert resumed.stdout == full.stdout
    else:
        assert killed.stdout + resumed.stdout == full.stdout
    assert dict(provider.deliveries) == dict.fromkeys(ACTIONS, 1)
    for action in confirmed:
        assert provider.requests[action] == 1, (action, provider.requests)
    assert {v[2] for v in _by_identity(store, "j").values()} == {"confirmed"}


def test_a_task_sleeps_while_the_others_work(tmp_path, provider):
    """Task b sleeps 0.4 s (a timer slept through in the process) before its orders,
    while a and c place theirs; the output and deliveries are unchanged."""
    delays = {"a": [0.1, 0.1], "b": [0.1, 0.1], "c": [0.1, 0.1]}
    _, run = _uninterrupted(tmp_path, provider, TASK_DELAYS=json.dumps(delays), TASK_SLEEP="0.4")
    assert "task 2 ['b-0:1', 'b-1:11']" in run.stdout
    assert dict(provider.deliveries) == dict.fromkeys(ACTIONS, 1)


SLEEPER = """
import json, os, urllib.request
from snapstate import effect, gather, sleep, spawn

@effect(kind="read")
def call(action, delay):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + "/plain",
        data=json.dumps({"action": action, "amount": 1, "delay": delay}).encode(),
        method="POST", headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["action"]

def sleeper():
    sleep(0.4)
    return call("woke", 0.1)

def main():
    return gather(spawn(call, "slow", 0), spawn(sleeper))
"""


def test_a_sleeping_task_wakes_while_a_call_is_in_flight(tmp_path, provider):
    """A task's 0.4 s sleep ends while another task's call is in flight (the provider
    holds that call until the woken task's call arrives, 8 s at most): the hub polls
    the wait while it waits for the call, so the woken task's own call starts before
    the long one ends."""
    agent = tmp_path / "sleeper.py"
    agent.write_text(SLEEPER)
    provider.holds = {"slow": ("woke",)}
    run = snaprun("run", "--store", tmp_path / "s", agent, cwd=tmp_path, env=_env(provider))
    assert run.returncode == 0, run.stderr
    assert run.result == "['slow', 'woke']"
    assert provider.held == {"slow": True}  # "woke" arrived while "slow" was held
    (slow_start, slow_end), (woke_start, _) = provider.spans["slow"][0], provider.spans["woke"][0]
    assert slow_start < woke_start < slow_end


WAITS = """
import snapstate
from snapstate import effect, gather, spawn

@effect(kind="read")
def step(name):
    return name.upper()

def task(name, hours):
    first = step(name)
    snapstate.sleep(hours * 3600)
    return first + "-" + step(name + "!")

def main():
    tasks = [spawn(task, name, hours) for name, hours in (("x", 1), ("y", 2), ("z", 2))]
    results = gather(*tasks)
    print("woke", results, flush=True)
    return results
"""


@pytest.mark.smoke
def test_all_tasks_waiting_long_hibernate_and_resume_later(tmp_path):
    """Three tasks sleep 1, 2 and 2 hours: the job hibernates (exit 3, status waiting);
    resumed 1 h later task x finishes and the job hibernates again (a new snapshot);
    resumed 2 h later it is done; each step ran once."""
    agent = tmp_path / "waits.py"
    agent.write_text(WAITS)
    store = tmp_path / "s"
    first = snaprun("run", "--store", store, "--job", "w", agent, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    assert "waits" in first.stderr and "Traceback" not in first.stderr
    later = snaprun(
        "resume", "--store", store, "w", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "3700"}
    )
    assert later.returncode == 3, later.stderr
    done = snaprun(
        "resume", "--store", store, "w", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "7300"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "woke ['X-X!', 'Y-Y!', 'Z-Z!']\n"
    home = Home(str(store))
    try:
        steps = [r for r in home.catalog.effects("w") if r.name.endswith("step")]
        assert sorted(r.args_repr for r in steps) == sorted(
            ["'x'", "'y'", "'z'", "'x!'", "'y!'", "'z!'"]
        )
        labels = [s.label for s in home.catalog.snapshots("w")]
        assert len(labels) == 2 and all(label.startswith("waiting: ") for label in labels)
    finally:
        home.close()


def test_inspect_shows_every_task(tmp_path, provider):
    """`snaprun inspect JOB@1`: main and each task with its status, frames and locals;
    the finished helper task 1.1 too; Task objects render as <task ID>."""
    store, _ = _uninterrupted(tmp_path, provider)
    run = snaprun("inspect", "--store", store, "j@1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    text = run.stdout
    assert "task main (snapshot)" in text and "tasks = [<task 1>, <task 2>, <task 3>]" in text
    for task, name in (("1", "a"), ("2", "b"), ("3", "c")):
        assert f"task {task} (snapshot)\n  worker()" in text
        assert f"name = '{name}'" in text
    assert "task 1.1 (done)" in text
    assert "extra = <task 1.1>" in text


def test_a_job_without_tasks_keeps_the_old_snapshot_layout(tmp_path, monkeypatch):
    """No task spawned: the state and header hold no "tasks" (old files and golden stores
    stay as they were), effects run inline in the agent's greenlet."""
    monkeypatch.chdir(tmp_path)
    agent = tmp_path / "plain_agent.py"
    agent.write_text(
        "import threading\nfrom snapstate import effect, snapshot\n"
        "@effect(kind='read')\ndef where():\n    return threading.current_thread().name\n"
        "def main():\n    snapshot('one')\n    return where()\n"
    )
    home = Home(str(tmp_path / "s"))
    job = Job.create(home, EntryPoint("plain_agent", "main", str(agent)), [], "p")
    assert job.run() == threading.current_thread().name
    header, _ = home.read_row(home.catalog.snapshot("p", 1))
    assert "tasks" not in header
    home.close()


def test_effect_threads_is_validated(tmp_path, monkeypatch):
    """SNAPSTATE_EFFECT_THREADS must be 1..256: spawn() refuses a bad value naming it."""
    home, job = _job(tmp_path, monkeypatch, "results")
    monkeypatch.setenv("SNAPSTATE_EFFECT_THREADS", "lots")
    with pytest.raises(snapstate.SnapstateError, match="SNAPSTATE_EFFECT_THREADS='lots'"):
        job.run()
    home.close()


PLAIN = """
import json, os, urllib.request
from snapstate import effect, gather, spawn

@effect
def place(action):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + "/plain",
        data=json.dumps({"action": action, "amount": 1, "delay": 0.2}).encode(),
        method="POST", headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())

def task(action):
    return place(action)["action"]

def main():
    return gather(*[spawn(task, a) for a in ("p", "q", "r")])
"""


def test_an_ambiguous_effect_of_a_task_parks_the_job_until_reconciled(tmp_path, provider):
    """A provider with neither keys nor lookup; SIGKILL after task 2's call was sent: on
    resume the job parks (exit 4) at the first effect whose outcome is unknown, named by
    its catalog ordinal; reconciled as the provider says (committed with its result, or
    not committed), it finishes with each action delivered exactly once."""
    agent = tmp_path / "plain_tasks.py"
    agent.write_text(PLAIN)
    store = tmp_path / "s"
    env = _env(provider)
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "p",
        agent,
        cwd=tmp_path,
        fault="effect-after-send:2#1",
        env=env,
    )
    assert killed.returncode == -9
    parks = 0
    for _ in range(5):
        run = snaprun("resume", "--store", store, "p", cwd=tmp_path, env=env)
        if run.returncode == 0:
            break
        assert run.returncode == 4, run.stderr
        assert "Traceback" not in run.stderr
        parks += 1
        (row,) = [e for e in _effects(store, "p") if e["state"] == "ambiguous"]
        assert row["effect"] >= TASK_ORDINAL_BASE and "(task " in row["call_site"]
        action = row["args"].strip("'")
        if provider.deliveries[action]:
            decision = ["--committed", "--result", json.dumps({"action": action})]
        else:
            decision = ["--not-committed"]
        settled = snaprun(
            "reconcile", "--store", store, "p", str(row["effect"]), *decision, cwd=tmp_path
        )
        assert settled.returncode == 0, settled.stderr
    assert run.returncode == 0, run.stderr
    assert parks >= 1  # task 2's call at least was in flight when the process died
    assert run.result == "['p', 'q', 'r']"
    assert dict(provider.deliveries) == {"p": 1, "q": 1, "r": 1}


APPROVALS = """
from snapstate import effect, gather, request_approval, spawn

@effect(kind="read", requires="buy", within=lambda scope, amount, **_: amount <= scope["max"])
def buy(amount):
    return f"bought {amount}"

def task(name, limit):
    grant = request_approval("buy", {"max": limit, "who": name})
    return [grant.scope["who"], buy(limit)]

def main():
    return gather(spawn(task, "x", 5), spawn(task, "y", 7))
"""


def test_approvals_requested_by_two_tasks_are_two_approvals(tmp_path):
    """Two tasks each request an approval: two distinct pending approvals (ids from each
    task's own recorded request time), the job hibernates; each grant lets its task's
    effect (requires=, within=) through; the job finishes with both results."""
    agent = tmp_path / "approvals_tasks.py"
    agent.write_text(APPROVALS)
    store = tmp_path / "s"
    first = snaprun("run", "--store", store, "--job", "ap", agent, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    listed = snaprun("approvals", "--store", store, "--json", cwd=tmp_path)
    pending = json.loads(listed.stdout)
    assert len(pending) == 2, pending
    ids = [a.get("id") or a.get("approval_id") for a in pending]
    assert len(set(ids)) == 2, pending
    for approval_id in ids:
        decided = snaprun(
            "approve", "--store", store, "ap", approval_id, "--by", "me", cwd=tmp_path
        )
        assert decided.returncode == 0, decided.stderr
    done = snaprun("resume", "--store", store, "ap", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.result == "[['x', 'bought 5'], ['y', 'bought 7']]"
