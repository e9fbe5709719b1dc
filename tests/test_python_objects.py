"""The interpreter's own machinery that libraries keep inside their objects comes back
exactly after a restore, or is refused by name (resources/_python.py,
resources/_frameworks.py, serializers/_pickler.py):

  - context variables: a library's instance-level ContextVar is made again with its
    name and default, one object for every holder; a module's is saved by reference;
    a contextvars.Context keeps its values; a sync job's and each async task's context
    come back in a new process (real subprocesses, SIGKILL right after a snapshot);
  - weak references, WeakMethod and the weak containers point at the restored
    referents (and stay weak); a referent nothing else saves, or a callback, is refused;
  - threading.local keeps this thread's attributes; an idle event loop comes back as a
    new loop of its class, a closed one closed, a busy one is refused;
  - objects pickle's default way cannot rebuild (a __new__ that needs arguments, a
    __getattr__ that delegates to an attribute) load; any library error while saving
    is a named refusal whose path walks no cycle twice and shows no memory address;
  - pydantic secrets are never in the payload, tenacity keeps its statistics, wrapt
    proxies are rebuilt around the restored object.

In-process round trips go through serializers._pickler.dumps/loads (what a snapshot
writes and a restore reads)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import weakref
from pathlib import Path

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

from snapstate.serializers import _pickler, _refs
from snapstate.serializers._describe import GENERIC_FIX

try:  # optional libraries: the tests that use them are skipped without them
    import pydantic
except ImportError:  # pragma: no cover
    pydantic = None
try:
    import wrapt
except ImportError:  # pragma: no cover
    wrapt = None

CTX_LIB = Path(__file__).parent / "ctx_lib"

# A module's objects (this test module is not the agent's): saved by reference.
MODULE_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("snaptest_module_var", default="m")


class Obj:
    """A plain object of this module (saved by value, held by the state or not)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def double(self) -> int:
        return self.n * 2

    def __hash__(self) -> int:
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Obj) and other.n == self.n


MODULE_OBJ = Obj(99)


class Unsaveable:
    """A library object whose own __reduce__ fails with a foreign exception (wrapt's
    proxies raise NotImplementedError)."""

    def __reduce__(self):
        raise NotImplementedError("this object cannot be pickled")


@pytest.fixture(autouse=True)
def no_agent_modules():
    """In-process round trips: no module is the agent's (as before any job), so this
    module's globals are a library's, saved by reference."""
    _refs.bind([])
    yield
    _refs.bind([])


def roundtrip(obj):
    return _pickler.loads(_pickler.dumps(obj))


# ------------------------------------------------------------------------ context variables
def test_instance_level_contextvar_is_made_again_with_name_and_default_and_one_identity():
    """A ContextVar that is no module's attribute (pydantic-ai's Agent._override_name)
    comes back as a new variable with the same name and default, and the two holders of
    it hold one object after the load; one without a default still has none."""
    with_default = contextvars.ContextVar("tenant", default="t-0")
    without = contextvars.ContextVar("span")
    holder = {"var": with_default, "bare": without}
    state = {"holder": holder, "list": [with_default, without]}
    back = roundtrip(state)
    var, bare = back["holder"]["var"], back["holder"]["bare"]
    assert var is back["list"][0] and bare is back["list"][1]
    assert var is not with_default  # made again: no module holds it
    assert (var.name, var.get()) == ("tenant", "t-0")
    assert bare.name == "span"
    with pytest.raises(LookupError):
        bare.get()


def test_module_level_contextvar_is_saved_by_reference():
    """A module's ContextVar comes back as the module's own object (code that reads it
    by its global name sees the values set through the restored reference); an
    instance-level one saved in the same state is not."""
    local = contextvars.ContextVar("local")
    back = roundtrip({"module": MODULE_VAR, "local": local})
    assert back["module"] is MODULE_VAR
    assert back["local"] is not local


