"""Puts a secret environment variable's value in a snapshot's label, then in its meta:
both refused (a label and meta are written in the header); a clean snapshot is taken."""

import os

from snapstate import SnapshotError, snapshot


def main():
    key = os.environ["ACME_API_KEY"]
    for kwargs in ({"label": f"calling with {key}"}, {"label": "ok", "meta": {"k": key}}):
        try:
            snapshot(**kwargs)
        except SnapshotError as exc:
            print("REFUSED", exc)
    snapshot("clean", meta={"step": 1})
    print("done")
