"""The crash_order example's providers on 127.0.0.1: a stub LLM, a shop that honours
idempotency keys, a mail service that can be asked whether an email was sent. Prints
LLM_URL=..., SHOP_URL=..., MAIL_URL=..., then `ready`, and serves until SIGTERM.

    python examples/crash_order/servers.py [--slow-orders SECONDS]

--slow-orders: the shop takes that long to answer a new order after placing it (the
demo kills the agent in that window).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _stubs import LLM, Mail, Shop, main_with  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--slow-orders", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    main_with(LLM(), Shop(slow_orders=args.slow_orders), Mail())
