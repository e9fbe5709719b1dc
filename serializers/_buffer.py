"""A file-like reader over a buffer, for pickle's Unpickler: a snapshot's payload is
unpickled where it lies, never copied (serializers/_pickler.py, and the inert reader of
serializers/_inert.py)."""

from __future__ import annotations

__all__ = ["BufferReader"]


class BufferReader:
    """read, peek, readinto and readline over bytes, a bytearray or a memoryview."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data, self.view, self.pos = data, memoryview(data).cast("B"), 0

    def read(self, n: int | None = -1) -> bytes:
        end = len(self.view) if n is None or n < 0 else min(self.pos + n, len(self.view))
        data = self.view[self.pos : end].tobytes()
        self.pos = end
        return data

    def peek(self, n: int = 0) -> bytes:
        """The next bytes (at least `n` where the buffer has them), not consumed: the C
        unpickler reads ahead through peek (128 KiB at a time) where it has one, which
        keeps an unframed stream (serializers/_deframe.py) as fast as a framed one
        instead of one read() call per opcode."""
        end = min(self.pos + max(n, 1 << 17), len(self.view))
        return self.view[self.pos : end].tobytes()

    def readinto(self, buffer: bytearray | memoryview) -> int:
        target = memoryview(buffer).cast("B")
        n = min(len(target), len(self.view) - self.pos)
        target[:n] = self.view[self.pos : self.pos + n]
        self.pos += n
        return n

    def readline(self) -> bytes:
        """Up to and including the next newline, or the rest (only protocol 0-style
        opcodes read lines)."""
        find = getattr(self.data, "find", None)
        if find is not None:
            end = find(b"\n", self.pos)
        else:
            end = next((i for i in range(self.pos, len(self.view)) if self.view[i] == 10), -1)
        return self.read(len(self.view) - self.pos if end < 0 else end + 1 - self.pos)
