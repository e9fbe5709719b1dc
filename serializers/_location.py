"""A store's location: a directory (the embedded SQLite store) or a postgresql:// URL."""

from __future__ import annotations

__all__ = ["is_postgres_url", "redact"]


def is_postgres_url(location: str | None) -> bool:
    return bool(location) and str(location).startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """A store URL without its password or query (for messages and listings)."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    return f"{scheme}{sep}{netloc}{slash}{path.split('?', 1)[0]}"
