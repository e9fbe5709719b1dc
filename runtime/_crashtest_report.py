"""What `snaprun crashtest` found: the record of a sequence of runs (the uninterrupted
baseline, or a trial killed at one fault point and resumed until it ends), the rules
that compare a trial with the baseline, and the report (one line per problem, or JSON).

The comparison rules (docs/crashtest.md says the same for users):

- stdout: each run's stdout counts up to the last snapshot that run committed when the
  run was killed (SIGKILL), hibernated (exit 3) or parked (exit 4): what it printed
  after that snapshot is printed again by the resume, which re-executes that code. A
  run that ended (done, failed, refused) counts whole. The concatenation must equal
  the baseline's stdout byte for byte. A run that committed no snapshot counts nothing.
- result: the last run's exit code and what it ended with (main()'s return value as
  `snaprun` prints it, or the error line) must equal the baseline's.
- files: every file the runs leave in the scratch working directory (a copy of the
  agent's folder; `__pycache__` folders left out) must have the baseline's bytes.
- In stdout, results and files the scratch paths of a sequence are written as
  `$WORKDIR` and `$STORE`, so a printed path is no difference.

This module runs nothing; runtime/_crashtest_runs.py runs the processes and
runtime/_crashtest.py decides what to kill."""

from __future__ import annotations

import difflib
import itertools
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "ProblemKind",
    "Problem",
    "TracePoint",
    "RunRecord",
    "Sequence",
    "TrialSummary",
    "CrashReport",
    "compare",
    "printable",
    "short",
]

ProblemKind = Literal[
    "nondeterministic",  # two uninterrupted runs differ
    "stdout",  # a trial's stdout (by the rule above) differs from the baseline's
    "result",  # a trial ended with another exit code, return value or error
    "files",  # a trial left other files in its working directory
    "duplicate",  # an effect was sent more often than in the baseline
    "parked",  # an ambiguous effect parked the job (`snaprun reconcile` by hand)
    "refusal",  # a run was refused (exit 2) or met a conflict (exit 5)
    "unreached",  # a trial's run did not reach the fault point the baseline reached
    "stuck",  # a trial did not end: a timeout, a crash, too many rounds
    "untested",  # the baseline reached no kill point: nothing could be tried
]

