"""The SDK specs of resources/_llm.py, against the SDK versions installed: the one loader
registers a refusal for every client class a spec refuses, and a spec knows every
attribute its SDK's constructor sets (an attribute it does not know would be saved as
a subclass's own and put back over the rebuilt client's)."""

from __future__ import annotations

import asyncio
import importlib
import pickle

import pytest

from snapstate.resources import _adapters, _llm

SPECS = {spec.module: spec for spec in (_llm._OPENAI, _llm._ANTHROPIC)}
REFUSED = [
    (spec.module, name, refusal.part)
    for spec in SPECS.values()
    for refusal in spec.refused_classes
    for name in refusal.names
]


@pytest.mark.parametrize("module, name, part", REFUSED)
def test_every_refused_client_class_is_refused_naming_it(module, name, part):
    """An Azure, Bedrock, Vertex, Foundry or module-level client (and a subclass of
    one) is refused by the adapter the loader registered for it: the message names the
    class as the user writes it and what cannot be rebuilt. A class this SDK version
    does not have is skipped."""
    sdk = importlib.import_module(module)
    cls = getattr(sdk, name, None)
    if not isinstance(cls, type):
        pytest.skip(f"{module} {sdk.__version__} has no {name}")
    subclass = type("Mine", (cls,), {"__module__": "app"})
    for klass, shown in ((cls, f"{module}.{name}"), (subclass, "app.Mine")):
        reduce = _adapters.reducer_for(klass)
        assert reduce is not None, klass
        with pytest.raises(pickle.PicklingError) as info:
            reduce(object.__new__(klass))  # the refusal reads nothing off the client
        message = str(info.value)
        assert f"{shown} client" in message and part in message, message
        assert "snapstate.resource()" in message


@pytest.mark.parametrize(
    "module, name, kwargs",
    [
        ("openai", "OpenAI", {"api_key": "sk-test"}),
        ("openai", "AsyncOpenAI", {"api_key": "sk-test"}),
        ("anthropic", "Anthropic", {"api_key": "sk-test"}),
        ("anthropic", "AsyncAnthropic", {"api_key": "sk-test"}),
    ],
)
def test_the_spec_knows_every_attribute_the_constructor_sets(module, name, kwargs):
    """A client of the installed SDK version, its resources touched (client.chat /
    client.messages are cached properties made again after a restore), holds no
    attribute its spec does not know: nothing of the SDK's own is saved as a
    subclass's attribute. Fails when an SDK release adds one: read what it is and add
    it to the spec's `known` (and to its params or attrs if it is configuration)."""
    client = getattr(importlib.import_module(module), name)(**kwargs)
    try:
        _ = client.chat if module == "openai" else client.messages
        assert _llm._extras(client, SPECS[module].known) == {}
    finally:
        if name.startswith("Async"):
            asyncio.run(client.close())
        else:
            client.close()
