"""A module imported from the agent's own directory: its globals are the agent's."""

REGISTRY = []
SETTINGS = {"mode": "initial"}


def register(name):
    REGISTRY.append(name)
    return len(REGISTRY)
