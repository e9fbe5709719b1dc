"""The effect ledger's contract, one behaviour at a time (each test a run or two of a
real agent in a real snaprun process, against a real HTTP provider):

* the idempotency key is stable across restores and new for a fork; a fork inherits
  the effects before its snapshot and delivers the later ones again, under new keys;
* re-executed code that calls an effect with other arguments raises DivergenceError
  naming the call site and both calls, and dispatches nothing;
* snapstate.now()/random()/uuid4() give the same values after a kill and resume;
* `snaprun replay` delivers nothing, reproduces the output, and stops where the
  history ends (exit 0) or at the first divergence (exit 1);
* Secret values never reach the ledger or a snapshot; Secret.from_env survives a
  restore, a plain Secret does not (SecretUnavailable);
* kind="read" effects are dispatched again when their outcome is unknown and served
  from the ledger when confirmed;
* Retry retries transient errors with the same key, and never a bare write;
* an explicit key= names one logical action;
* a bare write whose connection dropped after the provider carried it out, and an
  effect called from a worker thread, are not sent a second time by a restore;
* `snaprun stats` counts resumes, effects served from the ledger, reconciled and
  ambiguous actions, and the restart-to-progress time.

"""

from __future__ import annotations

import ast
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun
from providers import Provider
from stored import outsider_chunks, raw_files, stored_state

from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SqliteCatalog

FX_ORDERS = AGENTS / "fx_orders.py"
FX_CLOCK = AGENTS / "fx_clock.py"
FX_VALUES = AGENTS / "fx_values.py"
FX_SECRET = AGENTS / "fx_secret.py"
FX_READ = AGENTS / "fx_read.py"
FX_RETRY = AGENTS / "fx_retry.py"
FX_KEYS = AGENTS / "fx_keys.py"
FX_DROP = AGENTS / "fx_drop.py"
FX_THREAD = AGENTS / "fx_thread.py"
FX_RECOVER = AGENTS / "fx_recover.py"

SECRET, TOKEN = "s3cr3t-value", "t0ken-value"


class _Dropped(Exception):
    """Raised in the provider's request handler: the connection closes unanswered."""


class FxProvider(Provider):
    """tests/providers.Provider that logs every request (path, order, key) and every
    lookup, and serves more paths: /flaky and /flaky-lookup answer 503 to their first
    `fail_first` requests, then behave as /keyed and /lookup; /drop carries the order
    out like /plain, then drops the connection without an answer."""

    def __init__(self, fail_first: int = 0):
        super().__init__()
        self.fail_first = fail_first
        self.log: list[tuple[str, dict, str | None]] = []
        self.replies: list[dict] = []
        self.lookups: list[str] = []
        default = self.server.handle_error

        def handle_error(request, address):
            if not isinstance(sys.exception(), _Dropped):
                default(request, address)

        self.server.handle_error = handle_error

    def order(self, path, order, key):
        with self.lock:
            self.log.append((path, dict(order), key))
            flaky = [p for p, _, _ in self.log if p.startswith("/flaky")]
            if path.startswith("/flaky") and len(flaky) <= self.fail_first:
                self.replies.append({"error": "try again"})
                return 503, {"error": "try again"}
        real = {"/flaky": "/keyed", "/flaky-lookup": "/lookup", "/drop": "/plain"}.get(path, path)
        status, body = super().order(real, order, key)
        with self.lock:
            self.replies.append(body)
        if path == "/drop":
            raise _Dropped("order carried out; connection dropped before the answer")
        return status, body

    def find(self, path):
        with self.lock:
            self.lookups.append(path)
        return super().find(path)

    def sent(self, action: str) -> list[dict]:
        return [o for _, o, _ in self.log if o["action"] == action]

    def keys(self, action: str) -> list:
        return [
            k if p != "/lookup" else o.get("ref") for p, o, k in self.log if o["action"] == action
        ]

    def state(self) -> tuple:
        with self.lock:
            return len(self.log), len(self.lookups), dict(self.deliveries)


# ------------------------------------------------------------------------ helpers
def run_json(*args, cwd):
    run = snaprun(*args, cwd=cwd)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def effects(store, job, cwd) -> list[dict]:
    return run_json("effects", "--store", store, "--json", job, cwd=cwd)


def stats(store, job, cwd) -> dict:
    return run_json("stats", "--store", store, "--json", job, cwd=cwd)


def returned(run):
    assert run.result is not None, run.stderr
    return ast.literal_eval(run.result)


def line_of(path: Path, marker: str) -> int:
    (n,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if marker in line]
    return n


def orders_env(provider, mode="keyed", orders=3, **extra) -> dict:
    return {
        "PROVIDER_URL": provider.url,
        "PROVIDER_MODE": mode,
        "ORDERS": str(orders),
        "EVERY": "1",
        "VALUES": "1",
        **{k: str(v) for k, v in extra.items()},
    }


