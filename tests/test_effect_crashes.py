"""Effect ledger under SIGKILL: at most one delivery per logical action.

A real agent (tests/agents/fx_orders.py, built on shop.py's effects) places orders with
a real HTTP provider (tests/providers.py) in one of three modes: `keyed` (honours an
Idempotency-Key), `lookup` (no keys, but orders can be looked up by reference) and
`plain` (neither). The agent process SIGKILLs itself (SNAPSTATE_FAULT) in one of the
crash windows of an effect or a snapshot:

    effect-before-prepare  the effect's "dispatched" row is not yet committed
    effect-after-prepare   the row is committed, nothing was sent
    effect-after-send      the provider committed the order; the response is not recorded
    effect-after-confirm   the result is recorded; the next snapshot is not taken
    before-commit          during the snapshot write: the file is written, its catalog
                           row is not committed
    after-snapshot         the snapshot is committed (the process dies right after)

and is resumed in a new process. Every kill point is predicted exactly from the
agent's shape (which orders are confirmed, dispatched, delivered, printed; which
snapshot the resume starts from) and checked against the provider, the ledger, the
process exit codes and stdout:

* the provider saw at most one delivery per action; in the end exactly one;
* a confirmed effect is never sent again (POSTs per action are counted even when a
  key deduplicates them), and the keyed provider sees the same key on a re-send;
* a kill after prepare or after send with the `plain` provider leaves the effect
  ambiguous: the resume exits 4 (parked), `snaprun effects --json` shows it
  ambiguous, and `snaprun reconcile` (decided by asking the provider, as an operator
  would) lets the job finish;
* a resume whose re-executed calls have other arguments than the ledger recorded
  (AMOUNT_BIAS changed) fails with DivergenceError and dispatches nothing;
* the returned order ids are the ids the provider issued, each printed order line
  names that id, and "all placed N" is printed once, last.

The default run sweeps 3 modes x 6 windows x 28 kill points (504): in each cell the 4
targets of shop.py with ORDERS=4 (effects 2, 4, 6, 8; snapshots 1..4), then seeded
random shapes of fx_orders.py; --run-slow adds 2016 more and longer kill chains. Kill
points run in parallel, each with its own provider and store.
"""

from __future__ import annotations

import ast
import json
import random
import threading
import traceback
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import AGENTS, Run, snaprun
from providers import Provider

from snapstate.runtime._cli import cli
from snapstate.serializers._sqlite import SqliteCatalog

FX_ORDERS = AGENTS / "fx_orders.py"
SHOP = AGENTS / "shop.py"

MODES = ("keyed", "lookup", "plain")
BEFORE_PREPARE, AFTER_PREPARE, AFTER_SEND, AFTER_CONFIRM = (
    "effect-before-prepare",
    "effect-after-prepare",
    "effect-after-send",
    "effect-after-confirm",
)
BEFORE_COMMIT, AFTER_SNAPSHOT = "before-commit", "after-snapshot"
EFFECT_WINDOWS = (BEFORE_PREPARE, AFTER_PREPARE, AFTER_SEND, AFTER_CONFIRM)
SNAPSHOT_WINDOWS = (BEFORE_COMMIT, AFTER_SNAPSHOT)
WINDOWS = EFFECT_WINDOWS + SNAPSHOT_WINDOWS

POINTS_PER_CELL = 28  # x 18 cells = 504 kill points of the sweep, in 2 parts:
# the default run's representatives (two of the cell's four shop.py targets, so that the
# three modes together reach each target of each window, and one diverging and one plain
# seeded shape per cell: 72 in all) and the rest (432, with --run-slow)
SLOW_POINTS_PER_CELL = 112  # x 18 cells = 2016 more with --run-slow
WORKERS = 4
SEED = 20261129
BIAS = 1000  # AMOUNT_BIAS of a diverging resume


