"""Adversarial review of waits and approvals (issue 11): a demanding user (agents that
buy things, wait days for a human) and an attacker with write access to the catalog or
the environment. Each test proves one property; a test marked xfail(strict=True) proves a
defect whose fix lies in a module reserved for another helper (its reason names it)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from chunked import export_file, snapshot_seqs
from helpers import clean_refusal, snaprun
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


@contextlib.contextmanager
def _db(store: Path) -> Iterator[sqlite3.Connection]:
    """The catalog, as an attacker with write access edits it (autocommit; closed)."""
    db = sqlite3.connect(store / "catalog.db", isolation_level=None)
    try:
        yield db
    finally:
        db.close()


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
    # the row's signature no longer verifies: a damaged store (exit 2), the job as it was
    clean_refusal(done, "catalog row approvals (job j, approval a1)", "signature")


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


def test_a_rejection_flipped_to_granted_in_an_encrypted_store(tmp_path, env, provider):
    """Attacker with catalog write access (not the key), encrypted store: a REJECTED row
    keeps a valid sealed decided_by; flipping its plain `state` column to 'granted'
    passes every check the catalog row allows (the request's HMAC covers name, scope,
    expiry and approvers, not the decision). The resumed job must get ApprovalRejected,
    not an Approval; nothing may be sent."""
    store = tmp_path / "store"
    assert _cli("init", "--store", store, "--encrypt", cwd=tmp_path, env=env).returncode == 0
    _waiting(tmp_path, env, store=store)
    no = _cli("reject", "--store", store, "j", "a1", "--by", "alice", cwd=tmp_path, env=env)
    assert no.returncode == 0, no.stderr
    with _db(store) as db:
        db.execute("UPDATE approvals SET state = 'granted'")
    done = _cli("resume", "--store", store, "j", cwd=tmp_path, env=env)
    assert provider.deliveries["buy-acme"] == 0, done.stdout
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "fails authentication" in done.stderr


# ---------------------------------------------------------------- deciding
@pytest.mark.smoke
def test_two_deciders_at_once_one_wins(tmp_path, env):
    """Race: two deciders (separate store handles, threads released together) grant and
    reject the same pending approval: exactly one decision is recorded and returned; the
    other is refused as already decided; the row holds the winner's decision."""
    from snapstate.runtime._approvals import decide
    from snapstate.serializers._home import Home

    store = _waiting(tmp_path, env)
    homes = [Home(str(store), create=False, writable=True) for _ in range(2)]
    gate = threading.Barrier(2)
    results: list[object] = [None, None]

    def decider(i: int) -> None:
        gate.wait()
        try:
            results[i] = decide(homes[i], "j", "a1", granted=i == 0, by="alice")
        except Exception as exc:  # the loser's refusal
            results[i] = exc
        finally:
            homes[i].catalog.close()  # this thread's connection (one per thread)

    threads = [threading.Thread(target=decider, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [r for r in results if not isinstance(r, Exception)]
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(rows) == 1 and len(errors) == 1, results
    assert "already" in str(errors[0])
    stored = homes[0].catalog.get_approval("j", "a1")
    assert stored is not None and stored.state == rows[0].state  # type: ignore[attr-defined]
    for home in homes:
        home.close()


# ---------------------------------------------------------------- other jobs
def test_a_snapshot_file_resumed_as_another_job_does_not_inherit_the_grant(tmp_path, env, provider):
    """`resume FILE --as k` of the snapshot taken at the wait, after j's approval was
    granted: k has no decision of its own, records a new pending request and
    hibernates (exit 3); nothing is sent until k's own approval is granted."""
    store = _waiting(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    assert snapshot_seqs(store, "j") == [1, 2]
    copy = export_file(store, "j", 2, tmp_path / "wait.snap")
    other = _cli("resume", copy, "--as", "k", cwd=tmp_path, env=env)
    assert other.returncode == 3, other.stderr
    assert provider.deliveries["buy-acme"] == 0
    with _db(store) as db:
        rows = db.execute("SELECT job_id, state FROM approvals ORDER BY job_id").fetchall()
    assert rows == [("j", "granted"), ("k", "pending")]


def test_replay_and_resume_at_of_a_job_that_waited(tmp_path, env, provider):
    """Crash window: SIGKILL right after the granted order's result is recorded
    (effect-after-confirm:2). `resume --at 2` (back to the snapshot taken at the wait)
    re-delivers the same grant and the order is served from the ledger, not sent again;
    then `replay j@1` re-runs the whole job through the wait sending nothing and writing
    no approval row."""
    store = _waiting(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    killed = _cli("resume", "j", cwd=tmp_path, env=env, fault="effect-after-confirm:2")
    assert killed.returncode == -9 and provider.deliveries["buy-acme"] == 1, killed.stderr
    again = _cli("resume", "j", "--at", "2", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert "ordered po-1" in again.stdout
    assert provider.deliveries["buy-acme"] == 1
    with _db(store) as db:
        before = db.execute("SELECT * FROM approvals").fetchall()
    replay = _cli("replay", "j@1", cwd=tmp_path, env=env)
    assert replay.returncode == 0, replay.stderr
    assert "ordered po-1" in replay.stdout
    assert provider.deliveries["buy-acme"] == 1
    with _db(store) as db:
        assert db.execute("SELECT * FROM approvals").fetchall() == before


# ---------------------------------------------------------------- agent frames
FRAMES = textwrap.dedent(
    """
    import contextlib
    import sys

    from snapstate import ApprovalRejected, request_approval, sleep


    @contextlib.contextmanager
    def guard(tag):
        print("enter", tag, flush=True)
        try:
            yield
        except ApprovalRejected as exc:
            print("exit-exc", tag, exc.by, flush=True)
            raise
        finally:
            print("exit", tag, flush=True)


    def steps():
        try:
            yield "first"
            yield "second"
            yield "third"
        finally:
            print("gen finally", flush=True)


    def ask(gen):
        with guard("ask"):
            try:
                sleep(7200)
                print("step", next(gen), flush=True)
                request_approval("purchase", {"n": 1})
                print("step", next(gen), flush=True)
            finally:
                print("ask finally", flush=True)


    def main():
        gen = steps()
        print("step", next(gen), flush=True)
        try:
            ask(gen)
        except ApprovalRejected as exc:
            print("caught", type(exc).__name__, exc.note, flush=True)
            try:
                raise ValueError("in except")
            except ValueError:
                sleep(7200)
                print("handling", repr(sys.exc_info()[1]), flush=True)
        finally:
            print("main finally", next(gen), flush=True)
        return "ok"
    """
)
FRAMES_STDOUT = (
    "step first\nenter ask\n"
    "step second\n"
    "ask finally\nexit-exc ask bob\nexit ask\ncaught ApprovalRejected nope\n"
    "handling ValueError('in except')\nmain finally third\ngen finally\n"
)


def test_waits_in_a_with_block_a_finally_and_an_except_block(tmp_path):
    """A timer wait and an approval wait inside a `with` block and a try/finally in a
    helper frame, with a suspended generator alive across them; the rejection raised at
    the restored approval wait runs the helper's finally, the context manager's
    except/finally and the agent's except exactly as uninterrupted; a timer wait inside
    that except block hibernates and the exception being handled is still the same
    after the restore. The stdout of the four processes adds up to the uninterrupted
    run's (written out here)."""
    (tmp_path / "frames.py").write_text(FRAMES)
    later = {"SNAPSTATE_CLOCK_OFFSET": "7300"}
    outs = []
    first = snaprun("run", "--job", "g", "frames.py", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    outs.append(first.stdout)
    second = snaprun("resume", "g", cwd=tmp_path, env=later)
    assert second.returncode == 3, second.stderr
    outs.append(second.stdout)
    [pending] = json.loads(snaprun("approvals", "--json", cwd=tmp_path).stdout)
    no = snaprun("reject", "g", pending["id"], "--by", "bob", "--reason", "nope", cwd=tmp_path)
    assert no.returncode == 0, no.stderr
    third = snaprun("resume", "g", cwd=tmp_path, env=later)
    assert third.returncode == 3, third.stderr
    outs.append(third.stdout)
    last = snaprun("resume", "g", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "14600"})
    assert last.returncode == 0, last.stderr
    outs.append(last.stdout)
    assert "".join(outs) == FRAMES_STDOUT, outs


def test_a_long_wait_inside_a_running_generator_names_the_wait(tmp_path):
    """A long sleep() inside a generator's body (the consumer drives its frame, so it
    cannot be frozen) is refused at the call; the message must name the wait the user
    wrote (sleep) and the fix (wait outside the generator), not tell them to move a
    snapshot() call that is not in their code."""
    (tmp_path / "gen.py").write_text(
        "import snapstate\n\n"
        "def ticks():\n    snapstate.sleep(7200)\n    yield 1\n\n"
        "def main():\n    return list(ticks())\n"
    )
    run = snaprun("run", "--job", "g", "gen.py", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert "SnapshotError" in run.stderr
    assert "Move the snapshot() or the wait (sleep()" in run.stderr


# ---------------------------------------------------------------- scope values
def test_scopes_that_cannot_be_recorded_exactly_are_refused_naming_the_place():
    """Scope values JSON cannot carry exactly are refused with a TypeError naming their
    place (before: an int past Python's digit limit raised a bare ValueError from json,
    a 10000-deep list a RecursionError, a lone surrogate in the name a UnicodeEncodeError
    from the catalog after the request was half-made); floats, unicode, nested lists
    and large-but-fine ints are recorded exactly (they round-trip)."""
    from snapstate.runtime._approvals import _text, canonical_scope

    with pytest.raises(TypeError, match=r"scope\['n'\].*as a string"):
        canonical_scope({"n": 10**5000})
    deep: list[object] = []
    for _ in range(10000):
        deep = [deep]
    with pytest.raises(TypeError, match="nests deeper"):
        canonical_scope({"d": deep})
    with pytest.raises(TypeError, match="surrogate"):
        canonical_scope({"s": "ok\ud800"})
    with pytest.raises(TypeError, match="surrogate"):
        canonical_scope({"\udfff": 1})
    with pytest.raises(ValueError, match="surrogates"):
        _text("buy\ud800", "request_approval()'s name")
    fine = {
        "max_usd": 0.1 + 0.2,
        "neg_zero": -0.0,
        "big": 2**64 + 1,
        "tiny": 5e-324,
        "vendor": "Ærø – 東京 🚀",
        "lists": [[1, [2.5, ["x", None, True]]], []],
    }
    text = canonical_scope(fine)
    assert json.loads(text) == fine
    assert canonical_scope(json.loads(text)) == text  # canonical: a fixed point
    assert canonical_scope({"b": 1, "a": 2}) == canonical_scope({"a": 2, "b": 1})
    assert canonical_scope({"x": 1}) != canonical_scope({"x": True})
    assert canonical_scope({"x": 1}) != canonical_scope({"x": 1.0})


# ---------------------------------------------------------------- encrypted, read-only
def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime, but SQLite's shared-memory index (-shm)."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith("-shm")
    }


def test_a_waiting_job_in_an_encrypted_store_leaks_nothing_and_reads_change_nothing(tmp_path, env):
    """Encrypted store, a job waiting at its approval (a rejection's note recorded on a
    second job): no file of the store (catalog, WAL, snapshot files, keys aside) holds
    the approval's name, scope, approvers, note or the wait's reason in clear; and every
    read-only command on the waiting job (ls, approvals, inspect, log, effects, stats,
    verify) changes no byte and no mtime of the store."""
    store = tmp_path / "store"
    assert _cli("init", "--store", store, "--encrypt", cwd=tmp_path, env=env).returncode == 0
    keep = sqlite3.connect(store / "catalog.db")  # keeps the WAL file for the grep
    keep.execute("SELECT COUNT(*) FROM jobs").fetchone()
    _waiting(tmp_path, env, store=store)
    s = ["--store", str(store)]
    assert snapshot_seqs(store, "j") == [1, 2]
    snap = export_file(store, "j", 2, tmp_path / "wait.snap")  # outside the store
    before = _tree(store)
    for args in (
        ("ls",),
        ("ls", "--json"),
        ("approvals",),
        ("approvals", "--json", "--all"),
        ("inspect", "j"),
        ("log", "j"),
        ("log", "--json", "j"),
        ("effects", "j"),
        ("stats",),
        ("verify", "j@2"),
        ("verify", "j"),
        ("verify", snap),
    ):
        out = _cli(args[0], *s, *args[1:], cwd=tmp_path, env=env)
        assert out.returncode == 0, (args, out.stderr)
    assert _tree(store) == before
    secrets = ("purchase", "acme", "max_usd", "alice")  # the state column is plain
    leaks = {
        name: [t for t in secrets if t.encode() in data]
        for name, (data, _) in before.items()
        if name != "keys.json"
    }
    keep.close()
    assert {k: v for k, v in leaks.items() if v} == {}


def test_absurd_wait_lengths_are_refused_at_the_call():
    """sleep(1e300) made a job fail with a bare OverflowError from time_t (the due time
    could not be described); waits beyond ~100 years, or moments past year 9999, are
    refused at the call with a ValueError naming the limit."""
    import snapstate

    with pytest.raises(ValueError, match="about 100 years"):
        snapstate.sleep(1e300)
    with pytest.raises(ValueError, match="year 9999"):
        snapstate.sleep_until(1e300)


@pytest.mark.parametrize("fault", ["approval-after-request", "before-commit:2", "after-snapshot:2"])
def test_killed_around_the_hibernation_then_decided(tmp_path, env, provider, fault):
    """Crash windows around the hibernation at an approval: SIGKILL right after the
    pending row is recorded (approval-after-request), right before the wait's snapshot
    is committed (before-commit:2), right after it is committed and before the wait
    row (after-snapshot:2). Whatever the window: the resume ends waiting (exit 3), one
    approval row exists, the approval is decided with no process, and the next resume
    delivers the order exactly once."""
    (tmp_path / "buyer.py").write_text(AGENT)
    killed = _cli("run", "--job", "j", "buyer.py", cwd=tmp_path, env=env, fault=fault)
    assert killed.returncode == -9, killed.stderr
    again = _cli("resume", "j", cwd=tmp_path, env=env)
    assert again.returncode == 3, again.stderr
    with _db(tmp_path / ".snapstate") as db:
        assert db.execute("SELECT approval_id, state FROM approvals").fetchall() == [
            ("a1", "pending")
        ]
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    done = _cli("resume", "j", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "ordered po-1" in done.stdout
    assert provider.deliveries["buy-acme"] == 1


def test_replay_of_a_job_still_waiting_writes_nothing(tmp_path, env, provider):
    """`replay j@1` and `replay j@2` of a job waiting at an undecided approval: the
    replay reaches the wait, which no decision ends; it must write nothing (no byte,
    no mtime of the store: no snapshot, no wait row, no approval row), send nothing,
    and exit cleanly (never a traceback)."""
    store = _waiting(tmp_path, env)
    before = _tree(store)
    for ref in ("j@1", "j@2"):
        replay = _cli("replay", ref, cwd=tmp_path, env=env)
        assert "Traceback" not in replay.stderr, replay.stderr
        assert replay.returncode in (0, 3), (ref, replay.returncode, replay.stderr)
    after = _tree(store)
    # An empty WAL file left by SQLite's open is no write (reported to the lead: replay
    # opens the catalog writable); any content or any other change is.
    if "catalog.db-wal" not in before and after.get("catalog.db-wal", (b"",))[0] == b"":
        after.pop("catalog.db-wal", None)
    assert after == before
    assert provider.deliveries["buy-acme"] == 0


def test_a_fork_after_the_grant_holds_the_approval_but_not_the_right(tmp_path, env, provider):
    """`fork j@3` (the snapshot taken after the grant, its frames holding the Approval):
    the fork's order is refused (its job has no grant of its own) and nothing is sent
    for it, while the parent's order is delivered once."""
    _waiting(tmp_path, env)
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    killed = _cli("resume", "j", cwd=tmp_path, env=env, fault="after-snapshot:3")
    assert killed.returncode == -9, killed.stderr
    assert _cli("fork", "--as", "f", "j@3", cwd=tmp_path, env=env).returncode == 0
    fork = _cli("resume", "f", cwd=tmp_path, env=env)
    assert fork.returncode == 0, fork.stderr
    assert "refused" in fork.stdout and "no granted approval" in fork.stdout
    assert provider.deliveries["buy-acme"] == 0
    parent = _cli("resume", "j", cwd=tmp_path, env=env)
    assert parent.returncode == 0 and "ordered po-1" in parent.stdout, parent.stderr
    assert provider.deliveries["buy-acme"] == 1


def test_a_grant_copied_to_another_job_authorizes_nothing(tmp_path, env, provider):
    """Attacker with catalog write access (plaintext store): two jobs wait at the same
    kind of approval; j's is granted; the attacker copies j's granted row (scope,
    digest, decider) over k's pending row. k's resume must not get a grant (the row's
    HMAC binds it to job j); only j's order is sent."""
    store = _waiting(tmp_path, env)
    k = _cli("run", "--job", "k", "buyer.py", cwd=tmp_path, env=env)
    assert k.returncode == 3, k.stderr
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    with _db(store) as db:
        db.execute("DELETE FROM approvals WHERE job_id = 'k'")
        db.execute(
            "INSERT INTO approvals SELECT 'k', approval_id, name, scope, digest, requested, "
            "expires, approvers, state, decided_by, decided_at, note, site, mac FROM approvals "
            "WHERE job_id = 'j'"
        )
    other = _cli("resume", "k", cwd=tmp_path, env=env)
    # the row's signature binds it to job j: a damaged store (exit 2), k still waits
    clean_refusal(other, "catalog row approvals (job k, approval a1)", "signature")
    assert provider.deliveries["buy-acme"] == 0
    mine = _cli("resume", "j", cwd=tmp_path, env=env)
    assert mine.returncode == 0 and provider.deliveries["buy-acme"] == 1, mine.stderr


def _current_key(cwd: Path, env: dict) -> str:
    listed = json.loads(_cli("keys", "list", "--json", cwd=cwd, env=env).stdout)
    [current] = [k["key"] for k in listed if k["current"]]
    return str(current)


def test_key_rotation_keeps_a_pending_approval_valid_retiring_voids_it(tmp_path, env, provider):
    """The approval rows are verified with the store's keys: after `keys rotate` a
    request made under the old key is still decided and honored (one order); a request
    whose key was then retired no longer verifies: deciding it is refused (exit 2),
    nothing sent."""
    _waiting(tmp_path, env)
    assert _cli("keys", "rotate", cwd=tmp_path, env=env).returncode == 0
    assert _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env).returncode == 0
    done = _cli("resume", "j", cwd=tmp_path, env=env)
    assert done.returncode == 0 and provider.deliveries["buy-acme"] == 1, done.stderr
    k = _cli("run", "--job", "k", "buyer.py", cwd=tmp_path, env=env)
    assert k.returncode == 3, k.stderr
    kid = _current_key(tmp_path, env)  # the key k's request was made under
    assert _cli("keys", "rotate", cwd=tmp_path, env=env).returncode == 0
    assert _cli("keys", "retire", kid, cwd=tmp_path, env=env).returncode == 0
    clean_refusal(
        _cli("approve", "k", "a1", "--by", "alice", cwd=tmp_path, env=env), "does not verify"
    )
    assert provider.deliveries["buy-acme"] == 1


def test_decided_while_the_job_polls_in_its_process(tmp_path, env, provider):
    """An approval due to expire within SNAPSTATE_HIBERNATE_AFTER is polled in the
    running process (every second) instead of hibernating: a decision made by another
    process meanwhile (the job holds its lease; deciding needs none) is seen by the
    running job, which finishes in the same process with exactly one order and without
    a hibernation."""
    import subprocess
    import sys
    import time

    (tmp_path / "buyer.py").write_text(AGENT)
    full = {**__import__("os").environ, **env, "SNAPSTATE_HIBERNATE_AFTER": "7200"}
    full.pop("SNAPSTATE_FAULT", None)
    snaprun_bin = Path(sys.executable).parent / "snaprun"
    job = subprocess.Popen(
        [snaprun_bin, "run", "--job", "j", "buyer.py"],
        cwd=tmp_path,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the request is recorded
            store = tmp_path / ".snapstate" / "catalog.db"
            if store.exists():
                with contextlib.closing(sqlite3.connect(store)) as db:
                    try:
                        if db.execute("SELECT COUNT(*) FROM approvals").fetchone()[0]:
                            break
                    except sqlite3.OperationalError:
                        pass
            assert job.poll() is None, job.communicate()
            time.sleep(0.1)
        decided = _cli("approve", "j", "a1", "--by", "alice", cwd=tmp_path, env=env)
        assert decided.returncode == 0, decided.stderr
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, err
    assert "ordered po-1" in out and "waits:" not in err
    assert provider.deliveries["buy-acme"] == 1


def test_a_catalog_edit_cannot_drive_the_deciders_terminal(tmp_path, env):
    """Attacker with catalog write access: an approval's name edited to hold terminal
    escape sequences (ESC [2J clears the screen, OSC sets the title). `snaprun
    approvals` — what a person reads before deciding — must not print them raw."""
    store = _waiting(tmp_path, env)
    with _db(store) as db:
        db.execute("UPDATE approvals SET name = 'purchase\x1b[2J\x1b]0;ok\x07'")
    table = _cli("approvals", cwd=tmp_path, env=env)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout
    assert "ALTERED" in table.stdout  # the name is part of the row's keyed digest


TIMER = textwrap.dedent(
    """
    import snapstate

    def main():
        print("start", flush=True)
        snapstate.sleep(7200)
        print("woke", flush=True)
        return "ok"
    """
)


def test_an_edited_wait_row_cannot_wake_a_job_early(tmp_path):
    """Attacker with catalog write access: the waits row of a job sleeping two hours is
    edited (due set to the epoch, kind and reason changed). Its signature no longer
    verifies: a resume refuses it (exit 2 naming the row) before any agent code runs,
    the job still waiting. With the row restored, a resume polls the wait the signed
    snapshot holds: it hibernates again (exit 3, no stdout), and finishes only when the
    real due time has come."""
    (tmp_path / "timer.py").write_text(TIMER)
    first = snaprun("run", "--job", "t", "timer.py", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    with _db(tmp_path / ".snapstate") as db:
        (original,) = db.execute("SELECT due, kind, reason FROM waits").fetchall()
        db.execute("UPDATE waits SET due = 0, kind = 'approval', reason = 'go'")
    edited = snaprun("resume", "t", cwd=tmp_path)
    clean_refusal(edited, "catalog row waits (job t)", "signature")
    with _db(tmp_path / ".snapstate") as db:
        assert db.execute("SELECT status FROM jobs").fetchone() == ("waiting",)
        db.execute("UPDATE waits SET due = ?, kind = ?, reason = ?", original)
    early = snaprun("resume", "t", cwd=tmp_path)
    assert early.returncode == 3, early.stderr
    assert early.stdout == ""
    done = snaprun("resume", "t", cwd=tmp_path, env={"SNAPSTATE_CLOCK_OFFSET": "7300"})
    assert done.returncode == 0 and done.stdout == "woke\n", done.stderr
