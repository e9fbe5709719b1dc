"""Keys are the store's, never the file's (issue 8, "Keys are the store's").

  - a file is verified only with the keys of the store in use (--store, SNAPSTATE_HOME,
    ./.snapstate) and SNAPSTATE_KEY: a store-shaped directory around a file, holding an
    attacker's keys.json, is never trusted by verify, inspect or resume FILE;
  - key ids are derived from the secret: one secret has one id whether it comes from
    keys.json, SNAPSTATE_KEY or an imported key file; keys.json files with the ids of
    earlier versions keep loading and verifying their snapshots;
  - `snaprun keys export ID -o FILE` / `snaprun keys import FILE` move a key between
    stores (0600, atomic, never overwriting; import validates and is idempotent);
  - keys.json readable or writable by others, or owned by another user, is refused with
    the chmod to run; a corrupt keys.json is StoreDamaged (never replaced); with
    create=False a missing one is StoreDamaged (never minted);
  - concurrent rotations by several processes lose no key (flock on keys.json.lock).

The hostile test uses a real snapshot of tests/agents/sec_trap.py, whose unpickling
writes a sentinel file: "nothing ran" is observed, and a positive control proves the
payload is live.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import pickle
import secrets
import stat
import subprocess
import sys
import textwrap

import pytest
from chunked import export_file
from helpers import AGENTS, clean_refusal, snaprun

from snapstate._errors import StoreDamaged, StoreError, UnknownKey
from snapstate.runtime._job import runtime_versions
from snapstate.serializers import _keys, _snapfile
from snapstate.serializers._home import Home

TRAP = AGENTS / "sec_trap.py"
NO_ENV_KEY = {"SNAPSTATE_KEY": "", "SNAPSTATE_HOME": ""}


@pytest.fixture(autouse=True)
def _no_inherited_env(monkeypatch):
    """In-process key rings use their store's keys.json, not an inherited key."""
    monkeypatch.delenv("SNAPSTATE_KEY", raising=False)
    monkeypatch.delenv("SNAPSTATE_HOME", raising=False)


def _header(**fields) -> dict:
    """A complete snapshot header (what a job writes), with `fields` overriding."""
    return dict(
        {
            "job_id": "job",
            "seq": 1,
            "epoch": 1,
            "label": None,
            "created_at": 1.7e9,
            "versions": runtime_versions(),
            "argv": [],
            "frames": [],
            "modules": {},
            "entry": {"module": "agent", "function": "main", "path": None, "search_path": None},
        },
        **fields,
    )


def _sign(path: pathlib.Path, keys, **fields) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _snapfile.write(str(path), _header(**fields), pickle.dumps([1, 2, 3]), keys)
    return path


def _store(directory: pathlib.Path) -> _keys.KeyRing:
    """A store made as snaprun makes it, and its key ring."""
    Home(str(directory)).close()
    return _keys.KeyRing(str(directory))


def _verify(store: pathlib.Path, path: pathlib.Path) -> dict:
    home = Home(str(store))
    try:
        return home.verify(str(path))
    finally:
        home.close()


# ------------------------------------------------------------------ a file brings no key
@pytest.fixture(scope="module")
def attacker(tmp_path_factory):
    """An attacker's store-shaped directory `evil/` (catalog.db, its own keys.json,
    snapshots/trap/<file>) holding a real, validly signed snapshot of sec_trap.py (its
    chunked snapshot exported there as a file) whose unpickling creates `SENTINEL`; and
    a victim store with keys of its own."""
    root = tmp_path_factory.mktemp("keys-trust")
    sentinel = root / "SENTINEL"
    evil = root / "attacker" / "evil"
    run = snaprun(
        "run",
        "--store",
        evil,
        "--job",
        "trap",
        TRAP,
        cwd=root,
        env=dict(NO_ENV_KEY, SEC_SENTINEL=str(sentinel)),
    )
    assert run.returncode == 0, run.stderr
    assert not sentinel.exists()
    (evil / "snapshots" / "trap").mkdir(parents=True)
    snap = export_file(evil, "trap", 1, evil / "snapshots" / "trap" / "000001-e1.snap")
    assert (evil / "catalog.db").is_file() and (evil / "keys.json").is_file()
    victim = root / "victim" / ".snapstate"
    Home(str(victim)).close()
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return {
        "root": root,
        "evil": evil,
        "snap": snap,
        "sentinel": sentinel,
        "victim": victim,
        "elsewhere": elsewhere,
        "evil_key": _snapfile.peek_header(str(snap))["key_id"],
    }


