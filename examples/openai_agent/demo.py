"""Demo: a support agent on the OpenAI SDK (a tool-calling loop, its prompt a jinja2
template) killed after its first answer and resumed: the answers are those of an
uninterrupted run, and no model call or lookup is made twice.

    python examples/openai_agent/demo.py [--dir DIR] [--report FILE]

Starts the example's stub providers (servers.py) on 127.0.0.1, runs the agent with
`snaprun` in subprocesses on a store of its own, and prints every command it runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _demo import Demo  # noqa: E402


def main():
    with Demo("openai_agent", __doc__) as demo:
        demo.say(
            "The providers: a stub LLM that speaks OpenAI's chat completions with tool "
            "calls, and an order-tracking API."
        )
        demo.start_servers()

        demo.say(
            "Run the job. It answers three questions, each in two model calls (the "
            "model asks for the order_status tool, then answers with its result). "
            "SNAPSTATE_FAULT (snapstate's crash-test seam) makes the process SIGKILL "
            "itself right after snapshot 1, the first answer."
        )
        killed = demo.snaprun(
            "run",
            "--job",
            "support",
            demo.agent,
            env={"SNAPSTATE_FAULT": "after-snapshot:1"},
            expect=-9,
        )
        demo.report["killed"] = killed.returncode
        demo.report["killed_output"] = killed.stdout

        demo.say(
            "Resume it in a new process: the OpenAI client, the rendered template and "
            "the conversation come back with the job, and it goes on with the second "
            "question."
        )
        resumed = demo.snaprun("resume", "support")
        demo.report["resumed"] = resumed.returncode
        demo.report["resumed_output"] = resumed.stdout

        demo.say(
            "The ledger (`snaprun effects support`, shortened): each model call "
            "and lookup once, in order."
        )
        effects = demo.snaprun_json("effects", "support")
        demo.report["effects"] = effects
        demo.output(
            "\n".join(
                f"{e['effect']}  {e['state']}  {e['name'].rsplit('.', 1)[-1]}  "
                f"attempts {e['attempts']}"
                for e in effects
            )
        )
        llm, orders = demo.stats("LLM_URL"), demo.stats("ORDERS_URL")
        demo.report.update(llm=llm, orders=orders)
        demo.say(
            f"The LLM answered {llm.get('chat_completions', 0)} requests and the order "
            f"API {orders.get('lookups', 0)} lookups: two and one per question."
        )
        demo.finish()


if __name__ == "__main__":
    main()
