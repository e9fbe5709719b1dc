"""`snaprun crashtest` over each of the seed's examples (examples/<name>/agent.py, its
providers started fresh for every run by examples/<name>/servers.py through --setup):
nothing found. The default run kills each example at a spread of 4 of its kill points;
`--run-slow` tries every one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import snaprun

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SEEDS = ["crash_order", "content_calendar", "rate_limited", "debug_fork", "openai_agent"]


def _crashtest(name: str, tmp_path: Path, *limit: str) -> dict:
    if name == "openai_agent":
        pytest.importorskip("openai", reason="the integrations extra is not installed")
    folder = EXAMPLES / name
    done = snaprun(
        "crashtest",
        "--json",
        *limit,
        "--setup",
        f"{sys.executable} {folder / 'servers.py'}",
        folder / "agent.py",
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["problems"] == [], report["problems"]
    # The uninterrupted run ended as the example's own story does: returned, not waiting.
    assert report["baseline"]["exit_code"] == 0, report["baseline"]
    assert report["baseline"]["snapshots"] >= 1 and report["baseline"]["effects"] >= 1
    return report


@pytest.mark.parametrize("name", SEEDS)
def test_crashtest_finds_nothing_in_the_example(name, tmp_path):
    report = _crashtest(name, tmp_path, "--max-kills", "4")
    assert len(report["trials"]) == 4, report["not_tried"]


@pytest.mark.slow
@pytest.mark.parametrize("name", SEEDS)
def test_crashtest_every_kill_point_of_the_example(name, tmp_path):
    report = _crashtest(name, tmp_path)
    assert len(report["trials"]) == len(report["baseline"]["points"]), report["not_tried"]
