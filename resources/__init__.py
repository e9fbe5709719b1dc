"""snapstate.resources: closing handles before a snapshot and reopening them after restore."""
