"""A third-party-style library (outside the agent's directory, found on PYTHONPATH)
with a private sentinel compared by identity, as libraries write them."""

_sentinel = object()
_registry = {}


class Box:
    """A library object the agent creates (not module-level: saved by value)."""

    def __init__(self, value=_sentinel):
        self.value = value

    def is_empty(self):
        return self.value is _sentinel


def lookup(key, default=_sentinel):
    """The value registered for key; KeyError when absent and no default given."""
    value = _registry.get(key, _sentinel)
    if value is _sentinel:
        if default is _sentinel:
            raise KeyError(key)
        return default
    return value
