"""langgraph: a StateGraph (chat model node + ToolNode, tools_condition) compiled with an
InMemorySaver checkpointer; ChatOpenAI(...).bind_tools([tool]); one graph.invoke per
turn on thread "t", the graph and its saved checkpoints kept across snapshots."""

import os

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from snapstate import snapshot


@tool
def distance(origin: str, destination: str) -> str:
    """The road distance between two cities."""
    return f"{origin} to {destination}: {len(origin + destination) * 10} km"


llm = ChatOpenAI(
    model="gpt-stub",
    base_url=os.environ["LLM_URL"] + "/v1",
    api_key=os.environ["OPENAI_API_KEY"],
    max_retries=0,
).bind_tools([distance])


def chatbot(state: MessagesState):
    return {"messages": [llm.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("chatbot", chatbot)
builder.add_node("tools", ToolNode([distance]))
builder.add_edge(START, "chatbot")
builder.add_conditional_edges("chatbot", tools_condition)
builder.add_edge("tools", "chatbot")
graph = builder.compile(checkpointer=InMemorySaver())


def main():
    config = {"configurable": {"thread_id": "t"}}
    for turn, question in enumerate(["Paris to Rome?", "and back?", "thanks"], 1):
        state = graph.invoke({"messages": [HumanMessage(question)]}, config=config)
        last = state["messages"][-1]
        print(turn, last.content, len(state["messages"]), [m.type for m in state["messages"][-3:]])
        snapshot(f"turn-{turn}")
    saved = graph.get_state(config)
    print("done", len(saved.values["messages"]), saved.next)
