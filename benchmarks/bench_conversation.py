"""The growing conversation (issue 20): per-step durable latency and bytes on disk, for
snapstate, LangGraph's SqliteSaver and DBOS in the same run.

    python benchmarks/bench_conversation.py [--steps 1000] [--dir DIR] [--rounds 1]
                                            [--systems snapstate,langgraph,dbos]

One agent, three systems, the same messages: each step appends one ~500-byte message
(seeded random words, `growth_agents.message`) to a list and makes the step durable
before the next one.

  snapstate  a job (`snapstate.Store.start`) appends to a local list and calls
             snapshot() after each message; the snapshot() call is timed inside the
             agent ("durable"), and the whole step with it ("step").
  langgraph  a StateGraph whose state is `messages: Annotated[list, operator.add]`, one
             node adding one message and looping back to itself until N messages, with
             a SqliteSaver on a SQLite file and durability="sync" (each superstep's
             checkpoint is written before the next step starts: LangGraph's default,
             "async", writes it while the next step runs). "durable" is the span of the
             saver's put() and put_writes() for that step (LangGraph runs the two in
             pool threads at once), from the first one's start to the last one's end; "step" is from one
             node's start to the next's.
  dbos       a workflow with one @DBOS.step per message (the step returns the message;
             DBOS records its output in the system database before the workflow goes
             on), on a SQLite system database; "durable" and "step" are the step call.

Each system runs in a fresh interpreter of its own (so none pays for another's imports
or threads), one after the other, in a fresh folder under a new temporary directory
(`--dir` chooses where; the output says which file system and whether it is tmpfs).
Printed per system: the per-step median with its 10th-90th percentile spread (steps 2-N),
the medians of steps 2-21 and of steps N-20..N-1 (980-999 for 1,000 steps; narrower
windows below 200 steps) and their ratio, the bytes on disk after N steps (apparent and
allocated, the folder closed), how many bytes each step adds early and late (the folder
measured at both ends of each window), and snapstate's ratios to each comparator. A
comparator whose package is not installed (`pip install -e ".[bench]"`) is reported as
"not installed" and skipped. With `--rounds R` the systems run R times, the order rotating;
ratios are then the median (min-max) over the rounds. Speed is printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Annotated, Any, TypedDict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import comparators  # noqa: E402
import growth_agents as agents  # noqa: E402
from comparators import versions  # noqa: E402

SYSTEMS = ("snapstate", "langgraph", "dbos")
SEED = 20


class Conversation(TypedDict):
    """LangGraph's state: the messages, each step's list added to the previous ones."""

    messages: Annotated[list[dict[str, str]], operator.add]


def windows(steps: int) -> tuple[range, range]:
    """Steps 2-21 and N-20..N-1 at 1,000 steps; windows of N/10 steps (at least 3) below."""
    width = min(20, max(3, steps // 10))
    return range(2, 2 + width), range(steps - width, steps)


def probe_steps(steps: int) -> list[int]:
    early, late = windows(steps)
    return sorted({early[0] - 1, early[-1], late[0] - 1, late[-1]})


# ------------------------------------------------------------------ the children
def run_snapstate(steps: int, folder: str, timings: str) -> dict[str, object]:
    from snapstate import JobStatus, Store

    store_dir = os.path.join(folder, "store")
    store = Store(store_dir)
    probes = ",".join(map(str, probe_steps(steps)))
    result = store.start(
        agents.conversation_main, str(steps), timings, store_dir, probes, str(SEED),
        job_id="conversation",
    )  # fmt: skip
    if result.status != JobStatus.DONE or result.result != steps:
        raise SystemExit(f"the snapstate job ended {result.status}: {result.error!r}")
    sizes = [s.size for s in store.snapshots("conversation")]
    return {
        "settings": snapstate_settings(store_dir),
        "store": store_dir,
        "listed": len(sizes),
        "first_size": sizes[0] if sizes else None,
        "last_size": sizes[-1] if sizes else None,
    }


def snapstate_settings(store_dir: str) -> dict[str, str]:
    """The journal mode the store's catalog file holds, and the synchronous setting its
    connections use (SqliteCatalog's `synchronous`, FULL unless a caller asks otherwise)."""
    from snapstate.serializers._sqlite import SqliteCatalog

    with sqlite3.connect(os.path.join(store_dir, "catalog.db")) as db:
        journal = db.execute("PRAGMA journal_mode").fetchone()[0]
    return {"journal_mode": journal, "synchronous": SqliteCatalog(store_dir).synchronous}


def run_langgraph(steps: int, folder: str, timings: str) -> dict[str, object]:
    import threading

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    lock = threading.Lock()
    writes: list[tuple[float, float]] = []  # (start, end) of each saver write

    class TimedSaver(SqliteSaver):
        """SqliteSaver, noting when each write (the checkpoint, the task's writes) runs:
        LangGraph runs them in two pool threads at once (they queue on the saver's lock)."""

        def put(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return super().put(*args, **kwargs)
            finally:
                with lock:
                    writes.append((t0, time.perf_counter()))

        def put_writes(self, *args: Any, **kwargs: Any) -> None:
            t0 = time.perf_counter()
            try:
                super().put_writes(*args, **kwargs)
            finally:
                with lock:
                    writes.append((t0, time.perf_counter()))

    def durable_span() -> float:
        """From the first write's start to the last one's end since the last call."""
        with lock:
            spans, writes[:] = list(writes), []
        return max(e for _, e in spans) - min(b for b, _ in spans) if spans else 0.0

    probes = set(probe_steps(steps))
    started = [0.0]  # the running node's start, after the bookkeeping
    lines: list[str] = []

    def settle(step: int, arrived: float) -> None:
        """Close step `step` (its node ran, its checkpoint is written)."""
        durable = durable_span()
        lines.append(f"step {step} {durable:.9f} {arrived - started[0]:.9f}")
        if step in probes:
            lines.append("probe {} {} {} {}".format(step, *agents.disk_usage(folder)))

    def add(state: Conversation) -> dict[str, list[dict[str, str]]]:
        arrived = time.perf_counter()
        step = len(state["messages"]) + 1
        if step > 1:
            settle(step - 1, arrived)
        else:
            durable_span()  # the input's checkpoint, before the first step
        started[0] = time.perf_counter()
        return {"messages": [agents.message(step, SEED)]}

    def route(state: Conversation) -> str:
        return END if len(state["messages"]) >= steps else "add"

    graph = StateGraph(Conversation)
    graph.add_node("add", add)
    graph.add_edge(START, "add")
    graph.add_conditional_edges("add", route)
    database = os.path.join(folder, "checkpoints.sqlite")
    conn = sqlite3.connect(database, check_same_thread=False)
    try:
        app = graph.compile(checkpointer=TimedSaver(conn))
        config: Any = {"configurable": {"thread_id": "conversation"}, "recursion_limit": steps + 10}
        final = app.invoke({"messages": []}, config, durability="sync")
        settle(steps, time.perf_counter())
        settings = comparators.sqlite_settings(conn)
    finally:
        conn.close()
    if len(final["messages"]) != steps:
        raise SystemExit(f"the graph ended with {len(final['messages'])} messages, not {steps}")
    with open(timings, "a") as side:
        side.write("\n".join(lines) + "\n")
    return {"sqlite": sqlite3.sqlite_version, "settings": settings}


def run_dbos(steps: int, folder: str, timings: str) -> dict[str, object]:
    from dbos import DBOS

    probes = set(probe_steps(steps))
    lines: list[str] = []

    @DBOS.step()
    def make_message(step: int) -> dict[str, str]:
        return agents.message(step, SEED)

    @DBOS.workflow()
    def conversation(n: int) -> int:
        messages: list[dict[str, str]] = []
        for step in range(1, n + 1):
            t0 = time.perf_counter()
            messages.append(make_message(step))
            t1 = time.perf_counter()
            lines.append(f"step {step} {t1 - t0:.9f} {t1 - t0:.9f}")
            if step in probes:
                lines.append("probe {} {} {} {}".format(step, *agents.disk_usage(folder)))
        return len(messages)

    shimmed = comparators.unixepoch_shim()
    database = os.path.join(folder, "dbos.sqlite")
    DBOS(config=comparators.dbos_config("bench-conversation", database))
    DBOS.launch()
    try:
        count = conversation(steps)
        settings = comparators.dbos_sqlite_settings()
    finally:
        DBOS.destroy()
    if count != steps:
        raise SystemExit(f"the workflow returned {count}, not {steps}")
    with open(timings, "a") as side:
        side.write("\n".join(lines) + "\n")
    return {"sqlite": sqlite3.sqlite_version, "shim": shimmed, "settings": settings}


RUNNERS = {"snapstate": run_snapstate, "langgraph": run_langgraph, "dbos": run_dbos}


def child(system: str, steps: int, folder: str, out: str) -> None:
    """Run one system in this (fresh) process; write what it measured to `out`."""
    timings = os.path.join(os.path.dirname(folder), f"{os.path.basename(folder)}.timings")
    os.makedirs(folder)
    extra = RUNNERS[system](steps, folder, timings)
    with open(out, "w") as f:
        json.dump({"timings": timings, **extra}, f)


# ------------------------------------------------------------------ the driver
def measure(system: str, steps: int, base: str, round_no: int) -> dict[str, object]:
    folder, info = comparators.run_child(__file__, system, ("--steps", steps), base, round_no)
    durable: dict[int, float] = {}
    step_time: dict[int, float] = {}
    probes: dict[int, tuple[int, int, int]] = {}
    layouts: dict[int, dict[str, tuple[int, int]]] = {}
    with open(info["timings"]) as f:
        for line in f:
            kind, *fields = line.split(maxsplit=2 if line.startswith("layout") else -1)
            if kind == "step":
                durable[int(fields[0])] = float(fields[1]) * 1e3
                step_time[int(fields[0])] = float(fields[2]) * 1e3
            elif kind == "probe":
                probes[int(fields[0])] = (int(fields[1]), int(fields[2]), int(fields[3]))
            elif kind == "layout":
                layouts[int(fields[0])] = {e: (b, n) for e, b, n in json.loads(fields[1])}
    if sorted(durable) != list(range(1, steps + 1)):
        raise SystemExit(f"bench_conversation: {system} timed {len(durable)} of {steps} steps")
    early, late = windows(steps)
    apparent, allocated, files = agents.disk_usage(folder)
    growth = {}
    for name, window in (("early", early), ("late", late)):
        before, after = probes[window[0] - 1], probes[window[-1]]
        growth[name] = (
            (after[0] - before[0]) / len(window),
            (after[2] - before[2]) / len(window),
        )
    result: dict[str, object] = {
        "durable": [durable[s] for s in range(2, steps + 1)],
        "step": [step_time[s] for s in range(2, steps + 1)],
        "early": statistics.median(durable[s] for s in early),
        "late": statistics.median(durable[s] for s in late),
        "apparent": apparent,
        "allocated": allocated,
        "files": files,
        "growth": growth,
        **info,
    }
    if system == "snapstate":
        result["layout"] = agents.top_level_usage(str(info["store"]))
        before, after = layouts[late[0] - 1], layouts[late[-1]]
        result["late_layout"] = [
            (entry, (size - before.get(entry, (0, 0))[0]) / len(late),
             (files - before.get(entry, (0, 0))[1]) / len(late))
            for entry, (size, files) in after.items()
        ]  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="messages (default 1000)")
    parser.add_argument("--dir", help="where the temporary folder goes (default: $TMPDIR)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every system")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--child-folder", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.child_folder, args.child_out)
        return
    if args.steps < 8:
        parser.error("--steps must be at least 8 (two windows of 3 steps after the first)")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown or "snapstate" not in systems:
        parser.error(f"--systems takes some of {', '.join(SYSTEMS)}, snapstate always")
    base = tempfile.mkdtemp(prefix="snapstate-conversation-", dir=args.dir)
    early, late = windows(args.steps)
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{' '.join(open('/proc/loadavg').read().split()[:3]) if os.path.exists('/proc/loadavg') else '?'}; "
        f"{args.steps} steps of one ~{agents.MESSAGE_BYTES}-byte message, {args.rounds} round(s)"
    )
    print(f"folders under {agents.where(base)}")
    present = []
    for system in systems:
        found = versions(system)
        print(f"  {system:<10} {found or 'not installed: skipped (pip install -e .[bench])'}")
        if found:
            present.append(system)
    results: dict[str, list[dict[str, object]]] = {s: [] for s in present}
    try:
        for round_no in range(args.rounds):
            order = present[round_no % len(present) :] + present[: round_no % len(present)]
            for system in order:
                results[system].append(measure(system, args.steps, base, round_no))
    finally:
        if args.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    report(results, args.steps, early, late)
    if args.json:
        write_json(args.json, results, args.steps, [s for s in systems if s not in present])


