"""Pinned names: every snapstate function or class a snapshot file names is named
`snapstate.<public name>` or `snapstate._abi.<stable name>` (snapstate/_abi.py), never
by the private module that implements it, so moving or renaming an implementation never
breaks an old file. The list of stable names only grows: a name is never renamed or
removed (an old file names it)."""

from __future__ import annotations

import ast
import importlib
import io
import pickle
import pkgutil
import types
from pathlib import Path

import pytest

import snapstate
from snapstate import IncompatibleSnapshot, _abi
from snapstate.runtime._job import runtime_versions
from snapstate.serializers import _pickler

# Add names at the end of a release's list; never change or remove one.
STABLE_NAMES = [
    "CodeRef",
    "DECIMAL_CONTEXT",
    "FrameRecord",
    "Handle",
    "NULL",
    "anthropic_rebuild_client",
    "apply_default_state",
    "async_effect_point",
    "async_future",
    "async_future_await",
    "async_future_state",
    "async_gather",
    "async_gather_state",
    "async_job_loop",
    "async_sleep_timer",
    "async_snapshot_point",
    "async_task",
    "async_task_state",
    "async_wait_point",
    "bare_new",
    "class_attribute",
    "closed_file",
    "closed_named_temp",
    "closed_sqlite",
    "credential_from_env",
    "credential_from_env_bytearray",
    "credential_from_env_bytes",
    "credential_unseal",
    "crypto_private_key",
    "crypto_public_key",
    "dead_finalize",
    "dead_weakref",
    "deep_applied",
    "deep_call_flushed",
    "deep_first",
    "event_loop_settings",
    "exhausted_generator",
    "fill_cell",
    "finished_coroutine",
    "from_dill",
    "http_configure_client",
    "http_join",
    "http_join_bytes",
    "http_latin1",
    "http_new_shell",
    "http_rebuild_state",
    "http_rebuild_transport",
    "http_rebuilt_response",
    "http_recorded",
    "http_unseal_object",
    "http_utf8",
    "llm_rebuild_raw_response",
    "llm_rebuild_stream",
    "make_cell",
    "mcp_rebuild_codec",
    "module_attribute",
    "module_object",
    "module_object_setstate",
    "module_string",
    "new_context",
    "new_contextvar",
    "new_csv_writer",
    "new_csv_writer_on_std",
    "new_cursor",
    "new_event_loop",
    "new_finalize",
    "new_instance",
    "new_log_handler",
    "new_thread_local",
    "new_thread_pool",
    "new_weak_container",
    "new_weak_method",
    "new_weakref",
    "numpy_rebuild_owner",
    "numpy_rebuild_view",
    "numpy_set_subclass_state",
    "openai_rebuild_client",
    "process_state",
    "pydantic_rebuild_secret",
    "rebuild_async_step",
    "rebuild_function",
    "rebuild_generator",
    "rebuild_traceback",
    "redacted_secret",
    "reopen_file",
    "reopen_named_temp",
    "reopen_sqlite",
    "reopen_tempdir",
    "requests_configure_adapter",
    "requests_configure_session",
    "requests_rebuild_headers",
    "requests_rebuilt_digest",
    "requests_rebuilt_response",
    "set_exception_state",
    "set_function_state",
    "set_log_handler_state",
    "set_logger_state",
    "task_handle",
    "tiktoken_rebuild_encoding",
    "wrapt_rebuild_proxy",
]

# snapstate classes with a __reduce__ of their own. One whose __reduce__ returns a str
# (pickled as a global of its class's module) must be pinned like NULL's class; the
# others return a reduce tuple whose callable is itself pinned or public.
OWN_REDUCE = {
    "snapstate.Secret",
    "snapstate.Task",
    "snapstate.SnapstateError",
    "snapstate._abi.Handle",
    "snapstate._abi._Null",
    "snapstate.resources._http.SavedResponse",
    "snapstate.resources._http.Part",
    "snapstate.resources._http._SealedBytes",
    "snapstate.resources._http_record.Recorded",
    "snapstate.runtime._http_record._HttpPoint",
    "snapstate._abi._Decimal",
    "snapstate.resources._secrets.Credential",
    "snapstate.resources._secrets.Sealed",
    "snapstate.runtime._process.ProcessState",
    "snapstate.serializers._sealing.KeyedDigest",
}


def _modules():
    for package in ("snapstate.runtime", "snapstate.serializers", "snapstate.resources"):
        root = importlib.import_module(package)
        for info in pkgutil.iter_modules(root.__path__):
            if not info.name.startswith("_cpython3"):
                yield importlib.import_module(f"{package}.{info.name}")


def test_table_equals_the_list():
    """The table holds exactly the stable names above (appending is how it changes)."""
    assert sorted(_abi.NAMES) == STABLE_NAMES


