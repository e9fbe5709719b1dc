"""Rate limits: an effect the provider refuses for now (snapstate.RateLimited, or an
HTTP 429 with Retry-After raised by httpx, requests, urllib, openai or anthropic) did
not happen. Its ledger row is recorded not-committed, the job waits (short: in the
process, through the clock; long: hibernated, exit 3), and then the SAME logical action
is sent again with the same identity and idempotency key: exactly one delivery.

The provider (tests/rate_provider.py) runs on 127.0.0.1, answers the first request of
each action 429 and counts deliveries and the key of every request. Subprocesses move
their clock with SNAPSTATE_CLOCK_OFFSET; in-process runs use FakeClock: nothing sleeps.
"""

from __future__ import annotations

import email.utils
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import httpx
import openai
import pytest
import requests
from helpers import AGENTS, snaprun
from rate_provider import RateLimitedProvider
from stored import stored_state

import snapstate
from snapstate.resources._ratelimit import NOT_GIVEN, retry_after
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._clock import FakeClock, set_clock
from snapstate.runtime._effect_spec import Recovery
from snapstate.runtime._job import Job
from snapstate.runtime._ledger import RECOVERY, Action
from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._store import EffectState

ORDERS = AGENTS / "rl_orders.py"
SCRIPT = AGENTS / "rl_script.py"
UNINTERRUPTED = "start\nplaced order-1 po-1\nplaced order-2 po-2\ndone\n"
LATER = {"SNAPSTATE_CLOCK_OFFSET": "7300"}
MUCH_LATER = {"SNAPSTATE_CLOCK_OFFSET": "14700"}


@pytest.fixture
def fake_clock():
    clock = FakeClock(1_800_000_000.0)
    old = set_clock(clock)
    yield clock
    set_clock(old)


def _in_process(tmp_path, path, job_id="r", function="main"):
    """Run the agent at `path` as a job in this process; (result or the exception,
    status, effect rows, snapshot seqs)."""
    home = Home(str(tmp_path / "store"))
    try:
        job = Job.create(home, EntryPoint(path.stem, function, str(path)), [], job_id)
        try:
            result: object = job.run()
        except Exception as exc:
            result = exc
        return (
            result,
            home.catalog.get_job(job_id).status,
            home.catalog.effects(job_id),
            [r.seq for r in home.catalog.snapshots(job_id)],
        )
    finally:
        home.close()


def _effects(store, job):
    catalog = SqliteCatalog(str(store))
    try:
        return catalog.effects(job), catalog.get_job(job).status, catalog.get_wait(job)
    finally:
        catalog.close()


def _one_delivery_same_key(provider, actions=("order-1", "order-2")):
    assert dict(provider.deliveries) == {a: 1 for a in actions}
    for action in actions:
        keys = provider.keys(action)
        assert len(keys) >= 2 and len(set(keys)) == 1, keys  # refused, then accepted