def catalog_view(store: Path, job: str):
    """Everything a replay must leave untouched: rows, metrics, stored snapshots."""
    catalog = SqliteCatalog(str(store))
    try:
        row = catalog.get_job(job)
        return (
            [(s.seq, s.file) for s in catalog.snapshots(job)],
            catalog.effects(job),
            catalog.metrics(job),
            (row.status, row.resume_count, row.updated),
            stored_state(store, job),
        )
    finally:
        catalog.close()


# ------------------------------------------------------------------------ identity keys
@pytest.mark.smoke
def test_key_is_stable_across_a_kill_and_resume(tmp_path):
    """Crash window: after send of effect 4 (order 1, keyed provider): the resume sends
    the order again with the very key the provider saw first (and `snaprun effects`
    shows), so the provider carries it out once and both runs agree on its id."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider)
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault="effect-after-send:4",
            env=env,
        )
        assert killed.returncode == -9
        (first_key,) = provider.keys("action-1")
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert provider.keys("action-1") == [first_key, first_key]
        assert provider.deliveries["action-1"] == 1
        row = {r["effect"]: r for r in effects(store, "job", tmp_path)}[4]
        assert row["key"] == first_key and row["state"] == "confirmed"
        assert row["attempts"] == 2 and "same idempotency key" in row["note"]
        po = provider.by_key[first_key]["id"]
        assert f"placed 1 {po}\n" in resumed.stdout and returned(resumed)[1] == po


def test_fork_inherits_earlier_effects_and_delivers_later_ones_with_new_keys(tmp_path):
    """No crash window: a finished 4-order job is forked at snapshot 2. The fork's
    ledger lists effects 1-4 (orders 0 and 1, with their original keys and results);
    resuming it places orders 2 and 3 again under new keys (a fork is a new job), while
    the original job's ledger is untouched."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider, orders=4)
        run = snaprun("run", "--store", store, "--job", "job", FX_ORDERS, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        original = effects(store, "job", tmp_path)
        assert [r["effect"] for r in original] == list(range(1, 9))

        forked = snaprun("fork", "--store", store, "--as", "twin", "job@2", cwd=tmp_path)
        assert forked.returncode == 0 and forked.stdout.strip() == "twin", forked.stderr
        inherited = effects(store, "twin", tmp_path)
        strip = lambda rows: [{k: v for k, v in r.items() if k != "updated"} for r in rows]
        assert strip(inherited) == strip(original[:4])

        resumed = snaprun("resume", "--store", store, "twin", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        twin = {r["effect"]: r for r in effects(store, "twin", tmp_path)}
        mine = {r["effect"]: r for r in original}
        assert sorted(twin) == list(range(1, 9))
        for ordinal in (2, 4):
            assert twin[ordinal]["key"] == mine[ordinal]["key"]
        for ordinal in (6, 8):
            assert twin[ordinal]["key"] != mine[ordinal]["key"]
            assert twin[ordinal]["state"] == "confirmed"
        assert provider.deliveries == Counter(
            {"action-0": 1, "action-1": 1, "action-2": 2, "action-3": 2}
        )
        assert provider.keys("action-2") == [mine[6]["key"], twin[6]["key"]]
        ids = returned(run)
        new = [provider.by_key[twin[6]["key"]]["id"], provider.by_key[twin[8]["key"]]["id"]]
        assert returned(resumed) == ids[:2] + new and set(new).isdisjoint(ids)
        assert resumed.stdout == f"placed 2 {new[0]}\nplaced 3 {new[1]}\nall placed 4\n"
        assert effects(store, "job", tmp_path) == original


def test_a_new_job_reusing_an_id_gets_new_keys(tmp_path):
    """No crash window: job "daily" places its orders and is pruned (`prune --finished`
    frees the id); a new job "daily" is a new job and places new orders. Its keys must
    differ from the old job's, or a provider that honours keys answers the new orders
    with the old ones and never carries them out."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider, orders=2)
        first = snaprun("run", "--store", store, "--job", "daily", FX_ORDERS, cwd=tmp_path, env=env)
        assert first.returncode == 0, first.stderr
        old_keys = {r["key"] for r in effects(store, "daily", tmp_path) if r["key"]}
        assert snaprun("prune", "--store", store, "--finished", cwd=tmp_path).returncode == 0
        second = snaprun(
            "run", "--store", store, "--job", "daily", FX_ORDERS, cwd=tmp_path, env=env
        )
        assert second.returncode == 0, second.stderr
        new_keys = {r["key"] for r in effects(store, "daily", tmp_path) if r["key"]}
        assert new_keys.isdisjoint(old_keys)
        assert provider.deliveries == Counter({"action-0": 2, "action-1": 2})
        assert set(returned(second)).isdisjoint(returned(first))


# ------------------------------------------------------------------------ divergence
def test_wall_clock_argument_diverges_and_nothing_is_dispatched(tmp_path):
    """Crash window: after send of effect 1 (its argument is time.time()). The resume
    re-executes the call with a new time: DivergenceError names the call site and both
    calls, nothing is sent (a keyed effect would otherwise be re-sent), the ledger row
    keeps its recorded arguments, and the job is failed, not done."""
    store = tmp_path / "store"
    line = line_of(FX_CLOCK, "# FX-CALL")
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_CLOCK": "wall"}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_CLOCK,
            cwd=tmp_path,
            fault="effect-after-send:1",
            env=env,
        )
        assert killed.returncode == -9
        (row,) = effects(store, "job", tmp_path)
        recorded = row["args"]
        assert row["state"] == "dispatched" and recorded.startswith("'report', ")
        before = provider.state()
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 1 and resumed.stdout == ""
        assert provider.state() == before
        site = f"{FX_CLOCK}:{line}"
        match = re.search(
            r"DivergenceError: effect 1 at (\S+) diverged from the ledger: it "
            r"recorded fx_clock\.report\((.*?)\) at (\S+), and the re-executed "
            r"code now calls fx_clock\.report\((.*?)\)\. Nothing was dispatched",
            resumed.stderr,
        )
        assert match, resumed.stderr
        assert match.group(1) == site and match.group(3) == site
        assert match.group(2) == recorded and match.group(4) != recorded
        assert match.group(4).startswith("'report', ")
        (after,) = effects(store, "job", tmp_path)
        assert (after["state"], after["args"]) == ("dispatched", recorded)
        assert stats(store, "job", tmp_path)["status"] == "failed"


def test_recorded_clock_argument_does_not_diverge(tmp_path):
    """Crash window: after send of effect 2 (its argument is snapstate.now(), ledger
    ordinal 1). The re-executed now() returns the recorded time, so the call is the same,
    is re-sent with the same key, and the provider carries it out once."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_CLOCK": "recorded"}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_CLOCK,
            cwd=tmp_path,
            fault="effect-after-send:2",
            env=env,
        )
        assert killed.returncode == -9
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        first, again = provider.sent("report")
        assert first == again and len(set(provider.keys("report"))) == 1
        assert provider.deliveries == Counter({"report": 1})
        assert resumed.stdout.split()[2] == repr(first["amount"])