def write_json(
    path: str, results: dict[str, list[dict[str, object]]], steps: int, missing: list[str]
) -> None:
    """Per system and round: the medians, spreads, bytes and SQLite settings printed."""
    out: dict[str, object] = {
        "steps": steps,
        "missing": {s: "not installed (pip install -e .[bench])" for s in missing},
        "versions": {s: versions(s) for s in results},
    }
    systems: dict[str, list[dict[str, object]]] = {}
    for system, runs in results.items():
        systems[system] = []
        for run in runs:
            d = agents.spread(run["durable"])  # type: ignore[arg-type]
            s = agents.spread(run["step"])  # type: ignore[arg-type]
            growth = run["growth"]
            systems[system].append(
                {
                    "durable_ms": d[0], "durable_p10": d[1], "durable_p90": d[2],
                    "step_ms": s[0], "step_p10": s[1], "step_p90": s[2],
                    "early_ms": run["early"], "late_ms": run["late"],
                    "apparent": run["apparent"], "allocated": run["allocated"],
                    "files": run["files"],
                    "early_bytes_per_step": growth["early"][0],  # type: ignore[index]
                    "late_bytes_per_step": growth["late"][0],  # type: ignore[index]
                    "settings": run.get("settings"), "shim": run.get("shim", False),
                    "sqlite": run.get("sqlite", sqlite3.sqlite_version),
                    "last_size": run.get("last_size"),
                }
            )  # fmt: skip
    out["systems"] = systems
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def report(
    results: dict[str, list[dict[str, object]]], steps: int, early: range, late: range
) -> None:
    print(
        f"\nper step, milliseconds: median [10th-90th percentile] of steps 2-{steps}; "
        f"early = median of steps {early[0]}-{early[-1]}, late = steps {late[0]}-{late[-1]}"
    )
    header = f"{'system':<11} {'durable':>22} {'whole step':>22} {'early':>8} {'late':>8} {'late/early':>10}"
    print(header)
    for system, runs in results.items():
        for round_no, run in enumerate(runs):
            name = f"{system} {round_no + 1}" if len(runs) > 1 else system
            d = agents.spread(run["durable"])
            s = agents.spread(run["step"])
            print(
                f"{name:<11} {d[0]:8.3f} [{d[1]:.3f}-{d[2]:.3f}] {s[0]:8.3f} [{s[1]:.3f}-{s[2]:.3f}] "
                f"{run['early']:8.3f} {run['late']:8.3f} {run['late'] / run['early']:9.2f}x"
            )
    print(f"\non disk after {steps} steps (closed): apparent / allocated, files; added per step")
    for system, runs in results.items():
        for round_no, run in enumerate(runs):
            name = f"{system} {round_no + 1}" if len(runs) > 1 else system
            g = run["growth"]
            print(
                f"{name:<11} {agents.megabytes(run['apparent']):>10} / "
                f"{agents.megabytes(run['allocated']):>10}, {run['files']} files; "
                f"early {g['early'][0] / 1e3:.1f} KB ({g['early'][1]:.2f} files), "
                f"late {g['late'][0] / 1e3:.1f} KB ({g['late'][1]:.2f} files)"
            )
    snap = results["snapstate"][-1]
    print(
        f"\nsnapstate's store after {steps} steps (top-level entries: bytes, files); a snapshot's "
        f"size as the store lists it: step 1 {agents.megabytes(snap['first_size'])}, "
        f"step {steps} {agents.megabytes(snap['last_size'])}"
    )
    if snap["listed"] != steps:
        print(f"  NOTE: the store lists {snap['listed']} snapshots of the job, not {steps}")
    for entry, size, files in snap["layout"]:
        print(f"  {entry:<24} {agents.megabytes(size):>10} {files:>6} files")
    print(
        f"what each late step (steps {late[0]}-{late[-1]}) added to snapstate's store, per "
        "top-level entry (a SQLite WAL grows until SQLite checkpoints it):"
    )
    for entry, size, files in snap["late_layout"]:
        if size or files:
            print(f"  {entry:<24} {size / 1e3:8.1f} KB {files:6.2f} files")
    for system, runs in results.items():
        if any(run.get("shim") for run in runs):
            print(
                f"\n{system}: SQLite {runs[0]['sqlite']} lacks unixepoch('subsec') (3.42+), which "
                "DBOS's schema uses: the benchmark gave DBOS's connections one of its own"
            )
    print(
        "\nsnapstate's late/early ratio: "
        + ", ".join(f"{r['late'] / r['early']:.2f}x" for r in results["snapstate"])
        + "   (target: within 1.3x)"
    )
    if steps != 1000:
        print(f"(issue 20's targets are for 1,000 steps; this run took {steps})")
    targets = {"langgraph": ("<= 0.5x", None), "dbos": ("<= 1x", "<= 1x")}
    for other, (latency_target, disk_target) in targets.items():
        if other not in results:
            print(f"snapstate / {other}: not measured ({other} is not installed)")
            continue
        pairs = list(zip(results["snapstate"], results[other]))
        for label, key in (("durable", "durable"), ("whole step", "step")):
            ratios = [statistics.median(a[key]) / statistics.median(b[key]) for a, b in pairs]
            note = f"   (target {latency_target})" if key == "durable" else ""
            print(f"snapstate / {other}, {label} median: {_ratios(ratios)}{note}")
        disk = [a["apparent"] / b["apparent"] for a, b in pairs]
        note = f"   (target {disk_target})" if disk_target else ""
        print(f"snapstate / {other}, bytes on disk: {_ratios(disk)}{note}")


def _ratios(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}x"
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n({time.monotonic() - started:.0f} s)")
