"""`snaprun worker`: it wakes waiting, decided and abandoned jobs, each in a child
process, never two runners for one job, and stops on SIGTERM leaving every job
resumable. Real processes throughout: the worker is an exec'd `snaprun`, its children
real processes forked from its fork server (tests/test_worker_start.py), the
provider is a real HTTP server on 127.0.0.1 counting deliveries per action
(tests/providers.py), crashes are SIGKILLs (fault points, or the chaos test's), and
time moves through the clock seam (SNAPSTATE_CLOCK_OFFSET), never by sleeping.

The agent is tests/agents/wk_agent.py: order JOB-a, snapshot, a KIND-specific middle
(a 1 h timer, an in-process nap, a gate), order JOB-b, snapshot, a marker written by
an effect with a lookup (so at most once, across crashes)."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import AGENTS, SNAPRUN, snaprun, worker_runners
from providers import Provider

from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._worker import backoff
from snapstate.serializers._fs import process_start
from snapstate.serializers._keys import KeyRing
from snapstate.serializers._sealing import Sealer
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._store import Owner

AGENT = AGENTS / "wk_agent.py"
LATER = "7200"  # SNAPSTATE_CLOCK_OFFSET of a worker two hours later: 1 h timers are due


# ------------------------------------------------------------------------ helpers
@pytest.fixture
def provider():
    with Provider() as p:
        yield p


def agent_env(tmp: Path, provider: Provider, **extra: str) -> dict[str, str]:
    (tmp / "wk").mkdir(exist_ok=True)
    return {
        "PROVIDER_URL": provider.url,
        "PROVIDER_MODE": "keyed",
        "WK_DIR": str(tmp / "wk"),
        **extra,
    }


def catalog(tmp: Path) -> SqliteCatalog:
    """The store's catalog with the store's key, as snaprun opens it: the rows it writes
    are signed (a row written without the key is refused as forged)."""
    store = SqliteCatalog(str(tmp / ".snapstate"), create=False)
    store.sealer = Sealer(KeyRing(str(tmp / ".snapstate"), create=False), False)
    return store


def job_row(tmp: Path, job: str):
    store = catalog(tmp)
    try:
        return store.get_job(job)
    finally:
        store.close()


def snapshot_count(tmp: Path, job: str) -> int:
    store = catalog(tmp)
    try:
        return len(store.snapshots(job))
    finally:
        store.close()


def create_job(tmp: Path, kind: str, job: str) -> None:
    """A job created but never run: what `snaprun run` leaves when it is killed before
    it takes the lease (status running, no lease). A worker starts it from main()."""
    store = catalog(tmp)
    store.create_job(job, EntryPoint.parse(str(AGENT)).as_dict(), [kind, job])
    store.close()


def run_job(tmp: Path, provider: Provider, kind: str, job: str, **kw):
    """`snaprun run --job JOB wk_agent.py KIND JOB` (creates the store)."""
    env = agent_env(tmp, provider, **kw.pop("env", {}))
    return snaprun("run", "--job", job, AGENT, kind, job, cwd=tmp, env=env, **kw)


def worker_env(tmp: Path, provider: Provider, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **agent_env(tmp, provider))
    env.pop("SNAPSTATE_FAULT", None)
    env.update(extra)
    return env


def worker_once(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SNAPRUN, "worker", "--once", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def start_worker(
    tmp: Path, env: dict[str, str], *args: str, log: str = "worker"
) -> subprocess.Popen:
    """A worker in the background; its stdout and stderr go to tmp/LOG.out and .err."""
    with open(tmp / f"{log}.out", "ab") as out, open(tmp / f"{log}.err", "ab") as err:
        return subprocess.Popen(
            [SNAPRUN, "worker", *args], cwd=tmp, env=env, stdout=out, stderr=err
        )


def wait_until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.02)


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def marks(tmp: Path, job: str) -> list[str]:
    path = tmp / "wk" / f"{job}.mark"
    return path.read_text().splitlines() if path.exists() else []


def assert_finished_once(tmp: Path, provider: Provider, job: str, lease_row: bool = False) -> None:
    """Done, each order delivered once, the marker written once, no lease left (with
    lease_row: none live; a runner SIGKILLed right after recording done leaves a dead
    row)."""
    store = catalog(tmp)
    try:
        row = store.get_job(job)
        assert row.status == "done", (job, row.status, row.error)
        assert provider.deliveries[f"{job}-a"] == 1, (job, provider.deliveries)
        assert provider.deliveries[f"{job}-b"] == 1, (job, provider.deliveries)
        assert len(marks(tmp, job)) == 1, (job, marks(tmp, job))
        lease = store.get_lease(job)
        assert lease is None or (lease_row and not lease.is_live(time.time())), (job, lease)
    finally:
        store.close()


def no_live_lease(tmp: Path, jobs: list[str]) -> list[str]:
    store = catalog(tmp)
    try:
        now = time.time()
        return [j for j in jobs if (lease := store.get_lease(j)) and lease.is_live(now)]
    finally:
        store.close()


# ------------------------------------------------------------------------ tests
@pytest.mark.smoke
def test_a_hibernated_timer_is_finished_by_a_worker_once_it_is_due(tmp_path, provider):
    """A 1 h sleep hibernates (exit 3, no process kept); a worker pass before it is due
    leaves it waiting, one whose clock is 2 h later (the clock seam) finishes it."""
    first = run_job(tmp_path, provider, "timer", "t1")
    assert first.returncode == 3, first.stderr
    assert first.stdout == "a t1\n"
    env = worker_env(tmp_path, provider)

    early = worker_once(tmp_path, env)
    assert early.returncode == 0, early.stderr
    assert "0 runnable job(s)" in early.stderr and "Traceback" not in early.stderr
    assert job_row(tmp_path, "t1").status == "waiting"

    later = worker_once(tmp_path, {**env, "SNAPSTATE_CLOCK_OFFSET": LATER})
    assert later.returncode == 0, later.stderr
    assert later.stdout == "b t1\n"  # the child's stdout is the worker's
    assert "job t1: resuming in pid" in later.stderr and "waited: sleep at" in later.stderr
    assert "job t1: done" in later.stderr, later.stderr
    assert_finished_once(tmp_path, provider, "t1")


def test_a_job_killed_mid_run_is_finished_by_the_worker_without_a_second_delivery(
    tmp_path, provider
):
    """Crash window: SIGKILL after the provider committed order b but before the ledger
    recorded it (effect-after-send). The worker sees the job interrupted (its runner's
    pid is gone), resumes it from snapshot 1; the ledger retries b with the same key,
    which the provider answers from its first delivery."""
    killed = run_job(tmp_path, provider, "plain", "k1", fault="effect-after-send:2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert provider.deliveries["k1-b"] == 1
    done = worker_once(tmp_path, worker_env(tmp_path, provider))
    assert done.returncode == 0, done.stderr
    assert "interrupted (its runner is gone)" in done.stderr and "job k1: done" in done.stderr
    assert_finished_once(tmp_path, provider, "k1")


@pytest.mark.parametrize("decision", ["approve", "reject", "expire"])
def test_an_approval_decided_while_no_process_exists_is_picked_up_by_the_worker(
    tmp_path, provider, decision
):
    """A job hibernated on request_approval() (exit 3) is not runnable while the
    approval is pending; once it is approved or rejected with `snaprun approve/reject`
    (no process of the job exists), or once its expiry passed (the clock seam), a
    worker pass resumes it and the agent learns the outcome at its call."""
    env = {"WK_EXPIRES": "3600"}
    first = run_job(tmp_path, provider, "approval", "ap", env=env)
    assert first.returncode == 3, first.stderr
    wenv = worker_env(tmp_path, provider, WK_EXPIRES="3600")
    pending = worker_once(tmp_path, wenv)
    assert "0 runnable job(s)" in pending.stderr, pending.stderr
    store = catalog(tmp_path)
    (approval,) = store.approvals("ap")
    store.close()
    if decision == "expire":
        wenv["SNAPSTATE_CLOCK_OFFSET"] = LATER
    else:
        decided = snaprun(decision, "ap", approval.approval_id, cwd=tmp_path)
        assert decided.returncode == 0, decided.stderr
    done = worker_once(tmp_path, wenv)
    assert done.returncode == 0 and "job ap: done" in done.stderr, done.stderr
    word = {"approve": "granted", "reject": "rejected", "expire": "expired"}[decision]
    assert done.stdout == f"{word} ap\nb ap\n", done.stdout
    assert_finished_once(tmp_path, provider, "ap")


def test_parked_and_failed_jobs_are_left_alone(tmp_path, provider):
    """A job parked on an ambiguous effect (a keyless provider, SIGKILL after the send)
    is resumed once by the worker, which parks it (exit 4); later passes never resume
    it, nor a failed job: they need `snaprun reconcile` or a fix first."""
    env = {"PROVIDER_MODE": "plain"}
    killed = run_job(tmp_path, provider, "plain", "p1", fault="effect-after-send:1", env=env)
    assert killed.returncode == -signal.SIGKILL
    wenv = worker_env(tmp_path, provider, PROVIDER_MODE="plain")
    first = worker_once(tmp_path, wenv)
    assert "job p1: parked" in first.stderr, first.stderr
    assert job_row(tmp_path, "p1").status == "parked"
    store = catalog(tmp_path)
    store.create_job("f1", EntryPoint.parse(str(AGENT)).as_dict(), ["plain", "f1"])
    store.set_status("f1", "failed", error="ValueError: as an agent's raise leaves it")
    store.close()
    again = worker_once(tmp_path, wenv)
    assert again.returncode == 0, again.stderr
    assert "0 runnable job(s)" in again.stderr, again.stderr
    assert provider.deliveries["p1-a"] == 1  # not sent again


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_lets_the_running_job_reach_its_next_snapshot_then_a_second_worker_finishes_it(
    tmp_path, provider, signum, code
):
    """SIGTERM (or Ctrl-C) to a worker whose child runs a job between two snapshots:
    the worker forwards SIGTERM; the child runs on to snapshot 2 and stops right after
    it is committed (exit 143, interrupted, lease released); the worker exits 143 (130)
    holding nothing. A second worker resumes the job from snapshot 2: b is not ordered
    again."""
    run = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert run.returncode == 3
    create_job(tmp_path, "gate", "g1")
    env = worker_env(tmp_path, provider)
    worker = start_worker(tmp_path, env, "--poll", "0.1", "--grace", "30")
    try:
        wait_until("the job at its gate", (tmp_path / "wk" / "g1.ready").exists)
        worker.send_signal(signum)
        wait_until(
            "the child told", lambda: "stops at its next snapshot" in read(tmp_path / "worker.err")
        )
        (tmp_path / "wk" / "g1.open").touch()
        assert worker.wait(timeout=60) == code
    finally:
        worker.kill()
        worker.wait()
    log = (tmp_path / "worker.err").read_text()
    assert "stop at their next snapshot" in log and "job g1: stopped (SIGTERM)" in log, log
    store = catalog(tmp_path)
    row = store.get_job("g1")
    assert row.status == "interrupted" and "right after snapshot 2" in (row.error or ""), row
    assert [s.label for s in store.snapshots("g1")] == ["a", "b"]
    assert store.get_lease("g1") is None
    assert marks(tmp_path, "g1") == []
    store.close()
    second = worker_once(tmp_path, env)
    assert second.returncode == 0 and "job g1: done" in second.stderr, second.stderr
    assert_finished_once(tmp_path, provider, "g1")


def test_sigterm_during_an_in_process_sleep_hibernates_the_job_at_once(tmp_path, provider):
    """A job sleeping 30 s in the process (under hibernate_after) when the worker gets
    SIGTERM does not hold the shutdown for its sleep: it hibernates at that sleep
    (snapshot there, status waiting, exit 3) and the worker exits 143 at once. A worker
    past the sleep's end finishes it."""
    run = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert run.returncode == 3
    create_job(tmp_path, "nap", "n1")
    env = worker_env(tmp_path, provider, WK_NAP="30")
    worker = start_worker(tmp_path, env, "--poll", "0.1", "--grace", "60")
    try:
        # Snapshot "a" committed: from then on a SIGTERM makes the job hibernate at its
        # sleep, whether it is already in it or about to be (Job.no_naps).
        wait_until("snapshot a", lambda: snapshot_count(tmp_path, "n1") == 1)
        time.sleep(0.3)  # past the hub's after-commit check of snapshot a
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
        exited = time.time()
    finally:
        worker.kill()
        worker.wait()
    log = (tmp_path / "worker.err").read_text()
    assert "hibernates at the wait it sleeps in" in log and "job n1: waiting again" in log, log
    store = catalog(tmp_path)
    assert store.get_job("n1").status == "waiting"
    wait = store.get_wait("n1")
    # the worker was gone before the nap it hibernated at would have ended: it held its
    # shutdown neither for the nap nor for the 60 s grace, which ends later still
    assert wait is not None and wait.kind == "timer" and wait.due is not None, wait
    assert exited < wait.due, (exited, wait, log)
    assert store.get_lease("n1") is None
    store.close()
    done = worker_once(tmp_path, {**env, "SNAPSTATE_CLOCK_OFFSET": "60"})
    assert "job n1: done" in done.stderr, done.stderr
    assert_finished_once(tmp_path, provider, "n1")


