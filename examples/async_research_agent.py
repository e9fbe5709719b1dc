"""An async example agent: researches three topics at once (asyncio tasks), with a
snapshot after each finding.

    snaprun run examples/async_research_agent.py "durable agents"

Kill it (Ctrl-C or kill -9) while it works, then `snaprun resume <job>`: every task
continues right after its `await snapshot()`, the findings already recorded are not
looked up again (the effect ledger serves them), and the report is the one an
uninterrupted run prints. It also runs under plain Python
(`python examples/async_research_agent.py`), where the await points pass through.
"""

import asyncio
import sys

from snapstate import effect, snapshot

STEP_SECONDS = 0.3


@effect(kind="read")
async def look_up(topic, subtopic):
    await asyncio.sleep(STEP_SECONDS)  # stands for minutes of LLM and web calls
    return f"{subtopic} of {topic}: {len(subtopic) * 7} sources"


async def research(topic, subtopic, notes):
    for depth in ("overview", "details"):
        finding = await look_up(topic, f"{subtopic} ({depth})")
        notes.append(finding)
        info = await snapshot(f"{subtopic}: {depth}")
        if info.resumed:
            print(f"  ({subtopic}: resumed from snapshot {info.seq})", flush=True)
    return len(notes)


async def main():
    topic = sys.argv[1] if len(sys.argv) > 1 else "durable agents"
    notes = {name: [] for name in ("history", "techniques", "pitfalls")}
    async with asyncio.TaskGroup() as group:
        for name, found in notes.items():
            group.create_task(research(topic, name, found))
    print(f"report on {topic}:")
    for found in notes.values():
        for note in found:
            print(f"  - {note}")
    return sum(len(found) for found in notes.values())


if __name__ == "__main__":
    print(asyncio.run(main()))
