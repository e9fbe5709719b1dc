"""`snaprun diff JOB@A JOB@B`: what changed between two snapshots (docs/diff.md).

diff_report() decodes both snapshots with the inert decoder (serializers/_inert.py:
nothing of the agent's is imported or run, nothing is written), streamed (the bodies
are never held whole; runtime/_inspect.py's load_state), and compares them:

- per task, the frames: matched from the outermost in (same function and file), each
  kept frame with its line then and now, the rest removed (only in A) or added (only
  in B);
- per local variable of each kept frame, module global and, recursing into them,
  object attribute, dict value and list item: added, removed or changed, each named by
  the path `snaprun inspect --path` reads (runtime/_inspect_path.py), in B's frame
  numbering (A's for what was removed). Old and new values are abbreviated renderings;
  a long string, or a list whose length changed other than at its end, is shown as a
  bounded unified diff. The walk is bounded (MAX_DEPTH levels under a variable,
  MAX_CHANGES changes listed, the rest counted);
- the effect ledger rows and the timeline events (waits, approvals, resumes...)
  recorded between the two snapshots' times, from the ledger of the job that holds
  both histories (the same job, or the fork).

The report is plain JSON (what `--json` prints, and the dashboard shows): the two
states are held while they are compared (memory bounded by the two snapshots'
decoded sizes), the report only the bounded renderings of what differs.
"""

from __future__ import annotations

import difflib
import itertools
import operator
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from ..serializers import _inert
from ..serializers._home import Home
from ..serializers._ids import parse_ref
from ..serializers._inert import Inert, InertType
from ..serializers._store import SnapshotRow
from . import _effect_views
from ._inspect import FrameView, SnapshotView, TaskView, load_state, snapshot_view, source_line
from ._inspect_path import child_steps, step_for_key

__all__ = [
    "diff_report",
    "diff_views",
    "snapshot_ref",
    "MAX_CHANGES",
    "MAX_DEPTH",
    "MAX_DIFF_LINES",
]

MAX_DEPTH = 12  # levels under a variable the walk descends; deeper differences: changed
MAX_CHANGES = 200  # changes listed; more are counted in "more_changes"
MAX_DIFF_LINES = 40  # lines of one unified diff
_LONG_STRING = 160  # a longer (or multi-line) string's change is shown as a diff
_WINDOW = 4000  # characters (or items) of each side around the first difference diffed
_TAIL = 20  # items added or removed at a list's end listed one by one, at most
_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None))


def snapshot_ref(home: Home, ref: str) -> SnapshotRow:
    """The catalog row of JOB (its latest snapshot) or JOB@SEQ: InvalidJobId,
    JobNotFound or SnapshotNotFound naming what is missing."""
    return home.snapshot_row(*parse_ref(ref))


def diff_report(home: Home, ref_a: str, ref_b: str) -> dict[str, Any]:
    """What changed from snapshot `ref_a` to `ref_b` (JOB or JOB@SEQ each; the jobs
    may differ, e.g. a job and its fork): the JSON `snaprun diff --json` prints.
    Verifies both snapshots (a refused one raises as `inspect` does); runs nothing."""
    row_a, row_b = snapshot_ref(home, ref_a), snapshot_ref(home, ref_b)
    view_a = snapshot_view(*load_state(home, row_a))
    view_b = snapshot_view(*load_state(home, row_b))
    report = diff_views(view_a, view_b)
    report["a"], report["b"] = _side(row_a), _side(row_b)
    relation, ledger_job = _relation(home, row_a, row_b)
    report["relation"] = relation
    report.update(_between(home, ledger_job, row_a, row_b))
    return {
        key: report[key]
        for key in (
            "a",
            "b",
            "relation",
            "tasks",
            "changes",
            "more_changes",
            "undecoded",
            "effects",
            "events",
        )
    }


def _side(row: SnapshotRow) -> dict[str, Any]:
    return {
        "job": row.job_id,
        "seq": row.seq,
        "label": row.label,
        "created": row.created,
        "ref": f"{row.job_id}@{row.seq}",
    }


