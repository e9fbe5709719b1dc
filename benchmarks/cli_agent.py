"""The agent of bench_cli.py (its own module: the job's globals are frozen with each
snapshot, so it holds nothing but this)."""

from __future__ import annotations

from snapstate import effect, pin, sleep, snapshot


@effect
def _order(item: str) -> str:
    """A recorded effect with nothing outside."""
    return f"ordered {item}"


def label_wait_main() -> str:
    """Pins a model, records an effect, takes a labelled snapshot with meta, then
    sleeps an hour (the job hibernates: status waiting, a timer wait row)."""
    pin(model="bench-model", prompt_version="3")
    _order("paper")
    snapshot("after ordering paper for the quarterly report", meta={"step": 1})
    sleep(3600)
    return "ok"