# ------------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("client", ["urllib", "httpx", "requests", "raise"])
def test_long_retry_after_hibernates_then_sends_once(tmp_path, client):
    """Retry-After: 7200 hibernates the job at the effect call (exit 3, waiting, a
    rate-limit wait row due 2 h later; the ledger row not-committed, "rate limited");
    an early resume sends nothing and takes no snapshot; resumed later, the same action
    is sent again with the same key and delivered once; the second order goes the same
    way; stdout over all runs is the uninterrupted run's."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "RL_CLIENT": client}
        first = snaprun("run", "--store", store, "--job", "r", ORDERS, cwd=tmp_path, env=env)
        assert first.returncode == 3, first.stderr
        assert "Traceback" not in first.stderr
        assert "rate limited: rl_orders.place at" in first.stderr
        assert "retry after 7200s" in first.stderr
        rows, status, wait = _effects(store, "r")
        assert status == "waiting" and wait.kind == "rate-limit" and wait.seq == 2
        assert wait.due == pytest.approx(wait.since + 7200, abs=5)
        assert [(r.ordinal, r.state) for r in rows] == [(1, EffectState.NOT_COMMITTED)]
        assert rows[0].note.startswith("rate limited")
        assert provider.deliveries == {} and len(provider.requests) == 1
        files = stored_state(store, "r")
        shown = snaprun("inspect", "--store", store, "r", cwd=tmp_path, env=env)
        assert shown.returncode == 0, shown.stderr  # read-only: decodes the wait inertly
        assert "waiting: rate limited" in shown.stdout and "place(" in shown.stdout
        assert len(provider.requests) == 1

        early = snaprun("resume", "--store", store, "r", cwd=tmp_path, env=env)
        assert early.returncode == 3, early.stderr
        assert len(provider.requests) == 1  # nothing sent before it is due
        assert stored_state(store, "r") == files

        later = snaprun("resume", "--store", store, "r", cwd=tmp_path, env={**env, **LATER})
        assert later.returncode == 3, later.stderr  # order-2 is refused in its turn
        assert provider.deliveries == {"order-1": 1}

        last = snaprun("resume", "--store", store, "r", cwd=tmp_path, env={**env, **MUCH_LATER})
        assert last.returncode == 0, last.stderr
        assert last.result == "['po-1', 'po-2']"
        _one_delivery_same_key(provider)
        assert first.stdout + early.stdout + later.stdout + last.stdout == UNINTERRUPTED
        rows, status, wait = _effects(store, "r")
        assert status == "done" and wait is None
        assert [(r.state, r.attempts) for r in rows] == [(EffectState.CONFIRMED, 1)] * 2
        assert [r.key for r in rows] == [provider.keys("order-1")[0], provider.keys("order-2")[0]]


def test_refused_again_after_a_restore_waits_again(tmp_path):
    """A provider that refuses an action twice: the send made after the restore (in the
    agent's task, at the restored wait) is refused again and the job hibernates again at
    the same call (a new snapshot of a restored stack); later it is delivered once."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=2, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "RL_CLIENT": "httpx"}
        runs = [snaprun("run", "--store", store, "--job", "r", ORDERS, cwd=tmp_path, env=env)]
        for offset in (7300, 14700, 22100, 29500):
            runs.append(
                snaprun(
                    "resume",
                    "--store",
                    store,
                    "r",
                    cwd=tmp_path,
                    env={**env, "SNAPSTATE_CLOCK_OFFSET": str(offset)},
                )
            )
        assert [r.returncode for r in runs] == [3, 3, 3, 3, 0], runs[-1].stderr
        _one_delivery_same_key(provider)
        assert [len(provider.keys(a)) for a in ("order-1", "order-2")] == [3, 3]
        assert "".join(r.stdout for r in runs) == UNINTERRUPTED


@pytest.mark.fresh  # the exec path of the effect-rate-limited fault point (helpers.py)
def test_killed_right_after_the_429_was_recorded(tmp_path):
    """Crash window: SIGKILL right after the refused attempt's row was recorded
    not-committed (effect-rate-limited), before the wait's snapshot. The resume
    re-executes from snapshot 1, finds the row and sends the same action again with the
    same key: exactly one delivery. Every snaprun here execs a fresh interpreter."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "RL_CLIENT": "requests"}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "r",
            ORDERS,
            cwd=tmp_path,
            env=env,
            fault="effect-rate-limited:1",
        )
        assert killed.returncode == -9, killed.stderr
        rows, _, _ = _effects(store, "r")
        assert [r.state for r in rows] == [EffectState.NOT_COMMITTED]
        resumed = snaprun("resume", "--store", store, "r", cwd=tmp_path, env=env)
        assert resumed.returncode == 3, resumed.stderr  # order-1 sent; order-2 refused
        assert provider.deliveries == {"order-1": 1}
        last = snaprun("resume", "--store", store, "r", cwd=tmp_path, env={**env, **LATER})
        assert last.returncode == 0, last.stderr
        _one_delivery_same_key(provider)
        assert killed.stdout + resumed.stdout + last.stdout == UNINTERRUPTED


def test_a_diverging_resume_after_the_429_sends_nothing(tmp_path):
    """Crash window: SIGKILL after the 429 was recorded; the resumed code calls the
    effect with other arguments (AMOUNT_BIAS): DivergenceError, nothing sent."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "RL_CLIENT": "urllib"}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "r",
            ORDERS,
            cwd=tmp_path,
            env=env,
            fault="effect-rate-limited:1",
        )
        assert killed.returncode == -9
        diverged = snaprun(
            "resume", "--store", store, "r", cwd=tmp_path, env={**env, "AMOUNT_BIAS": "5"}
        )
        assert diverged.returncode == 1, diverged.stderr
        assert "DivergenceError" in diverged.stderr and "Nothing was dispatched" in diverged.stderr
        assert len(provider.requests) == 1 and provider.deliveries == {}


