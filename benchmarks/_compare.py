"""The side-by-side comparisons of the generated results: snapstate against LangGraph's
SqliteSaver and DBOS, measured in the same run (bench_recovery.py, bench_conversation.py,
bench_effect.py), with a reason under every row where snapstate loses.

Every reason is built from figures measured in the same run (the import times, the bytes
each system added per step, the SQLite settings read from each system's connections, the
write transactions counted per DBOS step) and from what the code does by design (written
once here, each checked against the comparator's source or snapstate's design). A
comparator that is not installed gives a row saying so.
"""

from __future__ import annotations

import statistics
from typing import Any

Json = dict[str, Any]
NAMES = {"snapstate": "snapstate", "langgraph": "LangGraph SqliteSaver", "dbos": "DBOS"}
COMPARATORS = ("langgraph", "dbos")
MISSING = "not installed (`pip install -e '.[bench]'`)"


def stat(values: list[float], unit: str, digits: int = 2) -> str:
    """median [min-max] of `values` in `unit` (the value alone when there is one)."""
    if not values:
        return "-"
    fmt = f"{{:.{digits}f}}"
    unit = unit if unit in ("", "x") else " " + unit
    text = fmt.format(statistics.median(values)) + unit
    if len(values) > 1:
        text += f" [{fmt.format(min(values))}-{fmt.format(max(values))}]"
    return text


def ratio(pairs: list[tuple[float, float]]) -> tuple[float, str]:
    """(median ratio, its text) of paired values (snapstate, other) measured together."""
    values = [a / b for a, b in pairs if b]
    if not values:
        return float("nan"), "-"
    return statistics.median(values), stat(values, "x")


def _settings(found: Any) -> str:
    if not isinstance(found, dict):
        return "?"
    return f"journal_mode={found.get('journal_mode')}, synchronous={found.get('synchronous')}"


# ------------------------------------------------------------------ (a) recovery
def recovery(runs: list[Json]) -> list[str]:
    if not runs:
        return ["Not measured: bench_recovery.py did not run or failed (see below)."]
    steps = runs[0]["steps"]
    times: dict[str, list[float]] = {}
    imports: dict[str, list[float]] = {}
    pairs: dict[str, list[tuple[float, float]]] = {s: [] for s in COMPARATORS}
    for run in runs:
        for system, values in run["recovery_ms"].items():
            times.setdefault(system, []).extend(values)
        for system, values in run["import_ms"].items():
            imports.setdefault(system, []).extend(values)
        for other in COMPARATORS:
            if other in run["recovery_ms"]:
                pairs[other] += list(
                    zip(run["recovery_ms"]["snapstate"], run["recovery_ms"][other])
                )
    missing = runs[0].get("missing", {})
    lines = [
        f"A job makes {steps} steps durable (one ~500-byte message each), is killed with "
        "SIGKILL, and a new process recovers it; timed from the moment the new process is "
        'started to the first line of agent code that runs after the restore. "Start + '
        'imports" is a new interpreter that only imports what that process imports first '
        f"(a bare `python -c`: {stat(imports.get('python', []), 'ms', 1)}).",
        "",
        "| system | start -> first instruction | start + imports only | snapstate / this |",
        "|---|---|---|---|",
    ]
    losses = []
    for system in ("snapstate", *COMPARATORS):
        if system in missing or system not in times:
            lines.append(
                f"| {NAMES[system]} | {MISSING if system in missing else 'not measured'} | | |"
            )
            continue
        text = "" if system == "snapstate" else ratio(pairs[system])[1]
        lines.append(
            f"| {NAMES[system]} | {stat(times[system], 'ms', 1)} | "
            f"{stat(imports.get(system, []), 'ms', 1)} | {text} |"
        )
        if system != "snapstate" and ratio(pairs[system])[0] > 1:
            losses.append(_recovery_loss(system, times, imports, runs[-1]))
    return lines + _losses(losses)


def _recovery_loss(
    other: str, times: dict[str, list[float]], imports: dict[str, list[float]], last: Json
) -> str:
    snap, theirs = statistics.median(times["snapstate"]), statistics.median(times[other])
    snap_imports = statistics.median(imports.get("snapstate", [0.0]))
    their_imports = statistics.median(imports.get(other, [0.0]))
    size = last.get("snapshot_bytes")
    return (
        f"**Recovery, against {NAMES[other]}** ({snap:.0f} ms against {theirs:.0f} ms): "
        f"starting Python and importing snapstate's CLI takes {snap_imports:.0f} ms "
        f"({other}: {their_imports:.0f} ms), leaving {max(0.0, snap - snap_imports):.0f} ms "
        f"for the rest (against {max(0.0, theirs - their_imports):.0f} ms): `snaprun "
        "resume` opens the store, checks the job's catalog rows against their signatures, "
        "verifies the manifest and every chunk with the store's key before unpickling, "
        "imports the agent's modules fresh and rebuilds the paused frames"
        + (f" (the last snapshot added {size} bytes)" if size else "")
        + "."
    )


