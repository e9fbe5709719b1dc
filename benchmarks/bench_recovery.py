"""Recovery after a crash, start to first instruction: snapstate, LangGraph's SqliteSaver
and DBOS on SQLite, in the same run.

    python benchmarks/bench_recovery.py [--steps 100] [--rounds 3] [--dir DIR]
                                        [--systems snapstate,langgraph,dbos] [--json FILE]

Each system runs the same agent: a conversation of `--steps` messages of ~500 bytes, each
step made durable before the next (snapstate: snapshot() after each message; LangGraph: a
node adding one message per superstep, SqliteSaver, durability="sync"; DBOS: one
@DBOS.step per message in one workflow). Once the last step is durable the process kills
itself with SIGKILL (not timed). Then a new process recovers the job, and what is timed is
from the moment the driver starts that process to the first line of agent code that runs
after the restore (which writes the wall clock into a side file):

  snapstate  `snaprun resume --store DIR JOB`: the line after the last snapshot() call
  langgraph  a new interpreter builds the same graph on the same SqliteSaver file and calls
             `invoke(None, config)`: the first line of the node that runs next
  dbos       a new interpreter registers the same workflow and calls DBOS.launch(), which
             recovers pending workflows: DBOS runs the workflow function again from its
             start and every recorded step returns its recorded output without running;
             timed to the first line after the last step

Also timed the same way, for each system: a new interpreter that only imports what the
recovering process imports first (`snapstate.runtime._cli`, the CLI's module; LangGraph's
graph and SqliteSaver; `dbos`), and a bare `python -c` (the interpreter's own start): the
part of each recovery that is process start-up rather than restoring.

Each system runs in processes of its own (the driver imports none of them), one after the
other, the order rotating each round, every round in a fresh folder under a new temporary
directory (`--dir` chooses where). A comparator that is not installed (`pip install -e
".[bench]"`) is reported as such and skipped. Printed: per system the median and the
min-max over the rounds. Speed is printed, never asserted.

This module is also the snapstate job's own module (its globals are saved with each
snapshot): it holds only imports of the standard library, constants and functions.
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = ("snapstate", "langgraph", "dbos")
WORDS = (
    "agent tool call result plan observe reflect memory vector search file patch test "
    "deploy error retry token context window summary answer question user assistant"
).split()
IMPORTS = {
    "python": "",
    "snapstate": "import snapstate.runtime._cli",
    "langgraph": "import langgraph.graph, langgraph.checkpoint.sqlite",
    "dbos": "import dbos",
}


def message(step: int) -> dict[str, str]:
    """Message `step`: ~500 bytes of seeded words, the same in every system."""
    rng = random.Random(22_000 + step)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 500:
        words.append(rng.choice(WORDS))
    return {"role": "user" if step % 2 else "assistant", "content": " ".join(words)}


def _mark(path: str) -> None:
    with open(path, "w") as f:
        f.write(repr(time.time()))


def _crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------------ snapstate's agent
def snapstate_agent() -> int:
    """argv: STEPS MARKER. A snapshot after each message; killed after the last one."""
    from snapstate import snapshot

    steps, marker = int(sys.argv[1]), sys.argv[2]
    messages: list[dict[str, str]] = []
    for step in range(1, steps + 1):
        messages.append(message(step))
        info = snapshot()
        if info.resumed:
            _mark(marker)  # the first instruction after the restore
            return len(messages)
    _crash()
    return -1


def snapstate_crash(steps: int, folder: str, marker: str) -> None:
    import bench_recovery  # the agent's module by its own name, not __main__

    from snapstate import Store

    Store(os.path.join(folder, "store")).start(
        bench_recovery.snapstate_agent, str(steps), marker, job_id="recovery"
    )
    raise SystemExit("bench_recovery: the snapstate job was not killed after its last step")


# ------------------------------------------------------------------ LangGraph's agent
def langgraph_child(phase: str, steps: int, folder: str, marker: str) -> None:
    import operator
    import sqlite3
    from typing import Annotated, TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class Conversation(TypedDict):  # evaluated here: no `from __future__ import annotations`
        messages: Annotated[list[dict[str, str]], operator.add]

    def add(state: Conversation) -> dict[str, list[dict[str, str]]]:
        if len(state["messages"]) == steps:
            if phase == "crash":
                _crash()
            _mark(marker)  # the first instruction after the restore
        return {"messages": [message(len(state["messages"]) + 1)]}

    def route(state: Conversation) -> str:
        return END if len(state["messages"]) > steps else "add"

    graph = StateGraph(Conversation)
    graph.add_node("add", add)
    graph.add_edge(START, "add")
    graph.add_conditional_edges("add", route)
    conn = sqlite3.connect(os.path.join(folder, "checkpoints.sqlite"), check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "recovery"}, "recursion_limit": steps + 10}
    app.invoke({"messages": []} if phase == "crash" else None, config, durability="sync")
    conn.close()


# ------------------------------------------------------------------ DBOS's agent
def dbos_child(phase: str, steps: int, folder: str, marker: str) -> None:
    import threading

    import comparators
    from dbos import DBOS, SetWorkflowID

    done = threading.Event()

    @DBOS.step()
    def make_message(step: int) -> dict[str, str]:
        return message(step)

    @DBOS.workflow()
    def conversation(n: int, marker: str) -> int:
        messages = []
        for step in range(1, n + 1):
            messages.append(make_message(step))
        if phase == "crash":  # not an input: DBOS recovers a workflow with its inputs
            _crash()
        _mark(marker)  # the first instruction after the recorded steps
        done.set()
        return len(messages)

    comparators.unixepoch_shim()
    DBOS(config=comparators.dbos_config("bench-recovery", os.path.join(folder, "dbos.sqlite")))
    DBOS.launch()  # in the recovering process: recovers the pending workflow
    try:
        if phase == "crash":
            with SetWorkflowID("recovery"):
                conversation(steps, marker)
        elif not done.wait(300):
            raise SystemExit("bench_recovery: DBOS did not recover the workflow in 300 s")
    finally:
        DBOS.destroy()


# ------------------------------------------------------------------ the driver
def _snaprun() -> str:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which("snaprun", path=path)
    if found is None:
        raise SystemExit("bench_recovery: no `snaprun` beside this Python or on PATH")
    return found


def _child(system: str, phase: str, steps: int, folder: str, marker: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--child", system, "--phase", phase,
            "--steps", str(steps), "--folder", folder, "--marker", marker]  # fmt: skip


def _timed(command: list[str], marker: str, what: str) -> float:
    """Milliseconds from starting `command` to the time it wrote into `marker`."""
    started = time.time()
    proc = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not os.path.exists(marker):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"bench_recovery: {what} failed (exit {proc.returncode})")
    with open(marker) as f:
        return (float(f.read()) - started) * 1e3


def recover(system: str, steps: int, folder: str) -> float:
    """Run the system's agent to its crash, then time the recovery."""
    os.makedirs(folder)
    marker = os.path.join(folder, "marker")
    crash = subprocess.run(
        _child(system, "crash", steps, folder, marker), cwd=HERE, capture_output=True, text=True
    )
    if crash.returncode != -signal.SIGKILL:
        sys.stderr.write(crash.stdout[-3000:] + crash.stderr[-3000:])
        raise SystemExit(f"bench_recovery: the {system} run ended {crash.returncode}, not killed")
    if system == "snapstate":
        command = [_snaprun(), "resume", "--store", os.path.join(folder, "store"), "recovery"]
    else:
        command = _child(system, "resume", steps, folder, marker)
    return _timed(command, marker, f"the {system} recovery")


