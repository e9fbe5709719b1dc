"""Refusals in the user's language: what an unpicklable object is, as the user knows it,
and the fix that fits that kind of object.

A refusal names the outermost object the user knows (the local or global holding it and
what it is: "local 'pool' is a ThreadPoolExecutor"), then the internal path to the part
that cannot be saved, then the fix for that kind ("shut it down before snapshot()..."),
not the generic resource() advice, which fits only connections and files.

Kinds are found by the names of the classes in an object's MRO ("module.QualName"), so
optional libraries are never imported; the result is cached per type. Adapters add
their own kinds with register_kind().
"""

from __future__ import annotations

import site
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Kind", "register_kind", "kind_of", "user_type_name", "explain", "GENERIC_FIX"]

GENERIC_FIX = (
    "Keep only picklable values in the agent's locals and globals at a snapshot point: "
    "close or drop the object before snapshot() and create it again after it; a "
    "connection or file can be wrapped with snapstate.resource() so it is reopened after "
    "a restore, and a type of your own can be taught with snapstate.register_adapter()."
)


@dataclass(frozen=True)
class Kind:
    """A kind of object: how the user calls it (`name(obj)` -> "a ThreadPoolExecutor")
    and the fix for a refusal of it (None: the refusal's own error says it; a callable:
    obj -> the fix that fits that object)."""

    name: Callable[[object], str]
    fix: str | Callable[[object], str | None] | None


_BY_CLASS: dict[str, Kind] = {}  # "module.QualName" of a class in the MRO -> kind
_BY_PREDICATE: list[tuple[Callable[[type], bool], Kind]] = []
_CACHE: dict[type, Kind | None] = {}


def register_kind(
    match: str | Callable[[type], bool],
    name: str | Callable[[object], str],
    fix: str | Callable[[object], str | None] | None,
) -> None:
    """Describe a kind of object: `match` is a class's "module.QualName" (instances of it
    and its subclasses) or a predicate on the type; `name` what the user calls it (a
    string or obj -> string); `fix` the advice a refusal of it ends with."""
    kind = Kind(name if callable(name) else _constant(name), fix)
    if isinstance(match, str):
        _BY_CLASS[match] = kind
    else:
        _BY_PREDICATE.append((match, kind))
    _CACHE.clear()


def _constant(name: str) -> Callable[[object], str]:
    return lambda obj: name


def kind_of(obj: object) -> Kind | None:
    """The registered kind of obj (closest class in its MRO first), or None."""
    t = type(obj)
    try:
        return _CACHE[t]
    except KeyError:
        pass
    found = None
    for cls in t.__mro__:
        found = _BY_CLASS.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            break
    if found is None:
        found = next((kind for test, kind in _BY_PREDICATE if _safe(test, t)), None)
    _CACHE[t] = found
    return found


def _safe(test: Callable[[type], bool], t: type) -> bool:
    try:
        return bool(test(t))
    except Exception:
        return False


_TYPE_NAMES: dict[type, str] = {}


def user_type_name(t: type) -> str:
    """The name the user writes for t: `openai.OpenAI` when the top-level package
    exports it (not `openai._client.OpenAI`), `dict` for builtins."""
    try:
        return _TYPE_NAMES[t]
    except KeyError:
        pass
    module, qualname = t.__module__, t.__qualname__
    name = f"{module}.{qualname}"
    if module == "builtins":
        name = qualname
    else:
        for part in _public_prefixes(module):
            if getattr(sys.modules.get(part), qualname, None) is t:
                name = f"{part}.{qualname}"
                break
    _TYPE_NAMES[t] = name
    return name


def _public_prefixes(module: str) -> list[str]:
    """`a._b.c` -> ["a", "a._b"] minus private parts: the shortest public home first."""
    parts = module.lstrip("_").split(".") if module.startswith("_") else module.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if any(p.startswith("_") for p in parts[:i]):
            break
        out.append(prefix)
    return out


def article(noun: str) -> str:
    """ "a"/"an" + noun; an acronym goes by its first letter's sound ("an HTTP ...")."""
    word = noun.split(" ", 1)[0]
    if word.lower().startswith(("http", "html", "xml", "ssl")):
        return "an " + noun  # said letter by letter: "an httpx.Client"
    vowel_sound = "AEFHILMNORSX" if word.isupper() and len(word) > 1 else "aeiouAEIOU"
    return ("an " if noun[:1] in vowel_sound else "a ") + noun


