"""llama-index: a SimpleChatEngine on llama-index-llms-openai's OpenAI (model
gpt-4o-mini, which llama-index knows the context size of) with a ChatMemoryBuffer;
chat turns whose memory is kept across snapshots."""

import os

from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.llms.openai import OpenAI

from snapstate import snapshot

llm = OpenAI(
    model="gpt-4o-mini",
    api_base=os.environ["LLM_URL"] + "/v1",
    api_key=os.environ["OPENAI_API_KEY"],
    max_retries=0,
    temperature=0.0,
)


def main():
    memory = ChatMemoryBuffer.from_defaults(token_limit=2000)
    engine = SimpleChatEngine.from_defaults(
        llm=llm, memory=memory, system_prompt="You are a terse librarian."
    )
    for turn, message in enumerate(["recommend a book", "something shorter", "thanks"], 1):
        response = engine.chat(message)
        history = engine.chat_history
        print(turn, response.response, len(history), [m.role.value for m in history[-2:]])
        snapshot(f"turn-{turn}")
    print("done", [m.content for m in memory.get_all() if m.role.value == "user"])
