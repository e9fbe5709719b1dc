"""A research job that ends in a purchase order: it gathers the vendors' quotes, asks the
LLM about each one (a snapshot after each), orders from the cheapest and emails the order
to purchasing. Killed while the shop is still answering the order, it is resumed and
orders nothing twice: the order is sent again with the same idempotency key (the shop
answers with the order it already has). Killed while the email is in flight, it would
ask the mail service whether the email with its reference was sent before sending it.

    python examples/crash_order/demo.py        # the whole story, narrated

or by hand, with the providers running (`python examples/crash_order/servers.py`
prints LLM_URL, SHOP_URL and MAIL_URL: export them):

    snaprun run --job po examples/crash_order/agent.py     # kill -9 it while it orders
    snaprun resume po
    snaprun effects po                                     # one order, one email

Every outbound call is an effect: recorded in the store's ledger before it is sent and
its answer right after, so code re-executed after a restore never sends it again.
The providers' URLs are read when a call is made, so they are not part of the recorded
arguments.
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

from snapstate import effect, snapshot

MODEL = "stub-1"


def http(method, url, body=None, headers=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.load(reply)


@effect(kind="read")  # changes nothing: after a crash it may simply be asked again
def get_quotes(item, qty):
    query = urllib.parse.urlencode({"item": item, "qty": qty})
    return http("GET", f"{os.environ['SHOP_URL']}/quotes?{query}")


@effect(kind="read")
def ask_llm(prompt):
    reply = http(
        "POST",
        f"{os.environ['LLM_URL']}/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": prompt}]},
    )
    return reply["choices"][0]["message"]["content"]


# The shop honours an Idempotency-Key: an order whose outcome is unknown after a crash
# is sent again with the same key, and the shop answers with the order it placed.
@effect(idempotency="key", timeout_param="timeout")
def place_order(vendor, item, qty, total_usd, *, idempotency_key, timeout=60):
    order = {"vendor": vendor, "item": item, "qty": qty, "total_usd": total_usd}
    return http(
        "POST",
        f"{os.environ['SHOP_URL']}/orders",
        order,
        headers={"Idempotency-Key": idempotency_key},
        timeout=timeout,
    )


def find_email(idempotency_key):
    """The mail service honours no key, but says whether an email with our reference
    was sent: None tells snapstate it was not, so it is sent (once)."""
    try:
        return http("GET", f"{os.environ['MAIL_URL']}/messages?ref={idempotency_key}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@effect(lookup=find_email)
def send_email(to, subject, body, *, idempotency_key):
    message = {"to": to, "subject": subject, "body": body, "ref": idempotency_key}
    return http("POST", f"{os.environ['MAIL_URL']}/messages", message)


def main():
    item = sys.argv[1] if len(sys.argv) > 1 else "office chairs"
    qty = 40
    quotes = get_quotes(item, qty)
    snapshot("quotes")
    for quote in quotes:
        note = ask_llm(
            f"Assess this offer: {quote['vendor']} sells {qty} {item} for {quote['total_usd']} USD"
        )
        print(f"researched {quote['vendor']}: {note}", flush=True)
        snapshot(f"researched {quote['vendor']}")
    best = min(quotes, key=lambda quote: quote["total_usd"])
    print(f"ordering {qty} {item} from {best['vendor']} for {best['total_usd']} USD", flush=True)
    order = place_order(best["vendor"], item, qty, best["total_usd"])
    text = ask_llm(
        f"Write the purchase order email for: order {order['order']}, "
        f"{qty} {item} from {best['vendor']}"
    )
    send_email("purchasing@example.com", f"Purchase order {order['order']}", text)
    snapshot("ordered")
    print(f"order {order['order']} placed and emailed to purchasing", flush=True)
    return order["order"]


if __name__ == "__main__":
    print(main())
