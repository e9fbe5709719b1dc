"""Adversarial review of issue 9's engine side: silent wrong restores found by a
reviewer. Each test is the smallest reproduction of one finding (all fixed; each
failed on the code before its fix).

In process, as tests/test_defstate.py does: a module is imported from a source file,
the job mutates it, its globals and function/class state are pickled in one pass,
the module is imported again from a fresh copy of the same source (what a resumed
process does) and the state is restored onto it. Module-level library objects are
simulated with a fresh module object in sys.modules, as a new process would have."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import textwrap
import types

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

from snapstate.runtime import _agent, _defstate
from snapstate.serializers import _pickler, _refs

_COUNT = [0]


def _load(tmp_path, version: str, name: str, source: str) -> types.ModuleType:
    folder = tmp_path / version
    folder.mkdir()
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def modname():
    _COUNT[0] += 1
    name = f"review_engine_subject_{_COUNT[0]}"
    yield name
    sys.modules.pop(name, None)


def _freeze(module) -> bytes:
    _refs.bind([module])
    try:
        return _pickler.dumps(
            {"globals": _agent.capture_globals([module]), "defs": _defstate.capture([module])}
        )
    finally:
        _refs.bind([])


def _thaw(blob: bytes) -> None:
    state = _pickler.loads(blob)
    _agent.restore_globals(state["globals"])
    _defstate.restore(state["defs"], state["globals"])


def _round_trip(tmp_path, name: str, source: str, mutate):
    """Import, run `mutate(module)`, freeze, import afresh, thaw: the fresh module."""
    v1 = _load(tmp_path, "v1", name, source)
    mutate(v1)
    blob = _freeze(v1)
    v2 = _load(tmp_path, "v2", name, source)
    _thaw(blob)
    return v2


def test_stateful_decorator_closure_survives(tmp_path, modname):
    """A decorator of the agent's own that keeps its state in the closure (`nonlocal
    calls`, a `cache = {}` memo: the most common way to write one) keeps it: the call
    after the restore is call number 2, as in an uninterrupted run; the memo's dict is
    the one a global also holds (identity kept), not a copy."""
    source = """
        import functools

        CACHES = []

        def memo(fn):
            cache = {}
            CACHES.append(cache)
            @functools.wraps(fn)
            def wrapper(x):
                if x not in cache:
                    cache[x] = fn(x)
                return cache[x]
            return wrapper

        @memo
        def square(x):
            return x * x

        def counted(fn):
            calls = 0
            @functools.wraps(fn)
            def wrapper(*args):
                nonlocal calls
                calls += 1
                return (fn(*args), calls)
            return wrapper

        @counted
        def step(i):
            return i * 10
    """
    v2 = _round_trip(tmp_path, modname, source, lambda m: (m.step(0), m.square(3)))
    assert v2.step(1) == (10, 2)
    cache = v2.square.__closure__[v2.square.__code__.co_freevars.index("cache")].cell_contents
    assert cache == {3: 9} and v2.CACHES == [cache] and v2.CACHES[0] is cache


def test_default_under_a_library_decorator_survives(tmp_path, modname):
    """A mutable default of a function decorated by a library decorator that wraps it
    with functools.wraps (@contextlib.contextmanager, @functools.singledispatch...)
    keeps what calls added: the agent's function is reached through __wrapped__."""
    source = """
        import contextlib

        @contextlib.contextmanager
        def session(name, log=[]):
            log.append(name)
            yield len(log)
    """

    def mutate(m):
        with m.session("a"):
            pass

    v2 = _round_trip(tmp_path, modname, source, mutate)
    with v2.session("b") as n:
        assert n == 2
    assert v2.session.__wrapped__.__defaults__ == (["a", "b"],)


def test_class_attribute_rebound_to_a_function_survives(tmp_path, modname):
    """A strategy or hook the job sets on one of its classes at run time
    (`Policy.choose = staticmethod(last)`, a monkeypatched method) is still set after
    the restore; the class body is unchanged, so nothing justifies the fresh value."""
    source = """
        def first(xs):
            return xs[0]

        def last(xs):
            return xs[-1]

        def fancy(self):
            return "fancy"

        class Policy:
            choose = staticmethod(first)

            def describe(self):
                return "plain"

        class Other:
            pass

        class Outer:
            class Inner:
                pass
    """

    def mutate(m):
        m.Policy.choose = staticmethod(m.last)
        m.Policy.describe = m.fancy
        m.Outer.Inner = m.Other

    v2 = _round_trip(tmp_path, modname, source, mutate)
    assert v2.Policy.choose([1, 2, 3]) == 3
    assert v2.Policy().describe() == "fancy" and v2.Policy.describe is v2.fancy
    assert v2.Outer.Inner is v2.Other


def test_class_hook_set_to_a_function_is_not_deleted(tmp_path, modname):
    """A hook slot `on_done = None` in the class body that the job set to a function
    (`Hooks.on_done = shout`) is that function after the restore: the restore does not
    delete it (a resumed job would die with AttributeError on `Hooks.on_done` where the
    uninterrupted run goes on)."""
    source = """
        def shout(r):
            return f"done {r}!"

        class Hooks:
            on_done = None
    """

    def mutate(m):
        m.Hooks.on_done = m.shout

    v2 = _round_trip(tmp_path, modname, source, mutate)
    assert v2.Hooks.__dict__.get("on_done", "deleted") is v2.shout


def test_class_attribute_changed_between_library_constants_survives(tmp_path, modname):
    """A class attribute (or default) the job changed from one library constant to
    another value of the same type (`Clock.tz = UTC` -> UTC+2, `re.IGNORECASE` ->
    `re.MULTILINE`) keeps the job's value; it is not reverted to the class body's."""
    source = """
        import datetime
        import re

        class Clock:
            tz = datetime.timezone.utc
            flags = re.IGNORECASE

        def stamp(tz=datetime.timezone.utc):
            return tz
    """

    def mutate(m):
        import datetime
        import re

        m.Clock.tz = datetime.timezone(datetime.timedelta(hours=2))
        m.Clock.flags = re.MULTILINE
        m.stamp.__defaults__ = (datetime.timezone(datetime.timedelta(hours=2)),)

    v2 = _round_trip(tmp_path, modname, source, mutate)
    assert str(v2.Clock.tz) == "UTC+02:00"
    assert v2.Clock.flags.name == "MULTILINE"
    assert str(v2.stamp()) == "UTC+02:00"


class Registry:
    """A library's registry class (this test module is not the agent's)."""

    def __init__(self):
        self.items = {}


def test_library_object_mutated_by_the_job_keeps_its_state():
    """An object of a library module that the job changed in place
    (`reg = lib.REGISTRY; reg.items['tool'] = ...`, `decimal.DefaultContext.prec = 5`)
    comes back as the new process's object (identity) holding the job's changes, not
    as the import-time object: either both, or a refusal, never a silent revert."""
    spec = importlib.machinery.ModuleSpec("ident_review_lib", None)
    lib = types.ModuleType("ident_review_lib")
    lib.__spec__ = spec
    lib.REGISTRY = Registry()
    sys.modules["ident_review_lib"] = lib
    try:
        _refs.bind([])
        lib.REGISTRY.items["tool"] = "search"
        data = _pickler.dumps({"reg": lib.REGISTRY})
        fresh = types.ModuleType("ident_review_lib")  # the resumed process's import
        fresh.__spec__ = spec
        fresh.REGISTRY = Registry()
        sys.modules["ident_review_lib"] = fresh
        back = _pickler.loads(data)
        assert back["reg"].items == {"tool": "search"}
        assert back["reg"] is fresh.REGISTRY  # the library's own object
    finally:
        sys.modules.pop("ident_review_lib", None)


def test_killed_and_resumed_agent_matches_plain_run(tmp_path):
    """tests/agents/review_engine.py (closure decorator, contextmanager default, class
    attribute rebound to a function, Clock.tz changed from UTC, decimal.DefaultContext
    changed in place) killed right after snapshot 1 and resumed prints what an
    uninterrupted run prints."""
    agent = AGENTS / "review_engine.py"
    base = snaprun("run", "--store", tmp_path / "base", "--job", "j", agent, cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    store = tmp_path / "kill"
    killed = snaprun(
        "run", "--store", store, "--job", "j", agent, cwd=tmp_path, fault="after-snapshot:1"
    )
    assert killed.returncode == -9, killed.stderr
    assert snapshot_seqs(store, "j") == [1]
    resumed = snaprun("resume", "--store", store, "j", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert killed.stdout + resumed.stdout == base.stdout


def test_relative_file_reopens_the_file_it_was_opened_on(tmp_path, monkeypatch):
    """A file opened by a relative name (`open("out.txt", "a")` in directory a) and a
    later os.chdir(b) (now common: the job's cwd is restored) reopens a/out.txt after
    the restore. Today it reopens b/out.txt, truncates it to a's position and appends
    a's writes there: another file of the user's is silently damaged."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "out.txt").write_text("b-file\n")
    monkeypatch.chdir(a)
    f = open("out.txt", "a")
    try:
        f.write("first\n")
        monkeypatch.chdir(b)
        blob = _pickler.dumps({"f": f})
    finally:
        f.close()
    g = _pickler.loads(blob)["f"]
    try:
        g.write("second\n")
    finally:
        g.close()
    assert (b / "out.txt").read_text() == "b-file\n"
    assert (a / "out.txt").read_text() == "first\nsecond\n"


def test_object_the_job_installed_into_a_library_module_comes_back():
    """An object the job made and installed into a library module before its first
    snapshot (`urllib.request.install_opener(opener)`, `somelib.client = Client()`)
    is still that object (same state) after the restore. Today the job's own local
    `opener` comes back as urllib.request._opener of the fresh process: None (a real
    snaprun run of that agent dies with AttributeError on `opener.addheaders`)."""
    spec = importlib.machinery.ModuleSpec("ident_review_installed", None)
    lib = types.ModuleType("ident_review_installed")
    lib.__spec__ = spec
    lib._opener = None
    sys.modules["ident_review_installed"] = lib
    try:
        _refs.bind([])
        opener = Registry()  # made by the job ...
        opener.items["User-agent"] = "rev-agent"
        lib._opener = opener  # ... and installed (install_opener)
        data = _pickler.dumps({"opener": opener})
        fresh = types.ModuleType("ident_review_installed")  # as the new process imports it
        fresh.__spec__ = spec
        fresh._opener = None
        sys.modules["ident_review_installed"] = fresh
        back = _pickler.loads(data)
        assert back["opener"] is not None
        assert back["opener"].items == {"User-agent": "rev-agent"}
        assert fresh._opener is back["opener"]  # installed again, as the job had
    finally:
        sys.modules.pop("ident_review_installed", None)


def test_variable_the_job_set_survives_a_resume_under_another_environment(monkeypatch, tmp_path):
    """`os.environ["REV_MODE"] = "fast"` set by the job is "fast" after a resume from a
    shell where REV_MODE is unset, as in the uninterrupted run, even though the
    job's own shell happened to have REV_MODE=fast already; a variable the job never
    wrote keeps the resuming shell's value."""
    from snapstate.resources import _secrets
    from snapstate.runtime import _process
    from snapstate.serializers._keys import KeyRing

    job = types.SimpleNamespace()
    monkeypatch.setenv("REV_MODE", "fast")  # the shell the job started from
    monkeypatch.setenv("REV_OTHER", "job's shell")
    _process.begin(job)
    os.environ["REV_MODE"] = "fast"  # the job sets it
    _secrets.bind(KeyRing(str(tmp_path / "keys")))  # as the runtime does
    try:
        blob = _pickler.dumps({"process": _process.capture(job)})
        monkeypatch.delenv("REV_MODE")  # the shell that resumes it
        monkeypatch.setenv("REV_OTHER", "resuming shell")
        _pickler.loads(blob)
    finally:
        _secrets.bind(None)
    assert os.environ.get("REV_MODE") == "fast"
    assert os.environ.get("REV_OTHER") == "resuming shell"


def test_counter_on_a_class_with_a_library_metaclass_survives(tmp_path, modname):
    """A class-level counter on the agent's own typing.Protocol subclass and a ClassVar
    counter on a pydantic model (classes whose metaclass a library defines) keep the
    job's value after the restore, not their import-time value; what the metaclass set
    (Protocol's _is_protocol, the model's validation) still works."""
    source = """
        import typing
        import pydantic

        class Tool(typing.Protocol):
            created = 0

            def run(self) -> str: ...

        class Model(pydantic.BaseModel):
            instances: typing.ClassVar[int] = 0
            name: str = "n"
    """

    def mutate(m):
        m.Tool.created += 3
        m.Model.instances += 2

    v2 = _round_trip(tmp_path, modname, source, mutate)
    assert v2.Tool.created == 3 and v2.Tool._is_protocol
    assert v2.Model.instances == 2 and v2.Model(name="x").name == "x"
