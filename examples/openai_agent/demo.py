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
            "itself right after the ledger recorded effect 4: the model's first answer "
            "to the second question, after snapshot 1 (the first answer) and before the "
            "agent could act on it."
        )
        killed = demo.snaprun(
            "run",
            "--job",
            "support",
            demo.agent,
            env={"SNAPSTATE_FAULT": "effect-after-confirm:4"},
            expect=-9,
        )
        demo.report["killed"] = killed.returncode
        demo.report["killed_output"] = killed.stdout

        demo.say(
            "Resume it in a new process: the OpenAI client, the rendered template and "
            "the conversation come back with the job, and it goes on with the second "
            "question from snapshot 1. Its model call, recorded before the kill, is "
            "answered from the ledger, byte for byte: not sent, not paid for again."
        )
        resumed = demo.snaprun("resume", "support")
        demo.report["resumed"] = resumed.returncode
        demo.report["resumed_output"] = resumed.stdout

        demo.say(
            "The ledger (`snaprun effects support`, shortened): each model call "
            "(recorded by record_http: an http.POST row with its model and tokens) and "
            "each lookup once, in order."
        )
        effects = demo.snaprun_json("effects", "support")
        demo.report["effects"] = effects
        demo.output(
            "\n".join(
                f"{e['effect']}  {e['state']}  {e['name']}  attempts {e['attempts']}"
                + (f"  model {e['model']}, {e['input_tokens']} tokens in" if e.get("model") else "")
                for e in effects
            )
        )
        llm, orders = demo.stats("LLM_URL"), demo.stats("ORDERS_URL")
        demo.report.update(llm=llm, orders=orders)
        demo.say(
            f"The LLM answered {llm.get('chat_completions', 0)} requests and the order "
            f"API {orders.get('lookups', 0)} lookups: two and one per question."
        )
        (saved,) = demo.snaprun_json("stats")
        demo.report["http_saved_calls"] = saved["http_saved_calls"]
        demo.say(
            f"`snaprun stats`: the ledger answered {saved['http_saved_calls']} model "
            f"call(s) after the restore ({saved['http_saved_input_tokens']} input tokens "
            "not paid for again)."
        )
        demo.finish()


if __name__ == "__main__":
    main()