# ------------------------------------------------------------------------ provider
class RecordingProvider(Provider):
    """tests/providers.Provider that also records every request it receives: POSTs per
    action (including those a repeated key deduplicated), the key or reference each
    carried, the distinct orders it created, and lookups per reference."""

    def __init__(self):
        super().__init__()
        self.requests: Counter = Counter()
        self.keys: dict[str, list] = defaultdict(list)
        self.issued: dict[str, list[dict]] = defaultdict(list)
        self.lookups: Counter = Counter()

    def order(self, path, order, key):
        status, body = super().order(path, order, key)
        with self.lock:
            action = order["action"]
            self.requests[action] += 1
            self.keys[action].append(key if path == "/keyed" else order.get("ref"))
            if status == 200 and body["id"] not in {o["id"] for o in self.issued[action]}:
                self.issued[action].append(body)
        return status, body

    def find(self, path):
        with self.lock:
            self.lookups[path.rsplit("/", 1)[-1]] += 1
        return super().find(path)

    def state(self) -> tuple:
        with self.lock:
            return (dict(self.requests), dict(self.lookups), dict(self.deliveries))


# ------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class Shape:
    """fx_orders.py's shape: see its docstring."""

    orders: int
    every: int
    values: int

    def effect(self, i: int) -> int:
        return (i + 1) * (self.values + 1)

    def order_of(self, ordinal: int) -> int:
        return ordinal // (self.values + 1) - 1

    @property
    def snap_orders(self) -> list[int]:
        """The order index each snapshot follows (snapshot seq s is snap_orders[s - 1])."""
        return [i for i in range(self.orders) if (i + 1) % self.every == 0 or i == self.orders - 1]

    def first_after(self, committed: int) -> int:
        """The first order a resume from snapshot `committed` (0: none) re-executes."""
        return self.snap_orders[committed - 1] + 1 if committed else 0

    def env(self, mode: str, url: str) -> dict:
        return {
            "PROVIDER_URL": url,
            "PROVIDER_MODE": mode,
            "ORDERS": str(self.orders),
            "EVERY": str(self.every),
            "VALUES": str(self.values),
        }

    def targets(self, window: str) -> list[int]:
        if window in EFFECT_WINDOWS:
            return [self.effect(i) for i in range(self.orders)]
        return list(range(1, len(self.snap_orders) + 1))


@dataclass(frozen=True)
class Kill:
    mode: str
    shape: Shape
    window: str
    n: int  # the effect ordinal, or the snapshot seq
    diverge: bool = False  # resume first with other arguments
    agent: Path = FX_ORDERS

    @property
    def fault(self) -> str:
        return f"{self.window}:{self.n}"

    @property
    def k(self) -> int:
        """The order the kill happens at (or whose snapshot it is)."""
        if self.window in EFFECT_WINDOWS:
            return self.shape.order_of(self.n)
        return self.shape.snap_orders[self.n - 1]

    def line(self, i: int, ids: dict[int, str]) -> str:
        """What the agent prints after placing order i."""
        if self.agent == SHOP:
            return f"placed {i} action-{i} True\n"
        return f"placed {i} {ids[i]}\n"

    def lines(self, orders, ids: dict[int, str]) -> str:
        return "".join(self.line(i, ids) for i in orders)

    def __str__(self) -> str:
        s = self.shape
        return (
            f"{self.agent.name} {self.mode} {self.fault} orders={s.orders} every={s.every} "
            f"values={s.values}{' diverge' if self.diverge else ''}"
        )


@dataclass(frozen=True)
class Expected:
    """What the killed run leaves behind, predicted from the kill point."""

    confirmed: frozenset
    dispatched: frozenset  # prepared, outcome unknown
    delivered: frozenset  # the provider has the order
    printed: tuple  # orders whose line the killed run printed
    committed: int  # the latest committed snapshot


def predict(kill: Kill) -> Expected:
    k, w, shape = kill.k, kill.window, kill.shape
    if w in EFFECT_WINDOWS:
        before = set(range(k))
        return Expected(
            frozenset(before | ({k} if w == AFTER_CONFIRM else set())),
            frozenset({k} if w in (AFTER_PREPARE, AFTER_SEND) else set()),
            frozenset(before | ({k} if w in (AFTER_SEND, AFTER_CONFIRM) else set())),
            tuple(range(k)),
            sum(1 for i in shape.snap_orders if i < k),
        )
    upto = frozenset(range(k + 1))
    return Expected(
        upto, frozenset(), upto, tuple(range(k + 1)), kill.n - 1 if w == BEFORE_COMMIT else kill.n
    )


