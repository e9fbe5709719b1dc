"""Bytecode facts the engine needs: instructions by code unit, static value-stack
depths, the exception table and the location table (PEP 626/657 encodings).

Since 3.11 every jump is relative (dis.hasjabs is empty), which is what lets a
restore prologue be prepended to an unchanged body.

In the serializers, the lowest layer that needs it: the traceback stubs
(serializers/_tracebacks.py) use it as the runtime's capture and restore do.
"""

from __future__ import annotations

import dis
import opcode
import types
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

__all__ = [
    "Instruction",
    "instructions",
    "instruction_at",
    "stack_depth_before",
    "exception_entries",
    "encode_exception_table",
    "emit",
    "cache_units",
    "linetable_no_location",
    "linetable_positions",
    "ExceptionEntry",
]

if dis.hasjabs:  # pragma: no cover - CPython < 3.11
    raise ImportError("snapstate needs relative-only jumps (CPython 3.11+)")

_EXTENDED_ARG = opcode.opmap["EXTENDED_ARG"]
_JUMPS = frozenset(getattr(dis, "hasjump", ())) | frozenset(dis.hasjrel)
_NO_FALLTHROUGH = frozenset(
    opcode.opmap[name]
    for name in (
        "RETURN_VALUE",
        "RETURN_CONST",
        "RAISE_VARARGS",
        "RERAISE",
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
    )
    if name in opcode.opmap
)


def cache_units(opname: str) -> int:
    """Inline cache entries (code units) that follow an instruction."""
    # private (not in typeshed): a list by opcode before 3.13, a dict by name since
    table: list[int] | dict[str, int] = opcode._inline_cache_entries  # type: ignore[attr-defined]
    if isinstance(table, dict):  # 3.13: keyed by name
        return table.get(opname, 0)
    return table[opcode.opmap[opname]]


@dataclass(frozen=True)
class Instruction:
    start: int  # code unit of the opcode itself (after any EXTENDED_ARG prefixes)
    first: int  # code unit of its first EXTENDED_ARG prefix, or start
    end: int  # code unit after its inline caches
    op: int
    opname: str
    arg: int
    jump_target: int | None  # code unit, for jumps


