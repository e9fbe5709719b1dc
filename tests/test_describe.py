"""Refusals speak the user's language (serializers/_describe.py): the object the user
knows is named as they wrote it, and the fix fits that kind of object."""

from __future__ import annotations

import importlib
import socket
import threading

import pytest

from snapstate.serializers import _describe, _pickler

LOCAL = "task main, frame main() at agent.py:3, local 'client'"


@pytest.mark.parametrize(
    "module, cls, kwargs",
    [
        ("openai", "OpenAI", {"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"}),
        ("openai", "AsyncOpenAI", {"api_key": "sk-test", "base_url": "http://127.0.0.1:9/v1"}),
        (
            "openai",
            "AzureOpenAI",
            {
                "api_key": "sk-test",
                "api_version": "2024-06-01",
                "azure_endpoint": "http://127.0.0.1:9",
            },
        ),
    ],
)
def test_sdk_client_is_named_as_the_user_wrote_it(module, cls, kwargs):
    """An SDK client refused for an internal lock is named "local 'client' is an
    openai.OpenAI client" (not openai._client.OpenAI, not the lock), with the fix for a
    client; the internal path follows."""
    lib = importlib.import_module(module)  # the integrations extra installs it
    client = getattr(lib, cls)(**kwargs)
    try:
        inner = client._client
        path = LOCAL + "._client._cookies_lock"
        error = _pickler.UnpicklableError(
            path,
            threading.RLock(),
            "a lock is held",
            [(LOCAL, client), (LOCAL + "._client", inner)],
        )
        message, fix = str(error), error.fix
    finally:
        if cls.startswith("Async"):
            import asyncio

            asyncio.run(client.close())
        else:
            client.close()
    assert message.startswith(
        f"local 'client' is an {module}.{cls} client, which cannot be "
        f"saved: {path} -> _thread.RLock: a lock is held"
    ), message
    assert fix.startswith("Create the client after the snapshot")


class VectorStore:
    def __init__(self):
        self.conn = socket.socket()


def test_adapters_and_users_register_their_own_kinds():
    """register_kind gives a type of one's own a user-level name and fix: the refusal
    names it (held in a local, or inside another object) before the internal path."""
    _describe.register_kind(
        f"{__name__}.VectorStore",
        "a vector store",
        "Close the store before snapshot() and open it again after.",
    )
    store = VectorStore()
    try:
        with pytest.raises(_pickler.UnpicklableError) as direct:
            _pickler.dumps(store, roots=lambda: [("local 'store'", store)])
        with pytest.raises(_pickler.UnpicklableError) as nested:
            _pickler.dumps([store], roots=lambda: [("global 'STORES'", [store])])
    finally:
        store.conn.close()
        del _describe._BY_CLASS[f"{__name__}.VectorStore"]
        _describe._CACHE.clear()
    assert str(direct.value).startswith(
        "local 'store' is a vector store, which cannot be saved: local 'store'.conn -> "
        "socket.socket"
    )
    assert direct.value.fix == "Close the store before snapshot() and open it again after."
    assert str(nested.value).startswith(
        "global 'STORES' (a list) holds a vector store at global 'STORES'[0], which cannot "
        "be saved: global 'STORES'[0].conn -> socket.socket"
    )


def test_unknown_objects_get_the_generic_fix_with_their_type():
    """An object of no known kind is named with its type and gets the generic advice."""

    class Opaque:
        def __reduce__(self):
            raise TypeError("cannot pickle Opaque")

    obj = {"x": Opaque()}
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps(obj, roots=lambda: [("local 'state'", obj)])
    assert str(info.value).startswith(
        "local 'state' is a dict, which cannot be saved: local 'state'['x'] -> "
    )
    assert info.value.fix == _describe.GENERIC_FIX


def test_subclass_of_a_library_client_is_named_with_the_users_class():
    """A user's subclass of httpx.Client is a client too, named by the user's class."""
    import httpx

    class ApiClient(httpx.Client):
        pass

    client = ApiClient()
    try:
        error = _pickler.UnpicklableError(
            LOCAL + "._transport", threading.RLock(), "held", [(LOCAL, client)]
        )
    finally:
        client.close()
    assert str(error).startswith(
        "local 'client' is a test_describe.test_subclass_of_a_library_client_is_named_with_the"
        "_users_class.<locals>.ApiClient, which cannot be saved: "
    )
    assert error.fix.startswith("Create the client after the snapshot")
