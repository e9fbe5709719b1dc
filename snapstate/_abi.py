"""The names snapshot files use for snapstate's own functions and classes: never changed.

A snapshot payload is a pickle, and a pickle names every function and class it needs
by module and name. Snapstate's private helpers (the reconstructors its reducers
return, the records of frames and code) would otherwise be named by the private
module that implements them, so moving or renaming one would break every file ever
written. Instead each of them is named `snapstate._abi.<stable name>`:

  - `NAMES` below maps each stable name to where it lives now ("module:attribute").
    Only this table changes when an implementation moves; a stable name is never
    renamed or removed (tests/test_pinned_names.py pins the list).
  - `@pinned("new_cursor")` on the implementation (or `NULL = pinned("NULL")(_Null())`
    for a marker object) checks that the table points at it and sets its `__module__`
    and `__qualname__` to `snapstate._abi` and the stable name, so pickle writes
    `snapstate._abi new_cursor`.
  - Loading a file, `snapstate._abi.new_cursor` is looked up through this module's
    `__getattr__`, which imports the implementation by its path in the table.

Public API objects keep pickling as `snapstate.<name>` (snapstate/__init__.py). The
pickler refuses any other snapstate global when it takes a snapshot, and the loader
refuses one in a file (`check_global`), so a name outside these two sets never
reaches a file. This module imports nothing of snapstate's at import time.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import TypeVar

__all__ = ["NAMES", "pinned", "is_pinned_global", "check_global", "UnpinnedGlobal"]

_T = TypeVar("_T")

# stable name -> "module:attribute" of the current implementation. Add entries; never
# rename or remove one (an old snapshot file names it).
NAMES: dict[str, str] = {
    # the freeze engine: frames, code identities, the NULL slot marker, generators
    "FrameRecord": "snapstate.runtime._frames:FrameRecord",
    "CodeRef": "snapstate.serializers._codeid:CodeRef",
    "NULL": "snapstate.runtime._layout:NULL",
    "rebuild_generator": "snapstate.runtime._morph:rebuild_generator",
    "rebuild_async_step": "snapstate.runtime._morph:rebuild_async_step",
    "process_state": "snapstate.runtime._process:_loaded",
    "redacted_secret": "snapstate.runtime._effect_args:_redacted",
    "task_handle": "snapstate.runtime._tasks:_task_handle",
    # async jobs (runtime/_async_pickle.py): asyncio tasks, futures, gathers, the job's loop,
    # snapstate's await points
    "async_task": "snapstate.runtime._async_pickle:_task_shell",
    "async_task_state": "snapstate.runtime._async_pickle:_task_state",
    "async_future": "snapstate.runtime._async_pickle:_future_shell",
    "async_future_state": "snapstate.runtime._async_pickle:_future_state",
    "async_gather": "snapstate.runtime._async_pickle:_gathering_shell",
    "async_gather_state": "snapstate.runtime._async_pickle:_gathering_state",
    "async_future_await": "snapstate.runtime._async_pickle:_future_await",
    "async_job_loop": "snapstate.runtime._async_pickle:_job_loop",
    "async_sleep_timer": "snapstate.runtime._async_pickle:_sleep_timer",
    "async_snapshot_point": "snapstate.runtime._async_pickle:_snapshot_point",
    "async_effect_point": "snapstate.runtime._async_pickle:_effect_point",
    "async_wait_point": "snapstate.runtime._async_pickle:_wait_point",
    # the pickler: cells, functions, generators, exceptions, the dill fallback
    "make_cell": "snapstate.serializers._pickler:_make_cell",
    "fill_cell": "snapstate.serializers._pickler:_fill_cell",
    "rebuild_function": "snapstate.serializers._pickler:_rebuild_function",
    "set_function_state": "snapstate.serializers._pickler:_set_function_state",
    "exhausted_generator": "snapstate.serializers._pickler:_exhausted_generator",
    "finished_coroutine": "snapstate.serializers._pickler:_finished_coroutine",
    "set_exception_state": "snapstate.serializers._pickler:_set_exception_state",
    "rebuild_traceback": "snapstate.serializers._pickler:_traceback",
    "from_dill": "snapstate.serializers._pickler:_from_dill",
    # deep graphs (serializers/_deep.py)
    "deep_first": "snapstate.serializers._deep:_first",
    "deep_call_flushed": "snapstate.serializers._deep:_call_flushed",
    "deep_applied": "snapstate.serializers._deep:_applied",
    # objects of library modules saved by reference (serializers/_refs.py)
    "module_string": "snapstate.serializers._refs:module_string",
    "module_attribute": "snapstate.serializers._refs:module_attribute",
    "module_object": "snapstate.serializers._refs:module_object",
    "module_object_setstate": "snapstate.serializers._refs:module_object_setstate",
    # resources: resource() handles, files, sqlite3, temporary files and directories
    "Handle": "snapstate.resources._registry:Handle",
    "reopen_file": "snapstate.resources._adapters:_reopen_file",
    "closed_file": "snapstate.resources._adapters:_closed_file",
    "reopen_sqlite": "snapstate.resources._adapters:_reopen_sqlite",
    "closed_sqlite": "snapstate.resources._adapters:_closed_sqlite",
    "reopen_tempdir": "snapstate.resources._adapters:_reopen_tempdir",
    "reopen_named_temp": "snapstate.resources._adapters:_reopen_named_temp",
    "closed_named_temp": "snapstate.resources._adapters:_closed_named_temp",
    # standard library objects (resources/_stdlib.py)
    "new_log_handler": "snapstate.resources._stdlib:_new_handler",
    "set_log_handler_state": "snapstate.resources._stdlib:_set_handler_state",
    "set_logger_state": "snapstate.resources._stdlib:_set_logger_state",
    "new_cursor": "snapstate.resources._stdlib:_new_cursor",
    "new_csv_writer": "snapstate.resources._stdlib:_new_csv_writer",
    "new_csv_writer_on_std": "snapstate.resources._stdlib:_new_csv_writer_on_std",
    "new_thread_pool": "snapstate.resources._stdlib:_new_thread_pool",
    # the interpreter's machinery inside library objects (resources/_python.py)
    "new_contextvar": "snapstate.resources._python:_new_contextvar",
    "new_context": "snapstate.resources._python:_new_context",
    "new_weakref": "snapstate.resources._python:_new_ref",
    "new_weak_method": "snapstate.resources._python:_new_weak_method",
    "dead_weakref": "snapstate.resources._python:_dead_ref",
    "new_weak_container": "snapstate.resources._python:_new_weak_container",
    "new_thread_local": "snapstate.resources._python:_new_local",
    "new_event_loop": "snapstate.resources._python:_new_loop",
    "new_finalize": "snapstate.resources._python:_new_finalize",
    "class_attribute": "snapstate.resources._python:_class_attribute",
    "event_loop_settings": "snapstate.resources._python:_loop_settings",
    "DECIMAL_CONTEXT": "snapstate.resources._python:_DECIMAL",
    "dead_finalize": "snapstate.resources._python:_dead_finalize",
    "credential_from_env_bytes": "snapstate.resources._secrets:_from_env_bytes",
    "credential_from_env_bytearray": "snapstate.resources._secrets:_from_env_bytearray",
    # objects pickle's default way cannot rebuild (serializers/_pickler.py)
    "bare_new": "snapstate.serializers._pickler:bare_new",
    "apply_default_state": "snapstate.serializers._pickler:apply_default_state",
    # framework objects whose own pickling is not exact (resources/_frameworks.py)
    "pydantic_rebuild_secret": "snapstate.resources._frameworks:_rebuild_secret",
    "new_instance": "snapstate.resources._frameworks:_new_instance",
    "wrapt_rebuild_proxy": "snapstate.resources._frameworks:_rebuild_proxy",
    "tiktoken_rebuild_encoding": "snapstate.resources._frameworks:_rebuild_encoding",
    "mcp_rebuild_codec": "snapstate.resources._frameworks:_rebuild_mcp_codec",
    "crypto_private_key": "snapstate.resources._frameworks:_load_private_key",
    "crypto_public_key": "snapstate.resources._frameworks:_load_public_key",
    # credentials (resources/_secrets.py)
    "credential_from_env": "snapstate.resources._secrets:_from_env",
    "credential_unseal": "snapstate.resources._secrets:_unseal",
    # numpy views (resources/_numpy.py)
    "numpy_rebuild_view": "snapstate.resources._numpy:rebuild_view",
    "numpy_rebuild_owner": "snapstate.resources._numpy:rebuild_owner",
    "numpy_set_subclass_state": "snapstate.resources._numpy:_set_subclass_state",
    # HTTP clients (resources/_http.py)
    "http_join": "snapstate.resources._http:_join",
    "http_join_bytes": "snapstate.resources._http:_join_bytes",
    "http_latin1": "snapstate.resources._http:_latin1",
    "http_utf8": "snapstate.resources._http:_utf8",
    "http_rebuild_state": "snapstate.resources._http:rebuild_state",
    "http_unseal_object": "snapstate.resources._http:_unseal_object",
    "http_rebuild_transport": "snapstate.resources._http:_rebuild_transport",
    "http_new_shell": "snapstate.resources._http:_new_shell",
    "http_configure_client": "snapstate.resources._http:_configure_client",
    "http_rebuilt_response": "snapstate.resources._http:_rebuilt_response",
    "http_recorded": "snapstate.resources._http_record:_recorded",
    "requests_rebuild_headers": "snapstate.resources._requests:_rebuild_headers",
    "requests_configure_session": "snapstate.resources._requests:_configure_session",
    "requests_rebuilt_response": "snapstate.resources._requests:_rebuilt_requests_response",
    "requests_rebuilt_digest": "snapstate.resources._requests:_rebuilt_requests_digest",
    "requests_configure_adapter": "snapstate.resources._requests:_configure_http_adapter",
    # LLM SDK clients (resources/_llm.py)
    "openai_rebuild_client": "snapstate.resources._llm:_rebuild_openai",
    "anthropic_rebuild_client": "snapstate.resources._llm:_rebuild_anthropic",
    "llm_rebuild_stream": "snapstate.resources._llm:_rebuild_stream",
    "llm_rebuild_raw_response": "snapstate.resources._llm:_rebuild_raw_response",
}


def _split(path: str) -> tuple[str, str]:
    module, _, attr = path.partition(":")
    return module, attr


def __getattr__(name: str) -> object:
    """`snapstate._abi.<stable name>`: the implementation, imported by its path."""
    path = NAMES.get(name)
    if path is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _split(path)
    obj: object = getattr(importlib.import_module(module), attr)
    globals()[name] = obj
    return obj


def pinned(name: str) -> Callable[[_T], _T]:
    """Name a function or class (or a marker object whose class's __reduce__ returns
    `name`) `snapstate._abi.<name>` in snapshot files. The table must point at it:
    a mismatch is an import-time error, so a moved implementation whose table entry
    was not updated is caught by any test."""

    def register(obj: _T) -> _T:
        path = NAMES.get(name)
        if path is None:
            raise RuntimeError(f"snapstate._abi has no stable name {name!r}; add it to NAMES")
        module, attr = _split(path)
        if isinstance(obj, (types.FunctionType, type)):
            where = (obj.__module__, obj.__name__)
            if where != (module, attr):
                raise RuntimeError(
                    f"snapstate._abi.NAMES[{name!r}] is {path!r}, but the object pinned "
                    f"under that name is {where[0]}:{where[1]}; update the table"
                )
            obj.__module__, obj.__qualname__ = __name__, name
        else:  # a marker object: its class names it by its __reduce__ (a str)
            kind = type(obj)
            if kind.__module__ != module or obj.__reduce__() != name:
                raise RuntimeError(
                    f"snapstate._abi.NAMES[{name!r}] is {path!r}, but the object pinned under "
                    f"that name is a {kind.__module__}.{kind.__qualname__} that does not "
                    f"reduce to {name!r}; update the table"
                )
            kind.__module__ = __name__
        globals()[name] = obj
        return obj

    return register


def is_pinned_global(module: str, name: str) -> bool:
    """Whether a snapshot may name `module.name`: anything outside snapstate; of
    snapstate's, only its public API (`snapstate.<name>` in snapstate.__all__) and the
    stable names here. `name` may be dotted (a method of such a class)."""
    if module != "snapstate" and not module.startswith("snapstate."):
        return True
    head = name.partition(".")[0]
    if module == __name__:
        return head in NAMES
    if module == "snapstate":
        public = importlib.import_module("snapstate").__all__
        return head in public
    return False


class UnpinnedGlobal(Exception):
    """A snapstate function or class outside the public API and snapstate._abi."""


def check_global(module: str, name: str, *, saving: bool) -> None:
    """Raise UnpinnedGlobal when a snapshot would name (saving) or names (loading)
    a snapstate object by a path that is not pinned."""
    if is_pinned_global(module, name):
        return
    if saving:
        raise UnpinnedGlobal(
            f"{module}.{name} is snapstate's internal code and cannot be saved by "
            f"reference: a snapshot may name only snapstate's public API (snapstate.*) and "
            "the pinned names of snapstate._abi. If the agent holds it, keep it out of the "
            "job's state; if snapstate saves it, pin it (snapstate/_abi.py)"
        )
    raise UnpinnedGlobal(
        f"the snapshot names {module}.{name}, snapstate's internal code, which snapshot "
        "files never name (only snapstate's public API and snapstate._abi); the file was "
        "not written by a released snapstate"
    )
