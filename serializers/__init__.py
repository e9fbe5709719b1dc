"""snapstate.serializers: a frozen job to bytes and back (pickler, snapshot file format)."""
