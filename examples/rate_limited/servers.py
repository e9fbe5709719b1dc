"""The rate_limited example's providers on 127.0.0.1: a stub LLM and a search API whose
free tier answers 429 with Retry-After: 3600 after every three searches. Prints
LLM_URL=... and SEARCH_URL=..., then `ready`, and serves until SIGTERM.

    python examples/rate_limited/servers.py [--quota N] [--retry-after SECONDS]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _stubs import LLM, Search, main_with  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--quota", type=int, default=3, help="searches between two 429s")
    parser.add_argument("--retry-after", type=int, default=3600, metavar="SECONDS")
    args = parser.parse_args()
    main_with(LLM(), Search(quota=args.quota, retry_after=args.retry_after))