def explain(
    chain: list[tuple[str, object]], path: str, culprit: object, error: object
) -> tuple[str, str | None]:
    """(message, fix) for a refusal. `chain` is the (path, object) pairs from the root the
    user named (a local or global) down to `culprit`, the part that cannot be saved."""
    if culprit is None and not chain:  # the error is about the whole state
        return str(error), None
    kind_name = type(culprit).__module__ + "." + type(culprit).__qualname__
    detail = f"{path} -> {kind_name.removeprefix('builtins.')}: {error}"
    if not chain:
        kind = kind_of(culprit) if culprit is not None else None
        return detail, (_fix(kind, culprit) if kind else GENERIC_FIX)
    root_path, root = chain[0]
    label = root_path.rsplit(", ", 1)[-1]  # "local 'client'", "global 'LOG'"
    known = next(((p, o, k) for p, o in chain if (k := kind_of(o)) is not None), None)
    if known is None:
        head = f"{label} is {article(user_type_name(type(root)))}, which cannot be saved"
        return f"{head}: {detail}", _adapter_fix(chain)
    where, obj, kind = known
    what = kind.name(obj)
    if obj is root:
        head = f"{label} is {what}, which cannot be saved"
    else:
        inner = where[len(root_path) :] if where.startswith(root_path) else where
        head = (
            f"{label} ({article(user_type_name(type(root)))}) holds {what} at "
            f"{label}{inner}, which cannot be saved"
        )
    return f"{head}: {detail}", _fix(kind, obj)


def _installed_library(t: type) -> bool:
    """Whether t comes from an installed third-party package (its top-level module lives
    in site-packages), not the standard library, snapstate or the agent's own code."""
    top = t.__module__.split(".")[0]
    if top in sys.stdlib_module_names or top == "snapstate" or "<locals>" in t.__qualname__:
        return False
    path = str(getattr(sys.modules.get(top), "__file__", None) or "")
    return any(path.startswith(d) for d in _site_dirs())


def _site_dirs() -> tuple[str, ...]:
    if not _SITE:
        paths = sysconfig.get_paths()
        _SITE.extend(
            {paths["purelib"], paths["platlib"], *getattr(site, "getsitepackages", list)()}
        )
    return tuple(_SITE)


_SITE: list[str] = []


def _adapter_fix(chain: list[tuple[str, object]]) -> str:
    """The generic fix, with a one-line register_adapter example for the innermost library
    object on the path (a framework's object the user cannot change)."""
    library = [o for _, o in chain if _installed_library(type(o))]
    if not library:
        return GENERIC_FIX
    name = user_type_name(type(library[-1]))
    return (
        f"{GENERIC_FIX} For {article(name)} the library made: "
        f"snapstate.register_adapter({name}, lambda obj: (make_it_again, (obj.setting,)), "
        "subclasses=True), where make_it_again(setting) builds an equal object."
    )


def _fix(kind: Kind, obj: object) -> str | None:
    return kind.fix(obj) if callable(kind.fix) else kind.fix


# ------------------------------------------------------------------------ built-in kinds
def _type_is(noun: str) -> Callable[[object], str]:
    """'a ThreadPoolExecutor'-style name with the class the user wrote."""
    return lambda obj: f"{article(noun)} ({user_type_name(type(obj))})"


def _client(obj: object) -> str:
    name = user_type_name(type(obj))
    return article(name) if name.endswith(("Client", "Session")) else f"{article(name)} client"


