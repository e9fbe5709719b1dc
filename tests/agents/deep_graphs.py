"""Object graphs far deeper than the pickler's recursion limit: 10,000-node linked
lists (instances with a __dict__, with __slots__, dataclasses) mutated between
snapshots, with shared nodes and a cycle; 1,000-deep nested lists, dicts, tuples and
a mix of them, changed between snapshots."""

from dataclasses import dataclass

from snapstate import snapshot

N, DEPTH = 10_000, 1_000


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
    next: "Link | None" = None


def build(cls):
    head = None
    for i in reversed(range(N)):
        head = cls(i, head)
    return head


def walk(head):
    total, count, node, seen = 0, 0, head, set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        total, count, node = total + node.value * (count % 7 + 1), count + 1, node.next
    return count, total


def nested(kind):
    value = "leaf"
    for i in range(DEPTH):
        k = kind if kind != "mixed" else ("list", "dict", "tuple")[i % 3]
        value = [value, i] if k == "list" else {"in": value, "i": i} if k == "dict" else (value, i)
    return value


def depth_of(value):
    depth, weight = 0, 0
    while not isinstance(value, str):
        if isinstance(value, dict):
            weight += value["i"] * (depth % 5)
            value = value["in"]
        else:
            weight += value[1] * (depth % 5)
            value = value[0]
        depth += 1
    return depth, weight


def main():
    lists = {"dict": build(Node), "slots": build(Slotted), "dataclass": build(Link)}
    middle = lists["dict"]
    for _ in range(N // 2):
        middle = middle.next
    trees = {kind: nested(kind) for kind in ("list", "dict", "tuple", "mixed")}
    trees["list"][0][0][0][1] = -5
    snapshot("built")
    print("walk", {k: walk(v) for k, v in lists.items()}, flush=True)
    print("depth", {k: depth_of(v) for k, v in trees.items()}, flush=True)
    # mutate: the shared middle node (reached through the list and a local), the tail
    middle.value = -1
    for head in lists.values():
        node = head
        while node.next is not None:
            node = node.next
        node.next = type(head)(N)
    trees["dict"] = {"in": trees["dict"], "i": 7}
    node = lists["slots"]  # a cycle back to the head
    while node.next is not None:
        node = node.next
    node.next = lists["slots"]
    snapshot("mutated")
    lists["dict"].value += 100
    print("middle", middle.value, walk(middle), flush=True)
    print("walk", {k: walk(v) for k, v in lists.items()}, flush=True)
    print("depth", {k: depth_of(v) for k, v in trees.items()}, flush=True)
    print("cycle", node.next is lists["slots"], flush=True)
    return walk(lists["dict"])[1]
