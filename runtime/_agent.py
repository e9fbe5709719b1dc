"""The agent's own code: how its entry point is loaded, which modules are its own,
and their global variables, which are frozen with the job.

A script is imported under its own module name (not __main__, so an
`if __name__ == "__main__": main()` guard lets the same file run under plain Python)
with its directory first on sys.path. The agent's own modules are the script and the
modules imported from its directory, or, for `package.module:function`, the modules
of that top-level package; never the standard library, site-packages or snapstate.

Only modules the job itself imported belong to it: never `__main__` (a host program
that runs jobs through the Python API, even from the agent's folder), and no module
loaded before the entry module (sys.modules keeps import order: what the entry module
imports comes after it, even when a host imported it before starting the job) unless
the agent's own modules refer to it. A host's own modules keep their globals: a
snapshot does not hold them and a resume in the host's process does not overwrite them.
"""

from __future__ import annotations

import importlib
import importlib.util
import operator
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .._errors import RestoreError
from ..serializers._codeid import module_digest

__all__ = ["EntryPoint", "agent_modules", "capture_globals", "restore_globals"]

_LIBRARY_DIRS = tuple(
    {
        os.path.realpath(p)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
_OWN_PACKAGE = __name__.split(".")[0]


class EntryPointError(RestoreError):
    """The agent's entry point cannot be loaded (missing file, no such function)."""


@dataclass(frozen=True)
class EntryPoint:
    """`path/to/agent.py` (function main) or `package.module:function`."""

    module: str
    function: str
    path: str | None = None  # the script file, for scripts
    search_path: str | None = None  # for module:function, the directory it is found from
    # `snaprun run --record-http` (runtime/_http_record.py): the read patterns, or None
    # when the job does not record HTTP. Kept with the entry point so that resume, the
    # worker, fork and export keep it; written only when set (older rows unchanged).
    record_http: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, spec: str) -> EntryPoint:
        if spec.endswith(".py") or os.sep in spec or (os.path.exists(spec) and ":" not in spec):
            path = os.path.abspath(spec)
            if not os.path.isfile(path):
                raise EntryPointError(f"no agent script at {spec}")
            return cls(os.path.splitext(os.path.basename(path))[0], "main", path)
        module, sep, function = spec.partition(":")
        if not sep or not module or not function:
            raise EntryPointError(
                f"{spec!r} is neither a .py file nor module:function (e.g. myagent.main:run)"
            )
        # Like `python -m`: a module is found from the current directory first.
        return cls(module, function, None, os.getcwd())

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "module": self.module,
            "function": self.function,
            "path": self.path,
            "search_path": self.search_path,
        }
        if self.record_http is not None:
            data["record_http"] = list(self.record_http)
        return data

    @classmethod
    def from_dict(cls, data: object) -> EntryPoint:
        """The entry point a catalog row or a header recorded; ValueError for anything
        else (a catalog row is hostile input)."""
        if isinstance(data, dict):
            module, function = data.get("module"), data.get("function")
            path, search = data.get("path"), data.get("search_path")
            record = data.get("record_http")
            if (
                isinstance(module, str)
                and isinstance(function, str)
                and (path is None or isinstance(path, str))
                and (search is None or isinstance(search, str))
                and (
                    record is None
                    or (isinstance(record, list) and all(isinstance(p, str) for p in record))
                )
            ):
                reads = None if record is None else tuple(record)
                return cls(module, function, path, search, reads)
        raise ValueError(f"{str(data)[:80]!r} is not an entry point")

    @property
    def root(self) -> str | None:
        return os.path.dirname(self.path) if self.path else None

    def import_module(self) -> types.ModuleType:
        if self.path is None:
            if self.search_path and self.search_path not in sys.path:
                sys.path.insert(0, self.search_path)
            try:
                return importlib.import_module(self.module)
            except ImportError as exc:
                raise EntryPointError(f"cannot import {self.module}: {exc}") from None
        if not os.path.isfile(self.path):
            raise EntryPointError(f"the agent script {self.path} no longer exists")
        root = self.root
        assert root is not None  # a script's directory
        if root not in sys.path:
            sys.path.insert(0, root)
        existing = sys.modules.get(self.module)
        if existing is not None and os.path.realpath(
            getattr(existing, "__file__", "") or ""
        ) == os.path.realpath(self.path):
            return existing
        spec = importlib.util.spec_from_file_location(self.module, self.path)
        if spec is None or spec.loader is None:  # no loader for its file name's suffix
            raise EntryPointError(
                f"the agent script {self.path} is not a Python source file: name it .py"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[self.module]
            raise
        return module

    def load(self) -> Callable[..., object]:
        module = self.import_module()
        fn: object = getattr(module, self.function, None)
        if not callable(fn):
            where = self.path or self.module
            raise EntryPointError(f"{where} defines no function {self.function}()")
        return fn

    def owns(self, module: types.ModuleType) -> bool:
        """The module lives where the agent's code does (its folder, or its package)."""
        name = module.__name__
        if name.split(".")[0] == _OWN_PACKAGE or name in _HOST_MAINS:
            return False  # __main__ is the host's (snaprun's, or a script embedding the
            # API from the agent's folder): the agent is imported under its own name
        if self.path is None:
            return name.split(".")[0] == self.module.split(".")[0]
        if name == self.module:
            return True
        path = getattr(module, "__file__", None)
        if not path:
            return False
        real: str = os.path.realpath(path)
        if any(real.startswith(d + os.sep) for d in _LIBRARY_DIRS):
            return False
        root = self.root
        assert root is not None  # a script's directory
        return real.startswith(os.path.realpath(root) + os.sep)


# entry point -> id(module) -> (the module, whether it is the agent's)
_OWNED: dict[EntryPoint, dict[int, tuple[types.ModuleType, bool]]] = {}
_HOST_MAINS = ("__main__", "__mp_main__")  # the running program, never an agent module


@dataclass(frozen=True)
class _Scan:
    """What one scan of sys.modules found for an entry point, with what it was taken
    from: sys.modules' signature (its size and its last entry), the keys and values it
    held (compared by identity on the snapshot path), and where each of the agent's
    modules sat in it."""

    signature: tuple[int, str | None, int]
    keys: list[str]
    values: list[object]
    own: tuple[tuple[str, types.ModuleType], ...]  # (sys.modules key, module)
    out: tuple[types.ModuleType, ...]  # the agent's, imported with or after the entry
    earlier: tuple[types.ModuleType, ...]  # in its folder but loaded before the entry


_SCANS: dict[EntryPoint, _Scan] = {}


def _signature() -> tuple[int, str | None, int]:
    """Changes with any import or removal: sys.modules' size and its last-inserted
    entry (an import inserts at the end; a removal shrinks it)."""
    modules = sys.modules
    try:
        last = next(reversed(modules))
    except (StopIteration, RuntimeError):  # empty, or changed while read (a thread)
        return (len(modules), None, 0)
    return (len(modules), last, id(modules.get(last)))


def agent_modules(entry: EntryPoint, *, exact: bool = True) -> list[types.ModuleType]:
    """The agent's own modules among those loaded.

    sys.modules is scanned (each module's path resolved once: `_OWNED`) only when it
    changed since the last call for this entry point, so an effect does no work that
    grows with the number of loaded modules. Whether it changed is decided by

    - always, in O(1) plus O(the agent's modules): sys.modules' size and last entry
      (any import or removal changes one of them) and, for each of the agent's
      modules, that sys.modules still holds it under its key;
    - with `exact` (the snapshot path: a snapshot, the async freeze check), also a
      comparison of all of sys.modules' keys and values with those of the last scan,
      identity first (C speed, no Python call per entry), so no change is ever missed
      when a job's state is frozen.

    What the effect path (`exact=False`) can miss: an entry of sys.modules, neither the
    agent's nor the last one, replaced in place (`sys.modules[name] = other`) between
    two effects with no import or removal in between. If `other` is a module of the
    agent's, the next effects' argument digests and result seals do not count it the
    agent's until an import, a removal or a snapshot. No wrong restore follows:
    - a snapshot compares every entry (`exact=True`), so a frozen state always holds
      the exact set of agent modules;
    - serializers/_refs.py indexes library modules' objects on the same signature, so
      none of `other`'s own objects is indexed: they are saved by value, as the
      agent's are. The only objects treated otherwise are those the replaced library
      module held under an attribute that `other` holds them under too: they are saved
      as a reference to that library attribute, which they are, and a new process
      finds them there;
    - a digest that differs from the one a re-executed call computes (which sees the
      exact set) makes the ledger refuse the call (DivergenceError), never match it
      silently.

    The modules of the agent's folder that were loaded before the entry module are
    kept only when the agent's modules refer to them (`_referred`): that depends on
    the agents' globals, which change without any import, so it is looked at on every
    call; it costs O(those modules' globals), nothing per loaded module."""
    scan = _SCANS.get(entry)
    if scan is None or not _unchanged(scan, exact):
        scan = _SCANS[entry] = _scan(entry)
    out = list(scan.out)
    if scan.earlier:
        out.extend(_referred(out, list(scan.earlier)))
    return out


def _unchanged(scan: _Scan, exact: bool) -> bool:
    if _signature() != scan.signature:
        return False
    modules = sys.modules
    for key, module in scan.own:
        if modules.get(key) is not module:
            return False
    if not exact:
        return True
    keys, values = list(modules), list(modules.values())
    return (
        len(keys) == len(scan.keys)
        and len(values) == len(scan.values)
        and all(map(operator.is_, values, scan.values))
        and all(map(operator.is_, keys, scan.keys))
    )


def _scan(entry: EntryPoint) -> _Scan:
    """The agent's modules among those loaded (decided once per module: resolving
    paths of every loaded module at each call would dominate its cost)."""
    signature = _signature()  # taken first: an import meanwhile makes the next call scan
    items: list[tuple[str, object]] = list(sys.modules.items())  # one copy, made at once
    keys = [key for key, _ in items]
    values: list[object] = [value for _, value in items]  # not always modules
    decided = _OWNED.get(entry)
    if decided is None:
        decided = _OWNED[entry] = {}
    owned: list[tuple[str, types.ModuleType]] = []
    for key, module in items:
        hit = decided.get(id(module))
        if hit is None or hit[0] is not module:
            if not isinstance(module, types.ModuleType):
                continue
            hit = decided[id(module)] = (module, entry.owns(module))
        if hit[1]:
            owned.append((key, hit[0]))
    own = tuple(owned)
    try:
        cut = keys.index(entry.module)  # in import order: what the entry imports follows it
    except ValueError:
        return _Scan(signature, keys, values, own, tuple(m for _, m in own), ())
    position = {key: i for i, key in enumerate(keys)}
    out: list[types.ModuleType] = []
    earlier: list[types.ModuleType] = []  # in the agent's folder, loaded before the entry
    for _, module in own:
        name = module.__name__
        at = position.get(name)  # None: not under its own name in sys.modules
        early = at is not None and at < cut and not entry.module.startswith(name + ".")
        (earlier if early else out).append(module)
    return _Scan(signature, keys, values, own, tuple(out), tuple(earlier))


def _referred(
    own: list[types.ModuleType], earlier: list[types.ModuleType]
) -> list[types.ModuleType]:
    """The modules of `earlier` the agent's modules refer to, directly or through each
    other: a module bound to a global, the module of a function or class bound to one
    (`from helpers import step`), or a module holding the same mutable object as one
    of theirs (`from settings import CONFIG`: both must come back as one object)."""
    found: dict[str, types.ModuleType] = {}
    rest = {m.__name__: m for m in earlier}
    queue = list(own)
    while queue and rest:
        module = queue.pop()
        names: set[str] = set()
        shared: set[int] = set()
        for key, value in list(vars(module).items()):
            if key.startswith("__"):  # __builtins__ is shared by every module
                continue
            if isinstance(value, types.ModuleType):
                names.add(value.__name__)
            elif isinstance(value, (types.FunctionType, type)):
                name = getattr(value, "__module__", None)
                if isinstance(name, str):
                    names.add(name)
            elif not isinstance(value, _IMMUTABLE):
                shared.add(id(value))
        for name, candidate in list(rest.items()):
            values = [v for k, v in list(vars(candidate).items()) if not k.startswith("__")]
            if name in names or any(id(v) in shared for v in values):
                found[name] = candidate
                queue.append(candidate)
                del rest[name]
    return list(found.values())


_IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), tuple, frozenset)


def _rebound_on_import(module: types.ModuleType, name: str, value: object) -> bool:
    """Names that importing the module binds again by itself: its functions and
    classes, imported modules, module dunders."""
    if name.startswith("__") and name.endswith("__"):
        return True
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, (types.FunctionType, type)):
        return (
            getattr(value, "__module__", None) == module.__name__
            and getattr(value, "__qualname__", None) == name
        )
    return False


def capture_globals(modules: Iterable[types.ModuleType]) -> dict[str, dict[str, object]]:
    return {
        m.__name__: {k: v for k, v in vars(m).items() if not _rebound_on_import(m, k, v)}
        for m in modules
    }


def module_digests(modules: Iterable[types.ModuleType]) -> dict[str, str | None]:
    return {m.__name__: module_digest(m) for m in modules}


def restore_globals(saved: dict[str, dict[str, object]]) -> None:
    for name, values in saved.items():
        if name in _HOST_MAINS:  # frozen by a version that took the host's for the
            continue  # agent's: put back, it would overwrite the host's globals
        module = sys.modules.get(name) or importlib.import_module(name)
        vars(module).update(values)
