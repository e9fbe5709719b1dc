"""What `snaprun inspect` shows: a snapshot's tasks, their frames (function,
file:line, source line) and each frame's locals as bounded readable renderings.

Read-only and inert: the frames come from the verified header (with their local
variable names, recorded at snapshot time); the locals come from the body decoded
by the inert unpickler (serializers/_inert.py), which imports nothing and runs
nothing of the pickle's: no agent module is imported, no resource is reopened, so
even a hostile file signed with the store's key runs no code. Objects show as
`Class(attr=value, ...)`, functions as `<function module.qualname>`, resources by
kind and path. If the body cannot be decoded, the frames are still shown."""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import Any

from .._errors import SnapstateError
from ..serializers import _inert
from ..serializers._home import Home
from ..serializers._inert import NULL
from ..serializers._store import SnapshotRow

__all__ = [
    "describe",
    "describe_view",
    "written_by",
    "load_state",
    "snapshot_view",
    "source_line",
    "SnapshotView",
    "TaskView",
    "FrameView",
]


@dataclass
class FrameView:
    """One frame of a decoded snapshot: what inspect shows of it, its locals decoded
    (name -> value, empty cells left out; `slot i` where the header has no names)."""

    function: object
    file: object
    line: object
    locals: dict[str, Any] | None  # None: the body could not be decoded


@dataclass
class TaskView:
    """One task of a decoded snapshot, its frames innermost first (frame[0] of a
    --path is the frame that called snapshot() or waits)."""

    task: str
    status: object
    frames: list[FrameView]


@dataclass
class SnapshotView:
    """A decoded snapshot as inspect, --path and diff read it: the header, each task
    (main first) and the agent modules' globals (module -> name -> value)."""

    header: dict[str, Any]
    tasks: list[TaskView]
    globals: dict[str, dict[str, Any]] | None
    error: str | None = None  # why the body could not be decoded


def _named_slots(names: object, slots: object) -> dict[str, Any]:
    names = names if isinstance(names, list) else []
    found: dict[str, Any] = {}
    for i, value in enumerate(slots if isinstance(slots, list) else []):
        value = _inert.cell_contents(value)
        if value is NULL:
            continue
        name = names[i] if i < len(names) and isinstance(names[i], str) else f"slot {i}"
        found[name] = value
    return found


def load_state(home: Home, source: SnapshotRow | str) -> tuple[dict[str, Any], Any, str | None]:
    """(header, decoded state, None) of a snapshot row or file, or (header, None, why)
    when its verified body does not decode. Streamed: the body is never held whole
    (Home.open_row); a file changed while it is read raises TamperedSnapshot."""
    opened = home.open_file(source) if isinstance(source, str) else home.open_row(source)
    with opened as (header, body):
        try:
            state, error = _inert.load(body), None
        except SnapstateError:
            raise  # the stream's own refusal (tampered, damaged chunk)
        except Exception as exc:  # an untrusted body: any shape
            state, error = None, f"{type(exc).__name__}: {exc}"
        body.rest()  # to the end: the MAC (or the last chunk) checked
    return header, state, error


def snapshot_view(header: dict[str, Any], state: Any, error: str | None = None) -> SnapshotView:
    """The tasks, frames, locals and globals of a decoded snapshot (frames and their
    places from the verified header; the values from the inert state). A state of the
    wrong shape leaves the values out, saying why in `error`."""
    listed = [t for t in header.get("tasks") or [] if isinstance(t, dict)]
    main_status = next((t.get("status") for t in listed if t.get("id") == "main"), None)
    shapes = [("main", main_status, header.get("frames"))] + [
        (str(t.get("id")), t.get("status"), t.get("frames"))
        for t in listed
        if t.get("id") != "main"
    ]
    tasks = [
        TaskView(
            task,
            status,
            [
                FrameView(m.get("qualname"), m.get("filename"), m.get("lineno"), None)
                for m in _metas(f)
            ],
        )
        for task, status, f in shapes
    ]
    modules: dict[str, dict[str, Any]] | None = None
    if state is not None:
        try:
            saved = {str(t["id"]): t for t in state.get("tasks") or [] if isinstance(t, dict)}
            for view, (_, _, frames) in zip(tasks, shapes):
                records = (
                    state["frames"]
                    if view.task == "main"
                    else (saved.get(view.task, {}).get("frames") or [])
                )
                for out, meta, record in zip(view.frames, _metas(frames), records):
                    out.locals = _named_slots(
                        meta.get("locals"), _inert.attributes(record).get("slots")
                    )
            modules = {
                str(module): {str(k): v for k, v in values.items()}
                for module, values in state["globals"].items()
            }
        except Exception as exc:  # a damaged body: the frames from the header still show
            error = f"{type(exc).__name__}: {exc}"
    return SnapshotView(header, tasks, modules, error)


