"""`snaprun diff`: what changed between two snapshots (runtime/_diff.py's report), as
text like a unified diff per path, or --json. Every line goes through visible() (a
store's values are data, hostile text included) and fits the terminal unless --wide."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click
from rich.cells import cell_len, set_cell_size

from .. import _diff
from ._common import check_ids, exit_codes, json_option, open_home, store_option, when
from ._table import ELLIPSIS, terminal_width, visible, wide_option

__all__ = ["diff", "render_diff"]


@click.command(epilog=exit_codes(0, 2))
@store_option
@json_option
@wide_option
@click.argument("ref_a", metavar="JOB@A")
@click.argument("ref_b", metavar="JOB@B")
def diff(store: str | None, as_json: bool, wide: bool, ref_a: str, ref_b: str) -> None:
    """Show what changed from snapshot A to snapshot B (JOB@SEQ or JOB for its latest;
    B may be of another job, e.g. a fork): frames added, removed and moved, locals,
    globals and object attributes added, removed or changed, and the effects and
    events recorded in between. Runs none of the snapshots' code, writes nothing."""
    check_ids(ref_a, ref_b)
    home = open_home(store, readonly=True)
    report = _diff.diff_report(home, ref_a, ref_b)
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
        return
    width = None if wide else terminal_width()
    for line in render_diff(report):
        text = visible(line)
        if width is not None and cell_len(text) > width:
            text = set_cell_size(text, max(width - 1, 0)) + ELLIPSIS
        click.echo(text)


def _frame_line(frame: dict[str, Any]) -> str:
    line_a, line_b = frame["line"]
    place = f"{frame['function']}()  {frame['file']}"
    if frame["change"] == "kept":
        moved = f":{line_a}" if line_a == line_b else f":{line_a} -> {line_b}"
        return f"  = frame[{frame['index'][1]}] {place}{moved}"
    if frame["change"] == "removed":
        return f"  - frame[{frame['index'][0]}] {place}:{line_a}  (only in A)"
    return f"  + frame[{frame['index'][1]}] {place}:{line_b}  (only in B)"


def render_diff(report: dict[str, Any]) -> Iterator[str]:
    """The report as lines (not yet escaped)."""
    a, b = report["a"], report["b"]
    yield f"--- {a['ref']}" + (f" ({a['label']})" if a["label"] else "") + f"  {when(a['created'])}"
    yield f"+++ {b['ref']}" + (f" ({b['label']})" if b["label"] else "") + f"  {when(b['created'])}"
    yield f"{report['relation']['text']}"
    for side, error in (report["undecoded"] or {}).items():
        yield f"values of {side.upper()} unavailable (frames only): {error}"
    for task in report["tasks"]:
        status_a, status_b = task["status"]
        if status_a == status_b:
            status = f" ({status_a})" if status_a is not None else ""
        else:
            status = f" ({status_a or '-'} -> {status_b or '-'})"
        change = "" if task["change"] == "kept" else f" {task['change']}"
        yield f"task {task['task']}{change}{status}"
        for frame in task["frames"]:
            yield _frame_line(frame)
    if not report["changes"]:
        yield "no value changed"
    for change in report["changes"]:
        yield f"@@ {change['path']} ({change['change']}) @@"
        if change.get("diff"):
            yield from change["diff"]
            continue
        if change["old"] is not None:
            yield f"-{change['old']}"
        if change["new"] is not None:
            yield f"+{change['new']}"
    if report["more_changes"]:
        yield f"... and {report['more_changes']} more changed values not listed (`snaprun inspect --path` shows one)"
    shown = [e for e in report["effects"] if not e["internal"]]
    hidden = len(report["effects"]) - len(shown)
    if report["relation"]["kind"] != "unrelated":
        yield f"effects recorded in between: {len(shown)}" + (
            f" (and {hidden} now()/random()/uuid4() rows)" if hidden else ""
        )
        for effect in shown:
            site = effect["call_site"].rsplit("/", 1)[-1]
            yield (
                f"  #{effect['effect']} {effect['state']} {effect['name']}({effect['args']})"
                f"  at {site}"
            )
        yield f"events in between: {len(report['events'])}"
        for event in report["events"]:
            detail = f": {event['detail']}" if event["detail"] else ""
            yield f"  {when(event['at'])} {event['kind']}{detail}"