@lru_cache(maxsize=4096)
def _decode(code_bytes: bytes, code: types.CodeType) -> tuple[Instruction, ...]:
    targets = {}
    for ins in dis.get_instructions(code):
        if ins.opcode in _JUMPS and isinstance(ins.argval, int):
            targets[ins.offset // 2] = ins.argval // 2
    out = []
    unit, n = 0, len(code_bytes) // 2
    while unit < n:
        first, ext = unit, 0
        op, arg = code_bytes[2 * unit], code_bytes[2 * unit + 1]
        while op == _EXTENDED_ARG:
            ext = (ext | arg) << 8
            unit += 1
            op, arg = code_bytes[2 * unit], code_bytes[2 * unit + 1]
        name = opcode.opname[op]
        end = unit + 1 + (cache_units(name) if name in opcode.opmap else 0)
        out.append(
            Instruction(
                unit, first, end, op, name, ext | arg, targets.get(unit, targets.get(first))
            )
        )
        unit = end
    return tuple(out)


def instructions(code: types.CodeType) -> tuple[Instruction, ...]:
    return _decode(code.co_code, code)


@lru_cache(maxsize=4096)
def _index(code: types.CodeType) -> dict[int, Instruction]:
    table = {}
    for ins in instructions(code):
        for u in range(ins.first, ins.end):
            table[u] = ins
    return table


def instruction_at(code: types.CodeType, unit: int) -> Instruction:
    """The instruction whose opcode, prefixes or caches cover code unit `unit`."""
    try:
        return _index(code)[unit]
    except KeyError:
        raise ValueError(f"code unit {unit} is outside {code.co_qualname}") from None


@dataclass(frozen=True)
class ExceptionEntry:
    start: int
    end: int
    target: int
    depth: int
    lasti: bool


@lru_cache(maxsize=4096)
def exception_entries(code: types.CodeType) -> tuple[ExceptionEntry, ...]:
    return tuple(
        ExceptionEntry(e.start // 2, e.end // 2, e.target // 2, e.depth, bool(e.lasti))
        for e in dis._parse_exception_table(code)  # type: ignore[attr-defined]  # private
    )


def _stack_effect(ins: Instruction, jump: bool) -> int:
    if ins.opname == "RETURN_GENERATOR":
        # Resumed by the first send(), it pushes the sent value; dis says 0 before 3.13.
        return 1
    arg = ins.arg if ins.op >= opcode.HAVE_ARGUMENT else None
    return dis.stack_effect(ins.op, arg, jump=jump)


@lru_cache(maxsize=4096)
def _depths(code: types.CodeType) -> dict[int, int]:
    """Value-stack depth before every reachable instruction, by the same rules the
    compiler uses to size co_stacksize."""
    by_start = {ins.first: ins for ins in instructions(code)}
    depths: dict[int, int] = {}
    work = [(0, 0)]
    for entry in exception_entries(code):
        work.append((entry.target, entry.depth + 1 + entry.lasti))
    while work:
        unit, depth = work.pop()
        if unit in depths:
            continue
        ins = by_start.get(unit)
        if ins is None:
            continue
        depths[unit] = depth
        if ins.op == _EXTENDED_ARG:  # only reached as a jump target inside a prefix run
            continue
        if ins.jump_target is not None:
            work.append((ins.jump_target, depth + _stack_effect(ins, True)))
        if ins.op not in _NO_FALLTHROUGH:
            work.append((ins.end, depth + _stack_effect(ins, False)))
    return {by_start[u].start: d for u, d in depths.items()}


def stack_depth_before(code: types.CodeType, ins: Instruction) -> int:
    """Static value-stack depth just before `ins` executes."""
    try:
        return _depths(code)[ins.start]
    except KeyError:
        raise ValueError(
            f"instruction {ins.opname} at unit {ins.start} of {code.co_qualname} is unreachable"
        ) from None


def stack_depth_after(code: types.CodeType, ins: Instruction) -> int:
    return stack_depth_before(code, ins) + _stack_effect(ins, False)


# ----------------------------------------------------------------------- emitting code
def emit(out: bytearray, opname: str, arg: int = 0) -> None:
    """Append one instruction (with EXTENDED_ARG prefixes and zeroed caches)."""
    prefixes = []
    rest = arg >> 8
    while rest:
        prefixes.append(rest & 0xFF)
        rest >>= 8
    for byte in reversed(prefixes):
        out += bytes([_EXTENDED_ARG, byte])
    out += bytes([opcode.opmap[opname], arg & 0xFF])
    out += b"\x00\x00" * cache_units(opname)


# Exception table: varints of 6-bit big-endian groups, 0x40 = more, 0x80 = entry start.
def _exc_varint(value: int, first: bool = False) -> bytes:
    groups = [value & 63]
    value >>= 6
    while value:
        groups.append(value & 63)
        value >>= 6
    groups.reverse()
    out = [g | 64 for g in groups[:-1]] + [groups[-1]]
    if first:
        out[0] |= 128
    return bytes(out)


def encode_exception_table(entries: Iterable[ExceptionEntry]) -> bytes:
    out = bytearray()
    for e in entries:
        out += (
            _exc_varint(e.start, True)
            + _exc_varint(e.end - e.start)
            + _exc_varint(e.target)
            + _exc_varint((e.depth << 1) | int(e.lasti))
        )
    return bytes(out)


# Location table: varints of 6-bit little-endian groups (Objects/locations.md).
def _lt_varint(value: int) -> bytearray:
    out = bytearray()
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)
    return out


def _lt_svarint(value: int) -> bytearray:
    return _lt_varint(((-value) << 1) | 1 if value < 0 else value << 1)


def linetable_no_location(units: int) -> bytearray:
    out = bytearray()
    while units > 0:
        k = min(8, units)
        out.append(0x80 | (15 << 3) | (k - 1))
        units -= k
    return out


def linetable_positions(
    units: int,
    line_delta: int,
    position: tuple[int | None, int | None, int | None, int | None] | None = None,
) -> bytearray:
    """Entries covering `units` code units; the first moves the line by line_delta and,
    when `position` (line, end_line, col, end_col) is complete, carries the columns."""
    out = bytearray()
    first = True
    while units > 0:
        k = min(8, units)
        delta = line_delta if first else 0
        if position and None not in position:
            line, end_line, col, end_col = cast("tuple[int, int, int, int]", position)  # no None
            out.append(0x80 | (14 << 3) | (k - 1))
            out += (
                _lt_svarint(delta)
                + _lt_varint(end_line - line)
                + _lt_varint(col + 1)
                + _lt_varint(end_col + 1)
            )
        else:
            out.append(0x80 | (13 << 3) | (k - 1))
            out += _lt_svarint(delta)
        first = False
        units -= k
    return out
