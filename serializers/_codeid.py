"""Code identity: snapshots reference code objects by (module, qualname, first line,
digest of the bytecode and everything it refers to), never by value.

Restoring looks the identity up in the freshly imported module; when the code has
changed, the lookup fails with a message listing what differs.

In the serializers: the pickler saves functions and tracebacks by it, and the
runtime's frame records name their code by it.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass

import xxhash

from .._abi import pinned
from .._errors import IncompatibleSnapshot

__all__ = ["CodeRef", "code_ref", "find_code", "module_digest"]


@pinned("CodeRef")
@dataclass(frozen=True)
class CodeRef:
    module: str
    qualname: str
    firstlineno: int
    digest: str
    filename: str = ""

    def describe(self) -> str:
        return f"{self.qualname}() ({self.module}, line {self.firstlineno})"


_DIGESTS: dict[int, tuple[types.CodeType, str]] = {}


def _canonical(value: object) -> str:
    if isinstance(value, types.CodeType):
        return "code:" + code_digest(value)
    if isinstance(value, tuple):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    if isinstance(value, frozenset):  # iteration order depends on the hash seed
        return "{" + ",".join(sorted(_canonical(v) for v in value)) + "}"
    return f"{type(value).__name__}:{value!r}"


def code_digest(code: types.CodeType) -> str:
    """Digest of what the code does: bytecode, names, locals and constants."""
    hit = _DIGESTS.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    h = xxhash.xxh3_64()
    for part in (
        code.co_code,
        repr(code.co_names).encode(),
        repr(code.co_varnames).encode(),
        repr(code.co_cellvars).encode(),
        repr(code.co_freevars).encode(),
        _canonical(code.co_consts).encode(),
        str(code.co_flags).encode(),
        str(code.co_argcount).encode(),
        str(code.co_kwonlyargcount).encode(),
    ):
        h.update(part)
        h.update(b"\0")
    digest = h.hexdigest()
    _DIGESTS[id(code)] = (code, digest)
    return digest


def code_ref(code: types.CodeType, module: str) -> CodeRef:
    return CodeRef(
        module, code.co_qualname, code.co_firstlineno, code_digest(code), code.co_filename
    )


# ----------------------------------------------------------------------------- lookup
# (qualname, first line, digest) -> code object, per module
_Index = dict[tuple[str, int, str], types.CodeType]
_INDEX: dict[str, tuple[types.ModuleType, _Index]] = {}


def _walk(code: types.CodeType, acc: _Index) -> None:
    acc.setdefault((code.co_qualname, code.co_firstlineno, code_digest(code)), code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _walk(const, acc)


def _visit(obj: object, modname: str, acc: _Index, seen: set[int], depth: int = 0) -> None:
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                _visit(f, modname, acc, seen, depth + 1)
        return
    if isinstance(obj, types.FunctionType):
        _walk(obj.__code__, acc)
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            _visit(wrapped, modname, acc, seen, depth + 1)
        for cell in obj.__closure__ or ():
            try:
                _visit(cell.cell_contents, modname, acc, seen, depth + 1)
            except ValueError:
                pass
    elif isinstance(obj, type) and obj.__module__ == modname:
        for value in vars(obj).values():
            _visit(value, modname, acc, seen, depth + 1)


def _source_codes(module: types.ModuleType, acc: _Index) -> None:
    """Code objects only reachable through the module's source (a lambda stored in a
    local at import time, a function deleted after use)."""
    loader = getattr(module, "__loader__", None)
    try:
        source = loader.get_source(module.__name__) if loader is not None else None
    except (ImportError, OSError):
        source = None
    if source:
        try:
            _walk(
                compile(source, module.__file__ or module.__name__, "exec", dont_inherit=True), acc
            )
        except (SyntaxError, ValueError):
            pass


def _module_index(modname: str) -> _Index:
    module = sys.modules.get(modname) or importlib.import_module(modname)
    hit = _INDEX.get(modname)
    if hit is not None and hit[0] is module:
        return hit[1]
    acc: _Index = {}
    seen: set[int] = set()
    for value in list(vars(module).values()):
        if isinstance(value, types.FunctionType) and value.__module__ != modname:
            continue
        _visit(value, modname, acc, seen)
    _source_codes(module, acc)
    _INDEX[modname] = (module, acc)
    return acc


def find_code(ref: CodeRef) -> types.CodeType:
    """The live code object with identity `ref`, or IncompatibleSnapshot saying why not."""
    try:
        index = _module_index(ref.module)
    except Exception as exc:
        change = (
            f"module {ref.module!r} (holding {ref.qualname}()) cannot be imported "
            f"({type(exc).__name__}: {exc})"
        )
        raise _code_changed(
            change,
            "Resume from the directory the job was started in, with "
            "the same sys.path, and the original source.",
        ) from None
    code = index.get((ref.qualname, ref.firstlineno, ref.digest))
    if code is not None:
        return code
    same_name = [k for k in index if k[0] == ref.qualname]
    if not same_name:
        change = f"{ref.qualname}() no longer exists in module {ref.module}"
    elif any(k[1] == ref.firstlineno for k in same_name):
        change = (
            f"the body of {ref.qualname}() at {ref.filename or ref.module}:{ref.firstlineno} "
            "changed"
        )
    else:
        change = (
            f"{ref.qualname}() moved from line {ref.firstlineno} to line "
            f"{', '.join(str(k[1]) for k in same_name)} of {ref.filename or ref.module}"
        )
    raise _code_changed(
        change,
        "Restore the original source (e.g. check out the commit the "
        "job started from) to resume this job, or start a new job.",
    )


def _code_changed(change: str, fix: str) -> IncompatibleSnapshot:
    exc = IncompatibleSnapshot(f"the agent's code changed since the snapshot: {change}. {fix}")
    exc.change = change  # type: ignore[attr-defined]  # read by Job._check_code (getattr)
    return exc


def module_digest(module: types.ModuleType) -> str | None:
    """Digest of a module's source file, for saying which files changed."""
    path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return xxhash.xxh3_64_hexdigest(f.read())
    except OSError:
        return None
