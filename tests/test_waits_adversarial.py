"""Adversarial review of waits and approvals (issue 11): a demanding user (agents that
buy things, wait days for a human) and an attacker with write access to the catalog or
the environment. Each test proves one property; a test marked xfail(strict=True) proves a
defect whose fix lies in a module reserved for another helper (its reason names it)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import textwrap
import threading
from pathlib import Path

import pytest
from conftest import clean_refusal, snaprun
from providers import Provider

AGENT = textwrap.dedent(
    """
    import json
    import os
    import urllib.request

    from snapstate import (
        ApprovalExpired,
        ApprovalRejected,
        ApprovalScopeError,
        effect,
        request_approval,
        snapshot,
    )

    URL = os.environ["PROVIDER_URL"]


    @effect(
        idempotency="key",
        requires="purchase",
        within=lambda scope, amount, **_: amount <= scope["max_usd"],
    )
    def buy(vendor, amount, *, idempotency_key):
        request = urllib.request.Request(
            URL + "/keyed",
            data=json.dumps({"action": "buy-" + vendor, "amount": amount}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())


    def main():
        snapshot("researched")
        try:
            ok = request_approval("purchase", {"vendor": "acme", "max_usd": 100},
                                  expires_in=3600, approvers=["alice"])
        except (ApprovalRejected, ApprovalExpired) as exc:
            print("denied", type(exc).__name__, flush=True)
            return "denied"
        snapshot("approved")
        try:
            po = buy("acme", int(os.environ.get("AMOUNT", "80")))
        except ApprovalScopeError as exc:
            print("refused", exc, flush=True)
            return "refused"
        print("ordered", po["id"], flush=True)
        return po["id"]
    """
)


@pytest.fixture
def provider():
    with Provider() as running:
        yield running


@pytest.fixture
def env(provider):
    return {"PROVIDER_URL": provider.url}


def _cli(*args, cwd, env, **kw):
    return snaprun(*args, cwd=cwd, env=env, **kw)


def _waiting(tmp_path: Path, env: dict, *, store: Path | None = None) -> Path:
    (tmp_path / "buyer.py").write_text(AGENT)
    extra = ["--store", str(store)] if store else []
    run = _cli("run", *extra, "--job", "j", "buyer.py", cwd=tmp_path, env=env)
    assert run.returncode == 3, run.stderr
    return store or tmp_path / ".snapstate"


def _db(store: Path) -> sqlite3.Connection:
    return sqlite3.connect(store / "catalog.db", isolation_level=None)


# ---------------------------------------------------------------- catalog tampering
def test_a_widened_scope_with_a_recomputed_digest_authorizes_nothing(tmp_path, env, provider):
    """Attacker with catalog write access (plaintext store): after the grant was
    delivered (snapshot 3 holds the Approval; SIGKILL after it), the row's scope is
    widened to max_usd 100000 and its digest recomputed (sha256 is unkeyed). The resumed
    job calls buy(5000): it must be refused, nothing sent."""
    store = _waiting(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    killed = _cli("resume", "j", cwd=tmp_path, env=env, fault="after-snapshot:3")
    assert killed.returncode == -9, killed.stderr
    wide = json.dumps({"max_usd": 100000, "vendor": "acme"}, sort_keys=True, separators=(",", ":"))
    with _db(store) as db:
        db.execute(
            "UPDATE approvals SET scope = ?, digest = ?",
            (wide, hashlib.sha256(wide.encode()).hexdigest()),
        )
    done = _cli("resume", "j", cwd=tmp_path, env={**env, "AMOUNT": "5000"})
    assert provider.deliveries["buy-acme"] == 0, done.stdout
    assert "refused" in done.stdout


def test_an_extended_expiry_is_detected_at_the_wait(tmp_path, env, provider):
    """Attacker with catalog write access, encrypted store (scope, digest sealed; expiry
    is a plain column): the pending row's expiry is pushed 10 days out. The job resumed
    two hours later (past the real expiry) must not receive a grant: the catalog row no
    longer matches the request the snapshot holds."""
    store = tmp_path / "store"
    init = _cli("init", "--store", store, "--encrypt", cwd=tmp_path, env=env)
    assert init.returncode == 0, init.stderr
    _waiting(tmp_path, env, store=store)
    with _db(store) as db:
        db.execute("UPDATE approvals SET expires = expires + 864000")
    later = {**env, "SNAPSTATE_CLOCK_OFFSET": "7200"}
    # the forged expiry lets a decision through after the real one...
    _cli("approve", "--store", store, "j", "a1", "--by", "alice", cwd=tmp_path, env=later)
    done = _cli("resume", "--store", store, "j", cwd=tmp_path, env=later)
    assert provider.deliveries["buy-acme"] == 0, done.stdout
    assert "ordered" not in done.stdout


def test_a_state_flipped_by_hand_is_not_a_grant(tmp_path, env, provider):
    """Attacker with catalog write access, encrypted store: `state` is a plain column,
    decided_by/decided_at are sealed/plain. Flipping state to 'granted' by hand (no
    decider recorded, which `snaprun approve` always records) must not deliver an
    Approval nor authorize the effect."""
    store = tmp_path / "store"
    assert _cli("init", "--store", store, "--encrypt", cwd=tmp_path, env=env).returncode == 0
    _waiting(tmp_path, env, store=store)
    with _db(store) as db:
        db.execute("UPDATE approvals SET state = 'granted'")
    done = _cli("resume", "--store", store, "j", cwd=tmp_path, env=env)
    assert provider.deliveries["buy-acme"] == 0, done.stdout
    assert "ordered" not in done.stdout


# ---------------------------------------------------------------- clock
def test_hostile_clock_offsets_are_refused_cleanly(tmp_path, env, provider):
    """SNAPSTATE_CLOCK_OFFSET values that are finite but absurd (1e300 made `run` crash
    with a raw traceback deep in datetime) or negative (setting the clock back makes an
    expired grant valid again: an offset may only shorten what was granted) are refused
    with a clean error (exit 2, no traceback) by run and resume; nothing is sent."""
    store = _waiting(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    for value in ("1e300", "-100000"):
        hostile = {**env, "SNAPSTATE_CLOCK_OFFSET": value}
        clean_refusal(
            _cli("run", "--job", "k", "buyer.py", cwd=tmp_path, env=hostile),
            "SNAPSTATE_CLOCK_OFFSET",
        )
        clean_refusal(_cli("resume", "j", cwd=tmp_path, env=hostile), "SNAPSTATE_CLOCK_OFFSET")
    assert provider.deliveries["buy-acme"] == 0
    ok = _cli("resume", "j", cwd=tmp_path, env={**env, "SNAPSTATE_CLOCK_OFFSET": "60"})
    assert ok.returncode == 0 and provider.deliveries["buy-acme"] == 1, ok.stderr
    assert store.is_dir()
