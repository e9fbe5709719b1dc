"""Class and @contextmanager context managers around snapshots; an exception thrown
into a restored @contextmanager generator runs its except and finally blocks."""

import contextlib

from snapstate import snapshot


class Tracker:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        print("enter", self.name, flush=True)
        return self

    def __exit__(self, exc_type, exc, tb):
        print("exit", self.name, exc_type.__name__ if exc_type else None, flush=True)
        return exc_type is KeyError  # swallow KeyError only


@contextlib.contextmanager
def guarded(name):
    print("cm-start", name, flush=True)
    try:
        yield name.upper()
    except ValueError as exc:
        print("cm-caught", name, exc, flush=True)
    finally:
        print("cm-finally", name, flush=True)


def main():
    with Tracker("a") as t:
        snapshot("in-class-cm")
        print("body", t.name, flush=True)
    with Tracker("b"):
        snapshot("before-keyerror")
        raise KeyError("swallowed")
    with guarded("g") as g:
        snapshot("in-contextmanager")
        print("cm-body", g, flush=True)
    with guarded("h"):
        snapshot("before-valueerror")
        raise ValueError("thrown into the generator")
    print("after all", flush=True)
    return "ok"