SHOP_SHAPE = Shape(orders=4, every=1, values=1)  # shop.py: uuid4, order, snapshot


def seeded_kills(mode: str, window: str, count: int, salt: str, shop: bool = False) -> list[Kill]:
    """`count` kill points in this window: with shop=True, first each target of shop.py
    with ORDERS=4 (effects 2, 4, 6, 8 or snapshots 1..4); then seeded random shapes
    of fx_orders.py, a fifth of them resumed first with diverging arguments."""
    rng = random.Random(SEED ^ zlib.crc32(f"{salt}/{mode}/{window}".encode()))
    kills = (
        [Kill(mode, SHOP_SHAPE, window, n, agent=SHOP) for n in SHOP_SHAPE.targets(window)]
        if shop
        else []
    )
    while len(kills) < count:
        shape = Shape(orders=rng.randint(1, 5), every=rng.randint(1, 3), values=rng.randint(0, 2))
        kills.append(
            Kill(mode, shape, window, rng.choice(shape.targets(window)), diverge=rng.random() < 0.2)
        )
    return kills


# ------------------------------------------------------------------------ helpers
def read_ledger(store: Path, job: str):
    """(effect rows by ordinal, metrics, job row), read from the catalog in-process."""
    catalog = SqliteCatalog(str(store))
    try:
        return (
            {e.ordinal: e for e in catalog.effects(job)},
            catalog.metrics(job),
            catalog.get_job(job),
        )
    finally:
        catalog.close()


def effect_states(rows: dict) -> dict[int, str]:
    return {o: e.state for o, e in rows.items() if e.kind != "value"}


def returned(run) -> list:
    assert run.result is not None, run.stderr
    return ast.literal_eval(run.result)


_CLI_LOCK = threading.Lock()  # CliRunner swaps sys.stdout/stderr: one call at a time


def snaprun_in_process(*args) -> Run:
    """`snaprun ARGS...` through click's runner over the real command group, in this
    process (its exit code, stdout and stderr as a Run). The sweep's kill points use it
    for the commands after a park (effects, reconcile); the killed runs and resumes
    stay real processes, and test_kill_chain, test_resend_after_reconcile_... run the
    same commands as real `snaprun` processes."""
    with _CLI_LOCK:
        result = CliRunner().invoke(cli, [str(a) for a in args])
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        code = 1  # what an escaping exception exits with; its traceback goes to stderr
        stderr = result.stderr + "".join(traceback.format_exception(result.exception))
        return Run(code, result.stdout, stderr)
    return Run(code, result.stdout, result.stderr)


def reconcile_by_asking(
    provider: RecordingProvider, store, job, ordinal: int, action: str, cwd, in_process=False
) -> bool:
    """What an operator does with a parked job: check with the provider whether the
    action happened, and say so (with `snaprun reconcile`; in_process: through click's
    runner). Returns whether it was committed."""
    assert provider.deliveries[action] <= 1
    if provider.deliveries[action]:
        args = ["--committed", "--result", json.dumps(provider.issued[action][0])]
    else:
        args = ["--not-committed"]
    command = ("reconcile", "--store", store, job, ordinal, *args)
    run = snaprun_in_process(*command) if in_process else snaprun(*command, cwd=cwd)
    assert run.returncode == 0, run.stderr
    return bool(provider.deliveries[action])


def cli_effects(store, job, cwd, in_process=False) -> list[dict]:
    """`snaprun effects --json JOB` (in_process: through click's runner)."""
    command = ("effects", "--store", store, "--json", job)
    run = snaprun_in_process(*command) if in_process else snaprun(*command, cwd=cwd)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


