"""Demo: a research job killed (kill -9) while the shop is still answering its
purchase order, resumed: one order, one email.

    python examples/crash_order/demo.py [--dir DIR] [--report FILE]

Starts the example's stub providers (servers.py) on 127.0.0.1, runs the agent with
`snaprun` in subprocesses on a store of its own, and prints every command it runs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _demo import Demo  # noqa: E402


def main():
    with Demo("crash_order", __doc__) as demo:
        demo.say(
            "The providers: a stub LLM, a shop and a mail service. This shop takes 20 s "
            "to confirm a new order, long enough to kill the agent while it waits."
        )
        demo.start_servers("--slow-orders", "20")

        demo.say(
            "Run the job. It researches three vendors (a snapshot after each), then "
            "orders from the cheapest. As soon as the shop has the order, and before "
            "its answer arrives, the job is killed with kill -9."
        )
        run = demo.start_snaprun("run", "--job", "po", demo.agent)
        demo.wait_for(
            "the shop to receive the order",
            lambda: demo.stats("SHOP_URL").get("orders_placed") == 1,
        )
        demo.kill9(run)
        demo.report["killed"] = run.returncode

        demo.say(
            "The shop placed the order; the agent never heard back. The ledger "
            "recorded the order as dispatched before it was sent, so its outcome is "
            "known to be unknown:"
        )
        demo.snaprun("ls")
        demo.snaprun("effects", "po")

        demo.say(
            "Resume it. It continues after its last snapshot: the research is not "
            "done again (the LLM's answers are in the ledger), and the order is sent "
            "again with the same idempotency key, which the shop answers with the "
            "order it already placed. Then it sends the email, once."
        )
        resumed = demo.snaprun("resume", "po")
        demo.report["resumed"] = resumed.returncode
        demo.report["resumed_stdout"] = resumed.stdout

        demo.say("The ledger: one order, one email, each recorded once.")
        demo.snaprun("effects", "po")
        demo.report["effects"] = demo.snaprun_json("effects", "po")

        shop, mail, llm = demo.stats("SHOP_URL"), demo.stats("MAIL_URL"), demo.stats("LLM_URL")
        demo.report.update(shop=shop, mail=mail, llm=llm)
        demo.say(
            f"What the providers counted: the shop placed {shop.get('orders_placed', 0)} "
            f"order(s) from {shop.get('order_requests', 0)} requests (the second one "
            f"carried the same key), the mail service sent {mail.get('emails_sent', 0)} "
            f"email(s), the LLM answered {llm.get('chat_completions', 0)} requests (three "
            "assessments and one email text: none asked twice)."
        )
        demo.finish()


if __name__ == "__main__":
    main()
