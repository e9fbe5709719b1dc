"""Fencing at the moment of sending: an effect is never delivered twice when a runner
that is paused (SIGSTOP) inside it is taken over with `snaprun resume --force`.

runtime/_effects.py records each dispatch in a transaction that also requires the
runner's lease epoch to be current and its deadline more than dispatch_margin(ttl)
away (renewing it), checks in-process right before the send that this deadline (less
send_guard(ttl)) has not passed, and gives the request the time left as its timeout.
`--force` never takes over a live lease: it waits out the lease of a holder that is
alive but silent (runtime/_lease.py). Leases here last SNAPSTATE_LEASE_TTL=2 s.

The takeover tests run the agent tests/agents/fence_orders.py (one order, effect 1,
between two snapshots) against a counting provider on 127.0.0.1 (tests/providers.py),
and pause runner A at one of two moments: right after its dispatched row is committed
and before the request leaves (fault point effect-before-send:1:stop), or while its
request is in flight at the provider (the provider holds it; the test stops A). Then
B = `snaprun resume --force` takes the job over, and A is continued (SIGCONT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import AGENTS, SNAPRUN, snaprun
from providers import Provider

from snapstate._errors import SnapstateError, StaleWriter
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.runtime._lease import DEFAULT_TTL, dispatch_margin, lease_ttl, send_guard, silent
from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._store import EffectRow, Owner

TTL = 2.0
ORDERS = AGENTS / "fence_orders.py"
GATE_AGENT = AGENTS / "lease_gate.py"
BUDGET = AGENTS / "fence_budget.py"


# ------------------------------------------------------------------------ helpers
class TakeoverProvider(Provider):
    """A Provider that also counts POSTs per action (including refused and
    deduplicated ones) and the fencing tokens they carried; with hold=True it keeps the
    first POST in flight (received, not acted on) until `release` is set."""

    def __init__(self, hold: bool = False):
        super().__init__()
        self.hold = hold
        self.posts: Counter = Counter()
        self.sent_tokens: list = []
        self.arrived, self.release, self.held_done = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )

    def order(self, path, order, key):
        with self.lock:
            self.posts[order["action"]] += 1
            first = self.posts[order["action"]] == 1
            self.sent_tokens.append(order.get("fencing_token"))
        if self.hold and first:
            self.arrived.set()
            assert self.release.wait(120), "the held request was never released"
            try:
                return super().order(path, order, key)
            finally:
                self.held_done.set()
        return super().order(path, order, key)

    def __exit__(self, *exc) -> None:
        self.release.set()
        super().__exit__(*exc)


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


def wait_until(
    condition, what: str, proc: subprocess.Popen | None = None, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"runner A exited {proc.returncode} before {what}: {proc.stderr.read()}"
            )
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def catalog_state(store: Path, job: str = "job") -> tuple:
    """Everything the catalog holds about the job."""
    c = SqliteCatalog(str(store))
    try:
        return (
            c.get_job(job),
            c.snapshots(job),
            c.events(job),
            c.effects(job),
            c.get_lease(job),
            c.metrics(job),
        )
    finally:
        c.close()


def lease_of(store: Path, job: str = "job"):
    c = SqliteCatalog(str(store))
    try:
        return c.get_lease(job)
    finally:
        c.close()


def start(*args, cwd: Path, env: dict, fault: str | None = None) -> subprocess.Popen:
    full = {**os.environ, "PYTHONUNBUFFERED": "1", "SNAPSTATE_LEASE_TTL": str(TTL), **env}
    full.pop("SNAPSTATE_FAULT", None)
    if fault:
        full["SNAPSTATE_FAULT"] = fault
    return subprocess.Popen(
        [SNAPRUN, *map(str, args)],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def force_resume_after_silence(store: Path, cwd: Path, env: dict, ttl: float = TTL):
    """Once A's lease shows two missed heartbeats, run B = `snaprun resume --force`.
    Returns (B's run, A's lease as B found it)."""
    wait_until(lambda: silent(lease_of(store), time.time()), "A's lease is silent")
    held = lease_of(store)
    b = snaprun(
        "resume",
        "--force",
        "--store",
        store,
        "job",
        cwd=cwd,
        env={"SNAPSTATE_LEASE_TTL": str(ttl), **env},
    )
    return b, held


def assert_waited_out(b, held, store: Path, *, said: bool = False) -> None:
    """B took the lease only once A's had expired; with `said`, B printed that it
    waits (when B starts slowly, A's lease may have expired before B looked)."""
    if said or "--force waits" in b.stderr:
        assert (
            "alive but silent" in b.stderr
            and "--force waits until its lease expires at" in b.stderr
        ), b.stderr
    taken = [e for e in catalog_state(store)[2] if e.kind == "lease"][-1]
    assert (
        taken.detail.startswith("epoch 2 taken by")
        and "forced, after the previous lease expired" in taken.detail
    ), taken.detail
    assert taken.at >= held.expires


# ------------------------------------------------------------------------ takeovers
# (mode, where A is paused) -> (B's exit code, deliveries, POSTs, refused for a stale
# token, the ledger state of effect 1 after B)
CASES = {
    ("plain", "before-send"): (4, 0, 0, 0, "ambiguous"),
    ("keyed", "before-send"): (0, 1, 1, 0, "confirmed"),
    ("lookup", "before-send"): (0, 1, 1, 0, "confirmed"),
    ("plain", "in-flight"): (4, 1, 1, 0, "ambiguous"),
    ("keyed", "in-flight"): (0, 1, 2, 0, "confirmed"),
    ("lookup-token", "in-flight"): (0, 1, 2, 1, "confirmed"),
}


@pytest.mark.parametrize("mode,moment", sorted(CASES), ids=lambda v: v)
def test_takeover_of_a_paused_runner_delivers_at_most_once(tmp_path, mode, moment):
    """Crash window: runner A paused by SIGSTOP inside effect 1, either right after
    its dispatched row is committed and before its request is sent (before-send), or
    while its request is in flight at the provider (in-flight; the lookup provider
    then also gets the fencing token). Once A's lease is silent, B = `resume --force`
    says it waits, takes the lease only after A's lease expired, and resumes from
    snapshot 1: keyed re-sends with the same key, lookup looks up then sends, plain
    parks (exit 4). Then A is continued: it exits 5 (conflict) with one error and no
    traceback, prints nothing, and the catalog (job, snapshots, timeline, ledger,
    lease, metrics) is exactly as B left it. The provider carried out the order at
    most once (exactly once unless the job parked before anything was sent), A sent
    nothing when paused before sending, and A's late request in flight was
    deduplicated (keyed) or refused for its stale fencing token (lookup-token)."""
    b_code, deliveries, posts, refused, ledger = CASES[(mode, moment)]
    store = tmp_path / "store"
    with TakeoverProvider(hold=moment == "in-flight") as provider:
        env = {"PROVIDER_URL": provider.url, "PROVIDER_MODE": mode}
        a = start(
            "run",
            "--store",
            store,
            "--job",
            "job",
            ORDERS,
            cwd=tmp_path,
            env=env,
            fault="effect-before-send:1:stop" if moment == "before-send" else None,
        )
        try:
            if moment == "in-flight":
                wait_until(provider.arrived.is_set, "A's request reached the provider", a)
                os.kill(a.pid, signal.SIGSTOP)
            wait_until(lambda: state_of(a.pid) == "T", "A is stopped", a)
            row = catalog_state(store)[3][0]
            assert (row.ordinal, row.state, row.attempts) == (1, "dispatched", 1)
            b, held = force_resume_after_silence(store, tmp_path, env)
            assert b.returncode == b_code, b.stderr
            assert "Traceback" not in b.stderr
            assert_waited_out(b, held, store)
            after_b = catalog_state(store)
            if moment == "in-flight":
                provider.release.set()
                assert provider.held_done.wait(60)
            os.kill(a.pid, signal.SIGCONT)
            out, err = a.communicate(timeout=60)
        finally:
            if a.poll() is None:
                os.kill(a.pid, signal.SIGCONT)
                a.kill()
                a.communicate()
        assert a.returncode == 5, err
        assert out == "" and "Traceback" not in err and err.count("snaprun: error:") == 1, err
        if moment == "before-send":
            assert (
                "effect 1 (fence_orders.order_" in err
                and "was not sent: the lease deadline recorded when it was dispatched passed" in err
            ), err
        else:
            assert "this runner's lease epoch 1 is no longer current (current: none)" in err, err
        assert catalog_state(store) == after_b  # A recorded nothing after B
        assert provider.deliveries["fence-1"] == deliveries
        assert provider.posts["fence-1"] == posts
        assert provider.refused["fence-1"] == refused
    job, _, _, effects, lease, _ = after_b
    assert [(e.ordinal, e.state) for e in effects] == [(1, ledger)]
    assert lease is None and job.status == ("parked" if b_code == 4 else "done")
    if b_code == 0:  # the one order, placed by B
        assert b.stdout == "ordered po-1\n" and b.result == "'po-1'", b.stderr
    if mode == "lookup-token":
        assert provider.sent_tokens == [1, 2]  # A's epoch, then B's


# ------------------------------------------------------------------------ --force
def test_force_waits_out_a_silent_live_holder(tmp_path):
    """Crash window: none; runner A (lease ttl 4 s) holds the job at the gate after
    snapshot 1 and is paused (SIGSTOP): alive, silent. `resume` without --force exits
    5 at once; with --force, once A missed two heartbeats, B prints that it waits and
    until when, takes the lease only after A's lease expired (never before), and
    finishes the job ([1, 2, True]). Continued, A's snapshot 2 is refused: exit 5,
    nothing recorded."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    env = {"LEASE_GATE": str(gate)}
    a = start(
        "run",
        "--store",
        store,
        "--job",
        "job",
        GATE_AGENT,
        cwd=tmp_path,
        env={**env, "SNAPSTATE_LEASE_TTL": "4"},
    )
    try:
        wait_until(lambda: (gate / f"waiting-{a.pid}").exists(), "A waits at the gate", a)
        os.kill(a.pid, signal.SIGSTOP)
        wait_until(lambda: state_of(a.pid) == "T", "A is stopped", a)
        (gate / "go").touch()
        before = catalog_state(store)
        plain = snaprun(
            "resume",
            "--store",
            store,
            "job",
            cwd=tmp_path,
            env={"SNAPSTATE_LEASE_TTL": str(TTL), **env},
        )
        assert plain.returncode == 5 and "held by a live runner" in plain.stderr
        assert "waits" not in plain.stderr and catalog_state(store) == before
        b, held = force_resume_after_silence(store, tmp_path, env)
        assert b.returncode == 0, b.stderr
        assert b.result == "[1, 2, True]"
        assert_waited_out(b, held, store, said=True)
        after_b = catalog_state(store)
        os.kill(a.pid, signal.SIGCONT)
        out, err = a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.communicate()
    assert a.returncode == 5, err
    assert "lease epoch 1 is no longer current (current: none)" in err and "Traceback" not in err
    assert catalog_state(store) == after_b
    assert [(s.seq, s.epoch) for s in after_b[1]] == [(1, 1), (2, 2)]


@pytest.mark.smoke
def test_force_takes_over_a_dead_holder_at_once(tmp_path):
    """Crash window: SIGKILL right after snapshot 1, with the default 30 s lease: the
    holder's pid is gone, so `resume --force` takes over at once (its "resumed" event is
    recorded before the holder's lease expires) and finishes the job."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    (gate / "go").touch()
    env = {"LEASE_GATE": str(gate)}
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        GATE_AGENT,
        cwd=tmp_path,
        fault="after-snapshot:1",
        env=env,
    )
    assert killed.returncode == -9
    held = lease_of(store)
    assert held is not None and held.expires - held.heartbeat >= DEFAULT_TTL - 1, held
    forced = snaprun("resume", "--force", "--store", store, "job", cwd=tmp_path, env=env)
    assert forced.returncode == 0, forced.stderr
    assert "waits" not in forced.stderr and forced.result == "[1, 2, True]"
    # taken over while the dead holder's lease was still live, by the store's own clock
    c = SqliteCatalog(str(store))
    try:
        (resumed,) = [e for e in c.events("job") if e.kind == "resumed"]
    finally:
        c.close()
    assert resumed.at < held.expires, (resumed, held)


