"""Deep object graphs, never-awaited coroutines and instance __call__ (issue 9, 0b).

Linked lists of 10,000 nodes and 1,000-deep nested containers pickle and unpickle in
one pass with identity kept (the ordinary dump hits the C recursion limit after a few
hundred links; the deep dump defers plain objects' state); objects that look at what
they hold while they are rebuilt still see it complete; a graph too deep even for the
deep dump is refused naming its path, never a crash, and the recursion limits are
left as they were. A coroutine created and not awaited yet is saved; unfinished ones
are refused with the right word. snapshot() inside an instance's __call__ is taken,
while C callers that keep state between the frames are still refused."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest
from helpers import AGENTS, snaprun

sys.path.insert(0, str(AGENTS))

import deep_subjects as subjects  # noqa: E402

from snapstate.serializers import _deep, _inert, _pickler  # noqa: E402

N = 10_000


class Node:
    def __init__(self, value, next=None):
        self.value = value
        self.next = next


class Slotted:
    __slots__ = ("value", "next")

    def __init__(self, value, next=None):
        self.value = value
        self.next = next


@dataclass
class Link:
    value: int
    next: Link | None = None


class Summary:
    """Rebuilt from its head node: its constructor walks the list."""

    def __init__(self, head):
        self.head = head
        self.length = _length(head)

    def __reduce__(self):
        return (Summary, (self.head,))


class Watcher:
    """Its __setstate__ reads the nodes it holds."""

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.seen = _length(self.head)


@dataclass(frozen=True)
class Key:
    """Hashes by a node's value: a dict key that is only correct once the node is."""

    node: Node

    def __hash__(self):
        return hash(self.node.value)

    def __eq__(self, other):
        return isinstance(other, Key) and self.node.value == other.node.value


def _length(head):
    count = 0
    while head is not None:
        count, head = count + 1, head.next
    return count


def chain(cls, n=N):
    head = None
    for i in reversed(range(n)):
        head = cls(i, head)
    return head


def nested(kind, depth, leaf):
    value = leaf
    for i in range(depth):
        k = kind if kind != "mixed" else ("list", "dict", "tuple")[i % 3]
        value = [value, i] if k == "list" else {"in": value, "i": i} if k == "dict" else (value, i)
    return value


def unnest(value, depth):
    for _ in range(depth):
        value = value["in"] if isinstance(value, dict) else value[0]
    return value


def roundtrip(obj):
    return _pickler.loads(_pickler.dumps(obj))