def test_context_keeps_its_values_for_the_restored_variables():
    """A contextvars.Context comes back holding the same values for the same variables:
    the module's variable itself and the restored instance-level one (the same object
    the state's other holder gets); a variable it never set stays unset in it."""
    inst = contextvars.ContextVar("inst")
    unset = contextvars.ContextVar("unset", default="d")
    ctx = contextvars.Context()
    ctx.run(MODULE_VAR.set, "module-value")
    ctx.run(inst.set, {"deep": [1, 2]})
    back = roundtrip({"ctx": ctx, "inst": inst, "unset": unset})
    new_ctx, new_inst = back["ctx"], back["inst"]
    assert isinstance(new_ctx, contextvars.Context) and new_ctx is not ctx
    assert len(new_ctx) == 2
    assert new_ctx[MODULE_VAR] == "module-value"
    assert new_ctx[new_inst] == {"deep": [1, 2]}
    assert new_ctx.run(new_inst.get) == {"deep": [1, 2]}
    assert back["unset"] not in new_ctx and new_ctx.run(back["unset"].get) == "d"
    assert MODULE_VAR.get() == "m"  # the load set nothing in the running context


# ------------------------------------------------------------------------ weak references
def test_weakref_to_an_object_also_held_strongly_points_at_the_restored_object():
    """A weak reference whose referent the state also holds (in a list, or as an
    attribute of another object) comes back pointing at the restored referent, which
    is the object the strong holder got."""
    a, b = Obj(1), Obj(2)
    holder = Obj(3)
    holder.kept = b
    back = roundtrip({"objs": [a], "holder": holder, "ra": weakref.ref(a), "rb": weakref.ref(b)})
    assert type(back["ra"]) is weakref.ref
    assert back["ra"]() is back["objs"][0]
    assert back["rb"]() is back["holder"].kept
    assert back["ra"]().n == 1 and back["rb"]().n == 2


def test_weakref_to_the_object_being_saved_itself():
    """An object holding a weak reference to itself (a parent back-reference): the
    object saved is its own strong holder."""
    node = Obj(7)
    node.me = weakref.ref(node)
    back = roundtrip(node)
    assert back.me() is back


@pytest.mark.smoke
def test_restored_weakref_is_still_weak():
    """The restored reference does not keep its referent alive: once the restored
    strong holders are dropped, it dies (snapstate keeps referents only while loading)."""
    a = Obj(1)
    back = roundtrip({"objs": [a], "ref": weakref.ref(a)})
    ref = back["ref"]
    assert ref() is back["objs"][0]
    del back
    gc.collect()
    assert ref() is None


def test_dead_weakref_stays_dead():
    """A weak reference whose referent is gone comes back as a dead weakref.ref."""
    gone = Obj(1)
    ref = weakref.ref(gone)
    del gone
    gc.collect()
    assert ref() is None
    back = roundtrip({"ref": ref})
    assert type(back["ref"]) is weakref.ref
    assert back["ref"]() is None


def test_weakref_whose_referent_nothing_else_holds_is_refused():
    """A weak reference to an object nothing else in the state holds would be dead
    after a restore: refused, naming where it is and saying why (not saved dead)."""
    lonely = Obj(1)
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"cache": {"ref": weakref.ref(lonely)}})
    message = str(info.value)
    assert "value['cache']['ref']" in message
    assert "weak reference to" in message and "Obj" in message
    assert "nothing else in the snapshot holds" in message


def test_weakref_to_a_module_level_object_needs_no_other_holder():
    """A module's object is saved by reference (the new process's module holds it):
    a weak reference to it alone is saved and points at the module's object."""
    back = roundtrip({"ref": weakref.ref(MODULE_OBJ)})
    assert back["ref"]() is MODULE_OBJ


def test_weak_method_comes_back_bound_to_the_restored_owner():
    """A WeakMethod comes back as a WeakMethod of the same function bound to the
    restored owner; one whose owner nothing else holds is refused by name."""
    owner = Obj(21)
    back = roundtrip({"owner": owner, "method": weakref.WeakMethod(owner.double)})
    method = back["method"]
    assert isinstance(method, weakref.WeakMethod)
    bound = method()
    assert bound.__self__ is back["owner"] and bound.__func__ is Obj.double
    assert bound() == 42
    lonely = Obj(1)  # alive here, but held by nothing the state saves
    with pytest.raises(_pickler.UnpicklableError, match="WeakMethod to Obj.double"):
        _pickler.dumps({"method": weakref.WeakMethod(lonely.double)})


