"""Secrets found by value (serializers/_envsecrets.py): a str or bytes in the job's state
equal to the value of an environment variable whose name looks secret (KEY, TOKEN,
SECRET, PASSWORD, CREDENTIAL, any case; a value of at least 8 characters) is written as
a reference to that variable, never in clear, and read again at the restore (a rotated
key is the one used). Inside a longer string the snapshot is refused, naming the
variable. Other variables, and short values, are left alone.

In-process: payloads of serializers._pickler.dumps (what a snapshot writes). Real
subprocesses: an agent holding ACME_API_KEY's value, SIGKILLed after a snapshot and
resumed with the variable rotated, uses the new value, and no file of the store holds
the original (raw, in any zstd frame, or in a snapshot's decompressed body)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, clean_refusal, snaprun
from store_bytes import snapshot_body, zstd_frames
from stored import body, outsider_chunks

from snapstate.serializers import _pickler, _refs

VALUE = "tok-1234567890"
ROTATED = "tok-rotated-0987654321"


@pytest.fixture(autouse=True)
def no_agent_modules():
    """In-process round trips: no module is the agent's (as before any job)."""
    _refs.bind([])
    yield
    _refs.bind([])


def _fresh(text: str) -> str:
    """An equal str that is a different object (not the literal, not interned)."""
    copy = "".join(list(text))
    assert copy == text and copy is not text
    return copy


# ------------------------------------------------------------------------ in-process
def test_secret_values_are_written_as_references_and_read_again(monkeypatch):
    """A state holding a secret variable's value as one str object twice, as an equal
    copy, as bytes and as a bytearray: the payload holds none of them in clear but names
    the variable; loaded after the variable changed, every one is the new value (str stays
    str, bytes bytes, bytearray bytearray) and the shared object is still one object."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", VALUE)
    token = _fresh(VALUE)
    state = {
        "token": token,
        "config": {"auth": token},
        "copy": _fresh(VALUE),
        "raw": VALUE.encode(),
        "buffer": bytearray(VALUE.encode()),
        "as_key": {_fresh(VALUE): 1},
        "other": "unrelated-value",
    }
    data = _pickler.dumps(state)
    assert VALUE.encode() not in data
    assert b"MY_SERVICE_TOKEN" in data
    monkeypatch.setenv("MY_SERVICE_TOKEN", ROTATED)
    back = _pickler.loads(data)
    assert back["token"] == back["config"]["auth"] == back["copy"] == ROTATED
    assert type(back["token"]) is str
    assert back["raw"] == ROTATED.encode() and type(back["raw"]) is bytes
    assert back["buffer"] == bytearray(ROTATED.encode()) and type(back["buffer"]) is bytearray
    assert back["as_key"] == {ROTATED: 1}
    assert back["other"] == "unrelated-value"
    assert back["token"] is back["config"]["auth"]
    assert back["copy"] is not back["token"]


def test_unchanged_variable_restores_the_same_value(monkeypatch):
    """Without a rotation the restored values are the originals, inside objects too."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", VALUE)

    class Client:
        pass

    client = Client()
    client.api_key = _fresh(VALUE)
    client.headers = [("x-key", client.api_key)]
    data = _pickler.dumps({"client": client})
    assert VALUE.encode() not in data
    back = _pickler.loads(data)["client"]
    assert back.api_key == VALUE and back.headers == [("x-key", VALUE)]
    assert back.headers[0][1] is back.api_key


