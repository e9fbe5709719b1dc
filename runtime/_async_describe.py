"""Describing an async job in the user's words: each task's chain of coroutines
(file:line) and what it awaits, who holds a future, the frames a snapshot's header
lists (`frame_headers`) and the roots `inspect` walks.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import types
from typing import TYPE_CHECKING, Any

from ..serializers._codeid import code_ref
from ._async_loop import MAIN, FutureAwait, frame_and_awaited, iter_future
from ._frames import local_names_for_header
from ._morph import unmorph
from ._points import runner_or_none

if TYPE_CHECKING:
    pass

__all__ = ["describe_task", "frame_headers", "roots", "owner_name", "job_holder", "chain_objects"]


def _type_name(obj: object) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def owner_name(holder: object, depth: int = 0) -> str:
    """What holds a future, named by the first object that is not a plain container."""
    if isinstance(holder, (list, dict, set, tuple, collections.deque)) and depth < 3:
        for owner in gc.get_referrers(holder):
            if not isinstance(owner, types.FrameType) and owner is not holder:
                name = owner_name(owner, depth + 1)
                if not name.startswith("builtins."):
                    return name
    return _type_name(holder)


def job_holder(holder: object, agent: set[str], depth: int = 0) -> bool:
    """`holder` keeps a future for the job's own code: asyncio's primitives, the
    agent's objects, code or variables, or a container one of those holds."""
    if isinstance(holder, (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)):
        frame = frame_and_awaited(holder)
        name = frame[0].f_globals.get("__name__") if frame and frame[0] is not None else None
        return isinstance(name, str) and (name in agent or name.startswith("asyncio"))
    if isinstance(holder, (types.CellType, types.FunctionType, types.MethodType)):
        return True
    if isinstance(holder, types.ModuleType):  # a global of the agent's
        return holder.__name__ in agent
    module = type(holder).__module__ or ""
    if module == "asyncio" or module.startswith("asyncio.") or module in agent:
        return True
    if isinstance(holder, (list, dict, set, tuple, collections.deque)) and depth < 3:
        return any(
            job_holder(h, agent, depth + 1)
            for h in gc.get_referrers(holder)
            if not isinstance(h, types.FrameType)
        )
    return False


# ------------------------------------------------------------------------ describing
def describe_task(task: asyncio.Task[Any]) -> str:
    """A task's chain of coroutines (file:line, outermost first) and what it awaits."""
    parts: list[str] = []
    coro: Any = task.get_coro()
    awaited: Any = None
    while coro is not None:
        link = frame_and_awaited(coro)
        if link is None:
            break
        frame, nxt = link
        if frame is None:
            break
        code = unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]
        parts.append(f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}")
        if frame_and_awaited(nxt) is not None:
            coro = nxt
            continue
        awaited = nxt
        break
    waiter = getattr(task, "_fut_waiter", None)
    what = _describe_awaited(awaited, waiter)
    return f"{' -> '.join(parts) or 'no frame'}, awaiting {what}"


def _describe_awaited(awaited: Any, waiter: Any) -> str:
    if isinstance(awaited, FutureAwait):
        awaited = awaited.future
    elif awaited is not None and type(awaited).__name__ == "FutureIter":
        awaited = iter_future(awaited)
    target = waiter if waiter is not None else awaited
    if target is None:
        return "nothing (it is ready to run)"
    if isinstance(target, asyncio.Future):
        callbacks = [cb for cb, _ in getattr(target, "_callbacks", None) or []]
        names = [getattr(cb, "__qualname__", type(cb).__name__) for cb in callbacks]
        source = getattr(target, "_source_traceback", None)
        hint = ""
        if any("_chain_future" in n or "_call_set_state" in n for n in names):
            hint = " (a call running in a thread: asyncio.to_thread or run_in_executor)"
        return f"{target!r}{hint}" + (f" created at {source[-1]}" if source else "")
    return repr(target)


def frame_headers(state: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The header's frames of main's chain of coroutines and every pending task's
    (innermost first, as for greenlet tasks): checked against the agent's code before a
    restore, shown by `snaprun inspect`."""
    runner = runner_or_none()
    main: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for task in state["tasks"]:
        frames: list[dict[str, Any]] = []
        for frame in _chain_frames(task.get_coro()):
            code = unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]
            name = frame.f_globals.get("__name__")
            if not isinstance(name, str):
                continue
            ref = code_ref(code, name)
            frames.append(
                {
                    "module": ref.module,
                    "qualname": ref.qualname,
                    "firstlineno": ref.firstlineno,
                    "digest": ref.digest,
                    "filename": ref.filename,
                    "lineno": frame.f_lineno,
                    "locals": local_names_for_header(ref),
                }
            )
        frames.reverse()  # innermost first
        info = runner.info.get(task) if runner is not None else None
        tid = info.id if info is not None else task.get_name()
        if tid == MAIN:
            main = frames
        tasks.append(
            {
                "id": tid,
                "parent": info.parent if info is not None else None,
                "status": "awaiting",
                "frames": frames,
            }
        )
    return main, tasks


def chain_objects(coro: Any) -> list[Any]:
    """The coroutines (and async-for steps) of a task's chain, outermost first."""
    out: list[Any] = []
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen:
        seen.add(id(coro))
        link = frame_and_awaited(coro)
        if link is None:
            break
        out.append(coro)
        coro = link[1]
    return out


def _chain_frames(coro: Any) -> list[types.FrameType]:
    frames: list[types.FrameType] = []
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen:
        seen.add(id(coro))
        link = frame_and_awaited(coro)
        if link is None or link[0] is None:
            break
        frames.append(link[0])
        coro = link[1]
    return frames


def roots(state: dict[str, Any]) -> list[tuple[str, object]]:
    """Where each value of the tasks' frames comes from, for naming an unpicklable one."""
    runner = runner_or_none()

    def info(task: asyncio.Task[Any]) -> str:
        known = runner.info.get(task) if runner is not None else None
        return known.id if known is not None else task.get_name()

    out: list[tuple[str, object]] = []
    for task in state["tasks"]:
        for frame in _chain_frames(task.get_coro()):
            code = unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]
            where = f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}"
            for name, value in frame.f_locals.items():
                out.append((f"task {info(task)}, frame {where}, local {name!r}", value))
    return out
