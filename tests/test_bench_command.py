"""`python -m benchmarks`: the one command that runs the benchmarks and rewrites the
generated part of benchmarks/RESULTS.md.

A real run (fast mode, two quick benchmarks: the ledger's and the effect against a DBOS
step) writes into a copy of the committed RESULTS.md: the machine's facts, the markers,
the figures, and every byte of the history outside the markers as it was. Damaged
markers and an unknown benchmark are refused before anything runs or is written. The
side-by-side tables are checked on measured-shaped data: a comparator that is not
installed gives a row saying so, and a row where snapstate loses carries its reason.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


@pytest.fixture
def report_modules(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import _compare, _report

    return _compare, _report


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _outside(text: str) -> tuple[str, str]:
    """What precedes the generated part and what follows it."""
    begin = text.index("<!-- BEGIN CURRENT RESULTS")
    end = text.index("<!-- END CURRENT RESULTS -->") + len("<!-- END CURRENT RESULTS -->\n")
    return text[:begin], text[end:]


def test_a_fast_run_writes_the_facts_and_figures_and_keeps_the_history(tmp_path):
    output = tmp_path / "RESULTS.md"
    original = RESULTS.read_text()
    output.write_text(original)
    run = bench("--fast", "--only", "ledger", "--only", "effect", "--output", str(output))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == ""
    assert f"wrote {output}" in run.stderr
    written = output.read_text()
    assert _outside(written) == _outside(original)  # the history, byte for byte
    assert written.count("<!-- BEGIN CURRENT RESULTS") == 1
    generated = written[len(_outside(written)[0]) : len(written) - len(_outside(written)[1])]
    assert "## Current results" in generated
    assert "**Fast mode**" in generated
    assert "python -m benchmarks --fast --only ledger --only effect" in generated
    for fact in ("| CPU |", "| cores |", "| memory |", "| OS |", "| load average (1, 5, 15 min) |"):
        assert fact in generated, fact
    assert "other processes using the CPU, before the run" in generated
    assert f"SQLite {sqlite3.sqlite_version}" in generated
    assert f"Python {sys.version.split()[0]}" in generated
    # The ledger's figures, and the effect's comparison: measured, or DBOS reported missing.
    assert "| effect / one insert, synchronous=FULL | <= 1.5x |" in generated
    assert "#### A recorded effect against a DBOS step" in generated
    assert "| snapstate `@effect` | " in generated
    dbos_row = next(line for line in generated.splitlines() if line.startswith("| DBOS `@DBOS"))
    assert " ms" in dbos_row or "not installed" in dbos_row
    assert "#### Recovery" not in generated  # not asked for: no empty section
    assert "**Failed**" not in generated


def test_damaged_markers_are_refused_and_nothing_is_written(tmp_path):
    output = tmp_path / "RESULTS.md"
    damaged = RESULTS.read_text().replace("<!-- END CURRENT RESULTS -->\n", "")
    output.write_text(damaged)
    run = bench("--fast", "--only", "ledger", "--output", str(output), timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("python -m benchmarks: error: ")
    assert str(output) in run.stderr and "markers are damaged" in run.stderr
    assert "Traceback" not in run.stderr
    assert output.read_text() == damaged


def test_an_unknown_benchmark_is_a_usage_error():
    run = bench("--only", "nonesuch", timeout=60)
    assert run.returncode == 2
    assert "unknown benchmark nonesuch" in run.stderr and "conversation" in run.stderr
    assert "Traceback" not in run.stderr


def test_splice_replaces_only_the_generated_part(report_modules):
    _, report = report_modules
    text = "# Title\n\nintro\n\n" + report.BEGIN + "\nold\n" + report.END + "\n\n# History\nkept\n"
    once = report.splice(text, report.BEGIN + "\nnew\n" + report.END + "\n")
    assert (
        once
        == "# Title\n\nintro\n\n" + report.BEGIN + "\nnew\n" + report.END + "\n\n# History\nkept\n"
    )
    assert report.splice(once, report.BEGIN + "\nnew\n" + report.END + "\n") == once
    # A file without markers keeps all of it under the generated part.
    assert report.splice("# History\n", "G\n") == "G\n\n# History\n"
    for damaged in (report.BEGIN + "\n", report.END + "\n" + report.BEGIN + "\n",
                    text + report.BEGIN + "\n"):  # fmt: skip
        with pytest.raises(report.MarkerError):
            report.splice(damaged, "G\n")


def _conversation(durable: float, disk: int, late_bytes: float) -> dict[str, object]:
    return {
        "durable_ms": durable, "step_ms": durable * 1.2, "early_ms": durable, "late_ms": durable,
        "apparent": disk, "late_bytes_per_step": late_bytes,
        "settings": {"journal_mode": "wal", "synchronous": "FULL"},
    }  # fmt: skip


def test_a_missing_comparator_is_a_row_and_every_loss_has_its_reason(report_modules):
    compare, _ = report_modules
    missing = {"dbos": "not installed (pip install -e .[bench])"}
    conversation = compare.conversation(
        [
            {
                "steps": 1000,
                "missing": missing,
                "systems": {
                    "snapstate": [_conversation(1.5, 2_760_000, 2900.0)],
                    "langgraph": [_conversation(1.2, 267_000_000, 530_000.0)],
                },
            }
        ]
    )
    text = "\n".join(conversation)
    assert "| DBOS | not installed" in text
    # Slower per step than LangGraph (1.25x), smaller on disk: one reason, for that row.
    assert "| LangGraph SqliteSaver | 1.25x | 1.25x | 0.01x |" in text
    assert "Where snapstate loses, and why:" in text
    reasons = [line for line in conversation if line.startswith("- **")]
    assert len(reasons) == 1  # durable per step and whole step, together; not bytes on disk
    assert "durable per step and whole step, against LangGraph SqliteSaver" in reasons[0]
    assert "journal_mode=wal, synchronous=FULL" in reasons[0]
    assert "530.0 KB per late step" in reasons[0]  # LangGraph's measured growth

    with_dbos = compare.conversation(
        [
            {
                "steps": 1000,
                "missing": {},
                "systems": {
                    "snapstate": [_conversation(1.5, 2_760_000, 0.0)],
                    "langgraph": [_conversation(3.0, 267_000_000, 530_000.0)],
                    "dbos": [_conversation(3.0, 1_380_000, 1200.0)],
                },
            }
        ]
    )
    reasons = [line for line in with_dbos if line.startswith("- **")]
    assert len(reasons) == 1 and "bytes on disk, against DBOS" in reasons[0]
    assert "2.8 KB per step against 1.4 KB" in reasons[0]

    recovery = compare.recovery(
        [
            {
                "steps": 100,
                "missing": {},
                "recovery_ms": {"snapstate": [500.0], "langgraph": [400.0], "dbos": [900.0]},
                "import_ms": {
                    "python": [20.0],
                    "snapstate": [300.0],
                    "langgraph": [350.0],
                    "dbos": [500.0],
                },  # fmt: skip
                "snapshot_bytes": 1200,
            }
        ]
    )
    reasons = [line for line in recovery if line.startswith("- **")]
    assert len(reasons) == 1 and "against LangGraph SqliteSaver" in reasons[0]
    assert "300 ms" in reasons[0]  # the measured import time is part of the reason

    effect = compare.effect(
        [
            {
                "calls": 300,
                "missing": missing,
                "systems": {
                    "snapstate": [
                        {
                            "call_ms": 0.5,
                            "settings": {"journal_mode": "wal", "synchronous": "FULL"},
                            "commits_per_call": None,
                        }
                    ]
                },
            }
        ]  # fmt: skip
    )
    assert any(line.startswith("| DBOS `@DBOS.step` | not installed") for line in effect)
    assert "snapstate loses no row of this table." in effect