def test_store_shaped_directory_never_lends_its_keys(attacker):
    """A file signed with an attacker's key, lying in a store-shaped directory that
    holds the attacker's keys.json, is refused by `snaprun verify`, `inspect` and
    `resume FILE` (exit 2, the unknown-key error naming the attacker's key id and
    `snaprun keys export/import`) from the victim store's directory (./.snapstate), from
    another cwd with SNAPSTATE_HOME set, and from the attacker directory's parent (with
    and without SNAPSTATE_HOME): the sentinel is never created and nothing is imported
    into the victim store. Positive controls: the file verifies with the attacker's
    store named explicitly (--store), and resuming it there does run the payload.
    (Before the fix, the keys of the directory around the file were trusted.)"""
    snap, sentinel, key = attacker["snap"], attacker["sentinel"], attacker["evil_key"]
    victim = str(attacker["victim"])
    contexts = {
        "victim cwd (./.snapstate)": (attacker["victim"].parent, NO_ENV_KEY),
        "elsewhere, SNAPSTATE_HOME": (
            attacker["elsewhere"],
            dict(NO_ENV_KEY, SNAPSTATE_HOME=victim),
        ),
        "attacker's parent, SNAPSTATE_HOME": (
            attacker["evil"].parent,
            dict(NO_ENV_KEY, SNAPSTATE_HOME=victim),
        ),
        "attacker's parent": (attacker["evil"].parent, NO_ENV_KEY),
    }
    commands = {
        "verify": ["verify", snap],
        "inspect": ["inspect", snap],
        "resume": ["resume", snap],
    }
    for where, (cwd, env) in contexts.items():
        for name, args in commands.items():
            run = snaprun(*args, cwd=cwd, env=env)
            assert run.returncode == 2, (where, name, run.stderr)
            assert "Traceback" not in run.stderr and "ok:" not in run.stdout, (where, name)
            assert not sentinel.exists(), f"{name} from {where} ran the file's payload"
            if where != "attacker's parent":  # there is no store in use there
                clean_refusal(run, str(snap), key, "keys export", "keys import")
    home = Home(victim)
    try:
        assert home.catalog.list_jobs() == []  # resume FILE imported nothing
        with pytest.raises(UnknownKey):
            home.verify(str(snap))
    finally:
        home.close()
    # controls: a genuine file of the attacker's store, with a live payload
    ok = snaprun(
        "verify", "--store", attacker["evil"], snap, cwd=attacker["elsewhere"], env=NO_ENV_KEY
    )
    assert ok.returncode == 0 and f"key {key}" in ok.stdout, ok.stderr
    live = snaprun(
        "resume",
        "--store",
        attacker["evil"],
        "--as",
        "control",
        snap,
        cwd=attacker["elsewhere"],
        env=NO_ENV_KEY,
    )
    assert live.returncode == 0, live.stderr
    assert sentinel.exists()
    sentinel.unlink()


# ------------------------------------------------------------------ derived ids
def test_key_ids_are_derived_from_the_secret(tmp_path):
    """A new store's key and every rotated key get the id derived from the secret
    (`k-` + 20 hex digits of HKDF with its own info string): the same secret always
    gets the same id, different secrets different ids, and the id is neither the HMAC
    nor the AEAD key."""
    ring = _keys.KeyRing(str(tmp_path / "s"))
    rotated = ring.rotate()
    for key in (ring.keys()[0], rotated):
        assert key.key_id == _keys.key_id_of(key.secret)
        assert len(key.key_id) == 22 and key.key_id.startswith("k-")
        int(key.key_id[2:], 16)
        assert key.key_id[2:] not in (key.mac_key.hex() + key.aead_key.hex())
    secret = secrets.token_bytes(32)
    assert _keys.key_id_of(secret) == _keys.key_id_of(bytes(secret))
    assert _keys.key_id_of(secret) != _keys.key_id_of(secrets.token_bytes(32))


