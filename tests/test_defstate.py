"""State on the agent's functions and classes (runtime/_defstate.py), in process: a
module is imported, its functions and classes mutated, their state pickled with the
module's globals in one pass (as Job._freeze does), then the module is imported again
from a second copy of its source (unchanged or edited, as after a fix) and the state
restored onto it (as Job.restore does)."""

from __future__ import annotations

import importlib.util
import socket
import sys
import textwrap
import types

import pytest

from snapstate.runtime import _agent, _defstate
from snapstate.runtime._job import Job
from snapstate.serializers import _pickler

_COUNT = [0]


def _load(tmp_path, version: str, name: str, source: str) -> types.ModuleType:
    """Import `source` as module `name` from its own file (replacing any earlier one)."""
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
    name = f"defstate_subject_{_COUNT[0]}"
    yield name
    sys.modules.pop(name, None)


def _freeze(module) -> bytes:
    return _pickler.dumps(
        {"globals": _agent.capture_globals([module]), "defs": _defstate.capture([module])}
    )


def _thaw(blob: bytes) -> None:
    state = _pickler.loads(blob)
    _agent.restore_globals(state["globals"])
    _defstate.restore(state["defs"], state["globals"])


BASE = """
    G = [1]

    def f(x, bodies=G, *, seen=[]):
        seen.append(x)
        return bodies

    def g(x, n=10):
        return x + n

    def h(x, acc=[]):
        acc.append(x)
        return acc

    def body_changes(x, acc=[]):
        acc.append(x)
        return acc

    class C:
        count = 0
        LIMIT = 10
        became_method = 1
        temp = "x"
        ALIAS = G

        def m(self, acc=[]):
            acc.append(1)
"""


def test_unchanged_code_gets_saved_state_with_identity(tmp_path, modname):
    """Defaults aliasing a global come back as that same restored global, mutable
    defaults, kwdefaults, function attributes and class attributes keep their values."""
    v1 = _load(tmp_path, "v1", modname, BASE)
    v1.G.append(2)
    v1.f(1)
    v1.h(5)
    v1.f.calls = 3
    v1.C.count = 7
    v1.C.added = "new"
    del v1.C.temp
    v1.C().m()
    blob = _freeze(v1)
    v2 = _load(tmp_path, "v2", modname, BASE)
    _thaw(blob)
    assert v2.G == [1, 2] and v2.f.__defaults__[0] is v2.G and v2.C.ALIAS is v2.G
    assert v2.f.__kwdefaults__ == {"seen": [1]} and v2.h.__defaults__ == ([5],)
    assert v2.f.calls == 3
    assert (v2.C.count, v2.C.added, hasattr(v2.C, "temp")) == (7, "new", False)
    assert v2.C.m.__defaults__ == ([1],)


CHANGED = """
    G = [1]

    def f(x, bodies=G, *, seen=[]):
        seen.append(x)
        return bodies

    def g(x, n=20):
        return x + n

    def _other(x, acc=[]):
        return acc

    h = _other

    def body_changes(x, acc=[]):
        acc.append(x * 2)
        return acc

    class C:
        count = 0
        LIMIT = 20
        temp = "x"
        ALIAS = G

        def became_method(self):
            return "method"

        def m(self, acc=[]):
            acc.append(1)
"""


def test_changed_definitions_keep_their_new_state(tmp_path, modname):
    """After a fix: a function whose default expression or body changed keeps its new
    defaults (its attributes still come back); a name now bound to another function
    gets nothing; a class attribute whose initializer changed keeps the new value, one
    that is now a method stays a method; unchanged ones get the saved state."""
    v1 = _load(tmp_path, "v1", modname, BASE)
    v1.f(1)
    v1.g.__defaults__ = (11,)
    v1.g.tag = "kept"
    v1.h(5)
    v1.body_changes(3)
    v1.C.count, v1.C.LIMIT, v1.C.became_method = 7, 11, 2
    del v1.C.temp
    blob = _freeze(v1)
    v2 = _load(tmp_path, "v2", modname, CHANGED)
    _thaw(blob)
    assert v2.f.__kwdefaults__ == {"seen": [1]}  # unchanged: saved
    assert v2.g.__defaults__ == (20,) and v2.g.tag == "kept"
    assert v2.h.__defaults__ == ([],) and v2._other.__defaults__ == ([],)
    assert v2.body_changes.__defaults__ == ([],)
    assert v2.C.count == 7 and v2.C.LIMIT == 20
    assert v2.C().became_method() == "method"
    assert not hasattr(v2.C, "temp")  # deleted by the job; its initializer is unchanged


def test_unpicklable_class_attribute_is_named_by_path(tmp_path, modname):
    """A class attribute holding a live socket refuses the snapshot naming the module,
    the class and the attribute (Job._roots covers the saved class state)."""
    mod = _load(
        tmp_path,
        "v1",
        modname,
        """
        class Server:
            class Conn:
                sock = None
    """,
    )
    sock = socket.socket()
    try:
        mod.Server.Conn.sock = sock
        state = {
            "frames": [],
            "globals": _agent.capture_globals([mod]),
            "defs": _defstate.capture([mod]),
            "handled": None,
        }
        with pytest.raises(_pickler.UnpicklableError) as info:
            _pickler.dumps(state, roots=lambda: Job._roots(state))
        assert f"module {modname}, class Server.Conn, attribute 'sock'" in str(info.value)
    finally:
        sock.close()


