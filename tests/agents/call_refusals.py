"""A Python __call__ with snapshot() inside, reached three ways: by calling the
instance (a pass-through: taken), through functools.partial and through a callable
object stored as another class's __call__ (C code in between: refused)."""

import functools

from snapstate import SnapshotError, snapshot


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self, case):
        self.calls += 1
        try:
            snapshot(case)
        except SnapshotError as exc:
            print(f"REFUSED {case}: {exc}", flush=True)
            return self.calls
        print(f"TAKEN {case}", flush=True)
        return self.calls


class Outer:
    __call__ = Counter()


def main():
    counter = Counter()
    counter("direct")
    functools.partial(counter, "partial")()
    Outer()("nested")
    return counter.calls + Outer.__call__.calls
