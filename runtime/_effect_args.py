"""Effect arguments: what the ledger keeps of a call's arguments, and secrets.

An effect's arguments are digested canonically (`args_digest`: the same logical call
gives the same digest in any process, so re-executed code with other arguments at the
same point is a DivergenceError) and shown abbreviated (`args_repr`). `Secret` is an
argument that is never written down: recorded by name, revealed only at the call.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import reprlib
import types
from collections.abc import Callable, Mapping
from typing import (
    Any,
    Final,
    Generic,
    TypeVar,
)

from .._abi import pinned
from .._errors import (
    SecretUnavailable,
)
from ..resources import _secrets
from ..resources._adapters import reducer_for
from ..serializers import _pickler
from ..serializers._pickler import UnpicklableError

__all__ = ["Secret", "args_digest", "args_repr", "reveal"]

T = TypeVar("T")


# ------------------------------------------------------------------------ secrets
class Secret(Generic[T]):
    """A value that must never be written down: not in a snapshot, not in the ledger.

    Secret(value, name="api key") is recorded as its name only; after a restore its
    value is gone (SecretUnavailable). Secret.from_env("API_KEY") is recorded as the
    variable's name and re-read from the environment after a restore."""

    __slots__ = ("name", "_value", "_env")

    def __init__(self, value: T, *, name: str = "secret") -> None:
        self.name: str = name
        self._value: T = value
        self._env: str | None = None

    @classmethod
    def from_env(cls, variable: str) -> Secret[str]:
        """A secret read from the environment variable `variable` (an unset one is an
        error naming it)."""
        try:
            value = os.environ[variable]
        except KeyError:
            raise SecretUnavailable(f"environment variable {variable} is not set") from None
        secret = Secret(value, name=variable)  # restored as a Secret too (__reduce__)
        secret._env = variable
        return secret

    def reveal(self) -> T:
        """The value; raises SecretUnavailable after a restore (secrets are never saved)."""
        if self._value is _GONE:
            raise SecretUnavailable(
                f"secret {self.name!r} was not saved in the snapshot (secrets never are); "
                "obtain it again after a restore, e.g. with Secret.from_env(...)"
            )
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r})"

    def __reduce__(self) -> tuple[Callable[[str], Secret[Any]], tuple[str]]:
        if self._env is not None:
            return (Secret.from_env, (self._env,))
        return (_redacted, (self.name,))


_GONE: Final = object()


@pinned("redacted_secret")
def _redacted(name: str) -> Secret[object]:
    secret = Secret[object](None, name=name)
    secret._value = _GONE
    return secret


def reveal(value: object) -> object:
    if isinstance(value, Secret):
        return value.reveal()
    return value


# ------------------------------------------------------------------------ digests
def _canonical(
    value: object, out: list[str], path: str = "value", _seen: set[int] | None = None
) -> None:
    """A representation of the arguments that is the same in every process (set and
    dict orders depend on the hash seed; secrets count by name only; objects by type
    and attributes, never by which equal objects happen to be shared)."""
    if isinstance(value, Secret):
        out.append(f"secret:{value.name}")
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        out.append(f"{type(value).__name__}:{value!r}")
    elif isinstance(value, (list, tuple)):
        out.append(f"{type(value).__name__}[")
        for i, item in enumerate(value):
            _canonical(item, out, f"{path}[{i}]", _seen)
        out.append("]")
    elif isinstance(value, dict):
        out.append("dict{")
        for k in sorted(value, key=repr):
            _canonical(k, out, path, _seen)
            _canonical(value[k], out, f"{path}[{k!r}]", _seen)
        out.append("}")
    elif isinstance(value, (set, frozenset)):
        parts = []
        for item in value:
            sub: list[str] = []
            _canonical(item, sub, path, _seen)
            parts.append("".join(sub))
        out.append(f"{type(value).__name__}{{{','.join(sorted(parts))}}}")
    else:
        _canonical_object(value, out, path, set() if _seen is None else _seen)


def _canonical_object(value: object, out: list[str], path: str, seen: set[int]) -> None:
    """An object: its type, then
    - a function, class or method: its qualified name;
    - an object snapstate saves through an adapter (an SDK or HTTP client, a file):
      what its adapter saves (its configuration), credentials as a fixed marker;
    - an object with attributes (a dataclass, a plain class): its attributes;
    - anything else: its bytes through snapstate's pickler, which refuses what a
      snapshot could not save either (UnpicklableError: the argument is named)."""

    kind = type(value)
    out.append(f"{kind.__module__}.{kind.__qualname__}:")
    if isinstance(value, _secrets.Credential):
        out.append("<credential>")
        return
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        owner = getattr(value, "__self__", None)
        out.append(f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}")
        if isinstance(value, types.MethodType):
            _canonical(owner, out, path, seen)
        return
    if id(value) in seen:
        out.append("<cycle>")
        return
    adapter = reducer_for(kind)
    if adapter is not None:
        seen.add(id(value))
        try:
            reduced = adapter(value)
        except pickle.PicklingError as exc:
            raise _pickler.UnpicklableError(path, value, exc) from None
        if reduced is not NotImplemented:  # NotImplemented: pickled as usual (below)
            _canonical(list(reduced[1:3]), out, path, seen)
            seen.discard(id(value))
            return
        seen.discard(id(value))
    attrs = getattr(value, "__dict__", None)
    if (
        isinstance(attrs, dict)
        and kind.__reduce_ex__ is object.__reduce_ex__
        and getattr(kind, "__getstate__", object.__getstate__) is object.__getstate__
    ):
        seen.add(id(value))
        state = dict(attrs)
        for cls in kind.__mro__:
            for name in getattr(cls, "__slots__", ()) or ():
                if (
                    isinstance(name, str)
                    and name not in ("__dict__", "__weakref__")
                    and hasattr(value, name)
                ):
                    state[name] = getattr(value, name)
        _canonical(state, out, path, seen)
        seen.discard(id(value))
        return
    with _secrets.digesting():
        out.append(
            hashlib.sha256(
                _pickler.dumps(value, roots=lambda: [(path, value)], digest=True)
            ).hexdigest()
        )


def args_digest(name: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
    """The digest the ledger matches a re-executed call by. An argument snapstate cannot
    save cannot be digested either: refused naming it and the fix."""
    out = [name, "list["]  # the layout digests always had: list, then dict
    for i, value in enumerate(args):
        _digest_argument(name, f"argument {i + 1}", value, out)
    out.append("]")
    out.append("dict{")
    for k in sorted(kwargs, key=repr):
        _canonical(k, out)
        _digest_argument(name, f"argument {k!r}", kwargs[k], out)
    out.append("}")
    return hashlib.sha256("\x00".join(out).encode()).hexdigest()


def _digest_argument(name: str, label: str, value: object, out: list[str]) -> None:

    try:
        _canonical(value, out, label)
    except UnpicklableError as exc:
        fix = f" {exc.fix}" if exc.fix else ""
        raise TypeError(
            f"effect {name}: its {label} cannot be recorded in the ledger, which identifies "
            f"a call by its arguments: {exc}.{fix} Or do not pass it as an argument: let "
            "the effect function use it from a global or a closure."
        ) from None


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40


def args_repr(args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
    parts = [_SHORT.repr(a) for a in args] + [f"{k}={_SHORT.repr(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)