def test_weak_containers_round_trip_with_their_live_entries():
    """WeakValueDictionary, WeakKeyDictionary and WeakSet come back with their live
    entries pointing at the restored objects, as the same classes."""
    a, b = Obj(1), Obj(2)
    state = {
        "objs": [a, b],
        "values": weakref.WeakValueDictionary({"a": a, "b": b}),
        "keys": weakref.WeakKeyDictionary({a: "A", b: "B"}),
        "set": weakref.WeakSet([a, b]),
    }
    back = roundtrip(state)
    ra, rb = back["objs"]
    assert type(back["values"]) is weakref.WeakValueDictionary
    assert back["values"]["a"] is ra and back["values"]["b"] is rb and len(back["values"]) == 2
    assert type(back["keys"]) is weakref.WeakKeyDictionary
    assert {id(k): v for k, v in back["keys"].items()} == {id(ra): "A", id(rb): "B"}
    assert type(back["set"]) is weakref.WeakSet
    assert {id(x) for x in back["set"]} == {id(ra), id(rb)}


class TaggedSet(weakref.WeakSet):
    """A library's WeakSet subclass with an attribute of its own."""

    def __init__(self, items=(), label="none"):
        super().__init__(items)
        self.label = label


class Registry(weakref.WeakValueDictionary):
    """A library's WeakValueDictionary subclass with an attribute of its own."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner


def test_weak_container_subclasses_keep_their_class_and_attributes():
    """A subclass of a weak container comes back as that subclass with its own
    attributes, and its entries; a referent nothing else holds is still refused."""
    a = Obj(1)
    tagged = TaggedSet([a], label="listeners")
    registry = Registry("plugin-host")
    registry["a"] = a
    back = roundtrip({"objs": [a], "tagged": tagged, "registry": registry})
    ra = back["objs"][0]
    assert type(back["tagged"]) is TaggedSet and back["tagged"].label == "listeners"
    assert list(back["tagged"]) == [ra] and next(iter(back["tagged"])) is ra
    assert type(back["registry"]) is Registry and back["registry"].owner == "plugin-host"
    assert back["registry"]["a"] is ra
    with pytest.raises(_pickler.UnpicklableError, match=r"WeakValueDictionary \(key 'a'\)"):
        _pickler.dumps({"registry": registry})


def test_restored_weak_container_is_still_weak():
    """The restored WeakValueDictionary loses an entry once the restored object it
    points at has no other holder (it did not become a strong dict)."""
    a = Obj(1)
    back = roundtrip({"objs": [a], "values": weakref.WeakValueDictionary({"a": a})})
    values = back["values"]
    assert len(values) == 1
    del back
    gc.collect()
    assert len(values) == 0


def test_weakref_with_a_callback_is_refused():
    """A weak reference with a callback cannot be saved exactly (the callback is code
    that runs when the referent dies): refused, saying so."""
    a = Obj(1)
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"objs": [a], "ref": weakref.ref(a, lambda r: None)})
    assert "value['ref']" in str(info.value)
    assert "callback" in str(info.value)


class SlotRef(weakref.ref):
    """A weakref subclass carrying data in a slot (weakref's docs show this pattern)."""

    __slots__ = ("tag",)

    def __new__(cls, ob, tag):
        self = super().__new__(cls, ob)
        self.tag = tag
        return self

    def __init__(self, ob, tag):
        super().__init__(ob)


def test_weakref_subclass_comes_back_as_its_class_or_is_refused():
    """'Each comes back exactly or is refused': a weakref subclass holding data in a
    slot either keeps its class and data, or the dump is refused."""
    a = Obj(1)
    try:
        data = _pickler.dumps({"objs": [a], "ref": SlotRef(a, "listener")})
    except _pickler.UnpicklableError:
        return
    back = _pickler.loads(data)
    assert type(back["ref"]) is SlotRef
    assert back["ref"].tag == "listener" and back["ref"]() is back["objs"][0]


def test_weak_proxy_comes_back_as_a_proxy_to_the_restored_object_or_is_refused():
    """A weakref.proxy (a library's back-reference to its parent) either comes back
    as a proxy to the restored referent, or the dump is refused."""
    a = Obj(1)
    try:
        data = _pickler.dumps({"objs": [a], "proxy": weakref.proxy(a)})
    except _pickler.UnpicklableError:
        return
    back = _pickler.loads(data)
    assert type(back["proxy"]) is weakref.ProxyType
    back["proxy"].n = 5
    assert back["objs"][0].n == 5


def _noop(*args):
    pass


def test_finalizer_comes_back_alive_or_is_refused():
    """A weakref.finalize whose referent the state holds either comes back alive
    (attached to the restored referent) or the dump is refused."""
    a = Obj(1)
    fin = weakref.finalize(a, _noop, "closing")
    try:
        try:
            data = _pickler.dumps({"objs": [a], "fin": fin})
        except _pickler.UnpicklableError:
            return
        back = _pickler.loads(data)
        assert back["fin"].alive
        back["fin"].detach()
    finally:
        fin.detach()


# ------------------------------------------------------------------------ thread-locals
class Settings(threading.local):
    """A threading.local subclass: each thread starts from __init__'s values."""

    def __init__(self):
        self.retries = 0


def test_thread_local_keeps_this_threads_attributes():
    """A threading.local (and a subclass) comes back as a new local of its class with
    the attributes this thread saw; another thread starts from scratch (its own
    values were never the job's)."""
    plain = threading.local()
    plain.request = "r-1"
    settings = Settings()
    settings.retries = 4
    back = roundtrip({"plain": plain, "settings": settings})
    assert type(back["plain"]) is threading.local and back["plain"] is not plain
    assert back["plain"].request == "r-1"
    assert type(back["settings"]) is Settings and back["settings"].retries == 4
    seen = {}

    def other():
        seen["request"] = getattr(back["plain"], "request", None)
        seen["retries"] = back["settings"].retries

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == {"request": None, "retries": 0}


# ------------------------------------------------------------------------ event loops
def test_idle_event_loop_comes_back_as_a_new_open_loop_of_its_class():
    """An idle loop (a provider's private loop, a cancelled timer left on it) comes
    back as a new loop of the same class with the same debug flag, not closed, and
    runs coroutines."""
    loop = asyncio.new_event_loop()
    try:
        loop.set_debug(True)
        loop.call_later(60, _noop).cancel()
        back = roundtrip({"loop": loop})["loop"]
    finally:
        loop.close()
    try:
        assert type(back) is type(loop) and back is not loop
        assert not back.is_closed() and not back.is_running()
        assert back.get_debug() is True
        assert back.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        back.close()


def test_closed_event_loop_comes_back_closed():
    """A closed loop comes back closed (running anything on it still fails)."""
    loop = asyncio.new_event_loop()
    loop.close()
    back = roundtrip({"loop": loop})["loop"]
    assert type(back) is type(loop) and back.is_closed()


@pytest.mark.parametrize("schedule", ["call_later", "call_soon"])
def test_event_loop_with_work_scheduled_is_refused(schedule):
    """A loop with a timer or a ready callback holds work another process cannot
    continue: refused, naming the loop and what it holds."""
    loop = asyncio.new_event_loop()
    try:
        if schedule == "call_later":
            loop.call_later(30, _noop)
        else:
            loop.call_soon(_noop)
        with pytest.raises(_pickler.UnpicklableError) as info:
            _pickler.dumps({"loop": loop})
    finally:
        loop.close()
    message = str(info.value)
    assert "value['loop']" in message
    assert "an asyncio event loop" in message
    assert "1 callback(s) or timer(s) scheduled" in message


# ------------------------------------------------------------------------ default reductions
class NeedsSource:
    """Like jinja2's Template: __new__ takes the source, __init__ is never called."""

    def __new__(cls, source, *, strict=False):
        self = object.__new__(cls)
        self.source = source
        self.strict = strict
        return self

    def render(self, **values):
        return self.source.format(**values)


def test_class_whose_new_needs_arguments_is_refused_with_the_fix():
    """An instance of a class whose __new__ requires arguments the default reduction
    never passes is refused at the dump (never rebuilt without its __new__, which may
    keep an instance cache), naming the class and the fix."""
    obj = NeedsSource("Hello {name}", strict=True)
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"template": obj}, roots=lambda: [("local 'template'", obj)])
    message = str(info.value)
    assert "NeedsSource.__new__ takes arguments" in message
    assert "__getnewargs__" in message and "register_adapter(NeedsSource" in message