@pytest.mark.parametrize(
    "holder",
    [
        lambda v: {"header": f"Bearer {v}"},
        lambda v: {"url": f"https://api.example.invalid/?key={v}&x=1"},
        lambda v: [v.encode() + b"\x00tail"],
    ],
    ids=["bearer-header", "url", "bytes-blob"],
)
def test_secret_inside_a_longer_string_is_refused_naming_the_variable(monkeypatch, holder):
    """The value as part of a longer str or bytes cannot be written without the secret
    in clear: the dump is refused naming the variable (and never the value)."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", VALUE)
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"state": holder(VALUE), "alone": _fresh(VALUE)})
    message = str(info.value)
    assert "MY_SERVICE_TOKEN" in message
    assert "longer string" in message
    assert VALUE not in message


@pytest.mark.parametrize("name", ["HOME", "PATH", "MY_SETTING", "SERVICE_URL"])
def test_names_that_do_not_look_secret_are_left_alone(monkeypatch, name):
    """A variable whose name holds none of the words is no secret: its value stays in
    the payload as written (no reference to the variable), even inside a longer string,
    and does not follow a change of the variable."""
    monkeypatch.delenv("MY_SERVICE_TOKEN", raising=False)
    monkeypatch.setenv(name, VALUE)
    data = _pickler.dumps({"v": _fresh(VALUE), "long": f"x-{VALUE}-y"})
    assert VALUE.encode() in data
    assert name.encode() not in data
    monkeypatch.setenv(name, ROTATED)
    back = _pickler.loads(data)
    assert back == {"v": VALUE, "long": f"x-{VALUE}-y"}


def test_values_shorter_than_eight_characters_are_left_alone(monkeypatch):
    """A secret-looking variable with a value under 8 characters is not taken for a
    secret (short values are everywhere in a state); 8 characters is."""
    monkeypatch.setenv("SHORT_API_KEY", "abc1234")  # 7
    monkeypatch.setenv("EIGHT_API_KEY", "abcd1234")  # 8
    data = _pickler.dumps({"short": _fresh("abc1234"), "eight": _fresh("abcd1234")})
    assert b"abc1234" in data and b"SHORT_API_KEY" not in data
    assert b"abcd1234" not in data and b"EIGHT_API_KEY" in data
    back = _pickler.loads(data)
    assert back == {"short": "abc1234", "eight": "abcd1234"}


@pytest.mark.parametrize(
    "name",
    [
        "ACME_API_KEY",
        "acme_api_key",
        "GITHUB_TOKEN",
        "slack_Token_v2",
        "CLIENT_SECRET",
        "Db_Password",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "credential",
    ],
)
def test_every_secret_word_is_matched_in_any_case(monkeypatch, name):
    """Each of KEY, TOKEN, SECRET, PASSWORD and CREDENTIAL, in any case and anywhere in
    the name, makes the variable secret: its value is replaced and read again."""
    value = f"value-of-{name.lower()}-42"
    monkeypatch.setenv(name, value)
    data = _pickler.dumps({"v": _fresh(value)})
    assert value.encode() not in data
    assert name.encode() in data
    monkeypatch.setenv(name, value + "-rotated")
    assert _pickler.loads(data) == {"v": value + "-rotated"}


def test_non_ascii_secret_is_replaced(monkeypatch):
    """A value with non-ASCII characters (UTF-8 in the payload) is found and replaced
    as well, as str and as its UTF-8 bytes."""
    value = "pässwörd-🔑-2024"
    monkeypatch.setenv("WIKI_PASSWORD", value)
    data = _pickler.dumps({"s": _fresh(value), "b": value.encode()})
    assert value.encode() not in data
    back = _pickler.loads(data)
    assert back == {"s": value, "b": value.encode()}


def test_resume_without_the_variable_fails_clearly(monkeypatch):
    """Loading a payload that refers to a variable no longer set fails naming it (the
    secret is never in the payload to fall back on)."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", VALUE)
    data = _pickler.dumps({"v": _fresh(VALUE)})
    monkeypatch.delenv("MY_SERVICE_TOKEN")
    with pytest.raises(Exception, match="MY_SERVICE_TOKEN is not set"):
        _pickler.loads(data)


# ------------------------------------------------------------------------ subprocess
AGENT = AGENTS / "env_secret_agent.py"
KEY = "acme-ORIGINAL-key-5f2e9c1d"
NEW_KEY = "acme-ROTATED-key-a8b7c6d5"


