"""The checks an HTTP client's parts must pass before a snapshot holds them: each part
pickles (`check`, refusing by name with `Refused`), and an SSL context is saved only
when it is one the library builds itself (the default CA bundle with or without
trust_env, or no verification), compared by fingerprint with a reference context built
the same way; a context the user built (a CA bundle path, a client certificate, other
options) is refused, naming the client (resources/_http.py)."""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import ssl
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


FIX = "create the client after the snapshot (or inside snapstate.resource())"


# ------------------------------------------------------------------------ checks
CHECKING = [0]  # > 0 while a part is test-pickled (its own clients are not re-checked)


class Refused(pickle.PicklingError):
    pass


def describe(obj: object, base: type) -> str:
    lib = base.__module__.split(".")[0]
    what = f"an {lib}.{base.__name__}" if lib[0] in "aeiouh" else f"a {lib}.{base.__name__}"
    cls = type(obj)
    if cls is not base:
        what += f" (subclass {cls.__module__}.{cls.__qualname__})"
    return what


def check(what: str, part: str, value: object) -> None:
    """Refuse naming the client and the part unless `value` pickles (with the
    snapshot's own pickler, so functions go by reference)."""
    if CHECKING[0]:
        return
    from ..serializers import _pickler  # import here: the pickler imports the adapters

    CHECKING[0] += 1
    try:
        _pickler.dumps(value)
    except _pickler.UnpicklableError as exc:
        raise Refused(
            f"{what} whose {part} is a {type_name(value)} that cannot be saved "
            f"({exc.error}); {FIX}, or give it a {part} that pickles"
        ) from None
    finally:
        CHECKING[0] -= 1


def type_name(value: object) -> str:
    t = type(value)
    return (
        t.__qualname__
        if t.__module__ in ("builtins", "__main__")
        else f"{t.__module__}.{t.__qualname__}"
    )


# ------------------------------------------------------------------------ SSL contexts
_REFERENCE: dict[tuple[object, ...], tuple[object, ...]] = {}


def _fingerprint(ctx: ssl.SSLContext) -> tuple[object, ...]:
    """Everything observable about an SSL context (a client certificate is not: see
    _has_client_cert)."""
    return (
        type(ctx),
        ctx.protocol,
        ctx.verify_mode,
        ctx.check_hostname,
        int(ctx.options),
        ctx.minimum_version,
        ctx.maximum_version,
        int(ctx.verify_flags),
        ctx.post_handshake_auth,
        ctx.hostname_checks_common_name,
        getattr(ctx, "keylog_filename", None),
        ctx.sni_callback,
        tuple(c["name"] for c in ctx.get_ciphers()),
        tuple(sorted(ctx.cert_store_stats().items())),
        hashlib.sha256(b"".join(ctx.get_ca_certs(binary_form=True))).digest(),
    )


def _reference(lib: str, verify: bool, trust_env: bool) -> tuple[object, ...]:
    key = (lib, verify, trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    found = _REFERENCE.get(key)
    if found is None:
        config = importlib.import_module(f"{lib}._config")
        found = _REFERENCE[key] = _fingerprint(
            config.create_ssl_context(verify=verify, trust_env=trust_env)
        )
    return found


# (the ctypes module, SSL_CTX_get0_certificate, SSL_CTX_get_options)
_Probe = tuple[types.ModuleType, Callable[[int], int | None], Callable[[int], int]]


def _ssl_probe() -> _Probe | None:
    """SSL_CTX_get0_certificate from the libssl the ssl module uses, or None."""
    try:
        import _ssl
        import ctypes

        lib = ctypes.CDLL(_ssl.__file__)
        get_cert, get_options = lib.SSL_CTX_get0_certificate, lib.SSL_CTX_get_options
    except (OSError, AttributeError, ImportError):
        return None
    get_cert.restype, get_cert.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    get_options.restype, get_options.argtypes = ctypes.c_uint64, [ctypes.c_void_p]
    return ctypes, get_cert, get_options


_PROBE: list[_Probe | None] = []


def _has_client_cert(ctx: ssl.SSLContext) -> bool | None:
    """Whether a client certificate is loaded (cert=... or load_cert_chain), read from
    the OpenSSL context behind `ctx`; None when that cannot be read safely."""
    if not _PROBE:
        _PROBE.append(_ssl_probe())
    probe = _PROBE[0]
    if probe is None:
        return None
    ctypes, get_cert, get_options = probe
    # CPython's PySSLContext is {PyObject_HEAD; SSL_CTX *ctx; ...}: checked through the
    # options OpenSSL reports for it before the pointer is trusted.
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer or get_options(pointer) != int(ctx.options):
        return None
    return bool(get_cert(pointer))


def verify_of(lib: str, ctx: ssl.SSLContext | None, what: str, part: str) -> tuple[bool, bool]:
    """(verify, trust_env) that make an SSL context equal to `ctx`, or a refusal."""
    has_cert = _has_client_cert(ctx) if ctx is not None else False
    if has_cert:
        raise Refused(
            f"{what} whose {part} has a client certificate (cert=... or an "
            "SSLContext with load_cert_chain), which cannot be read back from its "
            f"SSL context; {FIX}"
        )
    if has_cert is None:  # the fingerprint below cannot see a client certificate
        raise Refused(
            f"{what} whose {part} has an SSL context that could not be verified "
            "to hold no client certificate (cert=... or load_cert_chain; this "
            f"Python's ssl module cannot be inspected), so it cannot be saved; {FIX}"
        )
    if ctx is not None:
        seen = _fingerprint(ctx)
        for verify, trust_env in ((True, True), (True, False), (False, True)):
            if seen == _reference(lib, verify, trust_env):
                return verify, trust_env
    raise Refused(
        f"{what} whose {part} uses an SSL context built by the user (verify=<"
        "ssl.SSLContext> or a CA bundle path), which cannot be saved; "
        + FIX
        + ", or use verify=True/False"
    )
