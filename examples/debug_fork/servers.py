"""The debug_fork example's provider on 127.0.0.1: a stub LLM (which, like real models,
obeys an instruction it finds in what it reads). Prints LLM_URL=..., then `ready`, and
serves until SIGTERM.

    python examples/debug_fork/servers.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _stubs import LLM, main_with  # noqa: E402

if __name__ == "__main__":
    main_with(LLM())