def test_a_job_whose_runner_keeps_dying_is_retried_with_back_off_then_given_up(tmp_path, provider):
    """Crash window: every child SIGKILLs itself before the job's first effect (the
    fault is in the worker's environment, so each child inherits it). The worker
    retries at once (a first crash), then after 1 s, then, at --max-crashes 3, marks
    the job failed
    with the reason instead of looping; nothing was sent."""
    run = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert run.returncode == 3
    create_job(tmp_path, "plain", "c1")
    env = worker_env(tmp_path, provider, SNAPSTATE_FAULT="effect-before-prepare:1")
    worker = start_worker(tmp_path, env, "--poll", "0.1", "--max-crashes", "3")
    try:
        wait_until("the job given up", lambda: job_row(tmp_path, "c1").status == "failed")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
    finally:
        worker.kill()
        worker.wait()
    log = (tmp_path / "worker.err").read_text()
    assert "killed by SIGKILL before its first snapshot, leaving it interrupted (crash 1" in log, (
        log
    )
    assert "retrying now" in log and "crash 2 in a row" in log and "retrying in 1s" in log, log
    assert "marked failed" in log, log
    assert log.count("job c1: resuming in pid") == 3, log
    row = job_row(tmp_path, "c1")
    assert "the worker gave up: its runner died 3 times in a row" in (row.error or "")
    assert provider.deliveries["c1-a"] == 0


