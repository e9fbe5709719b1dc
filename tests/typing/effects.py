"""Typing cases for effect and call_effect, checked by `mypy --strict` (never run).

A wrong call carries `# type: ignore[code]`: with warn_unused_ignores (part of
--strict) the check fails if that call stops being an error. assert_type pins what a
correct call is typed as."""

from typing import assert_type

from snapstate import Retry, Secret, call_effect, effect


@effect
def send(n: int) -> str:
    return str(n)


@effect(kind="read", retry=Retry(attempts=2))
def fetch(url: str, *, timeout: float = 10.0) -> bytes:
    return url.encode()


@effect(idempotency="key")
def charge(amount: int, *, idempotency_key: str) -> dict[str, int]:
    return {"amount": amount}


def plain(a: int, b: str = "") -> float:
    return float(a)


# @effect bare: the function's own signature.
assert_type(send(1), str)
send("not an int")  # type: ignore[arg-type]
send(1, 2)  # type: ignore[call-arg]

# @effect(...) without injected keywords: the function's own signature too.
assert_type(fetch("https://example.com", timeout=1.0), bytes)
fetch(b"not a str")  # type: ignore[arg-type]
fetch("u", timeout="soon")  # type: ignore[arg-type]

# The runtime passes idempotency_key: callers do not, so only the result is typed.
assert_type(charge(5), dict[str, int])

# Wrong options are type errors.
effect(kind="write-ish")  # type: ignore[call-overload]
effect(idempotency="always")  # type: ignore[call-overload]

# call_effect(fn, *args, **kwargs) checks the arguments against fn.
assert_type(call_effect(plain, 1), float)
assert_type(call_effect(plain, 1, b="x"), float)
call_effect(plain, "not an int")  # type: ignore[call-overload]
call_effect(plain, 1, c=2)  # type: ignore[call-arg]
# With an option, the result is typed (the arguments cannot be: PEP 612).
assert_type(call_effect(plain, 1, key="order-1"), float)
assert_type(call_effect(plain, 1, kind="read", retry=Retry()), float)
call_effect(plain, 1, kind="sometimes")  # type: ignore[call-arg]

# Secret keeps the type of its value.
assert_type(Secret.from_env("API_KEY").reveal(), str)
assert_type(Secret(42, name="pin").reveal(), int)


# An effect that requires an approval keeps its function's type; within= takes the
# scope and the call's arguments.
@effect(requires="purchase", within=lambda scope, n, **_: n <= scope["max_usd"])
def buy(n: int) -> str:
    return str(n)


assert_type(buy(3), str)
buy("3")  # type: ignore[arg-type]
assert_type(call_effect(plain, 1, requires="purchase"), float)
