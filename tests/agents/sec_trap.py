"""Holds an object whose unpickling writes a sentinel file: a snapshot of this agent
runs code the moment its body is unpickled (resume, inspect), never before.

The sentinel's path comes from the SEC_SENTINEL environment variable of the first run
(not from argv: argv is recorded in the snapshot header)."""

import os

from snapstate import snapshot


def arm(path):
    """Called by the unpickler: the observable side effect of unpickling."""
    with open(path, "w") as f:
        f.write("unpickled\n")
    return Trap(path)


class Trap:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (arm, (self.path,))


def main():
    trap = Trap(os.environ["SEC_SENTINEL"])
    snapshot("armed")
    return os.path.basename(trap.path)
