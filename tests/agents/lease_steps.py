"""Five snapshots in a loop; the second holds a 1.1 MB incompressible blob, so its file
has a two-chunk body (several writes). Returns a digest of everything it saw, so a
resume from the wrong snapshot, or a replayed or skipped step, changes the result.
Prints "acked N" each time snapshot N returns: what the job acknowledged.

A Canary in its locals appends a line to the file named by argv[1] (when given) each
time it is unpickled, so a test can tell whether a snapshot was ever unpickled."""

import hashlib
import random
import sys

from snapstate import snapshot


class Canary:
    def __init__(self, path):
        self.path = path

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.path:
            with open(self.path, "a") as f:
                f.write("unpickled\n")


def main():
    canary = Canary(sys.argv[1] if len(sys.argv) > 1 else None)
    seen = []
    for step in range(1, 6):
        blob = random.Random(step).randbytes(1_100_000) if step == 2 else b""
        info = snapshot(f"step-{step}")
        seen.append((step, info.seq, info.label, len(blob), hashlib.sha256(blob).hexdigest()[:8]))
        print(f"acked {info.seq}", flush=True)
        del blob
    assert isinstance(canary, Canary)
    return hashlib.sha256(repr(seen).encode()).hexdigest()[:16]
