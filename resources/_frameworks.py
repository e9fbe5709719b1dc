"""Adapters for objects agent frameworks keep, where the library's own pickling is not
exact (registered with register_optional: loaded only once the agent imported the
library; snapstate never imports it itself).

    pydantic SecretStr,        the secret is never pickled in clear: saved as a reference
    SecretBytes (v2 and v1)    to the environment variable holding exactly that value (read
                               again after a restore), else sealed with the store's key.
    tenacity Retrying,         the whole state, the retry statistics and iteration state
    AsyncRetrying              in its threading.local included (tenacity's own pickling may
                               drop them: `retrying.statistics` would be empty after a
                               restore).
    tiktoken Encoding          by its whole definition (tiktoken's own pickling names a
                               registered encoding, which the new process would fetch from
                               the network or a cache dir set only while the library loaded
                               it: llama-index); the new process's registered encoding of
                               that name is used when it is loaded and the same.
    mcp's request-state codec  (AESGCMRequestStateCodec: AES-GCM keys derived when an MCP
                               server is built, never readable again) saved as references
                               to the environment variables whose values derive exactly
                               its keys (keys=[os.environ["MCP_STATE_KEY"]]), in ring order;
                               otherwise refused (an ephemeral key generated at start-up,
                               MCPServer's default, or a key in code: neither can be saved).
    cryptography keys          a private key is saved as its PKCS#8 bytes sealed with the
                               store's key (never in clear), a public key by its DER bytes;
                               an AEAD cipher object (AESGCM, ChaCha20Poly1305...) is
                               refused: its key cannot be read back from it.
    wrapt ObjectProxy and      a proxy whose class is importable: the class and the wrapped
    its subclasses             object, plus the proxy's own `_self_` attributes; otherwise
                               refused by name (wrapt's own error would end the job).
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import sys
from functools import partial
from typing import Any

from .._abi import pinned
from ..serializers import _refs
from ..serializers._describe import register_kind
from ..serializers._envsecrets import secret_variables
from ..serializers._pickler import apply_default_state, bare_new
from ._adapters import Reduced, register_adapter, register_optional
from ._http import sealed

__all__: list[str] = []


# ------------------------------------------------------------------------ pydantic secrets
def _reduce_secret(secret: Any) -> Reduced:
    value = secret.get_secret_value()
    attrs = {k: v for k, v in getattr(secret, "__dict__", {}).items() if k != "_secret_value"}
    return (_rebuild_secret, (type(secret), sealed(value)), attrs or None)


@pinned("pydantic_rebuild_secret")
def _rebuild_secret(cls: type, value: str | bytes) -> Any:
    return cls(value)


def _load_pydantic(module: str) -> None:
    library = sys.modules[module]
    for name in ("SecretStr", "SecretBytes"):
        register_adapter(getattr(library, name), _reduce_secret, subclasses=True)


register_optional("pydantic", partial(_load_pydantic, "pydantic"))
register_optional("pydantic.v1", partial(_load_pydantic, "pydantic.v1"))  # may come later


# ------------------------------------------------------------------------ jinja2
def _reduce_template(template: Any) -> Reduced:
    # Template.__new__(cls, source, ...) compiles the source into a new Template and
    # keeps nothing else (no cache of instances): the compiled state is the template.
    return (bare_new, (type(template),), dict(vars(template)), None, None, apply_default_state)


def _load_jinja2() -> None:
    import jinja2

    register_adapter(jinja2.Template, _reduce_template, subclasses=True)


_reduce_template.parts = lambda t: [(f".{k}", v) for k, v in vars(t).items()]  # type: ignore[attr-defined]  # read by the pickler
register_optional("jinja2", _load_jinja2)


# ------------------------------------------------------------------------ tenacity
def _reduce_retrying(retrying: Any) -> Reduced:
    # State put back as it was, never through tenacity's own __setstate__ (9.x), which
    # would replace the thread-local holding the statistics with an empty one.
    return (_new_instance, (type(retrying),), dict(vars(retrying)), None, None, apply_default_state)


@pinned("new_instance")
def _new_instance(cls: type) -> Any:
    new: Any = cls.__new__
    return new(cls)


def _load_tenacity() -> None:
    import tenacity

    register_adapter(tenacity.BaseRetrying, _reduce_retrying, subclasses=True)  # type: ignore[type-abstract]  # its subclasses are concrete


_reduce_retrying.parts = lambda r: [(f".{k}", v) for k, v in vars(r).items()]  # type: ignore[attr-defined]  # read by the pickler
register_optional("tenacity", _load_tenacity)


# ------------------------------------------------------------------------ tiktoken
def _reduce_encoding(enc: Any) -> Reduced:
    return (
        _rebuild_encoding,
        (enc.name, enc._pat_str, enc._mergeable_ranks, enc._special_tokens),
    )


@pinned("tiktoken_rebuild_encoding")
def _rebuild_encoding(
    name: str, pat_str: str, ranks: dict[bytes, int], special: dict[str, int]
) -> Any:
    import tiktoken
    import tiktoken.registry

    current = tiktoken.registry.ENCODINGS.get(name)
    if (
        current is not None
        and current._pat_str == pat_str
        and current._mergeable_ranks == ranks
        and current._special_tokens == special
    ):
        return current
    return tiktoken.Encoding(name, pat_str=pat_str, mergeable_ranks=ranks, special_tokens=special)


def _load_tiktoken() -> None:
    import tiktoken

    register_adapter(tiktoken.Encoding, _reduce_encoding)


register_optional("tiktoken", _load_tiktoken)


# ------------------------------------------------------------------------ mcp
def _reduce_mcp_codec(codec: Any) -> Reduced:
    from mcp.server import request_state as rs

    def kid(secret: bytes) -> bytes:
        return hashlib.sha256(rs._KID_INFO + rs._derive_key(secret)).digest()[: rs._KID_LEN]

    by_kid: dict[bytes, str] = {}
    for name, value in secret_variables().items():
        if len(value.encode()) >= 32:
            by_kid.setdefault(kid(value.encode()), name)
    ring = list(codec._ring)
    if codec._mint_kid in ring:  # the key that seals comes first, as keys[0]
        ring.remove(codec._mint_kid)
        ring.insert(0, codec._mint_kid)
    names = [by_kid.get(k) for k in ring]
    if not ring or None in names:
        raise pickle.PicklingError(
            "an MCP server's request-state keys (mcp RequestStateSecurity: AES-GCM keys "
            "derived when the server was built, by default a random key of this process) "
            "cannot be read back, so the server cannot be saved. Give it keys from the "
            "environment, which are saved as references to their variables: "
            "MCPServer(..., request_state_security=RequestStateSecurity(keys=[os.environ"
            "['MCP_STATE_KEY']], audience='my-service')) with MCP_STATE_KEY at least 32 "
            "characters; or build the server in a function called after the snapshot"
        )
    return (_rebuild_mcp_codec, (type(codec), [sealed(os.environ[n]) for n in names if n]))


@pinned("mcp_rebuild_codec")
def _rebuild_mcp_codec(cls: type, keys: list[str]) -> Any:
    return cls(keys)


def _load_mcp() -> None:
    from mcp.server import request_state

    codec = getattr(request_state, "AESGCMRequestStateCodec", None)
    if codec is not None:
        register_adapter(codec, _reduce_mcp_codec, subclasses=True)


register_optional("mcp.server.request_state", _load_mcp)
# The codec's refusal says what to do (keys from the environment).
register_kind(
    "mcp.server.request_state.AESGCMRequestStateCodec",
    "an MCP request-state codec (mcp RequestStateSecurity)",
    None,
)


# ------------------------------------------------------------------------ cryptography keys
def _reduce_private_key(key: Any) -> Reduced:
    from cryptography.hazmat.primitives import serialization as s

    data = key.private_bytes(s.Encoding.DER, s.PrivateFormat.PKCS8, s.NoEncryption())
    return (_load_private_key, (sealed(data, from_env=False),))


@pinned("crypto_private_key")
def _load_private_key(data: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization.load_der_private_key(data, password=None)


def _reduce_public_key(key: Any) -> Reduced:
    from cryptography.hazmat.primitives import serialization as s

    data = key.public_bytes(s.Encoding.DER, s.PublicFormat.SubjectPublicKeyInfo)
    return (_load_public_key, (data,))


@pinned("crypto_public_key")
def _load_public_key(data: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization.load_der_public_key(data)


def _refuse_cipher(cipher: Any) -> Reduced:
    raise pickle.PicklingError(
        f"the {type(cipher).__name__} cipher object cannot be saved: its key cannot be read "
        "back from it. Keep the key itself (bytes, read from the environment or a file) "
        f"and make the cipher after the snapshot ({type(cipher).__name__}(key))"
    )


def _register_cryptography() -> None:
    try:
        from cryptography.hazmat.bindings._rust import openssl
    except ImportError:  # pragma: no cover - another cryptography layout
        return
    for module, names in (
        ("rsa", ("RSA",)),
        ("ec", ("EC",)),
        ("dsa", ("DSA",)),
        ("dh", ("DH",)),
        ("ed25519", ("Ed25519",)),
        ("ed448", ("Ed448",)),
        ("x25519", ("X25519",)),
        ("x448", ("X448",)),
    ):
        kinds = getattr(openssl, module, None)
        for prefix in names:
            private = getattr(kinds, f"{prefix}PrivateKey", None)
            public = getattr(kinds, f"{prefix}PublicKey", None)
            if isinstance(private, type):
                register_adapter(private, _reduce_private_key)
            if isinstance(public, type):
                register_adapter(public, _reduce_public_key)
    aead = getattr(openssl, "aead", None)
    for name in ("AESGCM", "AESCCM", "AESGCMSIV", "AESOCB3", "AESSIV", "ChaCha20Poly1305"):
        cipher = getattr(aead, name, None)
        if isinstance(cipher, type):
            register_adapter(cipher, _refuse_cipher)
            register_kind(f"{cipher.__module__}.{cipher.__qualname__}", f"an {name} cipher", None)


_register_cryptography()  # a dependency of snapstate's own: always imported


# ------------------------------------------------------------------------ wrapt proxies
def _reduce_proxy(proxy: Any) -> Reduced:
    cls = type(proxy)
    if not _refs.importable(cls) or type(proxy).__init__ is not _PROXY_INIT[0]:
        raise pickle.PicklingError(
            f"a wrapt proxy ({cls.__module__}.{cls.__qualname__}) wrapping "
            f"{type(proxy.__wrapped__).__qualname__} cannot be rebuilt: its class takes "
            "other arguments than the wrapped object, or cannot be imported by its name"
        )
    own = _own_attributes(proxy)
    return (_rebuild_proxy, (cls, proxy.__wrapped__, own))


def _own_attributes(proxy: Any) -> dict[str, Any]:
    """The proxy's own `_self_` attributes. Its `__dict__` attribute is the wrapped
    object's (wrapt forwards it); the proxy's own dict is among what it references."""
    wrapped_dict = getattr(proxy.__wrapped__, "__dict__", None)
    for ref in gc.get_referents(proxy):
        if type(ref) is dict and ref is not wrapped_dict:
            return {k: v for k, v in ref.items() if isinstance(k, str) and k.startswith("_self_")}
    return {}


@pinned("wrapt_rebuild_proxy")
def _rebuild_proxy(cls: type, wrapped: object, own: dict[str, Any]) -> Any:
    proxy = cls(wrapped)
    for name, value in own.items():
        setattr(proxy, name, value)
    return proxy


_PROXY_INIT: list[Any] = [None]


def _load_wrapt() -> None:
    import wrapt

    _PROXY_INIT[0] = wrapt.ObjectProxy.__init__
    register_adapter(wrapt.ObjectProxy, _reduce_proxy, subclasses=True)


register_optional("wrapt", _load_wrapt)
register_kind("wrapt.wrappers.ObjectProxy", "a wrapt proxy", None)