def test_changed_environment_diverges_at_the_reexecuted_call(tmp_path):
    """Crash window: after confirm of effect 4 (order 1), before snapshot 2. The resume
    runs with AMOUNT_BIAS changed, so the re-executed order 1 has another amount than
    the confirmed one: DivergenceError with both calls; nothing sent, nothing served.
    Resumed again with the original environment, it finishes with one delivery each."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider)
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault="effect-after-confirm:4",
            env=env,
        )
        assert killed.returncode == -9
        before = provider.state()
        bad = snaprun(
            "resume", "--store", store, "job", cwd=tmp_path, env={**env, "AMOUNT_BIAS": "50"}
        )
        assert bad.returncode == 1 and provider.state() == before
        assert (
            f"effect 4 at {FX_ORDERS}:" in bad.stderr
            and "recorded shop.order_keyed('action-1', 101)" in bad.stderr
            and "now calls shop.order_keyed('action-1', 151)" in bad.stderr
        ), bad.stderr
        assert stats(store, "job", tmp_path)["served_from_ledger"] == 0
        good = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert good.returncode == 0, good.stderr
        assert provider.deliveries == Counter({f"action-{i}": 1 for i in range(3)})
        assert len(provider.log) == 3


# ------------------------------------------------------------------------ recorded values
@pytest.mark.parametrize(
    "window", ["effect-after-prepare", "effect-after-send", "effect-after-confirm"]
)
def test_now_random_uuid4_are_the_same_after_a_restore(window, tmp_path):
    """Crash window: `window` of effect 4, the first durable write after now(),
    random() and uuid4() (ordinals 1-3, batched into effect 4's prepare). The resume
    re-executes them from snapshot 1 and gets the values the killed run printed; the
    uuid, sent as the effect's argument, was carried out once."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_VALUES,
            cwd=tmp_path,
            fault=f"{window}:4",
            env=env,
        )
        assert killed.returncode == -9
        (values,) = killed.stdout.splitlines()
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.splitlines()[0] == values
        _, when, number, ident = values.split()
        assert when.endswith("+00:00") and 0.0 <= float(number) < 1.0
        assert provider.deliveries == Counter({f"tag-{ident}": 1})
        assert returned(resumed) == ident
        kinds = [(r["effect"], r["kind"], r["name"]) for r in effects(store, "job", tmp_path)]
        assert kinds == [
            (1, "value", "snapstate.now"),
            (2, "value", "snapstate.random"),
            (3, "value", "snapstate.uuid4"),
            (4, "write", "fx_values.tag"),
        ]