def test_killed_after_the_rate_limit_snapshot(tmp_path):
    """Crash window: SIGKILL right after the snapshot taken at the rate-limit wait is
    committed (before its wait row). An early resume restores it, polls the wait and
    hibernates without a new snapshot or a request; later it sends once."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "RL_CLIENT": "raise"}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "r",
            ORDERS,
            cwd=tmp_path,
            env=env,
            fault="after-snapshot:2",
        )
        assert killed.returncode == -9
        files = stored_state(store, "r")
        early = snaprun("resume", "--store", store, "r", cwd=tmp_path, env=env)
        assert early.returncode == 3, early.stderr
        assert stored_state(store, "r") == files and len(provider.requests) == 1
        runs = [
            snaprun("resume", "--store", store, "r", cwd=tmp_path, env={**env, **extra})
            for extra in (LATER, MUCH_LATER)
        ]
        assert [r.returncode for r in runs] == [3, 0], runs[-1].stderr
        _one_delivery_same_key(provider)
        assert killed.stdout + early.stdout + "".join(r.stdout for r in runs) == UNINTERRUPTED
        sent = len(provider.requests)
        replay = snaprun("replay", "--store", store, "r@2", cwd=tmp_path, env={**env, **LATER})
        assert replay.returncode == 0, replay.stderr  # from the wait: served by the ledger
        assert replay.stdout == UNINTERRUPTED.removeprefix("start\n")
        assert len(provider.requests) == sent


# ------------------------------------------------------------------------ in process
@pytest.mark.parametrize(
    ("headers", "slept"),
    [
        ({"Retry-After": "2"}, [2.0, 2.0]),
        ({"retry-after-ms": "1500", "Retry-After": "2"}, [1.5, 1.5]),
    ],
)
def test_short_retry_after_is_slept_in_process(tmp_path, fake_clock, monkeypatch, headers, slept):
    """A short Retry-After is slept through in the process (the FakeClock moved by it),
    no wait snapshot; each order delivered once with one key; output as uninterrupted."""
    monkeypatch.delenv("SNAPSTATE_HIBERNATE_AFTER", raising=False)
    with RateLimitedProvider(refuse=1, headers=headers) as provider:
        monkeypatch.setenv("PROVIDER_URL", provider.url)
        monkeypatch.setenv("RL_CLIENT", "httpx")
        result, status, rows, seqs = _in_process(tmp_path, ORDERS)
        assert (result, status, seqs) == (["po-1", "po-2"], "done", [1, 2])
        assert fake_clock.slept == [pytest.approx(s) for s in slept]
        _one_delivery_same_key(provider)
        assert [r.state for r in rows] == [EffectState.CONFIRMED] * 2


def test_no_retry_after_backs_off_from_the_default(tmp_path, fake_clock, monkeypatch, capsys):
    """A 429 without Retry-After waits the default (30 s), doubled at each refusal in a
    row of the same action: 30, 60, 120 (slept in process under a high threshold); the
    uninterrupted output."""
    monkeypatch.setenv("SNAPSTATE_HIBERNATE_AFTER", "1000")
    with RateLimitedProvider(refuse=3, headers={}) as provider:
        monkeypatch.setenv("PROVIDER_URL", provider.url)
        monkeypatch.setenv("RL_CLIENT", "requests")
        result, status, _, _ = _in_process(tmp_path, ORDERS)
        assert (result, status) == (["po-1", "po-2"], "done")
        assert fake_clock.slept == [30.0, 60.0, 120.0] * 2
        _one_delivery_same_key(provider)
    assert capsys.readouterr().out == UNINTERRUPTED


def test_a_long_default_backoff_hibernates(tmp_path, fake_clock, monkeypatch):
    """Under the default threshold (60 s) the third refusal's 120 s hibernates the job."""
    monkeypatch.delenv("SNAPSTATE_HIBERNATE_AFTER", raising=False)
    with RateLimitedProvider(refuse=3, headers={}) as provider:
        monkeypatch.setenv("PROVIDER_URL", provider.url)
        monkeypatch.setenv("RL_CLIENT", "urllib")
        result, status, rows, seqs = _in_process(tmp_path, ORDERS)
        assert isinstance(result, snapstate.JobWaiting) and result.kind == "rate-limit"
        assert "no Retry-After given, backing off 120s" in str(result)
        assert status == "waiting" and seqs == [1, 2]
        assert fake_clock.slept == [30.0, 60.0]
        assert provider.deliveries == {} and [r.state for r in rows] == [EffectState.NOT_COMMITTED]


