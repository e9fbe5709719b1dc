"""The longest wait a provider may name is configurable: SNAPSTATE_MAX_RETRY_AFTER
seconds (from 1 to a year; default a day). A longer Retry-After (seconds, retry-after-ms
or an HTTP-date in year 9999, from a real HTTP server on 127.0.0.1) or
RateLimited(1e300) is clamped to it, and said so: a `rate-limit-clamped` event in the
job's timeline and a warning on stderr, never an exception that fails the job. A bad
value is refused before any job runs (exit 2, naming the variable)."""

from __future__ import annotations

import json

import pytest
from helpers import AGENTS, snaprun
from rate_provider import RateLimitedProvider
from test_rate_limit_caps import AGENT

from snapstate.runtime._effect_spec import max_retry_after

ORDERS = AGENTS / "rl_orders.py"


def _events(tmp_path, store, job):
    out = snaprun("log", "--store", store, "--json", job, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"},
        {"Retry-After": "1e300"},
        {"retry-after-ms": "1e308", "Retry-After": "5"},
    ],
)
def test_a_provider_wait_past_the_maximum_is_clamped_and_logged(tmp_path, monkeypatch, headers):
    """A 429 from the provider asks for 8,000 years (or 1e300 s): with
    SNAPSTATE_MAX_RETRY_AFTER=600 the job hibernates (exit 3) due 600 s on, says it
    clamped the wait on stderr and in its timeline; a worker 700 s later sends the
    action again (same key) and the job ends done with each order delivered once."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers=headers) as provider:
        env = {"PROVIDER_URL": provider.url, "SNAPSTATE_MAX_RETRY_AFTER": "600"}
        first = snaprun("run", "--store", store, "--job", "m", ORDERS, cwd=tmp_path, env=env)
        assert first.returncode == 3, first.stderr
        assert "Traceback" not in first.stderr and "OverflowError" not in first.stderr
        assert "warning: job m: the provider asked to wait" in first.stderr, first.stderr
        assert "waiting 600s instead" in first.stderr and "retry after 600s" in first.stderr
        clamped = [e for e in _events(tmp_path, store, "m") if e["kind"] == "rate-limit-clamped"]
        assert len(clamped) == 1 and "SNAPSTATE_MAX_RETRY_AFTER" in clamped[0]["detail"]
        early = snaprun(
            "worker", "--store", store, "--once", cwd=tmp_path,
            env={**env, "SNAPSTATE_CLOCK_OFFSET": "300"},
        )  # fmt: skip
        assert "0 runnable job(s)" in early.stderr, early.stderr
        for offset in ("700", "1400"):  # order-2 is refused in its turn, and clamped again
            later = snaprun(
                "worker", "--store", store, "--once", cwd=tmp_path,
                env={**env, "SNAPSTATE_CLOCK_OFFSET": offset},
            )  # fmt: skip
            assert later.returncode == 0, later.stderr
        assert "job m: done" in later.stderr, later.stderr
        assert provider.deliveries == {"order-1": 1, "order-2": 1}
        for action in ("order-1", "order-2"):
            keys = provider.keys(action)
            assert len(keys) == 2 and keys[0] == keys[1]  # the same action, sent again
    kinds = [e["kind"] for e in _events(tmp_path, store, "m")]
    assert kinds.count("rate-limit-clamped") == 2


def test_rate_limited_1e300_with_a_small_maximum(tmp_path):
    """RateLimited(1e300) raised by the effect itself: clamped to the maximum (120 s,
    past SNAPSTATE_HIBERNATE_AFTER's minute), logged, and the job hibernates instead of
    failing; a worker 200 s later finishes it."""
    agent = tmp_path / "rl_agent.py"
    agent.write_text(AGENT)
    store = tmp_path / "store"
    env = {"SNAPSTATE_MAX_RETRY_AFTER": "120"}
    run = snaprun("run", "--store", store, "--job", "r", agent, cwd=tmp_path, env=env)
    assert run.returncode == 3, run.stderr
    assert "retry after 120s" in run.stderr and "asked to wait 1e+300s" in run.stderr, run.stderr
    later = snaprun(
        "worker", "--store", store, "--once", cwd=tmp_path,
        env={**env, "SNAPSTATE_CLOCK_OFFSET": "200"},
    )  # fmt: skip
    assert "job r: done" in later.stderr, later.stderr


def test_a_wait_within_the_maximum_is_not_reported(tmp_path):
    """Retry-After: 7200 with the default maximum: waited as asked, no warning, no
    clamp event."""
    store = tmp_path / "store"
    with RateLimitedProvider(refuse=1, headers={"Retry-After": "7200"}) as provider:
        env = {"PROVIDER_URL": provider.url}
        first = snaprun("run", "--store", store, "--job", "w", ORDERS, cwd=tmp_path, env=env)
        assert first.returncode == 3, first.stderr
        assert "retry after 7200s" in first.stderr and "warning" not in first.stderr
    assert "rate-limit-clamped" not in [e["kind"] for e in _events(tmp_path, store, "w")]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon", "1e12"])
def test_a_bad_maximum_is_refused_before_the_job_runs(tmp_path, value):
    """Exit 2 naming the variable and its range; no job is created."""
    agent = tmp_path / "rl_agent.py"
    agent.write_text(AGENT)
    store = tmp_path / "store"
    env = {"SNAPSTATE_MAX_RETRY_AFTER": value}
    run = snaprun("run", "--store", store, "--job", "b", agent, cwd=tmp_path, env=env)
    assert run.returncode == 2, run.stderr
    assert "SNAPSTATE_MAX_RETRY_AFTER" in run.stderr and "from 1 to" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_the_maximum_defaults_to_a_day(monkeypatch):
    monkeypatch.delenv("SNAPSTATE_MAX_RETRY_AFTER", raising=False)
    assert max_retry_after() == 86400.0
    monkeypatch.setenv("SNAPSTATE_MAX_RETRY_AFTER", "90")
    assert max_retry_after() == 90.0