class Interned:
    """A flyweight: Interned(name) is one object per name."""

    _cache: dict = {}

    def __new__(cls, name):
        if name not in cls._cache:
            self = object.__new__(cls)
            self.name = name
            cls._cache[name] = self
        return cls._cache[name]


def test_a_class_taught_with_copyreg_keeps_its_own_reduction():
    """A class registered with copyreg.pickle() is saved its own way (a flyweight keeps
    its identity), not through the engine's default-state path."""
    import copyreg

    copyreg.pickle(Interned, lambda u: (Interned, (u.name,)))
    try:
        unit = Interned("kg")
        back = roundtrip({"u": unit})["u"]
        assert back is Interned("kg")
    finally:
        copyreg.dispatch_table.pop(Interned, None)


def test_jinja2_template_round_trips():
    """A real jinja2 Template (Template.__new__(cls, source)) renders the same after a
    round trip."""
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Template("Hi {{ name }}, {{ n * 2 }}")
    back = roundtrip({"t": template})["t"]
    assert type(back) is jinja2.Template
    assert back.render(name="x", n=4) == template.render(name="x", n=4) == "Hi x, 8"


class NeedsSourceDict(dict):
    """A dict subclass whose __new__ requires an argument."""

    def __new__(cls, source):
        self = super().__new__(cls)
        self.source = source
        return self

    def __init__(self, source):
        super().__init__(origin=source)


