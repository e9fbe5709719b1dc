"""A protocol 4/5 pickle without its FRAME opcodes, so unchanged state keeps its bytes.

The pickler cuts its output into frames of about 64 KiB, each announced by a FRAME
opcode with its length. When the state grows or shrinks anywhere, every later frame
boundary moves and every later FRAME opcode changes: a few bytes every 64 KiB that
would make every content-defined chunk after the change new. Frames are only a
read-ahead hint (an unpickler reads an unframed stream the same), so the stored body
drops them.

The stream after PROTO is a sequence of frames (FRAME, u64 length, that many bytes),
large byte and string arguments written outside any frame (their opcode, its length,
the data: BINBYTES, BINUNICODE, BINBYTES8, BINUNICODE8, BYTEARRAY8), and frames
shorter than 4 bytes, which the pickler leaves unframed. Anything else (a stream this
walk does not recognise) is returned unchanged: still correct, only deduplicated less.
The walk reads opcodes only outside frames (one per 64 KiB at most); a frame's content
is copied as it is.
"""

from __future__ import annotations

import pickletools
import struct

__all__ = ["deframe"]

_PROTO, _FRAME = 0x80, 0x95
_U64 = struct.Struct("<Q")
# Each opcode's argument: a fixed size, or a length prefix of 1, 4 or 8 bytes followed by
# that many bytes (pickletools' table, the reference for the opcodes).
_FIXED: dict[int, int] = {}
_PREFIXED: dict[int, struct.Struct] = {}
for _op in pickletools.opcodes:
    _code = ord(_op.code)
    if _op.arg is None:
        _FIXED[_code] = 0
    elif _op.arg.n >= 0:
        _FIXED[_code] = _op.arg.n
    elif _op.arg.n == pickletools.TAKEN_FROM_ARGUMENT1:
        _PREFIXED[_code] = struct.Struct("<B")
    elif _op.arg.n == pickletools.TAKEN_FROM_ARGUMENT4U:
        _PREFIXED[_code] = struct.Struct("<I")
    elif _op.arg.n == pickletools.TAKEN_FROM_ARGUMENT8U:
        _PREFIXED[_code] = struct.Struct("<Q")
    # else: arguments up to a newline (protocol 0 text opcodes): not walked
del _FIXED[_FRAME]


def deframe(data: bytes | bytearray | memoryview, start: int = 0) -> bytes:
    """`data` without the FRAME opcodes of the pickle that begins at `start` (what
    comes before is kept as it is); `data` itself, as bytes, when that pickle has no
    frames or is not a stream this walk recognises."""
    view = memoryview(data)
    if len(view) < start + 3 or view[start] != _PROTO or view[start + 1] < 4:
        return bytes(view)
    parts: list[memoryview] = [view[: start + 2]]
    pos, end = start + 2, len(view)
    try:
        while pos < end:
            op = view[pos]
            if op == _FRAME:  # unwrap: its content is whole opcodes, copied as they are
                (length,) = _U64.unpack_from(view, pos + 1)
                begin = pos + 1 + _U64.size
                stop = begin + length
                if stop > end:
                    return bytes(view)
                parts.append(view[begin:stop])
            else:  # one opcode outside any frame: a large argument, or a short frame's
                fixed = _FIXED.get(op)
                if fixed is not None:
                    stop = pos + 1 + fixed
                else:
                    prefix = _PREFIXED.get(op)
                    if prefix is None:
                        return bytes(view)
                    (length,) = prefix.unpack_from(view, pos + 1)
                    stop = pos + 1 + prefix.size + length
                if stop > end:
                    return bytes(view)
                parts.append(view[pos:stop])
            pos = stop
    except struct.error:
        return bytes(view)
    return b"".join(parts)