# ------------------------------------------------------------------------ comparing
def diff_views(a: SnapshotView, b: SnapshotView) -> dict[str, Any]:
    """The frames, tasks and value changes from decoded snapshot `a` to `b` (see the
    module's docstring): {"tasks", "changes", "more_changes", "undecoded"}."""
    walk = _Walk()
    tasks = []
    by_id_a = {t.task: t for t in a.tasks}
    by_id_b = {t.task: t for t in b.tasks}
    for task_id in list(by_id_a) + [t for t in by_id_b if t not in by_id_a]:
        ta, tb = by_id_a.get(task_id), by_id_b.get(task_id)
        prefix = "" if task_id == "main" else f"task[{task_id}]."
        entry: dict[str, Any] = {
            "task": task_id,
            "change": "kept" if ta and tb else "removed" if ta else "added",
            "status": [ta.status if ta else None, tb.status if tb else None],
            "frames": _frames(ta, tb),
        }
        tasks.append(entry)
        if ta is None or tb is None:
            continue
        for frame in entry["frames"]:
            if frame["change"] != "kept":
                continue
            fa, fb = ta.frames[frame["index"][0]], tb.frames[frame["index"][1]]
            if fa.locals is not None and fb.locals is not None:
                walk.mapping(
                    fa.locals, fb.locals, f"{prefix}frame[{frame['index'][1]}].locals", _attr_name
                )
    if a.globals is not None and b.globals is not None:
        for module in list(a.globals) + [m for m in b.globals if m not in a.globals]:
            ga, gb = a.globals.get(module), b.globals.get(module)
            path = f"globals.{module}"
            if ga is None:
                walk.emit(path, "added", None, f"module ({len(gb or {})} names)")
            elif gb is None:
                walk.emit(path, "removed", f"module ({len(ga)} names)", None)
            else:
                walk.mapping(_data(ga), _data(gb), path, _attr_name)
    undecoded = {k: v.error for k, v in (("a", a), ("b", b)) if v.error is not None}
    return {
        "tasks": tasks,
        "changes": walk.changes,
        "more_changes": walk.more,
        "undecoded": undecoded or None,
    }


def _frames(ta: TaskView | None, tb: TaskView | None) -> list[dict[str, Any]]:
    """The task's frames, outermost first: kept (same function and file, from the
    outermost in, with the line in A and in B), then removed and added."""
    fa = list(reversed(ta.frames)) if ta else []  # outermost first
    fb = list(reversed(tb.frames)) if tb else []
    kept = 0
    while kept < min(len(fa), len(fb)) and (fa[kept].function, fa[kept].file) == (
        fb[kept].function,
        fb[kept].file,
    ):
        kept += 1
    out = []
    for i in range(kept):
        out.append(_frame("kept", fa[i], fb[i], len(fa) - 1 - i, len(fb) - 1 - i))
    for i in range(kept, len(fa)):
        out.append(_frame("removed", fa[i], None, len(fa) - 1 - i, None))
    for i in range(kept, len(fb)):
        out.append(_frame("added", None, fb[i], None, len(fb) - 1 - i))
    return out


def _frame(
    change: str, fa: FrameView | None, fb: FrameView | None, ia: int | None, ib: int | None
) -> dict[str, Any]:
    some = fb if fb is not None else fa
    assert some is not None
    return {
        "change": change,
        "function": some.function,
        "file": some.file,
        "line": [fa.line if fa else None, fb.line if fb else None],
        "source": [source_line(fa) if fa else None, source_line(fb) if fb else None],
        "index": [ia, ib],  # frame[N] in A and in B (0: the innermost)
        "locals": sorted(some.locals) if some.locals is not None else None,
    }


def _cell(value: object) -> object:
    return _inert.cell_contents(value)


_EXIT = object()  # same()'s marker: a container's children are all compared
_PROVEN = 1 << 16  # pairs of containers same() remembers as equal (shared substructure)


