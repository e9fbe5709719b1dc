"""The generated part of benchmarks/RESULTS.md: the run, the machine, the side-by-side
comparisons and a table per benchmark; and how it replaces the last one between the
markers, leaving everything else in the file (the issues' history) as it was.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Any

from . import _compare
from ._suite import Bench, Json

BEGIN = (
    "<!-- BEGIN CURRENT RESULTS: written by `python -m benchmarks` and replaced on every "
    "run; edit nothing between these markers -->"
)
END = "<!-- END CURRENT RESULTS -->"


class MarkerError(ValueError):
    """The output file's markers are not one BEGIN followed by one END."""


@dataclass
class Outcome:
    """One run of one script under one interpreter."""

    bench: Bench
    python: str  # the interpreter's version, as the tables name it
    repeat: int
    seconds: float = 0.0
    load: str = "?"
    data: Json | None = None
    error: str | None = None  # it failed: how
    skipped: str | None = None  # it could not run here: why


@dataclass
class Run:
    """The whole run: what was asked, the facts, every outcome."""

    command: str
    mode: str  # "full" or "fast"
    repeat: int
    started: str
    seconds: float
    machine: dict[str, Any]
    pythons: list[dict[str, Any]]
    load_before: str
    load_after: str
    busy_before: list[tuple[str, int, float]]
    busy_after: list[tuple[str, int, float]]
    outcomes: list[Outcome] = field(default_factory=list)


def number(value: float) -> str:
    size = abs(value)
    digits = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else 3
    return f"{value:.{digits}f}"


def figure(values: list[float], unit: str) -> str:
    unit = unit if unit == "x" else " " + unit
    text = number(statistics.median(values)) + unit
    if len(values) > 1:
        text += f" [{number(min(values))}-{number(max(values))}]"
    return text


def _busy(rows: list[tuple[str, int, float]]) -> str:
    if not rows:
        return "none above 1% of a core"
    return ", ".join(f"{name} ({pid}) {percent:.0f}%" for name, pid, percent in rows)


def _python_line(facts: dict[str, Any]) -> str:
    libraries = ", ".join(f"{n} {v}" for n, v in facts["libraries"].items() if v)
    return f"{facts['implementation']} {facts['python']} (SQLite {facts['sqlite']}; {libraries})"