@pytest.mark.parametrize(
    ("attempts", "outcome", "calls"),
    [(3, "ok", 4), (2, ConnectionError, 3)],
)
def test_a_rate_limit_is_not_a_failed_attempt(
    tmp_path, fake_clock, monkeypatch, attempts, outcome, calls
):
    """Retry(attempts=N) keeps working around a rate limit, which is not counted: with
    conn, limited, conn, ok, three attempts succeed at the 4th call (slept 5 s for the
    limit), two attempts fail at the 3rd call (conn, [limited], conn). Same key on every
    call."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("RL_LOG", str(log))
    monkeypatch.setenv("RL_SCRIPT", "conn,limited:5,conn,ok")
    monkeypatch.setenv("RL_ATTEMPTS", str(attempts))
    result, status, rows, _ = _in_process(tmp_path, SCRIPT)
    keys = log.read_text().splitlines()
    assert len(keys) == calls and len(set(keys)) == 1
    assert fake_clock.slept == [5.0]
    if outcome == "ok":
        assert (result, status) == ("ok", "done")
        assert (rows[0].state, rows[0].attempts) == (EffectState.CONFIRMED, 3)
    else:
        assert isinstance(result, ConnectionError) and status == "failed"
        assert (rows[0].state, rows[0].attempts) == (EffectState.FAILED, 2)


@pytest.mark.smoke
def test_plain_python_sleeps_and_sends_again(fake_clock, monkeypatch):
    """Outside a job (plain Python) a rate-limited effect sleeps through the clock and is
    sent again with the same key."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rl_orders_plain", ORDERS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with RateLimitedProvider(refuse=2, headers={"Retry-After": "3"}) as provider:
        monkeypatch.setenv("PROVIDER_URL", provider.url)
        monkeypatch.setenv("RL_CLIENT", "httpx")
        placed = module.place("order-1", 10)
        assert placed["id"] == "po-1"
        assert fake_clock.slept == [3.0, 3.0]
        assert provider.deliveries == {"order-1": 1}
        assert len(set(provider.keys("order-1"))) == 1


def test_recovery_sends_a_not_committed_row_again():
    """The RECOVERY table: a row recorded not-committed (a rate limit, or `reconcile
    --not-committed`) is sent again whatever the effect declares; a replay ends there."""
    for recovery in Recovery:
        expected = Action.END_REPLAY if recovery is Recovery.REPLAY else Action.SEND
        assert RECOVERY[EffectState.NOT_COMMITTED, recovery] is expected