def same(a: object, b: object) -> bool:
    """Whether two decoded values (of two different decodes) are structurally equal:
    the same builtin values, stand-ins built by the same call with equal arguments and
    state. Iterative (deep structures do not recurse), cycle-safe (a pair met again on
    its own path counts as equal), and in memory bounded by the structures' depth."""
    stack: list[tuple[Any, Any]] = [(a, b)]
    on_path: set[tuple[int, int]] = set()
    proven: set[tuple[int, int]] = set()
    while stack:
        x, y = stack.pop()
        if x is _EXIT:
            on_path.discard(y)
            if len(proven) < _PROVEN:
                proven.add(y)
            continue
        x, y = _cell(x), _cell(y)
        if x is y:
            continue
        if isinstance(x, InertType) or isinstance(y, InertType):
            if not (
                isinstance(x, InertType)
                and isinstance(y, InertType)
                and (x._module, x._qualname) == (y._module, y._qualname)
            ):
                return False
            continue
        inert = isinstance(x, Inert)
        if inert or isinstance(y, Inert):
            if not (isinstance(x, Inert) and isinstance(y, Inert)) or x.kind != y.kind:
                return False
        elif type(x) is not type(y):
            return False
        elif isinstance(x, _SCALARS):
            if _scalar_key(x) != _scalar_key(y):  # NaN equals NaN here; 0.0 is not -0.0
                return False
            continue
        key = (id(x), id(y))
        if key in on_path or key in proven:
            continue
        if inert:
            assert isinstance(x, Inert) and isinstance(y, Inert)
            if (x._called, x._setter, len(x._args), len(x._items), len(x._pairs)) != (
                y._called,
                y._setter,
                len(y._args),
                len(y._items),
                len(y._pairs),
            ):
                return False
            on_path.add(key)
            stack.append((_EXIT, key))
            stack += (
                (x._args, y._args),
                (x._kwargs, y._kwargs),
                (x._state, y._state),
                (x._callee, y._callee),
            )
            stack.extend(zip(x._items, y._items))
            stack.extend(zip(x._pairs, y._pairs))
        elif isinstance(x, (list, tuple)):
            assert isinstance(y, (list, tuple))
            if len(x) != len(y):
                return False
            on_path.add(key)
            stack.append((_EXIT, key))
            for lo in range(0, len(x), _CHUNK):
                cx, cy = x[lo : lo + _CHUNK], y[lo : lo + _CHUNK]
                if not _flat_same(cx, cy):
                    stack.extend(zip(cx, cy))
        elif isinstance(x, dict):
            assert isinstance(y, dict)
            if len(x) != len(y):
                return False
            on_path.add(key)
            stack.append((_EXIT, key))
            keys_x, keys_y = list(x), list(y)  # in order: keys may be stand-ins
            if not _flat_same(keys_x, keys_y):
                stack.extend(zip(keys_x, keys_y))
            values_x, values_y = list(x.values()), list(y.values())
            if not _flat_same(values_x, values_y):
                stack.extend(zip(values_x, values_y))
        elif isinstance(x, (set, frozenset)):
            assert isinstance(y, (set, frozenset))
            if len(x) != len(y):
                return False
            if all(type(v) in _SCALARS for v in x) and all(type(v) in _SCALARS for v in y):
                if set(map(_scalar_key, x)) != set(map(_scalar_key, y)):
                    return False
            elif sorted(map(_inert.render, x)) != sorted(map(_inert.render, y)):
                return False  # members that are stand-ins: by their renderings
        else:
            try:
                if not bool(x == y):
                    return False
            except Exception:
                return False
    return True


_CHUNK = 4096  # items of a list compared at once by _flat_same
_LEVELS = 8  # levels under them _flat_same flattens
_WIDEST = 1 << 18  # items of one level it holds at most (a wider one: one by one)
_FLAT = frozenset({str, bytes, bytearray, int, bool, type(None)})  # == within one type is exact


def _flat_same(x: list[Any] | tuple[Any, ...], y: list[Any] | tuple[Any, ...]) -> bool:
    """Whether two sequences hold the same values of the same types, proven at C speed
    level by level (the items, then the items of the lists, tuples and dicts among them,
    ... up to _LEVELS): `==` alone is not proof, as 1 == 1.0 == True and 0.0 == -0.0.
    False proves nothing (a stand-in, a set, a cycle, a level too wide): the caller
    compares the items one by one. Sharing is not compared (values are)."""
    for _ in range(_LEVELS):
        types = list(map(type, x))
        if types != list(map(type, y)):
            return False
        kinds = set(types)
        if kinds <= _FLAT:
            return x == y
        next_x: list[Any] = []
        next_y: list[Any] = []
        for kind in kinds:
            if len(kinds) == 1:
                part_x, part_y = x, y
            else:
                chosen = list(map(operator.is_, types, itertools.repeat(kind)))
                part_x = list(itertools.compress(x, chosen))
                part_y = list(itertools.compress(y, chosen))
            if kind in _FLAT:
                if part_x != part_y:
                    return False
            elif kind is float:  # bit for bit (NaNs of other payloads: one by one)
                if array("d", part_x).tobytes() != array("d", part_y).tobytes():
                    return False
            elif kind in (list, tuple, dict):
                if list(map(len, part_x)) != list(map(len, part_y)):
                    return False
                next_x.extend(itertools.chain.from_iterable(part_x))  # a dict's keys, in order
                next_y.extend(itertools.chain.from_iterable(part_y))
                if kind is dict:
                    next_x.extend(itertools.chain.from_iterable(map(dict.values, part_x)))
                    next_y.extend(itertools.chain.from_iterable(map(dict.values, part_y)))
            else:
                return False  # stand-ins, sets, complex numbers: one by one
            if len(next_x) > _WIDEST:
                return False
        if not next_x:
            return True
        x, y = next_x, next_y
    return False