def _digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _files_holding(store: Path, secret: bytes) -> list[str]:
    found = []
    for path in sorted(p for p in store.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if secret in data:
            found.append(f"raw: {path}")
        if any(secret in frame for frame in zstd_frames(data)):
            found.append(f"zstd frame: {path}")
        body = snapshot_body(data) if path.suffix == ".snap" else None
        if body is not None and secret in body:
            found.append(f"body: {path}")
    if any(secret in chunk for chunk in outsider_chunks(store)):
        found.append(f"a chunk: {store}")
    return found


def test_killed_job_resumed_with_a_rotated_key_uses_it_and_the_store_never_holds_it(tmp_path):
    """The agent holds os.environ["ACME_API_KEY"] in a local and a dict across its
    snapshots. Uninterrupted it prints the key's digest throughout; killed right after
    snapshot 1 and resumed with the variable rotated, it continues with the new key
    (local and dict entry still one object). No file of the store holds the original
    key, raw, in a zstd frame or in a snapshot's body; the payloads name the variable."""
    store = tmp_path / "s"
    plain = snaprun(
        "run", "--store", store, "--job", "plain", AGENT, cwd=tmp_path, env={"ACME_API_KEY": KEY}
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == [
        f"before {_digest(KEY)}",
        f"after-1 {_digest(KEY)} {_digest(KEY)} True",
        f"after-2 {_digest(KEY)} eu-west",
    ]
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENT,
        cwd=tmp_path,
        env={"ACME_API_KEY": KEY},
        fault="after-snapshot:1",
    )
    assert killed.returncode == -9, killed.stderr
    assert killed.stdout == f"before {_digest(KEY)}\n"
    resumed = snaprun(
        "resume", "--store", store, "job", cwd=tmp_path, env={"ACME_API_KEY": NEW_KEY}
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from snapshot 1" in resumed.stderr
    assert resumed.stdout.splitlines() == [
        f"after-1 {_digest(NEW_KEY)} {_digest(NEW_KEY)} True",
        f"after-2 {_digest(NEW_KEY)} eu-west",
    ]
    assert resumed.result == repr(_digest(NEW_KEY))

    snaps = [(job, seq) for job in ("plain", "job") for seq in snapshot_seqs(store, job)]
    assert len(snaps) == 4
    for path in snaps:
        payload = body(store, *path)
        assert KEY.encode() not in payload and NEW_KEY.encode() not in payload, path
        assert b"ACME_API_KEY" in payload, path
    assert _files_holding(store, KEY.encode()) == []
    assert _files_holding(store, NEW_KEY.encode()) == []


def test_resume_with_the_key_variable_unset_fails_clearly_and_keeps_the_snapshot(tmp_path):
    """Resumed with ACME_API_KEY unset, the job cannot get its key back (it was never
    saved): one clear error naming the variable, exit 2, nothing printed; set again,
    the same snapshot resumes."""
    store = tmp_path / "s"
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENT,
        cwd=tmp_path,
        env={"ACME_API_KEY": KEY},
        fault="after-snapshot:1",
    )
    assert killed.returncode == -9, killed.stderr
    unset = snaprun("resume", "--store", store, "job", cwd=tmp_path)
    clean_refusal(unset, "ACME_API_KEY is not set", "the snapshot is intact")
    again = snaprun("resume", "--store", store, "job", cwd=tmp_path, env={"ACME_API_KEY": NEW_KEY})
    assert again.returncode == 0, again.stderr
    assert "resumed from snapshot 1" in again.stderr
    assert again.stdout.startswith(f"after-1 {_digest(NEW_KEY)}")


@pytest.mark.smoke
def test_a_secret_in_a_label_or_meta_is_refused_and_kept_out_of_the_store(tmp_path):
    """A label and meta are written in the snapshot's header and the catalog (in clear in
    a plain store): one holding a secret variable's value is refused naming the variable,
    never written; the job goes on and its clean snapshot holds no trace of the value."""
    secret = "acme-key-" + "7f3e9b1c5d2a8064"
    agent = AGENTS / "secret_label.py"
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        agent,
        cwd=tmp_path,
        env={"ACME_API_KEY": secret},
    )
    assert run.returncode == 0, run.stderr
    refused = [line for line in run.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 2, run.stdout
    for line in refused:
        assert "the environment variable ACME_API_KEY" in line and secret not in line
    assert run.stdout.endswith("done\n")
    assert len(snapshot_seqs(tmp_path / "s", "job")) == 1
    for path in (tmp_path / "s").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    for chunk in outsider_chunks(tmp_path / "s"):
        assert secret.encode() not in chunk
