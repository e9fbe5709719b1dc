"""A kind="read" effect (a price quote: safe to repeat, result still recorded) between
two snapshots. The provider counts each quote it serves as a delivery of "quote-widget"."""

from fx_http import post

from snapstate import effect, snapshot


@effect(kind="read")
def quote(item):
    return post("/plain", {"action": f"quote-{item}", "amount": 0})


def main():
    snapshot("start")
    price = quote("widget")
    print("quoted", price["id"], flush=True)
    snapshot("quoted")
    return price["id"]