def _scalar_key(value: object) -> object:
    """A scalar as same() compares it: with its type (1, 1.0 and True differ), a float
    by its bits' meaning (0.0 and -0.0 differ, every NaN is the same)."""
    if isinstance(value, float):
        return float, value.hex()
    if isinstance(value, complex):
        return complex, value.real.hex(), value.imag.hex()
    return type(value), value


class _Walk:
    """The changes found so far, bounded."""

    def __init__(self) -> None:
        self.changes: list[dict[str, Any]] = []
        self.more = 0

    def emit(
        self,
        path: str,
        change: str,
        old: str | None,
        new: str | None,
        diff: list[str] | None = None,
    ) -> None:
        if len(self.changes) >= MAX_CHANGES:
            self.more += 1
            return
        entry: dict[str, Any] = {"path": path, "change": change, "old": old, "new": new}
        if diff is not None:
            entry["diff"] = diff
        self.changes.append(entry)

    def changed(self, path: str, a: object, b: object) -> None:
        if len(self.changes) >= MAX_CHANGES:
            self.more += 1
            return
        diff = None
        if isinstance(a, str) and isinstance(b, str):
            if len(a) > _LONG_STRING or len(b) > _LONG_STRING or "\n" in a or "\n" in b:
                diff = _text_diff(a, b)
        self.emit(path, "changed", _inert.render(a), _inert.render(b), diff)

    def value(self, a: object, b: object, path: str, depth: int = 0) -> None:
        a, b = _cell(a), _cell(b)
        if same(a, b):
            return
        if len(self.changes) >= MAX_CHANGES:
            self.more += 1
            return
        found = len(self.changes) + self.more
        if depth >= MAX_DEPTH:
            self.changed(path, a, b)
        elif isinstance(a, (list, tuple)) and type(a) is type(b):
            assert isinstance(b, (list, tuple))
            self.sequence(a, b, path, depth)
        elif isinstance(a, dict) and isinstance(b, dict):
            self.mapping(a, b, path, step_for_key, depth)
        elif (
            isinstance(a, Inert)
            and isinstance(b, Inert)
            and a.kind == b.kind
            and not _inert.is_code_object(a)
            and _same_making(a, b)
        ):
            self.mapping(_steps(a), _steps(b), path, str, depth)
        else:
            self.changed(path, a, b)
        if len(self.changes) + self.more == found:
            # different, but in nothing a path names (an exception's cause, a state
            # that is no attribute): the value itself changed
            self.changed(path, a, b)

    def mapping(
        self,
        a: dict[Any, Any],
        b: dict[Any, Any],
        path: str,
        step: Callable[[Any], str],
        depth: int = 0,
    ) -> None:
        """Compare two mappings key by key, `step(key)` naming each child after `path`
        (`.name` for locals and globals, `[key]` for a dict's, the step itself for an
        object's children)."""

        def name(key: object) -> str:
            return path + step(key)

        if not all(type(k) in _SCALARS for k in itertools.chain(a, b)):
            # keys that are stand-ins (of two decodes): by position
            pairs_a, pairs_b = list(a.items()), list(b.items())
            if len(pairs_a) != len(pairs_b) or not all(
                same(ka, kb) for (ka, _), (kb, _) in zip(pairs_a, pairs_b)
            ):
                self.changed(path, a, b)
                return
            for (ka, va), (_, vb) in zip(pairs_a, pairs_b):
                self.value(va, vb, name(ka), depth + 1)
            return
        for key, va in a.items():
            if key not in b:
                self.emit(name(key), "removed", _inert.render(va), None)
            else:
                self.value(va, b[key], name(key), depth + 1)
        for key, vb in b.items():
            if key not in a:
                self.emit(name(key), "added", None, _inert.render(vb))

    def sequence(
        self, a: list[Any] | tuple[Any, ...], b: list[Any] | tuple[Any, ...], path: str, depth: int
    ) -> None:
        """Item by item when the length is the same, or items were added or removed
        at the end only (up to _TAIL of them); otherwise one change with a unified
        diff of the items around the difference."""
        common = min(len(a), len(b))
        if _aligned(a, b):
            for i in range(common):
                self.value(a[i], b[i], f"{path}[{i}]", depth + 1)
            for i in range(common, len(a)):
                self.emit(f"{path}[{i}]", "removed", _inert.render(a[i]), None)
            for i in range(common, len(b)):
                self.emit(f"{path}[{i}]", "added", None, _inert.render(b[i]))
            return
        start = 0
        while start < common and same(a[start], b[start]):
            start += 1
        end = 0
        while end < common - start and same(a[len(a) - 1 - end], b[len(b) - 1 - end]):
            end += 1
        lo = max(start - 2, 0)
        items_a = [_inert.render(v) for v in a[lo : min(len(a) - end + 2, lo + _WINDOW // 40)]]
        items_b = [_inert.render(v) for v in b[lo : min(len(b) - end + 2, lo + _WINDOW // 40)]]
        diff = _bounded(
            difflib.unified_diff(items_a, items_b, lineterm="", n=2),
            f"(items from [{lo}]; {len(a)} items -> {len(b)})",
        )
        self.emit(
            path,
            "changed",
            f"{type(a).__name__} of {len(a)} items",
            f"{type(b).__name__} of {len(b)} items",
            diff,
        )


def _aligned(a: list[Any] | tuple[Any, ...], b: list[Any] | tuple[Any, ...]) -> bool:
    """Whether two sequences are best compared item by item: the same length, or up to
    _TAIL items added or removed at the end (more of the items match in place than
    shifted by the difference, as after an insertion at the front)."""
    shift = len(b) - len(a)
    if shift == 0:
        return True
    if abs(shift) > _TAIL or min(len(a), len(b)) > 1000:
        return False
    in_place = sum(same(x, y) for x, y in zip(a, b))
    shifted = sum(same(x, y) for x, y in zip(a[max(-shift, 0) :], b[max(shift, 0) :]))
    return shifted == 0 or in_place > shifted


def _same_making(a: Inert, b: Inert) -> bool:
    """Whether two stand-ins were made by the same call (arguments, callee): their
    attributes and items may then be compared one by one."""
    return (
        same(a._args, b._args)
        and same(a._kwargs, b._kwargs)
        and same(a._callee, b._callee)
        and a._setter == b._setter
        and (bool(_inert.attributes(a)) or same(a._state, b._state))
    )


def _attr_name(name: object) -> str:
    return f".{name}"


def _data(values: dict[str, Any]) -> dict[str, Any]:
    """A module's globals but its functions and classes (as inspect lists them)."""
    return {k: v for k, v in values.items() if not _inert.is_code_object(v)}


def _steps(value: Inert) -> dict[str, object]:
    """An object's children by the step naming each (`.attr`, `[i]`, `[key]`)."""
    return dict(child_steps(value))


def _text_diff(a: str, b: str) -> list[str]:
    """A bounded unified diff of two strings: the whole lines from the first to the
    last difference only (at most _WINDOW characters of each side)."""
    start = _common_prefix(a, b)
    suffix = min(_common_suffix(a, b), len(a) - start, len(b) - start)
    lo = max(a.rfind("\n", 0, start) + 1, start - _WINDOW // 4)

    def window(text: str) -> str:
        last = text.find("\n", len(text) - suffix)
        hi = len(text) if last < 0 else last + 1
        return text[lo : min(hi, lo + _WINDOW)]

    note = f"(from line {a.count(chr(10), 0, lo) + 1}; {len(a)} characters -> {len(b)})"
    diff = difflib.unified_diff(window(a).splitlines(), window(b).splitlines(), lineterm="", n=1)
    return _bounded(diff, note)


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters two strings share (in 64 KiB steps, then exactly)."""
    i, step = 0, 1 << 16
    limit = min(len(a), len(b))
    while i + step <= limit and a[i : i + step] == b[i : i + step]:
        i += step
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: str, b: str) -> int:
    """How many trailing characters two strings share."""
    i, step = 0, 1 << 16
    limit = min(len(a), len(b))
    while (
        i + step <= limit and a[len(a) - i - step : len(a) - i] == b[len(b) - i - step : len(b) - i]
    ):
        i += step
    while i < limit and a[len(a) - 1 - i] == b[len(b) - 1 - i]:
        i += 1
    return i


def _bounded(lines: Iterator[str], note: str) -> list[str]:
    out = [note]
    for line in lines:
        if line.startswith(("---", "+++")):
            continue
        if len(out) > MAX_DIFF_LINES:
            out.append("...")
            break
        out.append(line if len(line) <= 200 else line[:199] + "…")
    return out


# ------------------------------------------------------------------------ between
def _ancestors(home: Home, job_id: str) -> list[tuple[str, int | None]]:
    """(job, fork seq) up the fork chain: the job itself first (fork seq None)."""
    chain: list[tuple[str, int | None]] = [(job_id, None)]
    seen = {job_id}
    job = home.catalog.get_job(job_id)
    while job.parent is not None and job.parent not in seen and len(chain) < 100:
        chain.append((job.parent, job.fork_seq))
        seen.add(job.parent)
        try:
            job = home.catalog.get_job(job.parent)
        except Exception:  # a parent since pruned: the chain ends there
            break
    return chain


def _relation(home: Home, a: SnapshotRow, b: SnapshotRow) -> tuple[dict[str, Any], str | None]:
    """How the two snapshots are related, in words, and whose ledger holds what
    happened between them (None: unrelated jobs)."""
    if a.job_id == b.job_id:
        return {
            "kind": "same job",
            "text": f"two snapshots of job {a.job_id}",
        }, a.job_id
    up_b = dict(_ancestors(home, b.job_id))
    up_a = dict(_ancestors(home, a.job_id))
    if a.job_id in up_b:
        return {
            "kind": "fork",
            "text": (
                f"job {b.job_id} descends from job {a.job_id} (forked at its snapshot "
                f"{_fork_point(home, b.job_id, a.job_id)}); effects and events are "
                f"{b.job_id}'s, whose ledger holds {a.job_id}'s up to the fork"
            ),
        }, b.job_id
    if b.job_id in up_a:
        return {
            "kind": "fork",
            "text": (
                f"job {a.job_id} descends from job {b.job_id} (forked at its snapshot "
                f"{_fork_point(home, a.job_id, b.job_id)}); A is on the fork, B on its "
                f"origin: effects and events are {a.job_id}'s"
            ),
        }, a.job_id
    common = next((j for j in up_a if j in up_b), None)
    text = (
        f"jobs {a.job_id} and {b.job_id} share no history"
        if common is None
        else f"jobs {a.job_id} and {b.job_id} are forks of job {common}, each its own history"
    )
    return {"kind": "unrelated", "text": text + ": no effects or events are compared"}, None


def _fork_point(home: Home, child: str, ancestor: str) -> object:
    job = home.catalog.get_job(child)
    while job.parent is not None and job.parent != ancestor:
        job = home.catalog.get_job(job.parent)
    return job.fork_seq


def _between(home: Home, job_id: str | None, a: SnapshotRow, b: SnapshotRow) -> dict[str, Any]:
    """The ledger rows and timeline events of `job_id` recorded after the earlier
    snapshot was taken and before the later one (the two snapshots' own events left
    out)."""
    if job_id is None:
        return {"effects": [], "events": []}
    t_a, t_b = a.created, b.created
    own = {("snapshot", str(row.seq)) for row in (a, b) if row.job_id == job_id}
    lo, hi = min(t_a, t_b), max(t_a, t_b)
    effects = []
    for row in home.catalog.effects(job_id):
        if lo < row.created <= hi:
            view = _effect_views.effect_view(row, home)
            effects.append(
                {
                    "effect": view.ordinal,
                    "name": view.name,
                    "state": view.state,
                    "kind": view.kind,
                    "internal": view.kind == "value",
                    "args": view.args,
                    "call_site": view.call_site,
                    "created": row.created,
                    "status": view.status,
                }
            )
    events = [
        {"at": e.at, "kind": e.kind, "detail": e.detail}
        for e in home.catalog.events(job_id)
        if lo < e.at <= hi and (e.kind, e.detail.split(" ", 1)[0]) not in own
    ]
    return {"effects": effects, "events": events}
