"""SDK clients holding a part that cannot be rebuilt after a restore, held in the local
`client` at a snapshot (which part: the MODE environment variable):

  provider    an openai.OpenAI client whose api_key provider is a method of a vault
              object holding a live socket
  middleware  an anthropic.Anthropic client with a middleware closing over a socket
  azure       an openai.AzureOpenAI client
"""
import os
import socket

import anthropic
import openai

from snapstate import snapshot

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
    return openai.AzureOpenAI(api_key="az-x", api_version="2024-10-21",
                              azure_endpoint=URL)


def main():
    client = make(os.environ["MODE"])
    snapshot("holding-client")
    client.close()
    return "unreachable"