# ------------------------------------------------------------------------ the mapping
class TooMany:
    """A server on 127.0.0.1 that answers every request with `status` and `headers`."""

    def __init__(self, status=429, headers=None):
        server = self
        self.status, self.headers = status, dict(headers or {})

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                data = json.dumps({"error": {"message": "slow down", "type": "rate"}}).encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in server.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def _raised(client: str, url: str) -> BaseException:
    """The exception the client raises for the server's answer."""
    try:
        if client == "httpx":
            with httpx.Client() as http:
                http.post(url + "/x", json={}).raise_for_status()
        elif client == "requests":
            with requests.Session() as session:
                session.post(url + "/x", json={}).raise_for_status()
        elif client == "urllib":
            request = urllib.request.Request(url + "/x", data=b"{}", method="POST")
            urllib.request.urlopen(request, timeout=10).close()
        elif client == "openai":
            with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as llm:
                llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        else:
            with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as llm:
                llm.messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                )
    except Exception as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()
        return exc
    raise AssertionError(f"{client} raised nothing")


CLIENTS = ["httpx", "requests", "urllib", "openai", "anthropic"]
NOW = 1_800_000_000.0


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"Retry-After": "0"}, 0.0),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
        ({"Retry-After": email.utils.formatdate(NOW + 600, usegmt=True)}, 600.0),
        ({"Retry-After": email.utils.formatdate(NOW - 600, usegmt=True)}, 0.0),
        ({}, NOT_GIVEN),
        ({"Retry-After": "soon"}, NOT_GIVEN),
        ({"Retry-After": "-5"}, NOT_GIVEN),
    ],
)
def test_429_of_each_client_maps_to_its_retry_after(client, headers, expected):
    """A real 429 raised by each supported client maps to the wait its headers ask for:
    retry-after-ms first, Retry-After in seconds or as an HTTP-date; none (or an
    unreadable one) -> NOT_GIVEN (the default backoff)."""
    with TooMany(429, headers) as server:
        exc = _raised(client, server.url)
    assert retry_after(exc, NOW) == pytest.approx(expected)


@pytest.mark.parametrize("client", CLIENTS)
def test_other_errors_are_not_rate_limits(client):
    """A 503 with Retry-After is an error, not a rate limit: None (the effect fails or
    its Retry policy applies)."""
    with TooMany(503, {"Retry-After": "5"}) as server:
        exc = _raised(client, server.url)
    assert retry_after(exc, NOW) is None


def test_rate_limited_and_plain_errors():
    """RateLimited maps to its own retry_after; one that names no usable wait (None, a
    negative, infinite or non-numeric value) to NOT_GIVEN (the default backoff); other
    exceptions to None."""
    assert retry_after(snapstate.RateLimited(12.5), NOW) == 12.5
    assert retry_after(snapstate.RateLimited(retry_after=0), NOW) == 0.0
    for unusable in (None, -1, float("inf"), float("nan"), True):
        exc = snapstate.RateLimited(unusable, "quota")
        assert exc.retry_after is None
        assert retry_after(exc, NOW) == NOT_GIVEN
        assert str(exc) == "rate limited: no wait given (quota)"
    assert retry_after(ValueError("x"), NOW) is None
    assert retry_after(ConnectionError("x"), NOW) is None
    assert str(snapstate.RateLimited(3, "quota")) == "rate limited: retry after 3s (quota)"
    assert isinstance(snapstate.RateLimited(1), snapstate.SnapstateError)
    only = snapstate.RateLimited(message="quota exceeded")  # no wait: the default backoff
    assert (str(only), only.retry_after, retry_after(only, NOW)) == (
        "rate limited: no wait given (quota exceeded)",
        None,
        NOT_GIVEN,
    )
    bare = snapstate.RateLimited("quota exceeded")  # a message alone, as any snapstate error
    assert (str(bare), bare.retry_after, bare.message) == ("quota exceeded", None, "quota exceeded")


