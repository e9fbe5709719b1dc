"""A library outside the agent's directory (put on PYTHONPATH by
tests/test_python_objects.py) that keeps a module-level ContextVar, as libraries do (a
current-tenant variable read by the library's own functions)."""

import contextvars

CURRENT_TENANT = contextvars.ContextVar("current_tenant", default=None)


def current_tenant():
    return CURRENT_TENANT.get()


class Tracer:
    """A library class keeping its ContextVar as a class attribute."""

    current = contextvars.ContextVar("tracer_current", default=None)


_HIDDEN = {"var": contextvars.ContextVar("hidden", default="unset")}


def hidden_var():
    """A ContextVar the library keeps in a private dict (no module or class attribute)."""
    return _HIDDEN["var"]
