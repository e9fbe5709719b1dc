"""Five snapshots in a loop, most of them writing a pack file (tests/test_writer_crash.py).

Each step holds a fresh incompressible blob while it snapshots: 100 KB, 300 KB, none,
120 KB, 80 KB. So snapshots 1, 2, 4 and 5 each add more than 64 KiB of new encoded
chunks and write one pack file (snapshot 2's in many writes); snapshot 3 adds only
small chunks, kept inside the catalog transaction. Returns a digest of everything it
saw, so a resume from the wrong snapshot, or a replayed or skipped step, changes the
result. Prints "acked N" each time snapshot N returns: what the job acknowledged.

A Canary in its locals appends a line to the file named by argv[1] (when given) each
time it is unpickled, so a test can tell whether a snapshot was ever unpickled."""

import hashlib
import random
import sys

from snapstate import snapshot

SIZES = {1: 100_000, 2: 300_000, 3: 0, 4: 120_000, 5: 80_000}


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
        blob = random.Random(step).randbytes(SIZES[step])
        info = snapshot(f"step-{step}")
        seen.append((step, info.seq, info.label, len(blob), hashlib.sha256(blob).hexdigest()[:8]))
        print(f"acked {info.seq}", flush=True)
        del blob
    assert isinstance(canary, Canary)
    return hashlib.sha256(repr(seen).encode()).hexdigest()[:16]
