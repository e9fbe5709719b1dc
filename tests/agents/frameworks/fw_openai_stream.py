"""openai streaming: chat.completions.create(..., stream=True) read to its end in each
turn (text deltas joined), the exhausted Stream object kept in a local across the
snapshot (and the previous turn's chunks list too); the texts are printed."""

import os

import openai

from snapstate import snapshot


def main():
    client = openai.OpenAI(
        base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"], max_retries=0
    )
    texts = []
    stream = None
    for turn, text in enumerate(["stream one two three", "a second reply", "last words"], 1):
        stream = client.chat.completions.create(
            model="gpt-stub",
            messages=[{"role": "user", "content": text}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        deltas = [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ]
        texts.append("".join(deltas))
        usage = chunks[-1].usage
        print(turn, texts[-1], len(chunks), chunks[-2].choices[0].finish_reason, usage.total_tokens)
        snapshot(f"turn-{turn}")
    print("done", texts, type(stream).__name__)
