"""fs_probe with numpy.random imported at the top: run by the fork server's numpy
flavour (tests/test_forkserver.py)."""

import numpy.random  # noqa: F401
from fs_probe import main  # noqa: F401