# ------------------------------------------------------------------------ in-process
def dispatched(ordinal: int) -> EffectRow:
    return EffectRow(
        "job",
        ordinal,
        f"key-{ordinal}",
        "agent.order",
        "agent.py:3",
        "d",
        "()",
        "write",
        "dispatched",
        None,
        None,
        1,
        0.0,
        0.0,
        "",
    )


def test_dispatch_transaction_refuses_a_lease_near_or_past_its_deadline(tmp_path):
    """The dispatch transaction (record_effects with ttl) records the row only while the
    epoch is current and the lease deadline is more than `margin` away; then it renews
    the lease to now + ttl and returns that deadline. With the deadline within the
    margin, past it, or a stale epoch: StaleWriter naming the effect, and nothing
    changed (no row, the lease's expiry and heartbeat as they were)."""
    now = [1000.0]
    store = SqliteCatalog(str(tmp_path), clock=lambda: now[0])
    try:
        store.create_job("job", {"module": "agent", "function": "main"}, [])
        epoch = store.acquire_lease("job", Owner("other-host", 1), 10)  # expires 1010
        now[0] = 1003.0
        assert store.record_effects([dispatched(1)], epoch=epoch, ttl=10, margin=2) == 1013.0
        lease = store.get_lease("job")
        assert (lease.expires, lease.heartbeat) == (1013.0, 1003.0)
        for at, says in (
            (1011.5, "expires in 1.5s"),
            (1013.0, "expired 0.0s ago"),
            (1020.0, "expired 7.0s ago"),
        ):
            now[0] = at
            before = store.effects("job"), store.get_lease("job")
            with pytest.raises(
                StaleWriter,
                match=f"effect 2 \\(agent.order\\) was not sent: "
                f"this runner's lease \\(epoch 1\\) {says}",
            ):
                store.record_effects([dispatched(2)], epoch=epoch, ttl=10, margin=2)
            assert (store.effects("job"), store.get_lease("job")) == before
        newer = store.acquire_lease("job", Owner("other-host", 2), 10)  # expired: taken
        with pytest.raises(StaleWriter, match="epoch 1 is no longer current"):
            store.record_effects([dispatched(2)], epoch=epoch, ttl=10, margin=2)
        assert [e.ordinal for e in store.effects("job")] == [1]
        assert store.record_effects([dispatched(2)], epoch=newer, ttl=10, margin=2) == 1030.0
    finally:
        store.close()