def test_builtin_subclass_whose_new_needs_arguments_loads_or_is_refused():
    """A payload that was written can be loaded: a dict subclass whose __new__ needs an
    argument either round-trips (items and attributes) or is refused at the dump."""
    obj = NeedsSourceDict("cfg")
    try:
        data = _pickler.dumps({"d": obj})
    except _pickler.UnpicklableError:
        return
    back = _pickler.loads(data)["d"]
    assert type(back) is NeedsSourceDict
    assert dict(back) == {"origin": "cfg"} and back.source == "cfg"


class Delegating:
    """Like instructor's client: every attribute it lacks is read from self.inner."""

    def __init__(self, inner):
        self.inner = inner
        self.mode = "tools"

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Inner:
    def __init__(self):
        self.endpoint = "https://example.invalid"

    def call(self):
        return f"called {self.endpoint}"


def test_class_with_delegating_getattr_loads_without_recursion():
    """Loading a class whose __getattr__ reads self.inner never looks an attribute up
    on the half-built instance (pickle's own __setstate__ lookup would recurse without
    end): it loads with its state and delegates again."""
    obj = Delegating(Inner())
    back = roundtrip({"client": obj})["client"]
    assert type(back) is Delegating
    assert back.mode == "tools" and type(back.inner) is Inner
    assert back.endpoint == "https://example.invalid"
    assert back.call() == "called https://example.invalid"


def test_library_reduce_raising_any_exception_is_a_named_refusal():
    """An object whose own __reduce__ raises NotImplementedError (not a PicklingError)
    is refused as an UnpicklableError naming the path to it, never the library's
    exception escaping."""
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"outer": {"inner": [1, Unsaveable()]}})
    err = info.value
    assert err.path == "value['outer']['inner'][1]"
    assert type(err.culprit) is Unsaveable
    assert isinstance(err.error, NotImplementedError)
    assert "value['outer']['inner'][1]" in str(err)
    assert "this object cannot be pickled" in str(err)


class Node:
    def __init__(self, name):
        self.name = name


def test_refusal_through_a_reference_cycle_names_the_culprit_once_without_addresses():
    """Two objects pointing at each other, one holding what cannot be saved: the path
    walks the cycle once (`.peer.sock`, not `.peer.peer.peer...`), the message names
    the culprit once and holds no memory address."""
    a, b = Node("a"), Node("b")
    a.peer, b.peer = b, a
    b.sock = Unsaveable()
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"graph": a})
    message = str(info.value)
    assert info.value.path == "value['graph'].peer.sock"
    assert type(info.value.culprit) is Unsaveable
    assert message.count(".peer") == 1
    assert message.count("this object cannot be pickled") == 1
    assert "0x" not in message


def test_refusal_through_a_cycle_via_a_dict_key_names_the_real_culprit():
    """The same cycle, where the second object also keeps a dict keyed by the first (an
    edge map of a graph): the refusal still names what cannot be saved, not the dict."""
    a, b = Node("a"), Node("b")
    a.peer, b.peer = b, a
    b.by_node = {a: "back"}
    b.sock = Unsaveable()
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"graph": a})
    assert info.value.path == "value['graph'].peer.sock"
    assert type(info.value.culprit) is Unsaveable
    assert "0x" not in str(info.value)


