"""tests/test_cli_terminal.py's agent: long and hostile text everywhere the listings
show it (labels, pins, meta, effect arguments, an approval's name and scope, an error
message), spawned tasks with effects, a now() row, then an approval wait. With
TERMINAL_FAIL set it raises an error holding the hostile text instead of waiting."""

import os

from snapstate import effect, gather, now, pin, request_approval, snapshot, spawn

# Markup, a terminal title and screen clear, a bell, a bidi override, \r and \b.
HOSTILE = "[/] [link=http://evil.example]click[/link] \x1b]0;pwned\x07\x1b[2J \u202eevil\u202c \r\b"
LONG = "a label long enough to need more than eighty columns of any terminal by itself " * 2


@effect
def send(to: str, body: str) -> str:
    return f"sent to {to}"


def task(n: int) -> str:
    return send(f"task {n} {HOSTILE}", LONG)


def main() -> str:
    pin(model="gpt " + HOSTILE, prompt=LONG)
    now()
    send("first " + HOSTILE, LONG)
    snapshot(LONG + HOSTILE, meta={"note": HOSTILE})
    gather(spawn(task, 1), spawn(task, 2))
    if os.environ.get("TERMINAL_FAIL"):
        raise ValueError("failed on " + HOSTILE)
    request_approval(
        "po [/] [link=http://evil.example]x[/link] \u202eevil " + LONG, {"note": HOSTILE}
    )
    return "approved"
