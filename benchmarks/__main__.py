"""One command for the benchmarks: run every script, rewrite benchmarks/RESULTS.md.

    python -m benchmarks [--fast] [--only NAME]... [--repeat N] [--python PATH]...
                         [--output FILE] [--json FILE]

Run from the checkout. Each benchmark script (benchmarks/bench_*.py) runs as a
subprocess of each interpreter (`--python`, default: this one), `--repeat` times (default
3; 1 with `--fast`), the repeats interleaved; each writes its figures as JSON, and the
medians with their [min-max] over the repeats, the side-by-side comparisons with
LangGraph and DBOS (the `bench` extra; a missing one is reported, never fatal), the
reason for every row where snapstate loses and the machine's facts (CPU, cores, memory,
Pythons, SQLite, the load before and after, the other busy processes) are written
between the markers of the output file. The rest of the file (the per-issue history) is
kept as it is.

A full run (no --fast, no --only) writes benchmarks/RESULTS.md unless --output says
otherwise; a fast or partial run writes only the --output it is given (else it prints
the generated part), so RESULTS.md only ever holds a whole run's figures.

Exit codes: 0 every benchmark ran; 1 a benchmark failed (the file is still written, the
failure in it and its output on stderr); 2 usage or invalid input (an unknown --only, a
--python that cannot run snapstate, damaged markers in the output file: nothing is run
or written); 130 interrupted (nothing written).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import NoReturn

from . import _machine, _report, _suite

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "RESULTS.md")
PROG = "python -m benchmarks"
TIMEOUT = {"full": 1800.0, "fast": 300.0}  # per script run, seconds


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run every benchmark and rewrite the generated part of benchmarks/RESULTS.md.",
        epilog="Benchmarks: " + ", ".join(_suite.NAMES) + ". See docs/benchmarks.md.",
    )
    parser.add_argument("--fast", action="store_true", help="small sizes, each once (CI)")
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="run only this benchmark (repeatable)"
    )
    parser.add_argument("--repeat", type=int, metavar="N", help="runs of each (default 3; fast 1)")
    parser.add_argument(
        "--python", action="append", metavar="PATH", help="an interpreter to run them with "
        "(repeatable; default: this one); snapstate must be installed in it"
    )  # fmt: skip
    parser.add_argument("--output", metavar="FILE", help="the results file to rewrite")
    parser.add_argument("--json", metavar="FILE", help="also write every script's JSON")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or ()) - set(_suite.NAMES))
    if unknown:
        parser.error(
            f"unknown benchmark {', '.join(unknown)}: choose from {', '.join(_suite.NAMES)}"
        )
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def environment() -> dict[str, str]:
    """The scripts' environment: this one, with bytecode caches written and used (an
    installed package has them; compiling every module in every child would be timed)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


WARM = (
    "import importlib\n"
    "for name in ('snapstate.runtime._cli', 'numpy', 'langgraph.graph',\n"
    "             'langgraph.checkpoint.sqlite', 'dbos', 'psycopg'):\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except ImportError:\n"
    "        pass\n"
)


def warm(python: str) -> None:
    """Import what the scripts import once, so their bytecode caches exist before timing."""
    subprocess.run(
        [python, "-c", WARM], cwd=HERE, env=environment(), capture_output=True, timeout=600
    )


def run_script(bench: _suite.Bench, python: str, mode: str, out: str, log: str) -> str | None:
    """Run one script; None when it ended well, else what went wrong."""
    args = bench.fast if mode == "fast" else bench.full
    command = [python, os.path.join(HERE, bench.script), *args, "--json", out]
    with open(log, "wb") as output:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=TIMEOUT[mode])
        except subprocess.TimeoutExpired:
            stop(proc)
            return f"no result in {TIMEOUT[mode]:.0f} s (stopped)"
        except BaseException:  # Ctrl-C: the script runs in a session of its own
            stop(proc)
            raise
    if code != 0:
        return f"exit {code}: {_last_line(log)}"
    if not os.path.exists(out):
        return "it wrote no JSON file"
    return None


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a script and its children: SIGINT first (its `finally` blocks run: the
    PostgreSQL server bench_postgres.py started is stopped, temporary folders removed),
    SIGKILL to the whole group after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def check_output(output: str) -> None:
    """Refuse, before anything runs, an output file that could not be rewritten."""
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        fail(f"{output}: its folder {folder} does not exist or is not writable")
    try:
        with open(output, encoding="utf-8") as f:
            existing = f.read()
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{output}: cannot be read ({e})")
    try:
        _report.splice(existing, "")
    except _report.MarkerError as e:
        fail(f"{output}: the current-results markers are damaged ({e}); fix them by hand")