def test_one_secret_one_id_in_keys_json_and_in_the_environment(tmp_path):
    """A file written by store A with its own (keys.json) key verifies in store B when
    A's secret is given to B as SNAPSTATE_KEY, and `snaprun verify` reports the same
    key id there; without it, B refuses it as signed with an unknown key. (Before,
    the stored key was "k1-<random>" and the same secret from the environment
    "env-<sha256>", so the file was refused.)"""
    a, b = tmp_path / "a", tmp_path / "b"
    ring = _store(a)
    key = ring.current
    path = _sign(tmp_path / "from-a.snap", ring)
    Home(str(b)).close()
    with pytest.raises(UnknownKey):
        _verify(b, path)
    run = snaprun(
        "verify", "--store", b, path, cwd=tmp_path, env={"SNAPSTATE_KEY": key.secret.hex()}
    )
    assert run.returncode == 0, run.stderr
    assert f"key {key.key_id}," in run.stdout
    assert key.secret.hex() not in (b / "keys.json").read_text()


def _legacy_store(directory: pathlib.Path) -> tuple[str, bytes]:
    """A keys.json written the way earlier versions wrote it (id "k1-<8 hex>")."""
    directory.mkdir(parents=True)
    secret = secrets.token_bytes(32)
    key_id = "k1-" + secrets.token_hex(4)
    data = {
        "current": key_id,
        "keys": {key_id: {"secret": secret.hex(), "created": 1.7e9, "retired": False}},
    }
    fd = os.open(directory / "keys.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    Home(str(directory)).close()  # the rest of the store, around that key file
    return key_id, secret


def test_old_key_ids_keep_loading_and_verifying(tmp_path, monkeypatch):
    """A keys.json written by an earlier version (id "k1-xxxxxxxx") keeps its stored id:
    snapshots signed with it verify before and after a rotation, whose new key gets a
    derived id; a snapshot signed under SNAPSTATE_KEY by an earlier version (id
    "env-<sha256[:12]>") still verifies with the same SNAPSTATE_KEY."""
    store = tmp_path / "old"
    old_id, _ = _legacy_store(store)
    ring = _keys.KeyRing(str(store))
    assert ring.current.key_id == old_id
    path = _sign(store / "snapshots" / "job" / "000001-e1.snap", ring)
    assert _verify(store, path)["key_id"] == old_id
    new = _keys.KeyRing(str(store)).rotate()
    assert new.key_id == _keys.key_id_of(new.secret)
    assert _verify(store, path)["key_id"] == old_id
    assert [k.key_id for k in _keys.KeyRing(str(store)).keys()] == [old_id, new.key_id]

    secret = secrets.token_bytes(32)

    class OldEnvRing:  # what an earlier version signed with
        current = _keys.Key("env-" + hashlib.sha256(secret).hexdigest()[:12], secret, 0.0)

    env_file = _sign(tmp_path / "env.snap", OldEnvRing())
    with pytest.raises(UnknownKey):
        _verify(store, env_file)
    monkeypatch.setenv("SNAPSTATE_KEY", secret.hex())
    assert _verify(store, env_file)["key_id"] == OldEnvRing.current.key_id


# ------------------------------------------------------------------ export / import
def test_cli_export_import_moves_a_key(tmp_path):
    """`snaprun keys export ID -o FILE` writes a 0600 key file (never overwriting an
    existing file: exit 2, the file unchanged); `snaprun keys import FILE` in another
    store makes A's snapshots verify there, as a valid key that is not current (B keeps
    signing with its own key); importing again changes nothing (exit 0). The refusal of
    an unknown key names both commands."""
    a, b = tmp_path / "a", tmp_path / "b"
    ring = _store(a)
    key_id = ring.current.key_id
    path = _sign(tmp_path / "from-a.snap", ring)
    b_current = _store(b).current.key_id
    with pytest.raises(UnknownKey) as info:
        _verify(b, path)
    assert f"snaprun keys export {key_id} -o key.json" in str(info.value)
    assert "snaprun keys import key.json" in str(info.value)

    out = tmp_path / "key.json"
    run = snaprun("keys", "export", "--store", a, key_id, "-o", out, cwd=tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    exported = out.read_bytes()
    assert json.loads(exported)["key_id"] == key_id
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("key.json")] == ["key.json"]
    clean_refusal(
        snaprun("keys", "export", "--store", a, key_id, "-o", out, cwd=tmp_path, env=NO_ENV_KEY),
        str(out),
        "exists",
    )
    assert out.read_bytes() == exported

    for attempt in ("first", "again"):
        run = snaprun("keys", "import", "--store", b, out, cwd=tmp_path, env=NO_ENV_KEY)
        assert run.returncode == 0, (attempt, run.stderr)
        assert key_id in run.stderr
    assert "already" in run.stderr
    assert _verify(b, path)["key_id"] == key_id
    ring_b = _keys.KeyRing(str(b))
    assert ring_b.current.key_id == b_current
    assert sorted(k.key_id for k in ring_b.keys()) == sorted([b_current, key_id])
    assert stat.S_IMODE(os.stat(ring_b.path).st_mode) == 0o600


def _key_file(path: pathlib.Path, content, mode: int = 0o600) -> pathlib.Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    path.chmod(mode)
    return path


def test_import_refuses_bad_key_files(tmp_path):
    """`keys import` refuses (StoreError naming the file, keys.json unchanged) a file
    that is not JSON, not a key file, has bad hex or a short secret, an id that does
    not match its secret, a key file readable by others, and a key whose id the store
    already has with another secret; `snaprun keys import` of a malformed file exits 2
    without a traceback."""
    store = tmp_path / "store"
    ring = _keys.KeyRing(str(store))
    before = pathlib.Path(ring.path).read_bytes()
    secret = secrets.token_bytes(32)
    good = {
        "format": "snapstate-key/1",
        "key_id": _keys.key_id_of(secret),
        "secret": secret.hex(),
        "created": 1.7e9,
    }
    cases = {
        "not-json": ("{", "not a valid key file"),
        "not-a-key": ({"hello": 1}, "not a valid key file"),
        "bad-hex": (dict(good, secret="zz" * 32), "hex"),
        "short": (dict(good, secret="ab" * 8), "bytes"),
        "wrong-id": (dict(good, key_id=_keys.key_id_of(b"x" * 32)), "does not match"),
        "other-secret": (
            dict(good, key_id=ring.current.key_id, secret=secrets.token_hex(32)),
            "does not match",
        ),
    }
    for name, (content, needle) in cases.items():
        path = _key_file(tmp_path / f"{name}.json", content)
        with pytest.raises(StoreError) as info:
            ring.import_file(str(path))
        assert str(path) in str(info.value) and needle in str(info.value), (name, info.value)
    shared = _key_file(tmp_path / "shared.json", good, 0o644)
    with pytest.raises(StoreError, match="chmod 600"):
        ring.import_file(str(shared))
    assert pathlib.Path(ring.path).read_bytes() == before
    clean_refusal(
        snaprun(
            "keys",
            "import",
            "--store",
            store,
            tmp_path / "not-json.json",
            cwd=tmp_path,
            env=NO_ENV_KEY,
        ),
        "not-json.json",
    )
    assert pathlib.Path(ring.path).read_bytes() == before
    # control: the valid file imports
    shared.chmod(0o600)
    key, added = ring.import_file(str(shared))
    assert added and key.key_id == good["key_id"]
    assert _keys.KeyRing(str(store)).get(key.key_id).secret == secret


# ------------------------------------------------------------------ keys.json checks
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o602, 0o620])
def test_keys_json_open_to_others_is_refused(tmp_path, mode):
    """keys.json readable or writable by group or others is refused, as ssh refuses a
    private key: StoreError naming the file and `chmod 600 PATH`; the file is left as
    it is."""
    ring = _keys.KeyRing(str(tmp_path / "store"))
    os.chmod(ring.path, mode)
    data = pathlib.Path(ring.path).read_bytes()
    with pytest.raises(StoreError) as info:
        _keys.KeyRing(str(tmp_path / "store"))
    assert f"chmod 600 {ring.path}" in str(info.value)
    assert pathlib.Path(ring.path).read_bytes() == data
    assert stat.S_IMODE(os.stat(ring.path).st_mode) == mode
    os.chmod(ring.path, 0o600)  # the way out works
    assert _keys.KeyRing(str(tmp_path / "store")).current == ring.current