def machine_table(run: Run) -> list[str]:
    m = run.machine
    rows = [
        ("CPU", m["cpu"]),
        ("cores", m["cores"]),
        ("memory", m["memory"]),
        ("OS", m["os"]),
        *((f"Python `{p['executable']}`", _python_line(p)) for p in run.pythons),
        ("temporary folders (the stores)", m["tmp"]),
        ("the checkout (bench_durable's and bench_ledger's stores)", m["checkout"]),
        ("load average (1, 5, 15 min)", f"before {run.load_before}; after {run.load_after}"),
        ("other processes using the CPU, before the run", _busy(run.busy_before)),
        ("after the run", _busy(run.busy_after)),
    ]
    return ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def bench_table(bench: Bench, outcomes: list[Outcome], pythons: list[str]) -> list[str]:
    """The figures of one script: a row per measure, a column per interpreter."""
    lines = [f"#### {bench.title} (`{bench.script}`)", ""]
    skipped = [o for o in outcomes if o.skipped]
    if skipped:
        return lines + [f"Not run: {skipped[0].skipped}.", ""]
    rows: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        if o.data is None:
            continue
        try:
            metrics = bench.metrics(o.data)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            o.error = f"its JSON lacks what the runner reads ({type(e).__name__}: {e})"
            continue
        for metric in metrics:
            row = rows.setdefault(metric.key, {"metric": metric, "values": {}})
            row["values"].setdefault(o.python, []).append(metric.value)
    if rows:
        targets = any(r["metric"].target for r in rows.values())
        head = ["measure", *(["target"] if targets else []), *(f"Python {p}" for p in pythons)]
        lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for row in rows.values():
            metric = row["metric"]
            cells = [metric.label, *([metric.target or ""] if targets else [])]
            for p in pythons:
                values = row["values"].get(p)
                cells.append(figure(values, metric.unit) if values else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    ran = [o for o in outcomes if o.data is not None or o.error]
    if ran:
        seconds = [o.seconds for o in ran]
        lines.append(
            f"Each run took {figure(seconds, 's')}; load average at its start: "
            + ", ".join(o.load.split()[0] for o in ran)
            + "."
        )
    for o in outcomes:
        if o.error:
            lines.append(f"**Failed** (Python {o.python}, repeat {o.repeat}): {o.error}")
    return lines + [""]


def block(run: Run) -> str:
    """The generated part, markers included."""
    pythons = [p["python"] for p in run.pythons]
    by_bench: dict[str, list[Outcome]] = {}
    for o in run.outcomes:
        by_bench.setdefault(o.bench.name, []).append(o)
    lines = [
        BEGIN,
        "## Current results",
        "",
        f"Generated by `{run.command}` on {run.started} in {run.seconds:.0f} s, commit "
        f"{run.machine['commit']}. "
        + (
            f"Each benchmark script ran as a subprocess {run.repeat} times, the repeats "
            "interleaved (every script once, then every script again); a figure is the "
            "median over the repeats (and over a script's own rounds) with its [min-max]. "
            if run.repeat > 1
            else "Each benchmark script ran once, as a subprocess; a figure with a [min-max] "
            "is the median of a script's own rounds. "
        )
        + "Bytecode caches were written and used (PYTHONDONTWRITEBYTECODE unset for the "
        "scripts, each interpreter's imports warmed first), as for an installed package. "
        "How each figure is measured: each script's docstring and docs/benchmarks.md.",
        "",
    ]
    if run.mode == "fast":
        lines += [
            "**Fast mode** (what CI runs: small sizes, each script once): these figures show "
            "that the benchmarks run, not what snapstate costs; compare only a full run's.",
            "",
        ]
    lines += ["### The machine", "", *machine_table(run), ""]
    compared = [name for name in ("recovery", "conversation", "effect") if name in by_bench]
    if compared:
        lines += ["### Side by side: snapstate, LangGraph's SqliteSaver and DBOS", ""]
    for python in pythons if compared else []:
        if len(pythons) > 1:
            lines += [f"On Python {python}.", ""]

        def runs(name: str, python: str = python) -> list[Json]:
            return [o.data for o in by_bench.get(name, []) if o.python == python and o.data]

        for title, name, make in (
            ("Recovery after a crash: start to first instruction", "recovery", _compare.recovery),
            ("A growing conversation: per-step durable latency and bytes", "conversation",
             _compare.conversation),
            ("A recorded effect against a DBOS step", "effect", _compare.effect),
        ):  # fmt: skip
            if name not in by_bench:
                continue
            try:
                made = make(runs(name))
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
                made = [
                    f"Not shown: the figures lack what the table reads ({type(e).__name__}: {e})."
                ]
            lines += [f"#### {title}", "", *made, ""]
    lines += ["### Every benchmark", ""]
    for outcomes in by_bench.values():
        lines += bench_table(outcomes[0].bench, outcomes, pythons)
    lines.append(END)
    return "\n".join(lines) + "\n"


def splice(existing: str, generated: str) -> str:
    """`existing` with its generated part replaced by `generated`; everything outside the
    markers kept byte for byte. A file without markers gets the part at its top."""
    lines = existing.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.startswith("<!-- BEGIN CURRENT RESULTS")]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if not begins and not ends:
        return generated + ("\n" + existing if existing else "")
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise MarkerError(
            f"{len(begins)} BEGIN and {len(ends)} END marker line(s)"
            + (", END before BEGIN" if begins and ends and ends[0] < begins[0] else "")
        )
    return "".join(lines[: begins[0]]) + generated + "".join(lines[ends[0] + 1 :])


def write(path: str, generated: str) -> None:
    """Replace the generated part of `path` (atomically: a temporary file, fsync'd, renamed
    over it), or create the file."""
    try:
        with open(path, encoding="utf-8") as f:
            existing = f.read()
    except FileNotFoundError:
        existing = ""
    text = splice(existing, generated)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".results-", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
