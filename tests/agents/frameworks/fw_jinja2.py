"""jinja2: an Environment(loader=DictLoader(...)) with a custom filter, the compiled
template fetched once (env.get_template, cached by the environment) and rendered each
turn into the prompt sent to the stub LLM (openai.OpenAI); the environment, the
template and the rendered prompts kept across snapshots."""

import os

import openai
from jinja2 import DictLoader, Environment, StrictUndefined

from snapstate import snapshot

TEMPLATES = {
    "base.j2": "[{{ role | upper }}] {% block body %}{% endblock %}",
    "prompt.j2": (
        '{% extends "base.j2" %}{% block body %}Summarise for {{ user | shout }}: '
        "{% for item in items %}{{ loop.index }}.{{ item }}{% if not loop.last %}, {% endif %}"
        "{% endfor %}{% endblock %}"
    ),
}


def shout(value):
    return f"{value}!"


def main():
    env = Environment(loader=DictLoader(TEMPLATES), undefined=StrictUndefined, autoescape=False)
    env.filters["shout"] = shout
    template = env.get_template("prompt.j2")
    llm = openai.OpenAI(
        base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"], max_retries=0
    )
    prompts = []
    for turn, items in enumerate([["tea", "milk"], ["bread"], ["eggs", "ham", "jam"]], 1):
        prompt = template.render(role="analyst", user=f"user{turn}", items=items)
        prompts.append(prompt)
        reply = llm.chat.completions.create(
            model="gpt-stub", messages=[{"role": "user", "content": prompt}]
        )
        print(turn, reply.choices[0].message.content, env.get_template("prompt.j2") is template)
        snapshot(f"turn-{turn}")
    print("done", len(prompts), template.render(role="x", user="y", items=["z"]))