def test_cli_keys_json_open_to_others(tmp_path):
    """`snaprun verify` with a store whose keys.json is 0644 exits 2 with one error
    naming the file and the chmod to run, no traceback."""
    store = tmp_path / "store"
    ring = _store(store)
    path = _sign(tmp_path / "file.snap", ring)
    os.chmod(ring.path, 0o644)
    clean_refusal(
        snaprun("verify", "--store", store, path, cwd=tmp_path, env=NO_ENV_KEY),
        f"chmod 600 {ring.path}",
    )


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's owner needs root")
def test_keys_json_of_another_user_is_refused(tmp_path):
    """keys.json owned by another user (even with mode 0600) is refused, naming the
    file and both uids."""
    ring = _keys.KeyRing(str(tmp_path / "store"))
    os.chown(ring.path, 4242, -1)
    with pytest.raises(StoreError) as info:
        _keys.KeyRing(str(tmp_path / "store"))
    assert ring.path in str(info.value) and "4242" in str(info.value)


_CORRUPT = {
    "empty": "",
    "not-json": '{"current": ',
    "nested": "[" * 100_000 + "]" * 100_000,
    "a-list": "[1, 2]",
    "no-current": '{"keys": {}}',
    "bad-hex": json.dumps({"current": "k1", "keys": {"k1": {"secret": "zz", "created": 1}}}),
    "short-secret": json.dumps({"current": "k1", "keys": {"k1": {"secret": "ab", "created": 1}}}),
    "current-missing": json.dumps(
        {"current": "k9", "keys": {"k1": {"secret": "ab" * 32, "created": 1}}}
    ),
    "bad-id": json.dumps(
        {"current": "../x", "keys": {"../x": {"secret": "ab" * 32, "created": 1}}}
    ),
}