# ------------------------------------------------------------------------ one kill point
def run_kill_point(kill: Kill, root: Path) -> None:
    """One killed run and its resume (with reconcile and a second resume when parked,
    and a diverging resume first when kill.diverge); every observable predicted."""
    mode, shape, k = kill.mode, kill.shape, kill.k
    store, job = root / "store", "job"
    root.mkdir(parents=True)
    exp = predict(kill)
    with RecordingProvider() as provider:
        env = shape.env(mode, provider.url)

        # -- the killed run
        killed = snaprun(
            "run", "--store", store, "--job", job, kill.agent, cwd=root, fault=kill.fault, env=env
        )
        assert killed.returncode == -9, f"the fault did not fire: {killed.stderr}"
        rows, metrics, jobrow = read_ledger(store, job)
        assert effect_states(rows) == {
            **{shape.effect(i): "confirmed" for i in exp.confirmed},
            **{shape.effect(i): "dispatched" for i in exp.dispatched},
        }
        assert set(provider.deliveries) == {f"action-{i}" for i in exp.delivered}
        assert all(n == 1 for n in provider.deliveries.values())
        assert jobrow.status == "running"  # its runner died holding the lease
        outputs = [killed.stdout]
        sent_before = dict(provider.requests)

        r0 = shape.first_after(exp.committed)
        reexecuted = range(r0, shape.orders)
        recorded = (exp.confirmed | exp.dispatched) & set(reexecuted)
        biased: set[int] = set()
        resumed_biased = False

        # -- a resume with other arguments: the same identities, different calls
        if kill.diverge:
            before = provider.state()
            run = snaprun(
                "resume", "--store", store, job, cwd=root, env={**env, "AMOUNT_BIAS": str(BIAS)}
            )
            if recorded:
                d = min(recorded)
                assert run.returncode == 1, run.stderr
                assert "DivergenceError" in run.stderr, run.stderr
                assert f"effect {shape.effect(d)} at {kill.agent}:" in run.stderr
                assert f"order_{mode}('action-{d}', {100 + d})" in run.stderr
                assert f"order_{mode}('action-{d}', {BIAS + 100 + d})" in run.stderr
                assert "Nothing was dispatched" in run.stderr
                assert run.stdout == ""
                outputs.append(run.stdout)
                assert provider.state() == before  # nothing sent, nothing looked up
                rows2, _, jobrow = read_ledger(store, job)
                assert effect_states(rows2) == effect_states(rows)
                assert jobrow.status == "failed"
            else:
                # Nothing re-executed was recorded: the new arguments are simply used.
                assert run.returncode == 0, run.stderr
                assert (
                    run.stdout
                    == kill.lines(reexecuted, _ids(provider, shape))
                    + f"all placed {shape.orders}\n"
                )
                biased, resumed_biased = set(reexecuted), True
                outputs.append(run.stdout)
                final = run

        # -- the resume (for plain + outcome unknown: parked, reconcile, resume again)
        served_expected = 0
        if not resumed_biased:
            run = snaprun("resume", "--store", store, job, cwd=root, env=env)
            parked = mode == "plain" and bool(exp.dispatched)
            if parked:
                assert run.returncode == 4, run.stderr
                assert f"snaprun reconcile {job} {shape.effect(k)} --committed" in run.stderr
                ids = _ids(provider, shape)
                assert run.stdout == kill.lines(range(r0, k), ids)
                served_expected += len(range(r0, k))
                (row,) = [
                    r
                    for r in cli_effects(store, job, root, in_process=True)
                    if r["effect"] == shape.effect(k)
                ]
                assert row["state"] == "ambiguous" and row["args"] == f"'action-{k}', {100 + k}"
                _, metrics, jobrow = read_ledger(store, job)
                assert jobrow.status == "parked" and metrics.get("ambiguous") == 1
                assert provider.requests == Counter(sent_before)  # nothing re-sent
                outputs.append(run.stdout)
                committed = reconcile_by_asking(
                    provider, store, job, shape.effect(k), f"action-{k}", root, in_process=True
                )
                assert committed == (kill.window == AFTER_SEND)
                run = snaprun("resume", "--store", store, job, cwd=root, env=env)
                served_expected += len(range(r0, k)) + int(committed)
            else:
                served_expected += len(exp.confirmed & set(reexecuted))
            assert run.returncode == 0, run.stderr
            outputs.append(run.stdout)
            final = run

        # -- the provider: exactly one delivery per action; nothing confirmed re-sent
        actions = [f"action-{i}" for i in range(shape.orders)]
        assert provider.deliveries == Counter({a: 1 for a in actions})
        resent = {f"action-{k}"} if (mode == "keyed" and kill.window == AFTER_SEND) else set()
        assert provider.requests == Counter({a: 2 if a in resent else 1 for a in actions})
        for i in exp.confirmed:
            assert provider.requests[f"action-{i}"] == sent_before[f"action-{i}"] == 1
        ids = _ids(provider, shape)
        for i in range(shape.orders):
            assert provider.issued[f"action-{i}"][0]["amount"] == 100 + i + (
                BIAS if i in biased else 0
            )

        # -- the ledger: every effect confirmed under the key the provider saw
        rows, metrics, jobrow = read_ledger(store, job)
        assert jobrow.status == "done"
        assert sorted(rows) == list(range(1, shape.orders * (shape.values + 1) + 1))
        assert all(e.state == "confirmed" for e in rows.values())
        for i in range(shape.orders):
            row = rows[shape.effect(i)]
            assert row.kind == "write" and row.name == f"shop.order_{mode}"
            if mode != "plain":
                assert set(provider.keys[f"action-{i}"]) == {row.key}
        if mode == "lookup":
            refs = {rows[shape.effect(i)].key for i in exp.dispatched}
            assert provider.lookups == Counter({ref: 1 for ref in refs})
            assert metrics.get("reconciled", 0) == len(exp.dispatched)
        else:
            assert provider.lookups == Counter()
        assert metrics.get("reconciled", 0) == (0 if mode == "keyed" else len(exp.dispatched))
        assert metrics.get("ambiguous", 0) == (len(exp.dispatched) if mode == "plain" else 0)
        assert metrics.get("served_from_ledger", 0) == served_expected
        assert jobrow.resume_count == len(outputs) - 1

        # -- what the agent said and returned
        assert returned(final) == [ids[i] for i in range(shape.orders)]
        assert outputs[0] == kill.lines(exp.printed, ids)
        assert final.stdout == kill.lines(reexecuted, ids) + f"all placed {shape.orders}\n"
        text = "".join(outputs)
        assert text.count("all placed") == 1 and text.endswith(f"all placed {shape.orders}\n")