def test_enum_abc_dataclass_namedtuple_pydantic_left_alone(tmp_path, modname):
    """Enum classes are skipped entirely, an ABC's _abc_impl and a dataclass's or
    NamedTuple's generated code are never saved, what pydantic's metaclass keeps on a
    model (model_config, model_post_init) is not saved (its methods' defaults are)."""
    mod = _load(
        tmp_path,
        "v1",
        modname,
        """
        import abc, enum
        from dataclasses import dataclass, field
        from typing import NamedTuple
        import pydantic

        class Color(enum.Enum):
            RED = 1
            registry = 2

        class Base(abc.ABC):
            made = 0
            @abc.abstractmethod
            def run(self): ...

        @dataclass
        class Point:
            x: int = 0
            tags: list = field(default_factory=list)

        class Pair(NamedTuple):
            a: int = 1

        class Model(pydantic.BaseModel):
            name: str = "n"
            def tagged(self, acc=[]):
                return acc
    """,
    )
    defs = _defstate.capture([mod])[modname]
    classes, functions = defs["classes"], defs["functions"]
    assert "Color" not in classes and not any(p.startswith("Color") for p in functions)
    assert classes["Base"][0] == {"made": 0}
    assert classes["Point"][0] == {"x": 0}
    assert "Point.__init__" not in functions and "Pair.__new__" not in functions
    assert classes["Model"][0] == {} and classes["Model"][3] == {}  # model_config: pydantic's
    assert functions["Model.tagged"][2] == ([],)
    blob = _pickler.dumps(defs)  # all of it pickles
    _defstate.restore({modname: _pickler.loads(blob)})
    assert mod.Color.RED.value == 1 and mod.Point().tags == [] and mod.Pair().a == 1
    assert mod.Model().name == "n"


def test_library_sentinels_in_defaults_and_class_attributes_keep_identity(tmp_path, modname):
    """A default or class attribute that is a library's module-level sentinel
    (dataclasses.MISSING) is still that very object after a restore, while the
    mutable default next to it gets its saved value."""
    source = """
        import dataclasses

        def f(x=dataclasses.MISSING, acc=[]):
            acc.append(x)
            return x is dataclasses.MISSING

        class C:
            marker = dataclasses.MISSING
            hits = 0
    """
    v1 = _load(tmp_path, "v1", modname, source)
    v1.f(1)
    v1.C.hits = 4
    blob = _freeze(v1)
    v2 = _load(tmp_path, "v2", modname, source)
    _thaw(blob)
    import dataclasses

    assert v2.f() is True and v2.f.__defaults__[1] == [1, dataclasses.MISSING]
    assert v2.C.marker is dataclasses.MISSING and v2.C.hits == 4


def test_decorator_closure_comes_back_only_onto_the_same_decoration(tmp_path, modname):
    """A wrapper's closure state (`calls`) comes back while the decorated definition is
    unchanged; after a fix that changes the decorator's argument (`@counted(100)`), the
    fresh closure built from the new argument wins. The wrapped function in the cell is
    always the fresh import's (its defaults restored on it)."""
    source = """
        import functools

        def counted(start):
            def deco(fn):
                calls = start
                @functools.wraps(fn)
                def wrapper(*args):
                    nonlocal calls
                    calls += 1
                    return (fn(*args), calls)
                return wrapper
            return deco

        @counted({start})
        def step(i, seen=[]):
            seen.append(i)
            return len(seen)
    """
    v1 = _load(tmp_path, "v1", modname, source.format(start=0))
    v1.step(0)
    blob = _freeze(v1)
    v2 = _load(tmp_path, "v2", modname, source.format(start=0))
    _thaw(blob)
    assert v2.step(1) == (2, 2)
    v3 = _load(tmp_path, "v3", modname, source.format(start=100))
    _thaw(blob)
    assert v3.step(1) == (1, 101)


def test_functions_set_on_classes_follow_the_class_body(tmp_path, modname):
    """Hooks and methods the job set or deleted on its classes come back while the class
    body's definition of that name is unchanged (a method the job deleted is deleted
    again, a hook set on a slotted class kept, its slots untouched); after a fix that
    changes that definition, the new class body wins."""
    source = """
        def shout(r):
            return "shout"

        class Hooks:
            __slots__ = ("a",)
            on_done = None
            on_fail = None

            def legacy(self):
                return "legacy"

            def describe(self):
                return {text!r}
    """

    def run(v1):
        v1.Hooks.on_done = v1.Hooks.on_fail = property(v1.shout)
        v1.Hooks.describe = v1.shout
        del v1.Hooks.legacy

    v1 = _load(tmp_path, "v1", modname, source.format(text="plain"))
    run(v1)
    blob = _freeze(v1)
    v2 = _load(tmp_path, "v2", modname, source.format(text="plain"))
    _thaw(blob)
    h = v2.Hooks()
    h.a = 1
    assert (h.on_done, h.on_fail, h.describe(), h.a) == ("shout", "shout", "shout", 1)
    assert v2.Hooks.__dict__["on_done"].fget is v2.shout and not hasattr(v2.Hooks, "legacy")
    v3 = _load(tmp_path, "v3", modname, source.format(text="fixed"))
    _thaw(blob)
    assert v3.Hooks().describe() == "fixed" and v3.Hooks().on_done == "shout"
