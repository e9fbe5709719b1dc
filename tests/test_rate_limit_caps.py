"""A provider cannot end or bury a job through its rate limit: a wait longer than
MAX_RETRY_AFTER (a day), however it is asked for (RateLimited(1e300), retry-after-ms,
Retry-After in seconds or as an HTTP-date in year 9999), is waited a day, then the action
is sent again. Before, 1e300 s ended the job (OverflowError, status failed) and a date
in 9999 parked it for 8,000 years."""

from __future__ import annotations

import textwrap

import pytest
from helpers import snaprun

from snapstate import RateLimited
from snapstate.resources._ratelimit import MAX_RETRY_AFTER, parse_retry_after, retry_after

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "1e300"},
        {"retry-after-ms": "1e308"},
        {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"},
        {"retry-after": "Sat, 01 Jan 2050 00:00:00 GMT"},
    ],
)
def test_a_long_wait_in_the_headers_is_capped_at_a_day(headers):
    assert parse_retry_after(headers, NOW) == MAX_RETRY_AFTER


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "120"}, 120.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "Fri, 31 Dec 1999 23:59:59 GMT"}, 0.0),  # a date gone by: now
        ({"retry-after": "soon"}, None),
        ({"retry-after": str(10**400)}, None),  # not a finite number: not given
    ],
)
def test_ordinary_waits_are_unchanged(headers, seconds):
    assert parse_retry_after(headers, NOW) == seconds


def test_rate_limited_with_a_huge_wait_is_capped():
    assert retry_after(RateLimited(1e300, "slow down"), NOW) == MAX_RETRY_AFTER
    assert retry_after(RateLimited(86_400 * 3), NOW) == MAX_RETRY_AFTER
    assert retry_after(RateLimited(5), NOW) == 5.0


AGENT = textwrap.dedent(
    """
    import snapstate
    from snapstate import RateLimited, effect

    calls = []

    @effect(idempotency="key")
    def send(n, *, idempotency_key):
        calls.append(n)
        if len(calls) == 1:
            raise RateLimited(1e300, "slow down")
        return n

    def main():
        snapstate.snapshot("start")
        return send(1)
    """
)


def test_a_job_told_to_wait_1e300_seconds_waits_a_day_then_sends_again(tmp_path):
    """The job hibernates (exit 3, not failed) with a due time one day on; resumed
    after it (the clock seam), it sends the same action again and ends done."""
    agent = tmp_path / "rl_agent.py"
    agent.write_text(AGENT)
    store = tmp_path / "store"
    run = snaprun("run", "--store", store, "--job", "r", agent, cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "OverflowError" not in run.stderr
    assert "retry after 86400s" in run.stderr
    early = snaprun("worker", "--store", store, "--once", cwd=tmp_path)
    assert early.returncode == 0 and "0 runnable job(s)" in early.stderr, early.stderr
    later = snaprun(
        "worker", "--store", store, "--once", cwd=tmp_path,
        env={"SNAPSTATE_CLOCK_OFFSET": str(MAX_RETRY_AFTER + 60)},
    )  # fmt: skip
    assert later.returncode == 0, later.stderr
    assert "job r: done" in later.stderr, later.stderr
