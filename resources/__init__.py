"""snapstate.resources: handles closed before a snapshot and reopened after a restore
(resource()), and the adapters that save open files, sqlite3 connections, HTTP
clients and temporary directories without wrapping."""

# Adapters of optional libraries, registered with register_optional (loaded once the
# agent imported the library): numpy views, openai / anthropic clients.
from . import _llm, _numpy  # noqa: F401
