"""tests/test_library_state.py: library objects the job changed or installed, printed
after each snapshot (decimal.DefaultContext changed in place, an opener installed
with urllib.request.install_opener, os.environ held in a local)."""

import decimal
import os
import urllib.request

from snapstate import snapshot


def main():
    env = os.environ
    ctx = decimal.DefaultContext
    opener = urllib.request.OpenerDirector()
    opener.add_handler(urllib.request.HTTPHandler())
    for i in range(2):
        ctx.prec = 5 + i
        opener.addheaders = [("User-agent", f"libstate/{i}")]
        urllib.request.install_opener(opener)
        env["LIBSTATE_STEP"] = str(i)
        snapshot()
        print(
            i,
            ctx is decimal.DefaultContext,
            decimal.DefaultContext.prec,
            urllib.request._opener is opener,
            opener.addheaders,
            [type(h).__name__ for h in opener.handlers],
            env is os.environ,
            os.environ["LIBSTATE_STEP"],
            flush=True,
        )
    return "done"
