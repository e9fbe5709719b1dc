"""A file-like reader over a buffer, for pickle's Unpickler: a snapshot's payload is
unpickled where it lies, never copied (serializers/_pickler.py, and the inert reader of
serializers/_inert.py)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["BufferReader", "StreamReader"]


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


class StreamReader:
    """read, peek, readinto and readline over an iterator of byte pieces (a verified
    body decoded piece by piece), holding about one piece and one peek at a time: the
    inert decoder reads a large snapshot without the whole body in memory
    (serializers/_snapfile.py's open_verified, serializers/_home.py's open_row)."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._data: bytes = b""
        self._pos = 0
        self._done = False

    def _fill(self, want: int) -> int:
        """Make at least `want` bytes available from the current position where the
        stream still has them; returns how many are."""
        available = len(self._data) - self._pos
        if available >= want or self._done:
            return available
        parts = [self._data[self._pos :]] if available else []
        while available < want:
            piece = next(self._pieces, None)
            if piece is None:
                self._done = True
                break
            if piece:
                parts.append(piece)
                available += len(piece)
        self._data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._pos = 0
        return available

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            parts = []
            while self._fill(1):
                parts.append(self.read(len(self._data) - self._pos))
            return b"".join(parts)
        available = self._fill(n)
        end = self._pos + min(n, available)
        data = self._data[self._pos : end] if self._pos or end < len(self._data) else self._data
        self._pos = end
        return data

    def peek(self, n: int = 0) -> bytes:
        """The next bytes (at least `n` where the stream has them), not consumed; see
        BufferReader.peek (the C unpickler reads ahead 128 KiB at a time through it)."""
        available = self._fill(max(n, 1 << 17))
        return self._data[self._pos : self._pos + available]

    def readinto(self, buffer: bytearray | memoryview) -> int:
        target = memoryview(buffer).cast("B")
        done = 0
        while done < len(target) and self._fill(1):  # piece by piece: no joined copy
            n = min(len(target) - done, len(self._data) - self._pos)
            target[done : done + n] = memoryview(self._data)[self._pos : self._pos + n]
            self._pos += n
            done += n
        return done

    def readline(self) -> bytes:
        """Up to and including the next newline, or the rest."""
        parts = []
        while self._fill(1):
            end = self._data.find(b"\n", self._pos)
            if end >= 0:
                parts.append(self.read(end + 1 - self._pos))
                break
            parts.append(self.read(len(self._data) - self._pos))
        return b"".join(parts)

    def rest(self) -> int:
        """Consume what the decoder left (a verified body holds nothing after the
        pickle's STOP; reading to the end completes the stream's checks); returns how
        many bytes that was."""
        left = len(self._data) - self._pos
        self._data, self._pos = b"", 0
        if not self._done:
            for piece in self._pieces:
                left += len(piece)
            self._done = True
        return left

    def close(self) -> None:
        """Stop reading early (a decoding error): the pieces' source is closed."""
        self._data, self._pos, self._done = b"", 0, True
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()
