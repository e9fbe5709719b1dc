"""The agent of bench_inspect.py: a large state, two snapshots of it.

    BENCH_SHAPE  strings: a list of 1 MB strings (BENCH_MB of them)
                 objects: a dict of small objects (about 20,000 per MB of pickle)
                 mixed: half of each
    BENCH_MB     the state's size in MB (of pickle), roughly

Snapshot 1 ("big") holds the state; then one string and one object change and
snapshot 2 ("big-2") is taken, for `snaprun diff JOB@1 JOB@2`. Holds nothing large at
module level (its globals are frozen with each snapshot).
"""

from __future__ import annotations

import os

from snapstate import snapshot


class Item:
    def __init__(self, i: int) -> None:
        self.id = i
        self.name = f"item-{i}"
        self.tags = [i % 7, "t"]


def _strings(mb: int) -> list[str]:
    return [os.urandom(1 << 19).hex() for _ in range(mb)]  # 1 MB each, incompressible-ish


def _objects(mb: int) -> dict[int, Item]:
    return {i: Item(i) for i in range(mb * 20_000)}


def big_main() -> int:
    shape, mb = os.environ.get("BENCH_SHAPE", "mixed"), int(os.environ.get("BENCH_MB", "20"))
    strings = _strings(mb if shape == "strings" else mb // 2 if shape == "mixed" else 0)
    objects = _objects(mb if shape == "objects" else mb // 2 if shape == "mixed" else 0)
    snapshot("big")
    if strings:
        strings[len(strings) // 2] = strings[len(strings) // 2][::-1]
    if objects:
        objects[len(objects) // 2].name = "changed"
    snapshot("big-2")
    return len(strings) + len(objects)


def tiny_main() -> int:
    notes = ["small"]
    snapshot("tiny")
    return len(notes)