def test_object_dict_keys_appear_by_type_in_the_path():
    """A dict keyed by objects shows the key as <TypeName> in the refusal's path (a
    repr may hold a memory address); short str and int keys as written."""
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"by_obj": {Obj(1): {7: Unsaveable()}}})
    assert info.value.path == "value['by_obj'][<Obj>][7]"
    assert "0x" not in str(info.value)


def test_fix_offers_a_register_adapter_line_only_for_an_installed_librarys_object():
    """Refused inside an installed library's object (a jinja2 Environment), the fix
    shows a register_adapter one-liner for that class; inside this module's own
    object (not an installed library's), no such line."""
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment()
    env.globals["sock"] = Unsaveable()
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"env": env})
    assert info.value.path == "value['env'].globals['sock']"
    assert "snapstate.register_adapter(jinja2.Environment, lambda obj:" in info.value.fix
    own = Node("mine")
    own.sock = Unsaveable()
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"own": own})
    assert info.value.fix == GENERIC_FIX


# ------------------------------------------------------------------------ frameworks
@pytest.fixture
def keys(tmp_path):
    """The store keys credentials are sealed with (the runtime binds them at a snapshot)."""
    from snapstate.resources import _secrets
    from snapstate.serializers._keys import KeyRing

    _secrets.bind(KeyRing(str(tmp_path / "keys")))
    yield
    _secrets.bind(None)


if pydantic is not None:

    class ServiceSettings(pydantic.BaseModel):
        name: str
        api_key: pydantic.SecretStr
        blob: pydantic.SecretBytes


def test_pydantic_secrets_are_not_in_the_payload_and_round_trip(keys):
    """SecretStr and SecretBytes fields of a model: the payload never holds the secret
    (sealed with the store's key), the restored model reveals the same values."""
    if pydantic is None:
        pytest.skip("pydantic is not installed")
    model = ServiceSettings(
        name="svc", api_key="sk-pyd-NOT-IN-ENV-51f0a2", blob=b"blob-secret-0c9d17"
    )
    data = _pickler.dumps({"settings": model})
    assert b"sk-pyd-NOT-IN-ENV-51f0a2" not in data
    assert b"blob-secret-0c9d17" not in data
    back = _pickler.loads(data)["settings"]
    assert type(back) is ServiceSettings and back.name == "svc"
    assert back.api_key.get_secret_value() == "sk-pyd-NOT-IN-ENV-51f0a2"
    assert back.blob.get_secret_value() == b"blob-secret-0c9d17"


def test_pydantic_secret_from_the_environment_is_read_again(keys, monkeypatch):
    """A SecretStr whose value is an environment variable's is saved as a reference to
    the variable: the payload names it, holds no value, and a rotated value is the one
    restored."""
    if pydantic is None:
        pytest.skip("pydantic is not installed")
    monkeypatch.setenv("SNAPTEST_PYD_SERVICE", "pyd-env-value-7a1c33")
    secret = pydantic.SecretStr("pyd-env-value-7a1c33")
    data = _pickler.dumps({"secret": secret})
    assert b"pyd-env-value-7a1c33" not in data
    assert b"SNAPTEST_PYD_SERVICE" in data
    monkeypatch.setenv("SNAPTEST_PYD_SERVICE", "pyd-rotated-0b2d44")
    back = _pickler.loads(data)["secret"]
    assert type(back) is pydantic.SecretStr
    assert back.get_secret_value() == "pyd-rotated-0b2d44"


def test_tenacity_retrying_keeps_its_statistics():
    """A tenacity Retrying that retried keeps its statistics (kept by tenacity in a
    threading.local) and its configuration, and retries again the same way."""
    tenacity = pytest.importorskip("tenacity")
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(3), wait=tenacity.wait_none(), reraise=True
    )
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] < 3:
            raise ValueError(calls["n"])
        return "ok"

    assert retrying(flaky) == "ok"
    stats = dict(retrying.statistics)
    assert stats["attempt_number"] == 3
    back = roundtrip({"r": retrying})["r"]
    assert type(back) is tenacity.Retrying
    assert back.statistics == stats
    assert back.reraise is True and back.stop.max_attempt_number == 3
    calls["n"] = 0
    assert back(flaky) == "ok" and back.statistics["attempt_number"] == 3
    with pytest.raises(ValueError):
        back(lambda: (_ for _ in ()).throw(ValueError("always")))


