"""instructor: from_openai(openai.OpenAI(...)) with a pydantic response_model (a nested
model and a list of them; tool-call mode, the stub fills the forced function's schema),
the extracted objects kept in a list across snapshots."""

import os

import instructor
import openai
from pydantic import BaseModel

from snapstate import snapshot


class Address(BaseModel):
    street: str
    number: int


class Person(BaseModel):
    name: str
    age: int
    address: Address
    tags: list[str]


client = instructor.from_openai(
    openai.OpenAI(
        base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"], max_retries=0
    )
)


def main():
    people = []
    for turn, text in enumerate(["Ann, 31, 5 Elm St", "Bob, 40, 9 Oak Rd", "Cy, 22, 1 Main St"], 1):
        person = client.chat.completions.create(
            model="gpt-stub",
            response_model=Person,
            messages=[{"role": "user", "content": f"Extract: {text}"}],
            max_retries=1,
        )
        people.append(person)
        print(turn, person.model_dump_json(), len(people))
        snapshot(f"turn-{turn}")
    print("done", sum(p.age for p in people), [p.address.number for p in people])
