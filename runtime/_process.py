"""Process state a job owns, saved at each snapshot and put back at a restore.

    random          the global `random` state (random.getstate()), and numpy's legacy
                    global RandomState (np.random.get_state()) when numpy.random is
                    imported: a resumed job draws the same numbers as an uninterrupted run
    environment     the variables the job set or removed: those it wrote through
                    os.environ since its start (tracked, so one set to the value it
                    already had counts too) or whose value differs from the environment
                    its process started with (the baseline, taken before the agent runs);
                    applied on top of the resuming process's environment, so a variable
                    the job never touched keeps the resuming process's value. The
                    values are sealed with the store's key (a key load_dotenv() put
                    there is never in a snapshot in clear)
    working dir     os.getcwd() at the snapshot; a restore changes into it, and refuses
                    (ResourceReopenError) when it no longer exists

Unchanged since the job's previous snapshot (no write to os.environ, the same random
states and working directory), the process state is the previous snapshot's object
again and pickles to the same bytes: the sealed environment values are reused while
they and the store's key are unchanged (resources/_secrets.py, seal_once), so a fresh
nonce does not make every snapshot differ. The random state is read each time and
compared (the `random` module has no change counter); the environment is looked at
again only when os.environ's contents or its write count changed.

SNAPSTATE_* variables are snapstate's own (store, key, faults, lease TTL): never saved,
never changed by a restore.

The environment diff is applied while the snapshot is unpickled, before the frames and
globals (the record is the first entry of the state), so a value pickled as a reference
to an environment variable (Secret.from_env, SDK credentials) resolves against the
job's environment, as it would have in the uninterrupted run.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._abi import pinned
from .._errors import ResourceReopenError, SnapshotError
from ..resources._secrets import Sealed, seal_once
from ..serializers import _envsecrets

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["ProcessState", "begin", "capture", "restore"]

_OWN_PREFIX = "SNAPSTATE_"


class ProcessState:
    """What a snapshot records of the process. Unpickling it applies the environment
    diff at once (see the module docstring); `restore` does the rest."""

    __slots__ = ("random", "numpy_random", "env_set", "env_removed", "cwd", "baseline", "sealed")

    def __init__(
        self,
        random_state: tuple[Any, ...],
        numpy_random: Any,  # np.random.get_state() (numpy is optional), or None
        env_set: dict[str, str],
        env_removed: list[str],
        cwd: str,
    ) -> None:
        self.random, self.numpy_random = random_state, numpy_random
        self.env_set, self.env_removed, self.cwd = env_set, env_removed, cwd
        self.baseline: dict[str, str] | None = None  # set when unpickled: env before the diff
        self.sealed: Sealed | None = None  # the env values as last sealed (seal_once)

    def __reduce__(self) -> tuple[Callable[..., ProcessState], tuple[object, ...]]:
        # The names stay readable (snaprun inspect shows them); the values are sealed as
        # one credential that unpickles as a JSON str, sealed again only when they (or
        # the store's key) changed since the job's previous snapshot.
        env_set: dict[str, str] | tuple[list[str], object] = {}
        if self.env_set:
            sealed = seal_once(json.dumps(list(self.env_set.values())), self.sealed)
            if isinstance(sealed, Sealed):
                self.sealed = sealed
            env_set = (list(self.env_set), sealed)
        return (_loaded, (self.random, self.numpy_random, env_set, self.env_removed, self.cwd))


@pinned("process_state")
def _loaded(
    random_state: tuple[Any, ...],
    numpy_random: object,
    env_set: dict[str, str] | tuple[list[str], str],
    env_removed: list[str],
    cwd: str,
) -> ProcessState:
    if isinstance(env_set, tuple):  # (names, sealed values); older snapshots: a dict
        env_set = dict(zip(env_set[0], json.loads(env_set[1])))
    state = ProcessState(random_state, numpy_random, env_set, env_removed, cwd)
    state.baseline = dict(os.environ)
    _apply_env(env_set, env_removed)
    return state


def _apply_env(env_set: dict[str, str], env_removed: list[str]) -> None:
    for name, value in env_set.items():
        if not name.startswith(_OWN_PREFIX):
            os.environ[name] = value
    for name in env_removed:
        if not name.startswith(_OWN_PREFIX):
            os.environ.pop(name, None)


def _revert_env(baseline: dict[str, str]) -> None:
    for name in [k for k in os.environ if k not in baseline]:
        del os.environ[name]
    for name, value in baseline.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


# Writes through os.environ: name -> number of its last write (set or delete). A value
# compare cannot see a variable set to the value it already had; these numbers can.
_WRITES: dict[str, int] = {}
_TICK = itertools.count(1)
_LAST_WRITE = [0]  # the number of the last write


if TYPE_CHECKING:
    _Environ = os._Environ[str]
else:
    _Environ = type(os.environ)


class _TrackedEnviron(_Environ):
    """os.environ's own class plus a record of the names written (os.environ's class is
    swapped for it in place: every reference to os.environ keeps working)."""

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        _WRITES[key] = _LAST_WRITE[0] = next(_TICK)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        _WRITES[key] = _LAST_WRITE[0] = next(_TICK)


def _generation() -> int | None:
    """A number that changes with every write to os.environ, once writes are counted
    (serializers/_envsecrets.py looks the secret variables up again only then)."""
    return _LAST_WRITE[0] if type(os.environ) is _TrackedEnviron else None


_envsecrets.register_generation(_generation)


def _track() -> int:
    """Start recording os.environ's writes (once); the current write number."""
    if type(os.environ) is not _TrackedEnviron and type(os.environ) is _TrackedEnviron.__base__:
        os.environ.__class__ = _TrackedEnviron
    return next(_TICK)


