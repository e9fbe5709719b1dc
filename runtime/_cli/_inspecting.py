"""`snaprun inspect`'s text: the lines of a snapshot's report (runtime/_inspect.py's
describe()), each printed through visible() by the command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["render_report", "render_value"]


def render_report(report: dict[str, Any]) -> Iterator[str]:
    """The report as lines: the snapshot, its pins and meta, each task's frames with
    their locals (outermost first: --path's frame[0] is each task's last, the
    innermost; the listing's format is kept as releases' golden files recorded it),
    the agent modules' globals."""
    label = f" ({report['label']})" if report.get("label") else ""
    yield (
        f"job {report['job_id']} snapshot {report['seq']}{label}, Python "
        f"{report['python']}, key {report['key_id']}"
    )
    yield str(report["written_by"])
    if report.get("pins"):
        pins = report["pins"]
        text = (
            " ".join(f"{k}={v}" for k, v in sorted(pins.items()))
            if isinstance(pins, dict)
            else pins
        )
        yield f"pins: {text}"
    if report.get("meta") is not None:
        yield f"meta: {json.dumps(report['meta'], sort_keys=True)}"
    if report.get("locals_unavailable"):
        yield f"locals unavailable: {report['locals_unavailable']}"
    for task in report["tasks"]:
        status = f" ({task['status']})" if task.get("status") else ""
        yield f"task {task['task']}{status}"
        for frame in task["frames"]:
            yield f"  {frame['function']}()  {frame['file']}:{frame['line']}"
            if frame["source"]:
                yield f"    > {frame['source']}"
            for name, value in (frame["locals"] or {}).items():
                yield f"      {name} = {value}"
    for module, values in (report.get("globals") or {}).items():
        if values:
            yield f"module {module}"
            for name, value in values.items():
                yield f"      {name} = {value}"


def render_value(shown: dict[str, Any]) -> Iterator[str]:
    """`inspect --path`'s lines: the value's path, type and length, a page of it, then
    its children, each with the path that shows it."""
    named = shown["type"] in ("frame", "locals", "module", "modules")
    unit = (" name" if shown["length"] == 1 else " names") if named else " long"
    length = f", {shown['length']}{unit}" if shown["length"] is not None else ""
    yield f"{shown['path']}  ({shown['type']}{length})"
    yield f"  {shown['value']}"
    if shown["children"]:
        yield "children:"
        for child in shown["children"]:
            yield f"  {child['path']}  ({child['type']})  {child['value']}"
        if shown["more_children"]:
            yield f"  ... and {shown['more_children']} more"
