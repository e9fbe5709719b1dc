"""Demo: a content calendar that waits a week for its stakeholder's approval (the
week passes on the store's clock, not yours), then schedules the approved drafts;
nothing is drafted twice.

    python examples/content_calendar/demo.py [--dir DIR] [--report FILE]

Starts the example's stub providers (servers.py) on 127.0.0.1, runs the agent with
`snaprun` in subprocesses on a store of its own, and prints every command it runs.
SNAPSTATE_CLOCK_OFFSET=SECONDS moves the store's clock forward for one command: that
is how the demo lets days pass in a second.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _demo import Demo  # noqa: E402

DAY = 86400


def main():
    started = time.monotonic()
    with Demo("content_calendar", __doc__) as demo:
        demo.say("The providers: a stub LLM and a content management system (CMS).")
        demo.start_servers()

        demo.say(
            "Run the job. It drafts five posts, a snapshot after each. This first run "
            "dies while drafting: SNAPSTATE_FAULT (snapstate's crash-test seam) makes "
            "the process SIGKILL itself right after the CMS answered effect 6, "
            "Wednesday's draft, before the ledger recorded the answer."
        )
        killed = demo.snaprun(
            "run",
            "--job",
            "calendar",
            demo.agent,
            env={"SNAPSTATE_FAULT": "effect-after-send:6"},
            expect=-9,
        )
        demo.report["killed"] = killed.returncode

        demo.say(
            "Resume it: it continues after Tuesday's snapshot and sends Wednesday's "
            "draft again with the same idempotency key, which the CMS answers with the "
            "draft it already saved. Then it asks Dana to approve the calendar and "
            "hibernates: exit 3, status waiting, no process left."
        )
        first = demo.snaprun("resume", "calendar", expect=3)
        demo.report["run"] = first.returncode
        demo.snaprun("ls")
        demo.snaprun("approvals")
        (approval,) = demo.snaprun_json("approvals")
        demo.report["approval"] = approval

        demo.say(
            "A day later someone resumes it by hand (a worker would too, if it looked): "
            "nobody has decided yet, so it hibernates again at once. No agent code runs "
            "and nothing is drafted again."
        )
        early = demo.snaprun(
            "resume", "calendar", env={"SNAPSTATE_CLOCK_OFFSET": str(DAY)}, expect=3
        )
        demo.report["early_resume"] = early.returncode

        demo.say(
            "Six days after the request, Dana approves (in another process, on another "
            "day: SNAPSTATE_CLOCK_OFFSET moves the store's clock forward six days)."
        )
        later = {"SNAPSTATE_CLOCK_OFFSET": str(6 * DAY)}
        demo.snaprun(
            "approve", "calendar", approval["id"], "--by", "dana", "--note", "looks good", env=later
        )

        demo.say(
            "The worker finds the decided approval and resumes the job right after "
            "request_approval(): it schedules the five drafts Dana approved."
        )
        worker = demo.snaprun("worker", "--once", env=later)
        demo.report["worker"] = worker.returncode
        demo.report["worker_output"] = worker.stdout
        demo.snaprun("ls")
        (decided,) = demo.snaprun_json("approvals", "--all")
        demo.report["decided"] = decided
        demo.report["jobs"] = demo.snaprun_json("ls")

        cms = demo.stats("CMS_URL")
        demo.report["cms"] = cms
        waited = (decided["decided_at"] - decided["requested"]) / DAY
        demo.say(
            f"The CMS counted drafts per day {cms['drafts']} and scheduled posts "
            f"{cms['scheduled']}: each once. By the store's clock Dana decided "
            f"{waited:.1f} days after the request; the demo took "
            f"{time.monotonic() - started:.0f} seconds."
        )
        demo.finish()


if __name__ == "__main__":
    main()