def _last_line(log: str) -> str:
    with open(log, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    mode = "fast" if args.fast else "full"
    repeat = args.repeat or (1 if args.fast else 3)
    benches = [b for b in _suite.BENCHES if not args.only or b.name in args.only]
    whole = mode == "full" and not args.only
    output = args.output or (RESULTS if whole else None)
    if output:
        check_output(output)
    pythons = []
    for python in args.python or [sys.executable]:
        try:
            facts = _machine.python_facts(python)
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            fail(f"--python {python}: it does not run ({e})")
        if not facts["snapstate"]:
            fail(
                f"--python {python}: snapstate does not import in it ({python} -m pip install -e '.[test]')"
            )
        if any(p["python"] == facts["python"] for p in pythons):  # a column per interpreter
            facts["python"] += f" ({facts['executable']})"
        pythons.append(facts)
    started = time.time()
    for facts in pythons:
        warm(facts["executable"])
    machine = _machine.facts(ROOT)
    load_before = _machine.load()
    busy_before = _machine.busy_processes()
    outcomes: list[_report.Outcome] = []
    total = repeat * len(benches) * len(pythons)
    done = 0
    with tempfile.TemporaryDirectory(prefix="snapstate-benchmarks-") as work:
        for n in range(1, repeat + 1):
            for bench in benches:
                for facts in pythons:
                    done += 1
                    outcome = _report.Outcome(bench, facts["python"], n, load=_machine.load())
                    outcomes.append(outcome)
                    outcome.skipped = bench.unavailable()
                    label = (
                        f"[{done}/{total}] {bench.name}, Python {facts['python']}, run {n}/{repeat}"
                    )
                    if outcome.skipped:
                        print(f"{label}: not run: {outcome.skipped}", file=sys.stderr)
                        continue
                    print(f"{label} ...", file=sys.stderr, flush=True)
                    out = os.path.join(work, f"{bench.name}-{done}.json")
                    log = os.path.join(work, f"{bench.name}-{done}.log")
                    t0 = time.monotonic()
                    outcome.error = run_script(bench, facts["executable"], mode, out, log)
                    outcome.seconds = time.monotonic() - t0
                    if outcome.error:
                        with open(log, errors="replace") as f:
                            sys.stderr.write(f.read()[-4000:])
                        print(f"{label}: FAILED ({outcome.error})", file=sys.stderr)
                        continue
                    try:
                        with open(out) as f:
                            outcome.data = json.load(f)
                    except (OSError, ValueError) as e:
                        outcome.error = f"its JSON file could not be read ({e})"
                        print(f"{label}: FAILED ({outcome.error})", file=sys.stderr)
                        continue
                    print(f"{label}: {outcome.seconds:.1f} s", file=sys.stderr)
    run = _report.Run(
        command=" ".join(
            ["python -m benchmarks", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
        ),
        mode=mode,
        repeat=repeat,
        started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        seconds=time.time() - started,
        machine=machine,
        pythons=pythons,
        load_before=load_before,
        load_after=_machine.load(),
        busy_before=busy_before,
        busy_after=_machine.busy_processes(),
        outcomes=outcomes,
    )
    generated = _report.block(run)
    if output:
        try:
            _report.write(output, generated)
        except (OSError, ValueError) as e:  # changed while the benchmarks ran (markers, bytes)
            sys.stdout.write(generated)
            fail(f"{output}: not written ({e}); the results are on stdout above", 1)
        print(f"{PROG}: wrote {output} ({run.seconds:.0f} s)", file=sys.stderr)
    else:
        sys.stdout.write(generated)
        print(
            f"{PROG}: a fast or partial run: benchmarks/RESULTS.md left as it was "
            "(--output FILE writes one)",
            file=sys.stderr,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                [{"bench": o.bench.name, "python": o.python, "repeat": o.repeat, "data": o.data,
                  "error": o.error, "skipped": o.skipped, "seconds": o.seconds} for o in outcomes],
                f, indent=1,
            )  # fmt: skip
    failed = [o for o in outcomes if o.error]
    if failed:
        names = sorted({o.bench.name for o in failed})
        print(f"{PROG}: {len(failed)} run(s) failed: {', '.join(names)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        raise SystemExit(130) from None
