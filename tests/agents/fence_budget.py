"""What an effect is given while it is sent: the timeout (timeout_param), the time
left (snapstate.effect_time_left()) and the fencing token; and effect_time_left()
outside an effect. Returns them for tests/test_fencing.py."""

import snapstate
from snapstate import call_effect, effect


@effect(timeout_param="timeout", fencing_token=True)
def probe(*, fencing_token, timeout=None):
    return {"timeout": timeout, "left": snapstate.effect_time_left(), "token": fencing_token}


def capped(*, timeout):
    return timeout


def main():
    seen = probe()
    return {
        **seen,
        "outside": snapstate.effect_time_left(),
        "capped": call_effect(capped, timeout=0.25, timeout_param="timeout"),
    }