def test_call_effect_with_an_explicit_key_and_retry(tmp_path):
    """call_effect(fn, ..., key=..., idempotency="key", retry=Retry(...)) rate limited
    for 2 h: the wait keeps fn, its options and the explicit key as plain data; resumed
    later, the same action (found by its key) is sent once more with the same key."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url}
        agent = AGENTS / "rl_calls.py"
        first = snaprun("run", "--store", store, "--job", "c", agent, cwd=tmp_path, env=env)
        assert first.returncode == 3, first.stderr
        later = snaprun("resume", "--store", store, "c", cwd=tmp_path, env={**env, **LATER})
        assert later.returncode == 0, later.stderr
        assert later.result == "'po-1'"
        _one_delivery_same_key(provider, ("order-1",))
        assert first.stdout + later.stdout == "start\nplaced po-1\n"


@pytest.mark.parametrize("llm", ["openai", "anthropic"])
def test_llm_sdk_rate_limit_hibernates_and_asks_once(tmp_path, llm):
    """An @effect asking an openai/anthropic client (max_retries=0) meets a 429 with
    Retry-After: 7200 (the SDK's RateLimitError): the job hibernates with the client in
    its globals, and resumed later asks once more with the same key: one answer."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "LLM": llm}
        agent = AGENTS / "rl_llm.py"
        first = snaprun("run", "--store", store, "--job", "l", agent, cwd=tmp_path, env=env)
        assert first.returncode == 3, first.stderr
        assert "RateLimitError, retry after 7200s" in _effects(store, "l")[0][0].note
        later = snaprun("resume", "--store", store, "l", cwd=tmp_path, env={**env, **LATER})
        assert later.returncode == 0, later.stderr
        _one_delivery_same_key(provider, ("chat",))
        assert first.stdout + later.stdout == "asking\nanswer echo: hello\n"


def test_a_wait_that_cannot_hibernate_fails_the_call(tmp_path, fake_clock, monkeypatch):
    """A long rate limit where the stack holds an open socket: the snapshot at the wait
    is refused, so the effect call raises SnapshotError naming the effect and the cause;
    the refused row stays not-committed and the next effect gets its own identity."""
    monkeypatch.delenv("SNAPSTATE_HIBERNATE_AFTER", raising=False)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("RL_LOG", str(log))
    monkeypatch.setenv("RL_SCRIPT", "limited:7200,ok")
    result, status, rows, seqs = _in_process(tmp_path, SCRIPT, function="stuck_main")
    assert status == "done" and seqs == []
    assert result[0] == "refused" and result[2] == "ok", result
    assert "rl_script.thrice at " in result[1] and "could not hibernate" in result[1]
    assert "socket" in result[1]
    assert [(r.ordinal, r.state) for r in rows] == [
        (1, EffectState.NOT_COMMITTED),
        (2, EffectState.CONFIRMED),
    ]
    assert len(set(log.read_text().splitlines())) == 2  # two actions, two keys


def test_rate_limits_in_spawned_tasks_keep_each_tasks_identity(tmp_path):
    """Two spawned tasks, each refused with Retry-After 7200: the job hibernates once
    both wait; resumed two hours later, each task sends its own action again with its
    own key (the task identity kept, not a new one) and returns the provider's answer,
    not the wait's continuation: one delivery each."""
    store = tmp_path / "store"
    agent = AGENTS / "rl_tasks.py"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url, "RL_CLIENT": "raise"}
        first = snaprun("run", "--store", store, "--job", "t", agent, cwd=tmp_path, env=env)
        assert first.returncode == 3, first.stderr
        assert provider.deliveries == {}
        rows, status, _ = _effects(store, "t")
        assert status == "waiting"
        assert sorted(r.state for r in rows) == [EffectState.NOT_COMMITTED] * 2
        last = snaprun("resume", "--store", store, "t", cwd=tmp_path, env={**env, **LATER})
        assert last.returncode == 0, last.stderr
        assert last.result == "['po-1', 'po-2']"
        _one_delivery_same_key(provider)
        rows, status, _ = _effects(store, "t")
        assert status == "done" and len(rows) == 2
        assert all(r.state == EffectState.CONFIRMED for r in rows)
        lines = first.stdout.splitlines() + last.stdout.splitlines()
        assert lines[0] == "start" and lines[-1] == "done", lines
        # the provider numbers orders as they arrive: the two tasks' calls race
        placed = sorted(line.rsplit(" ", 1) for line in lines[1:-1])
        assert [p[0] for p in placed] == ["placed order-1", "placed order-2"], lines
        assert sorted(p[1] for p in placed) == ["po-1", "po-2"], lines