def test_a_job_whose_snapshot_cannot_be_restored_is_not_retried_in_a_loop(tmp_path, provider):
    """A run that ends leaving its job interrupted without a signal (here: its agent's
    code changed under the saved stack, so the restore is refused, exit 2) counts as a
    crash: at --max-crashes 1 the worker marks the job failed with the reason at once,
    instead of starting a child on every poll."""
    agents = tmp_path / "agents"
    agents.mkdir()
    for name in ("wk_agent.py", "shop.py"):
        (agents / name).write_text((AGENTS / name).read_text())
    env = agent_env(tmp_path, provider)
    killed = snaprun(
        "run",
        "--job",
        "r1",
        agents / "wk_agent.py",
        "plain",
        "r1",
        cwd=tmp_path,
        env=env,
        fault="after-snapshot:1",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    source = (agents / "wk_agent.py").read_text()
    # another size too: an edit within the same second that keeps the size is hidden by
    # the bytecode cache the run wrote (Python checks the source's mtime and size)
    (agents / "wk_agent.py").write_text(
        source.replace('    b = order(f"{job}-b", 2)', '    b = order(f"{job}-b", 20)')
    )
    wenv = worker_env(tmp_path, provider)
    run = worker_once(tmp_path, wenv, "--max-crashes", "1")
    assert "job r1: refused" in run.stderr and "marked failed" in run.stderr, run.stderr
    row = job_row(tmp_path, "r1")
    assert row.status == "failed" and "ended with exit code 2" in (row.error or ""), row
    again = worker_once(tmp_path, wenv)
    assert "0 runnable job(s)" in again.stderr, again.stderr
    assert provider.deliveries["r1-b"] == 0


def test_a_freed_slot_starts_the_next_job_without_waiting_for_the_poll(tmp_path, provider):
    """One slot, three runnable jobs and a poll of an hour: the worker starts the next
    job as soon as a child ends (before, only at its next poll: one job per poll
    interval per slot, whatever the jobs' length). Each is finished once."""
    run = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert run.returncode == 3
    jobs = ["s1", "s2", "s3"]
    for job in jobs:
        create_job(tmp_path, "plain", job)
    env = worker_env(tmp_path, provider)
    worker = start_worker(tmp_path, env, "--concurrency", "1", "--poll", "3600")
    try:
        wait_until(
            "all three jobs done",
            lambda: all(job_row(tmp_path, j).status == "done" for j in jobs),
            timeout=90,
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    for job in jobs:
        assert_finished_once(tmp_path, provider, job)
    assert job_row(tmp_path, "warm").status == "waiting"  # not due: left alone


def test_claims_keep_two_workers_apart_and_die_with_their_worker(tmp_path):
    """The catalog's advisory claims (SqliteCatalog.claim_job): another live worker's
    claim blocks, one's own is renewed, a dead worker's or an expired one is taken
    over, a released one is free; give_up_job never touches a job a live runner holds."""
    store = SqliteCatalog(str(tmp_path / "store"))
    store.create_job("j", {"module": "m", "function": "main", "path": None}, [])
    me = Owner.me()
    parent = Owner(me.host, os.getppid(), process_start(os.getppid()))  # alive
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = Owner(me.host, gone.pid, 1)
    assert store.claim_job("j", parent, 30)
    assert not store.claim_job("j", me, 30)  # a live worker's claim
    assert store.claim_job("j", parent, 30)  # its own: renewed
    store.release_claims(parent)
    assert store.claim_job("j", dead, 30)
    assert store.claim_job("j", me, 30)  # a dead worker's claim is no claim
    store.release_claims(me, "j")
    assert store.claim_job("j", parent, 30)  # released: free
    assert store.claim_job("j", parent, -1)  # renewed as already expired
    assert store.claim_job("j", me, 30)  # an expired claim is no claim
    assert store.stopped_jobs() == []
    store.set_status("j", "interrupted")
    assert store.stopped_jobs() == ["j"]
    epoch = store.acquire_lease("j", me, 30, resuming=True)
    assert not store.give_up_job("j", "no")  # a live runner holds it
    store.release_lease("j", epoch)
    assert store.give_up_job("j", "the worker gave up")
    row = store.get_job("j")
    assert (row.status, row.error) == ("failed", "the worker gave up")
    assert not store.give_up_job("j", "again")  # failed: not abandoned any more
    store.close()


def test_back_off_grows_and_is_capped():
    assert [backoff(n) for n in range(1, 10)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]


def test_worker_refuses_bad_input_cleanly(tmp_path):
    """No store, or a bad option: exit 2 with a message, no traceback."""
    missing = subprocess.run(
        [SNAPRUN, "worker", "--once", "--store", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    bad = subprocess.run(
        [SNAPRUN, "worker", "--concurrency", "0"], cwd=tmp_path, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--concurrency" in bad.stderr


# ------------------------------------------------------------------------ chaos
@dataclass
class Kind:
    """One kind of job in the chaos test: `setup(ctx, job)` creates it before the
    workers start; `tick(ctx, job)`, if any, is called on every round of the chaos loop
    (e.g. to decide an approval once the job waits for it)."""

    setup: Callable[[ChaosContext, str], None]
    tick: Callable[[ChaosContext, str], None] | None = None


@dataclass
class ChaosContext:
    tmp: Path
    provider: Provider
    rng: random.Random
    approved: set[str] = field(default_factory=set)


def _setup_plain(ctx: ChaosContext, job: str) -> None:
    create_job(ctx.tmp, "plain", job)  # started from main() by a worker


def _setup_nap(ctx: ChaosContext, job: str) -> None:
    create_job(ctx.tmp, "nap", job)  # started by a worker; naps $WK_NAP in its process


def _setup_timer(ctx: ChaosContext, job: str) -> None:
    run = run_job(ctx.tmp, ctx.provider, "timer", job)  # hibernates on its 1 h sleep
    assert run.returncode == 3, run.stderr


def _setup_approval(ctx: ChaosContext, job: str) -> None:
    run = run_job(ctx.tmp, ctx.provider, "approval", job)  # hibernates, pending
    assert run.returncode == 3, run.stderr


def _approve(ctx: ChaosContext, job: str) -> None:
    """Approve the job's pending approval with `snaprun approve` (no process of the
    job needed), once: on a random round of the chaos loop."""
    if job in ctx.approved or ctx.rng.random() < 0.7:
        return
    store = catalog(ctx.tmp)
    try:
        pending = [a for a in store.approvals(job) if a.state == "pending"]
    finally:
        store.close()
    for approval in pending:
        decided = snaprun("approve", job, approval.approval_id, "--by", "chaos", cwd=ctx.tmp)
        assert decided.returncode == 0, decided.stderr
        ctx.approved.add(job)


# The kinds of the chaos test's jobs, in turn: plain ones (started by the workers from
# main()), naps (likewise, then a short sleep in their process: a runner alive long
# enough to be killed mid-run), timers (hibernated before the workers start, due for
# them) and approvals (hibernated before, approved with `snaprun approve` during the
# chaos).
CHAOS_KINDS: dict[str, Kind] = {
    "plain": Kind(_setup_plain),
    "nap": Kind(_setup_nap),
    "timer": Kind(_setup_timer),
    "approval": Kind(_setup_approval, _approve),
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def chaos(tmp: Path, provider: Provider, *, jobs: int, kills: int, seed: int) -> None:
    """Two workers on one store run `jobs` jobs of CHAOS_KINDS while `kills` SIGKILLs
    hit a random worker (restarted at once) or one of a worker's children, at random
    moments (seeded). Then every job must be done exactly once."""
    print(f"chaos seed {seed} (rerun with SNAPSTATE_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    ctx = ChaosContext(tmp, provider, rng)
    kinds = list(CHAOS_KINDS)
    run = run_job(tmp, provider, "plain", "warmup")  # creates the store
    assert run.returncode == 0, run.stderr
    names = [f"j{i:02d}-{kinds[i % len(kinds)]}" for i in range(jobs)]
    for i, job in enumerate(names):
        CHAOS_KINDS[kinds[i % len(kinds)]].setup(ctx, job)
    env = worker_env(tmp, provider, SNAPSTATE_CLOCK_OFFSET=LATER, WK_NAP="0.4")
    args = ("--concurrency", "3", "--poll", "0.1", "--grace", "5", "--max-crashes", "1000")
    workers = [start_worker(tmp, env, *args, log=f"w{n}") for n in range(2)]
    # The "up" lines each worker's log must reach: one more than its log held when it was
    # last started (an instance killed before it said so leaves none).
    up_lines = [1, 1]
    started = time.monotonic()
    cpu = _cpu()
    done_kills: list[str] = []

    def pending() -> list[str]:
        store = catalog(tmp)
        try:
            return [j for j in names if store.get_job(j).status != "done"]
        finally:
            store.close()

    try:
        while pending():
            assert time.monotonic() - started < 240, f"jobs left: {pending()}"
            for i, job in enumerate(names):
                tick = CHAOS_KINDS[kinds[i % len(kinds)]].tick
                if tick is not None:
                    tick(ctx, job)
            time.sleep(rng.uniform(0.02, 0.15))  # jobs last well under a second now
            if len(done_kills) >= kills:
                continue
            n = rng.randrange(len(workers))
            if rng.random() < 0.3:
                workers[n].kill()
                workers[n].wait()
                up_lines[n] = read(tmp / f"w{n}.err").count("polling every") + 1
                workers[n] = start_worker(tmp, env, *args, log=f"w{n}")
                done_kills.append(f"worker {n}")
                continue
            victims = worker_runners(workers[n].pid)
            if victims:
                victim = rng.choice(victims)
                try:
                    os.kill(victim, signal.SIGKILL)
                    done_kills.append(f"child {victim} of worker {n}")
                except ProcessLookupError:
                    pass  # it ended meanwhile
        took = time.monotonic() - started
    finally:
        # A worker restarted a moment ago may not have its SIGTERM handler yet (the
        # default action would end it with -15): wait until it said it is up.
        up_by = time.monotonic() + 30
        for n in range(len(workers)):
            while (
                read(tmp / f"w{n}.err").count("polling every") < up_lines[n]
                and workers[n].poll() is None
                and time.monotonic() < up_by
            ):
                time.sleep(0.02)
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=60) for w in workers]
    print(
        f"{jobs} jobs, kills: {done_kills}; all done after {took:.1f}s, using "
        f"{_cpu() - cpu:.1f} CPU seconds (workers and the children they reaped)"
    )
    assert codes == [143, 143], codes
    for job in names:
        assert_finished_once(tmp, provider, job, lease_row=True)
    assert no_live_lease(tmp, names) == []
    assert len(done_kills) == kills


def test_two_workers_with_random_kills_finish_every_job_exactly_once(tmp_path, provider):
    """Crash windows: anywhere, at random (seeded): SIGKILL of a worker (its children
    run on and finish holding their own leases; it is restarted) or of a worker's child
    (its job is left interrupted and resumed by either worker). Two workers on one
    store, 20 jobs (plain ones started by the workers, timers hibernated before and due
    for the workers, approvals hibernated before and approved during the chaos): every
    job done once, every order delivered once, every marker written once, no lease left
    held."""
    seed = int(os.environ.get("SNAPSTATE_CHAOS_SEED") or random.randrange(2**32))
    chaos(tmp_path, provider, jobs=20, kills=6, seed=seed)  # wider: test_chaos_sweep


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_chaos_sweep(tmp_path, provider, round_):
    """The chaos test, wider: 80 jobs, 30 kills, three seeds."""
    chaos(tmp_path, provider, jobs=80, kills=30, seed=random.randrange(2**32))