# What a terminal would interpret in a line: C0/C1 controls (escape sequences), DEL, and
# the bidi controls that reorder what follows them.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` for one line of a terminal: every control character (escape sequences, a
    newline, bidi overrides) written visibly as \\xNN or \\uNNNN."""
    return _UNPRINTABLE.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text
    )


def short(text: str, width: int = 100) -> str:
    """A value for a one-line message: its repr, cut to `width` characters."""
    shown = repr(text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


@dataclass(frozen=True)
class Problem:
    """One thing crashtest found. point: the fault point of the trial that found it
    (`after-snapshot:2`), or "baseline" for the uninterrupted runs."""

    kind: ProblemKind
    point: str
    message: str

    def line(self) -> str:
        """The line `snaprun crashtest` prints: `POINT: KIND: MESSAGE`, every control
        character in it (an agent's output, arguments or errors) written visibly."""
        return printable(f"{self.point}: {self.kind}: {self.message}")


@dataclass(frozen=True)
class TracePoint:
    """A line of SNAPSTATE_FAULT_TRACE (runtime/_faults.py): a fault point reached,
    and stdout's offset then."""

    name: str
    seq: str
    offset: int

    @property
    def point(self) -> str:
        return f"{self.name}:{self.seq}"


@dataclass
class RunRecord:
    """One process of a sequence: `snaprun run` or `snaprun resume`."""

    command: str  # "run" or "resume"
    exit_code: int  # negative: killed by that signal; None never: a timeout is -9 + timed_out
    stdout: bytes
    stderr: str
    trace: list[TracePoint]
    seconds: float
    timed_out: bool = False
    fault: str | None = None  # the SNAPSTATE_FAULT it ran with

    def committed_stdout(self) -> bytes:
        """The rule above: what of this run's stdout a resume does not print again."""
        if self.exit_code in (0, 1, 2, 5) and not self.timed_out:
            return self.stdout
        offsets = [t.offset for t in self.trace if t.name == "after-snapshot" and t.offset >= 0]
        return self.stdout[: offsets[-1]] if offsets else b""

    def ending(self) -> str:
        """How `snaprun` said the run ended: main()'s value, or the error, whole (a
        repr or an error message may take more than one line: they run to snaprun's
        next line)."""
        lines = self.stderr.splitlines()
        for i in range(len(lines) - 1, -1, -1):
            line = lines[i]
            if not line.startswith("snaprun: "):
                continue
            _, found, value = line.partition(" done; main() returned ")
            if found:
                line = f"snaprun: returned {value}"
            elif not (line.startswith("snaprun: error: ") or " failed: " in line):
                continue
            rest = itertools.takewhile(lambda ln: not ln.startswith("snaprun: "), lines[i + 1 :])
            return "\n".join([line.removeprefix("snaprun: "), *rest])
        return ""

    def error_line(self) -> str:
        errors = [ln for ln in self.stderr.splitlines() if ln.startswith("snaprun: error: ")]
        return errors[-1].removeprefix("snaprun: error: ") if errors else self.ending()

    def summary(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "fault": self.fault,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "seconds": round(self.seconds, 3),
            "ending": self.ending(),
        }


@dataclass
class Sequence:
    """The runs of the baseline or of one trial, and what they left behind."""

    name: str  # "baseline" or the fault point
    runs: list[RunRecord] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sends: dict[tuple[str, str], int] = field(default_factory=dict)  # (name, digest) -> n
    shown: dict[tuple[str, str], str] = field(default_factory=dict)  # -> "name(args) at site"
    reads: set[tuple[str, str]] = field(default_factory=set)  # effects of kind "read"
    keyed: set[tuple[str, str]] = field(default_factory=set)  # re-sent with their key
    seconds: float = 0.0

    @property
    def stdout(self) -> bytes:
        return b"".join(run.committed_stdout() for run in self.runs)

    @property
    def exit_code(self) -> int | None:
        return self.runs[-1].exit_code if self.runs else None

    @property
    def ending(self) -> str:
        return self.runs[-1].ending() if self.runs else ""

    def points(self) -> list[str]:
        """Every fault point the runs reached, in order, each once."""
        seen: dict[str, None] = {}
        for run in self.runs:
            for t in run.trace:
                seen.setdefault(t.point, None)
        return list(seen)


_DIFF_LINES = 2000  # lines past which a difference is located without difflib


def _first_difference(expected: bytes, got: bytes) -> str:
    want = expected.decode(errors="replace").splitlines()
    have = got.decode(errors="replace").splitlines()
    # The lines both share at their start and end are left out first: a kill changes
    # a few lines, and difflib takes quadratic time over many equal lines.
    start = 0
    while start < min(len(want), len(have)) and want[start] == have[start]:
        start += 1
    end = 0
    while end < min(len(want), len(have)) - start and want[-1 - end] == have[-1 - end]:
        end += 1
    want_mid, have_mid = want[start : len(want) - end], have[start : len(have) - end]
    opcodes: list[tuple[str, int, int, int, int]] = [
        ("replace", 0, len(want_mid), 0, len(have_mid))
    ]
    if len(want_mid) <= _DIFF_LINES and len(have_mid) <= _DIFF_LINES:
        matcher = difflib.SequenceMatcher(None, want_mid, have_mid, autojunk=False)
        opcodes = list(matcher.get_opcodes())
    for tag, i1, _i2, j1, _j2 in opcodes:
        if tag == "equal":
            continue
        i1, j1 = i1 + start, j1 + start
        if tag == "replace" and (i1 >= len(want) or j1 >= len(have)):
            tag = "insert" if i1 >= len(want) else "delete"
        line = i1 + 1
        if tag == "insert":
            again = " (a line written again after the kill)" if have[j1] in want else ""
            return f"an extra line {line}: {short(have[j1])}{again}"
        if tag == "delete":
            return f"line {line} is missing: {short(want[i1])}"
        return f"line {line} is {short(have[j1])}, the uninterrupted run's is {short(want[i1])}"
    return "the same lines, other bytes (line endings or a last line without a newline)"


def _file_differences(expected: dict[str, bytes], got: dict[str, bytes]) -> list[str]:
    out = []
    for path in sorted(expected.keys() | got.keys()):
        if path not in got:
            out.append(f"file {short(path)} is missing (the uninterrupted run left it)")
        elif path not in expected:
            out.append(f"file {short(path)} was left behind (the uninterrupted run left none)")
        elif expected[path] != got[path]:
            out.append(
                f"file {short(path)} differs: {_first_difference(expected[path], got[path])}"
            )
    return out


def compare(baseline: Sequence, trial: Sequence, unstable: set[str]) -> list[Problem]:
    """The problems of a trial against the baseline; aspects in `unstable` ("stdout",
    "result", "files": the two baselines disagreed on them) are not compared."""
    point, found = trial.name, []
    if "stdout" not in unstable and trial.stdout != baseline.stdout:
        found.append(
            Problem(
                "stdout",
                point,
                "stdout differs from the uninterrupted run's: "
                + _first_difference(baseline.stdout, trial.stdout),
            )
        )
    if "result" not in unstable and (trial.exit_code, trial.ending) != (
        baseline.exit_code,
        baseline.ending,
    ):
        found.append(
            Problem(
                "result",
                point,
                f"ended with exit {trial.exit_code} ({short(trial.ending)}); the uninterrupted "
                f"run with exit {baseline.exit_code} ({short(baseline.ending)})",
            )
        )
    if "files" not in unstable:
        found.extend(
            Problem("files", point, text) for text in _file_differences(baseline.files, trial.files)
        )
    for ident, count in sorted(trial.sends.items()):
        before = baseline.sends.get(ident, 0)
        if count <= before or ident in trial.reads or ident in trial.keyed:
            continue
        found.append(
            Problem(
                "duplicate",
                point,
                f"{trial.shown.get(ident, ident[0])} was sent {count} times ("
                f"{before} in the uninterrupted run): the provider may have acted twice; "
                "give the effect idempotency='key' or lookup=, and keep the calls between "
                "two snapshots on the same path when they are re-executed",
            )
        )
    return found


def unstable_aspects(first: Sequence, second: Sequence) -> tuple[set[str], list[Problem]]:
    """What two uninterrupted runs disagree on, and a problem for each."""
    unstable, found = set(), []
    why = (
        "the agent reads something that changes between runs (the clock, randomness, "
        "the network, the environment, the order of a set of strings, which changes with "
        "each process's hash seed) outside snapstate.now()/random()/uuid4() or an "
        "@effect: code re-executed after a restore would see another value"
    )
    if first.stdout != second.stdout:
        unstable.add("stdout")
        found.append(
            Problem(
                "nondeterministic",
                "baseline",
                "two uninterrupted runs printed different stdout ("
                + _first_difference(first.stdout, second.stdout)
                + f"): {why}",
            )
        )
    if (first.exit_code, first.ending) != (second.exit_code, second.ending):
        unstable.add("result")
        found.append(
            Problem(
                "nondeterministic",
                "baseline",
                f"two uninterrupted runs ended differently ({short(first.ending)} and "
                f"{short(second.ending)}): {why}",
            )
        )
    diffs = _file_differences(first.files, second.files)
    if diffs:
        unstable.add("files")
        found.append(
            Problem(
                "nondeterministic",
                "baseline",
                f"two uninterrupted runs left different files ({diffs[0]}): {why}",
            )
        )
    return unstable, found


@dataclass(frozen=True)
class TrialSummary:
    """One trial: its kill point, its runs (command, fault, exit code, seconds, how it
    ended), how many problems it found, and how it was continued (notes)."""

    point: str
    runs: list[dict[str, Any]]
    problems: int
    seconds: float
    notes: list[str]


@dataclass
class CrashReport:
    """What a crashtest found. `ok` is True when no problem was found; `lines()` are
    the problem lines `snaprun crashtest` prints; `to_json()` its --json document."""

    agent: str
    args: list[str]
    baseline: dict[str, Any]
    trials: list[TrialSummary]
    problems: list[Problem]
    not_tried: dict[str, str]  # fault point -> why it was not tried
    scratch: str | None = None  # the scratch folder, when kept

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem, as `snaprun crashtest` prints them."""
        return [p.line() for p in self.problems]

    def assert_ok(self) -> None:
        """Raise AssertionError listing every problem (for tests)."""
        if self.problems:
            raise AssertionError(
                f"crashtest of {self.agent} found {len(self.problems)} problem(s):\n"
                + "\n".join(self.lines())
            )

    def to_json(self) -> dict[str, Any]:
        """The `--json` document (docs/crashtest.md)."""
        return {
            "agent": self.agent,
            "args": self.args,
            "ok": self.ok,
            "baseline": self.baseline,
            "kills": len(self.trials),
            "trials": [asdict(t) for t in self.trials],
            "problems": [asdict(p) for p in self.problems],
            "not_tried": self.not_tried,
            "scratch": self.scratch,
        }

    def dumps(self) -> str:
        """to_json() as indented JSON text."""
        return json.dumps(self.to_json(), indent=2)
