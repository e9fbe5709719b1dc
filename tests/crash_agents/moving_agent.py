"""Broken: moves its own file away once it is done with its input, so a resume after a
later kill cannot load it and is refused (tests/test_crashtest.py)."""

import os

from snapstate import snapshot


def main():
    snapshot("start")
    os.rename(__file__, __file__ + ".archived")
    snapshot("archived")
    print("archived")
    return "ok"
