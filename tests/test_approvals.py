"""Human approvals end to end through `snaprun` in real subprocesses (issue 11, part 1).

An agent (written into the test's folder, so a test can revise it between runs) takes a
snapshot, asks for approval "purchase" with scope {"vendor": ..., "max_usd": 100}
(expires in an hour, approvers alice and bob), snapshots again holding the Approval, and
places an order through an effect that requires that approval (`within=` amount <=
max_usd) with a real HTTP provider on 127.0.0.1 (tests/providers.py, which counts
deliveries). Checked:

* approve: the job hibernates (exit 3, status waiting, no process), `approvals --json`
  lists the exact scope, `approve` records who and when without any process, a resume
  continues it, the order is delivered exactly once, the Approval's fields are exact
  and it survives a snapshot (pickled as snapstate.Approval);
* reject and expire (the clock seam: SNAPSTATE_CLOCK_OFFSET) raise ApprovalRejected /
  ApprovalExpired into the agent, which catches them; nothing is sent; an expired
  approval cannot be decided;
* an effect call outside the granted scope, or a revised agent (a wider scope asked for
  again after a crash, a bigger amount after a grant): refused, nothing sent;
* approvers enforced; an encrypted store keeps name and scope sealed in catalog.db;
* a job SIGKILLed while it waits is decided with no process and finishes;
* a fork of a job waiting at an approval does not inherit the parent's grant;
* in plain Python: no approval is ever assumed (request_approval and a requiring effect
  refuse), and a scope that is not JSON is refused naming its key.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
from pathlib import Path

import pytest
from helpers import clean_refusal, snaprun
from providers import Provider

import snapstate
from snapstate import ApprovalError, ApprovalScopeError, call_effect, effect, request_approval

AGENT = """\
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


def scope():
    return {"vendor": "VENDOR", "max_usd": 100}


def amount():
    return 80


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
        ok = request_approval("purchase", scope(), expires_in=3600, approvers=["alice", "bob"])
    except (ApprovalRejected, ApprovalExpired) as exc:
        print("denied", json.dumps({"type": type(exc).__name__, "message": str(exc),
                                    "by": getattr(exc, "by", None),
                                    "note": getattr(exc, "note", None)}))
        return "denied"
    snapshot("approved")
    print("approval", json.dumps({
        "type": type(ok).__module__ + "." + type(ok).__qualname__,
        "id": ok.id, "name": ok.name, "decision": ok.decision, "by": ok.by,
        "at": ok.at.timestamp(), "tz": str(ok.at.tzinfo), "scope": ok.scope,
        "note": ok.note, "expires": ok.expires.timestamp(),
    }))
    try:
        po = buy(ok.scope["vendor"], amount())
    except ApprovalScopeError as exc:
        print("refused", exc)
        return "refused"
    print("ordered", po["id"])
    return po["id"]