@pytest.mark.parametrize("name", STABLE_NAMES)
def test_every_name_resolves_and_pickles_by_it(name):
    """snapstate._abi.<name> is the object the table points at, it carries the stable
    name (so pickle writes `snapstate._abi <name>`), and it pickles and loads as itself
    with both pickle and snapstate's pickler."""
    module, _, attr = _abi.NAMES[name].partition(":")
    obj = getattr(importlib.import_module(module), attr)
    assert getattr(_abi, name) is obj
    if isinstance(obj, (types.FunctionType, type)):
        assert (obj.__module__, obj.__qualname__) == ("snapstate._abi", name)
    else:
        assert type(obj).__module__ == "snapstate._abi" and obj.__reduce__() == name
    plain = pickle.dumps(obj, protocol=5)
    assert b"snapstate._abi" in plain and name.encode() in plain
    for private in (b"snapstate.runtime", b"snapstate.serializers", b"snapstate.resources"):
        assert private not in plain
    assert pickle.loads(plain) is obj
    assert _pickler.loads(_pickler.dumps(obj)) is obj


def test_no_stable_name_shadows_the_module():
    """A stable name never collides with _abi's own helpers."""
    own = {"NAMES", "pinned", "is_pinned_global", "check_global", "UnpinnedGlobal"}
    assert not own & set(_abi.NAMES)


def test_abi_imports_nothing_of_snapstate():
    """snapstate/_abi.py imports no snapstate module when it is imported (the
    implementations are imported lazily, by the path in the table)."""
    tree = ast.parse(Path(_abi.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("snapstate")
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("snapstate") for a in node.names)


def test_classes_with_their_own_reduce():
    """The snapstate classes that define __reduce__ are the known ones (a new one: check
    that it reduces to a pinned callable, or pin it if its __reduce__ returns a str)."""
    found = set()
    for module in _modules():
        for obj in vars(module).values():
            if isinstance(obj, type) and "__reduce__" in vars(obj):
                if obj.__module__.startswith("snapstate"):
                    found.add(f"{obj.__module__}.{obj.__qualname__}")
    assert found == OWN_REDUCE


def test_no_private_snapstate_function_is_saved_by_reference():
    """Every module-level snapstate function or class a pickle could name by reference
    is public, pinned, or refused by the pickler at the snapshot with a message that
    says so (never written to a file where moving it would break the file)."""
    for module in _modules():
        for attr, obj in vars(module).items():
            if not isinstance(obj, (types.FunctionType, type)):
                continue
            if not obj.__module__.startswith("snapstate") or obj.__qualname__ != attr:
                continue
            if _abi.is_pinned_global(obj.__module__, obj.__qualname__):
                continue
            with pytest.raises(_pickler.UnpicklableError, match="cannot be saved by reference"):
                _pickler.dumps({"x": obj})


def test_pickler_refuses_an_unpinned_global():
    """A snapstate internal held by the agent is refused at the snapshot, naming it and
    where it is; never the dill fallback."""
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"versions": runtime_versions})
    message = str(info.value)
    assert "snapstate.runtime._job.runtime_versions" in message
    assert "value['versions']" in message
    assert "snapstate._abi" in message
    assert types.FunctionType not in _pickler._DILL_TYPES


def test_public_names_pickle_as_snapstate():
    """The public API keeps its `snapstate.<name>` path (snapstate/__init__.py)."""
    for obj in (snapstate.snapshot, snapstate.effect, snapstate.SnapshotError):
        assert b"snapstate._abi" not in pickle.dumps(obj, protocol=5)
        assert _pickler.loads(_pickler.dumps(obj)) is obj


@pytest.mark.parametrize(
    "module, name",
    [
        ("snapstate.runtime._job", "runtime_versions"),
        ("snapstate.serializers._pickler", "_make_cell"),  # the pre-pinning path
        ("snapstate._abi", "no_such_name"),
        ("snapstate", "_fixup_module_metadata"),
        ("snapstate.resources._stdlib", "os"),
    ],
)
def test_loader_refuses_an_unpinned_global(module, name):
    """A file naming a snapstate global outside the public API and snapstate._abi is
    refused when it is loaded (IncompatibleSnapshot, naming it), before anything of it
    is imported or called."""
    data = b"\x80\x04" + f"c{module}\n{name}\n".encode() + b"."
    with pytest.raises(IncompatibleSnapshot, match=f"names {module}.{name}"):
        _pickler.loads(data)
    with pytest.raises(IncompatibleSnapshot):
        _pickler.loads(bytearray(data))


def test_loader_streams_large_payloads():
    """The checked loader reads from the buffer (no copy) and gives the same objects."""
    value = {"blob": b"x" * (3 << 20), "list": list(range(1000)), "s": "é" * 10}
    data = bytearray(pickle.dumps(value, protocol=5))
    assert _pickler.loads(data) == value
    assert _pickler.loads(memoryview(data)) == value
    assert _pickler.loads(io.BytesIO(data).getvalue()) == value
