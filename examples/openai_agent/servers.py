"""The openai_agent example's providers on 127.0.0.1: a stub LLM speaking OpenAI's chat
completions with tool calls, and an order-tracking API. Prints LLM_URL=... and
ORDERS_URL=..., then `ready`, and serves until SIGTERM.

    python examples/openai_agent/servers.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _stubs import LLM, Orders, main_with  # noqa: E402

if __name__ == "__main__":
    main_with(LLM(), Orders())
