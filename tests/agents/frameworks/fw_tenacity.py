"""tenacity: a Retrying controller (stop after 4 attempts, fixed 10 ms wait, retry on
ValueError) whose attempts each send a request to the stub LLM; a counter kept across
snapshots makes the first attempts of a turn fail deterministically (turn 1: one
failure, turn 2: two, turn 3: none). After each turn the controller's statistics
(attempt_number, idle_for) are printed; the controller lives across snapshots."""

import os

import openai
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from snapstate import snapshot


class Flaky:
    """Calls the LLM; raises after the call while failures remain."""

    def __init__(self, llm):
        self.llm = llm
        self.failures = 0
        self.calls = 0

    def ask(self, text):
        self.calls += 1
        reply = self.llm.chat.completions.create(
            model="gpt-stub", messages=[{"role": "user", "content": f"{text} (call {self.calls})"}]
        )
        if self.failures > 0:
            self.failures -= 1
            raise ValueError(f"flaky: {reply.choices[0].message.content}")
        return reply.choices[0].message.content


def main():
    llm = openai.OpenAI(
        base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"], max_retries=0
    )
    flaky = Flaky(llm)
    retrying = Retrying(
        stop=stop_after_attempt(4),
        wait=wait_fixed(0.01),
        retry=retry_if_exception_type(ValueError),
        reraise=True,
    )
    for turn, (text, failures) in enumerate([("alpha", 1), ("beta", 2), ("gamma", 0)], 1):
        flaky.failures = failures
        answer = retrying(flaky.ask, text)
        stats = retrying.statistics
        print(turn, answer, stats["attempt_number"], round(stats["idle_for"], 3), flaky.calls)
        snapshot(f"turn-{turn}")
    print("done", flaky.calls, retrying.statistics["attempt_number"])