class _Tracker:
    """Per job: the environment the job's process started with, the environment right
    after a restore applied its diff, the names that diff owned (carried forward
    into every later snapshot, so a chain of restores keeps the job's changes) and the
    write number from which os.environ's writes are the job's."""

    __slots__ = ("after_restore", "owned", "since", "last", "environ", "writes")

    def __init__(self, after_restore: dict[str, str], owned: set[str]) -> None:
        self.after_restore, self.owned = after_restore, owned
        self.since = _track()
        # The job's previous capture, and os.environ's contents and write count then.
        self.last: ProcessState | None = None
        self.environ: dict[object, object] | None = None
        self.writes = -1


def begin(job: Job) -> None:
    """The job starts from its entry function: the current environment is its baseline."""
    job._process_tracker = _Tracker(dict(os.environ), set())


def capture(job: Job) -> ProcessState:
    """The process state at a snapshot. A variable is saved when the job changed it since
    its start or last restore, or when the restored snapshot carried it. Unchanged
    since the job's previous snapshot: the same object (see the module docstring)."""
    tracker = getattr(job, "_process_tracker", None) or _Tracker(dict(os.environ), set())
    last = tracker.last
    data = getattr(os.environ, "_data", None)  # os.environ's own dict (encoded)
    environ = dict(data) if type(data) is dict else None
    writes = _LAST_WRITE[0]
    if (
        last is not None
        and environ is not None
        and environ == tracker.environ
        and writes == tracker.writes
        and type(os.environ) is _TrackedEnviron  # every write through it was counted
    ):
        env_set, removed = last.env_set, last.env_removed
    else:
        env_set, removed = _env_changes(tracker)
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        raise SnapshotError(
            "the job's working directory was removed while it ran; change "
            "into an existing directory (os.chdir) before snapshot()"
        ) from None
    numpy_random = None
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        numpy_random = np_random.get_state()
    random_state = random.getstate()
    tracker.environ, tracker.writes = environ, writes
    if last is not None:
        if random_state == last.random:
            random_state = last.random
        if (
            env_set is last.env_set
            and random_state is last.random
            and cwd == last.cwd
            and _same_numpy(numpy_random, last.numpy_random)
        ):
            return last
    state = ProcessState(random_state, numpy_random, env_set, removed, cwd)
    if last is not None and list(env_set.items()) == list(last.env_set.items()):
        state.sealed = last.sealed  # the same values: sealed once (seal_once checks it)
    tracker.last = state
    return state


def _env_changes(tracker: _Tracker) -> tuple[dict[str, str], list[str]]:
    """The variables the job set (name -> value) and removed, by name."""
    env, before = os.environ, tracker.after_restore
    names = set(tracker.owned)
    names.update(k for k, n in list(_WRITES.items()) if n > tracker.since)
    names.update(k for k, v in env.items() if before.get(k) != v)
    names.update(k for k in before if k not in env)
    env_set = {k: env[k] for k in sorted(names) if k in env and not k.startswith(_OWN_PREFIX)}
    removed = [k for k in sorted(names) if k not in env and not k.startswith(_OWN_PREFIX)]
    return env_set, removed


def _same_numpy(state: Any, previous: Any) -> bool:
    """Whether two np.random.get_state() values are equal (both None: no numpy)."""
    if state is None or previous is None:
        return state is previous
    if len(state) != len(previous):
        return False
    for a, b in zip(state, previous, strict=True):
        if hasattr(a, "tobytes"):  # the key array
            if not hasattr(b, "tobytes") or a.dtype != b.dtype or a.shape != b.shape:
                return False
            if a.tobytes() != b.tobytes():
                return False
        elif type(a) is not type(b) or a != b:
            return False
    return True


def restore(job: Job, state: ProcessState | None) -> None:
    """Put back the working directory and random states of a restored snapshot (its
    environment diff was applied when it was unpickled); refuses a working directory
    that no longer exists. A snapshot taken before process state was saved restores
    nothing and starts tracking from here."""
    if state is None:
        begin(job)
        return
    try:
        os.chdir(state.cwd)
    except OSError as exc:
        if state.baseline is not None:  # leave the process's environment as it was
            _revert_env(state.baseline)
        gone = isinstance(exc, (FileNotFoundError, NotADirectoryError))
        raise ResourceReopenError(
            f"the job's working directory {state.cwd} "
            + ("no longer exists" if gone else f"cannot be entered ({exc.strerror})")
            + ", so the job cannot continue where it was. The snapshot is intact: "
            + ("recreate the directory" if gone else "fix its permissions")
            + " and resume the job again."
        ) from None
    random.setstate(state.random)
    if state.numpy_random is not None:
        import numpy.random  # the job had imported it: its state was saved

        numpy.random.set_state(state.numpy_random)
    owned = set(state.env_set) | set(state.env_removed)
    job._process_tracker = _Tracker(dict(os.environ), owned)