def _ids(provider: RecordingProvider, shape: Shape) -> dict[int, str]:
    return {
        i: provider.issued[f"action-{i}"][0]["id"]
        for i in range(shape.orders)
        if provider.issued.get(f"action-{i}")
    }


def sweep(kills: list[Kill], tmp_path: Path) -> None:
    """Run the kill points, WORKERS at a time; report every failing one."""

    def one(item):
        index, kill = item
        try:
            run_kill_point(kill, tmp_path / f"k{index:04d}")
        except Exception as exc:  # collected and reported below, with the kill point
            return f"{kill}: {type(exc).__name__}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        failures = [f for f in pool.map(one, enumerate(kills)) if f]
    assert not failures, f"{len(failures)} of {len(kills)} kill points failed:\n" + "\n".join(
        failures[:20]
    )


CELLS = [(mode, window) for mode in MODES for window in WINDOWS]


def cell_kills(mode: str, window: str) -> tuple[list[Kill], list[Kill]]:
    """The cell's POINTS_PER_CELL sweep points as (representatives, rest): two of the
    four targets of shop.py (the mode's turn: keyed the 1st and 2nd, lookup the 2nd and
    3rd, plain the 3rd and 4th... so each target is reached in some mode), the first
    seeded fx_orders.py point resumed with diverging arguments and the first resumed
    plainly; the rest in their seeded order."""
    kills = seeded_kills(mode, window, POINTS_PER_CELL, "default", shop=True)
    shop = [i for i, k in enumerate(kills) if k.agent == SHOP]
    turn = MODES.index(mode)
    picked = [shop[turn % len(shop)], shop[(turn + 1) % len(shop)]]
    for diverge in (True, False):
        picked.append(
            next(i for i, k in enumerate(kills) if k.agent != SHOP and k.diverge is diverge)
        )
    return [kills[i] for i in picked], [k for i, k in enumerate(kills) if i not in picked]


