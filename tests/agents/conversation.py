"""A growing conversation: one ~500-byte message (seeded words) appended per step, a
snapshot after each. argv: [steps, marker, seconds to sleep per step]. Returns the message count and a digest of
the whole conversation, so a resume from the wrong snapshot changes the result."""

import hashlib
import random
import sys
import time

from snapstate import snapshot

VOCABULARY = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
]  # fmt: skip


def message(step: int, marker: str) -> dict:
    rng = random.Random(step)
    words = [marker]
    while sum(len(w) + 1 for w in words) < 500:
        words.append(rng.choice(VOCABULARY) + str(rng.randrange(1000)))
    return {"role": "user" if step % 2 else "assistant", "content": " ".join(words)}


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    marker = sys.argv[2] if len(sys.argv) > 2 else "msg"
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    conversation = []
    for step in range(steps):
        conversation.append(message(step, marker))
        snapshot(f"step {step}")
        time.sleep(pause)
    digest = hashlib.sha256(repr(conversation).encode()).hexdigest()[:16]
    return f"{len(conversation)} {digest}"
