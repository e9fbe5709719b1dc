"""Type checks of resource(), register_adapter() and credential() as users call them:
run by mypy --strict (warn_unused_ignores), never executed. A wrong use is marked with
the error it must raise: if the error goes away, the unused ignore fails the check.

    MYPYPATH=<a non-editable install of snapstate> \
        mypy --strict --follow-imports=silent tests/typing/resources.py
"""

from __future__ import annotations

import sqlite3
from typing import Any, assert_type

from snapstate import credential, register_adapter, resource
from snapstate.resources._secrets import Credential


# ------------------------------------------------------------------------ resource()
def connect() -> sqlite3.Connection:
    return sqlite3.connect("app.db")


def close_connection(conn: sqlite3.Connection) -> None:
    conn.close()


conn = resource(connect, name="warehouse")
assert_type(conn, sqlite3.Connection)  # the handle stands in for what the factory opens
conn.execute("SELECT 1")
conn.execute(42)  # type: ignore[arg-type]
conn.no_such_method()  # type: ignore[attr-defined]

log = resource(lambda: open("log.txt", "a"))
log.write("line\n")
log.write(b"bytes")  # type: ignore[arg-type]

resource(connect, close=close_connection)
resource(connect, close=lambda c: c.close())
resource(connect, close=lambda f: f.flush())  # type: ignore[attr-defined]
resource(connect, "warehouse")  # type: ignore[call-arg, arg-type]
resource(sqlite3.connect("app.db"))  # type: ignore[arg-type]
resource(connect, name=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ register_adapter()
class WeatherClient:
    def __init__(self, api_key: str, base_url: str, retries: int) -> None:
        self.api_key, self.base_url, self.retries = api_key, base_url, retries


def reduce_weather(client: WeatherClient) -> tuple[Any, ...]:
    return (
        type(client),
        (credential(client.api_key, env=("WEATHER_KEY",)), client.base_url, client.retries),
    )


def reduce_connection(conn: sqlite3.Connection) -> tuple[Any, ...]:
    return (sqlite3.connect, ("app.db",))


register_adapter(WeatherClient, reduce_weather, subclasses=True)
register_adapter(WeatherClient, lambda c: (WeatherClient, (c.api_key, c.base_url, c.retries)))
register_adapter(WeatherClient, reduce_connection)  # type: ignore[arg-type]
register_adapter(WeatherClient, lambda c: c.missing)  # type: ignore[attr-defined]
register_adapter(WeatherClient, lambda c: "WeatherClient")  # type: ignore[arg-type,return-value]
register_adapter(WeatherClient, reduce_weather, True)  # type: ignore[call-arg]
register_adapter(WeatherClient("k", "u", 1), reduce_weather)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ credential()
def key_or_none() -> str | None:
    return None


assert_type(credential("sk-123", env=("OPENAI_API_KEY",)), Credential)
assert_type(credential(None), None)
assert_type(credential(key_or_none()), Credential | None)
credential(b"sk-123")  # type: ignore[call-overload]
credential("sk-123", env="OPENAI_API_KEY")  # type: ignore[call-overload]