def test_values_not_yet_durable_are_drawn_again_consistently(tmp_path):
    """Crash window: before the prepare of effect 4, i.e. before now(), random() and
    uuid4() were made durable (they are batched into the next durable write). The
    resume draws them again; whatever it draws is what the one delivery carries, what
    it prints and what the job returns."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_VALUES,
            cwd=tmp_path,
            fault="effect-before-prepare:4",
            env=env,
        )
        assert killed.returncode == -9 and provider.log == []
        assert effects(store, "job", tmp_path) == []
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        ident = resumed.stdout.split()[3]
        assert provider.deliveries == Counter({f"tag-{ident}": 1})
        assert returned(resumed) == ident


# ------------------------------------------------------------------------ replay
def test_replay_delivers_nothing_and_reproduces_the_output(tmp_path):
    """No crash window: a finished 3-order job (lookup provider) is replayed from
    snapshot 1: the same lines and result, no request and no lookup reach the provider,
    and the store (snapshots, ledger, metrics, status) is unchanged."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider, mode="lookup")
        run = snaprun("run", "--store", store, "--job", "job", FX_ORDERS, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        before, view = provider.state(), catalog_view(store, "job")
        replay = snaprun("replay", "--store", store, "job@1", cwd=tmp_path, env=env)
        assert replay.returncode == 0, replay.stderr
        assert replay.stdout == "".join(run.stdout.splitlines(keepends=True)[1:])
        assert f"main() returned {returned(run)!r}; nothing was dispatched" in replay.stderr
        assert provider.state() == before
        assert catalog_view(store, "job") == view


def test_replay_stops_where_the_history_ends(tmp_path):
    """Crash window: after prepare of effect 6 (order 2 dispatched, outcome unknown;
    snapshot 2 committed). Replays stop with exit 0 where the recorded history ends:
    from snapshot 1 at effect 6 (no outcome recorded), printing order 1 on the way;
    nothing is sent, and the row is not marked ambiguous (a replay writes nothing), so
    a real resume afterwards re-sends it with its key and finishes."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider)
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault="effect-after-prepare:6",
            env=env,
        )
        assert killed.returncode == -9
        before, view = provider.state(), catalog_view(store, "job")
        replay = snaprun("replay", "--store", store, "job@1", cwd=tmp_path, env=env)
        assert replay.returncode == 0, replay.stderr
        assert replay.stdout == killed.stdout.splitlines(keepends=True)[1]
        assert "stopped: effect 6 (shop.order_keyed" in replay.stderr
        assert "has no recorded outcome (state dispatched)" in replay.stderr
        assert "nothing was dispatched" in replay.stderr
        assert provider.state() == before and catalog_view(store, "job") == view
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert provider.deliveries == Counter({f"action-{i}": 1 for i in range(3)})


@pytest.mark.parametrize(
    "values,stop",
    [
        (1, "the recorded history ends before snapstate.uuid4() at "),
        (0, "the recorded history ends before effect 2 (shop.order_keyed at "),
    ],
)
def test_replay_stops_before_an_unrecorded_call(values, stop, tmp_path):
    """Crash window: before the prepare of order 1's effect. With a uuid4() before each
    order (values=1) that value (ordinal 3) was never made durable; without (values=0)
    the history ends right before effect 2. A replay from snapshot 1 stops there with
    exit 0, having sent nothing and written nothing."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {**orders_env(provider), "VALUES": str(values)}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault=f"effect-before-prepare:{2 * (values + 1)}",
            env=env,
        )
        assert killed.returncode == -9
        before, view = provider.state(), catalog_view(store, "job")
        replay = snaprun("replay", "--store", store, "job@1", cwd=tmp_path, env=env)
        assert replay.returncode == 0, replay.stderr
        assert replay.stdout == ""
        assert f"stopped: {stop}{FX_ORDERS}:" in replay.stderr, replay.stderr
        assert provider.state() == before and catalog_view(store, "job") == view


