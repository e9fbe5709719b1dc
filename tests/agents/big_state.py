"""A large state for the memory tests (tests/test_inspect_memory.py): BIG_MB strings of
1 MB each (random hex: about as large pickled as in memory), snapshot 1 ("big"); one
string reversed, snapshot 2 ("big-2")."""

import os

from snapstate import snapshot


def main():
    blobs = [os.urandom(1 << 19).hex() for _ in range(int(os.environ["BIG_MB"]))]
    snapshot("big")
    blobs[len(blobs) // 2] = blobs[len(blobs) // 2][::-1]
    snapshot("big-2")
    return len(blobs)
