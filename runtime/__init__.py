"""snapstate.runtime: the engine (jobs in greenlets, snapshot(), frame capture and
restore). Internals live in _private modules; the public names are re-exported by
the `snapstate` facade."""