def describe(header: dict[str, Any], payload: bytes | bytearray) -> dict[str, Any]:
    """The report for a verified snapshot's header and whole body (see describe_view)."""
    try:
        state: Any = _inert.loads(payload)
        error = None
    except Exception as exc:
        state, error = None, f"{type(exc).__name__}: {exc}"
    return describe_view(snapshot_view(header, state, error))


def describe_view(view: SnapshotView) -> dict[str, Any]:
    """The report for a verified snapshot: never imports or runs agent code. Each
    value bounded (serializers/_inert.py's render), never the whole state."""
    header = view.header
    report: dict[str, Any] = {
        key: header.get(key)
        for key in (
            "job_id",
            "seq",
            "label",
            "created_at",
            "epoch",
            "key_id",
            "codecs",
            "entry",
            "argv",
            "meta",  # snapshot(meta=...) and the job's pins (runtime/_pins.py)
            "pins",
        )
    }
    versions = header.get("versions")
    report["python"] = versions.get("python_full") if isinstance(versions, dict) else None
    report["snapstate"] = versions.get("snapstate") if isinstance(versions, dict) else None
    report["format"], report["schema"] = header.get("format"), header.get("schema")
    report["written_by"] = written_by(header)
    if view.globals is not None:
        report["globals"] = {
            module: {k: _inert.render(v) for k, v in values.items() if not _inert.is_code_object(v)}
            for module, values in view.globals.items()
        }
    if view.error is not None:
        report["locals_unavailable"] = view.error
    report["tasks"] = [  # outermost frame first, each with its --path index
        {
            "task": task.task,
            "status": task.status,
            "frames": [
                _frame_report(frame, index, source_line(frame))
                for index, frame in reversed(list(enumerate(task.frames)))
            ],
        }
        for task in view.tasks
    ]
    return report


def _frame_report(frame: FrameView, index: int, source: str) -> dict[str, Any]:
    return {
        "function": frame.function,
        "file": frame.file,
        "line": frame.line,
        "source": source,
        "index": index,  # frame[index] in a --path: 0 is the innermost
        "locals": None
        if frame.locals is None
        else {name: _inert.render(value) for name, value in frame.locals.items()},
    }


def source_line(frame: FrameView) -> str:
    """The frame's current source line (stripped), or "" where the file is unknown."""
    if isinstance(frame.file, str) and isinstance(frame.line, int):
        return linecache.getline(frame.file, frame.line).strip()
    return ""


def _metas(frames: object) -> list[dict[str, Any]]:
    return (
        [f if isinstance(f, dict) else {} for f in frames or []] if isinstance(frames, list) else []
    )


def written_by(header: dict[str, Any]) -> str:
    """Which snapstate wrote a snapshot, in which file format and for which catalog
    schema ("?" for what the header does not record)."""
    versions = header.get("versions")
    release = versions.get("snapstate") if isinstance(versions, dict) else None
    return (
        f"written by snapstate {release or '?'} (snapshot format {header.get('format') or '?'}, "
        f"catalog schema {header.get('schema') or '?'}"
        + (f" of {header['catalog']}" if isinstance(header.get("catalog"), str) else "")
        + ")"
    )