def start_up(system: str, folder: str) -> float:
    """Milliseconds for a new interpreter to import what the system's recovery imports."""
    marker = os.path.join(folder, f"import-{system}")
    code = f"{IMPORTS[system]}\nimport time\nopen({marker!r}, 'w').write(repr(time.time()))"
    return _timed([sys.executable, "-c", code], marker, f"importing {system}")


def snapshot_bytes(folder: str) -> int | None:
    from snapstate import Store

    listed = Store(os.path.join(folder, "store")).snapshots("recovery")
    return listed[-1].size if listed else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="messages before the crash")
    parser.add_argument("--rounds", type=int, default=3, help="recoveries of every system")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--dir", help="where the temporary folder goes (default: $TMPDIR)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("crash", "resume"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--marker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "snapstate":
        snapstate_crash(args.steps, args.folder, args.marker)
    elif args.child == "langgraph":
        langgraph_child(args.phase, args.steps, args.folder, args.marker)
    elif args.child == "dbos":
        dbos_child(args.phase, args.steps, args.folder, args.marker)
    if args.child:
        return
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    import comparators

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if sorted(set(systems) - set(SYSTEMS)) or "snapstate" not in systems:
        parser.error(f"--systems takes some of {', '.join(SYSTEMS)}, snapstate always")
    present = [s for s in systems if comparators.versions(s)]
    missing = {s: "not installed (pip install -e .[bench])" for s in systems if s not in present}
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.2f}; {args.steps} durable steps, then SIGKILL; "
        f"{args.rounds} round(s)"
    )
    for system in systems:
        print(f"  {system:<10} {comparators.versions(system) or missing[system]}")
    base = tempfile.mkdtemp(prefix="snapstate-recovery-", dir=args.dir)
    recovery: dict[str, list[float]] = {s: [] for s in present}
    imports: dict[str, list[float]] = {s: [] for s in ["python", *present]}
    size = None
    try:
        for round_no in range(args.rounds):
            order = present[round_no % len(present) :] + present[: round_no % len(present)]
            for system in order:
                folder = os.path.join(base, f"{system}-{round_no}")
                recovery[system].append(recover(system, args.steps, folder))
                if system == "snapstate":
                    size = snapshot_bytes(folder)
            for system in imports:
                imports[system].append(start_up(system, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\nmilliseconds from the process's start: median (min-max) over the rounds")
    print(f"{'system':<11} {'to first instruction':>26} {'start + imports only':>26}")
    for system in present:
        print(f"{system:<11} {_over(recovery[system]):>26} {_over(imports[system]):>26}")
    print(f"{'python -c':<11} {'':>26} {_over(imports['python']):>26}")
    if size is not None:
        print(f"snapstate's last snapshot: {size} bytes as the store lists it")
    for system in missing:
        print(f"{system}: {missing[system]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"steps": args.steps, "rounds": args.rounds, "recovery_ms": recovery,
                 "import_ms": imports, "snapshot_bytes": size, "missing": missing,
                 "versions": {s: comparators.versions(s) for s in present}},
                f, indent=1,
            )  # fmt: skip


def _over(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n({time.monotonic() - started:.0f} s)")
