"""SDK clients holding a part that cannot be rebuilt after a restore, each held in the
local `client` at a snapshot; the agent catches each refusal and prints it:

  provider    an openai.OpenAI client whose api_key provider is a method of a vault
              object holding a live socket
  middleware  an anthropic.Anthropic client with a middleware closing over a socket
  azure       an openai.AzureOpenAI client
"""

import os
import socket

import anthropic
import openai

from snapstate import SnapshotError, snapshot

URL = os.environ["LLM_URL"]


class Vault:
    def __init__(self):
        self.conn = socket.socket()

    def key(self):
        return "sk-from-vault"


def make(mode):
    if mode == "provider":
        return openai.OpenAI(api_key=Vault().key, base_url=URL + "/v1")
    if mode == "middleware":
        audit = socket.socket()

        def audited(request, call_next):
            audit.fileno()
            return call_next(request)

        return anthropic.Anthropic(api_key="ak-x", base_url=URL, middleware=[audited])
    return openai.AzureOpenAI(api_key="az-x", api_version="2024-10-21", azure_endpoint=URL)


def main():
    refused = 0
    for mode in ("provider", "middleware", "azure"):
        client = make(mode)
        try:
            snapshot(mode)
        except SnapshotError as exc:
            refused += 1
            print(f"{mode}: {exc}")
        release(client)
    return refused


def release(client):
    """Close the client and the socket it holds (reached through it: no other local
    of the agent may hold the socket, or the refusal would name that local)."""
    client.close()
    if getattr(client, "_api_key_provider", None) is not None:
        client._api_key_provider.__self__.conn.close()
    for middleware in getattr(client, "_middleware", ()):
        middleware.__closure__[0].cell_contents.close()
