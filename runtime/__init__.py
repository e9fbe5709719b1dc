"""snapstate.runtime: the engine (jobs in greenlets, snapshot(), frame capture and
restore). Internals live in _private modules; the public names are re-exported by
the `snapstate` facade."""

# The runtime's reducers and restore stubs, registered in the pickler's table
# (serializers/_dispatch.py) whenever the runtime is imported.
from . import _reducers  # noqa: F401
