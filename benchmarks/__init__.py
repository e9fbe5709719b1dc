"""snapstate's benchmarks: scripts run by hand (`python benchmarks/bench_NAME.py`) or all at
once by `python -m benchmarks` (__main__.py; docs/benchmarks.md), which rewrites the
generated part of RESULTS.md. A regular package, so `python -m benchmarks` in the checkout
finds this folder even where an installed distribution ships a `benchmarks` of its own."""
