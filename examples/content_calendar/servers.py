"""The content_calendar example's providers on 127.0.0.1: a stub LLM and a content
management system (drafts and schedule, both honouring idempotency keys). Prints
LLM_URL=... and CMS_URL=..., then `ready`, and serves until SIGTERM.

    python examples/content_calendar/servers.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _stubs import CMS, LLM, main_with  # noqa: E402

if __name__ == "__main__":
    main_with(LLM(), CMS())
