"""`python -m snapstate.runtime._cli`: snaprun in a fresh interpreter (the worker's
children, tests under another Python)."""

from . import main

main()
