"""An example agent: researches a few topics step by step, with a snapshot after each.

    snaprun run examples/research_agent.py "durable agents"

Kill it (Ctrl-C or kill -9) while it works, then resume the last snapshot with
`snaprun resume .snapstate/jobs/<job>/<seq>.snap`: it continues right after the
snapshot() call, with its notes, loop position and call stack intact. It also runs
under plain Python (`python examples/research_agent.py`), where snapshot() does nothing.
"""

import sys
import time

from snapstate import snapshot

STEP_SECONDS = 0.5


class Notebook:
    def __init__(self, topic):
        self.topic = topic
        self.notes = []

    def add(self, note):
        self.notes.append(note)
        return len(self.notes)


def research(book, subtopic):
    time.sleep(STEP_SECONDS)  # stands for minutes of LLM and web calls
    finding = f"{subtopic} of {book.topic}: {len(subtopic) * 7} sources"
    count = book.add(finding)
    info = snapshot(f"researched {subtopic}")
    if info.resumed:
        print(f"  (resumed from snapshot {info.seq} after {info.frozen_for:.1f}s)", flush=True)
    return count


def main():
    topic = sys.argv[1] if len(sys.argv) > 1 else "durable agents"
    book = Notebook(topic)
    for step, subtopic in enumerate(["history", "techniques", "pitfalls", "tools"], 1):
        count = research(book, subtopic)
        print(f"step {step}: {book.notes[-1]} ({count} notes)", flush=True)
    print(f"report on {topic}:")
    for note in book.notes:
        print(f"  - {note}")
    return len(book.notes)


if __name__ == "__main__":
    main()
