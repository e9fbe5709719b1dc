"""`snaprun ui`: the dashboard (docs/ui.md). Parses, checks the store and the deciders'
names, binds the socket, prints the URL with its token and serves runtime/_ui until
Ctrl-C. The web libraries are the `ui` extra's: without them, the command says which
install brings them (exit 2)."""

from __future__ import annotations

import errno
import ipaddress
import secrets
import unicodedata
from pathlib import Path

import click

from ...serializers._home import default_home
from ...serializers._location import is_postgres_url, redact
from ._common import exit_codes, open_home, say, store_option

__all__ = ["ui"]

DEFAULT_PORT = 8765
_MAX_NAME = 200


class _Refused(click.ClickException):
    """A refusal of `snaprun ui` before it serves: exit 2 (usage or invalid input)."""

    exit_code = 2


# Control, format (bidi overrides and isolates, zero-width), separator and surrogate
# characters: the page shows them as escapes, so a name holding one could not be picked.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _check_name(name: str, where: str) -> str:
    name = name.strip()
    if (
        not name
        or len(name) > _MAX_NAME
        or any(unicodedata.category(c) in _UNSAFE_CATEGORIES for c in name)
    ):
        raise click.BadParameter(
            f"{name!r} ({where}): a user is a name of 1 to {_MAX_NAME} characters without "
            "control, format or bidi characters"
        )
    return name


def _users(names: tuple[str, ...], users_file: Path | None) -> tuple[str, ...]:
    """The deciders: every --user NAME, then the names of --users FILE (one a line;
    blank lines and lines starting with # skipped), each once, in order."""
    found = [_check_name(n, "--user") for n in names]
    if users_file is not None:
        try:
            text = users_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read --users {users_file}: {exc}") from None
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                found.append(_check_name(line, f"--users {users_file}, line {number}"))
    return tuple(dict.fromkeys(found))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host header values a request may carry; None (any) when bound to every
    address, whose names the server cannot know."""
    if host in ("0.0.0.0", "::", ""):
        return None
    shown = f"[{host}]" if ":" in host else host
    names = {f"{shown}:{port}"}
    if _loopback(host):
        names |= {f"localhost:{port}", f"127.0.0.1:{port}"} if ":" not in host else set()
    return frozenset(names)


@click.command("ui", epilog=exit_codes(0, 2))
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port (0: any free one; the URL printed names it).",
)
@click.option(
    "--user",
    "user_names",
    multiple=True,
    metavar="NAME",
    help="A person who may decide (repeat it); recorded as `by`.",
)
@click.option(
    "--users",
    "users_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="A file of the people who may decide, one name a line.",
)
@click.option(
    "--allow-decisions",
    is_flag=True,
    help="Offer approve, reject and reconcile (needs --user or --users); else read-only.",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.5, 3600),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="How often an open page refreshes its live parts.",
)
def ui(
    store: str | None,
    host: str,
    port: int,
    user_names: tuple[str, ...],
    users_file: Path | None,
    allow_decisions: bool,
    poll: float,
) -> None:
    """Serve a dashboard of the store in a browser: jobs, a job's timeline, snapshots'
    frames and variables (one value by path), diffs between snapshots, the effect
    ledger, approvals; live while jobs run. Prints a URL with a random token (every
    request without it is refused). Read-only unless --allow-decisions, whose deciders
    are the --user names. Stop it with Ctrl-C (docs/ui.md)."""
    users = _users(user_names, users_file)
    if allow_decisions and not users:
        raise click.UsageError(
            "--allow-decisions needs the names of the people who decide: --user NAME "
            "(repeatable) or --users FILE"
        )
    try:
        from .._ui import _app, _security, _serve
    except ImportError as exc:
        raise _Refused(
            f"`snaprun ui` needs the dashboard's libraries ({exc.name or exc} is missing): "
            "pip install 'snapstate[ui]'"
        ) from None
    location = default_home(store)
    label = redact(location) if is_postgres_url(location) else location
    open_home(store, readonly=True)  # a missing or foreign store is refused here, exit 2
    try:
        sock = _serve.bind(host, port)
    except OSError as exc:
        hint = (
            "another program listens there; pick another with --port N (--port 0: any free one)"
            if exc.errno == errno.EADDRINUSE
            else "check --host"
        )
        raise _Refused(f"cannot listen on {host}:{port}: {exc.strerror or exc}; {hint}") from None
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    config = _app.UiConfig(
        store=location,
        label=label,
        gate=_security.GateConfig(
            token=token, hosts=_hosts(host, port), cookie=f"snaprun_ui_{port}", report=say
        ),
        allow_decisions=allow_decisions,
        users=users,
        poll=poll,
    )
    shown = f"[{host}]" if ":" in host else host
    if not _loopback(host):
        say(
            f"warning: listening on {host}, not only this machine: whoever can reach it "
            "and has the URL below can read the store" + (" and decide" if allow_decisions else "")
        )
    mode = f"decisions on (users: {', '.join(users)})" if allow_decisions else "read-only"
    say(f"dashboard of {label} ({mode}); stop it with Ctrl-C")
    say(f"open http://{shown}:{port}/?token={token}")
    _serve.serve(config, sock)
