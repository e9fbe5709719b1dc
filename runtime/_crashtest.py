"""`snaprun crashtest AGENT.py [ARGS...]`: kill an agent at every snapshot and every
effect window, resume it, and report every way the resumed job differs from one that
was never killed (docs/crashtest.md).

1. The baseline: the agent runs uninterrupted, twice at once, each in a scratch copy of
   its folder with a scratch store (the agent's own files and stores are never
   touched). The two must agree: when they print, return or write different things,
   the agent reads something that changes between runs outside snapstate.now(),
   random(), uuid4() or an effect, which a restore would re-execute with another value
   ("nondeterministic"; that aspect is then not compared in the trials).
2. The kill points: every fault point (runtime/_faults.py) the baseline reached, read
   from its SNAPSTATE_FAULT_TRACE: each snapshot during its write (`before-commit:N`)
   and right after it (`after-snapshot:N`), each effect before its request
   (`effect-before-send:P`), after it (`effect-after-send:P`: the provider acted, the
   answer is not recorded) and after its answer is recorded (`effect-after-confirm:P`),
   and each approval request (`approval-after-request:P`).
3. A trial per kill point (two at a time): a fresh scratch copy, store and --setup, the
   agent run with SNAPSTATE_FAULT at that point, SIGKILLed there, then `snaprun
   resume`d until it ends (runtime/_crashtest_runs.py continues waits and reconciles
   parks with the truth), and compared with the baseline (runtime/_crashtest_report.py
   has the rules: stdout, result, files, effects sent twice, parks, refusals).

--max-kills N tries N of the kill points, spread evenly over the run; --point NAME:SEQ
tries only the points named; --budget SECONDS starts no trial once the budget is spent
(the report names the points not tried, and why)."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import replace
from pathlib import Path

from .._errors import SnapstateError
from ..serializers._store import EffectRow
from ._crashtest_report import (
    CrashReport,
    Problem,
    Sequence,
    TrialSummary,
    compare,
    short,
    unstable_aspects,
)
from ._crashtest_runs import (
    CONTROLLED,
    Settings,
    approval_ids,
    copy_sources,
    links_out,
    run_sequence,
    store_of,
    write_values,
)
from ._http_record import check_reads

__all__ = ["crashtest", "KILL_WINDOWS", "select"]

KILL_WINDOWS = (
    "before-commit",
    "after-snapshot",
    "effect-before-send",
    "effect-after-send",
    "effect-after-confirm",
    "approval-after-request",
)


def select(points: list[str], limit: int | None) -> list[str]:
    """At most `limit` of the points, spread evenly over them (the first and the last
    included), in their order."""
    if limit is None or limit >= len(points):
        return list(points)
    if limit <= 0:
        return []
    if limit == 1:
        return [points[len(points) // 2]]
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env.update(
        SNAPSTATE_KEY=secrets.token_hex(32),  # one key for every store of this crashtest
        SNAPSTATE_HIBERNATE_AFTER="0",  # every wait hibernates: crashtest fast-forwards it
        PYTHONUNBUFFERED="1",  # every print is in the file before a kill
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def _start_and_join(settings: Settings, threads: list[threading.Thread]) -> None:
    """Run the threads; on Ctrl-C, kill every run in progress, start none, and let the
    KeyboardInterrupt go on once the threads have stopped (their --setup stopped)."""
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        settings.kill_live()
        for t in threads:
            t.join()
        raise


def _baseline_summary(seq: Sequence) -> dict[str, object]:
    points = seq.points()
    return {
        "exit_code": seq.exit_code,
        "ending": seq.ending,
        "runs": [r.summary() for r in seq.runs],
        "snapshots": sum(1 for p in points if p.startswith("after-snapshot:")),
        "effects": sum(1 for p in points if p.startswith("effect-before-send:")),
        "stdout_lines": len(seq.stdout.splitlines()),
        "files": sorted(seq.files),
        "points": points,
        "seconds": round(seq.seconds, 3),
        "notes": seq.notes,
    }


def _untested(base: Sequence) -> Problem:
    if base.exit_code == 1:
        what = (
            f"failed (exit 1: {short(base.ending, 300)}) before it reached any snapshot, "
            "effect or approval: nothing could be killed, so nothing was tested; make the "
            "run work first (its --setup providers, its ARGS, its environment)"
        )
    else:
        what = (
            "reached no snapshot, effect or approval: there was no kill point to try, so "
            "nothing was tested (killed anywhere, the job would run main() again from its "
            "start)"
        )
    return Problem("untested", "baseline", f"the uninterrupted run {what}")


def crashtest(
    agent: str | os.PathLike[str],
    args: Seq[str] = (),
    *,
    setup: str | None = None,
    max_kills: int | None = None,
    points: Seq[str] | None = None,
    budget: float | None = None,
    timeout: float = 120.0,
    jobs: int = 2,
    approvals: str = "approve",
    allow_parks: bool = False,
    record_http: bool = False,
    http_reads: Seq[str] = (),
    python: str | None = None,
    keep: bool = False,
    workdir: str | os.PathLike[str] | None = None,
    scratch: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CrashReport:
    """Crash-test the agent file `agent` run with `args` (its sys.argv[1:]): see the
    module's docstring. `points` (e.g. ["effect-after-send:2"]) tries only those kill
    points. record_http and http_reads run the agent as `snaprun run --record-http
    [--http-read PATTERN]...` (Store.start's arguments of the same names). Returns the
    report; raises SnapstateError for input it cannot use (no such file, a --setup
    command that never gets ready)."""
    say = progress or (lambda _: None)
    path = Path(agent).resolve()
    if path.suffix != ".py" or not path.is_file():
        raise SnapstateError(f"no agent file at {agent}: crashtest takes a .py file (AGENT.py)")
    folder = Path(workdir).resolve() if workdir is not None else path.parent
    if not folder.is_dir() or not path.is_relative_to(folder):
        raise SnapstateError(f"the working directory {folder} must be a folder holding {path}")
    if approvals not in ("approve", "reject"):
        raise SnapstateError(f"approvals={approvals!r}: say 'approve' or 'reject'")
    run_options: tuple[str, ...] = ()
    if record_http or http_reads:
        try:
            reads = check_reads(http_reads, "crashtest(http_reads=...)")
        except (TypeError, ValueError) as exc:
            raise SnapstateError(str(exc)) from None
        run_options = ("--record-http", *(f"--http-read={r}" for r in reads))
    root = Path(tempfile.mkdtemp(prefix="snapstate-crashtest-", dir=scratch))
    try:
        copy_sources(folder, root / "pristine")
        for link in links_out(root / "pristine"):
            say(
                f"warning: {link!r} in {folder} is a symbolic link out of the folder: "
                "every run reads and writes through it, in your own files (give "
                "another --workdir, or copy what it points to)"
            )
        settings = Settings(
            python=python or sys.executable,
            agent=path.relative_to(folder),
            args=tuple(args),
            pristine=root / "pristine",
            scratch=root,
            env=_environment(),
            setup=setup,
            setup_cwd=os.getcwd(),
            timeout=timeout,
            approvals=approvals,
            say=say,
            run_options=run_options,
        )
        report = _crashtest(
            settings, max_kills, points, budget, max(1, jobs), allow_parks, str(agent)
        )
    except BaseException:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        raise
    if keep:
        report.scratch = str(root)
        say(f"the scratch folders are kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return report


def _crashtest(
    settings: Settings,
    max_kills: int | None,
    only: Seq[str] | None,
    budget: float | None,
    jobs: int,
    allow_parks: bool,
    agent: str,
) -> CrashReport:
    say, started = settings.say, time.monotonic()
    say("running the agent uninterrupted")
    results: dict[str, tuple[Sequence, list[EffectRow]]] = {}
    errors: list[BaseException] = []

    def first() -> None:
        try:
            results["baseline"] = run_sequence(settings, "baseline", None)
        except BaseException as exc:  # a --setup that fails: raised in the caller
            errors.append(exc)

    _start_and_join(settings, [threading.Thread(target=first, daemon=True)])
    if errors:
        raise errors[0]
    base, rows = results["baseline"]
    problems = list(base.problems)
    summary = _baseline_summary(base)
    say(
        f"baseline: exit {base.exit_code} in {len(base.runs)} run(s), "
        f"{summary['snapshots']} snapshot(s), {summary['effects']} effect request(s)"
    )
    trials: list[TrialSummary] = []
    not_tried: dict[str, str] = {}
    if base.exit_code not in (0, 1) or base.problems:
        say("the uninterrupted run did not end: no kill is tried")
        return CrashReport(agent, list(settings.args), summary, trials, problems, not_tried)
    points = [p for p in base.points() if p.split(":", 1)[0] in KILL_WINDOWS]
    if not points:
        # "No problem found" must mean kills were tried: a run that reached no kill point
        # (most often one that failed at its start: a provider not started, a variable
        # not set) tested nothing, and a kill anywhere in it would run main() again.
        problems.append(_untested(base))
        say("the uninterrupted run reached no snapshot, effect or approval: nothing to kill")
        return CrashReport(agent, list(settings.args), summary, trials, problems, not_tried)
    if base.exit_code == 1:
        say(f"note: the uninterrupted run fails (exit 1: {base.ending}); trials must fail alike")
    # Every later run gets the values of now(), random() and uuid4() this run recorded.
    settings = replace(settings, values=settings.scratch / "values")
    assert settings.values is not None
    store, key = store_of(settings, "baseline"), settings.env["SNAPSTATE_KEY"]
    asked = approval_ids(store, key) if (store / "catalog.db").exists() else frozenset()
    write_values(rows, settings.values, asked)
    if only is not None:  # any fault point the run reached may be named
        reached = base.points()
        points += [p for p in reached if p in only and p not in points]
        points.sort(key=reached.index)
    for p in only or ():
        if p not in points:
            not_tried[p] = "not reached by the uninterrupted run"
            say(f"{p}: the uninterrupted run did not reach this kill point")
    chosen = select([p for p in points if only is None or p in only], max_kills)
    for p in points:
        if p not in chosen:
            not_tried[p] = "--max-kills" if only is None or p in only else "--point"
    say(
        f"{len(points)} kill point(s); trying {len(chosen)}, and the uninterrupted run "
        "once more (to tell apart what changes between runs)"
    )
    found_by: dict[str, list[Problem]] = {}
    unstable: set[str] = set()
    compared = threading.Event()  # set once the second uninterrupted run is compared
    lock = threading.Lock()
    queue: list[tuple[int, str | None]] = [(-1, None), *enumerate(chosen)]

    def second(seq: Sequence) -> None:
        found = [Problem(p.kind, "baseline", p.message) for p in seq.problems]
        aspects, differences = unstable_aspects(base, seq)
        unstable.update(aspects)
        problems.extend(found + differences)
        say(
            "the second uninterrupted run: "
            + (f"{len(found + differences)} problem(s)" if found or differences else "the same")
        )

    def worker() -> None:
        while True:
            with lock:
                if not queue or errors:
                    return
                index, point = queue.pop(0)
                if point is not None and budget is not None:
                    if time.monotonic() - started > budget:
                        not_tried[point] = "--budget"
                        continue
            try:
                seq, _ = run_sequence(
                    settings,
                    point or "baseline-2",
                    point,
                    baseline_rows=rows,
                    allow_parks=allow_parks,
                )
            except BaseException as exc:
                errors.append(exc)
                compared.set()
                return
            if settings.stop.is_set():  # Ctrl-C killed its runs: nothing to report
                compared.set()
                return
            if point is None:
                second(seq)
                compared.set()
                continue
            compared.wait()  # which aspects are compared depends on the second run
            mine = seq.problems + compare(base, seq, unstable)
            with lock:
                found_by[point] = mine
                trials.append(
                    TrialSummary(
                        point,
                        [r.summary() for r in seq.runs],
                        len(mine),
                        round(seq.seconds, 3),
                        seq.notes,
                    )
                )
                state = "ok" if not mine else f"{len(mine)} problem(s)"
                say(f"[{index + 1}/{len(chosen)}] {point}: {state}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(jobs, len(queue)))]
    _start_and_join(settings, threads)
    if errors:
        raise errors[0]
    order = {p: i for i, p in enumerate(points)}
    trials.sort(key=lambda t: order[t.point])
    for point in sorted(found_by, key=order.__getitem__):
        problems += found_by[point]
    budgeted = [p for p, why in not_tried.items() if why == "--budget"]
    if budgeted:
        say(f"the --budget ran out: {len(budgeted)} kill point(s) not tried: {', '.join(budgeted)}")
    if chosen and not trials and budget is not None:  # spent before the first trial
        problems.append(
            Problem(
                "untested",
                "baseline",
                f"the --budget of {budget:g}s ran out before the first trial: none of the "
                f"{len(chosen)} kill point(s) was tried, so nothing was tested; give a "
                "larger --budget, or fewer kill points (--max-kills, --point)",
            )
        )
    say(
        f"{len(trials)} kill point(s) tried: "
        + (f"{len(problems)} problem(s)" if problems else "no problem found")
    )
    return CrashReport(agent, list(settings.args), summary, trials, problems, not_tried)
