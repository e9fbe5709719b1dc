"""A sqlite3 connection and an httpx client held across a snapshot keep working after
a restore in a new process. SERVER_URL and DB_PATH come from the environment."""

import os
import sqlite3

import httpx

from snapstate import snapshot


def main():
    db = sqlite3.connect(os.environ["DB_PATH"])
    db.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT)")
    db.commit()
    client = httpx.Client(
        base_url=os.environ["SERVER_URL"],
        headers={"X-Agent": "res"},
        cookies={"session": "s1"},
        timeout=5.0,
    )
    first = client.get("/echo").json()
    db.execute("INSERT INTO notes VALUES (?)", (first["path"],))
    db.commit()
    snapshot("holding-clients")
    second = client.get("/echo").json()
    db.execute("INSERT INTO notes VALUES (?)", (second["path"],))
    db.commit()
    rows = [r[0] for r in db.execute("SELECT body FROM notes")]
    print("rows", rows, "agent header", second["x-agent"], "cookie", second["cookie"], flush=True)
    client.close()
    db.close()
    return len(rows)