class Document:
    def __init__(self, text):
        self.text = text


if wrapt is not None:

    class Audited(wrapt.ObjectProxy):
        """A proxy subclass built as wrapt's docs show: its own state in `_self_`
        attributes."""


def test_wrapt_object_proxy_round_trips_around_the_restored_object():
    """A wrapt.ObjectProxy comes back as a proxy of the same class wrapping the
    restored object (the one the state's other holder gets); a subclass whose
    constructor takes other arguments is refused by name."""
    if wrapt is None:
        pytest.skip("wrapt is not installed")
    doc = Document("body")
    back = roundtrip({"doc": doc, "proxy": wrapt.ObjectProxy(doc)})
    proxy = back["proxy"]
    assert type(proxy) is wrapt.ObjectProxy
    assert proxy.__wrapped__ is back["doc"]
    assert proxy.text == "body" and isinstance(proxy, Document)

    class Tagging(wrapt.ObjectProxy):
        def __init__(self, wrapped, tag):
            super().__init__(wrapped)
            self._self_tag = tag

    with pytest.raises(_pickler.UnpicklableError, match="wrapt proxy"):
        _pickler.dumps({"proxy": Tagging(doc, "t")})


def test_wrapt_proxy_subclass_keeps_its_own_self_attributes():
    """The adapter's documented promise: a proxy subclass keeps its own `_self_`
    attributes."""
    if wrapt is None:
        pytest.skip("wrapt is not installed")
    doc = Document("body")
    proxy = Audited(doc)
    proxy._self_calls = 3
    back = roundtrip({"doc": doc, "proxy": proxy})
    assert type(back["proxy"]) is Audited
    assert back["proxy"].__wrapped__ is back["doc"]
    assert back["proxy"]._self_calls == 3


# ------------------------------------------------------------------------ real jobs
def _crash_matches_plain(agent: Path, tmp_path: Path, snapshots: int, env: dict | None = None):
    """A plain run and, for each snapshot k, a run SIGKILLed right after snapshot k then
    resumed: killed + resumed stdout equals the plain run's. Returns the plain run."""
    plain = snaprun(
        "run", "--store", tmp_path / "s", "--job", "plain", agent, cwd=tmp_path, env=env
    )
    assert plain.returncode == 0, plain.stderr
    assert len(snapshot_seqs(tmp_path / "s", "plain")) == snapshots
    for k in range(1, snapshots + 1):
        job = f"kill{k}"
        killed = snaprun(
            "run",
            "--store",
            tmp_path / "s",
            "--job",
            job,
            agent,
            cwd=tmp_path,
            env=env,
            fault=f"after-snapshot:{k}",
        )
        assert killed.returncode == -9, killed.stderr
        resumed = snaprun("resume", "--store", tmp_path / "s", job, cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert f"resumed from snapshot {k}" in resumed.stderr
        assert killed.stdout + resumed.stdout == plain.stdout, f"stdout diverged after {k}"
        assert resumed.result == plain.result
    return plain


def test_sync_job_context_variables_survive_a_kill_after_each_snapshot(tmp_path):
    """A sync job sets a ContextVar global of its module, two instance-level ones (one
    also held by a dict) and a library module's ContextVar (saved by reference, read by
    the library's own function), then snapshots: killed right after each snapshot and
    resumed, every value it reads is the uninterrupted run's."""
    plain = _crash_matches_plain(
        AGENTS / "contextvar_sync.py", tmp_path, 2, env={"PYTHONPATH": str(CTX_LIB)}
    )
    assert plain.stdout.splitlines() == [
        "before req-42 span-A 3 True span-A acme trace-7 0.33333",
        "after-1 req-42 span-A 3 True span-A acme trace-7 0.33333",
        "after-2 req-42 span-B 3 True span-B acme trace-7 0.33333",
        "incremented req-42 span-B 4 True span-B acme trace-7 0.33333",
    ]
    assert plain.result == "'req-42/span-B/4/acme'"


def test_async_task_context_variables_survive_a_kill_after_each_snapshot(tmp_path):
    """An async job: the main task and a task it created each set a module-level and
    an instance-level ContextVar; the task waits across the snapshot and reads its own
    values after it, the main task its own. Killed right after each snapshot and
    resumed, the output is the uninterrupted run's."""
    plain = _crash_matches_plain(AGENTS / "contextvar_async.py", tmp_path, 2)
    assert plain.stdout.splitlines() == [
        "main main-user main-trace",
        "task inherited=main-user user=worker-user trace=worker-trace",
        "main main-again main-trace",
    ]
    assert plain.result == "'main-again'"


def test_greenlet_task_context_variables_survive_a_kill_after_each_snapshot(tmp_path):
    """A sync job with a spawned task: main and the task each set their own value of a
    module-level and an instance-level ContextVar; the task snapshots while holding its
    values. Killed right after each snapshot and resumed, each task reads its own values
    (not main's, not the defaults), as in the uninterrupted run."""
    plain = _crash_matches_plain(AGENTS / "contextvar_tasks.py", tmp_path, 2)
    assert plain.stdout.splitlines() == [
        "task w-user w-span",
        "main main-user main-span w-user",
        "main again main-user main-span",
    ]
    assert plain.result == "'w-user'"


def test_a_library_context_variable_nothing_can_find_again_is_refused(tmp_path, monkeypatch):
    """A ContextVar a library keeps where a snapshot cannot find it again (a private
    dict: no module or class attribute) with a value set in the job's context: created
    again, its value would be set on a copy the library never reads, so it is refused."""
    monkeypatch.syspath_prepend(str(CTX_LIB))
    import ctxlib

    ctx = contextvars.Context()
    ctx.run(ctxlib.hidden_var().set, "mine")
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"context": ctx})
    assert "a contextvars.ContextVar 'hidden' that a library keeps where a snapshot" in str(
        info.value
    )


