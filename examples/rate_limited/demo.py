"""Demo: a research agent throttled by a rate limit (429, Retry-After: 3600)
hibernates (exit 3), and `snaprun worker` resumes it an hour later (on the store's
clock) to finish its research.

    python examples/rate_limited/demo.py [--dir DIR] [--report FILE]

Starts the example's stub providers (servers.py) on 127.0.0.1, runs the agent with
`snaprun` in subprocesses on a store of its own, and prints every command it runs.
SNAPSTATE_CLOCK_OFFSET=SECONDS moves the store's clock forward for one command: that
is how the demo lets the hour pass in a second.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _demo import Demo  # noqa: E402


def main():
    with Demo("rate_limited", __doc__) as demo:
        demo.say(
            "The providers: a stub LLM and a search API whose free tier allows three "
            "searches, then answers 429 with Retry-After: 3600."
        )
        demo.start_servers()

        demo.say(
            "Run the job. The fourth search is refused: the refused call did not "
            "happen, and an hour is too long to wait in a process, so the job "
            "hibernates at the call (exit 3)."
        )
        run = demo.snaprun("run", "--job", "research", demo.agent, expect=3)
        demo.report["run"] = run.returncode
        demo.report["run_output"] = run.stdout
        demo.snaprun("ls")
        demo.snaprun("effects", "research")

        demo.say("A worker pass now finds nothing due: the job stays waiting.")
        now = demo.snaprun("worker", "--once")
        demo.report["worker_now"] = now.returncode
        demo.report["waiting_after_worker_now"] = demo.snaprun_json("ls")

        demo.say(
            "An hour later (SNAPSTATE_CLOCK_OFFSET=3600 moves the store's clock), the "
            "worker resumes it: the same search is sent again, and the research goes on "
            "to the end. In production that is a `snaprun worker` left running."
        )
        later = demo.snaprun("worker", "--once", env={"SNAPSTATE_CLOCK_OFFSET": "3600"})
        demo.report["worker_later"] = later.returncode
        demo.report["worker_output"] = later.stdout
        demo.snaprun("ls")
        demo.report["jobs"] = demo.snaprun_json("ls")
        demo.report["effects"] = demo.snaprun_json("effects", "research")

        search, llm = demo.stats("SEARCH_URL"), demo.stats("LLM_URL")
        demo.report.update(search=search, llm=llm)
        demo.say(
            f"The search API served {search.get('searches', 0)} searches and refused "
            f"{search.get('refused_429', 0)}; the LLM answered "
            f"{llm.get('chat_completions', 0)} requests: each question once."
        )
        demo.finish()


if __name__ == "__main__":
    main()
