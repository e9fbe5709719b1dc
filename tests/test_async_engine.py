"""The async engine: coroutines suspended at an await and async generators paused at a
yield round-trip through the pickler (in process, on the running interpreter); an
async job's waits hibernate it and its approvals gate its async effects (real
subprocesses, the clock seam for time); misuses are refused with the fix; plain
Python runs the same code without a job."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers import AGENTS, snaprun, snapshot_files

sys.path.insert(0, str(AGENTS))

import coro_subjects as subjects  # noqa: E402

from snapstate.serializers import _pickler  # noqa: E402


def roundtrip(obj):
    return _pickler.loads(_pickler.dumps(obj))


def _finish(coro, value=None):
    try:
        coro.send(value)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the coroutine did not finish")


def test_coroutine_chain_suspended_at_an_await_round_trips():
    """A chain of three coroutines (async with, try/except/finally, a loop) paused at
    the innermost await continues identically, original and copy."""
    log, gate = subjects.Log(), subjects.Gate()
    coro = subjects.outer(gate, log)
    assert coro.send(None) is None  # paused in innermost(), at the gate
    assert log.lines == ["enter"]
    copy = roundtrip((coro, log))
    copy_coro, copy_log = copy
    assert type(copy_coro.cr_await).__name__ == "coroutine"  # middle(), then innermost()
    assert _finish(copy_coro, "v") == _finish(coro, "v") == [42, 1]
    expected = [
        "enter",
        "innermost got ('gate', 'v')",
        "innermost finally",
        "caught 42",
        "exit None",
    ]
    assert copy_log.lines == log.lines == expected


def test_restored_coroutine_throw_runs_the_same_handlers():
    """throw() into a restored chain reaches the same finally blocks and __aexit__."""
    log, gate = subjects.Log(), subjects.Gate()
    coro = subjects.outer(gate, log)
    coro.send(None)
    copy_coro, copy_log = roundtrip((coro, log))
    for c in (coro, copy_coro):
        with pytest.raises(ValueError):
            c.throw(ValueError("boom"))
    assert copy_log.lines == log.lines == ["enter", "innermost finally", "exit ValueError"]


def test_async_generator_paused_at_a_yield_round_trips():
    """An async generator advanced once continues from the same yield and runs its
    finally once exhausted."""
    log = subjects.Log()

    async def drive():
        gen = subjects.numbers(log, 4)
        first = await gen.__anext__()
        copy, copy_log = roundtrip((gen, log))
        return first, [x async for x in copy], [x async for x in gen], copy_log

    first, rest_copy, rest, copy_log = asyncio.run(drive())
    assert first == 0 and rest_copy == rest == [1, 2, 3]
    assert copy_log.lines == log.lines == ["numbers finally"]


def test_asynccontextmanager_inside_round_trips():
    """An @asynccontextmanager entered before the copy exits in the copy."""
    log = subjects.Log()

    async def drive():
        cm = subjects.managed(log)
        value = await cm.__aenter__()
        copy = roundtrip(cm)
        await copy.__aexit__(None, None, None)
        return value

    assert asyncio.run(drive()) == "resource"
    assert log.lines == ["managed in", "managed out"]


def test_async_generator_step_inside_an_await_round_trips():
    """An `async for` step (anext()) in progress, its async generator paused inside an
    await of its body, comes back with the generator paused there: sending the step
    its value finishes it as on the original."""

    async def drive():
        gen = subjects.inside_await(subjects.Gate())
        step = gen.__anext__()
        assert step.send(None) is None  # paused at the gate, inside the generator
        copy_gen, copy_step = roundtrip((gen, step))
        results = []
        for g, s in ((copy_gen, copy_step), (gen, step)):
            with pytest.raises(StopIteration) as yielded:
                s.send("done")
            results.append(yielded.value.value)
            with pytest.raises(StopAsyncIteration):
                await g.__anext__()
        return results

    assert asyncio.run(drive()) == [("gate", "done"), ("gate", "done")]


def test_async_generator_being_closed_is_refused():
    """An aclose() in progress (its generator awaiting in a finally) is refused by
    name, with the fix."""

    async def drive():
        gen = subjects.closing_await(subjects.Gate())
        await gen.__anext__()
        closing = gen.aclose()
        assert closing.send(None) is None  # paused at the gate, in the finally
        with pytest.raises(Exception) as info:
            _pickler.dumps(closing)
        with pytest.raises(StopIteration):
            closing.send("x")
        return str(info.value)

    message = asyncio.run(drive())
    assert "closing_await()" in message and "paused inside an await" in message


def test_running_coroutine_is_refused():
    """A coroutine that is running (pickled from inside itself) cannot be frozen."""
    holder = {}

    async def me():
        holder["coro"] = coro
        with pytest.raises(Exception) as info:
            _pickler.dumps(holder["coro"])
        return str(info.value)

    coro = me()
    message = asyncio.run(coro)
    assert "is running" in message


# ---------------------------------------------------------------- in a job (subprocesses)
def test_async_waits_hibernate_and_resume_every_task(tmp_path):
    """Crash window: none (a hibernation ends the process on purpose). Two tasks each
    send an async effect and sleep an hour: the job hibernates (exit 3) once both wait;
    a resume before the due time hibernates again without running agent code; once
    due, both tasks wake and the output is that of one uninterrupted run."""
    store = tmp_path / "s"
    agent = AGENTS / "aeng_waits.py"
    run = snaprun("run", "--store", store, "--job", "j", agent, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    assert "waits: sleep at" in run.stderr
    assert run.stdout == "a 2\nsleeper 2 4\nsleeper 3 6\n"
    early = snaprun("resume", "--store", store, "j", cwd=tmp_path)
    assert early.returncode == 3 and early.stdout == "", early.stderr
    files = snapshot_files(store, "j")
    late = snaprun(
        "resume", "--store", store, "j", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "7200"}
    )
    assert late.returncode == 0, late.stderr
    assert late.stdout == "woke 2\nwoke 3\nresults [4, 6]\n"
    assert snapshot_files(store, "j") == files  # the early resume wrote no snapshot
    effects = snaprun("effects", "--store", store, "j", cwd=tmp_path)
    assert effects.stdout.count("fetch(") == 3  # each sent once, per-task identities
    ids = [line.split()[0] for line in effects.stdout.splitlines()[1:]]
    assert any(i.startswith("1#") for i in ids) and any(i.startswith("2#") for i in ids), ids


def test_async_approval_gates_an_async_effect(tmp_path):
    """Crash window: none. `await request_approval()` hibernates the job; after
    `snaprun approve` a resume delivers the grant and the async effect it requires is
    sent exactly once."""
    store = tmp_path / "s"
    agent = AGENTS / "aeng_approval.py"
    run = snaprun("run", "--store", store, "--job", "j", agent, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    assert "approval a1 'buy' pending" in run.stderr
    approve = snaprun("approve", "--store", store, "j", "a1", cwd=tmp_path)
    assert approve.returncode == 0, approve.stderr
    done = snaprun("resume", "--store", store, "j", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "granted buy\nBUY pen\norder-pen\n"
    assert done.result == "'order-pen'"


@pytest.mark.parametrize(
    "what, needle",
    [
        ("plain-snapshot", "Call `await snapshot()` in the async def instead"),
        ("spawn", "use asyncio.create_task()"),
    ],
)
def test_misuse_in_an_async_job_is_refused_and_the_job_goes_on(what, needle, tmp_path):
    """A plain snapshot() in a function a coroutine calls, or spawn() in an async
    job: refused with the fix; the job carries on and snapshots after it."""
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "j",
        AGENTS / "aeng_misuse.py",
        what,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "refused:" in run.stdout and needle in run.stdout
    assert run.stdout.endswith("seq 1\n")


def test_bad_settle_setting_is_refused_before_the_job_runs(tmp_path):
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "j",
        AGENTS / "aeng_misuse.py",
        "none",
        cwd=tmp_path,
        env={"SNAPSTATE_ASYNC_SETTLE": "-1"},
    )
    assert run.returncode == 2
    assert "SNAPSTATE_ASYNC_SETTLE='-1'" in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""


@pytest.mark.smoke
def test_inspect_lists_each_task_and_its_coroutines(tmp_path):
    """`snaprun inspect` of an async job's snapshot shows every pending task with its
    chain of coroutines, outermost first."""
    store = tmp_path / "s"
    run = snaprun("run", "--store", store, "--job", "j", AGENTS / "aeng_waits.py", cwd=tmp_path)
    assert run.returncode == 3
    shown = snaprun("inspect", "--store", store, "j@2", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "task main" in shown.stdout and "task 1" in shown.stdout and "task 2" in shown.stdout
    assert shown.stdout.index("main()") < shown.stdout.index("sleeper()")


def test_plain_python_runs_the_same_async_code(tmp_path):
    """asyncio.run(main()) without snaprun: await snapshot() returns seq None, await
    sleep() sleeps, an async effect is sent without a ledger (an ad-hoc key)."""
    proc = subprocess.run(
        [sys.executable, str(AGENTS / "aeng_plain.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "seq None resumed False\nsent x:True\nok\n"


def test_snapshot_inside_its_own_timeout_is_refused_at_once(tmp_path):
    """A deadline on the loop's clock cannot be carried across a restore: the snapshot
    is refused without waiting SNAPSTATE_ASYNC_SETTLE (30 s by default; the run is
    given 20 s), naming the timeout; the next snapshot is taken."""
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "j",
        AGENTS / "aeng_timeout.py",
        cwd=tmp_path,
        timeout=20,
    )
    assert run.returncode == 0, run.stderr
    assert "asyncio.timeout() or wait_for() deadline" in run.stdout
    assert "take the snapshot outside that block" in run.stdout
    assert run.stdout.endswith("seq 1\n")


def test_traceback_held_as_a_value_keeps_its_identity():
    """A traceback object held as a value (what __aexit__ receives) is saved once with
    its exception's __traceback__ and prints the same."""
    import traceback

    exc = subjects.caught("x")
    tb = exc.__traceback__
    exc2, tb2 = roundtrip((exc, tb))
    assert exc2.__traceback__ is tb2
    assert traceback.format_tb(tb2) == traceback.format_tb(tb)


def test_a_rate_limited_async_effect_does_not_hold_a_snapshot_back(tmp_path):
    """Crash window: right after a snapshot taken while an async effect waits out its
    rate limit in its task. The snapshot is taken (not refused); the resumed job sends
    the effect again and returns what an uninterrupted run returns."""
    agent = AGENTS / "aeng_ratelimit.py"
    base = snaprun("run", "--store", tmp_path / "b", "--job", "j", agent, cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    assert base.result == "[5, 1]"
    store = tmp_path / "k"
    killed = snaprun(
        "run", "--store", store, "--job", "j", agent, cwd=tmp_path, fault="after-snapshot:1"
    )
    assert killed.returncode == -9, killed.stderr
    resumed = snaprun("resume", "--store", store, "j", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == base.stdout and resumed.result == base.result
