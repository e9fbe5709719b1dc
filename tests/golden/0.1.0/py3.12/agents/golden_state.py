"""Golden agent: the frozen state a snapshot file carries. Locals and a loop position, a
class instance and its method's frame, a mutable function default, a closure's cell, a
paused generator and a resource() handle (reopened by its factory after a restore).

scripts/make_golden.py runs it with SNAPSTATE_FAULT=after-snapshot:2 (killed right after
snapshot 2); tests/test_golden.py resumes it from the recorded store. Never edit a copy
under tests/golden/<version>/: the snapshots there identify this code by digest."""

import os

import snapstate
from snapstate import snapshot


class Basket:
    def __init__(self, owner):
        self.owner = owner
        self.items = []

    def add(self, item):
        self.items.append(item)
        return len(self.items)


def remember(item, seen=[]):  # a mutable default: its contents go with the job
    seen.append(item)
    return list(seen)


def make_counter(start):
    count = start

    def tick():
        nonlocal count
        count += 1
        return count

    return tick


def _open_notes():
    here = os.path.dirname(os.path.abspath(__file__))
    return open(os.path.join(here, "notes.txt"), "a")


def main():
    basket = Basket("ada")
    tick = make_counter(10)
    squares = (i * i for i in range(10))
    notes = snapstate.resource(_open_notes, name="notes")
    total = 0
    for i in range(4):
        total += basket.add(f"item-{i}")
        remember(i)
        tick()
        next(squares)
        if i in (1, 2):
            info = snapshot(f"loop-{i}")
            notes.write(f"after snapshot {info.seq} at i={i} resumed={info.resumed}\n")
            notes.flush()
    print("basket", basket.owner, basket.items, flush=True)
    print("total", total, "seen", remember("end"), flush=True)
    print("tick", tick(), "next square", next(squares), flush=True)
    return total