@pytest.mark.parametrize("name", sorted(_CORRUPT))
def test_corrupt_keys_json_is_store_damaged(tmp_path, name):
    """A corrupt keys.json (empty, not JSON, deeply nested, wrong shape, bad hex, short
    secret, a current key it does not hold, an unsafe id) raises StoreDamaged naming
    the file and the way out; the file is left as it is (never replaced by a new
    key)."""
    store = tmp_path / "store"
    store.mkdir()
    path = _key_file(store / "keys.json", _CORRUPT[name])
    with pytest.raises(StoreDamaged) as info:
        _keys.KeyRing(str(store))
    assert str(path) in str(info.value) and "backup" in str(info.value)
    assert path.read_text() == _CORRUPT[name]


@pytest.mark.smoke
def test_cli_corrupt_keys_json(tmp_path):
    """`snaprun verify` and `snaprun keys list` with a corrupt keys.json exit 2 with one
    error naming the file, no traceback; the file is unchanged."""
    store = tmp_path / "store"
    snap = _sign(tmp_path / "file.snap", _store(store))
    path = _key_file(store / "keys.json", '{"current": ')
    for args in (["verify", "--store", store, snap], ["keys", "list", "--store", store]):
        clean_refusal(snaprun(*args, cwd=tmp_path, env=NO_ENV_KEY), str(path), "corrupt")
    assert path.read_text() == '{"current": '