def test_replay_stops_at_the_first_divergence(tmp_path):
    """No crash window: a finished job replayed from snapshot 1 with AMOUNT_BIAS
    changed diverges at effect 4 (order 1): exit 1, the divergence named, nothing sent;
    replay without @SEQ is a usage error (exit 2)."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider)
        run = snaprun("run", "--store", store, "--job", "job", FX_ORDERS, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        before, view = provider.state(), catalog_view(store, "job")
        replay = snaprun(
            "replay", "--store", store, "job@1", cwd=tmp_path, env={**env, "AMOUNT_BIAS": "1"}
        )
        assert replay.returncode == 1 and replay.stdout == ""
        assert "replay of job@1 diverged: effect 4 at" in replay.stderr
        assert "shop.order_keyed('action-1', 102)" in replay.stderr
        assert provider.state() == before and catalog_view(store, "job") == view
        usage = snaprun("replay", "--store", store, "job", cwd=tmp_path, env=env)
        assert usage.returncode == 2 and "job@SEQ" in usage.stderr


# ------------------------------------------------------------------------ secrets
def _assert_store_never_holds(store: Path, needles: list[bytes]) -> None:
    files = raw_files(store)
    assert "catalog.db" in files
    seqs = {job: snapshot_seqs(store, job) for job in _jobs(store)}
    assert any(seqs.values())
    chunks = outsider_chunks(store)
    assert chunks
    for name, data in [*files.items(), *(("a chunk", c) for c in chunks)]:
        for needle in needles:
            assert needle not in data, f"{needle!r} in {name}"
    home = Home(str(store))
    try:
        for job, listed in seqs.items():  # bodies are chunked and compressed: read them
            for seq in listed:
                header, payload = home.read_row(home.catalog.snapshot(job, seq))
                for needle in needles:
                    assert needle not in payload and needle.decode() not in json.dumps(header)
    finally:
        home.close()


def _jobs(store: Path) -> list[str]:
    catalog = SqliteCatalog(str(store))
    try:
        return [j.job_id for j in catalog.list_jobs()]
    finally:
        catalog.close()


def test_secrets_never_reach_the_ledger_or_a_snapshot(tmp_path):
    """Crash window: after snapshot 1 (both secrets held in locals). A Secret(...)
    and a Secret.from_env(...) are passed to effects; the provider receives their
    values, yet no byte of the store (catalog.db and its WAL, snapshot files and their
    decompressed bodies), `snaprun effects --json` or `inspect --json` holds either.
    From_env is read again from the resume's environment (a rotated token is used);
    the plain Secret is gone after the restore: SecretUnavailable, with a message
    saying why and what to do, and the effect is not sent."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_SECRET": SECRET, "FX_TOKEN": TOKEN}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_SECRET,
            cwd=tmp_path,
            fault="after-snapshot:1",
            env=env,
        )
        assert killed.returncode == -9
        assert killed.stdout.endswith("Secret('api') Secret('FX_TOKEN')\n")
        resumed = snaprun(
            "resume",
            "--store",
            store,
            "job",
            cwd=tmp_path,
            env={**env, "FX_TOKEN": "t0ken-rotated"},
        )
        assert resumed.returncode == 1
        assert resumed.stdout.startswith("from_env after the snapshot po-3\n")
        assert (
            "SecretUnavailable: secret 'api' was not saved in the snapshot (secrets never "
            "are); obtain it again after a restore, e.g. with Secret.from_env(...)"
        ) in resumed.stderr
        assert [(a, o.get("token")) for _, o, _ in provider.log for a in [o["action"]]] == [
            ("first", SECRET),
            ("second", TOKEN),
            ("third", "t0ken-rotated"),
        ]
        rows = effects(store, "job", tmp_path)
        assert [(r["args"], r["state"]) for r in rows] == [
            ("Secret('api'), 'first'", "confirmed"),
            ("Secret('FX_TOKEN'), 'second'", "confirmed"),
            ("Secret('FX_TOKEN'), 'third'", "confirmed"),
            ("Secret('api'), 'fourth'", "failed"),
        ]
        listing = snaprun("effects", "--store", store, "--json", "job", cwd=tmp_path).stdout
        inspect = snaprun("inspect", "--store", store, "--json", "job@1", cwd=tmp_path)
        assert inspect.returncode == 0, inspect.stderr
        for text in (listing, inspect.stdout):
            assert SECRET not in text and TOKEN not in text and "t0ken-rotated" not in text
        _assert_store_never_holds(store, [SECRET.encode(), TOKEN.encode(), b"t0ken-rotated"])


