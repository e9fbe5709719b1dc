"""snapstate.resources: handles closed before a snapshot and reopened after a restore
(resource()), and the adapters that save open files, sqlite3 connections, HTTP
clients and temporary directories without wrapping."""

from . import _llm  # noqa: E402,F401  (registers the openai / anthropic adapters, loaded on use)