def test_create_false_never_mints_a_key(tmp_path):
    """KeyRing(directory, create=False) with no keys.json raises StoreDamaged naming the
    file and creates nothing; with keys.json present it loads it; the default
    (create=True) makes the store's first key."""
    store = tmp_path / "store"
    store.mkdir()
    with pytest.raises(StoreDamaged) as info:
        _keys.KeyRing(str(store), create=False)
    assert str(store / "keys.json") in str(info.value)
    assert os.listdir(store) == []
    made = _keys.KeyRing(str(store))
    assert _keys.KeyRing(str(store), create=False).current == made.current


# ------------------------------------------------------------------ concurrent rotation
_ROTATOR = textwrap.dedent("""
    import json, os, pickle, sys, time
    from snapstate.serializers import _keys, _snapfile
    store, name, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    header = json.loads(sys.argv[5])
    while not os.path.exists(go):
        time.sleep(0.001)
    ring = _keys.KeyRing(store)
    minted = []
    for i in range(count):
        key = ring.rotate()
        assert ring.current == key
        path = os.path.join(store, "snapshots", name, f"{i:06d}.snap")
        _snapfile.write(path, dict(header, job_id=name, seq=i + 1), pickle.dumps(i), ring)
        minted.append(key.key_id)
    print(json.dumps(minted))
""")


def test_concurrent_rotations_lose_no_key(tmp_path):
    """Three processes each rotate the same store's key 15 times at once, signing a
    snapshot with every key they mint: every minted key is in the final keys.json (a
    read-modify-write outside a lock keeps only the last writer's keys) and every
    snapshot verifies with a fresh key ring of the store; keys.json.lock is 0600."""
    store = tmp_path / "store"
    first = _store(store).current.key_id
    go = tmp_path / "go"
    names = ["p0", "p1", "p2"]
    for name in names:
        (store / "snapshots" / name).mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "SNAPSTATE_KEY"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _ROTATOR,
                str(store),
                name,
                "15",
                str(go),
                json.dumps(_header()),
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    go.touch()
    minted = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        minted += json.loads(out)
    assert len(set(minted)) == 45
    ring = _keys.KeyRing(str(store))
    assert {k.key_id for k in ring.keys()} == set(minted) | {first}
    assert ring.current.key_id in minted
    home = Home(str(store))
    try:
        for name in names:
            files = sorted((store / "snapshots" / name).glob("*.snap"))
            assert len(files) == 15
            for f in files:
                assert home.verify(str(f))["key_id"] in minted
    finally:
        home.close()
    assert stat.S_IMODE(os.stat(str(store / "keys.json.lock")).st_mode) == 0o600


def test_writes_reread_keys_json_and_import_keeps_retirement(tmp_path):
    """Two key rings of one store, each loaded before the other writes: rotate, import
    and retire through either act on the file as it is now (each re-reads keys.json
    under the lock), so no key is lost; importing a key the store retired changes
    nothing and it stays retired."""
    store = tmp_path / "store"
    one, two = _keys.KeyRing(str(store)), _keys.KeyRing(str(store))
    first = one.current.key_id
    a = one.rotate()
    b = two.rotate()
    secret = secrets.token_bytes(32)
    path = _key_file(
        tmp_path / "k.json",
        {
            "format": "snapstate-key/1",
            "created": 1.7e9,
            "key_id": _keys.key_id_of(secret),
            "secret": secret.hex(),
        },
    )
    imported, added = one.import_file(str(path))
    assert added
    two.retire(imported.key_id)
    ring = _keys.KeyRing(str(store))
    assert {k.key_id for k in ring.keys()} == {first, a.key_id, b.key_id, imported.key_id}
    assert ring.current.key_id == b.key_id
    again, added = one.import_file(str(path))
    assert not added and again.retired
    assert _keys.KeyRing(str(store)).keys() == ring.keys()
