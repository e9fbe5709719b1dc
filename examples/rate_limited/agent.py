"""A research agent on a rate-limited search API: it searches six questions and has the
LLM take notes on each (a snapshot after each). The search API's free tier answers
429 Too Many Requests with `Retry-After: 3600` after three searches; snapstate turns
that into a wait: the refused search did not happen, the job hibernates (exit 3, no
process) and `snaprun worker` resumes it once the hour is over, sending the same
search again.

    python examples/rate_limited/demo.py        # the whole story, narrated

or by hand, with the providers running (`python examples/rate_limited/servers.py`
prints LLM_URL and SEARCH_URL: export them):

    snaprun run --job research examples/rate_limited/agent.py   # exit 3: rate limited
    snaprun ls                                                   # waits until when
    snaprun worker                                               # resumes it when due

Only raised errors are waits: the search effect lets urllib raise its HTTPError for
the 429 (it reads Retry-After from it).
"""

import json
import os
import urllib.parse
import urllib.request

from snapstate import effect, snapshot

QUESTIONS = [
    "how do agents survive a crash",
    "what is an effect ledger",
    "idempotency keys in payment APIs",
    "rate limits and Retry-After",
    "hibernating long waits",
    "testing agents with kill -9",
]


def http(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as reply:  # a 429 raises HTTPError
        return json.load(reply)


@effect(kind="read")
def search(question):
    query = urllib.parse.urlencode({"q": question})
    return http("GET", f"{os.environ['SEARCH_URL']}/search?{query}")


@effect(kind="read")
def ask_llm(prompt):
    reply = http(
        "POST",
        f"{os.environ['LLM_URL']}/v1/chat/completions",
        {"model": "stub-1", "messages": [{"role": "user", "content": prompt}]},
    )
    return reply["choices"][0]["message"]["content"]


def main():
    notes = []
    for number, question in enumerate(QUESTIONS, 1):
        found = search(question)
        note = ask_llm(f"Take notes on {len(found['results'])} sources for: {question}")
        notes.append(note)
        print(f"{number}. {question}: {note}", flush=True)
        snapshot(f"searched {number}")
    print(f"report: {len(notes)} questions researched", flush=True)
    return len(notes)


if __name__ == "__main__":
    print(main())