"""

VENDOR = "acme"
HOUR = 3600


def _agent(folder: Path, vendor: str = VENDOR) -> Path:
    path = folder / "buyer.py"
    path.write_text(AGENT.replace("VENDOR", vendor))
    return path


def _revise(path: Path, old: str, new: str) -> None:
    """Edit the agent between runs, keeping every line where it was (main() is on the
    saved stack: its code and first line must not change)."""
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.fixture
def provider():
    with Provider() as running:
        yield running


@pytest.fixture
def env(provider):
    return {"PROVIDER_URL": provider.url}


def _cli(*args, cwd, env, **kw):
    return snaprun(*args, cwd=cwd, env=env, **kw)


def _approvals(cwd, env, *flags) -> list[dict]:
    out = _cli("approvals", "--json", *flags, cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _status(cwd, env, job: str) -> str:
    out = _cli("ls", "--json", cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr
    return next(r["status"] for r in json.loads(out.stdout) if r["job"] == job)


def _line(stdout: str, tag: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(tag + " ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0].split(" ", 1)[1])


def _waiting_job(tmp_path, env, job: str = "j", **kw) -> None:
    first = _cli("run", "--job", job, _agent(tmp_path), cwd=tmp_path, env=env, **kw)
    assert first.returncode == 3, first.stderr
    assert "approval a1 'purchase' pending (approvers alice, bob)" in first.stderr
    assert _status(tmp_path, env, job) == "waiting"


def test_approve_resume_sends_exactly_once(tmp_path, env, provider):
    """The whole approve path: the job hibernates at request_approval (exit 3, status
    waiting); `approvals --json` shows the exact scope, digest, expiry, approvers and
    call site; a resume before any decision hibernates again without a new snapshot;
    `approve` needs no process, prints the scope, records who/when/note and leaves the
    job waiting; the resumed job gets an Approval with exact fields, which a snapshot
    keeps (the run is SIGKILLed after snapshot 3 and the Approval comes back from it);
    the order is delivered exactly once, and a done job never runs again."""
    _waiting_job(tmp_path, env)
    [record] = _approvals(tmp_path, env)
    assert record["job"] == "j" and record["id"] == "a1" and record["name"] == "purchase"
    assert record["state"] == "pending"
    assert record["scope"] == {"vendor": VENDOR, "max_usd": 100}
    assert len(record["digest"]) == 64 and record["approvers"] == ["alice", "bob"]
    assert record["expires"] == pytest.approx(record["requested"] + HOUR)
    line = AGENT.splitlines().index(next(ln for ln in AGENT.splitlines() if "ok = request_" in ln))
    assert record["site"] == f"{tmp_path / 'buyer.py'}:{line + 1}", record["site"]
    table = _cli("approvals", "--wide", cwd=tmp_path, env=env)
    assert "a1" in table.stdout and '"max_usd": 100' in table.stdout
    assert "alice, bob" in table.stdout

    again = _cli("resume", "j", cwd=tmp_path, env=env)  # nobody decided yet
    assert again.returncode == 3, again.stderr
    assert _cli("log", "--json", "j", cwd=tmp_path, env=env).stdout.count('"snapshot"') == 2

    decided = _cli(
        "approve", "j", "a1", "--by", "alice", "--note", "within budget", cwd=tmp_path, env=env
    )
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout == ""
    assert '{"max_usd":100,"vendor":"acme"}' in decided.stderr
    assert "granted by alice" in decided.stderr
    assert _status(tmp_path, env, "j") == "waiting"  # deciding runs nothing
    assert provider.deliveries["buy-acme"] == 0
    [granted] = _approvals(tmp_path, env, "--all")
    assert granted["state"] == "granted" and granted["decided_by"] == "alice"
    assert granted["note"] == "within budget" and granted["decided_at"] >= granted["requested"]
    assert _approvals(tmp_path, env) == []  # nothing left to decide

    killed = _cli("resume", "j", cwd=tmp_path, env=env, fault="after-snapshot:3")
    assert killed.returncode == -9, killed.stderr
    assert provider.deliveries["buy-acme"] == 0
    done = _cli("resume", "j", cwd=tmp_path, env=env)  # from snapshot 3, holding the Approval
    assert done.returncode == 0, done.stderr
    assert "resumed from snapshot 3" in done.stderr
    approval = _line(done.stdout, "approval")
    assert approval == {
        "type": "snapstate.Approval",
        "id": "a1",
        "name": "purchase",
        "decision": "granted",
        "by": "alice",
        "at": pytest.approx(granted["decided_at"]),
        "tz": "UTC",
        "scope": {"vendor": VENDOR, "max_usd": 100},
        "note": "within budget",
        "expires": pytest.approx(granted["expires"]),
    }
    assert "ordered po-1" in done.stdout
    assert provider.deliveries["buy-acme"] == 1
    finished = _cli("resume", "j", cwd=tmp_path, env=env)
    assert finished.returncode == 2 and provider.deliveries["buy-acme"] == 1


def test_reject_raises_into_the_agent(tmp_path, env, provider):
    """`reject --reason --by bob`: the resumed agent's request_approval raises
    ApprovalRejected (caught by the agent) carrying who and why; nothing is sent; a
    second decision is refused (exit 2, nothing changed)."""
    _waiting_job(tmp_path, env)
    no = _cli("reject", "j", "a1", "--by", "bob", "--reason", "too pricey", cwd=tmp_path, env=env)
    assert no.returncode == 0, no.stderr
    assert "rejected by bob" in no.stderr and "too pricey" in no.stderr
    clean_refusal(
        _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env), "already rejected"
    )
    done = _cli("resume", "j", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    denied = _line(done.stdout, "denied")
    assert denied["type"] == "ApprovalRejected"
    assert denied["by"] == "bob" and denied["note"] == "too pricey"
    assert "rejected by bob" in denied["message"]
    assert provider.deliveries["buy-acme"] == 0
    assert _approvals(tmp_path, env, "--all")[0]["state"] == "rejected"


def test_expiry(tmp_path, env, provider):
    """Two hours later (SNAPSTATE_CLOCK_OFFSET=7200, the approval expires after one):
    `approvals` no longer lists it (--all shows it expired), deciding it is refused
    (exit 2), and the resumed agent gets ApprovalExpired; nothing is sent."""
    _waiting_job(tmp_path, env)
    later = {**env, "SNAPSTATE_CLOCK_OFFSET": "7200"}
    assert _approvals(tmp_path, later) == []
    assert _approvals(tmp_path, later, "--all")[0]["state"] == "expired"
    assert _approvals(tmp_path, env)[0]["state"] == "pending"  # not yet, without the offset
    clean_refusal(_cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=later), "expired")
    done = _cli("resume", "j", cwd=tmp_path, env=later)
    assert done.returncode == 0, done.stderr
    denied = _line(done.stdout, "denied")
    assert denied["type"] == "ApprovalExpired" and "expired at" in denied["message"]
    assert provider.deliveries["buy-acme"] == 0


def test_grant_expired_before_the_effect_refuses_it(tmp_path, env, provider):
    """A grant authorizes effects only until its expiry: granted in time, resumed two
    hours later, the Approval is returned but the order is refused (ApprovalScopeError
    naming the approval and its expiry), nothing sent, no ledger row written."""
    _waiting_job(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "bob", cwd=tmp_path, env=env).returncode == 0
    done = _cli("resume", "j", cwd=tmp_path, env={**env, "SNAPSTATE_CLOCK_OFFSET": "7200"})
    assert done.returncode == 0, done.stderr
    assert _line(done.stdout, "approval")["by"] == "bob"
    assert "refused" in done.stdout and "expired at" in done.stdout
    assert provider.deliveries["buy-acme"] == 0
    ledger = json.loads(_cli("effects", "--json", "j", cwd=tmp_path, env=env).stdout)
    assert [e["name"] for e in ledger] == ["snapstate.now"]


def test_call_outside_the_scope_and_a_revised_agent_are_refused(tmp_path, env, provider):
    """After a grant of max_usd 100, the agent's code is revised (scope() now says 5000,
    amount() now 500): the resumed job gets the Approval as granted (scope from the
    catalog, max_usd 100), and its call buy(500) is refused with ApprovalScopeError
    naming the effect, the approval and the recorded scope; nothing is sent and no
    ledger row is written for it."""
    agent = _agent(tmp_path)
    first = _cli("run", "--job", "j", agent, cwd=tmp_path, env=env)
    assert first.returncode == 3, first.stderr
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    _revise(agent, '"max_usd": 100}', '"max_usd": 5000}')
    _revise(agent, "return 80", "return 500")
    done = _cli("resume", "j", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert _line(done.stdout, "approval")["scope"] == {"vendor": VENDOR, "max_usd": 100}
    refused = [ln for ln in done.stdout.splitlines() if ln.startswith("refused ")]
    assert len(refused) == 1, done.stdout
    assert "buyer.buy" in refused[0] and "500" in refused[0]
    assert "approval a1" in refused[0] and '{"max_usd":100,"vendor":"acme"}' in refused[0]
    assert provider.deliveries["buy-acme"] == 0
    ledger = json.loads(_cli("effects", "--json", "j", cwd=tmp_path, env=env).stdout)
    assert [e["name"] for e in ledger] == ["snapstate.now"]


@pytest.mark.smoke
def test_a_reexecuted_request_finds_the_same_approval(tmp_path, env):
    """Crash window: SIGKILL right after the pending approval is recorded, before the
    snapshot at the wait (fault point approval-after-request). The resume re-executes
    from snapshot 1 and finds the same approval (same id, request time and expiry: the
    request time is a recorded now()); no second row is created."""
    agent = _agent(tmp_path)
    killed = _cli("run", "--job", "j", agent, cwd=tmp_path, env=env, fault="approval-after-request")
    assert killed.returncode == -9, killed.stderr
    [before] = _approvals(tmp_path, env, "--all")
    again = _cli("resume", "j", cwd=tmp_path, env=env)
    assert again.returncode == 3, again.stderr
    assert _approvals(tmp_path, env, "--all") == [before]


def test_a_revised_agent_cannot_widen_a_request_after_a_crash(tmp_path, env, provider):
    """Crash window: SIGKILL after the approval (max_usd 100) is recorded, before the
    snapshot at the wait. It is granted while no process exists; then the agent is
    revised to ask for max_usd 5000 and resumed: re-executing from snapshot 1, the
    request diverges from approval a1's recorded scope -> DivergenceError (exit 1),
    nothing sent, the grant unchanged."""
    agent = _agent(tmp_path)
    killed = _cli("run", "--job", "j", agent, cwd=tmp_path, env=env, fault="approval-after-request")
    assert killed.returncode == -9, killed.stderr
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    _revise(agent, '"max_usd": 100}', '"max_usd": 5000}')
    done = _cli("resume", "j", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    assert "DivergenceError" in done.stderr and "cannot reuse or widen" in done.stderr
    assert provider.deliveries["buy-acme"] == 0
    [row] = _approvals(tmp_path, env, "--all")
    assert row["scope"] == {"vendor": VENDOR, "max_usd": 100} and row["state"] == "granted"


def test_approvers_are_enforced(tmp_path, env):
    """Only a listed approver may decide: --by mallory is refused (exit 2, naming the
    approvers, nothing changed); unknown jobs and approval ids are refused cleanly."""
    _waiting_job(tmp_path, env)
    clean_refusal(
        _cli("approve", "j", "a1", "--by", "mallory", cwd=tmp_path, env=env),
        "'mallory' may not decide",
        "alice, bob",
    )
    clean_refusal(_cli("approve", "nojob", "a1", cwd=tmp_path, env=env), "nojob")
    clean_refusal(
        _cli("approve", "j", "a9", "--by", "bob", cwd=tmp_path, env=env), "no approval a9"
    )
    clean_refusal(_cli("reject", "j", "../x", "--by", "bob", cwd=tmp_path, env=env), "approval id")
    assert _approvals(tmp_path, env)[0]["state"] == "pending"


def test_encrypted_store_seals_name_and_scope(tmp_path, env):
    """In an encrypted store (`init --encrypt`) the approval's name, scope and approvers
    are not in catalog.db or its WAL (positive control: the same run in a plaintext
    store has them), while `approvals --json` shows them opened."""
    vendor = "vendor-3f9a1c77e2"
    for name, encrypt in (("plain", False), ("sealed", True)):
        folder = tmp_path / name
        folder.mkdir()
        store = folder / "store"
        init = _cli(
            "init", "--store", store, *(["--encrypt"] if encrypt else []), cwd=folder, env=env
        )
        assert init.returncode == 0, init.stderr
        keep = sqlite3.connect(store / "catalog.db")  # keeps the WAL file for the grep
        keep.execute("SELECT COUNT(*) FROM jobs").fetchone()
        run = _cli(
            "run", "--store", store, "--job", "j", _agent(folder, vendor), cwd=folder, env=env
        )
        assert run.returncode == 3, run.stderr
        decided = _cli(
            "approve",
            "--store",
            store,
            "j",
            "a1",
            "--by",
            "alice",
            "--note",
            "note-77ab",
            cwd=folder,
            env=env,
        )
        assert decided.returncode == 0, decided.stderr
        shown = _approvals(folder, env, "--store", store, "--all")
        assert shown[0]["scope"]["vendor"] == vendor and shown[0]["note"] == "note-77ab"
        data = b"".join(p.read_bytes() for p in store.glob("catalog.db*"))
        keep.close()
        found = [
            t for t in (vendor, "purchase", "max_usd", "note-77ab", "alice") if t.encode() in data
        ]
        if encrypt:
            assert found == [], found
        else:
            assert vendor in found and "max_usd" in found, found


def test_decided_while_no_process_after_a_kill_at_the_wait(tmp_path, env, provider):
    """Crash window: SIGKILL right after the snapshot taken at the wait is committed,
    before the wait is recorded (after-snapshot:2): no process is left, the job shows
    as interrupted, its approval is pending. Deciding needs no process; the resume
    restores at the wait, gets the Approval and delivers the order exactly once."""
    killed = _cli(
        "run", "--job", "j", _agent(tmp_path), cwd=tmp_path, env=env, fault="after-snapshot:2"
    )
    assert killed.returncode == -9, killed.stderr
    assert _status(tmp_path, env, "j") == "interrupted"
    assert [r["id"] for r in _approvals(tmp_path, env)] == ["a1"]
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    done = _cli("resume", "j", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "resumed from snapshot 2" in done.stderr
    assert provider.deliveries["buy-acme"] == 1


def test_a_fork_does_not_inherit_the_grant(tmp_path, env, provider):
    """A fork of the job at its approval wait (snapshot 2), made after the parent's
    approval was granted, waits for a decision of its own: its resume records a new
    pending request (same scope) and hibernates; the parent finishes with its grant;
    the fork finishes only once its own approval is granted (one delivery per job)."""
    _waiting_job(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    fork = _cli("fork", "--as", "f", "j@2", cwd=tmp_path, env=env)
    assert fork.returncode == 0, fork.stderr
    waits = _cli("resume", "f", cwd=tmp_path, env=env)
    assert waits.returncode == 3, waits.stderr
    assert "a new request was recorded" in waits.stderr
    [own] = _approvals(tmp_path, env)
    assert (own["job"], own["id"], own["state"]) == ("f", "a1", "pending")
    assert own["scope"] == {"vendor": VENDOR, "max_usd": 100}
    assert provider.deliveries["buy-acme"] == 0
    assert _cli("resume", "j", cwd=tmp_path, env=env).returncode == 0
    assert provider.deliveries["buy-acme"] == 1
    assert _cli("approve", "f", "a1", "--by", "bob", cwd=tmp_path, env=env).returncode == 0
    done = _cli("resume", "f", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert _line(done.stdout, "approval")["by"] == "bob"
    assert provider.deliveries["buy-acme"] == 2


# ---------------------------------------------------------------- plain Python
def test_plain_python_never_assumes_an_approval():
    """Outside a job there is nobody to ask: request_approval raises ApprovalError, and
    an effect (decorated or call_effect) that requires an approval is refused with
    ApprovalScopeError before its function runs."""
    sent = []

    @effect(requires="purchase", within=lambda scope, amount: amount <= scope["max_usd"])
    def buy(amount):
        sent.append(amount)

    with pytest.raises(ApprovalError, match="outside a job"):
        request_approval("purchase", {"max_usd": 1})
    with pytest.raises(ApprovalScopeError, match="outside a job"):
        buy(1)
    with pytest.raises(ApprovalScopeError, match="requires approval 'purchase'"):
        call_effect(sent.append, 2, requires="purchase")
    assert sent == []
    with pytest.raises(ValueError, match="goes with requires"):
        effect(within=lambda scope: True)(lambda: None)


def test_scope_must_be_json():
    """A scope is recorded exactly, as canonical JSON: a value that is not JSON (a
    datetime, a NaN, a non-string key) is refused with a TypeError naming its key."""
    with pytest.raises(TypeError, match=r"scope\['when'\]"):
        request_approval("purchase", {"when": datetime.datetime.now()})
    with pytest.raises(TypeError, match=r"scope\['limits'\]\[1\]"):
        request_approval("purchase", {"limits": [1, float("nan")]})
    with pytest.raises(TypeError, match="JSON object keys are strings"):
        request_approval("purchase", {1: "x"})
    with pytest.raises(TypeError, match="must be a dict"):
        request_approval("purchase", ["max_usd", 1])
    assert isinstance(snapstate.Approval, type)


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime, but SQLite's shared-memory index (-shm), which
    every reader of a WAL database updates."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith("-shm")
    }


def test_approvals_is_read_only_and_bad_input_is_refused_cleanly(tmp_path, env):
    """`approvals` (table, --json, --all) changes no byte or mtime of the store; a
    hostile job id is refused before the store is opened; a damaged (empty) catalog
    makes `approvals` and `approve` exit 2 naming `snaprun repair`, changing nothing."""
    _waiting_job(tmp_path, env)
    store = tmp_path / ".snapstate"
    before = _tree(store)
    for flags in ((), ("--json",), ("--json", "--all"), ("--all",)):
        assert _cli("approvals", *flags, cwd=tmp_path, env=env).returncode == 0
    assert _tree(store) == before
    clean_refusal(_cli("approve", "../x", "a1", cwd=tmp_path, env=env), "job id '../x'")
    clean_refusal(_cli("reject", "/etc", "a1", cwd=tmp_path, env=env), "job id '/etc'")
    assert _tree(store) == before
    for name in ("catalog.db-wal", "catalog.db-shm"):
        (store / name).unlink(missing_ok=True)
    (store / "catalog.db").write_bytes(b"")
    damaged = _tree(store)
    clean_refusal(_cli("approvals", cwd=tmp_path, env=env), "catalog.db", "snaprun repair")
    clean_refusal(
        _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env), "snaprun repair"
    )
    assert _tree(store) == damaged


def test_an_order_placed_before_expiry_is_served_after_it(tmp_path, env, provider):
    """Crash window: SIGKILL right after the granted order's result is recorded
    (effect-after-confirm of the order, effect 2), before any later snapshot. Resumed
    two hours later (the approval has expired since), the re-executed call finds its
    confirmed row: the recorded order is returned, not refused (the agent must not
    believe an order that exists was refused), and nothing is sent again."""
    _waiting_job(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    killed = _cli("resume", "j", cwd=tmp_path, env=env, fault="effect-after-confirm:2")
    assert killed.returncode == -9, killed.stderr
    assert provider.deliveries["buy-acme"] == 1
    done = _cli("resume", "j", cwd=tmp_path, env={**env, "SNAPSTATE_CLOCK_OFFSET": "7200"})
    assert done.returncode == 0, done.stderr
    assert "ordered po-1" in done.stdout and "refused" not in done.stdout
    assert provider.deliveries["buy-acme"] == 1
