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
from typing import Any

from ..serializers import _inert
from ..serializers._inert import NULL

__all__ = ["describe", "written_by"]


def _locals(names: object, slots: object) -> dict[str, str]:
    """name -> rendering of each set slot; `slot i` where the header has no names
    (snapshots taken before names were recorded)."""
    names = names if isinstance(names, list) else []
    shown: dict[str, str] = {}
    for i, value in enumerate(slots if isinstance(slots, list) else []):
        value = _inert.cell_contents(value)
        if value is NULL:
            continue
        name = names[i] if i < len(names) and isinstance(names[i], str) else f"slot {i}"
        shown[name] = _inert.render(value)
    return shown


def describe(header: dict[str, Any], payload: bytes | bytearray) -> dict[str, Any]:
    """The report for a verified snapshot: never imports or runs agent code."""
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
    metas = _metas(header.get("frames"))
    frames = _frames(metas)
    # A snapshot of several tasks lists them all (main's frames are header["frames"]).
    listed = [t for t in header.get("tasks") or [] if isinstance(t, dict)]
    others = [
        (t, _metas(t.get("frames")), _frames(_metas(t.get("frames"))))
        for t in listed
        if t.get("id") != "main"
    ]
    try:
        state: Any = _inert.loads(payload)  # an untrusted body: any shape (caught below)
        for out, meta, record in zip(frames, metas, state["frames"]):
            out["locals"] = _locals(meta.get("locals"), _inert.attributes(record).get("slots"))
        saved = {str(t["id"]): t for t in state.get("tasks") or [] if isinstance(t, dict)}
        for task, task_metas, task_frames in others:
            records = saved.get(str(task.get("id")), {}).get("frames") or []
            for out, meta, record in zip(task_frames, task_metas, records):
                out["locals"] = _locals(meta.get("locals"), _inert.attributes(record).get("slots"))
        report["globals"] = {
            str(module): {
                str(k): _inert.render(v) for k, v in values.items() if not _inert.is_code_object(v)
            }
            for module, values in state["globals"].items()
        }
    except Exception as exc:  # a damaged body: the frames from the header still show
        report["locals_unavailable"] = f"{type(exc).__name__}: {exc}"
    main_status = next((t.get("status") for t in listed if t.get("id") == "main"), None)
    report["tasks"] = [{"task": "main", "status": main_status, "frames": frames[::-1]}]
    report["tasks"] += [  # outermost frame first
        {"task": str(t.get("id")), "status": t.get("status"), "frames": f[::-1]}
        for t, _, f in others
    ]
    return report


def _metas(frames: object) -> list[dict[str, Any]]:
    return (
        [f if isinstance(f, dict) else {} for f in frames or []] if isinstance(frames, list) else []
    )


def _frames(metas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "function": f.get("qualname"),
            "file": f.get("filename"),
            "line": f.get("lineno"),
            "source": linecache.getline(f["filename"], f["lineno"]).strip()
            if isinstance(f.get("filename"), str) and isinstance(f.get("lineno"), int)
            else "",
            "locals": None,
        }
        for f in metas
    ]


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