@pytest.mark.parametrize("mode,window", CELLS, ids=[f"{m}-{w}" for m, w in CELLS])
def test_kill_sweep(mode, window, tmp_path):
    """Crash windows: `window` (one of before-prepare, after-prepare, after-send,
    after-confirm, before-commit, after-snapshot) at the cell's representative kill
    points against the `mode` provider: each target of shop.py with ORDERS=4, then a
    seeded shape of fx_orders.py resumed with diverging arguments and one resumed
    plainly; each killed run is resumed in a new process."""
    sweep(cell_kills(mode, window)[0], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("mode,window", CELLS, ids=[f"{m}-{w}" for m, w in CELLS])
def test_kill_sweep_rest(mode, window, tmp_path):
    """Crash windows: as test_kill_sweep, the cell's other 22 seeded fx_orders.py kill
    points of the 28."""
    sweep(cell_kills(mode, window)[1], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(SLOW_POINTS_PER_CELL // POINTS_PER_CELL))
@pytest.mark.parametrize("mode,window", CELLS, ids=[f"{m}-{w}" for m, w in CELLS])
def test_kill_sweep_long(mode, window, batch, tmp_path):
    """Crash windows: as test_kill_sweep, 28 more seeded fx_orders.py kill points per
    cell and batch (4 batches: 112 per cell, 2016 in all)."""
    sweep(seeded_kills(mode, window, POINTS_PER_CELL, f"slow-{batch}"), tmp_path)


@pytest.mark.smoke
def test_sweep_covers_every_window_and_target():
    """No crash window (this checks the sweep itself): at least 500 kill points in
    test_kill_sweep and test_kill_sweep_rest together, covering every mode x window,
    every target of shop.py with ORDERS=4, various shapes, and both diverging and plain
    resumes in every cell; the default run's representatives alone cover every cell,
    every target of shop.py in each window (in some mode) and both kinds of resume in
    every cell."""
    cells = {(m, w): cell_kills(m, w) for m, w in CELLS}
    for (m, w), (chosen, rest) in cells.items():  # the two parts are the whole sweep
        assert sorted(map(repr, chosen + rest)) == sorted(
            map(repr, seeded_kills(m, w, POINTS_PER_CELL, "default", shop=True))
        )
    targets = {(m, w, n) for m in MODES for w in EFFECT_WINDOWS for n in (2, 4, 6, 8)} | {
        (m, w, n) for m in MODES for w in SNAPSHOT_WINDOWS for n in (1, 2, 3, 4)
    }
    for part in (0, None):  # the representatives; the whole sweep
        kills = [k for c in cells.values() for k in (c[0] if part == 0 else c[0] + c[1])]
        assert {(k.mode, k.window) for k in kills} == set(CELLS)
        shop = {(k.mode, k.window, k.n) for k in kills if k.agent == SHOP}
        if part == 0:
            assert {(w, n) for _, w, n in shop} == {(w, n) for _, w, n in targets}
            assert all(len([t for t in shop if t[:2] == cell]) == 2 for cell in CELLS)
        else:
            assert shop == targets
        for m, w in CELLS:  # each cell diverges at some points, and where it matters
            cell = [k for k in kills if (k.mode, k.window) == (m, w)]
            assert any(k.diverge for k in cell) and not all(k.diverge for k in cell)
            assert len({k.shape for k in cell}) > (1 if part == 0 else 5)
    assert len(kills) >= 500 and len(set(kills)) > 300


# ------------------------------------------------------------------------ chains
def timeline(shape: Shape) -> list[tuple[int, int, str, int]]:
    """Every kill point of a shape in execution order: (order, step, window, n)."""
    events, seq = [], 0
    for i in range(shape.orders):
        for step, window in enumerate(EFFECT_WINDOWS):
            events.append((i, step, window, shape.effect(i)))
        if i in shape.snap_orders:
            seq += 1
            events.append((i, 4, BEFORE_COMMIT, seq))
            events.append((i, 5, AFTER_SNAPSHOT, seq))
    return events


def seeded_chain(rng: random.Random, mode: str, shape: Shape, length: int) -> list:
    """Kill points strictly later along the timeline, each reached by the next resume.
    (With `plain`, a kill after send is reconciled as committed and served from the
    ledger, so its own later effect windows are never passed again: skipped.)"""
    events = timeline(shape)
    chain, at = [], -1
    while len(chain) < length:
        choices = [
            j
            for j in range(at + 1, len(events))
            if not (
                mode == "plain"
                and chain
                and chain[-1][2] == AFTER_SEND
                and events[j][0] == chain[-1][0]
                and events[j][1] < 4
            )
        ]
        if not choices:
            break
        at = rng.choice(choices[:8])  # not too far ahead: longer chains
        chain.append(events[at])
    return chain


class Driver:
    """Runs one job through a list of kills and to the end, checking after every process
    that no effect the ledger had confirmed was sent or looked up again."""

    def __init__(self, provider: RecordingProvider, root: Path, shape: Shape, mode: str):
        self.provider, self.root, self.shape, self.mode = provider, root, shape, mode
        self.store, self.job = root / "store", "job"
        self.env = shape.env(mode, provider.url)
        self.outputs: list[str] = []
        self.parks = 0
        self.started = False

    def _process(self, fault: str | None):
        confirmed, refs = [], []
        if self.started:
            rows, _, _ = read_ledger(self.store, self.job)
            done = [e for e in rows.values() if e.kind != "value" and e.state == "confirmed"]
            confirmed = [f"action-{self.shape.order_of(e.ordinal)}" for e in done]
            refs = [e.key for e in done]
        before = (
            {a: self.provider.requests[a] for a in confirmed},
            {r: self.provider.lookups[r] for r in refs},
        )
        if self.started:
            run = snaprun(
                "resume", "--store", self.store, self.job, cwd=self.root, fault=fault, env=self.env
            )
        else:
            run = snaprun(
                "run",
                "--store",
                self.store,
                "--job",
                self.job,
                FX_ORDERS,
                cwd=self.root,
                fault=fault,
                env=self.env,
            )
            self.started = True
        assert (
            {a: self.provider.requests[a] for a in confirmed},
            {r: self.provider.lookups[r] for r in refs},
        ) == before, "an effect confirmed in the ledger was sent (or looked up) again"
        assert max(self.provider.deliveries.values(), default=0) <= 1
        self.outputs.append(run.stdout)
        return run

    def step(self, fault: str | None):
        """Run or resume until the process ends other than parked; reconcile parks."""
        while True:
            run = self._process(fault)
            if run.returncode != 4:
                return run
            assert self.mode == "plain", run.stderr
            ambiguous = [
                r for r in cli_effects(self.store, self.job, self.root) if r["state"] == "ambiguous"
            ]
            assert len(ambiguous) == 1, ambiguous
            ordinal = ambiguous[0]["effect"]
            reconcile_by_asking(
                self.provider,
                self.store,
                self.job,
                ordinal,
                f"action-{self.shape.order_of(ordinal)}",
                self.root,
            )
            self.parks += 1


def run_chain(mode: str, shape: Shape, chain: list, root: Path) -> None:
    root.mkdir()
    with RecordingProvider() as provider:
        driver = Driver(provider, root, shape, mode)
        for _, _, window, n in chain:
            run = driver.step(f"{window}:{n}")
            assert run.returncode == -9, f"{window}:{n} did not fire: {run.stderr}"
        final = driver.step(None)
        assert final.returncode == 0, final.stderr
        actions = [f"action-{i}" for i in range(shape.orders)]
        assert provider.deliveries == Counter({a: 1 for a in actions})
        ids = _ids(provider, shape)
        assert returned(final) == [ids[i] for i in range(shape.orders)]
        text = "".join(driver.outputs)
        assert text.count("all placed") == 1 and text.endswith(f"all placed {shape.orders}\n")
        for line in text.splitlines()[:-1]:
            word, i, po = line.split()
            assert word == "placed" and po == ids[int(i)], line
        rows, _, jobrow = read_ledger(driver.store, driver.job)
        assert jobrow.status == "done"
        assert all(e.state == "confirmed" for e in rows.values())
        assert jobrow.resume_count == len(driver.outputs) - 1
        if mode != "plain":
            for i in range(shape.orders):
                assert set(provider.keys[f"action-{i}"]) == {rows[shape.effect(i)].key}


CHAIN_SHAPE = Shape(orders=5, every=2, values=1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chain_seed", [1, pytest.param(2, marks=pytest.mark.slow), 3])
def test_kill_chain(mode, chain_seed, tmp_path):
    """Crash windows: a seeded chain of 4-6 kills at successively later windows of one
    job (any of the six), each resumed in a new process (plain: reconciled when parked);
    in the end every action was delivered exactly once."""
    rng = random.Random(SEED + chain_seed * 7919 + MODES.index(mode))
    chain = seeded_chain(rng, mode, CHAIN_SHAPE, rng.randint(4, 6))
    assert len(chain) >= 4
    run_chain(mode, CHAIN_SHAPE, chain, tmp_path / "chain")


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_kill_chains_long(mode, tmp_path):
    """Crash windows: 30 more seeded chains per mode, of random shapes and lengths."""
    rng = random.Random(SEED * 3 + MODES.index(mode))
    jobs = []
    for index in range(30):
        shape = Shape(rng.randint(2, 6), rng.randint(1, 3), rng.randint(0, 2))
        jobs.append((index, shape, seeded_chain(rng, mode, shape, rng.randint(2, 8))))

    def one(item):
        index, shape, chain = item
        try:
            run_chain(mode, shape, chain, tmp_path / f"c{index:02d}")
        except Exception as exc:
            return f"{shape} {chain}: {type(exc).__name__}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        failures = [f for f in pool.map(one, jobs) if f]
    assert not failures, "\n".join(failures)


def test_resend_after_reconcile_is_recorded_before_it_is_sent(tmp_path):
    """Crash windows: after prepare of effect 4 (plain provider: parked, reconciled
    --not-committed), then after send of the same effect when the resume sends it
    again. That second send must be durably recorded as dispatched before it goes
    out: after the kill its outcome is unknown again, so the next resume parks (exit 4,
    ambiguous) instead of sending a second order; reconciled --committed, it finishes
    with one delivery per action. (Found by test_kill_chains_long.)"""
    shape = Shape(orders=3, every=1, values=1)
    root = tmp_path / "resend"
    root.mkdir()
    with RecordingProvider() as provider:
        driver = Driver(provider, root, shape, "plain")
        assert driver.step(f"{AFTER_PREPARE}:4").returncode == -9
        assert driver.step(f"{AFTER_SEND}:4").returncode == -9  # parked, reconciled
        assert driver.parks == 1 and provider.deliveries == Counter({"action-0": 1, "action-1": 1})
        rows, _, _ = read_ledger(driver.store, driver.job)
        run = snaprun("resume", "--store", driver.store, driver.job, cwd=root, env=driver.env)
        assert provider.deliveries["action-1"] == 1, "sent twice"
        assert rows[4].state == "dispatched", "re-sent without a durable record"
        assert run.returncode == 4, run.stderr
        states = {r["effect"]: r["state"] for r in cli_effects(driver.store, driver.job, root)}
        assert states[4] == "ambiguous"
        driver.outputs.append(run.stdout)
        reconcile_by_asking(provider, driver.store, driver.job, 4, "action-1", root)
        final = driver.step(None)
        assert final.returncode == 0, final.stderr
        assert provider.deliveries == Counter({f"action-{i}": 1 for i in range(3)})
        assert returned(final) == [provider.issued[f"action-{i}"][0]["id"] for i in range(3)]


def test_crash_loop_after_send_keyed(tmp_path):
    """Crash window: after send of effect 4, three times in a row: the row stays
    dispatched, so each resume re-sends the order with the same key (recording each
    attempt first) and dies again at the same point; the provider carries it out once,
    and the next resume finishes with the provider's order."""
    shape = Shape(orders=3, every=1, values=1)
    root = tmp_path / "loop"
    root.mkdir()
    with RecordingProvider() as provider:
        driver = Driver(provider, root, shape, "keyed")
        for _ in range(3):
            assert driver.step(f"{AFTER_SEND}:4").returncode == -9
        assert provider.requests["action-1"] == 3 and provider.deliveries["action-1"] == 1
        final = driver.step(None)
        assert final.returncode == 0, final.stderr
        assert provider.deliveries == Counter({f"action-{i}": 1 for i in range(3)})
        assert provider.requests["action-1"] == 4
        rows, _, _ = read_ledger(driver.store, driver.job)
        assert set(provider.keys["action-1"]) == {rows[4].key}
        assert rows[4].state == "confirmed" and rows[4].attempts == 4  # one per send
        assert returned(final) == [provider.issued[f"action-{i}"][0]["id"] for i in range(3)]
        assert "".join(driver.outputs).count("placed 1 ") == 1
