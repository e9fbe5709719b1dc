"""`snaprun inspect --path`: one value of a decoded snapshot, named by a path, and its
children, so a large state can be read one value at a time (docs/diff.md).

    [task[N|ID].] frame[N|FUNCTION] [.locals.NAME] STEP...
                  globals [.MODULE [.NAME]] STEP...
    STEP:         .attr | [index] | ["key"] | [key]

A path starts at a task (main when left out; `task[1]` by its place in inspect's list,
`task[ID]` by its id), then a frame: `frame[0]` is the innermost (the frame that
called snapshot() or waits: the last one `snaprun inspect` lists under its task, which
lists the outermost first; its --json gives each frame's "index"), `frame[1]` its
caller, `frame[-1]` the outermost; `frame[NAME]` is the innermost frame of function
NAME. Or it starts at
`globals`: `globals.agent.notes` (a dotted module name is matched against the saved
modules, the longest first). Then steps: `.attr` an object's attribute (a dict's
string key too), `[3]` an item of a list or tuple (or a dict's int key),
`["key"]` a dict's key (a quoted Python literal: string, number, bytes, None...).

The same steps name what `snaprun diff` reports (runtime/_diff.py): child_steps()
gives a value's children with the step that names each. Nothing here runs the
snapshot's code: the values are serializers/_inert.py's stand-ins.
"""

from __future__ import annotations

import ast
import keyword
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ..serializers import _inert
from ..serializers._inert import Inert, InertType
from ._inspect import FrameView, SnapshotView, TaskView

__all__ = [
    "PathError",
    "resolve_path",
    "show_value",
    "child_steps",
    "step_for_key",
    "type_name",
    "MAX_CHILDREN",
]

MAX_CHILDREN = 50  # children listed by show_value
_PAGE = 3000  # characters of a value show_value prints (a page)
_LISTED = 20  # names an error lists


class PathError(LookupError):
    """A --path that does not parse or does not resolve: the message names the part
    that did not and what exists there."""


# ------------------------------------------------------------------------ parsing
@dataclass(frozen=True)
class _Step:
    kind: str  # "name" (after a dot, or the first word) or "item" (in brackets)
    value: Any
    text: str  # as written


def _parse(path: str) -> list[_Step]:
    steps: list[_Step] = []
    i, n = 0, len(path)
    while i < n:
        c = path[i]
        if c == "." and steps or c != "." and c != "[" and not steps:
            i += c == "."
            j = i
            while j < n and path[j] not in ".[":
                j += 1
            name = path[i:j].strip()
            if not name:
                raise PathError(f"{path!r}: a name is missing at character {i + 1}")
            steps.append(_Step("name", name, "." + name if steps else name))
            i = j
        elif c == "[":
            j = _closing(path, i)
            inner = path[i + 1 : j].strip()
            steps.append(_Step("item", _literal(inner), path[i : j + 1]))
            i = j + 1
        else:
            raise PathError(f"{path!r}: unexpected {c!r} at character {i + 1}")
    if not steps:
        raise PathError("an empty path: start with frame[0], task[ID] or globals")
    return steps


def _closing(path: str, start: int) -> int:
    """The index of the `]` closing the bracket at `start` (a quoted key may hold one)."""
    i = start + 1
    quote = None
    while i < len(path):
        c = path[i]
        if quote is not None:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "]":
            return i
        i += 1
    raise PathError(f"{path!r}: the bracket at character {start + 1} is not closed")


