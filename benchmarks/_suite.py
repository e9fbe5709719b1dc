"""The benchmarks `python -m benchmarks` runs: each script, its arguments in the full and
the fast mode, and the figures read from the JSON file it writes (`--json FILE`).

A script is run as it is run by hand (its own interpreter, from the checkout); the runner
reads nothing but its JSON file. Each figure is a `Metric`: a stable key, the words of
its row, a value and its unit, and the target the issue set, if any. The full mode's
sizes are the scripts' documented defaults, with a script's own rounds lowered where the
runner's repeats take their place (each repeat is one round): `--repeat 3` measures as
many rounds as the scripts' defaults did. bench_postgres.py runs 40 jobs and 3 approvals
per repeat (its defaults: 60 and 5, for one run), which keeps the full run within about
15 minutes on 2 cores.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    value: float
    unit: str  # ms, us, s, x, MB, jobs/s, effects/s
    target: str = ""


@dataclass(frozen=True)
class Bench:
    name: str  # what --only takes
    script: str  # under benchmarks/
    title: str
    full: tuple[str, ...]
    fast: tuple[str, ...]
    metrics: Callable[[Json], list[Metric]]
    unavailable: Callable[[], str | None] = lambda: None  # why it cannot run here


# ------------------------------------------------------------------ figures per script
def _freeze(data: Json) -> list[Metric]:
    out = []
    for key, scenario in sorted(data["scenarios"].items()):
        f, r = scenario["freeze_ms"], scenario["restore_ms"]
        name = scenario["title"].split(":")[0]
        targets = scenario.get("targets", {})
        capture = f["modules"] + f["capture"] + f["pickle"]
        freeze_target = f"<= {targets['freeze']:g}x" if "freeze" in targets else ""
        restore_target = f"<= {targets['restore']:g}x" if "restore" in targets else ""
        out += [
            Metric(f"{key}.capture", f"{name} capture + serialize", capture, "ms"),
            Metric(
                f"{key}.capture_x",
                f"{name} capture + serialize / pickle.dumps",
                capture / f["pickle.dumps"],
                "x",
                freeze_target,
            ),
            Metric(f"{key}.restore", f"{name} restore", r["restore"], "ms"),
            Metric(
                f"{key}.restore_x",
                f"{name} restore / pickle.loads",
                r["restore"] / r["pickle.loads"],
                "x",
                restore_target,
            ),
        ]
    return out


def _durable(data: Json) -> list[Metric]:
    out = []
    for store in ("signed", "encrypted"):
        r = data[store]
        out += [
            Metric(f"{store}.floor", f"{store} store: floor (pickle+zstd+write+fsync)", r["floor"], "ms"),
            Metric(f"{store}.durable", f"{store} store: full durable snapshot", r["durable"], "ms"),
            Metric(
                f"{store}.durable_x",
                f"{store} store: full durable snapshot / floor",
                r["durable"] / r["floor"],
                "x",
                "<= 1.5x" if store == "signed" else "",
            ),
            Metric(
                f"{store}.unchanged_x",
                f"{store} store: unchanged snapshot / floor",
                r["unchanged"] / r["floor"],
                "x",
            ),
        ]  # fmt: skip
    return out


def _ledger(data: Json) -> list[Metric]:
    full, normal = data["FULL"], data["NORMAL"]
    return [
        Metric("full.effect", "effect, synchronous=FULL (wall)", full["effect"], "us"),
        Metric("full.insert", "one fsync'd insert, synchronous=FULL", full["insert"], "us"),
        Metric(
            "full.ratio",
            "effect / one insert, synchronous=FULL",
            full["effect"] / full["insert"],
            "x",
            "<= 1.5x",
        ),
        Metric("normal.effect", "effect, synchronous=NORMAL (wall)", normal["effect"], "us"),
        Metric("normal.cpu", "effect CPU, synchronous=NORMAL", normal["cpu"], "us"),
    ]


def _async(data: Json) -> list[Metric]:
    out = []
    for n, row in sorted(data["tasks"].items(), key=lambda item: int(item[0])):
        for what in ("freeze", "restore"):
            out += [
                Metric(
                    f"{n}.{what}", f"{n} task(s): async {what}", row["amain"][what]["median"], "ms"
                ),
                Metric(
                    f"{n}.{what}_x",
                    f"{n} task(s): async / sync {what}",
                    row["ratio"][what]["rounds_median"],
                    "x",
                ),
            ]
    return out


def _numpy(data: Json) -> list[Metric]:
    out = []
    for case, kinds in data["cases"].items():
        for kind in ("numpy", "snapstate"):
            r = kinds[kind]
            out += [
                Metric(f"{case}.{kind}.size", f"{case}: size, {kind}", r["size_mb"], "MB"),
                Metric(f"{case}.{kind}.dumps", f"{case}: dumps, {kind}", r["dumps_s"], "s"),
                Metric(f"{case}.{kind}.peak", f"{case}: peak RSS of dumps, {kind}", r["peak_mb"], "MB"),
            ]  # fmt: skip
    return out


def _conversation(data: Json) -> list[Metric]:
    out = []
    steps = data["steps"]
    for system, rounds in data["systems"].items():
        for n, r in enumerate(rounds):
            k = f"{system}.{n}" if len(rounds) > 1 else system
            out += [
                Metric(f"{k}.durable", f"{system}: durable per step", r["durable_ms"], "ms"),
                Metric(f"{k}.step", f"{system}: whole step", r["step_ms"], "ms"),
                Metric(f"{k}.growth", f"{system}: late / early steps", r["late_ms"] / r["early_ms"], "x",
                       "<= 1.3x" if system == "snapstate" else ""),
                Metric(f"{k}.disk", f"{system}: on disk after {steps} steps", r["apparent"] / 1e6, "MB"),
            ]  # fmt: skip
    return out


def _bigstate(data: Json) -> list[Metric]:
    out = []
    for r in data["rounds"]:
        out += [
            Metric("first", "first snapshot (the whole state)", r["first_ms"], "ms"),
            Metric("step", "a one-change step (median)", r["step_ms"], "ms"),
            Metric("ratio", "a step / the first", r["step_ms"] / r["first_ms"], "x", "<= 0.1x"),
            Metric("disk", f"store after {data['steps']} snapshots", r["after_last"] / 1e6, "MB"),
        ]
    return out


def _inspect(data: Json) -> list[Metric]:
    out = []
    for shape, r in sorted(data["shapes"].items()):
        size = f"{r['payload_mb']:.0f} MB {shape}"
        for label in ("inspect", "whole", "diff"):
            # the target, for a state of bytes and strings (docs/diff.md, "Memory")
            target = "<= 2x" if (label, shape) == ("inspect", "strings") else ""
            words = {
                "inspect": "snaprun inspect (streamed)",
                "whole": "inspect as before (whole body)",
                "diff": "snaprun diff of two",
            }[label]
            out += [
                Metric(f"{shape}.{label}_x", f"{words}, {size}: peak RSS growth / pickle",
                       r[f"{label}_mb"] / r["payload_mb"], "x", target),
                Metric(f"{shape}.{label}_s", f"{words}, {size}", r[f"{label}_s"], "s"),
            ]  # fmt: skip
    return out


def _worker(data: Json) -> list[Metric]:
    out = []
    for r in data["rounds"]:
        out += [
            Metric("launch", "jobs/s from the worker's launch", r["from_launch"], "jobs/s", ">= 5"),
            Metric("first", "jobs/s from its first snapshot", r["from_first"], "jobs/s"),
        ]
    return out


def _postgres(data: Json) -> list[Metric]:
    out = []
    for kind in ("sqlite", "postgresql"):
        found = data[kind]
        for n, rates in found["jobs_per_s"].items():
            for v in rates:
                out.append(
                    Metric(f"{kind}.jobs.{n}", f"{kind}: jobs/s, {n} worker(s)", v, "jobs/s")
                )
        for n, rates in found["effects_per_s"].items():
            for v in rates:
                out.append(
                    Metric(f"{kind}.effects.{n}", f"{kind}: effects/s, {n} job(s)", v, "effects/s")
                )
        for v in found["approval_s"]:
            out.append(Metric(f"{kind}.approval", f"{kind}: approval -> running again", v, "s"))
    return out


def _recovery(data: Json) -> list[Metric]:
    out = []
    for system, values in data["recovery_ms"].items():
        for v in values:
            out.append(
                Metric(f"{system}.recovery", f"{system}: start -> first instruction", v, "ms")
            )
    for system, values in data["import_ms"].items():
        for v in values:
            label = (
                "python -c (the interpreter alone)"
                if system == "python"
                else f"{system}: start + imports only"
            )
            out.append(Metric(f"{system}.imports", label, v, "ms"))
    return out  # fmt: skip


def _effect(data: Json) -> list[Metric]:
    out = []
    for system, rounds in data["systems"].items():
        what = "@effect" if system == "snapstate" else "@DBOS.step"
        for r in rounds:
            out.append(Metric(f"{system}.call", f"{system} {what}: per call", r["call_ms"], "ms"))
    return out


def _cli(data: Json) -> list[Metric]:
    out = []
    for label, values in data["seconds"].items():
        target = "< 1 s" if label == "ls" else ""
        name = "ls." + (
            label.replace("ls", "").strip().replace(" ", "").replace("--", "") or "default"
        )
        for v in values:
            out.append(Metric(name, f"snaprun {label}, {data['jobs']} jobs", v, "s", target))
    return out


# ------------------------------------------------------------------ availability
def _no_postgres() -> str | None:
    if os.environ.get("SNAPSTATE_BENCH_PG") or os.environ.get("SNAPSTATE_TEST_PG"):
        return None
    if glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("initdb"):
        return None
    return (
        "no PostgreSQL server: set SNAPSTATE_BENCH_PG to a superuser URL, or install "
        "PostgreSQL's initdb (Debian: apt-get install postgresql)"
    )


BENCHES: tuple[Bench, ...] = (
    Bench("freeze", "bench_freeze.py", "Freeze and restore against plain pickle",
          (), (), _freeze),
    Bench("durable", "bench_durable.py", "A durable snapshot against its floor",
          (), (), _durable),
    Bench("ledger", "bench_ledger.py", "The effect ledger against one fsync'd insert",
          (), (), _ledger),
    Bench("async", "bench_async.py", "An async job against the same state in greenlet tasks",
          ("--reps", "30", "--rounds", "2"), ("--reps", "3", "--rounds", "1"), _async),
    Bench("numpy", "bench_numpy.py", "numpy views through the snapshot pickler",
          ("200",), ("20",), _numpy),
    Bench("conversation", "bench_conversation.py",
          "The growing conversation: snapstate, LangGraph, DBOS",
          ("--steps", "1000"), ("--steps", "30"), _conversation),
    Bench("bigstate", "bench_bigstate.py", "A ~10 MB state, one small change per step",
          ("--steps", "50", "--rounds", "1"), ("--steps", "5", "--rounds", "1"), _bigstate),
    Bench("inspect", "bench_inspect.py", "`snaprun inspect` and `diff` of a large state: peak memory",
          ("--mb", "500", "--objects-mb", "50"), ("--mb", "20", "--objects-mb", "5"), _inspect),
    Bench("worker", "bench_worker.py", "A long-running worker draining short jobs",
          ("--jobs", "200"), ("--jobs", "10"), _worker),
    Bench("postgres", "bench_postgres.py", "Workers sharing a PostgreSQL store against SQLite",
          ("--jobs", "40", "--effects", "200", "--approvals", "3", "--workers", "1,2,4"),
          ("--jobs", "6", "--effects", "40", "--approvals", "1", "--workers", "2"),
          _postgres, _no_postgres),
    Bench("recovery", "bench_recovery.py",
          "Recovery after a crash, start to first instruction",
          ("--steps", "100", "--rounds", "1"), ("--steps", "5", "--rounds", "1"), _recovery),
    Bench("effect", "bench_effect.py", "A recorded effect against a DBOS step",
          ("--calls", "300", "--rounds", "1"), ("--calls", "40", "--rounds", "1"), _effect),
    Bench("cli", "bench_cli.py", "`snaprun ls` on a store of many jobs (5,000 in a full run)",
          ("--jobs", "5000", "--reps", "1"), ("--jobs", "200", "--reps", "1"), _cli),
)  # fmt: skip
NAMES = tuple(b.name for b in BENCHES)