@pytest.mark.parametrize("cls", [Node, Slotted, Link])
def test_ten_thousand_node_linked_list(cls):
    """A 10,000-node list (plain instances, __slots__, dataclass) round-trips with every
    value, and nodes referenced from elsewhere are the same objects afterwards."""
    head = chain(cls)
    middle = head
    for _ in range(N // 2):
        middle = middle.next
    back = roundtrip({"head": head, "middle": middle, "again": head})
    assert back["head"] is back["again"]
    node, values = back["head"], []
    while node is not None:
        if node.value == N // 2:
            assert node is back["middle"]
        values.append(node.value)
        node = node.next
    assert values == list(range(N))
    assert type(back["middle"]) is cls


def test_cycle_and_recursion_limits_unchanged():
    """A 10,000-node ring comes back closed; the dump leaves the recursion limit (and on
    3.12 the C recursion counter) as it found them."""
    head = chain(Node)
    tail = head
    while tail.next is not None:
        tail = tail.next
    tail.next = head
    limit = sys.getrecursionlimit()
    budget = _deep._c_budget()
    before = budget.value if budget is not None else None
    back = roundtrip(head)
    assert sys.getrecursionlimit() == limit
    if sys.version_info[:2] == (3, 12):
        assert budget is not None and budget.value == before
    node = back
    for _ in range(N):
        node = node.next
    assert node is back


@pytest.mark.parametrize("kind", ["list", "dict", "tuple", "mixed"])
def test_thousand_deep_nested_containers(kind):
    """1,000-deep nested lists, dicts, tuples and a mix, holding a 10,000-node list at
    the bottom, round-trip with every level and the shared list kept shared."""
    shared = chain(Node)
    tree = nested(kind, 1000, shared)
    back, again = roundtrip((tree, shared))
    assert unnest(back, 1000) is again
    assert _length(again) == N
    level = back
    for i in reversed(range(1000)):
        assert (level["i"] if isinstance(level, dict) else level[1]) == i
        level = unnest(level, 1)


def test_rebuilt_objects_see_complete_children():
    """In a deep graph, a constructor (__reduce__), a __setstate__ and a dict key's hash
    that read the nodes they hold see them with their state, as in an ordinary dump."""
    head = chain(Node)
    watcher = Watcher.__new__(Watcher)
    watcher.head = head.next
    key = Key(chain(Node, 3))
    table = {key: "found"}
    back = roundtrip({"summary": Summary(head), "watcher": watcher, "table": table, "head": head})
    assert back["summary"].length == N and back["summary"].head is back["head"]
    assert back["watcher"].seen == N - 1 and back["watcher"].head is back["head"].next
    assert back["table"][Key(Node(0))] == "found"


def test_object_built_once_when_a_deferred_state_refers_to_it():
    """An object rebuilt by a constructor call, referred to by a node whose state was
    deferred and holding that node, is built once, as in an ordinary dump."""
    node = Node(0)
    built = subjects.Built([1, 2])
    node.ref = built
    built.items.append(node)
    data = _pickler.dumps([chain(Node), Node(-1), node, built])
    subjects.Built.COUNT = 0
    back = _pickler.loads(data)
    assert subjects.Built.COUNT == 1
    assert back[2].ref is back[3] and back[3].items == [1, 2, back[2]]


def test_inspect_reads_a_deep_dump_like_an_ordinary_one():
    """The inert unpickler (`snaprun inspect`, runs nothing) shows a deep dump's objects
    with their attributes and its root as the value dumped, not the deep dump's helpers."""
    head = chain(Node)
    decoded = _inert.loads(_pickler.dumps({"head": head, "summary": Summary(head)}))
    assert sorted(decoded) == ["head", "summary"]
    first = decoded["head"]
    assert first.kind == "test_deep.Node"
    assert _inert.attributes(first)["value"] == 0
    assert _inert.attributes(_inert.attributes(first)["next"])["value"] == 1
    assert _inert.render(decoded["summary"]).startswith("test_deep.Summary(Node(value=0, next=")


def test_too_deep_is_refused_with_its_path_and_no_crash():
    """Nesting beyond what even the deep dump can hold is refused naming the outermost
    path and the fix; depths around that limit either pickle or are refused, and so is
    100,000-deep nesting after the agent raised the recursion limit to 1,000,000, in a
    child interpreter that must exit normally (a C stack overflow would kill it)."""
    roots = [("frame main() at agent.py:3, local 'tree'", nested("list", 60_000, "leaf"))]
    with pytest.raises(_pickler.UnpicklableError) as err:
        _pickler.dumps(roots, roots=lambda: roots)
    message = str(err.value)
    assert message.startswith("local 'tree' is a list")  # the user's object first
    assert "frame main() at agent.py:3, local 'tree' -> list: nested too deeply to save" in message
    assert "flatten the structure" in message
    limit = _deep.levels()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(AGENTS.parent)!r})
        from test_deep import nested, unnest
        from snapstate.serializers import _pickler
        outcomes = set()
        for kind, near in (("list", {limit}), ("dict", {limit}), ("tuple", {2 * limit})):
            for depth in range(near - 40, near + 41, 8):
                tree = nested(kind, depth, "leaf")
                try:
                    back = _pickler.loads(_pickler.dumps(tree))
                except _pickler.UnpicklableError as exc:
                    assert "nested too deeply" in str(exc), exc
                    outcomes.add("refused")
                else:
                    assert unnest(back, depth) == "leaf"
                    outcomes.add("saved")
        sys.setrecursionlimit(1_000_000)    # an agent's own deep recursion: not the C stack's
        try:
            _pickler.dumps(nested("list", 100_000, "leaf"))
        except _pickler.UnpicklableError as exc:
            assert "nested too deeply" in str(exc), exc
            assert sys.getrecursionlimit() == 1_000_000
        else:
            raise AssertionError("100,000-deep nesting pickled")
        print(sorted(outcomes))
    """)
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "['refused', 'saved']"


def test_never_awaited_coroutine_round_trips():
    """A coroutine created and not awaited yet is saved with its arguments: it comes back
    (once, however often referenced), awaits to the same result, and saves again."""
    coro = subjects.fetch(21, scale=3)
    try:
        back = roundtrip({"a": coro, "b": coro})
    finally:
        coro.close()
    assert back["a"] is back["b"]
    try:
        again = roundtrip(back["a"])
    finally:
        back["a"].close()
    assert asyncio.run(again) == 63


def test_suspended_coroutine_and_unstarted_async_generator_round_trip():
    """A coroutine suspended at an await (here asyncio.sleep(0)'s bare yield) comes back
    paused there and finishes with the same result; an async generator not started yet
    comes back not started."""

    async def suspended():
        coro = subjects.fetch(5)
        coro.send(None)
        copy = roundtrip(coro)
        results = []
        for c in (copy, coro):
            with pytest.raises(StopIteration) as done:
                c.send(None)
            results.append(done.value.value)
        return results

    assert asyncio.run(suspended()) == [10, 10]
    agen = subjects.numbers()
    copy = roundtrip(agen)

    async def drain(gen):
        return [x async for x in gen]

    assert asyncio.run(drain(copy)) == asyncio.run(drain(agen)) == [1]


def test_instance_call_taken_and_other_c_callers_still_refused(tmp_path):
    """snapshot() inside __call__ reached by calling an instance is taken; the same
    __call__ reached through functools.partial or through a callable object stored as
    another class's __call__ is still refused with the C-code message."""
    run = snaprun(
        "run",
        "--store",
        tmp_path / "store",
        "--job",
        "job",
        AGENTS / "call_refusals.py",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    outcomes = {
        case: status for status, case in re.findall(r"^(TAKEN|REFUSED) ([\w-]+)", run.stdout, re.M)
    }
    assert outcomes == {"direct": "TAKEN", "partial": "REFUSED", "nested": "REFUSED"}
    file = AGENTS / "call_refusals.py"
    assert (
        f"snapshot() (or a wait that hibernates) inside Counter.__call__() at {file}:" in run.stdout
        and "called by C code (functools.partial(...)) from main()" in run.stdout
        and "called by C code (call_refusals.Outer(...)) from main()" in run.stdout
    )
    assert run.result == "3"
