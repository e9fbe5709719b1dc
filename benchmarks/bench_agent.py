"""Agent workloads for benchmarks/bench_freeze.py; each takes exactly one snapshot().

    chat_main       (a) a 200-message (~100 KB) chat history held in a 6-frame stack
    bulk_main       (b) ~10 MB of state (10,000 documents of ~1 KB text)
    recursion_main  (c) a 150-frame recursion, one small dict local per frame

Each entry function returns {"digest": ..., "resumed": ...}: a digest of the state
after the work that follows the snapshot, and snapshot()'s `resumed` flag, so the
benchmark can check that a restored run ends exactly like the uninterrupted one.
The data is generated from fixed seeds. Run by the benchmark only (as a snapstate
job); under plain Python snapshot() does nothing.
"""

import random
import zlib

from snapstate import snapshot

WORDS = (
    "agent tool call result plan observe reflect memory vector search file patch test "
    "deploy error retry token context window summary answer question user assistant "
    "latency budget cache index query schema"
).split()


def _digest(value) -> int:
    return zlib.crc32(repr(value).encode())


# --------------------------------------------------------------------- (a) chat history
def make_history(n=200, seed=1):
    """n chat messages of ~500 bytes each (pickled: ~100 KB for 200)."""
    rnd = random.Random(seed)
    history = []
    for i in range(n):
        content = " ".join(rnd.choices(WORDS, k=66))
        history.append(
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": content,
                "ts": 1_700_000_000.0 + 3.5 * i,
                "tokens": len(content) // 4,
                "meta": {"id": f"msg-{i:05d}", "tags": [f"t{i % 7}"], "tool": None},
            }
        )
    return history


class Conversation:
    def __init__(self, history):
        self.history = history
        self.notes = {"topic": "benchmarks", "turns": 0}

    def run(self, question):  # frame 2
        reply = self.turn(question)
        self.history.append(
            {
                "role": "assistant",
                "content": reply,
                "ts": 0.0,
                "tokens": len(reply) // 4,
                "meta": {},
            }
        )
        return reply

    def turn(self, question):  # frame 3
        recent = self.history[-8:]
        self.notes["turns"] += 1
        return plan(self, question, recent)


def plan(conv, question, recent):  # frame 4
    steps = [f"look up {w}" for w in question.split()[:3]]
    return call_tool(conv, "search", {"query": question, "k": 5, "steps": steps})


def call_tool(conv, name, args):  # frame 5
    context = [m["content"][:80] for m in conv.history[-3:]]
    return checkpoint(conv, name, args, context)


def checkpoint(conv, name, args, context):  # frame 6
    info = snapshot("chat")
    conv.notes["resumed"] = info.resumed
    return f"{name}({args['query']}) -> {len(context)} snippets"


def chat_main():  # frame 1
    conv = Conversation(make_history())
    reply = conv.run("which plan keeps the context window small")
    state = {
        "history": conv.history,
        "notes": {k: v for k, v in conv.notes.items() if k != "resumed"},
    }
    return {"digest": _digest((state, reply)), "resumed": conv.notes["resumed"]}


# --------------------------------------------------------------------- (b) 10 MB state
def make_corpus(n_docs=10_000, doc_chars=940, seed=2):
    """n_docs documents of doc_chars of word-like text: ~10 MB pickled."""
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rnd.choices(letters, k=rnd.randint(2, 10))) for _ in range(5000)]
    text = " ".join(rnd.choices(vocab, k=n_docs * doc_chars // 6 + 1000))
    return {
        f"doc-{i:05d}": {
            "url": f"https://example.org/{i}",
            "text": text[i * doc_chars : (i + 1) * doc_chars],
            "score": rnd.random(),
        }
        for i in range(n_docs)
    }


def ingest(corpus):
    index_size = len(corpus)
    info = snapshot("bulk")
    corpus["doc-00000"]["score"] = 1.0
    return index_size, info.resumed


def bulk_main():
    corpus = make_corpus()
    size, resumed = ingest(corpus)
    return {"digest": _digest((size, sorted(corpus.items()))), "resumed": resumed}


# --------------------------------------------------------------------- (c) recursion
def descend(n, trail):
    step = {"depth": n, "note": f"level {n}"}
    if n == 0:
        trail.append(snapshot("bottom").resumed)
        return 0
    below = descend(n - 1, trail)
    return below + step["depth"]


def recursion_main(frames=150):
    trail = []
    total = descend(frames - 2, trail)  # descend(frames-2 .. 0) + this frame = `frames`
    return {"digest": _digest((total, trail[:-1])), "resumed": trail[-1]}
