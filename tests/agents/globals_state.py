"""Module globals mutated before a snapshot come back with their values, and a
frame's reference to a module-level object stays the same object as the global."""

import agent_helpers

from snapstate import snapshot

COUNTER = 0
CACHE = {}
HISTORY = []


def work(key):
    global COUNTER
    COUNTER += 1
    CACHE[key] = COUNTER
    HISTORY.append(key)
    agent_helpers.register(key)
    return COUNTER


def main():
    cache = CACHE  # a local alias of a module-level object
    registry = agent_helpers.REGISTRY
    work("a")
    agent_helpers.SETTINGS["mode"] = "changed"
    snapshot("after-a")
    work("b")
    print("state", COUNTER, CACHE, HISTORY, flush=True)
    print("identity", cache is CACHE, registry is agent_helpers.REGISTRY, flush=True)
    print("helpers", agent_helpers.REGISTRY, agent_helpers.SETTINGS, flush=True)
    snapshot("after-b")
    work("c")
    print("final", COUNTER, sorted(CACHE.items()), cache is CACHE, flush=True)
    return COUNTER
