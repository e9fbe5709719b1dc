"""snapshot() inside an except body followed by a bare raise; try/except around a
call that raises after resume, whose traceback text must be identical."""

import traceback

from snapstate import snapshot


class AgentFailure(Exception):
    pass


def flaky(n):
    if n > 1:
        raise AgentFailure(f"flaky failed with n={n}")
    return n


def handler():
    try:
        flaky(5)
    except AgentFailure as exc:
        info = snapshot("in-except")
        print("handling", exc, info.seq is not None, flush=True)
        raise


def deeper(n):
    snapshot("before-raise")
    return flaky(n) + 1


def main():
    try:
        handler()
    except AgentFailure as exc:
        print("re-raised", exc, flush=True)
    try:
        deeper(3)
    except AgentFailure:
        print(traceback.format_exc(), end="", flush=True)
    try:
        try:
            raise KeyError("outer")
        except KeyError:
            try:
                raise IndexError("inner")
            except IndexError:
                snapshot("nested-except")
                print("nested ok", flush=True)
            raise
    except KeyError as exc:
        print("outer re-raised", repr(exc), flush=True)
    return "done"
