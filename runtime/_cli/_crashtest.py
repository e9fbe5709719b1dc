"""snaprun crashtest: kill an agent at every snapshot and effect window, resume it, and
report what differs from an uninterrupted run (runtime/_crashtest.py does the work)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ._common import say

__all__ = ["crashtest"]

_CODES = """\b
Exit codes:
  0  no problem found
  1  a problem found (one line each on stdout)
  2  usage error, no such agent file, or a --setup command that never got ready"""


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog=_CODES,
)
@click.option(
    "--setup",
    metavar="CMD",
    default=None,
    help="A shell command started before the uninterrupted run and before each trial, and "
    "stopped (SIGTERM) after it: the agent's stub providers. It prints NAME=VALUE lines, "
    "then a line `ready`, on its stdout; those variables are set for the agent.",
)
@click.option(
    "--max-kills",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Try at most N kill points, spread evenly over the run (0: the uninterrupted runs only).",
)
@click.option(
    "--point",
    "points",
    multiple=True,
    metavar="NAME:SEQ",
    help="Try only this kill point (repeatable), e.g. effect-after-send:2; the "
    "uninterrupted run lists them (--json: baseline.points).",
)
@click.option(
    "--budget",
    type=click.FloatRange(min=0, min_open=True, max=30 * 86400),
    default=None,
    metavar="SECONDS",
    help="Start no trial after this many seconds; the kill points not tried are named.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True, max=86400),
    default=120.0,
    show_default=True,
    metavar="SECONDS",
    help="The longest one run of the agent may take (and --setup to get ready).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="How many runs at once.",
)
@click.option(
    "--approvals",
    type=click.Choice(["approve", "reject"]),
    default="approve",
    show_default=True,
    help="How the approvals the agent requests are decided, in every run.",
)
@click.option(
    "--allow-parks",
    is_flag=True,
    help="An ambiguous effect that parks the job is no problem (it is reconciled with "
    "what happened and the job resumed, as always).",
)
@click.option(
    "--record-http",
    is_flag=True,
    help="Run the agent as `snaprun run --record-http`: every HTTP request it sends "
    "(httpx, requests; the OpenAI and Anthropic SDKs) is recorded in its ledger.",
)
@click.option(
    "--http-read",
    "http_reads",
    multiple=True,
    metavar="HOST/PATH",
    help="As `snaprun run --http-read` (implies --record-http): requests matching this "
    "pattern change nothing. Repeatable.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="The folder copied as the agent's working directory (default: AGENT's folder).",
)
@click.option("--python", default=None, metavar="PATH", help="The interpreter that runs snaprun.")
@click.option("--keep", is_flag=True, help="Keep the scratch folders (runs' output, stores).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON to stdout.")
@click.argument("agent", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def crashtest(
    setup: str | None,
    max_kills: int | None,
    points: tuple[str, ...],
    budget: float | None,
    timeout: float,
    jobs: int,
    approvals: str,
    allow_parks: bool,
    record_http: bool,
    http_reads: tuple[str, ...],
    workdir: str | None,
    python: str | None,
    keep: bool,
    as_json: bool,
    agent: str,
    args: tuple[str, ...],
) -> None:
    """Run AGENT (a .py file) uninterrupted, then kill it (SIGKILL) at every snapshot and
    every effect window, resume each, and print one line per difference from the
    uninterrupted run: stdout, return value or exit code, files left in its working
    directory, effects sent twice, ambiguous effects that parked, refusals.

    Every run uses a scratch copy of AGENT's folder and a scratch store: nothing of
    yours is touched. ARGS become the agent's sys.argv[1:] (crashtest's own options go
    before AGENT). Progress goes to stderr."""
    # Imported here: every snaprun process (each of a crashtest's runs too) loads this
    # module, and only `snaprun crashtest` needs the machinery.
    from .._crashtest import crashtest as run_crashtest
    from .._crashtest_report import printable

    _warn_misplaced(args)
    try:
        report = run_crashtest(
            agent,
            args,
            setup=setup,
            max_kills=max_kills,
            points=points or None,
            budget=budget,
            timeout=timeout,
            jobs=jobs,
            approvals=approvals,
            allow_parks=allow_parks,
            record_http=record_http,
            http_reads=http_reads,
            python=python,
            keep=keep,
            workdir=workdir,
            progress=lambda text: say(f"crashtest: {printable(text)}"),
        )
    except KeyboardInterrupt:
        say("crashtest: interrupted; the runs in progress were killed")
        sys.exit(130)
    if as_json:
        click.echo(report.dumps())
    else:
        for line in report.lines():
            click.echo(line)
    sys.exit(0 if report.ok else 1)


def _warn_misplaced(args: Sequence[str]) -> None:
    """Everything after AGENT is the agent's (as with `snaprun run`): an argument spelled
    like one of crashtest's own options was most likely meant for crashtest, so say so
    (the agent may have an option of that name: it is passed on as written)."""
    from .._crashtest_report import printable

    ctx = click.get_current_context()
    own = {
        name
        for param in ctx.command.get_params(ctx)
        if isinstance(param, click.Option)
        for name in param.opts
    }
    for arg in args:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name in own:
            say(
                f"crashtest: warning: {printable(repr(arg))} comes after the agent file, so it "
                f"is passed to the agent (its sys.argv), not to crashtest; crashtest's "
                f"options go before AGENT.py (`snaprun crashtest {printable(name)} ... "
                "AGENT.py`)"
            )