def test_secret_from_env_needs_its_variable_after_a_restore(tmp_path):
    """Crash window: after snapshot 1. Resumed without FX_TOKEN, the snapshot cannot be
    restored: exit 2 naming the variable, nothing sent, the job still resumable;
    resumed with it, call 3 goes out with the variable's value (and call 4, with the
    plain Secret, fails as documented)."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_SECRET": SECRET, "FX_TOKEN": TOKEN}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_SECRET,
            cwd=tmp_path,
            fault="after-snapshot:1",
            env=env,
        )
        assert killed.returncode == -9
        without = dict(env)
        del without["FX_TOKEN"]
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=without)
        assert resumed.returncode == 2 and resumed.stdout == ""
        assert "environment variable FX_TOKEN is not set" in resumed.stderr
        assert len(provider.log) == 2
        again = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert again.returncode == 1 and "SecretUnavailable" in again.stderr
        assert [o.get("token") for _, o, _ in provider.log] == [SECRET, TOKEN, TOKEN]


def test_secrets_work_in_an_uninterrupted_run(tmp_path):
    """No crash window: the same agent without a restore sends all four calls with the
    right values (so the redaction above is the restore's doing, not a broken agent)."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_SECRET": SECRET, "FX_TOKEN": TOKEN}
        run = snaprun("run", "--store", store, "--job", "job", FX_SECRET, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        assert [o.get("token") for _, o, _ in provider.log] == [SECRET, TOKEN, TOKEN, SECRET]
        _assert_store_never_holds(store, [SECRET.encode(), TOKEN.encode()])


# ------------------------------------------------------------------------ reads
@pytest.mark.parametrize(
    "window,served",
    [("effect-after-prepare", False), ("effect-after-send", False), ("effect-after-confirm", True)],
)
def test_read_effect_redispatched_when_unknown_served_when_confirmed(window, served, tmp_path):
    """Crash window: `window` of a kind="read" effect (1) with a provider that keeps no
    keys. Outcome unknown (after prepare / after send): the resume simply reads again,
    no parking; confirmed: the resume gets the recorded result and reads nothing."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_READ,
            cwd=tmp_path,
            fault=f"{window}:1",
            env=env,
        )
        assert killed.returncode == -9
        sent_before = len(provider.log)
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        (row,) = effects(store, "job", tmp_path)
        assert row["kind"] == "read" and row["state"] == "confirmed"
        report = stats(store, "job", tmp_path)
        if served:
            assert len(provider.log) == sent_before == 1
            assert report["served_from_ledger"] == 1
        else:
            assert len(provider.log) == sent_before + 1
            assert report["served_from_ledger"] == 0 and row["attempts"] == 2
        assert report["ambiguous_total"] == 0 and report["status"] == "done"
        assert {o["action"] for _, o, _ in provider.log} == {"quote-widget"}
        assert returned(resumed) == provider.replies[-1]["id"]
        assert resumed.stdout == f"quoted {returned(resumed)}\n"


# ------------------------------------------------------------------------ retry
def test_retry_reuses_the_key_for_transient_errors(tmp_path):
    """No crash window: /flaky answers 503 twice; Retry(attempts=4) sends the order
    three times, always with the ledger's key; it is carried out once."""
    store = tmp_path / "store"
    with FxProvider(fail_first=2) as provider:
        env = {"PROVIDER_URL": provider.url}
        run = snaprun("run", "--store", store, "--job", "job", FX_RETRY, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        (row,) = effects(store, "job", tmp_path)
        assert provider.keys("retry-1") == [row["key"]] * 3
        assert row["attempts"] == 3 and row["state"] == "confirmed"
        assert provider.deliveries == Counter({"retry-1": 1})
        assert returned(run) == provider.by_key[row["key"]]["id"]


def test_retry_exhausted_fails_and_resume_retries_with_the_same_key(tmp_path):
    """No crash window (a failure): /flaky fails more often than Retry allows, so the
    effect is recorded failed after 4 attempts and the job fails; once the provider
    recovers, resume dispatches the failed effect again with the same key, once."""
    store = tmp_path / "store"
    with FxProvider(fail_first=100) as provider:
        env = {"PROVIDER_URL": provider.url}
        run = snaprun("run", "--store", store, "--job", "job", FX_RETRY, cwd=tmp_path, env=env)
        assert run.returncode == 1 and "ConnectionError" in run.stderr
        (row,) = effects(store, "job", tmp_path)
        assert (row["state"], row["attempts"]) == ("failed", 4)
        assert "ConnectionError" in row["note"] and provider.deliveries == Counter()
        provider.fail_first = 0
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert provider.keys("retry-1") == [row["key"]] * 5
        assert provider.deliveries == Counter({"retry-1": 1})


def test_retry_never_repeats_a_bare_write(tmp_path):
    """No crash window: the same Retry policy on an effect with neither key nor lookup
    (a write): the transient error is not retried (repeating it could duplicate it)."""
    store = tmp_path / "store"
    with FxProvider(fail_first=1) as provider:
        env = {"PROVIDER_URL": provider.url, "FX_RETRY": "plain"}
        run = snaprun("run", "--store", store, "--job", "job", FX_RETRY, cwd=tmp_path, env=env)
        assert run.returncode == 1 and "ConnectionError" in run.stderr
        assert len(provider.log) == 1
        (row,) = effects(store, "job", tmp_path)
        assert (row["state"], row["attempts"]) == ("failed", 1)


# ------------------------------------------------------------------------ explicit keys
def test_explicit_key_with_other_arguments_diverges(tmp_path):
    """No crash window: two call_effect(..., key="charge-1") calls with different
    amounts name the same logical action with different arguments: the second raises
    DivergenceError and is not sent (else a keyed provider answers the 20 charge with the
    10 one, and the agent believes it charged 20)."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_SECOND_AMOUNT": "20"}
        run = snaprun("run", "--store", store, "--job", "job", FX_KEYS, cwd=tmp_path, env=env)
        assert run.returncode == 1, run.stdout
        assert "DivergenceError" in run.stderr, run.stderr
        assert f"{FX_KEYS}:{line_of(FX_KEYS, '# FX-SECOND')}" in run.stderr
        assert "'charge', 10" in run.stderr and "'charge', 20" in run.stderr
        assert len(provider.log) == 1 and "second" not in run.stdout


def test_explicit_key_names_one_action(tmp_path):
    """No crash window: two call_effect(..., key="charge-1") calls with the same
    arguments, to a provider that keeps no keys: one logical action, so the second gets
    the recorded result and nothing is sent twice."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url, "FX_PATH": "/plain"}
        run = snaprun("run", "--store", store, "--job", "job", FX_KEYS, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        assert provider.deliveries == Counter({"charge": 1})
        first, second = returned(run)
        assert first == second


# ------------------------------------------------------------------------ outside the rules
def test_a_bare_write_that_failed_in_transit_is_not_sent_again(tmp_path):
    """Crash window: during the write of snapshot 2 (before-commit), after a bare write
    (no key, no lookup) whose connection dropped after the provider carried it out: the
    agent saw ConnectionError, the ledger recorded "failed". The resume re-executes
    from snapshot 1: at most once means the order must not be sent again (the failure
    is no proof that it did not happen): the job either replays the recorded failure
    identically or parks it as ambiguous."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_DROP,
            cwd=tmp_path,
            fault="before-commit:2",
            env=env,
        )
        assert killed.returncode == -9
        assert killed.stdout == "order failed: RemoteDisconnected\n"
        assert provider.deliveries == Counter({"drop-1": 1})
        (row,) = effects(store, "job", tmp_path)
        assert row["state"] == "failed" and "RemoteDisconnected" in row["note"]
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert provider.deliveries == Counter({"drop-1": 1}), "sent twice"
        assert resumed.returncode in (0, 4), resumed.stderr
        if resumed.returncode == 0:
            assert resumed.stdout == killed.stdout
        else:
            (row,) = effects(store, "job", tmp_path)
            assert row["state"] == "ambiguous"


def test_a_failed_lookup_effect_sent_again_is_not_sent_a_third_time(tmp_path):
    """Crash window: after send of effect 1 while it is dispatched a second time (a
    lookup effect whose first attempt failed with a 503, failing the job; resuming it
    sends it again). After the kill the outcome of that second send is unknown: the
    next resume asks lookup(key), finds the order, and does not send it again."""
    store = tmp_path / "store"
    with FxProvider(fail_first=1) as provider:
        env = {"PROVIDER_URL": provider.url}
        run = snaprun("run", "--store", store, "--job", "job", FX_RECOVER, cwd=tmp_path, env=env)
        assert run.returncode == 1 and "ConnectionError" in run.stderr
        (row,) = effects(store, "job", tmp_path)
        assert row["state"] == "failed" and provider.deliveries == Counter()
        killed = snaprun(
            "resume", "--store", store, "job", cwd=tmp_path, fault="effect-after-send:1", env=env
        )
        assert killed.returncode == -9
        assert provider.deliveries == Counter({"recover-1": 1})
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert provider.deliveries == Counter({"recover-1": 1}), "sent twice"
        assert resumed.returncode == 0, resumed.stderr
        assert len(provider.log) == 2 and provider.lookups[-1] == f"/lookup/{row['key']}"
        assert returned(resumed) == provider.by_ref[row["key"]]["id"]
        (row,) = effects(store, "job", tmp_path)
        assert row["state"] == "confirmed"


def test_an_effect_called_from_a_worker_thread_is_not_outside_the_ledger(tmp_path):
    """Crash window: during the write of snapshot 2 (before-commit), after the agent
    called a bare-write effect from a worker thread (a thread pool). Either the call
    went through the ledger (recorded, so the resume does not send it again) or it was
    refused with a SnapstateError; it must not be sent outside the ledger, where a
    restore sends it again."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = {"PROVIDER_URL": provider.url}
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_THREAD,
            cwd=tmp_path,
            fault="before-commit:2",
            env=env,
        )
        assert killed.returncode == -9
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        recorded = [r for r in effects(store, "job", tmp_path) if r["name"] == "fx_thread.order"]
        if resumed.stdout.startswith("order refused: "):
            assert provider.deliveries == Counter()
        else:
            assert provider.deliveries == Counter({"threaded": 1}), "sent twice"
            assert len(recorded) == 1 and recorded[0]["state"] == "confirmed"


# ------------------------------------------------------------------------ stats
def test_stats_after_a_restore_served_from_the_ledger(tmp_path):
    """Crash window: after confirm of effect 4 (order 1), before snapshot 2. The
    resume re-executes order 1 and gets it from the ledger: stats shows 1 resume, 1
    effect served, nothing reconciled or ambiguous, and a restart-to-progress time
    shorter than the resume itself."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider)
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault="effect-after-confirm:4",
            env=env,
        )
        assert killed.returncode == -9
        report = stats(store, "job", tmp_path)
        assert (
            report["status"],
            report["resumes"],
            report["served_from_ledger"],
            report["restart_to_progress_s"],
        ) == ("interrupted", 0, 0, None)
        t0 = time.monotonic()
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        took = time.monotonic() - t0
        assert resumed.returncode == 0, resumed.stderr
        report = stats(store, "job", tmp_path)
        assert {
            k: report[k]
            for k in (
                "status",
                "resumes",
                "effects",
                "served_from_ledger",
                "reconciled",
                "ambiguous",
                "ambiguous_total",
            )
        } == {
            "status": "done",
            "resumes": 1,
            "effects": 3,
            "served_from_ledger": 1,
            "reconciled": 0,
            "ambiguous": 0,
            "ambiguous_total": 0,
        }
        assert 0 < report["restart_to_progress_s"] < took
        assert provider.deliveries == Counter({f"action-{i}": 1 for i in range(3)})


def test_stats_count_ambiguous_and_reconciled_actions(tmp_path):
    """Crash window: after send of effect 4 with the plain provider. The resume parks:
    stats shows the job parked with 1 ambiguous action; after `reconcile --committed`
    it shows 1 reconciled, 0 ambiguous (1 in total); the final resume serves the
    reconciled result (1 served, 2 resumes) and finishes with one delivery each."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider, mode="plain")
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault="effect-after-send:4",
            env=env,
        )
        assert killed.returncode == -9
        parked = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert parked.returncode == 4, parked.stderr
        assert "snaprun reconcile job 4 --committed" in parked.stderr
        report = stats(store, "job", tmp_path)
        assert (
            report["status"],
            report["ambiguous"],
            report["ambiguous_total"],
            report["reconciled"],
            report["resumes"],
        ) == ("parked", 1, 1, 0, 1)
        assert {r["effect"]: r["state"] for r in effects(store, "job", tmp_path)}[4] == "ambiguous"
        (placed,) = [r for r in provider.replies if r["action"] == "action-1"]
        rec = snaprun(
            "reconcile",
            "--store",
            store,
            "job",
            "4",
            "--committed",
            "--result",
            json.dumps(placed),
            cwd=tmp_path,
        )
        assert rec.returncode == 0, rec.stderr
        report = stats(store, "job", tmp_path)
        assert (report["ambiguous"], report["ambiguous_total"], report["reconciled"]) == (0, 1, 1)
        done = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        report = stats(store, "job", tmp_path)
        assert (report["status"], report["resumes"], report["served_from_ledger"]) == ("done", 2, 1)
        assert report["restart_to_progress_s"] is not None
        assert returned(done) == [r["id"] for r in provider.replies]
        assert provider.deliveries == Counter({f"action-{i}": 1 for i in range(3)})


def test_stats_count_lookups_as_reconciled(tmp_path):
    """Crash window: after send of effect 4 with the lookup provider: the resume asks
    lookup(key), finds the order (no re-send, no parking), and stats counts it as
    reconciled."""
    store = tmp_path / "store"
    with FxProvider() as provider:
        env = orders_env(provider, mode="lookup")
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            FX_ORDERS,
            cwd=tmp_path,
            fault="effect-after-send:4",
            env=env,
        )
        assert killed.returncode == -9
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        report = stats(store, "job", tmp_path)
        assert (report["reconciled"], report["ambiguous_total"], report["served_from_ledger"]) == (
            1,
            0,
            0,
        )
        row = {r["effect"]: r for r in effects(store, "job", tmp_path)}[4]
        assert provider.lookups == [f"/lookup/{row['key']}"] and "lookup" in row["note"]
        assert len(provider.sent("action-1")) == 1