def test_task_group_done_callbacks_keep_their_context(tmp_path):
    """A TaskGroup in a task with a ContextVar set: its done-callbacks on the children
    were added in that context; they are saved with it (not refused) and every task
    reads its value after a kill after each snapshot and a resume."""
    # both children await snapshot() while the other waits too: one snapshot holds both
    plain = _crash_matches_plain(AGENTS / "contextvar_async_group.py", tmp_path, 1)
    assert plain.stdout == "after alice 1:alice 2:alice\n"
    assert plain.result == "'alice'"


def test_an_idle_thread_pool_is_accepted_at_every_snapshot(tmp_path):
    """A ThreadPoolExecutor whose map() returned is idle: accepted at the first snapshot
    and at the second (its idle count used to make it look busy once its threads had
    run work), killed after each and resumed, with the uninterrupted run's output."""
    plain = _crash_matches_plain(AGENTS / "idle_pool.py", tmp_path, 2)
    assert plain.stdout == "total 320\n"


def test_cryptography_private_keys_are_sealed_and_ciphers_refused(tmp_path):
    """A private key is saved sealed with the store's key (its raw bytes are not in the
    payload) and signs the same after a load; a public key comes back equal; an AESGCM
    cipher object, whose key cannot be read back, is refused with the fix."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from snapstate.resources import _secrets
    from snapstate.serializers._home import Home

    home = Home(str(tmp_path / "store"))
    _secrets.bind(home.keys)
    try:
        key = ed25519.Ed25519PrivateKey.generate()
        data = _pickler.dumps({"key": key, "public": key.public_key()})
        raw = key.private_bytes(s.Encoding.Raw, s.PrivateFormat.Raw, s.NoEncryption())
        assert raw not in data
        back = _pickler.loads(data)
        assert back["key"].sign(b"order 42") == key.sign(b"order 42")
        assert back["public"] == key.public_key()
        cipher = AESGCM(AESGCM.generate_key(bit_length=128))
        with pytest.raises(_pickler.UnpicklableError) as info:
            _pickler.dumps({"c": cipher}, roots=lambda: [("local 'cipher'", cipher)])
        assert "local 'cipher' is an AESGCM cipher" in str(info.value)
        assert "make the cipher after the snapshot" in str(info.value)
    finally:
        _secrets.bind(None)
        home.close()
