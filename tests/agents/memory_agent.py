"""A restored frame must own its values alone: dropping a local after a restore
frees the object (the restore machinery keeps no reference to it)."""

import gc
import weakref

from snapstate import snapshot


class Payload:
    def __init__(self):
        self.data = bytearray(1024 * 1024)


def main():
    big = Payload()
    snapshot("holding")
    ref = weakref.ref(big)
    del big
    gc.collect()
    freed = ref() is None
    print("freed", freed, flush=True)
    return freed