# ------------------------------------------------------------------ (b) conversation
def conversation(runs: list[Json]) -> list[str]:
    if not runs:
        return ["Not measured: bench_conversation.py did not run or failed (see below)."]
    steps = runs[0]["steps"]
    rounds: dict[str, list[Json]] = {}
    paired: list[dict[str, Json]] = []
    for run in runs:
        for system, values in run["systems"].items():
            rounds.setdefault(system, []).extend(values)
        for n in range(len(run["systems"]["snapstate"])):
            paired.append({s: v[n] for s, v in run["systems"].items() if n < len(v)})
    missing = runs[0].get("missing", {})
    systems = ["snapstate", *COMPARATORS]
    head = " | ".join(NAMES[s] for s in systems)
    lines = [
        f"{steps} steps, each appending one ~500-byte message and making it durable before "
        'the next (snapstate: `snapshot()`; LangGraph: `SqliteSaver`, `durability="sync"`; '
        "DBOS: one `@DBOS.step` per message, SQLite system database). Medians per step, "
        "[min-max] over the rounds; each system in a fresh interpreter.",
        "",
        f"| | {head} |",
        "|---" * (len(systems) + 1) + "|",
    ]

    def row(label: str, cell: Any) -> None:
        cells = []
        for s in systems:
            if s in missing:
                cells.append(MISSING)
            elif s not in rounds:
                cells.append("not measured")
            else:
                cells.append(cell(rounds[s]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    row("durable per step", lambda rs: stat([r["durable_ms"] for r in rs], "ms", 3))
    row("whole step", lambda rs: stat([r["step_ms"] for r in rs], "ms", 3))
    row("late / early steps", lambda rs: stat([r["late_ms"] / r["early_ms"] for r in rs], "x"))
    row(f"on disk after {steps} steps", lambda rs: stat([r["apparent"] / 1e6 for r in rs], "MB"))
    row("on disk per step (the total / steps)",
        lambda rs: stat([r["apparent"] / steps / 1e3 for r in rs], "KB", 1))  # fmt: skip
    row("SQLite (read from its connection)", lambda rs: _settings(rs[-1].get("settings")))
    lines += [
        "",
        "| snapstate / | durable per step | whole step | bytes on disk |",
        "|---|---|---|---|",
    ]
    losses = []
    for other in COMPARATORS:
        if other in missing or other not in rounds:
            lines.append(
                f"| {NAMES[other]} | {MISSING if other in missing else 'not measured'} | | |"
            )
            continue
        cells, lost = [], []
        for key in ("durable_ms", "step_ms", "apparent"):
            pairs = [(p["snapstate"][key], p[other][key]) for p in paired if other in p]
            value, text = ratio(pairs)
            cells.append(text)
            if value > 1:
                lost.append(key)
        lines.append(f"| {NAMES[other]} | " + " | ".join(cells) + " |")
        latency = [key for key in lost if key != "apparent"]
        if latency:
            losses.append(_latency_loss(other, latency, rounds, steps))
        if "apparent" in lost:
            losses.append(_disk_loss(other, rounds, steps))
        growth = _growth_loss(other, rounds, steps)
        if growth:
            losses.append(growth)
    return lines + _losses(losses)


def _growth_loss(other: str, rounds: dict[str, list[Json]], steps: int) -> str | None:
    """The "late / early steps" row: a reason when snapstate's late steps grow more."""
    ours = statistics.median(r["late_ms"] / r["early_ms"] for r in rounds["snapstate"])
    theirs = statistics.median(r["late_ms"] / r["early_ms"] for r in rounds[other])
    if ours <= theirs:
        return None
    return (
        f"**Conversation, late / early steps, against {NAMES[other]}**: a late step costs "
        f"{ours:.2f}x an early one in snapstate, {theirs:.2f}x in {NAMES[other]}. What "
        "snapstate writes per step stays small (a delta of the chunk the new message "
        "landed in, and a manifest), but before writing it pickles the job's whole state, "
        "which grows with the "
        f"conversation (up to {steps} messages of ~500 bytes), and compares it with the "
        "last snapshot's body; "
        + (
            "a DBOS step records only its own output, whatever the workflow holds."
            if other == "dbos"
            else f"{NAMES[other]} serializes its whole checkpoint too."
        )
    )


def _latency_loss(other: str, keys: list[str], rounds: dict[str, list[Json]], steps: int) -> str:
    snap, theirs = rounds["snapstate"][-1], rounds[other][-1]
    late_kb = statistics.median(r["late_bytes_per_step"] for r in rounds[other]) / 1e3
    what = " and ".join(
        {"durable_ms": "durable per step", "step_ms": "whole step"}[k] for k in keys
    )
    return (
        f"**Conversation, {what}, against {NAMES[other]}**: every step waits for one commit "
        f"in both (snapstate: {_settings(snap.get('settings'))}; {NAMES[other]}: "
        f"{_settings(theirs.get('settings'))}; read from the connections). Before its commit "
        "snapstate captures the job's frames, pickles its whole state (the conversation: up "
        f"to {steps} messages of ~500 bytes), cuts it into chunks and compares them with the "
        f"last snapshot's; {NAMES[other]} "
        + (
            "serializes its new checkpoint, the whole message list too, with msgpack (its "
            f"file grew {late_kb:.1f} KB per late step)."
            if other == "langgraph"
            else f"records the step's output (its files grew {late_kb:.1f} KB per late step)."
        )
    )


def _disk_loss(other: str, rounds: dict[str, list[Json]], steps: int) -> str:
    ours = statistics.median(r["apparent"] for r in rounds["snapstate"]) / steps / 1e3
    theirs = statistics.median(r["apparent"] for r in rounds[other]) / steps / 1e3
    return (
        f"**Conversation, bytes on disk, against {NAMES[other]}**: {ours:.1f} KB per step "
        f"against {theirs:.1f} KB (measured: the total after {steps} steps over the steps). "
        "snapstate keeps every snapshot of the job (none is pruned here), each one a "
        "manifest (the header and a name per chunk) and the chunk the new message landed "
        "in, stored as a delta against the chunk it replaces"
        + ("; a DBOS step stores its output (the message) once." if other == "dbos" else ".")
    )


# ------------------------------------------------------------------ (c) effect
def effect(runs: list[Json]) -> list[str]:
    if not runs:
        return ["Not measured: bench_effect.py did not run or failed (see below)."]
    rounds: dict[str, list[Json]] = {}
    pairs = []
    for run in runs:
        for system, values in run["systems"].items():
            rounds.setdefault(system, []).extend(values)
        if "dbos" in run["systems"]:
            pairs += [
                (a["call_ms"], b["call_ms"])
                for a, b in zip(run["systems"]["snapstate"], run["systems"]["dbos"])
            ]
    calls = runs[0]["calls"]
    lines = [
        f"The same trivial function called {calls} times in one job (the first 20 left out), "
        "each call timed where the agent makes it: a plain `@effect` (the ledger records it "
        "before the call and its outcome after) and a `@DBOS.step()` in a workflow on SQLite.",
        "",
        "| | per call, median | write transactions per call | SQLite (read from its connection) |",
        "|---|---|---|---|",
    ]
    snap = rounds.get("snapstate", [])
    lines.append(
        f"| snapstate `@effect` | {stat([r['call_ms'] for r in snap], 'ms', 3)} | "
        "2 (by design: the row before the call, the outcome after) | "
        f"{_settings(snap[-1]['settings']) if snap else '?'} |"
    )
    losses = []
    if "dbos" in runs[0].get("missing", {}) or "dbos" not in rounds:
        lines.append(f"| DBOS `@DBOS.step` | {MISSING} | | |")
    else:
        dbos = rounds["dbos"]
        commits = [r["commits_per_call"] for r in dbos if r.get("commits_per_call") is not None]
        lines.append(
            f"| DBOS `@DBOS.step` | {stat([r['call_ms'] for r in dbos], 'ms', 3)} | "
            f"{stat(commits, '', 2)} (counted) | {_settings(dbos[-1]['settings'])} |"
        )
        value, text = ratio(pairs)
        lines += ["", f"snapstate / DBOS per call: {text}."]
        if value > 1:
            losses.append(
                "**An effect against a DBOS step**: snapstate commits twice per effect (the "
                "row before the call, so a crash never sends it twice, and the outcome after); "
                f"DBOS commits {statistics.median(commits) if commits else '?'} per step "
                "(counted), after the step: a crash during a step runs it again on recovery. "
                f"snapstate: {_settings(snap[-1]['settings'])}; DBOS: "
                f"{_settings(dbos[-1]['settings'])} (read from the connections)."
            )
    return lines + _losses(losses)


def _losses(losses: list[str]) -> list[str]:
    if not losses:
        return ["", "snapstate loses no row of this table."]
    return ["", "Where snapstate loses, and why:", ""] + [f"- {reason}" for reason in losses]