register_kind(
    "asyncio.events.AbstractEventLoop",
    "an asyncio event loop",
    "An idle event loop is saved (a new one comes back), but work scheduled on one "
    "cannot be restored: let it finish, or close it (loop.close()) before snapshot() "
    "and create a new one after it, or create it after the snapshot (asyncio.run() in "
    "a function called after snapshot()).",
)
_EXECUTOR_FIX = (
    "Work running in its threads or processes cannot be restored: wait for "
    "its futures before snapshot(), or shut it down (executor.shutdown(), or "
    "leave its `with` block) and create a new one after it."
)
# An idle or shut-down ThreadPoolExecutor is saved (resources._stdlib); the refusal of a
# busy one says to wait for its futures.
register_kind("concurrent.futures.thread.ThreadPoolExecutor", "a ThreadPoolExecutor", None)
register_kind(
    "concurrent.futures.process.ProcessPoolExecutor", "a ProcessPoolExecutor", _EXECUTOR_FIX
)
register_kind(
    "concurrent.futures._base.Executor", _type_is("concurrent.futures executor"), _EXECUTOR_FIX
)
register_kind("concurrent.futures._base.Future", "a concurrent.futures Future", None)
register_kind(
    "logging.Handler",
    _type_is("logging handler"),
    "snapstate saves stream and file handlers by their settings, and this handler "
    "holds something it cannot save: remove it from its logger before snapshot() "
    "(logger.removeHandler(handler)) and add a new one after it, or create it in a "
    "function called after the snapshot.",
)


def _logger_fix(logger: object) -> str:
    """A logger is saved by name with its level and handlers (resources._stdlib): one
    made with logging.Logger(name) cannot be found by name; otherwise a handler failed."""
    import logging

    name = getattr(logger, "name", "name")
    if not isinstance(logger, logging.RootLogger) and logging.getLogger(name) is not logger:
        return (
            f"Create the logger with logging.getLogger({name!r}) instead of "
            f"logging.Logger({name!r}): a logger is saved by its name and found again "
            "with logging.getLogger() after a restore."
        )
    return (
        "A logger is saved with its level and handlers, and one of its handlers cannot "
        "be saved: remove that handler from the logger before snapshot() "
        "(logger.removeHandler(handler)) and add a new one after it."
    )


register_kind(
    "logging.Logger",
    lambda obj: f"the logger {getattr(obj, 'name', None)!r} (logging.Logger)",
    _logger_fix,
)
register_kind(
    "socket.socket",
    "a socket",
    "Close it before snapshot() and connect again after it, or open the connection "
    "through snapstate.resource(factory), which reopens it after a restore.",
)
register_kind(
    "threading.Thread",
    "a thread",
    "A running thread cannot be restored: join it (thread.join()) before "
    "snapshot() and start a new one after it, or start it after the snapshot.",
)
register_kind(
    "subprocess.Popen",
    "a subprocess",
    "A running process cannot be restored: wait for it (proc.wait()) before "
    "snapshot(), or start it after the snapshot.",
)
# Only a held lock is refused, and its adapter's error says to release it.
register_kind("_thread.lock", "a lock (threading.Lock)", None)
register_kind("_thread.RLock", "a lock (threading.RLock)", None)
register_kind(
    "_io._IOBase",
    _type_is("file object"),
    "Open the file by its path with open(path) (reopened at its position after a "
    "restore), or through snapstate.resource(factory).",
)
# Their own refusals say what to do (await it, run it to the end, commit, fetch...).
for _builtin, _noun in (
    ("coroutine", "a coroutine"),
    ("generator", "a generator"),
    ("async_generator", "an async generator"),
):
    register_kind(f"builtins.{_builtin}", _noun, None)
register_kind("sqlite3.Connection", "a sqlite3 connection", None)  # the error says what to do
register_kind("sqlite3.Cursor", "a sqlite3 cursor", None)
# resources._numpy's refusals end with the fix for arrays (copy it deliberately...).
register_kind("numpy.ndarray", _type_is("numpy array"), None)
_CLIENT_LIBRARIES = ("openai", "anthropic", "httpx", "httpx2", "requests")
register_kind(
    lambda t: any(
        c.__module__.split(".")[0] in _CLIENT_LIBRARIES
        and c.__name__.endswith(("Client", "OpenAI", "Anthropic", "Session"))
        for c in t.__mro__
    ),  # SDK clients and user subclasses
    _client,
    "Create the client after the snapshot, or make it with "
    "snapstate.resource(lambda: ...) so it is created again after a restore, or "
    "teach snapstate to rebuild it from its configuration "
    "(snapstate.register_adapter).",
)
register_kind(
    lambda t: (
        t.__name__ == "Response" and t.__module__.split(".")[0] in ("httpx", "httpx2", "requests")
    ),
    _type_is("HTTP response"),
    "Read the body (response.read()) or leave its `with client.stream(...)` block "
    "before snapshot(): a response still streaming cannot be restored.",
)