def test_lease_ttl_is_validated(tmp_path, monkeypatch):
    """SNAPSTATE_LEASE_TTL: a number of seconds in [1, 3600], else a clear error (never
    a silent default); unset gives 30 s. The margins follow it. `snaprun run` with a bad
    value exits 2 with one error line before any job or store exists."""
    monkeypatch.delenv("SNAPSTATE_LEASE_TTL", raising=False)
    assert lease_ttl() == DEFAULT_TTL == 30
    for good, ttl in (("1", 1.0), ("2.5", 2.5), ("3600", 3600.0)):
        monkeypatch.setenv("SNAPSTATE_LEASE_TTL", good)
        assert lease_ttl() == ttl
    for bad in ("", "0.5", "0", "-3", "3601", "nan", "inf", "2s", "1e9"):
        monkeypatch.setenv("SNAPSTATE_LEASE_TTL", bad)
        with pytest.raises(
            SnapstateError, match="is not a lease ttl: give a number of seconds from 1 to 3600"
        ):
            lease_ttl()
    assert (dispatch_margin(30), send_guard(30)) == (5, 2.5)
    run = snaprun(
        "run",
        "--store",
        tmp_path / "store",
        "--job",
        "job",
        GATE_AGENT,
        cwd=tmp_path,
        env={"SNAPSTATE_LEASE_TTL": "0.1", "LEASE_GATE": "x"},
    )
    assert run.returncode == 2
    assert run.stderr == (
        "snaprun: error: SNAPSTATE_LEASE_TTL='0.1' is not a lease ttl: give "
        "a number of seconds from 1 to 3600, or unset it for the default "
        "30s\n"
    )
    assert not (tmp_path / "store").exists()


def test_effect_gets_its_time_budget_and_fencing_token(tmp_path, monkeypatch):
    """Inside a job (lease ttl 2 s) an effect declared with timeout_param="timeout" and
    fencing_token=True receives timeout = the time left before its dispatch's lease
    deadline less the guard (0 < timeout <= 2 - 2/12), effect_time_left() gives the
    same budget (a little less, later), fencing_token is the lease epoch (1); a caller's
    smaller timeout is kept (call_effect(..., timeout=0.25)); outside an effect
    effect_time_left() is None. In plain Python nothing is passed but
    fencing_token=None."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("SNAPSTATE_LEASE_TTL", str(TTL))
    home = Home(str(tmp_path / "store"))
    try:
        job = Job.create(home, EntryPoint("fence_budget", "main", str(BUDGET)), [], "job")
        seen = job.run()
    finally:
        home.close()
    assert 0 < seen["left"] <= seen["timeout"] <= TTL - send_guard(TTL)
    assert seen["timeout"] > TTL - send_guard(TTL) - 1
    assert (seen["token"], seen["outside"], seen["capped"]) == (1, None, 0.25)
    module = sys.modules["fence_budget"]
    assert module.probe() == {"timeout": None, "left": None, "token": None}
