"""A content calendar: the agent drafts next week's five posts (the LLM writes each, the
CMS saves it as a draft, a snapshot after each), then asks the stakeholder, Dana, to
approve the calendar, and waits for her, a week if need be, with no process running.
Once she approves, it schedules exactly the drafts she approved; it drafts nothing twice.

    python examples/content_calendar/demo.py        # the whole story, narrated

or by hand, with the providers running (`python examples/content_calendar/servers.py`
prints LLM_URL and CMS_URL: export them):

    snaprun run --job calendar examples/content_calendar/agent.py   # exit 3: waiting
    snaprun approvals                                                # what Dana is asked
    snaprun approve calendar a1 --by dana --note "go"
    snaprun worker --once                                            # schedules the posts

Scheduling requires the granted approval, and only the drafts in its scope can be
scheduled: a changed agent cannot widen what Dana approved.
"""

import json
import os
import urllib.request

from snapstate import ApprovalRejected, effect, request_approval, snapshot

WEEK = "2026-W50"
CALENDAR = [
    ("Mon", "why agents need durable state"),
    ("Tue", "what a snapshot of a call stack holds"),
    ("Wed", "effects that are sent at most once"),
    ("Thu", "waiting a week without a process"),
    ("Fri", "a checklist for agents in production"),
]


def http(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.load(reply)


@effect(kind="read")
def ask_llm(prompt):
    reply = http(
        "POST",
        f"{os.environ['LLM_URL']}/v1/chat/completions",
        {"model": "stub-1", "messages": [{"role": "user", "content": prompt}]},
    )
    return reply["choices"][0]["message"]["content"]


@effect(idempotency="key")  # the CMS honours an Idempotency-Key
def save_draft(slot, title, text, *, idempotency_key):
    draft = {"slot": slot, "title": title, "text": text}
    return http(
        "POST",
        f"{os.environ['CMS_URL']}/drafts",
        draft,
        headers={"Idempotency-Key": idempotency_key},
    )


@effect(
    idempotency="key",
    requires="publish-calendar",  # only under Dana's granted approval...
    within=lambda scope, draft, **_: draft in scope["drafts"],  # ...and for what she saw
)
def schedule(draft, slot, *, idempotency_key):
    return http(
        "POST",
        f"{os.environ['CMS_URL']}/schedule",
        {"draft": draft, "slot": slot},
        headers={"Idempotency-Key": idempotency_key},
    )


def main():
    drafts = []
    for slot, topic in CALENDAR:
        text = ask_llm(f"Write a short post for {slot} about: {topic}")
        saved = save_draft(slot, topic, text)
        drafts.append(saved["draft"])
        print(f"drafted {slot} ({saved['draft']}): {text}", flush=True)
        snapshot(f"drafted {slot}")
    try:
        request_approval(
            "publish-calendar",
            scope={"week": WEEK, "drafts": drafts},
            expires_in=10 * 86400,  # Dana has ten days
            approvers=["dana"],
        )
    except ApprovalRejected as no:
        print(f"calendar rejected: {no.note}", flush=True)
        return "rejected"
    print("calendar approved: scheduling", flush=True)
    for (slot, _), draft in zip(CALENDAR, drafts):
        schedule(draft, slot)
        print(f"scheduled {slot}: {draft}", flush=True)
    snapshot("scheduled")
    return f"{len(drafts)} posts scheduled for {WEEK}"


if __name__ == "__main__":
    print(main())
