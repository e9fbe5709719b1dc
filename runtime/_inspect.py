"""What `snaprun inspect` shows: a snapshot's tasks, their frames (function,
file:line, source line) and each frame's locals as truncated reprs.

The frames come from the verified header; the locals need the body, which is
unpickled (the file was authenticated first) with the agent's modules imported, its
import-time output sent to stderr. If that fails, the frames are still shown."""

from __future__ import annotations

import contextlib
import linecache
import reprlib
import sys
import types

from rich.console import Console
from rich.table import Table

from ..serializers import _pickler
from ._agent import EntryPoint
from ._codeid import find_code
from ._layout import NULL

__all__ = ["describe", "render", "table"]

_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxtuple = 6


def _short(value) -> str:
    if isinstance(value, types.CellType):
        try:
            value = value.cell_contents
        except ValueError:
            return "<empty cell>"
    try:
        return _REPR.repr(value)
    except Exception as exc:  # a broken __repr__ must not break inspect
        return f"<{type(value).__name__}: repr failed: {exc}>"


def _local_names(code) -> list[str]:
    from ._job import _local_names as names
    return names(code)


def describe(header: dict, payload: bytes) -> dict:
    report = {key: header.get(key) for key in ("job_id", "seq", "label", "created_at", "epoch",
                                                 "key_id", "codecs", "entry", "argv")}
    report["python"] = header["versions"]["python_full"]
    frames = [{"function": f["qualname"], "file": f["filename"], "line": f["lineno"],
               "source": linecache.getline(f["filename"], f["lineno"]).strip(), "locals": None}
              for f in header["frames"]]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            EntryPoint.from_dict(header["entry"]).import_module()
            state = _pickler.loads(payload)
        for out, record in zip(frames, state["frames"]):
            names = _local_names(find_code(record.code))
            out["locals"] = {names[i] if i < len(names) else f"slot {i}": _short(v)
                             for i, v in enumerate(record.slots) if v is not NULL}
        report["globals"] = {module: {k: _short(v) for k, v in values.items()
                                      if not isinstance(v, (type, types.FunctionType,
                                                            types.BuiltinFunctionType))}
                             for module, values in state["globals"].items()}
    except Exception as exc:
        report["locals_unavailable"] = f"{type(exc).__name__}: {exc}"
    report["tasks"] = [{"task": "main", "frames": frames[::-1]}]   # outermost first
    return report


def table(headers: list[str], rows: list[list[str]]) -> None:
    grid = Table(*headers, box=None, pad_edge=False, show_edge=False)
    for row in rows:
        grid.add_row(*row)
    Console(width=200, soft_wrap=True).print(grid)


def render(report: dict) -> None:
    console = Console(width=200, soft_wrap=True, highlight=False)
    label = f" ({report['label']})" if report.get("label") else ""
    console.print(f"job {report['job_id']} snapshot {report['seq']}{label}, Python "
                  f"{report['python']}, key {report['key_id']}", markup=False)
    if report.get("locals_unavailable"):
        console.print(f"locals unavailable: {report['locals_unavailable']}", markup=False)
    for task in report["tasks"]:
        console.print(f"task {task['task']}", markup=False)
        for frame in task["frames"]:
            console.print(f"  {frame['function']}()  {frame['file']}:{frame['line']}",
                          markup=False)
            if frame["source"]:
                console.print(f"    > {frame['source']}", markup=False)
            for name, value in (frame["locals"] or {}).items():
                console.print(f"      {name} = {value}", markup=False)
    for module, values in (report.get("globals") or {}).items():
        if values:
            console.print(f"module {module}", markup=False)
            for name, value in values.items():
                console.print(f"      {name} = {value}", markup=False)