def _literal(text: str) -> Any:
    """A bracket's key: a Python literal (an int, a quoted string...), else the bare
    word as a string (`task[worker]`, `frame[step]`, `[name]`)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


# ------------------------------------------------------------------------ naming
def step_for_key(key: object) -> str:
    """The step naming a dict's (or an Inert mapping's) value of `key`."""
    if isinstance(key, (str, bytes, int, float, bool, type(None))):
        return f"[{key!r}]"
    return f"[{_inert.render(key, 1)}]"


def _attr_step(name: object) -> str | None:
    if isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name):
        return "." + name
    return None


def child_steps(value: object) -> Iterator[tuple[str, object]]:
    """(step, child) for each child of a decoded value, in order: a list's or tuple's
    items ([i]), a dict's values ([key]), an Inert object's attributes (.name), items
    ([i]) and mapping items ([key]). Scalars, sets and code have none."""
    value = _inert.cell_contents(value)
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield f"[{i}]", item
    elif isinstance(value, dict):
        for key, item in value.items():
            yield step_for_key(key), item
    elif isinstance(value, Inert) and not _inert.is_code_object(value):
        for name, item in _inert.attributes(value).items():
            yield _attr_step(name) or step_for_key(name), item
        for i, item in enumerate(value._items):
            yield f"[{i}]", item
        for key, item in value._pairs:
            yield step_for_key(key), item


def type_name(value: object) -> str:
    """What a decoded value is: a builtin type's name, an object's class (dotted)."""
    value = _inert.cell_contents(value)
    if isinstance(value, InertType):
        return "class or function"
    if isinstance(value, Inert):
        return "function" if _inert.is_code_object(value) else value.kind
    return type(value).__name__


# ------------------------------------------------------------------------ resolving
def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return (shown + more) or "nothing"


def _task(view: SnapshotView, step: _Step, where: str) -> TaskView:
    key = step.value
    if isinstance(key, int) and not isinstance(key, bool):
        if 0 <= key < len(view.tasks):
            return view.tasks[key]
    else:
        for task in view.tasks:
            if task.task == str(key):
                return task
    names = [f"task[{i}] ({t.task})" for i, t in enumerate(view.tasks)]
    raise PathError(f"{where}: no task{step.text}; the snapshot's tasks: {_listing(names)}")


def _frame(task: TaskView, step: _Step, where: str) -> tuple[int, FrameView]:
    key = step.value
    if isinstance(key, int) and not isinstance(key, bool):
        if -len(task.frames) <= key < len(task.frames):
            index = key % len(task.frames)
            return index, task.frames[index]
    else:
        for index, frame in enumerate(task.frames):
            if frame.function == key or str(frame.function).rsplit(".", 1)[-1] == key:
                return index, frame
    names = [f"frame[{i}] ({f.function})" for i, f in enumerate(task.frames)]
    raise PathError(
        f"{where}: task {task.task} has no frame{step.text}; its frames, innermost first: "
        f"{_listing(names)}"
    )


def _module(view: SnapshotView, steps: list[_Step], where: str) -> tuple[str, int]:
    """The saved module the name steps after `globals` spell (the longest match) and
    how many steps it took."""
    modules = view.globals or {}
    words: list[str] = []
    for step in steps:
        if step.kind != "name":
            break
        words.append(step.value)
    for k in range(len(words), 0, -1):
        name = ".".join(words[:k])
        if name in modules:
            return name, k
    if steps and steps[0].kind == "item" and str(steps[0].value) in modules:
        return str(steps[0].value), 1
    raise PathError(
        f"{where}: no module {'.'.join(words) or steps[0].text if steps else '?'} among "
        f"the saved globals; modules: {_listing(sorted(modules))}"
    )


def _child(value: object, step: _Step, where: str) -> object:
    """The child `step` names, or PathError naming `where` and the children there."""
    value = _inert.cell_contents(value)
    if step.kind == "name":
        if isinstance(value, Inert):
            attrs = _inert.attributes(value)
            if step.value in attrs:
                return attrs[step.value]
        if isinstance(value, dict) and step.value in value:
            return value[step.value]
    else:
        key = step.value
        index = isinstance(key, int) and not isinstance(key, bool)  # [True] is no [1]
        if isinstance(value, (list, tuple)) and index:
            if -len(value) <= key < len(value):
                return value[key]
        if isinstance(value, dict):
            try:
                if key in value:
                    return value[key]
            except TypeError:  # an unhashable key
                pass
        if isinstance(value, Inert):
            if index and -len(value._items) <= key < len(value._items):
                return value._items[key]
            for k, v in value._pairs:
                if type(k) is type(key) and k == key:
                    return v
            attrs = _inert.attributes(value)
            if isinstance(key, str) and key in attrs:
                return attrs[key]
    steps = [s for s, _ in islice(child_steps(value), _LISTED + 1)]
    there = _listing(steps) if steps else f"nothing to step into (a {type_name(value)})"
    if isinstance(value, (list, tuple)):
        there = f"{len(value)} items, [0] to [{len(value) - 1}]" if value else "no items"
    raise PathError(f"{where} has no {step.text}; there: {there}")


def resolve_path(view: SnapshotView, path: str) -> tuple[str, object]:
    """(the path as diff names it, the value) of `path` in a decoded snapshot, or
    PathError naming the first part that did not resolve and what exists there."""
    steps = _parse(path)
    if view.globals is None:
        raise PathError(
            f"the snapshot's values could not be decoded ({view.error}); only its frames "
            "show (`snaprun inspect` without --path)"
        )
    task = view.tasks[0]
    done = ""
    i = 0
    if steps[0].kind == "name" and steps[0].value == "task":
        if len(steps) < 2 or steps[1].kind != "item":
            raise PathError(f"{path!r}: name the task: task[0] or task[ID]")
        task = _task(view, steps[1], "the snapshot")
        done = f"task[{task.task}]"
        i = 2
    head = steps[i] if i < len(steps) else None
    if head is None:
        raise PathError(f"{path!r}: name a frame after the task: {done}.frame[0]")
    head_name = head.value if head.kind == "name" else None
    if head_name == "frame":
        if i + 1 >= len(steps) or steps[i + 1].kind != "item":
            raise PathError(f"{path!r}: name the frame: frame[0] is the innermost")
        index, frame = _frame(task, steps[i + 1], done or "the snapshot")
        done = (done + "." if done else "") + f"frame[{index}]"
        i += 2
        value: object = _FrameValue(frame)
        if i < len(steps):
            if steps[i].kind != "name" or steps[i].value != "locals":
                raise PathError(f"{done} has no {steps[i].text}; there: .locals")
            done += ".locals"
            i += 1
            value = _Names("locals", frame.locals or {})
            if i < len(steps):
                step = steps[i]
                names = value.names
                if step.kind != "name" or step.value not in names:
                    raise PathError(
                        f"{done} has no {step.text}; its names: {_listing(sorted(names))}"
                    )
                value = names[step.value]
                done += f".{step.value}"
                i += 1
    elif head_name == "globals" and not done:
        i += 1
        if i == len(steps):
            return "globals", _Names("modules", view.globals)
        module, used = _module(view, steps[i:], "globals")
        done = f"globals.{module}"
        i += used
        module_globals = view.globals[module]
        value = _Names("module", module_globals)
        if i < len(steps):
            step = steps[i]
            if step.kind != "name" or step.value not in module_globals:
                listed = _listing(sorted(module_globals))
                raise PathError(f"{done} has no {step.text}; its names: {listed}")
            value = module_globals[step.value]
            done += f".{step.value}"
            i += 1
    else:
        raise PathError(
            f"{path!r}: a path starts with frame[N], task[ID] or globals (not {head.text!r})"
        )
    for step in steps[i:]:
        if isinstance(value, _FrameValue):
            raise PathError(f"{done} has no {step.text}; there: .locals")
        value = _child(value, step, done)
        done += _canonical(step)
    return done, value


def _canonical(step: _Step) -> str:
    """A step as diff and the children listing spell it: `['key']` for any quoting."""
    if step.kind == "name":
        return f".{step.value}"
    if isinstance(step.value, (str, bytes, int, float, bool, type(None))):
        return step_for_key(step.value)
    return step.text


@dataclass
class _FrameValue:
    """A frame named by a path without .locals: shown as its place and its locals."""

    frame: FrameView


@dataclass
class _Names:
    """A frame's locals, a module's globals or the modules: names, each a `.name`."""

    kind: str
    names: dict[str, Any]


# ------------------------------------------------------------------------ showing
def _page(value: object) -> str:
    value = _inert.cell_contents(value)
    if isinstance(value, (str, bytes, bytearray)):
        text = repr(value[:_PAGE])
        return text + (f" ... ({len(value)} in all)" if len(value) > _PAGE else "")
    return _inert.render(value, 3, limit=_PAGE)


def show_value(path: str, value: object) -> dict[str, Any]:
    """What `inspect --path` prints (and --json is): the value's path, type, length, a
    page of its rendering, and its first MAX_CHILDREN children (each with the path
    that drills into it)."""
    names: dict[str, Any] | None = None
    if isinstance(value, _FrameValue):
        frame = value.frame
        names = frame.locals or {}
        kind, rendering = "frame", f"{frame.function}()  {frame.file}:{frame.line}"
        prefix = path + ".locals"
    elif isinstance(value, _Names):
        names = value.names
        kind, rendering, prefix = value.kind, _listing(list(names)), path
    else:
        kind, rendering, prefix = type_name(value), _page(value), path
    if names is not None:
        value = names
    inner = _inert.cell_contents(value)
    length = len(inner) if isinstance(inner, (str, bytes, bytearray, list, tuple, dict)) else None
    if isinstance(inner, (set, frozenset)):
        length = len(inner)
    children: list[dict[str, Any]] = []
    more = 0
    for step, child in child_steps(value) if names is None else _locals_steps(names):
        if len(children) == MAX_CHILDREN:
            more += 1
            continue
        children.append(
            {"path": prefix + step, "type": type_name(child), "value": _inert.render(child)}
        )
    return {
        "path": path,
        "type": kind,
        "length": length,
        "value": rendering,
        "children": children,
        "more_children": more,
    }


def _locals_steps(values: object) -> Iterator[tuple[str, object]]:
    if isinstance(values, dict):
        for name, value in values.items():
            yield f".{name}", value
