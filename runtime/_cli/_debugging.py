"""snaprun debug: a snapshot restored in the replay's sandbox with pdb (or the debugger
PYTHONBREAKPOINT names) in the agent's innermost frame (runtime/_debug.py,
docs/debugging.md)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from ..._errors import DivergenceError, SnapshotNotFound, SnapstateError
from .. import _debug
from .._api import EXIT_DONE, EXIT_FAILED
from .._job import Job
from ._common import agent_traceback, check_ids, exit_codes, open_home, parse_ref, say, store_option

__all__ = ["debug"]

_NOTHING = "nothing was sent or written"


@click.command(epilog=exit_codes(0, 1, 2, 130, ok="the session ended"))
@store_option
@click.option(
    "--until",
    metavar="LABEL|SEQ",
    default=None,
    help="Run forward from the snapshot without stopping, and open the debugger at the "
    "later snapshot() call with this label or sequence number instead.",
)
@click.argument("ref")
def debug(store: str | None, until: str | None, ref: str) -> None:
    """Open pdb in snapshot JOB[@SEQ] (default: the latest), in the agent's innermost
    frame right after its snapshot() call: `up`/`down` walk the restored stack, `next`
    and `continue` run the agent forward in a sandbox. Effects are answered from the
    job's ledger; one it never recorded raises EffectRefused at the call (nothing is
    sent). Files and databases are scratch copies; the store is not written. A wait
    that is not over, a divergence from the ledger or `q` (or the end of pdb's input)
    ends the session. PYTHONBREAKPOINT names another debugger (0: none)."""
    check_ids(ref)
    home = open_home(store, readonly=True)
    job_id, seq = parse_ref(ref)
    job = Job.open(home, job_id)
    if seq is None:
        rows = home.catalog.snapshots(job_id)
        if not rows:
            raise SnapshotNotFound(
                f"job {job_id} has no snapshot yet: nothing to debug (`snaprun log {job_id}`)"
            )
        seq = rows[-1].seq
    target = _debug.parse_until(until)
    if isinstance(target, int) and target <= seq:
        raise click.UsageError(f"--until {target} is not after snapshot {seq}: name a later one")
    try:
        session = _debug.Session(job, target, os.environ.get("PYTHONBREAKPOINT", ""))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    job.say = say
    where = f"{job_id}@{seq}"
    try:
        result = job.replay(seq, debugger=session)
    except KeyboardInterrupt:  # Ctrl-C while the agent runs (pdb takes it at its prompt)
        sys.stdout.flush()
        say(f"debug session of {where} ended: Ctrl-C; {_NOTHING}")
        sys.exit(130)
    except DivergenceError as exc:
        _end(f"debug session of {where} ended: the run diverged from the ledger: {exc}")
    except SnapstateError as exc:
        if not job.agent_started:
            raise  # the snapshot or the store: main() reports it (exit 2)
        _agent_raised(where, exc)
    except (Exception, SystemExit) as exc:  # sys.exit() in the agent: its failure, as in a run
        _agent_raised(where, exc)
    finally:
        session.close()
    sys.stdout.flush()
    if session.failed is not None:
        _end(f"debug session of {where} ended: {session.failed}; {_NOTHING}")
    stop = job.replay_stop
    if until is not None and not session.reached:
        why = f"the run stopped first: {stop}" if stop else f"main() returned {result!r} first"
        _end(f"debug session of {where}: --until {until} was not reached ({why}); {_NOTHING}")
    if stop:  # the debugger was quit (_debug.QUIT), or the job waits
        say(f"debug session of {where} ended: {stop}; {_NOTHING}")
    else:
        say(f"debug session of {where} ended: main() returned {result!r}; {_NOTHING}")
    sys.exit(EXIT_DONE)


def _end(message: str) -> NoReturn:
    sys.stdout.flush()
    say(message)
    sys.exit(EXIT_FAILED)


def _agent_raised(where: str, exc: BaseException) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.write(agent_traceback(exc))
    _end(
        f"debug session of {where} ended: the agent raised {type(exc).__name__}: {exc}; {_NOTHING}"
    )
